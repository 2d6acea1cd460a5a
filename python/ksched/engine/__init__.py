"""The scheduling algorithm: Kubernetes objects in, placements out.

Parses pods (:mod:`~ksched.engine.pods`, :mod:`~ksched.engine.quantity`,
:mod:`~ksched.engine.selectors`, :mod:`~ksched.engine.pod_level`; once per
shape, :mod:`~ksched.engine.requirements`) with their PodGroups and disruption
budgets (:mod:`~ksched.engine.gangs`, :mod:`~ksched.engine.disruption_budgets`),
keeps the node and pod tables (:mod:`~ksched.engine.snapshot`,
:mod:`~ksched.engine.podtable`), the storage objects (:mod:`~ksched.engine.storage`)
and default spreading's selectors (:mod:`~ksched.engine.spread_selectors`),
compiles a batch into the Rust engine's inputs (:mod:`~ksched.engine.batch`,
:mod:`~ksched.engine.inputs`, with its claims from :mod:`~ksched.engine.volumes`),
calls it (:mod:`~ksched.engine.scheduler`) and again where gangs fall short or
pods saturate (:mod:`~ksched.engine.gang_placement`, :mod:`~ksched.engine.saturation`),
explains its verdicts (:mod:`~ksched.engine.verdicts`,
:mod:`~ksched.engine.placements`, :mod:`~ksched.engine.messages`), and holds
the pure-Python oracle it is checked against (:mod:`~ksched.engine.reference`).
A cluster file is read (:mod:`~ksched.engine.cluster_file`) and scheduled offline
(:mod:`~ksched.engine.simulation`) here too, for ``simulate`` and ``explain``.
It never talks to the API server: the loop and the commands feed it objects.
"""

from ksched.engine.gangs import GangStatus
from ksched.engine.placements import BatchResult, Explanation, NodeExplanation, Placement, commit_placements
from ksched.engine.scheduler import Engine

__all__ = [
    "BatchResult",
    "Engine",
    "Explanation",
    "GangStatus",
    "NodeExplanation",
    "Placement",
    "commit_placements",
]
