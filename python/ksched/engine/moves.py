"""What the rebalancer plans with and returns: hot nodes, moves, skipped candidates and their
reasons, the plan, the look's budget; and the pods a move is about, as the planner reads them
(the replacement it proves and reserves, a pod's QoS class, its controller).

Pure data and functions of one pod; the planning itself is :mod:`ksched.engine.rebalance`'s.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ksched.config.steering import MARK_EFFECT
from ksched.engine.quantity import parse_quantity
from ksched.errors import QuantityError
from ksched.objects import Obj, meta, spec

# Controllers that create a new pod when one of theirs is evicted (a DaemonSet's pod comes
# back on the same node, so moving it moves nothing).
RECREATING_KINDS = ("ReplicaSet", "StatefulSet", "ReplicationController", "Job")
# Of those, the ones whose re-created pod starts its work over: a Job's evicted pod loses what
# it had done and counts against the Job's backoffLimit, so it moves only when opted in.
RESTARTING_KINDS = ("Job",)
# Volume sources whose data lives on the node and is lost when the pod leaves it (upstream
# descheduler's IsPodWithLocalStorage: hostPath or emptyDir).
LOCAL_VOLUME_SOURCES = ("emptyDir", "hostPath")
# Pods the cluster cannot run without (upstream's system priority classes and the priority
# they resolve to: anything at or above it is reserved for the system).
SYSTEM_CRITICAL_CLASSES = ("system-cluster-critical", "system-node-critical")
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
# The labels a controller puts on the pods of one template (Deployment's ReplicaSet, and
# StatefulSet/DaemonSet revisions): a replacement of the same template carries the same one.
TEMPLATE_HASH_LABELS = ("pod-template-hash", "controller-revision-hash")
# Added to the victim's name for its replacement as the engine sees it (the controller
# names the real one).
REPLACEMENT_SUFFIX = "-replacement"
# On a replacement: what the proof moved with it (metric -> usage in engine units), so a
# later look holds that load on its target, not the (often smaller) estimate of its requests.
MOVED_USAGE_ANNOTATION = "rebalance.ksched.io/moved-usage"
# QoS classes, in the order candidates are taken (BestEffort first).
QOS_ORDER = {"BestEffort": 0, "Burstable": 1, "Guaranteed": 2}

TERMINATING = "terminating"
MIRROR = "static (mirror) pod"
DAEMONSET = "DaemonSet pod"
NO_CONTROLLER = "no controller re-creates it"
SYSTEM_CRITICAL = "system-critical priority"
LOCAL_STORAGE = "local storage (emptyDir or hostPath)"
JOB_POD = "a Job's pod (rebalance.moveJobPods is off)"
COOLING = "workload cooling down"
BUDGET_SPENT = "eviction budget of this look spent (maxPerCycle, evictionsPerMinute)"


def other_scheduler(profile: str, name: str) -> str:
    return f"not scheduled by {profile} (schedulerName {name})"


def source_not_marked(scheduler: str, why: str) -> str:
    """Why another scheduler's pod stays: its replacement is placed by ``scheduler``, which
    the engine's proof cannot keep off the source unless the steering mark scores it down."""
    return f"source not marked: {scheduler} could place the replacement back ({why})"


def placed_back(scheduler: str, node: str) -> str:
    return f"replacement placed back: {scheduler} bound a moved pod's replacement on {node} again (within replacementSettle)"


def too_young(min_age_s: float) -> str:
    return f"younger than minPodAge {go_duration(min_age_s)}"


def limit_reached(key: str) -> str:
    return f"limit {key} reached"


@dataclass(frozen=True)
class HotNode:
    node: str
    metric: str
    value: float
    high: float
    # Consecutive fresh samples over ``high``.
    samples: int

    def as_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "metric": self.metric,
            "value": self.value,
            "high": self.high,
            "samples": self.samples,
        }


@dataclass(frozen=True)
class Move:
    """Evict ``pod`` from ``source``; the engine placed its replacement on ``target``."""

    # ``namespace/name`` of the pod to evict.
    pod: str
    uid: str
    namespace: str
    # ``<Kind>/<namespace>/<name>`` of the pod's controller.
    workload: str
    owner_uid: str
    # The pod's pod-template-hash or controller-revision-hash label.
    template_hash: str | None
    source: str
    target: str
    metric: str
    # The pod's share of ``metric`` on the source, in metric units.
    usage: float
    source_before: float
    source_after: float
    target_before: float
    target_after: float
    # The pending replacement as the engine saw it, with status.nominatedNodeName = target.
    replacement: Obj = field(compare=False, repr=False)

    def as_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "uid": self.uid,
            "namespace": self.namespace,
            "workload": self.workload,
            "ownerUid": self.owner_uid,
            "templateHash": self.template_hash,
            "source": self.source,
            "target": self.target,
            "metric": self.metric,
            "usage": self.usage,
            "sourceBefore": self.source_before,
            "sourceAfter": self.source_after,
            "targetBefore": self.target_before,
            "targetAfter": self.target_after,
        }


@dataclass(frozen=True)
class Skipped:
    """A pod on a hot node that is not moved, and why."""

    pod: str
    node: str
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {"pod": self.pod, "node": self.node, "reason": self.reason}


@dataclass(frozen=True)
class Plan:
    hot: tuple[HotNode, ...]
    moves: tuple[Move, ...]
    skipped: tuple[Skipped, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "hot": [h.as_json() for h in self.hot],
            "moves": [m.as_json() for m in self.moves],
            "skipped": [s.as_json() for s in self.skipped],
        }


@dataclass(frozen=True)
class SteeringView:
    """The steering marks as other schedulers see them in this look: the taint's key, and the
    nodes that carry it (:mod:`ksched.loop.steering`)."""

    key: str
    marked: frozenset[str]


@dataclass(frozen=True)
class Budget:
    """What the caller still allows in this look (the live loop tracks the limits over time)."""

    # min(maxPerCycle, rate-limit tokens left).
    evictions: int
    # Evictions already made this cycle, per source node.
    per_node: Mapping[str, int] = field(default_factory=dict)
    # Workloads (``<Kind>/<namespace>/<name>``) in cool-down.
    cooling: frozenset[str] = frozenset()
    # (source node, scheduler name): that scheduler placed a moved pod's replacement back on
    # that source lately (a ping-pong); its pods there are not moved meanwhile.
    placed_back: frozenset[tuple[str, str]] = frozenset()


def tolerates_mark(pod: Obj, key: str) -> bool:
    """Whether one of the pod's tolerations accepts the steering mark (``key``, no value,
    PreferNoSchedule), as upstream's ToleratesTaint matches one: then kube-scheduler's
    TaintToleration does not score the marked node down for it."""
    for t in spec(pod).get("tolerations") or []:
        if not isinstance(t, dict) or (t.get("effect") or MARK_EFFECT) != MARK_EFFECT:
            continue
        if (t.get("key") or key) != key:
            continue
        operator = t.get("operator") or "Equal"
        if operator == "Exists" or (operator == "Equal" and not t.get("value")):
            return True
    return False


def build_replacement(pod: Obj, source: str) -> Obj:
    """The pending pod the victim's controller is expected to create, as a reservation
    holds it: :func:`pending_copy`, required to avoid ``source`` (a matchFields term added to
    every nodeSelectorTerm)."""
    out = pending_copy(pod)
    avoid = {"key": "metadata.name", "operator": "NotIn", "values": [source]}
    node_affinity = out["spec"].setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    required["nodeSelectorTerms"] = [
        {**t, "matchFields": [*(t.get("matchFields") or []), avoid]} for t in terms
    ]
    return out


def pending_copy(pod: Obj) -> Obj:
    """The victim's copy without its node, identity or status: the replacement as the proof
    places it. No term keeps it off the source (the proof's values do): the real replacement
    has none, and topology spread counts only the domains of nodes its node affinity allows."""
    out = copy.deepcopy(pod)
    m = out.setdefault("metadata", {})
    for k in (
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
        "managedFields",
        "generation",
    ):
        m.pop(k, None)
    m["name"] = f"{m.get('name', '')}{REPLACEMENT_SUFFIX}"
    out.setdefault("spec", {}).pop("nodeName", None)
    out["status"] = {}
    return out


def qos_class(pod: Obj) -> str:
    """The pod's QoS class: ``status.qosClass`` where the API server set it, else upstream's
    rule over its containers' cpu and memory requests and limits."""
    given = (pod.get("status") or {}).get("qosClass")
    if given in QOS_ORDER:
        return str(given)
    s = spec(pod)
    containers = list(s.get("containers") or []) + list(s.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for c in containers:
        resources = c.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        for r in ("cpu", "memory"):
            if r in requests or r in limits:
                any_set = True
            if r not in limits or (r in requests and not _same_quantity(requests[r], limits[r])):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _same_quantity(a: str | int | float, b: str | int | float) -> bool:
    """Whether two quantities are equal (``1`` and ``1000m`` are); malformed ones by their text."""
    try:
        return parse_quantity(a) == parse_quantity(b)
    except QuantityError:
        return str(a) == str(b)


def go_duration(seconds: float) -> str:
    """A duration as Kubernetes prints it (``5m0s``, ``1h0m0s``, ``30s``)."""
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def namespace_of(pod: Obj) -> str:
    return str(meta(pod).get("namespace") or "default")


def has_local_storage(pod: Obj) -> bool:
    """Whether any of the pod's volumes keeps its data on the node (:data:`LOCAL_VOLUME_SOURCES`)."""
    return any(
        isinstance(v, dict) and any(v.get(source) is not None for source in LOCAL_VOLUME_SOURCES)
        for v in spec(pod).get("volumes") or []
    )


def template_hash_of(pod: Obj) -> str | None:
    labels = meta(pod).get("labels") or {}
    return next((str(labels[k]) for k in TEMPLATE_HASH_LABELS if k in labels), None)


def epoch(raw: object) -> float | None:
    if not isinstance(raw, str) or not raw:
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def moved_usage(replacement: Obj) -> dict[str, float]:
    """What a move was proved with, per metric (engine units), from its replacement's
    :data:`MOVED_USAGE_ANNOTATION` (empty where it has none or it is not a JSON object of
    finite numbers)."""
    raw = (meta(replacement).get("annotations") or {}).get(MOVED_USAGE_ANNOTATION)
    try:
        proved = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return {}
    if not isinstance(proved, dict):
        return {}
    return {str(k): float(v) for k, v in proved.items() if isinstance(v, int | float) and math.isfinite(v)}
