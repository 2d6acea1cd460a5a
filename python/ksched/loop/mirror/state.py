"""ClusterState: the node table and per-node usage, kept current from watch events.

Informer threads and the binder only append to ``inbox``; the scheduling
thread applies it (``sync``) at the start of each cycle, so the snapshot the
engine reads is never written while the engine runs. Usage changes are
applied to the snapshot in place (O(changes)); a node added, removed or
changed in a field the engine reads, or a host-port pod leaving, rebuilds it
(O(nodes + bound pods), rare: heartbeats never reach here, see
:func:`ksched.loop.mirror.slim.slim_node`). So does its interning outgrowing what it
was built with (``REBUILD_INTERNED``): pods with labels of their own leave
their strings and label sets behind when they go.

Pods bound by any scheduler count. Pods ksched binds count from the moment
they are *assumed*; the watch confirms them, a failed bind forgets them; a
pod is never counted twice. An update that changes what a bound pod counts as
(an in-place resize, its labels, its deletion starting) re-counts it; one that
does not (the bind confirmed, the kubelet's phase) is told apart by comparing
the fields counts read (:func:`same_counts`), not by parsing it again.

A node that cannot be read as numbers (:func:`~ksched.engine.snapshot.node_problem`) is left
out of the node table alone: logged and counted (``ksched_objects_rejected_total``) once per
problem while it lasts, and listed by :meth:`ClusterState.left_out_report` for ``/status``.

Pods bound recently, by any scheduler, are also kept (:mod:`ksched.loop.metrics.recent_pods`)
for the metrics' load estimates: :meth:`ClusterState.add_estimate` adds what a
metric's sample cannot show of them yet.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from ksched.config import MetricConfig
from ksched.config.steering import DEFAULT_MARK_KEYS
from ksched.engine.disruption_budgets import DisruptionBudget, disruption_budget
from ksched.engine.gangs import POD_GROUP_LABEL, PodGroup, pod_group
from ksched.engine.pod_level import PodInfo
from ksched.engine.pods import CountedRequests, HostPort, PodRequests, start_time
from ksched.engine.podtable import Evictable
from ksched.engine.requirements import counted_requests
from ksched.engine.snapshot import (
    Snapshot,
    add_usage,
    build_snapshot,
    evictable,
    node_problem,
    remove_usage,
    safe_pod_info,
)
from ksched.engine.spread_selectors import SpreadSelectors
from ksched.engine.storage import ClaimBinding, Storage
from ksched.errors import MalformedObjectError
from ksched.loop.metrics.recent_pods import RecentPods, bind_time
from ksched.loop.telemetry import Telemetry
from ksched.objects import (
    Obj,
    is_terminal,
    meta,
    name,
    object_key,
    scheduler_name,
    spec,
    terminating_by_preemption,
)

log = logging.getLogger(__name__)

NO_REQUESTS = PodRequests({}, 0, 0)
# A node table keeps every string and pod label or term set interned since it was built, and
# pods that each have a label of their own (a StatefulSet pod's name, a Job's controller-uid)
# add some with every pod that comes and goes. Once the table holds this many more than it was
# built with (and at least twice as many), it is rebuilt from the nodes and the pods counted
# now, as after a node change: memory stays bounded in a cluster with churn.
REBUILD_INTERNED = 50_000
# Watch events waiting in ``inbox`` that make an idle scheduling loop apply them (see ``wake``).
WAKE_AT = 64
# Objects left out that ``/status`` lists (the rest are counted): enough for a screen, and a
# bounded answer when a whole pool of nodes reports a bad quantity.
LEFT_OUT_SHOWN = 100
# How often :meth:`ClusterState.ask` checks whether its caller is stopping.
STOP_CHECK_S = 0.1
T = TypeVar("T")
# The field path a node's unreadable allocatable quantity is reported under (``node_problem``).
_QUANTITY_FIELD = "status.allocatable."


@dataclass(slots=True)
class Usage:
    """What one bound (or assumed) pod takes from its node."""

    node: str
    uid: str
    requests: CountedRequests
    ports: tuple[HostPort, ...]
    assumed: bool
    # Labels, namespace and affinity terms (pod-level plugins).
    info: PodInfo | None = None
    # Priority and start time (preemption); None when not evictable.
    evictable: Evictable | None = None
    # The (slim) pod these were read from, to tell which of its updates change them.
    pod: Obj | None = None


def _usage_of(pod: Obj, assumed: bool) -> Usage:
    key = object_key(pod)
    try:
        reqs, ports = counted_requests(pod, key)
    except MalformedObjectError as err:
        log.warning("bound pod counted without requests: %s", err)
        reqs, ports = NO_REQUESTS, ()
    return Usage(
        str(spec(pod).get("nodeName")),
        str(meta(pod).get("uid", "")),
        reqs,
        ports,
        assumed,
        safe_pod_info(pod),
        evictable(pod, reqs, ports),
        pod,
    )


# Status fields no count of a bound pod reads: its phase (a terminal pod is removed before),
# the node a preemption nominated, and the PodScheduled condition its bind adds. Its start
# time is read by preemption alone (``Usage.evictable``).
_UNCOUNTED_STATUS = frozenset(("phase", "startTime", "nominatedNodeName", "conditions"))


def _counted_status(status: Any) -> Any:
    if not isinstance(status, dict):
        return status
    counted = {k: v for k, v in status.items() if k not in _UNCOUNTED_STATUS}
    conditions = status.get("conditions")
    if isinstance(conditions, list):
        conditions = [c for c in conditions if not isinstance(c, dict) or c.get("type") != "PodScheduled"]
    if conditions:
        counted["conditions"] = conditions
    return counted


def _without_node(pod_spec: Any) -> Any:
    if isinstance(pod_spec, dict) and "nodeName" in pod_spec:
        return {k: v for k, v in pod_spec.items() if k != "nodeName"}
    return pod_spec


def same_counts(old: Obj, new: Obj) -> bool:
    """Whether a counted pod's update leaves what it counts as (requests, host ports, labels,
    affinity terms, priority, claims) as it was: equal metadata, spec but for the node name,
    and status but for the fields no count reads. The watch confirming a bind, and the kubelet
    reporting the pod running, change nothing else; an in-place resize, a label or a deletion does."""
    if old.get("metadata") != new.get("metadata"):
        return False
    old_spec, new_spec = old.get("spec"), new.get("spec")
    if old_spec != new_spec and _without_node(old_spec) != _without_node(new_spec):
        return False
    old_status, new_status = old.get("status"), new.get("status")
    return old_status == new_status or _counted_status(old_status) == _counted_status(new_status)


def _same_requests(a: CountedRequests, b: CountedRequests) -> bool:
    return (a.requests, a.nonzero_cpu, a.nonzero_memory) == (b.requests, b.nonzero_cpu, b.nonzero_memory)


def rejected_reason(problem: str) -> str:
    """The short word ``ksched_objects_rejected_total`` counts a node's ``node_problem`` under:
    ``unreadable_quantity`` for an allocatable that is not a quantity, ``malformed`` for
    anything else that cannot be read (a field of the wrong type)."""
    return "unreadable_quantity" if f": {_QUANTITY_FIELD}" in problem else "malformed"


def _field_problem(node_name: str, problem: str) -> str:
    """A node's problem without the ``node <name>: `` its message opens with."""
    return problem.removeprefix(f"node {node_name}: ")


def interned(snapshot: Snapshot) -> int:
    """Strings, label sets and term sets the snapshot has interned (ids are never reused)."""
    return len(snapshot.strings.strings) + snapshot.pods.interned()


class Placements(Protocol):
    """Hears each pod placed (:class:`ksched.loop.scheduling.outcomes.OutcomeWatch`), on the
    scheduling thread."""

    def placed(self, key: str, uid: str, node: str, at: float, scheduler: str | None) -> None:
        """A pod bound at ``at`` by ``scheduler`` (None: assumed by this ksched)."""

    def forgotten(self, key: str, uid: str) -> None:
        """ksched's bind of an assumed pod failed."""


class ClusterState:
    def __init__(
        self,
        metrics: tuple[MetricConfig, ...] = (),
        clock: Callable[[], float] = time.time,
        telemetry: Telemetry | None = None,
        own_marks: tuple[str, ...] = DEFAULT_MARK_KEYS,
    ) -> None:
        self.metrics = metrics
        self.clock = clock
        self.telemetry = telemetry
        # ksched's steering marks (steering.taintKey, steering.warmKey): left out of the node table.
        self.own_marks = own_marks
        # Pods bound recently (by any scheduler), for the metrics' load estimates.
        self.recent = RecentPods(metrics, clock, telemetry)
        self.recent.settled = self._settled
        self.inbox: deque[tuple[str, Any, Any]] = deque()
        self.nodes: dict[str, Obj] = {}
        self.usage: dict[str, Usage] = {}
        # Namespace -> labels (affinity terms' namespaceSelector), shared with the snapshot.
        self.namespaces: dict[str, dict[str, str]] = {}
        # PodGroups by namespace/name, and how many members of each are counted on nodes.
        self.pod_groups: dict[str, PodGroup] = {}
        self.group_bound: dict[str, int] = {}
        # PodDisruptionBudgets (preemption), by namespace/name; ``budgets`` is the snapshot's list.
        self._budgets: dict[str, DisruptionBudget] = {}
        self.budgets: list[DisruptionBudget] = []
        # Services and workload controllers' selectors (default topology spreading), shared with the snapshot.
        self.spread_selectors = SpreadSelectors()
        # PersistentVolumes, claims, StorageClasses and CSINodes, shared with the snapshot.
        self.storage = Storage()
        self._snapshot: Snapshot | None = None
        # Victims this replica is evicting, counted as terminating by preemption before the
        # watch shows them so (``preempting``).
        self._preempting: set[str] = set()
        # The snapshot is rebuilt once it has interned this many strings and sets (``interned``).
        self._rebuild_at = 0
        # How many times the snapshot has been built (the first time included).
        self.builds = 0
        # Nodes the last build left out of the node table, with why (``node_problem``: values
        # that cannot be read as numbers); each is logged and counted once per problem while
        # it lasts (``_reported``: the last build's). Replaced whole, never edited: ``/status``
        # reads it from the HTTP server's thread.
        self.left_out: dict[str, str] = {}
        self._reported: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        # Called (from the informer's thread) whenever ``inbox`` holds ``WAKE_AT`` entries or
        # more: the scheduling loop, if idle, applies them then rather than at its next
        # cycle, which would otherwise start with all of them (after a mass deletion,
        # thousands: hundreds of milliseconds added to the first pod that arrives).
        self.wake: Callable[[], None] | None = None
        # Told of each pod placed, by any scheduler (placement outcomes; live mode only).
        self.placements: Placements | None = None

    def _put(self, item: tuple[str, Any, Any]) -> None:
        self.inbox.append(item)
        if self.wake is not None and len(self.inbox) >= WAKE_AT:
            self.wake()

    # -- any thread ----------------------------------------------------

    def on_node(self, kind: str, node: Obj, old: Obj | None) -> None:
        self._put(("node", kind, node))

    def on_pod(self, kind: str, pod: Obj, old: Obj | None) -> None:
        self._put(("pod", kind, pod))

    def on_namespace(self, kind: str, ns: Obj, old: Obj | None) -> None:
        self._put(("namespace", kind, ns))

    def on_pod_group(self, kind: str, group: Obj, old: Obj | None) -> None:
        self._put(("podgroup", kind, group))

    def on_budget(self, kind: str, pdb: Obj, old: Obj | None) -> None:
        self._put(("pdb", kind, pdb))

    def storage_handler(self, kind: str) -> Callable[[str, Obj, Obj | None], None]:
        """An informer handler for PersistentVolumes, PersistentVolumeClaims, StorageClasses or CSINodes."""

        def handle(event: str, obj: Obj, old: Obj | None) -> None:
            self._put(("storage", event, (kind, obj)))

        return handle

    def forget_volumes(self, bindings: tuple[ClaimBinding, ...]) -> None:
        """Binding a pod's volumes failed: its volumes are available again (any thread)."""
        self._put(("forget_volumes", bindings, None))

    def selector_owner_handler(self, api_version: str, kind: str) -> Callable[[str, Obj, Obj | None], None]:
        """An informer handler for Services, ReplicationControllers, ReplicaSets or StatefulSets."""

        def handle(event: str, obj: Obj, old: Obj | None) -> None:
            self._put(("selector", event, (api_version, kind, obj)))

        return handle

    def at_this_point(self, call: Callable[[], None]) -> None:
        """Have ``sync`` run ``call`` once the events queued before it are applied and
        none after it (shadow mode decides on the state just before a binding lands)."""
        self._put(("call", call, None))

    def ask(self, call: Callable[[], T], stop: threading.Event, wait_s: float) -> T | None:
        """Run ``call`` where the state is applied (:meth:`at_this_point`) and wait for its
        answer, from another thread (the rebalancer's, the steering controller's). None: it
        raised (logged), or did not run within ``wait_s`` or before ``stop`` (and never will)."""
        done = threading.Event()
        lock = threading.Lock()
        out: list[T] = []
        cancelled = False

        def run() -> None:
            with lock:
                if cancelled:
                    return
                try:
                    out.append(call())
                except Exception:
                    log.exception("a call on the cluster state's thread failed")
                finally:
                    done.set()

        self.at_this_point(run)
        deadline = time.monotonic() + wait_s
        while not done.wait(STOP_CHECK_S):
            if stop.is_set() or time.monotonic() > deadline:
                with lock:
                    cancelled = True
                if not done.is_set():
                    if not stop.is_set():
                        log.warning("the cluster state's thread did not answer within %gs", wait_s)
                    return None
        return out[0] if out else None

    def forget(self, key: str, uid: str) -> None:
        """A bind failed: stop counting the assumed pod (unless the watch has confirmed it)."""
        self._put(("forget", key, uid))

    # -- the scheduling thread -----------------------------------------

    def sync(self) -> None:
        """Apply everything queued in ``inbox``."""
        while self.inbox:
            what, a, b = self.inbox.popleft()
            if what == "node":
                self._node(a, b)
            elif what == "pod":
                self._pod(a, b)
            elif what == "namespace":
                self._namespace(a, b)
            elif what == "podgroup":
                self._pod_group(a, b)
            elif what == "pdb":
                self._budget(a, b)
            elif what == "selector":
                api_version, kind, obj = b
                self.spread_selectors.update(api_version, kind, obj, deleted=a == "DELETED")
            elif what == "storage":
                kind, obj = b
                self.storage.update(kind, obj, deleted=a == "DELETED")
            elif what == "forget_volumes":
                self.storage.forget(a)
            elif what == "call":
                a()
            else:
                self._forget(a, b)
        # Checked here, not in ``snapshot``: a follower (and an idle leader) only syncs. Rebuilt at
        # once: most syncs run while the loop is idle, so it seldom adds to a pod's latency.
        if self._snapshot is not None and interned(self._snapshot) > self._rebuild_at:
            log.info(
                "rebuilding the node table: %d strings and pod label or term sets interned, most by pods now gone",
                interned(self._snapshot),
            )
            self._snapshot = None
            self.snapshot()

    def assume(
        self,
        key: str,
        uid: str,
        node: str,
        requests: CountedRequests,
        ports: tuple[HostPort, ...],
        info: PodInfo | None = None,
        priority: int = 0,
        pod: Obj | None = None,
    ) -> None:
        """Count a pod on the node ksched is about to bind it to; ``pod`` is the (slim) pod
        ``requests``, ``ports`` and ``info`` were read from."""
        if key in self.usage:
            self._remove(key)
        now = self.clock()
        e = Evictable(priority, now, requests, ports)
        self._add(key, Usage(node, uid, requests, ports, assumed=True, info=info, evictable=e, pod=pod))
        self.recent.track(key, uid, node, now, True, pod, requests)
        if self.placements is not None:
            self.placements.placed(key, uid, node, now, None)

    def snapshot(self) -> Snapshot:
        """The current node table (rebuilt only when nodes changed, or when it had interned
        many times what it was built with: ``REBUILD_INTERNED``)."""
        if self._snapshot is None:
            nodes = []
            left_out: dict[str, str] = {}
            for node in sorted(self.nodes.values(), key=name):
                problem = node_problem(node)
                if problem is None:
                    nodes.append(node)
                else:
                    # One bad node must not stop scheduling on the others.
                    left_out[name(node)] = problem
            self._leave_out(left_out)
            snap = build_snapshot(nodes, [], self.own_marks)
            snap.namespaces = self.namespaces
            index = snap.index
            add_usage(
                snap, [(index[u.node], u.requests, u.ports) for u in self.usage.values() if u.node in index]
            )
            snap.budgets = self.budgets
            snap.spread_selectors = self.spread_selectors
            snap.storage = self.storage
            for key, u in self.usage.items():
                if u.info is not None and u.node in index:
                    snap.pods.add(key, index[u.node], u.info, u.evictable)
            built = interned(snap)
            self._rebuild_at = max(2 * built, built + REBUILD_INTERNED)
            self.builds += 1
            self._snapshot = snap
        return self._snapshot

    def left_out_report(self) -> dict[str, Any]:
        """``/status``'s ``leftOut``: how many objects the last node table left out, and the
        first ``LEFT_OUT_SHOWN`` of them by name, each with its kind, reason (as counted in
        ``ksched_objects_rejected_total``) and problem (the field and what is wrong with it)."""
        left_out = self.left_out
        shown = sorted(left_out.items())[:LEFT_OUT_SHOWN]
        return {
            "count": len(left_out),
            "objects": [
                {"kind": "Node", "name": n, "reason": rejected_reason(p), "problem": _field_problem(n, p)}
                for n, p in shown
            ],
        }

    def counted(self) -> dict[str, str]:
        """Pod key -> node for every pod counted (bound or assumed)."""
        return {k: u.node for k, u in self.usage.items()}

    # -- internals -----------------------------------------------------

    def _settled(self, key: str) -> tuple[str, float, Obj, CountedRequests] | None:
        """A bound pod's uid, bind time, object and requests, for the load estimate to learn
        from (None where the pod is not counted, only assumed, or being deleted)."""
        usage = self.usage.get(key)
        if usage is None or usage.assumed or usage.pod is None or meta(usage.pod).get("deletionTimestamp"):
            return None
        return usage.uid, bind_time(usage.pod, self.clock()), usage.pod, usage.requests

    def _leave_out(self, left_out: dict[str, str]) -> None:
        """Record the nodes a build leaves out; log and count each new problem."""
        for node_name, problem in left_out.items():
            if (node_name, problem) in self._reported:
                continue
            log.warning(
                "node %s left out of scheduling (%d node(s) left out): %s", node_name, len(left_out), problem
            )
            if self.telemetry is not None:
                self.telemetry.objects_rejected.labels(kind="Node", reason=rejected_reason(problem)).inc()
        self._reported = set(left_out.items())
        self.left_out = left_out

    def _node(self, kind: str, node: Obj) -> None:
        node_name = name(node)
        if kind == "DELETED":
            if self.nodes.pop(node_name, None) is not None:
                self._snapshot = None
        elif self.nodes.get(node_name) != node:
            self.nodes[node_name] = node
            self._snapshot = None

    def _pod(self, kind: str, pod: Obj) -> None:
        key = object_key(pod)
        current = self.usage.get(key)
        node = spec(pod).get("nodeName")
        uid = str(meta(pod).get("uid", ""))
        if kind == "DELETED" or is_terminal(pod):
            if current is not None:
                self._remove(key)
                self.recent.drop(key, pod)
            return
        if not node:
            # An update from before our bind landed says nothing about the assumed pod.
            if current is not None and (not current.assumed or current.uid != uid):
                self._remove(key)
                self.recent.drop(key)
            elif current is None and self.recent.learns:
                self.recent.pending(pod)  # its workload's replicas are read again
            return
        if current is not None and current.node == node and current.uid == uid:
            self._update(key, current, pod)
            return
        if current is not None:
            self._remove(key)
            if current.uid != uid and current.pod is not None:
                # Another pod of that name (its deletion missed in a watch gap): the old one left.
                self.recent.drop(key, current.pod)
        usage = _usage_of(pod, assumed=False)
        self._add(key, usage)
        if self.recent.metrics or self.placements is not None:
            at = bind_time(pod, self.clock())
            self.recent.track(key, uid, usage.node, at, False, pod, usage.requests)
            if self.placements is not None:
                self.placements.placed(key, uid, usage.node, at, scheduler_name(pod))

    def _update(self, key: str, current: Usage, pod: Obj) -> None:
        """A counted pod changed on its node: the watch confirming ksched's bind, the kubelet's
        status, a label, a deletion starting, an in-place resize."""
        current.assumed = False
        seen, current.pod = current.pod, pod
        snap = self._snapshot
        node_index = snap.index.get(current.node) if snap is not None else None
        if seen is not None and same_counts(seen, pod):
            # Nothing counted changed; preemption orders victims by start time.
            start = (pod.get("status") or {}).get("startTime")
            if current.evictable is not None and start != (seen.get("status") or {}).get("startTime"):
                current.evictable = replace(current.evictable, start_time=start_time(pod))
                if snap is not None and node_index is not None:
                    snap.pods.set_evictable(key, current.evictable)
            return
        fresh = _usage_of(pod, assumed=False)
        if not _same_requests(fresh.requests, current.requests) or fresh.ports != current.ports:
            self._remove(key)  # an in-place resize: the node counts the pod's new requests
            self._add(key, fresh)
            self.recent.changed(key, pod, fresh.requests, seen)
            return
        if seen is None or seen.get("metadata") != pod.get("metadata"):
            # Adopted by a controller after its bind, a label or an annotation set: the load
            # estimate learns and counts it under the workload it has now.
            self.recent.changed(key, pod, fresh.requests, seen)
        if fresh.info != current.info:  # labels changed, or the pod is being deleted
            self._count_group(current, -1)
            current.info = fresh.info
            self._count_group(current, 1)
        current.evictable = fresh.evictable
        if key in self._preempting and current.evictable is not None:
            if current.evictable.preempted:
                self._preempting.discard(key)  # the watch shows it terminating: its copy rules
            else:
                current.evictable = replace(current.evictable, preempted=True)
        if snap is not None and node_index is not None and current.info is not None:
            snap.pods.add(key, node_index, current.info, current.evictable)

    def _namespace(self, kind: str, ns: Obj) -> None:
        if kind == "DELETED":
            self.namespaces.pop(name(ns), None)
        else:
            labels = meta(ns).get("labels") or {}
            self.namespaces[name(ns)] = {str(k): str(v) for k, v in labels.items()}

    def _pod_group(self, kind: str, obj: Obj) -> None:
        key = object_key(obj)
        if kind == "DELETED":
            self.pod_groups.pop(key, None)
            return
        try:
            self.pod_groups[key] = pod_group(obj)
        except MalformedObjectError as err:
            log.warning("pod group ignored: %s", err)
            self.pod_groups.pop(key, None)

    def _budget(self, kind: str, obj: Obj) -> None:
        key = object_key(obj)
        if kind == "DELETED":
            self._budgets.pop(key, None)
        else:
            try:
                self._budgets[key] = disruption_budget(obj)
            except MalformedObjectError as err:
                log.warning("PodDisruptionBudget ignored: %s", err)
                self._budgets.pop(key, None)
        self.budgets[:] = list(self._budgets.values())

    def _count_group(self, usage: Usage, sign: int) -> None:
        if usage.info is None:
            return
        name = dict(usage.info.labels).get(POD_GROUP_LABEL)
        if name:
            key = f"{usage.info.namespace}/{name}"
            self.group_bound[key] = self.group_bound.get(key, 0) + sign

    def _forget(self, key: str, uid: str) -> None:
        current = self.usage.get(key)
        if current is not None and current.assumed and current.uid == uid:
            self._remove(key)
            self.recent.drop(key)
            if self.placements is not None:
                self.placements.forgotten(key, uid)

    def _add(self, key: str, usage: Usage) -> None:
        self.usage[key] = usage
        self._count_group(usage, 1)
        snap = self._snapshot
        if snap is not None:
            i = snap.index.get(usage.node)
            if i is not None:
                add_usage(snap, [(i, usage.requests, usage.ports)])
                if usage.info is not None:
                    snap.pods.add(key, i, usage.info, usage.evictable)

    def preempting(self, keys: Iterable[str]) -> None:
        """Victims whose eviction this replica is writing count as terminating by preemption
        at once, as a bind is assumed: a preemptor nominated to their node then waits for them
        (upstream's PodEligibleToPreemptOthers) instead of preempting again elsewhere while the
        watch has not shown them terminating. After an API server restart that took seconds,
        and preemptors evicted on a second node, or the victims another had taken. The watch's
        copy rules once it shows the pod terminating, or gone."""
        for key in keys:
            usage = self.usage.get(key)
            if usage is None or usage.evictable is None or usage.evictable.preempted:
                continue  # gone, never a victim, or shown terminating by preemption already
            self._preempting.add(key)
            self._set_preempted(key, usage, usage.evictable, True)

    def eviction_failed(self, keys: Iterable[str]) -> None:
        """The eviction of ``keys`` was not written: they count as the watch shows them."""
        for key in keys:
            if key not in self._preempting:
                continue
            self._preempting.discard(key)
            usage = self.usage.get(key)
            if usage is not None and usage.evictable is not None:
                shown = usage.pod is not None and terminating_by_preemption(usage.pod)
                self._set_preempted(key, usage, usage.evictable, shown)

    def _set_preempted(self, key: str, usage: Usage, evictable: Evictable, preempted: bool) -> None:
        usage.evictable = replace(evictable, preempted=preempted)
        snap = self._snapshot
        if snap is not None and usage.node in snap.index:
            snap.pods.set_evictable(key, usage.evictable)

    def _remove(self, key: str) -> None:
        self._preempting.discard(key)
        usage = self.usage.pop(key)
        self._count_group(usage, -1)
        snap = self._snapshot
        if snap is None or usage.node not in snap.index:
            return
        snap.pods.remove(key)
        if usage.ports:
            self._snapshot = None  # port rows are rebuilt rather than edited
            return
        remove_usage(snap, snap.index[usage.node], usage.requests)
