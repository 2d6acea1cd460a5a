"""``ksched bench --fuzz``: tens of thousands of odd pod specs at the API server, the loop,
``simulate`` and the webhook.

Specs are mutated, from a seed, from a few valid pods: odd quantities, huge and negative
numbers, unknown operators and effects, invalid labels, empty and duplicate names, large
and deep affinity trees, unicode, oversized lists, missing fields, wrong types. Each spec is

* created through the local control plane's API server, in a namespace whose pods go
  through ksched's webhook (``failurePolicy: Fail``, so a webhook error shows up as a
  refused pod), with ``ksched run`` scheduling on KWOK nodes; each accepted pod must end
  bound, or pending with a ``FailedScheduling`` event, or be another scheduler's, gated,
  or a preemption victim; ksched must stay alive and healthy and log no traceback;
* fed alone to ``ksched simulate`` in process (the CLI's own ``main``), and the accepted
  pods, as the API server returned them, in batches: the exit code must be 0, 1 or 2,
  exit 2 with one ``error:`` line, never an exception, and every unplaced pod a message.

Then malformed AdmissionReview requests are sent straight to the webhook (bad and truncated
JSON, wrong kinds, missing fields, non-object pods, huge bodies, wrong content types and
methods): each must be answered, never with a 5xx, and the webhook must keep answering.

Every failed check is a defect; the command prints the counts and exits 1 if there is any.

Modules: :mod:`~.specs` (the valid pods), :mod:`~.mutations` (how they are made odd),
:mod:`~.live`, :mod:`~.simulate` and :mod:`~.webhook` (the three phases), :mod:`~.report`
(what was found) and :mod:`~.run` (:func:`~.run.run_fuzz`, the entry).
"""
