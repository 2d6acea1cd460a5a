"""The control loop: watch the cluster, schedule what is pending, bind.

:mod:`~ksched.loop.run` wires informers (:mod:`~ksched.loop.mirror.informer`) into the
cluster state (:mod:`~ksched.loop.mirror.state`) and the queue
(:mod:`~ksched.loop.scheduling.queue`); one cycle (:mod:`~ksched.loop.scheduling.cycle`) hands a
batch to :class:`ksched.engine.Engine` and the binder
(:mod:`~ksched.loop.scheduling.binder`) posts the results. In shadow mode
(:mod:`~ksched.loop.scheduling.shadow`) nothing is bound: each pod another scheduler binds
is compared with where the engine would have placed it. Only :mod:`~ksched.loop.client`
and :mod:`~ksched.loop.leader` import the Kubernetes client library.

One sub-package per concern, each importing only those below it (``.importlinter``):

- :mod:`~ksched.loop.scheduling`: the cycle, the queue, the binder and its writers, the
  hand-off, shadow mode and the admission webhook;
- :mod:`~ksched.loop.rebalancing`: the rebalancer, its hot nodes and its reservations;
- :mod:`~ksched.loop.mirror`: the informers and the cluster state they keep;
- :mod:`~ksched.loop.metrics`: the metric sources, the recent pods' load, the load model.

At the top, the plumbing they all use: :mod:`~ksched.loop.run`, the API connection
(:mod:`~ksched.loop.client`, :mod:`~ksched.loop.protobuf`), the Events ksched writes
(:mod:`~ksched.loop.events`), :mod:`~ksched.loop.leader`, :mod:`~ksched.loop.server` (and
who may read it, :mod:`~ksched.loop.serving`) and :mod:`~ksched.loop.telemetry`.
"""
