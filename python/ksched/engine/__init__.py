"""The scheduling algorithm: Kubernetes objects in, placements out.

Parses pods (:mod:`~ksched.engine.pods`, :mod:`~ksched.engine.quantity`,
:mod:`~ksched.engine.selectors`, :mod:`~ksched.engine.pod_level`; once per
shape, :mod:`~ksched.engine.requirements`) with their PodGroups and disruption
budgets (:mod:`~ksched.engine.gangs`, :mod:`~ksched.engine.disruption_budgets`),
keeps the node and pod tables (:mod:`~ksched.engine.snapshot`,
:mod:`~ksched.engine.podtable`), the storage objects (:mod:`~ksched.engine.storage`)
and default spreading's selectors (:mod:`~ksched.engine.spread_selectors`),
compiles a batch into the Rust engine's inputs (:mod:`~ksched.engine.inputs`, with
its claims from :mod:`~ksched.engine.volumes`), calls it and explains its verdicts
(:mod:`~ksched.engine.scheduler`, :mod:`~ksched.engine.placements`,
:mod:`~ksched.engine.messages`), and holds
the pure-Python oracle it is checked against (:mod:`~ksched.engine.reference`).
A cluster file is read (:mod:`~ksched.engine.cluster_file`) and scheduled offline
(:mod:`~ksched.engine.simulation`) here too, for ``simulate`` and ``explain``.
It never talks to the API server: the loop and the commands feed it objects.
"""

from ksched.engine.placements import BatchResult, Explanation, NodeExplanation, Placement
from ksched.engine.scheduler import Engine, GangStatus, commit_placements

__all__ = [
    "BatchResult",
    "Engine",
    "Explanation",
    "GangStatus",
    "NodeExplanation",
    "Placement",
    "commit_placements",
]
