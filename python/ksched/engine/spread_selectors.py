"""Whose selectors make a pod's default topology spreading (upstream ``DefaultSelector``).

Owns :class:`SpreadSelectors`: the Services, ReplicationControllers, ReplicaSets and
StatefulSets that the informers or a cluster file give (:data:`SELECTOR_OWNERS` lists
them), and, for a pod without spreading constraints of its own, the profile's default
constraints with the selector those objects build, remembered per workload.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ksched.engine.pod_level import SpreadConstraint
from ksched.engine.selectors import LabelSelector, Requirement, label_selector
from ksched.errors import MalformedObjectError
from ksched.objects import meta

_RC = ("v1", "ReplicationController")
# Whose selectors make a pod's default topology spreading (upstream DefaultSelector):
# (list path, apiVersion, kind, informer name).
SELECTOR_OWNERS = (
    ("/api/v1/services", "v1", "Service", "services"),
    ("/api/v1/replicationcontrollers", *_RC, "replicationcontrollers"),
    ("/apis/apps/v1/replicasets", "apps/v1", "ReplicaSet", "replicasets"),
    ("/apis/apps/v1/statefulsets", "apps/v1", "StatefulSet", "statefulsets"),
)
SELECTOR_OWNER_KINDS = {(api_version, kind) for _, api_version, kind, _ in SELECTOR_OWNERS}
# The workload controllers among them, found through a pod's controller reference.
_CONTROLLER_KINDS = SELECTOR_OWNER_KINDS - {("v1", "Service")}


# Workloads whose default spreading constraints SpreadSelectors remembers; emptied when full.
DEFAULTS_MEMO_SIZE = 4096


def _defaults_key(m: Any, refs: Any, constraints: Sequence[tuple[str, int, bool]]) -> tuple[Any, ...] | None:
    """What a pod's default constraints follow from; None when some of it is not hashable
    (not decoded JSON: ``selector_for`` says why, or copes)."""
    try:
        owner = next((o for o in refs if o.get("controller")), None) if refs else None
        key = (
            m.get("namespace"),
            tuple((m.get("labels") or {}).items()),
            None if owner is None else (owner.get("apiVersion"), owner.get("kind"), owner.get("name")),
            tuple(constraints),
        )
        hash(key)
    except (AttributeError, TypeError):
        return None
    return key


class SpreadSelectors:
    """Services, ReplicationControllers, ReplicaSets and StatefulSets by their
    selectors: what upstream's ``DefaultSelector`` builds a pod's default
    spreading selector from (the profile's default constraints apply to a pod
    without constraints of its own only when that selector is not empty)."""

    def __init__(self) -> None:
        # namespace -> service name -> selector (None: selects nothing).
        self.services: dict[str, dict[str, dict[str, str] | None]] = {}
        # (apiVersion, kind, namespace, name) -> selector.
        self.controllers: dict[tuple[str, str, str, str], Any] = {}
        # Default constraints by all they follow from (namespace, labels, controller reference,
        # the profile's constraints): the pods of one workload share them. Emptied on every update.
        self._defaults: dict[tuple[Any, ...], tuple[SpreadConstraint, ...]] = {}

    def update(self, api_version: str, kind: str, obj: Any, deleted: bool = False) -> None:
        self._defaults.clear()
        m = meta(obj)
        ns, name = str(m.get("namespace") or "default"), str(m.get("name", ""))
        selector = (obj.get("spec") or {}).get("selector")
        if kind == "Service":
            if deleted:
                self.services.get(ns, {}).pop(name, None)
            else:
                self.services.setdefault(ns, {})[name] = (
                    {str(k): str(v) for k, v in selector.items()} if isinstance(selector, dict) else None
                )
        elif deleted:
            self.controllers.pop((api_version, kind, ns, name), None)
        else:
            self.controllers[(api_version, kind, ns, name)] = selector

    def selects_nothing(self) -> bool:
        """No Service or controller is known: every pod's default spreading selector is empty."""
        return not self.controllers and not any(self.services.values())

    def selector_for(self, pod: Any) -> LabelSelector | None:
        """The default spreading selector of ``pod``, None when it is empty."""
        m = meta(pod)
        ns = str(m.get("namespace") or "default")
        labels = m.get("labels") or {}
        label_set: dict[str, str] = {}
        for selector in self.services.get(ns, {}).values():
            if selector is not None and all(labels.get(k) == v for k, v in selector.items()):
                label_set.update(selector)
        extra: tuple[Requirement, ...] = ()
        refs = m.get("ownerReferences")
        owner = next((o for o in refs if o.get("controller")), None) if refs else None
        if owner is not None:
            gvk = (str(owner.get("apiVersion")), str(owner.get("kind")))
            key = (*gvk, ns, str(owner.get("name")))
            if gvk in _CONTROLLER_KINDS and key in self.controllers:
                selector = self.controllers[key]
                if gvk == _RC:
                    if isinstance(selector, dict):
                        label_set.update({str(k): str(v) for k, v in selector.items()})
                else:
                    try:
                        extra = label_selector(f"{ns}/{owner.get('name')}", "spec.selector", selector) or ()
                    except MalformedObjectError:
                        extra = ()
        reqs = tuple(Requirement(k, "In", (v,)) for k, v in sorted(label_set.items())) + extra
        return reqs or None

    def defaults(
        self, pod: Any, constraints: Sequence[tuple[str, int, bool]]
    ) -> tuple[SpreadConstraint, ...]:
        """The profile's default constraints (topology key, maxSkew, DoNotSchedule) for a pod
        without constraints of its own, with its default selector; () when that is empty."""
        if not constraints:
            return ()
        m = meta(pod)
        refs = m.get("ownerReferences")
        if not refs and not self.services.get(str(m.get("namespace") or "default")):
            return ()  # no Service in its namespace and no controller: an empty selector
        memo_key = _defaults_key(m, refs, constraints)
        found = self._defaults.get(memo_key) if memo_key is not None else None
        if found is not None:
            return found
        selector = self.selector_for(pod)
        out = (
            ()
            if selector is None
            else tuple(SpreadConstraint(skew, key, hard, selector) for key, skew, hard in constraints)
        )
        if memo_key is not None:
            if len(self._defaults) >= DEFAULTS_MEMO_SIZE:
                self._defaults.clear()
            self._defaults[memo_key] = out
        return out
