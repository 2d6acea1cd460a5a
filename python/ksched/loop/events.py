"""The Events and condition timestamps ksched writes about pods, as upstream's recorder
writes them (events.k8s.io/v1, sent as protobuf).

Owns an event's name, body and path, the component they name, upstream's
Scheduled note, and ksched's own reasons: a pod placed over a metric's threshold, and the
rebalancer's moves and the steering marks (about the pod and about its node: an object of kind ``Node``, whose
events go to the ``default`` namespace as the kubelet's do), and a sharded replica's view of
the live replicas (about its own Lease). Sending and retrying them is
the binder's (:mod:`ksched.loop.scheduling.binder`).
"""

from __future__ import annotations

import datetime as dt
import time

from ksched.loop import protobuf
from ksched.objects import Obj, meta

# The reporting controller of ksched's events, and the name its conditions' messages start with.
COMPONENT = "ksched"
# The longest event note the API server takes.
MAX_NOTE = 1024
# The Normal event beside Scheduled of a pod placed over a metric's threshold (saturation).
PLACED_OVER_THRESHOLD = "PlacedOverThreshold"
# The rebalancer's events: a pod evicted for a cooler node (on the pod and its node), and a
# move a PodDisruptionBudget refused (on the pod).
REBALANCED = "Rebalanced"
REBALANCE_BLOCKED = "RebalanceBlocked"
# The steering controller's events on a node: marked hot (other schedulers prefer other
# nodes), marked warm (the lighter mark only: preferred over a hot node, not over an unmarked
# one), and unmarked.
MARKED_HOT = "KschedMarkedHot"
MARKED_WARM = "KschedMarkedWarm"
UNMARKED = "KschedUnmarked"
# Where events about cluster-scoped objects (nodes) go, as upstream's recorder puts them.
NODE_EVENT_NAMESPACE = "default"
# A sharded replica's event on its own Lease: the live replicas it counts changed.
SHARDS_CHANGED = "KschedShardsChanged"


def events_path(namespace: str) -> str:
    """Where a namespace's events are listed and written (events.k8s.io/v1)."""
    return f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"


def now() -> str:
    """A condition's ``lastTransitionTime``: now, in whole seconds (RFC 3339)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def scheduled_message(namespace: str, name: str, node: str) -> str:
    """Upstream's Scheduled event note."""
    return f"Successfully assigned {namespace}/{name} to {node}"


def event_request(
    obj: Obj, kind: str, reason: str, action: str, note: str, instance: str
) -> tuple[str, bytes]:
    """The path and body of an event about ``obj``, reported by this replica (``instance``):
    a pod, or an object of the ``kind`` and ``apiVersion`` it names (a ``Node``: its events go
    to the ``default`` namespace; a replica's ``Lease``: to the Lease's)."""
    m = meta(obj)
    regarding_kind = str(obj.get("kind") or "Pod")
    is_node = regarding_kind == "Node"
    ns = NODE_EVENT_NAMESPACE if is_node else str(m.get("namespace"))
    name = str(m.get("name"))
    at = time.time_ns()
    uid = m.get("uid")
    raw = protobuf.event(
        # Upstream names events <object>.<unix nanoseconds in hex>; the object's name is cut so
        # the event's stays within 253 characters (a longer name is refused: no event at all),
        # and a cut that ends in "-" or "." is trimmed (an invalid name too).
        name=f"{name[: 253 - 17].rstrip('-.')}.{at:016x}",
        namespace=ns,
        time_ns=at,
        controller=COMPONENT,
        instance=instance,
        action=action,
        reason=reason,
        note=note[:MAX_NOTE],
        type_=kind,
        regarding=protobuf.Reference(
            regarding_kind,
            str(obj.get("apiVersion") or "v1"),
            None if is_node else ns,
            name,
            str(uid) if uid else None,
        ),
    )
    return events_path(ns), raw
