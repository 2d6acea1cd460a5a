"""Types for the raw Kubernetes JSON ksched reads.

ksched keeps API objects as the plain dicts the API server sends (parsed by
orjson), never generated model classes: this module names their shape for
readers and the type checker, and holds the few accessors every layer uses.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, NewType

Obj = dict[str, Any]
"""A Kubernetes object as decoded JSON."""

NodeIndex = NewType("NodeIndex", int)
"""Row of a node in the node table."""

StringId = NewType("StringId", int)
"""An interned string (label key or value, taint, node name, IP)."""

DEFAULT_SCHEDULER = "default-scheduler"
# The widths of the API's integer fields (int32: priority, maxSkew, minDomains; int64: quantities' values).
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MAX = 2**63 - 1


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


def controller_of(obj: Obj) -> Obj | None:
    """The owner reference that names ``obj``'s controller (None: no controller owns it)."""
    for ref in meta(obj).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return ref
    return None


def spec(obj: Obj) -> Obj:
    s = obj.get("spec")
    return s if isinstance(s, dict) else {}


def scheduler_name(pod: Obj) -> str:
    return str(spec(pod).get("schedulerName") or DEFAULT_SCHEDULER)


def uses_resource_claims(pod: Obj) -> bool:
    """Whether the pod asks for dynamic resources (``spec.resourceClaims``), which ksched
    never allocates: such a pod is default-scheduler's (see docs/differences.md)."""
    return bool(spec(pod).get("resourceClaims"))


# The annotation of the bookmark that ends a streamed list's initial events (KEP-3157's watch
# list): the informers' projections keep it (a node's keeps all its annotations).
INITIAL_EVENTS_END = "k8s.io/initial-events-end"

# The condition a scheduler's preemption sets on its victims (upstream
# v1.DisruptionTarget with reason v1.PodReasonPreemptionByScheduler).
DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"


# A sharded replica's hand-over (:mod:`ksched.loop.shards`): the pod's nominatedNodeName routes
# it to that node's owner, and this condition, True, says that the nomination holds no room
# there: no preemption made any, and the replica that handed it over may not yet have seen
# another preemptor's nomination of that room. The owner's own nomination sets it False.
HANDED_OVER = "ksched.io/HandedOver"


def pod_condition(pod: Obj, kind: str) -> Obj | None:
    """The pod's first condition of type ``kind`` (None: it has none)."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition  # type: ignore[no-any-return]
    return None


def handed_over(pod: Obj) -> bool:
    """Whether the pod's nomination is a hand-over: it routes the pod and holds no room."""
    condition = pod_condition(pod, HANDED_OVER)
    return condition is not None and condition.get("status") == "True"


def without_hand_over(pod: Obj) -> Obj:
    """The pod as the engine places it: a hand-over's nomination only routed it to this
    replica (sharding), which places it by its own view (a copy without it; others as they are)."""
    return nominated_to(pod, None) if handed_over(pod) else pod


def holds_nomination(pod: Obj) -> bool:
    """Whether the pod is nominated to a node and holds its room there (upstream's nominator):
    a preemption's nomination does, a hand-over's does not."""
    return bool((pod.get("status") or {}).get("nominatedNodeName")) and not handed_over(pod)


def nominated_to(pod: Obj, node: str | None) -> Obj:
    """A copy of the pod as nominated to ``node`` by its own replica (None: no nomination):
    the nomination holds its room, a hand-over's condition is False."""
    status = {k: v for k, v in (pod.get("status") or {}).items() if k != "nominatedNodeName"}
    if node is not None:
        status["nominatedNodeName"] = node
    if handed_over(pod):
        status["conditions"] = [
            {**c, "status": "False"} if c.get("type") == HANDED_OVER else c for c in status["conditions"]
        ]
    return {**pod, "status": status}


def terminating_by_preemption(pod: Obj) -> bool:
    """Upstream podTerminatingByPreemption: being deleted, and its first DisruptionTarget
    condition is True with reason PreemptionByScheduler (another cause, e.g. a drain, is not)."""
    if meta(pod).get("deletionTimestamp") is None:
        return False
    condition = pod_condition(pod, DISRUPTION_TARGET)
    return (
        condition is not None
        and condition.get("status") == "True"
        and condition.get("reason") == PREEMPTION_BY_SCHEDULER
    )


def is_terminal(pod: Obj) -> bool:
    """Succeeded and Failed pods hold no resources (upstream drops them from the cache)."""
    status = pod.get("status")
    return isinstance(status, dict) and status.get("phase") in ("Succeeded", "Failed")


def stable_key(text: str) -> int:
    """A 64-bit key of a string that is the same in every process (for the seeded tie-break)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


# An empty 8-byte BLAKE2b, copied per text by stable_keys (a third cheaper than a new one).
_EMPTY_KEY = hashlib.blake2b(digest_size=8)


def stable_keys(texts: Iterable[str]) -> bytes:
    """:func:`stable_key` of each text as consecutive little-endian 64-bit words
    (``numpy.frombuffer(..., "<u8")`` reads them), without an int per text."""
    out = []
    for t in texts:
        h = _EMPTY_KEY.copy()
        h.update(t.encode())
        out.append(h.digest())
    return b"".join(out)


def object_key(obj: Obj) -> str:
    """``namespace/name`` for namespaced objects, ``name`` for cluster-scoped ones."""
    m = meta(obj)
    ns = m.get("namespace")
    return f"{ns}/{m.get('name', '')}" if ns else str(m.get("name", ""))
