"""Reservations: the room a rebalancing move keeps on its target for the evicted pod's
replacement.

Owns the held reservations (one per move, held before the eviction is posted), which pending
pod is a move's replacement (same namespace, the same controller, the same pod template
where the victim had a template hash label: a pod matches at most one reservation, the oldest
first, and keeps it), and the ways a reservation ends: its replacement binds (on the target,
back on the source, or elsewhere), the eviction did not happen (released), or the timeout
passes (expired). A replacement is matched by its controller, whichever scheduler places it:
another scheduler's pod is bound there without ksched, and the pod informer reports that
binding as any other. Until its replacement shows up, a reservation holds its room the way a nominated
pod does (:meth:`Reservations.holding`) and its load counts on the target's metrics
(:meth:`Reservations.add_to`), so other pods fill neither. Once it has landed, the load its
move was proved with, less what the replacement already uses, stays counted on its node
for ``settle_s`` (:meth:`Reservations.add_settling`: a restarted pod starts cold), and a
replacement its scheduler placed back on its source is remembered as long
(:meth:`Reservations.placed_back`: a ping-pong). Thread-safe: the rebalancer holds
and releases, the scheduling cycle matches and counts, the pod informer reports bindings.
The cycle reads it as its :class:`~ksched.loop.rebalancing.held.HeldRoom`. Writes nothing to
the API server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ksched.config import MetricConfig
from ksched.engine.estimate import estimated_usage
from ksched.engine.load import node_share
from ksched.engine.moves import TEMPLATE_HASH_LABELS, Move, moved_usage
from ksched.engine.pods import pod_requests
from ksched.engine.snapshot import Snapshot
from ksched.errors import MalformedObjectError
from ksched.objects import Obj, meta, scheduler_name

# How a replacement's reservation ended (``ksched_rebalance_replacements_total{outcome}``):
# on_source is a ping-pong, the replacement bound back on the node it was moved off.
ON_TARGET, ON_SOURCE, ELSEWHERE, EXPIRED = "on_target", "on_source", "elsewhere", "expired"
OUTCOMES = (ON_TARGET, ON_SOURCE, ELSEWHERE, EXPIRED)


@dataclass
class Reservation:
    move: Move
    # Until when (epoch seconds) the target is held.
    until: float
    # The uid of the pending pod that matched (None: its replacement has not shown up yet).
    pod_uid: str | None = None

    def as_json(self) -> dict[str, object]:
        return {
            "pod": self.move.pod,
            "workload": self.move.workload,
            "target": self.move.target,
            "until": self.until,
            "matched": self.pod_uid is not None,
        }


@dataclass(frozen=True)
class Settling:
    """A replacement that has landed, whose moved load is held on its node until ``until``
    (less what it already uses): a restarted pod starts cold and grows back to the load it
    was moved with, and its node must not be filled meanwhile."""

    move: Move
    pod: str
    node: str
    until: float


class Reservations:
    def __init__(self, settle_s: float = 0.0, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        # Oldest first: a pod matches the oldest reservation it can.
        self._held: list[Reservation] = []
        # Landed replacements still growing back (``add_settling``), for ``settle_s`` each.
        self.settle_s = settle_s
        self.clock = clock
        self._settling: list[Settling] = []
        # How reservations ended, by outcome (OUTCOMES).
        self.outcomes = dict.fromkeys(OUTCOMES, 0)

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def hold(self, move: Move, until: float) -> Reservation:
        """Hold ``move.target`` for the replacement of ``move.pod`` until ``until``."""
        reservation = Reservation(move, until)
        with self._lock:
            self._held.append(reservation)
        return reservation

    def release(self, reservation: Reservation) -> None:
        """Stop holding (the eviction did not happen); nothing happens if it already ended."""
        with self._lock:
            if reservation in self._held:
                self._held.remove(reservation)

    def match(self, pod: Obj) -> Reservation | None:
        """The reservation whose replacement ``pod`` is: the one it matched before, else the
        oldest unmatched one of its namespace, controller and pod template (then it is this
        pod's)."""
        uid = str(meta(pod).get("uid") or "")
        with self._lock:
            if not self._held:
                return None
            for r in self._held:
                if uid and r.pod_uid == uid:
                    return r
            for r in self._held:
                if r.pod_uid is None and _replaces(pod, r.move):
                    r.pod_uid = uid or None
                    return r
        return None

    def steered_to(self, pod: Obj) -> str | None:
        """The target ``pod`` is steered to: its reservation's (:meth:`match`), else None."""
        reservation = self.match(pod)
        return reservation.move.target if reservation is not None else None

    def landed(self, pod: Obj, node: str) -> str | None:
        """``pod`` bound to ``node``: where it is a replacement, its reservation ends and the
        outcome (ON_TARGET, ON_SOURCE or ELSEWHERE) is returned; else None."""
        reservation = self.match(pod)
        if reservation is None:
            return None
        move = reservation.move
        outcome = ON_TARGET if node == move.target else ON_SOURCE if node == move.source else ELSEWHERE
        with self._lock:
            if reservation not in self._held:
                return None
            self._held.remove(reservation)
            self.outcomes[outcome] += 1
            if self.settle_s > 0:
                key = f"{meta(pod).get('namespace') or 'default'}/{meta(pod).get('name')}"
                self._settling.append(Settling(reservation.move, key, node, self.clock() + self.settle_s))
        return outcome

    def expire(self, now: float) -> list[Reservation]:
        """Drop the reservations held past their time, and return them."""
        with self._lock:
            gone = [r for r in self._held if r.until <= now]
            self._held = [r for r in self._held if r.until > now]
            self.outcomes[EXPIRED] += len(gone)
        return gone

    def holding(self) -> list[Obj]:
        """The replacements not yet matched, as pending pods nominated to their targets
        (the engine's ``nominated``: their room is held)."""
        with self._lock:
            return [r.move.replacement for r in self._held if r.pod_uid is None]

    def as_json(self) -> list[dict[str, object]]:
        with self._lock:
            return [r.as_json() for r in self._held]

    def add_to(
        self, values: npt.NDArray[np.float64], snapshot: Snapshot, metrics: Sequence[MetricConfig]
    ) -> None:
        """Count each unmatched reservation's load on its target's value of each metric with an
        estimate (``values``: node x metric, columns ``metrics``): what its move was proved with
        (the replacement's :data:`~ksched.engine.rebalance.MOVED_USAGE_ANNOTATION`), else the
        replacement's estimate, over the target's allocatable; added, or taken off a metric
        filtered ``below`` (higher is better), as the planner counts it."""
        with self._lock:
            waiting = [r.move for r in self._held if r.pod_uid is None]
        for move in waiting:
            proved = moved_usage(move.replacement)

            def amount(m: MetricConfig, move: Move = move, proved: dict[str, float] = proved) -> float | None:
                if m.name in proved:
                    return proved[m.name]
                assert m.estimate is not None
                try:
                    return float(
                        estimated_usage(move.replacement, pod_requests(move.replacement), m.estimate)
                    )
                except MalformedObjectError:
                    return None

            _add_load(values, snapshot, metrics, move.target, amount)

    def add_settling(
        self,
        values: npt.NDArray[np.float64],
        snapshot: Snapshot,
        metrics: Sequence[MetricConfig],
        measured: Callable[[str, MetricConfig], float | None],
    ) -> None:
        """Count on each landed replacement's node what its move was proved with, less what
        the pod is measured to use now (``measured``: engine units, None where unknown: 0), for
        ``settle_s`` after it landed; the recent pods' estimate counts the measured part."""
        now = self.clock()
        with self._lock:
            self._settling = [s for s in self._settling if s.until > now]
            settling = list(self._settling)
        for s in settling:
            proved = moved_usage(s.move.replacement)

            def missing(m: MetricConfig, s: Settling = s, proved: dict[str, float] = proved) -> float | None:
                if m.name not in proved:
                    return None
                return max(0.0, proved[m.name] - (measured(s.pod, m) or 0.0))

            _add_load(values, snapshot, metrics, s.node, missing)

    def placed_back(self) -> frozenset[tuple[str, str]]:
        """(source node, scheduler name) of each replacement that landed back on its source
        within ``settle_s``: that scheduler did not steer clear of that node."""
        now = self.clock()
        with self._lock:
            return frozenset(
                (s.node, scheduler_name(s.move.replacement))
                for s in self._settling
                if s.until > now and s.node == s.move.source
            )

    def settling(self) -> int:
        with self._lock:
            return sum(1 for s in self._settling if s.until > self.clock())


def _add_load(
    values: npt.NDArray[np.float64],
    snapshot: Snapshot,
    metrics: Sequence[MetricConfig],
    node: str,
    amount: Callable[[MetricConfig], float | None],
) -> None:
    """Add ``amount(metric)`` (engine units; None: nothing) to ``node``'s value of each metric
    with an estimate, over its allocatable of the estimate's resource, signed by the way load
    moves the metric."""
    row = snapshot.index.get(node)
    if row is None:
        return
    for k, m in enumerate(metrics):
        if m.estimate is None:
            continue
        load = amount(m)
        share = None if load is None else node_share(snapshot, node, m.estimate.resource, load)
        if share is not None:
            values[row, k] += m.load_sign * share


def _replaces(pod: Obj, move: Move) -> bool:
    """Whether ``pod`` is a replacement the move's victim's controller made."""
    m = meta(pod)
    if str(m.get("namespace") or "default") != move.namespace:
        return False
    controller = next(
        (ref for ref in m.get("ownerReferences") or [] if isinstance(ref, dict) and ref.get("controller")),
        None,
    )
    if controller is None or str(controller.get("uid") or "") != move.owner_uid:
        return False
    if move.template_hash is None:
        return True
    labels = m.get("labels") or {}
    return any(str(labels.get(k)) == move.template_hash for k in TEMPLATE_HASH_LABELS if k in labels)
