"""The cluster mirror: what the watches keep of the cluster, and the state the engine reads.

:mod:`~ksched.loop.mirror.informer` lists and watches one kind of object into a store of
projections (:mod:`~ksched.loop.mirror.slim`: only the fields ksched reads);
:mod:`~ksched.loop.mirror.state` applies the watch events to the node table and per-node usage
that each cycle snapshots. Reads the API server through :mod:`ksched.loop.client` only; never
schedules, moves or measures anything itself (the recent pods' load estimate it keeps is
:mod:`ksched.loop.metrics`').
"""
