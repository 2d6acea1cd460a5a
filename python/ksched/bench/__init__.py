"""The harnesses behind ``ksched bench``, and the one invariant checker they and the tests share.

:mod:`~ksched.bench.engine` measures the engine in process on a synthetic cluster;
:mod:`~ksched.bench.sidebyside` runs a null binder, kube-scheduler and ksched in turn on a
local control plane; :mod:`~ksched.bench.chaos` soaks two leader-elected replicas under
faults; :mod:`~ksched.bench.fuzz` feeds odd pod specs to the API server, the loop,
``simulate`` and the webhook; :mod:`~ksched.bench.quality` measures hot nodes under the
load simulation, kube-scheduler beside ksched; :mod:`~ksched.bench.demo` is ``ksched demo``,
the main job. :mod:`~ksched.bench.invariants` says what must hold in a cluster whoever
scheduled it, and :mod:`~ksched.bench.pods` creates, clears and accounts for their pods. Harnesses print figures and count defects; they never
parse arguments (that is :mod:`ksched.commands`) and never assert timings.
"""
