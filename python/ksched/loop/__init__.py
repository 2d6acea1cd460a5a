"""The control loop: watch the cluster, schedule what is pending, bind.

:mod:`~ksched.loop.run` wires informers (:mod:`~ksched.loop.informer`) into the
cluster state (:mod:`~ksched.loop.state`) and the queue
(:mod:`~ksched.loop.queue`); one cycle (:mod:`~ksched.loop.cycle`) hands a
batch to :class:`ksched.engine.Engine` and the binder
(:mod:`~ksched.loop.binder`) posts the results. In shadow mode
(:mod:`~ksched.loop.shadow`) nothing is bound: each pod another scheduler binds
is compared with where the engine would have placed it. Only :mod:`~ksched.loop.client`
and :mod:`~ksched.loop.leader` import the Kubernetes client library.
"""
