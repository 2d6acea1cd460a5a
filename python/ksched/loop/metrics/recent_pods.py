"""Recently bound pods, and the load they add to a metric until its samples show them.

Owns the pods bound, by any scheduler, within the horizon the metrics' estimates need
(a pod bound ``window + maxAge`` ago is in every usable sample's window): when each was
bound, on which node, and what it is expected to use of each estimated resource
(:func:`ksched.engine.estimate.estimated_usage`). A pod counts from its bind time:
ksched's own from when it assumed them, the others from their ``PodScheduled``
condition (a pod created bound has none: from its creation).

For a sample evaluated at ``t_s`` over a window ``W``, a pod bound at ``t_b`` counts
fully if ``t_b >= t_s`` (the sample cannot show it), else by ``1 - (t_s - t_b) / W``
(a ``rate(...[5m])`` shows it in proportion to the part of its window it covers),
and not at all once the window covers it or when ``W`` is 0; its share of its node is its
load over the node's allocatable (both rules: :mod:`ksched.engine.load`). A legacy estimate
(``herdEstimate``) counts only ksched's binds, fully, until the sample.

A pod that is measured counts as its measured usage. A learned estimate
(``estimate.learn``) also learns from the measured ones how far the guesses were off
(:func:`learn`): the others count as their calibrated guess, and with ``deviations`` each
node also counts that many standard deviations of its unmeasured pods' combined spread
(the unseen share of each, independent: the root of the sum of squares).

Kept cheap at any cluster size: only pods bound within the horizon are held, a heap
by bind time prunes them, and a cycle reads them as numpy columns rebuilt only when
the set changed; nothing here walks every pod.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ksched.config import MetricConfig
from ksched.config.metrics import LEARN_MIN_PODS, Calibration
from ksched.engine.estimate import BEST_EFFORT, FROM_REQUEST, calibration_terms, guess
from ksched.engine.load import before_event, pod_shares
from ksched.engine.pods import CountedRequests, PodRequests
from ksched.engine.snapshot import Snapshot
from ksched.loop.metrics.samples import parse_time
from ksched.objects import Obj, meta

# Kubernetes writes condition and creation times to the second, rounded down: a pod shown
# bound at 12:00:00 was bound before 12:00:01. Taken as the end of that second (or when the
# watch showed it, if earlier), so a pod bound just after a sample is not taken for one the
# sample shows.
TIME_RESOLUTION_S = 1.0


@dataclass(frozen=True)
class RecentPod:
    uid: str
    node: str
    bound_at: float
    # Bound by ksched (the only pods a legacy estimate counts).
    by_ksched: bool
    # The configured guess per estimating metric (``RecentPods.metrics``), in the engine's
    # unit, and what each guess was made from (:func:`ksched.engine.estimate.guess`).
    amounts: tuple[int, ...]
    kinds: tuple[int, ...]


def bind_time(pod: Obj, now: float) -> float:
    """When a bound pod was bound: its PodScheduled condition's transition to True, else its
    creation (a pod created with its node set), else ``now``."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "True":
            at = parse_time(c.get("lastTransitionTime"))
            if at is not None:
                return min(now, at + TIME_RESOLUTION_S)
    created = parse_time(meta(pod).get("creationTimestamp"))
    return now if created is None else min(now, created + TIME_RESOLUTION_S)


def horizon_s(metric: MetricConfig, window_s: float) -> float:
    """How long after its bind a pod can still add to the metric: until every sample young
    enough to be used covers it."""
    if metric.estimate is None:
        return 0.0
    if metric.estimate.legacy:
        return metric.max_age_s
    return window_s + metric.max_age_s


class RecentPods:
    """The pods bound within the horizon, by key (``namespace/name``). Used by the
    scheduling thread only (:class:`ksched.loop.mirror.state.ClusterState`)."""

    def __init__(self, metrics: Sequence[MetricConfig], clock: Callable[[], float] = time.time) -> None:
        self.metrics = tuple(m for m in metrics if m.estimate is not None)
        self._column = {m.name: i for i, m in enumerate(self.metrics)}
        self.clock = clock
        # Grows when a sample brings a longer window (metrics-server names its own).
        self.horizon_s = max((horizon_s(m, m.window_s()) for m in self.metrics), default=0.0)
        self.pods: dict[str, RecentPod] = {}
        self._by_time: list[tuple[float, str, str]] = []
        self._version = 0
        self._arrays: tuple[object, object, _Arrays] | None = None

    def __len__(self) -> int:
        return len(self.pods)

    def track(
        self,
        key: str,
        uid: str,
        node: str,
        bound_at: float,
        by_ksched: bool,
        pod: Obj | None,
        requests: CountedRequests,
    ) -> None:
        """A pod bound at ``bound_at`` (ignored if that is beyond the horizon)."""
        now = self.clock()
        self._prune(now)
        if not self.metrics or bound_at < now - self.horizon_s:
            return
        self.pods[key] = RecentPod(uid, node, bound_at, by_ksched, *self._guesses(pod, requests))
        heapq.heappush(self._by_time, (bound_at, key, uid))
        self._version += 1

    def resized(self, key: str, pod: Obj, requests: CountedRequests) -> None:
        """A recent pod's requests changed in place: it is expected to use what it asks now."""
        current = self.pods.get(key)
        if current is not None:
            self.pods[key] = RecentPod(
                current.uid, current.node, current.bound_at, current.by_ksched, *self._guesses(pod, requests)
            )
            self._version += 1

    def drop(self, key: str) -> None:
        """The pod is gone (deleted, finished, or its bind failed)."""
        if self.pods.pop(key, None) is not None:
            self._version += 1

    def add_to(
        self,
        snapshot: Snapshot,
        metric: MetricConfig,
        sampled_at: float,
        column: npt.NDArray[np.float64],
        window_s: float | None = None,
        measured: Mapping[str, float] | None = None,
    ) -> Calibration | None:
        """Add to ``column`` (the metric's value per snapshot row) the share of each recent pod's
        load that the sample taken at ``sampled_at`` does not show. ``window_s``: the sample's own
        window, where the metric sets none; ``measured``: pods' measured usage (engine units),
        which replaces their estimate. Returns what a learned estimate learned (None where it
        does not learn)."""
        i = self._column.get(metric.name)
        estimate = metric.estimate
        if i is None or estimate is None:
            return None
        window = metric.window_s() if estimate.window_s is not None or window_s is None else window_s
        self.horizon_s = max(self.horizon_s, horizon_s(metric, window))
        self._prune(self.clock())
        if snapshot.resources.get(estimate.resource) is None or not self.pods:
            return Calibration() if estimate.learns else None
        arrays = self._current(snapshot)
        bound_at = arrays.bound_at
        if estimate.legacy:
            weight = np.where(arrays.by_ksched & (bound_at > sampled_at), 1.0, 0.0)
        else:
            weight = before_event(bound_at, sampled_at, window)
        guesses = arrays.amounts[:, i].astype(np.float64)
        kinds = arrays.kinds[:, i]
        known = np.full(len(guesses), np.nan)
        if measured:
            for j, key in enumerate(arrays.keys):
                value = measured.get(key)
                if value is not None and math.isfinite(value):
                    known[j] = value
        is_known = ~np.isnan(known)
        calibration = learn(guesses, kinds, known) if estimate.learns else None
        amounts, spreads = _expected(guesses, kinds, calibration)
        amounts[is_known] = known[is_known]
        spreads[is_known] = 0.0
        rows = arrays.rows
        counted, share = pod_shares(snapshot, estimate.resource, rows, amounts)
        seen = weight[counted]
        np.add.at(column, rows[counted], metric.load_sign * seen * share)
        if estimate.deviations > 0 and calibration is not None:
            variance = np.zeros(len(column))
            _, spread = pod_shares(snapshot, estimate.resource, rows, spreads)
            unseen = seen * spread
            np.add.at(variance, rows[counted], unseen * unseen)
            column += metric.load_sign * estimate.deviations * np.sqrt(variance)
        return calibration

    # -- internals -----------------------------------------------------

    def _guesses(self, pod: Obj | None, requests: CountedRequests) -> tuple[tuple[int, ...], tuple[int, ...]]:
        reqs = PodRequests(dict(requests.requests), requests.nonzero_cpu, requests.nonzero_memory)
        pairs = [guess(pod or {}, reqs, m.estimate) for m in self.metrics if m.estimate is not None]
        return tuple(a for a, _ in pairs), tuple(k for _, k in pairs)

    def _prune(self, now: float) -> None:
        oldest = now - self.horizon_s
        heap = self._by_time
        while heap and heap[0][0] < oldest:
            bound_at, key, uid = heapq.heappop(heap)
            current = self.pods.get(key)
            if current is not None and current.uid == uid and current.bound_at == bound_at:
                del self.pods[key]
                self._version += 1

    def _current(self, snapshot: Snapshot) -> _Arrays:
        """The recent pods as columns, rebuilt when they or the snapshot's rows changed."""
        cached = self._arrays
        if cached is None or cached[0] != self._version or cached[1] is not snapshot.index:
            cached = (self._version, snapshot.index, _Arrays.of(self.pods, snapshot.index, len(self.metrics)))
            self._arrays = cached
        return cached[2]


def learn(
    guesses: npt.NDArray[np.float64], kinds: npt.NDArray[np.int8], known: npt.NDArray[np.float64]
) -> Calibration:
    """What the measured pods (``known`` not NaN) say of the guesses: for pods guessed from
    their requests, measured over guessed usage (the ratio of the sums, and the spread of each
    pod's ratio around it weighted by its guess, so that a pod requesting 1m and using a core
    does not make every guess a thousand times too small); for BestEffort pods, the mean and
    spread of their measured usage. Each once at least ``LEARN_MIN_PODS`` of its kind are
    measured."""
    is_known = ~np.isnan(known)
    ratio: tuple[float | None, float, int] = (None, 0.0, 0)
    from_request = is_known & (kinds == FROM_REQUEST) & (guesses > 0)
    n = int(from_request.sum())
    if n >= LEARN_MIN_PODS:
        guessed, used = guesses[from_request], known[from_request]
        mean = float(used.sum() / guessed.sum())
        spread = float(np.sqrt((guessed * (used / guessed - mean) ** 2).sum() / guessed.sum()))
        ratio = (mean, spread, n)
    best: tuple[float | None, float, int] = (None, 0.0, 0)
    best_effort = is_known & (kinds == BEST_EFFORT)
    n = int(best_effort.sum())
    if n >= LEARN_MIN_PODS:
        used = known[best_effort]
        best = (float(used.mean()), float(used.std()), n)
    return Calibration(*ratio, *best)


def _expected(
    guesses: npt.NDArray[np.float64], kinds: npt.NDArray[np.int8], calibration: Calibration | None
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Each pod's expected usage and its standard deviation, from its guess
    (:func:`ksched.engine.estimate.calibration_terms`, as for a pod being placed)."""
    terms = np.array(calibration_terms(calibration), dtype=np.float64)[kinds]
    return guesses * terms[:, 0] + terms[:, 1], guesses * terms[:, 2] + terms[:, 3]


@dataclass(frozen=True)
class _Arrays:
    keys: list[str]
    bound_at: npt.NDArray[np.float64]
    by_ksched: npt.NDArray[np.bool_]
    # Snapshot row of each pod's node (-1: not in the table).
    rows: npt.NDArray[np.intp]
    amounts: npt.NDArray[np.int64]
    kinds: npt.NDArray[np.int8]

    @staticmethod
    def of(pods: Mapping[str, RecentPod], index: Mapping[str, int], metrics: int) -> _Arrays:
        n = len(pods)
        values = pods.values()
        return _Arrays(
            list(pods),
            np.fromiter((p.bound_at for p in values), dtype=np.float64, count=n),
            np.fromiter((p.by_ksched for p in values), dtype=np.bool_, count=n),
            np.fromiter((index.get(p.node, -1) for p in values), dtype=np.intp, count=n),
            np.array([p.amounts for p in values], dtype=np.int64).reshape(n, metrics),
            np.array([p.kinds for p in values], dtype=np.int8).reshape(n, metrics),
        )
