"""SchedulingQueue: which pending pod is tried next, and when a failed one is retried.

Shaped like upstream's PriorityQueue (pkg/scheduler/backend/queue): an
active queue ordered by priority then age; a backoff queue for pods that
failed and wait out an exponential backoff (1 s doubling to 10 s); and an
unschedulable set whose pods are moved back when a cluster event could help
them and at least every 30 s. Which events help is each plugin's to say (its
registry row's events, upstream's EventsToRegister): a pod is moved by an event
that one of the plugins that rejected it registered, a gang member also by its
gang's events, and a pod no plugin verdict explains by any event but another
pod's binding (that only by pods with affinity, spread or a gang). A pod
ksched will never place (it uses ResourceClaims) is parked: no event or flush
retries it. A pod deleted or bound elsewhere while queued is dropped. Time comes from an
injectable clock so tests need no sleeps.

It promises: a pod is handed out by at most one ``pop_batch`` until its
attempt is reported (``done_*``); it never touches the API server.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ksched import _core
from ksched.engine.gangs import POD_GROUP_LABEL
from ksched.loop.telemetry import QUEUES
from ksched.objects import Obj, handed_over, holds_nomination, meta, nominated_to, object_key, spec

# Upstream DefaultPodInitialBackoffDuration / DefaultPodMaxBackoffDuration.
INITIAL_BACKOFF_S = 1.0
MAX_BACKOFF_S = 10.0
# Unschedulable pods are retried at least this often even without a helpful event
# (upstream flushes after podMaxInUnschedulablePodsDuration; the issue asks for 30 s).
UNSCHEDULABLE_FLUSH_S = 30.0
# A batch stops waiting to fill once no pod has joined the active queue for this long: pods
# stream in from the watch (a backlog, a burst of creations) far faster; at a trickle,
# waiting the whole batch window would only add to each pod's latency.
FILL_GAP_S = 0.01

# The events each engine plugin registered (upstream's EventsToRegister), by plugin name.
PLUGIN_EVENTS: dict[str, frozenset[str]] = {p["name"]: frozenset(p["events"]) for p in _core.PLUGINS}
# Another pod bound or relabelled: the events that help only pods with pod-level constraints.
ASSIGNED_POD_EVENTS = frozenset({"AssignedPodAdd", "AssignedPodLabelChange"})
# A gang waits for its members to bind and for its PodGroup (upstream GangScheduling's events).
GANG_EVENTS = frozenset({"AssignedPodAdd", "PodGroupAdd", "PodGroupUpdate"})
# Every event the loop reports; a node change none of the plugins' names covers is "NodeUpdate".
CLUSTER_EVENTS = frozenset(_core.CLUSTER_EVENTS) | GANG_EVENTS | {"NodeUpdate", "NodeAnnotationChange"}
# A pod no plugin verdict explains (no node at all, a gang cut short, a metric threshold):
# any event may help it.
UNATTRIBUTED_EVENTS = CLUSTER_EVENTS - ASSIGNED_POD_EVENTS


@dataclass
class QueuedPod:
    key: str
    pod: Obj
    priority: int
    # When the pod first entered the queue (for the scheduling SLI) and its place in line.
    added: float
    seq: int
    attempts: int = 0
    backoff_until: float = 0.0
    unschedulable_since: float = 0.0
    # The event counter when this attempt started (see ``done_unschedulable``).
    move_seq_at_pop: int = 0
    # The cluster events that move it out of the unschedulable set (see ``retried_by``).
    wakes: frozenset[str] = frozenset()
    where: str = "active"
    last_message: str | None = None
    # Not decided within the decision deadline: the next attempt runs without metrics.
    degraded: bool = False
    # Has pod affinity terms, topology spread constraints or a pod group: other
    # pods being bound can make it fit.
    pod_level: bool = False
    # The node a preemption of this replica's is nominating, held until the watch shows the
    # pod nominated (or the write fails, or the nomination is dropped): ``nominate``.
    nominating: str | None = None
    # The nomination the last copy from the watch showed ("" for none).
    seen_nomination: str = ""

    @property
    def uid(self) -> str:
        return str(meta(self.pod).get("uid", ""))


def has_pod_level_constraints(pod: Obj) -> bool:
    s = spec(pod)
    affinity = s.get("affinity") or {}
    labels = meta(pod).get("labels") or {}
    return bool(
        (isinstance(affinity, dict) and (affinity.get("podAffinity") or affinity.get("podAntiAffinity")))
        or s.get("topologySpreadConstraints")
        or (isinstance(labels, dict) and POD_GROUP_LABEL in labels)
    )


def retried_by(pod: Obj, pod_level: bool, rejected_by: frozenset[str] | None) -> frozenset[str]:
    """The cluster events that may make an unschedulable pod fit: those the plugins that
    rejected it registered (upstream's isPodWorthRequeuing without hints), or, where no
    plugin verdict explains the failure (None, none, or a plugin outside the registry such
    as a metric), every event but other pods' binding unless it has pod-level constraints."""
    if rejected_by and all(p in PLUGIN_EVENTS for p in rejected_by):
        events = frozenset().union(*(PLUGIN_EVENTS[p] for p in rejected_by))
    else:
        events = CLUSTER_EVENTS if pod_level else UNATTRIBUTED_EVENTS
    labels = meta(pod).get("labels") or {}
    if isinstance(labels, dict) and POD_GROUP_LABEL in labels:
        events |= GANG_EVENTS
    return events


def node_events(node: Obj, old: Obj | None) -> list[str]:
    """The cluster events of a node's change (upstream's nodeSchedulingPropertiesChange):
    what changed of what the filters read, or "NodeUpdate" where only something else did
    (its addresses or images, which a metric or a score may read)."""
    if old is None:
        return ["NodeAdd"]
    new_spec, old_spec = spec(node), spec(old)
    changes = [
        ("NodeLabelChange", meta(node).get("labels") != meta(old).get("labels")),
        (
            "NodeTaintChange",
            new_spec.get("taints") != old_spec.get("taints")
            or bool(new_spec.get("unschedulable")) != bool(old_spec.get("unschedulable")),
        ),
        (
            "NodeAllocatableChange",
            (node.get("status") or {}).get("allocatable") != (old.get("status") or {}).get("allocatable"),
        ),
        ("NodeAnnotationChange", meta(node).get("annotations") != meta(old).get("annotations")),
    ]
    return [event for event, changed in changes if changed] or ["NodeUpdate"]


def backoff_s(attempts: int) -> float:
    """Upstream calculateBackoffDuration: 1 s doubled per failed attempt, capped at 10 s."""
    return float(min(INITIAL_BACKOFF_S * 2 ** max(attempts - 1, 0), MAX_BACKOFF_S))


class SchedulingQueue:
    def __init__(self, clock: Callable[[], float] = time.monotonic, fill_gap_s: float = FILL_GAP_S) -> None:
        self.clock = clock
        self.fill_gap_s = fill_gap_s
        # When a pod last joined the active queue (monotonic; the batch window's clock).
        self._last_push = -math.inf
        self._cond = threading.Condition()
        self._pods: dict[str, QueuedPod] = {}
        self._active: list[tuple[int, int, str]] = []
        self._backoff: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        # Cluster events so far, the count when each event last came, and the keys of the
        # unschedulable pods each event moves (with the attempt that parked them: an entry of
        # an earlier attempt is stale).
        self._move_seq = 0
        self._event_seq: dict[str, int] = {}
        self._waiting: dict[str, dict[str, int]] = {}
        # Keys of queued pods an earlier preemption nominated to a node, kept as pods
        # change, so each cycle's ``nominated`` need not scan the whole queue.
        self._nominated: set[str] = set()
        self._last_flush = clock()
        self._closed = False
        # ``wake`` was called: a ``pop_batch`` waiting for its first pod returns empty.
        self._woken = False
        # A ``pop_batch`` is waiting for its first pod (read without the lock by ``wake``).
        self._idle = False

    # -- informer side -------------------------------------------------

    def add(self, pod: Obj) -> None:
        """A pending pod appeared or changed. A changed pod waiting as unschedulable is retried."""
        key = object_key(pod)
        priority = spec(pod).get("priority")
        priority = priority if isinstance(priority, int) and not isinstance(priority, bool) else 0
        with self._cond:
            qp = self._pods.get(key)
            if qp is not None and qp.uid == str(meta(pod).get("uid", "")):
                qp.pod = pod = self._with_nomination(qp, pod)
                self._note_nomination(key, pod)
                if qp.where == "unschedulable":
                    self._push_backoff(qp)
                elif qp.where == "elsewhere":
                    self._push_backoff(qp)  # a nomination may have made it this replica's
                return
            if qp is not None:
                self._forget(key)  # deleted and recreated under the same name
            self._note_nomination(key, pod)
            qp = QueuedPod(key, pod, priority, self.clock(), next(self._seq))
            qp.seen_nomination = str((pod.get("status") or {}).get("nominatedNodeName") or "")
            qp.pod_level = has_pod_level_constraints(pod)
            self._pods[key] = qp
            self._push_active(qp)

    def remove(self, key: str) -> None:
        """The pod was deleted or bound (by anyone): it leaves the queue wherever it is."""
        with self._cond:
            self._forget(key)

    def move_all(self, event: str) -> None:
        """A cluster event (one of ``CLUSTER_EVENTS``): the unschedulable pods it may help
        are retried after their backoff (upstream's MoveAllToActiveOrBackoffQueue)."""
        if event not in CLUSTER_EVENTS:
            raise ValueError(f"unknown cluster event {event!r}")
        with self._cond:
            self._move_seq += 1
            self._event_seq[event] = self._move_seq
            for key, attempts in self._waiting.pop(event, {}).items():
                qp = self._pods.get(key)
                if qp is not None and qp.where == "unschedulable" and qp.attempts == attempts:
                    self._push_backoff(qp)

    # -- scheduler side ------------------------------------------------

    def pop_batch(self, max_size: int, max_wait_s: float, timeout_s: float | None = None) -> list[QueuedPod]:
        """Up to ``max_size`` pods in priority order. Waits (up to ``timeout_s``) for the first.
        If the queue was empty (the loop was idle), the pods that woke it are handed out at
        once, as upstream schedules a pod as soon as it is popped. If pods were already
        waiting (the loop is behind: a backlog, or pods that came during the last cycle), it
        waits for the batch to fill while pods keep coming (none for ``fill_gap_s``: stop),
        up to ``max_wait_s``. An empty list on timeout or close."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            idle: bool | None = None
            try:
                while True:
                    self._flush()
                    if idle is None:
                        idle = not self._active
                    if self._active or self._closed:
                        break
                    if self._woken:
                        return []
                    wait = self._next_wakeup()
                    if deadline is not None:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            return []
                        wait = left if wait is None else min(wait, left)
                    self._idle = True
                    self._cond.wait(wait)
            finally:
                self._idle = self._woken = False
            if self._closed:
                return []
            fill_by = time.monotonic() + (0.0 if idle else max_wait_s)
            while len(self._active) < max_size and not self._closed:
                left = min(fill_by, self._last_push + self.fill_gap_s) - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
                self._flush()
            out: list[QueuedPod] = []
            while self._active and len(out) < max_size:
                _, _, key = heapq.heappop(self._active)
                qp = self._pods.get(key)
                if qp is None or qp.where != "active":
                    continue  # removed or moved since it was pushed
                qp.where = "in_flight"
                qp.move_seq_at_pop = self._move_seq
                out.append(qp)
            return out

    def wake(self) -> None:
        """Have a ``pop_batch`` that waits for its first pod return empty now, so the idle
        loop can do other work (apply the watch events queued for the cluster state). Cheap
        when nothing waits: any thread may call it for every event."""
        if not self._idle:
            return
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def take_members(self, belongs: Callable[[Obj], bool]) -> list[QueuedPod]:
        """Waiting pods (active, backing off or unschedulable) for which ``belongs(pod)``,
        handed out as ``pop_batch`` does: a gang's members join the batch of its first."""
        with self._cond:
            out = []
            for qp in self._pods.values():
                if qp.where in ("active", "backoff", "unschedulable") and qp.pod_level and belongs(qp.pod):
                    qp.where = "in_flight"
                    qp.move_seq_at_pop = self._move_seq
                    out.append(qp)
            return out

    def nominated(self) -> list[Obj]:
        """Waiting pods an earlier preemption nominated to a node (their room is held)."""
        with self._cond:
            return [
                qp.pod
                for qp in (self._pods[k] for k in self._nominated if k in self._pods)
                if qp.where != "in_flight"
            ]

    def take_nominations(self, node: str, below: int) -> list[Obj]:
        """Waiting pods nominated to ``node`` with priority below ``below`` (upstream's
        getLowerPriorityNominatedPods): their nomination is dropped here at once, so they
        hold nothing from the next cycle on; the caller clears it on the API server."""
        with self._cond:
            out = []
            for key in list(self._nominated):
                qp = self._pods.get(key)
                if qp is None or qp.where == "in_flight" or qp.priority >= below:
                    continue
                status = qp.pod.get("status") or {}
                if status.get("nominatedNodeName") == node:
                    out.append(qp.pod)
                    self._drop_nomination(qp)
            return out

    def nominate(self, qp: QueuedPod, node: str) -> None:
        """Record at once the nomination a preemption is writing for ``qp`` (upstream's
        nominator keeps it in memory from PostFilter on): the pod holds its room from the next
        cycle, before the watch brings the written status back. Until then, another pod of its
        priority could preempt the same victims again: after an API server restart that echo
        took seconds, and two preemptors evicted the same victims for one node's room (one of
        them then bound nowhere). Copies of the pod the watch brings without a nomination (its
        own PodScheduled condition, written meanwhile) keep it, as upstream's
        UpdateNominatedPod does, until the watch shows a nomination or the write fails
        (``nomination_failed``)."""
        with self._cond:
            if self._pods.get(qp.key) is not qp:
                return
            qp.nominating = node
            qp.pod = nominated_to(qp.pod, node)
            self._nominated.add(qp.key)

    def nomination_failed(self, qp: QueuedPod, node: str) -> None:
        """The nomination of ``node`` for ``qp`` was not written: it holds no room any more."""
        with self._cond:
            if self._pods.get(qp.key) is qp and qp.nominating == node:
                self._drop_nomination(qp)

    def clear_nomination(self, qp: QueuedPod) -> None:
        """The pod fits nowhere, even by preempting: its nomination is dropped here at once
        (the caller clears it on the API server; one only held here brings no echo)."""
        with self._cond:
            if self._pods.get(qp.key) is qp:
                self._drop_nomination(qp)

    def _drop_nomination(self, qp: QueuedPod) -> None:
        qp.nominating = None
        status = qp.pod.get("status") or {}
        if "nominatedNodeName" in status:
            qp.pod = {**qp.pod, "status": {k: v for k, v in status.items() if k != "nominatedNodeName"}}
        self._nominated.discard(qp.key)

    @staticmethod
    def _with_nomination(qp: QueuedPod, pod: Obj) -> Obj:
        """``pod`` (a copy from the watch) as the queue holds it: with the nomination ``qp``
        is writing while the copy's nomination is the one the last copy showed (none, or an
        earlier one: upstream's UpdateNominatedPod keeps its own then, holding its room even
        where the copy shows the node as a hand-over's); a copy that shows it written, or
        changed by another, ends the wait."""
        status = pod.get("status") or {}
        shown = str(status.get("nominatedNodeName") or "")
        seen, qp.seen_nomination = qp.seen_nomination, shown
        if qp.nominating is None:
            return pod
        if (shown == qp.nominating and not handed_over(pod)) or shown != seen:
            qp.nominating = None
            return pod
        return nominated_to(pod, qp.nominating)

    def done_bound(self, qp: QueuedPod) -> None:
        """Bound (or the pod turned out bound already): it leaves the queue."""
        with self._cond:
            if self._pods.get(qp.key) is qp:
                self._forget(qp.key)  # the same bookkeeping as any pod leaving

    def done_unschedulable(
        self, qp: QueuedPod, message: str | None, rejected_by: frozenset[str] | None = None
    ) -> None:
        """No node fits; ``rejected_by`` names the plugins that rejected a node (None: no
        plugin verdict explains it). It waits for an event one of them registered (see
        ``retried_by``); if such an event came during the attempt, it is retried after its
        backoff instead (upstream's moveRequestCycle)."""
        with self._cond:
            if self._pods.get(qp.key) is not qp:
                return
            qp.attempts += 1
            qp.last_message = message
            now = self.clock()
            qp.backoff_until = now + backoff_s(qp.attempts)
            qp.wakes = retried_by(qp.pod, qp.pod_level, rejected_by)
            if any(self._event_seq.get(e, 0) > qp.move_seq_at_pop for e in qp.wakes):
                self._push_backoff(qp)
                return
            qp.where = "unschedulable"
            qp.unschedulable_since = now
            for event in qp.wakes:
                self._waiting.setdefault(event, {})[qp.key] = qp.attempts

    def done_parked(self, qp: QueuedPod, message: str) -> None:
        """ksched will never place this pod: it stays queued (so it is not re-added by every
        update) but no cluster event, flush or hand-off sweep retries it."""
        with self._cond:
            if self._pods.get(qp.key) is not qp:
                return
            qp.attempts += 1
            qp.last_message = message
            qp.where = "parked"

    def done_elsewhere(self, qp: QueuedPod, handed: bool = False) -> None:
        """Another replica places this pod (sharding): it stays queued, untried, until it
        changes or the replicas do (:meth:`reown`). ``handed``: this replica handed it over
        (nominated it to another's node); should it come back, it waits out a backoff first,
        so that replicas whose views disagree do not pass a pod back and forth at once."""
        with self._cond:
            if self._pods.get(qp.key) is qp:
                if handed:
                    qp.attempts += 1
                    qp.backoff_until = self.clock() + backoff_s(qp.attempts)
                qp.where = "elsewhere"

    def reown(self) -> None:
        """The live replicas changed: every pod another replica placed is looked at again."""
        with self._cond:
            for qp in self._pods.values():
                if qp.where == "elsewhere":
                    self._push_backoff(qp)

    def done_error(self, qp: QueuedPod) -> None:
        """An error (bind failed, API unavailable, not leader): retry after backoff."""
        with self._cond:
            if self._pods.get(qp.key) is not qp:
                return
            qp.attempts += 1
            qp.backoff_until = self.clock() + backoff_s(qp.attempts)
            self._push_backoff(qp)

    def take_overdue(self, after_s: float) -> list[QueuedPod]:
        """Unschedulable pods first queued at least ``after_s`` ago, taken out of rotation
        (``where == "handoff"``) until ``done_bound`` or ``done_error``."""
        with self._cond:
            now = self.clock()
            out = [
                qp for qp in self._pods.values() if qp.where == "unschedulable" and now - qp.added >= after_s
            ]
            for qp in out:
                qp.where = "handoff"
            return out

    def requeue(self, qp: QueuedPod) -> None:
        """Give a popped pod back untried (e.g. leadership lost before the attempt)."""
        with self._cond:
            if self._pods.get(qp.key) is qp:
                self._push_active(qp)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def counts(self) -> dict[str, int]:
        """Pods per place: active, backoff, unschedulable, in_flight, handoff, parked, elsewhere."""
        with self._cond:
            out = dict.fromkeys(QUEUES, 0)
            for qp in self._pods.values():
                out[qp.where] += 1
            return out

    def __contains__(self, key: str) -> bool:
        with self._cond:
            return key in self._pods

    def get(self, key: str) -> QueuedPod | None:
        with self._cond:
            return self._pods.get(key)

    # -- internals (lock held) ----------------------------------------

    def _push_active(self, qp: QueuedPod) -> None:
        qp.where = "active"
        self._last_push = time.monotonic()
        heapq.heappush(self._active, (-qp.priority, qp.seq, qp.key))
        self._cond.notify_all()

    def _push_backoff(self, qp: QueuedPod) -> None:
        """Back to active once its backoff is over (at once if it already is)."""
        if qp.backoff_until <= self.clock():
            self._push_active(qp)
            return
        qp.where = "backoff"
        heapq.heappush(self._backoff, (qp.backoff_until, qp.seq, qp.key))
        self._cond.notify_all()

    def _forget(self, key: str) -> None:
        qp = self._pods.pop(key, None)
        if qp is not None:
            qp.where = "gone"
            self._nominated.discard(key)
            for waiting in self._waiting.values():
                waiting.pop(key, None)

    def _note_nomination(self, key: str, pod: Obj) -> None:
        if holds_nomination(pod):
            self._nominated.add(key)
        else:
            self._nominated.discard(key)

    def _flush(self) -> None:
        now = self.clock()
        while self._backoff and self._backoff[0][0] <= now:
            _, _, key = heapq.heappop(self._backoff)
            qp = self._pods.get(key)
            if qp is not None and qp.where == "backoff" and qp.backoff_until <= now:
                self._push_active(qp)
        if now - self._last_flush >= 1.0:
            self._last_flush = now
            for qp in list(self._pods.values()):
                if qp.where == "unschedulable" and now - qp.unschedulable_since >= UNSCHEDULABLE_FLUSH_S:
                    self._push_backoff(qp)

    def _next_wakeup(self) -> float | None:
        """Seconds until the next backoff expiry or unschedulable flush (None: nothing pending)."""
        waits = []
        now = self.clock()
        if self._backoff:
            waits.append(max(self._backoff[0][0] - now, 0.0))
        if any(qp.where == "unschedulable" for qp in self._pods.values()):
            waits.append(1.0)
        return min(waits) if waits else None
