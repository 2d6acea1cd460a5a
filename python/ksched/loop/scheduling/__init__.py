"""Scheduling: the cycle that places pending pods, and what it hands its writes to.

:mod:`~ksched.loop.scheduling.cycle` pops a batch from the queue
(:mod:`~ksched.loop.scheduling.queue`), calls the engine and hands each placement to the binder
(:mod:`~ksched.loop.scheduling.binder`, with :mod:`~ksched.loop.scheduling.volume_binder` and
preemption's :mod:`~ksched.loop.scheduling.evictor`), or a pod it failed too long to
:mod:`~ksched.loop.scheduling.handoff`. Beside it: shadow mode
(:mod:`~ksched.loop.scheduling.shadow`), which compares instead of placing, and the admission
webhook (:mod:`~ksched.loop.scheduling.webhook`) that routes pods to ksched.
"""
