"""``ksched bench --fuzz``: odd input of five kinds (``--fuzz-kinds``, default all, sharing
``--specs``), each seeded and counted by kind in the report.

* ``pods``: specs mutated from a few valid pods (odd quantities, huge and negative numbers,
  unknown operators and effects, invalid labels, empty and duplicate names, large and deep
  affinity trees, unicode, oversized lists, missing fields, wrong types), created through the
  local control plane's API server in a namespace whose pods go through ksched's webhook
  (``failurePolicy: Fail``) with ``ksched run`` scheduling on KWOK nodes: each accepted pod
  must end bound, pending with a ``FailedScheduling`` event, another scheduler's, gated or a
  preemption victim; ksched must stay healthy and log no traceback. Each spec, and the
  accepted pods in batches, also go through ``ksched simulate`` in process (the CLI's own
  ``main``): exit 0, 1 or 2, one ``error:`` line for 2, never an exception, every unplaced pod
  a message. Malformed AdmissionReviews go straight to the webhook: each answered, never 5xx.
* ``nodes`` (:mod:`~.nodes`): odd Node objects among good ones through ``simulate`` (no fewer
  pods placed than without the odd node), and a batch of them created as KWOK nodes while
  ksched runs (it stays healthy and binds pods only where they fit).
* ``metrics`` (:mod:`~.metrics`): crafted Prometheus answers from a server in this process,
  read by PrometheusSource and the MetricStore and scheduled with; odd ``--metrics`` files.
* ``configs`` (:mod:`~.configs`): mutated configuration files through ``simulate --config``
  and ``load_config``; an accepted one must build what ``ksched run`` builds from it.
* ``connections`` (:mod:`~.floods`, with the tools of :mod:`~.connections`): idle, slow,
  mid-handshake and half-sent clients, and floods past MAX_CONNECTIONS, at the HTTP server and
  the webhook; a well-formed request must be answered in 1 s meanwhile (p99 reported), and
  ``serving`` must return to 0 after.

Every failed check is a defect; the command prints the counts and exits 1 if there is any.

Modules: :mod:`~.specs` and :mod:`~.mutations` (the pods), :mod:`~.live`, :mod:`~.simulate`
and :mod:`~.webhook` (the pods' phases), the other kinds' modules above, :mod:`~.report`
(what was found) and :mod:`~.run` (:func:`~.run.run_fuzz`, the entry).
"""
