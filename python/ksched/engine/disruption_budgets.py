"""PodDisruptionBudgets, as preemption reads them.

Preemption prefers victims whose eviction violates no budget (upstream's
``filterPodsWithPDBViolation``): a budget covers the pods its selector
matches in its namespace, less those already being disrupted.
"""

from __future__ import annotations

from dataclasses import dataclass

from ksched.engine.selectors import LabelSelector, label_selector, selector_matches
from ksched.errors import MalformedObjectError
from ksched.objects import Obj, meta


@dataclass(frozen=True)
class DisruptionBudget:
    namespace: str
    selector: LabelSelector | None
    disruptions_allowed: int
    disrupted: frozenset[str] = frozenset()

    def covers(self, namespace: str, name: str, labels: dict[str, str]) -> bool:
        """Upstream filterPodsWithPDBViolation: same namespace, a non-empty selector that
        matches, and not already being disrupted (a pod without labels matches none)."""
        return (
            bool(labels)
            and namespace == self.namespace
            and bool(self.selector)
            and name not in self.disrupted
            and selector_matches(self.selector, labels)
        )


def disruption_budget(obj: Obj) -> DisruptionBudget:
    m = meta(obj)
    key = f"pdb {m.get('namespace')}/{m.get('name')}"
    s = obj.get("spec") or {}
    status = obj.get("status") or {}
    allowed = status.get("disruptionsAllowed", 0)
    if not isinstance(allowed, int):
        raise MalformedObjectError(key, "status.disruptionsAllowed", f"{allowed!r} is not an integer")
    return DisruptionBudget(
        namespace=str(m.get("namespace") or "default"),
        selector=label_selector(key, "spec.selector", s.get("selector")),
        disruptions_allowed=allowed,
        disrupted=frozenset(status.get("disruptedPods") or {}),
    )
