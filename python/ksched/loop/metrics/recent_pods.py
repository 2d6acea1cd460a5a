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
(:func:`learn`, and per workload :class:`~ksched.loop.metrics.workloads.WorkloadHistory`):
the others count as their calibrated guess (:func:`ksched.engine.estimate.terms`, as the pod
being placed), and with ``deviations`` each node also counts that many standard deviations
of its unmeasured pods' combined spread (the unseen share of each, independent: the root of
the sum of squares). A pod of a workload without history counts at the typical workload's
figure, and its margin up to the prior's quantile joins that caution: summed within a
workload on a node, in quadrature across workloads (:meth:`RecentPods._expected`). A measured
pod still ramping up (:class:`~ksched.loop.metrics.pod_series.PodSeries`) counts as the larger
of its estimate and what it is climbing to (its measured usage and the rest of its climb:
:meth:`~ksched.loop.metrics.pod_series.PodSeries.climb`), less what the sample shows of it, until it is stable
or ``warmup`` after its bind (one whose samples show no rise, unless younger than its
workload's warm-up, by only the share of the estimate's excess and margin that the pods judged
before it make likely: :meth:`~ksched.loop.metrics.pod_series.PodSeries.rising_share`); only stable pods teach (and a pod that succeeds before it is
stable, at the most it measured: a short Job's run). Pods bound before the horizon (past any
warm-up) teach their workloads too, a share of them a pass (:attr:`RecentPods.settled`), so
that a workload running since before ksched started is estimated from its own replicas.

Kept cheap at any cluster size: only pods bound within the horizon are held, a heap
by bind time prunes them, and a cycle reads them as numpy columns that only the pods that
came, changed or left since the last cycle add to or drop from
(:class:`~ksched.loop.metrics.recent_columns.ColumnsCache`); nothing here walks every pod of
the cluster.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import compress
from typing import Any

import numpy as np
import numpy.typing as npt
from cachetools import LRUCache

from ksched.config import EstimateConfig, MetricConfig
from ksched.config.estimate import NEXT_POD_QUANTILE, Calibration, WorkloadCalibration
from ksched.engine.estimate import (
    MEASURED,
    RAMPING,
    RATIO_KINDS,
    declared_usage,
    expected,
    guess,
    pod_limit,
    revision_of,
    typical_usage,
    workload_of,
)
from ksched.engine.load import before_event, pod_shares
from ksched.engine.pods import CountedRequests
from ksched.engine.snapshot import Snapshot
from ksched.loop.metrics.across import credible, pair_terms, prior_figures
from ksched.loop.metrics.pod_series import PodSeries
from ksched.loop.metrics.recent_columns import ColumnsCache, RecentColumns, RecentPod, margins_by_workload
from ksched.loop.metrics.samples import parse_time
from ksched.loop.metrics.settled import SETTLED_EVERY_S, Lookup, SettledPods
from ksched.loop.metrics.workloads import STATUS_RAMPING, WORKLOAD_MEMORY, WorkloadHistory, learn
from ksched.loop.telemetry import Telemetry
from ksched.objects import Obj, meta

log = logging.getLogger(__name__)

# Kubernetes writes condition and creation times to the second, rounded down: a pod shown
# bound at 12:00:00 was bound before 12:00:01. Taken as the end of that second (or when the
# watch showed it, if earlier), so a pod bound just after a sample is not taken for one the
# sample shows.
TIME_RESOLUTION_S = 1.0


@dataclass(frozen=True)
class _Counted:
    """What one metric's estimate counted each recent pod at, at its last cycle (read by the
    ``/status`` server's thread: replaced whole, never edited)."""

    # The estimated resource.
    resource: str
    arrays: RecentColumns
    # The metric's column in ``arrays``.
    column: int
    amounts: npt.NDArray[np.float64]
    sources: npt.NDArray[np.object_]
    known: npt.NDArray[np.float64]


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
    # A learned estimate holds a pod that still ramps up until its warm-up at the most.
    warmup = metric.estimate.warmup_s if metric.estimate.learns else 0.0
    return max(window_s + metric.max_age_s, warmup)


class RecentPods:
    """The pods bound within the horizon, by key (``namespace/name``). Used by the
    scheduling thread only (:class:`ksched.loop.mirror.state.ClusterState`)."""

    def __init__(
        self,
        metrics: Sequence[MetricConfig],
        clock: Callable[[], float] = time.time,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.metrics = tuple(m for m in metrics if m.estimate is not None)
        self._column = {m.name: i for i, m in enumerate(self.metrics)}
        self.clock = clock
        self.telemetry = telemetry
        # Per learning metric (by column), what it remembers across cycles.
        learning = [
            (i, m.estimate)
            for i, m in enumerate(self.metrics)
            if m.estimate is not None and m.estimate.learns
        ]
        self._history = {i: WorkloadHistory(clock()) for i, _ in learning}
        self._series = {i: PodSeries(estimate.scrape_interval_s) for i, estimate in learning}
        # Per learning metric, the workloads' figures weighed against the collective figure, and what they
        # were computed from (the figures' mapping, kept so that its id stays its own).
        self._credible: dict[int, tuple[tuple[Any, ...], object, Mapping[str, WorkloadCalibration]]] = {}
        # Grows when a sample brings a longer window (metrics-server names its own).
        self.horizon_s = max((horizon_s(m, m.window_s()) for m in self.metrics), default=0.0)
        self.pods: dict[str, RecentPod] = {}
        self._by_time: list[tuple[float, str, str]] = []
        self._columns = ColumnsCache(len(self.metrics))
        # Per metric (by name), what its last cycle counted each recent pod at (:meth:`counted_as`).
        self._counted: dict[str, _Counted] = {}
        # Where the pods bound before the horizon are looked up (the cluster state sets it), and
        # per learning metric, the pass through them (:mod:`ksched.loop.metrics.settled`).
        self.settled: Lookup | None = None
        self._settled = {i: SettledPods() for i in self._history}
        # Per learning metric, the pod sample's time, and the pods (key -> uid) a cycle found
        # settled on it (:meth:`_ramping`).
        self._quiet: dict[int, tuple[float, dict[str, str]]] = {}
        # When each workload's (by learning metric's column) replicas were last sent to be
        # revisited (:meth:`pending`).
        self._revisited: LRUCache[tuple[int, str], float] = LRUCache(maxsize=WORKLOAD_MEMORY)
        # When a learning metric's values were last built, which is when it learns
        # (:meth:`~ksched.loop.metrics.load_model.LoadModel.keep_learning`).
        self.taught_at = -math.inf

    @property
    def learns(self) -> bool:
        """Whether a metric learns from the pods it measures."""
        return bool(self._history)

    def __len__(self) -> int:
        return len(self.pods)

    def settled_per_pass(self, pods: int | None) -> None:
        """How many settled pods a pass visits (None: all, as a one-shot dry run does)."""
        for settled in self._settled.values():
            settled.per_pass = pods

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
        self.pods[key] = RecentPod(
            uid, node, bound_at, by_ksched, *self._guesses(key, pod, requests), revision_of(pod or {})
        )
        heapq.heappush(self._by_time, (bound_at, key, uid))
        self._columns.set(key)

    def _workload(self, i: int, pod: Obj) -> str | None:
        """The workload ``pod`` is learned under by the learning metric in column ``i``."""
        estimate = self.metrics[i].estimate
        return workload_of(pod, estimate.workload_label) if estimate is not None else None

    def changed(self, key: str, pod: Obj, requests: CountedRequests, seen: Obj | None = None) -> None:
        """A bound pod changed in place (``seen``: as it was, where known): its requests (it is
        expected to use what it asks now), or its metadata (a ReplicaSet adopted it after its
        bind, a workload label or a declared usage was set), so that it teaches and counts
        under the workload it has now. A settled pod (bound before the horizon) relabelled to
        another workload stops speaking for its old one; the pass through the settled pods
        teaches its new one."""
        current = self.pods.get(key)
        if current is None:
            if seen is not None:
                uid = str(meta(pod).get("uid", ""))
                for i, history in self._history.items():
                    was = self._workload(i, seen)
                    if was is not None and was != self._workload(i, pod):
                        history.moved(was, uid)
            return
        fresh = RecentPod(
            current.uid,
            current.node,
            current.bound_at,
            current.by_ksched,
            *self._guesses(key, pod, requests),
            revision_of(pod),
        )
        if fresh != current:
            self.pods[key] = fresh
            self._columns.set(key)
            # Relabelled to another workload: it no longer speaks for its old one.
            for i, history in self._history.items():
                before, after = current.workloads[i], fresh.workloads[i]
                if before is not None and before != after:
                    history.moved(before, current.uid)

    def pending(self, pod: Obj) -> None:
        """A pod of a workload waits to be placed (a scale-up, a rollout, a replacement): the
        workload's remembered replicas are read again at the next build, whether or not a pass
        through the settled pods is due (:meth:`~ksched.loop.metrics.settled.SettledPods.revisit`;
        once a pass per workload), so that a workload scaled up because its replicas got busy
        counts at what they use now, not at what they used when last visited."""
        now = self.clock()
        for i, history in self._history.items():
            workload = self._workload(i, pod)
            if workload is None:
                continue
            # A wall clock set back since (a negative time since) does not hold it back.
            last = self._revisited.get((i, workload))
            if last is not None and 0 <= now - last < SETTLED_EVERY_S:
                continue
            self._revisited[i, workload] = now
            self._settled[i].revisit(history.live_keys(workload))

    def drop(self, key: str, gone: Obj | None = None) -> None:
        """The pod is gone (deleted, finished, or its bind failed). ``gone``: the pod as it left
        the cluster (deleted or finished), whether recent or settled: what it taught its
        workload then stands as that of a pod that left, which a measured live pod of another
        revision silences (:meth:`~ksched.loop.metrics.workloads.WorkloadHistory.departed`).
        A recent pod that succeeded before its usage settled (a Job's run shorter than settling
        takes) first teaches its workload the highest usage it measured."""
        recent = self.pods.pop(key, None)
        if recent is not None:
            self._columns.left(key)
        uid = str(meta(gone).get("uid", "")) if gone is not None else ""
        # A run that completed before its usage could settle (a short Job's pod): what it used
        # at most speaks for its workload's next runs.
        run = (
            recent
            if recent is not None
            and gone is not None
            and recent.uid == uid
            and (gone.get("status") or {}).get("phase") == "Succeeded"
            else None
        )
        self._unsettle(key)
        for i, series in self._series.items():
            peak = series.forget(key, recent.uid if recent is not None else "")
            workload = run.workloads[i] if run is not None else None
            if run is not None and workload is not None and peak is not None and peak > 0:
                self._history[i].observe(
                    self.clock(),
                    workload,
                    run.uid,
                    run.kinds[i],
                    float(run.amounts[i]),
                    peak,
                    revision=run.revision,
                    key=key,
                )
        if gone is None:
            return
        # And the recent pod of that key, where it was another (its deletion missed).
        uids = {uid} if recent is None else {uid, recent.uid}
        for i, history in self._history.items():
            workload = self._workload(i, gone)
            if workload is not None:
                for gone_uid in uids:
                    history.departed(workload, gone_uid)

    def add_to(
        self,
        snapshot: Snapshot,
        metric: MetricConfig,
        sampled_at: float,
        column: npt.NDArray[np.float64],
        window_s: float | None = None,
        measured: Mapping[str, float] | None = None,
        measured_at: float | None = None,
        caution: npt.NDArray[np.float64] | None = None,
        node_sampled_at: npt.NDArray[np.float64] | None = None,
    ) -> Calibration | None:
        """Add to ``column`` (the metric's value per snapshot row) the share of each recent pod's
        load that the sample taken at ``sampled_at`` does not show (``node_sampled_at``, per
        row: where a row's value was sampled at another time, that time; NaN: ``sampled_at``).
        ``window_s``: the sample's own
        window, where the metric sets none; ``measured``: pods' measured usage (engine units),
        which replaces their estimate, sampled at ``measured_at`` (default: now); ``caution``
        (per row, like ``column``; given where the metric's score reads the mean,
        ``score_by_mean``): where the part of it that is the estimate's ``deviations`` is added
        too. Returns what a learned estimate learned (None where it does not learn)."""
        i = self._column.get(metric.name)
        estimate = metric.estimate
        if i is None or estimate is None:
            return None
        window = metric.window_s() if estimate.window_s is not None or window_s is None else window_s
        self.horizon_s = max(self.horizon_s, horizon_s(metric, window))
        now = self.clock()
        self._prune(now)
        if estimate.learns:
            self.taught_at = now
        if estimate.learns and measured and self.settled is not None:
            self._settled[i].teach(
                now, measured, self.settled, self.pods, self.horizon_s, estimate, self._history[i]
            )
        if snapshot.resources.get(estimate.resource) is None or not self.pods:
            self._counted.pop(metric.name, None)
            if not estimate.learns:
                return None
            stood_in = self._calibration(i, estimate, self._settled[i].stand_in(now, Calibration()), now)
            return replace(stood_in, rising_share=self._series[i].rising_share())
        arrays = self.columns(snapshot)
        bound_at = arrays.bound_at
        at: float | npt.NDArray[np.float64] = sampled_at
        if node_sampled_at is not None and len(arrays.rows):
            own = node_sampled_at[np.maximum(arrays.rows, 0)]
            at = np.where((arrays.rows >= 0) & ~np.isnan(own), own, sampled_at)
        if estimate.legacy:
            weight = np.where(arrays.by_ksched & (bound_at > at), 1.0, 0.0)
        else:
            weight = before_event(bound_at, at, window)
        guesses = arrays.amounts[:, i].astype(np.float64)
        kinds = arrays.kinds[:, i]
        known = np.full(len(guesses), np.nan)
        if measured:
            for j, key in enumerate(arrays.keys):
                value = measured.get(key)
                if value is not None and math.isfinite(value):
                    known[j] = value
        is_known = ~np.isnan(known)
        ramping = np.zeros(len(guesses), dtype=np.bool_)
        reach = known
        held = np.ones(len(guesses))
        calibration = None
        if estimate.learns:
            ramping, reach, held = self._ramping(
                i, estimate, arrays, known, now if measured_at is None else measured_at, now
            )
            teaching = np.where(ramping, np.nan, known)
            requested = guesses[np.isin(kinds, RATIO_KINDS) & (guesses > 0)]
            calibration = self._calibration(
                i, estimate, self._settled[i].stand_in(now, learn(guesses, kinds, teaching)), now, requested
            )
        amounts, spreads, sources, margins = self._expected(i, arrays, guesses, calibration, estimate)
        # What the sample does not show of each pod: its fade over the window; for one still
        # ramping up, the larger of its estimate and what it is climbing to (or a share of that
        # excess, ``held``), less the part of its measured usage the sample shows.
        unseen = weight.copy()
        stable = is_known & ~ramping
        amounts[stable] = known[stable]
        spreads[stable] = 0.0
        margins[stable] = 0.0
        if ramping.any():
            # Held at the larger of its estimate and its reach, the more so the likelier it
            # still ramps (``held``: 1 where its samples show a rise, else the share of pods
            # that showed one at their first chance).
            likely = held[ramping]
            reached = reach[ramping]
            larger = np.maximum(amounts[ramping], reached)
            top = np.maximum(amounts[ramping] + margins[ramping], reached)
            amounts[ramping] = reached + likely * (larger - reached)
            margins[ramping] = likely * (top - larger)
            spreads[ramping] *= likely
            top = amounts[ramping] + margins[ramping]
            shown = np.divide(
                (1.0 - weight[ramping]) * known[ramping], top, out=np.ones_like(top), where=top > 0
            )
            unseen[ramping] = np.maximum(1.0 - shown, weight[ramping])
        rows = arrays.rows
        counted, share = pod_shares(snapshot, estimate.resource, rows, amounts)
        seen = unseen[counted]
        np.add.at(column, rows[counted], metric.load_sign * seen * share)
        if calibration is not None and (estimate.deviations > 0 or margins.any()):
            variance = np.zeros(len(column))
            if estimate.deviations > 0:
                _, spread = pod_shares(snapshot, estimate.resource, rows, spreads)
                missing = estimate.deviations * seen * spread
                np.add.at(variance, rows[counted], missing * missing)
            if margins.any():
                _, margin = pod_shares(snapshot, estimate.resource, rows, margins)
                variance += margins_by_workload(
                    len(column), rows[counted], arrays.pair_index[counted, i], seen * margin
                )
            deviation = metric.load_sign * np.sqrt(variance)
            column += deviation
            if caution is not None:
                caution += deviation
        # What each pod counts at on its own (``/status``, ``explain``): its prior's margin too.
        amounts += margins
        sources[stable] = MEASURED
        sources[ramping] = RAMPING
        self._counted[metric.name] = _Counted(estimate.resource, arrays, i, amounts, sources, known)
        if calibration is None:
            return None
        # Counted as Python strings: numpy sorts an object column by comparing them one by one.
        return replace(
            calibration,
            sources=dict(sorted(Counter(map(str, sources.tolist())).items())),
            ramping=tuple(compress(arrays.keys, ramping.tolist())),
            ramp=tuple(
                (arrays.keys[j], float(amounts[j]), float(known[j]), now - float(bound_at[j]))
                for j in heapq.nsmallest(
                    STATUS_RAMPING, np.flatnonzero(ramping), key=lambda j: float(bound_at[j])
                )
            ),
            next_pod=float(np.quantile(amounts, NEXT_POD_QUANTILE)) if len(amounts) else None,
            rising_share=self._series[i].rising_share(),
        )

    def counted_as(self, key: str) -> list[dict[str, Any]] | None:
        """What each metric's estimate counted the recent pod ``key`` at on its last cycle
        (engine units of its ``resource``), where the count came from (``source``: measured, ramping, workload,
        prior, ...), its workload, what it measured (None: not yet) and how long ago it was
        bound; None where the pod is not a recent one, empty where no cycle counted it yet.
        Safe from another thread."""
        pod = self.pods.get(key)
        if pod is None:
            return None
        out = []
        for name, c in list(self._counted.items()):
            a = c.arrays
            try:
                j = a.keys.index(key)
            except ValueError:
                continue
            if a.uids[j] != pod.uid:
                continue  # counted as another pod of that name
            measured = float(c.known[j])
            out.append(
                {
                    "metric": name,
                    "resource": c.resource,
                    "counts": float(c.amounts[j]),
                    "source": str(c.sources[j]),
                    "workload": a.workloads[j][c.column],
                    "measured": measured if math.isfinite(measured) else None,
                    "boundSecondsAgo": round(self.clock() - pod.bound_at, 1),
                }
            )
        return out

    # -- internals -----------------------------------------------------

    def _guesses(
        self, key: str, pod: Obj | None, requests: CountedRequests
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[str | None, ...], tuple[int, ...]]:
        estimates = [m.estimate for m in self.metrics if m.estimate is not None]
        pairs = [guess(pod or {}, requests, e) for e in estimates]
        for e in estimates:
            self._check_declared(key, pod or {}, e)
        return (
            tuple(a for a, _ in pairs),
            tuple(k for _, k in pairs),
            tuple(workload_of(pod or {}, e.workload_label) if e.learns else None for e in estimates),
            tuple((pod_limit(pod or {}, e.resource) or 0) if e.learns else 0 for e in estimates),
        )

    def _check_declared(self, key: str, pod: Obj, estimate: EstimateConfig) -> None:
        """Log and count a declared expected usage that cannot be read (it is ignored)."""
        if estimate.legacy:
            return
        _, problem = declared_usage(pod, estimate.resource)
        if problem is None:
            return
        log.warning("pod %s: %s; ignored, the pod counts at its estimate", key, problem)
        if self.telemetry is not None:
            self.telemetry.objects_rejected.labels(kind="Pod", reason="invalid_expected_usage").inc()

    def _ramping(
        self,
        i: int,
        estimate: EstimateConfig,
        arrays: RecentColumns,
        known: npt.NDArray[np.float64],
        measured_at: float,
        now: float,
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Which measured recent pods still ramp up, what each measured pod is expected to
        reach (a ramping one: its sample and the rest of its climb, :meth:`PodSeries.climb`),
        and how much of its estimate's excess over that each ramping one is held at: the share
        of pods that showed a rise at their first chance (:meth:`PodSeries.rising_share`; all
        of it before any was judged) where its own samples show no rise
        (:meth:`PodSeries.shows_rise`) and it is not younger than its workload's learned
        warm-up, else all of it. A pod that just stopped teaches its
        workload how long its warm-up took, and each stable one what it uses."""
        history, series = self._history[i], self._series[i]
        ramping = np.zeros(len(known), dtype=np.bool_)
        reach = known.copy()
        held = np.ones(len(known))
        share = series.rising_share()
        # Live: a warm-up a pod teaches below shows for the next pods of its workload.
        warmups = history.warmups(now)
        cap = estimate.warmup_s
        # The pods found settled on this sample by an earlier cycle: this one can tell nothing
        # new of them (the sample is the same), so they are passed over.
        quiet = self._quiet.get(i)
        if quiet is None or quiet[0] != measured_at:
            quiet = self._quiet[i] = (measured_at, {})
        settled = quiet[1]
        # Read as Python values once: a cycle visits every measured recent pod.
        bound_at, values = arrays.bound_at.tolist(), known.tolist()
        kinds, amounts = arrays.kinds[:, i].tolist(), arrays.amounts[:, i].tolist()
        keys, uids, workloads = arrays.keys, arrays.uids, arrays.workloads
        for j in np.flatnonzero(~np.isnan(known)).tolist():
            key, uid = keys[j], uids[j]
            if settled.get(key) == uid:
                continue
            workload, value = workloads[j][i], values[j]
            age = now - bound_at[j]
            warmup = None if workload is None else warmups.get(workload)
            rising, warmed, fresh = series.ramping(key, uid, measured_at, value, age, warmup, cap)
            if rising:
                ramping[j] = True
                reach[j] += series.climb(key, uid, age, warmup, cap)
                young = warmup is not None and age < warmup
                if share is not None and not young and not series.shows_rise(key, uid):
                    held[j] = share
                continue
            # Not ramping is settled for good (:meth:`PodSeries.ramping`).
            settled[key] = uid
            if workload is None or not fresh:
                continue
            if warmed is not None:
                history.warmed(now, workload, warmed)
            history.observe(
                now,
                workload,
                uid,
                kinds[j],
                float(amounts[j]),
                value,
                revision=arrays.revisions[j],
                key=key,
            )
        return ramping, reach, held

    def _calibration(
        self,
        i: int,
        estimate: EstimateConfig,
        cluster: Calibration,
        now: float,
        requested: npt.NDArray[np.float64] | None = None,
    ) -> Calibration:
        """The cluster-wide figures with each workload's and the prior (``estimate.prior``);
        ``requested``: the recent pods' guesses from their requests (a BestEffort pod's prior
        before anything is measured)."""
        own = self._history[i].figures(now)
        key = (id(own), cluster.ratio, cluster.best_effort)
        cached = self._credible.get(i)
        if cached is None or cached[0] != key:
            # Each workload's figures weighed against the collective ones: computed again only
            # when a workload taught something or the cluster-wide figures moved.
            cached = self._credible[i] = (key, own, credible(own, cluster.ratio, cluster.best_effort))
        workloads = cached[2]
        mode, value = estimate.prior
        prior = prior_figures(
            cluster, workloads, value if mode == "quantile" else 0.9, requested, estimate.initial_spread
        )
        if mode == "ratio":
            # A fixed ratio, with the spread within workloads where any taught one, else the
            # cluster-wide spread, else (nothing measured yet) the initial one.
            fallback = cluster.ratio_sd if cluster.ratio is not None else estimate.initial_spread
            sd = prior.ratio_sd if prior.ratio is not None else fallback
            prior = prior._replace(ratio=value, ratio_sd=sd, ratio_typical=value)
        return prior.onto(cluster, workloads)

    def _expected(
        self,
        i: int,
        arrays: RecentColumns,
        guesses: npt.NDArray[np.float64],
        calibration: Calibration | None,
        estimate: EstimateConfig,
    ) -> tuple[
        npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.object_], npt.NDArray[np.float64]
    ]:
        """Each pod's expected usage, its standard deviation, where its figures came from
        (:func:`ksched.engine.estimate.terms`, as for a pod being placed) and its prior's margin.

        A pod of a workload without history counts at the prior, a high quantile of what the
        learned workloads use: that is what it may use, not what it is expected to. It is
        returned as the typical workload's figure (the mean) and the margin up to the quantile,
        which :meth:`add_to` sums per node linearly within a workload (its replicas share one
        figure) and in quadrature across workloads (independent of each other), so that one
        such pod counts at the quantile, and many of different workloads on a node do not
        each count at theirs: the quantile of their sum is far below the sum of their
        quantiles."""
        pairs, index = arrays.pairs[i], arrays.pair_index[:, i]
        prior, spread = estimate.prior[0], estimate.initial_spread
        chosen, chosen_sources, chosen_typical = pair_terms(calibration, pairs, prior, spread)
        table = chosen[index]
        # A learned figure never takes a pod past its limit; a guess as configured stands.
        limits = arrays.limits[:, i].astype(np.float64) if calibration is not None else np.zeros(len(guesses))
        scale, offset, sd_scale, sd_offset, at_limit = (table[:, k] for k in range(5))
        mean, sd = expected(
            guesses, limits, scale, offset, sd_scale, sd_offset, at_limit, deviations=estimate.deviations
        )
        mean = np.asarray(mean, dtype=np.float64)
        sources = np.array(chosen_sources or [""], dtype=object)[index]
        # What each pod counted at a prior is expected to use, as the pod being placed is scored
        # (NaN: not at a prior, or at its limit, an upper bound without margin).
        typical = (chosen_typical if len(chosen_typical) else np.full(1, np.nan))[index]
        from_request = np.isin(arrays.kinds[:, i], RATIO_KINDS).astype(np.float64)
        centre = typical_usage(guesses, limits, typical, at_limit, from_request)
        centre = np.where(limits > 0, np.minimum(centre, limits), centre)
        margins = np.where(centre < mean, mean - centre, 0.0)
        return mean - margins, np.asarray(sd, dtype=np.float64), sources, margins

    def _prune(self, now: float) -> None:
        oldest = now - self.horizon_s
        heap = self._by_time
        while heap and heap[0][0] < oldest:
            bound_at, key, uid = heapq.heappop(heap)
            current = self.pods.get(key)
            if current is not None and current.uid == uid and current.bound_at == bound_at:
                del self.pods[key]
                self._columns.left(key)
                self._unsettle(key)
                for series in self._series.values():
                    series.forget(key, uid)

    def _unsettle(self, key: str) -> None:
        """The pod ``key`` left, and its series with it: were it tracked again, it is read
        anew, not passed over as settled (:meth:`_ramping`)."""
        for _, settled in self._quiet.values():
            settled.pop(key, None)

    def columns(self, snapshot: Snapshot) -> RecentColumns:
        """The recent pods as columns, brought up to date from those that changed."""
        return self._columns.of(self.pods, snapshot.index)
