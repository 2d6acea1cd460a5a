"""Types for the raw Kubernetes JSON ksched reads.

ksched keeps API objects as the plain dicts the API server sends (parsed by
orjson), never generated model classes: this module names their shape for
readers and the type checker, and holds the few accessors every layer uses.
"""

from __future__ import annotations

import hashlib
from typing import Any, NewType

Obj = dict[str, Any]
"""A Kubernetes object as decoded JSON."""

NodeIndex = NewType("NodeIndex", int)
"""Row of a node in the node table."""

StringId = NewType("StringId", int)
"""An interned string (label key or value, taint, node name, IP)."""

DEFAULT_SCHEDULER = "default-scheduler"


def meta(obj: Obj) -> Obj:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def name(obj: Obj) -> str:
    return str(meta(obj).get("name", ""))


def namespace(obj: Obj) -> str:
    return str(meta(obj).get("namespace") or "default")


def pod_key(pod: Obj) -> str:
    """``namespace/name``, as upstream logs and events name pods."""
    return f"{namespace(pod)}/{name(pod)}"


def spec(obj: Obj) -> Obj:
    s = obj.get("spec")
    return s if isinstance(s, dict) else {}


def scheduler_name(pod: Obj) -> str:
    return str(spec(pod).get("schedulerName") or DEFAULT_SCHEDULER)


def is_terminal(pod: Obj) -> bool:
    """Succeeded and Failed pods hold no resources (upstream drops them from the cache)."""
    status = pod.get("status")
    return isinstance(status, dict) and status.get("phase") in ("Succeeded", "Failed")


def stable_key(text: str) -> int:
    """A 64-bit key of a string that is the same in every process (for the seeded tie-break)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def object_key(obj: Obj) -> str:
    """``namespace/name`` for namespaced objects, ``name`` for cluster-scoped ones."""
    m = meta(obj)
    ns = m.get("namespace")
    return f"{ns}/{m.get('name', '')}" if ns else str(m.get("name", ""))


def _pick(obj: Any, keys: tuple[str, ...]) -> Obj:
    return {k: obj[k] for k in keys if k in obj} if isinstance(obj, dict) else {}


_POD_META = (
    "name",
    "namespace",
    "uid",
    "labels",
    "creationTimestamp",
    "deletionTimestamp",
    "ownerReferences",
)
_POD_SPEC = (
    "nodeName",
    "schedulerName",
    "priority",
    "priorityClassName",
    "preemptionPolicy",
    "overhead",
    "resources",
    "nodeSelector",
    "affinity",
    "tolerations",
    "topologySpreadConstraints",
    "schedulingGates",
)
_CONTAINER = ("name", "resources", "ports", "restartPolicy")
_NODE_META = ("name", "uid", "labels", "annotations")


def slim_pod(pod: Obj) -> Obj:
    """The fields of a pod ksched reads; everything else (and resourceVersion) is dropped,
    so an update that changes nothing ksched reads compares equal."""
    s = pod.get("spec") or {}
    spec = _pick(s, _POD_SPEC)
    spec["containers"] = [_pick(c, _CONTAINER) for c in s.get("containers") or []]
    if s.get("initContainers"):
        spec["initContainers"] = [_pick(c, _CONTAINER) for c in s["initContainers"]]
    status = pod.get("status") or {}
    slim_status: Obj = {"phase": status.get("phase")}
    scheduled = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
    if scheduled:
        slim_status["conditions"] = [_pick(scheduled[0], ("type", "status", "reason", "message"))]
    if status.get("nominatedNodeName"):
        slim_status["nominatedNodeName"] = status["nominatedNodeName"]
    if status.get("startTime"):
        slim_status["startTime"] = status["startTime"]
    metadata = _pick(pod.get("metadata"), _POD_META)
    # Only ksched's own annotations (opt-outs, markers): others can be large and change often.
    ours = {
        k: v
        for k, v in ((pod.get("metadata") or {}).get("annotations") or {}).items()
        if k.startswith("ksched.io/")
    }
    if ours:
        metadata["annotations"] = ours
    return {"metadata": metadata, "spec": spec, "status": slim_status}


def slim_namespace(ns: Obj) -> Obj:
    """Name and labels: what affinity terms' namespaceSelector reads."""
    return {"metadata": _pick(ns.get("metadata"), ("name", "labels"))}


def slim_pod_group(group: Obj) -> Obj:
    """Identity and spec (minMember, scheduleTimeoutSeconds): status changes compare equal."""
    return {
        "metadata": _pick(group.get("metadata"), ("name", "namespace", "uid")),
        "spec": group.get("spec") or {},
    }


def slim_selector_owner(obj: Obj) -> Obj:
    """Identity and selector of a Service or workload controller (default topology spreading)."""
    return {
        "metadata": _pick(obj.get("metadata"), ("name", "namespace")),
        "spec": {"selector": (obj.get("spec") or {}).get("selector")},
    }


def slim_budget(pdb: Obj) -> Obj:
    """Selector and the disruptions allowed: what preemption reads of a PodDisruptionBudget."""
    status = pdb.get("status") or {}
    return {
        "metadata": _pick(pdb.get("metadata"), ("name", "namespace")),
        "spec": {"selector": (pdb.get("spec") or {}).get("selector")},
        "status": {
            "disruptionsAllowed": status.get("disruptionsAllowed", 0),
            "disruptedPods": status.get("disruptedPods") or {},
        },
    }


def slim_node(node: Obj) -> Obj:
    """The fields of a node ksched reads: heartbeats and condition updates compare equal."""
    status = node.get("status") or {}
    return {
        "metadata": _pick(node.get("metadata"), _NODE_META),
        "spec": _pick(node.get("spec"), ("unschedulable", "taints")),
        "status": {
            "allocatable": status.get("allocatable") or {},
            # Prometheus series name nodes by instance address as often as by name.
            "addresses": status.get("addresses") or [],
        },
    }
