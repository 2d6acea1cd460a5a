"""What a learned estimate remembers between cycles: each workload's measured pods.

Owns, for one metric's estimate, :class:`WorkloadHistory`, fed by
:meth:`ksched.loop.metrics.recent_pods.RecentPods.add_to` as pod usage samples arrive: per
workload (:func:`ksched.engine.estimate.workload_of`), the last measured usage of up to
``POD_MEMORY`` of its stable pods (whether a pod still ramps up is
:class:`ksched.loop.metrics.pod_series.PodSeries`'s call) and how long its pods took to warm
up, kept after the pods left the recent window so that a herd scaled up later is estimated
from its history. Bounded: at most ``WORKLOAD_MEMORY`` workloads, least recently taught first
out, each forgotten ``WORKLOAD_TTL_S`` after it last taught anything. Also the figures learned
from them, each workload's own (weighed against the others' and made into the prior by
:mod:`ksched.loop.metrics.across`), and ``/status``'s view.

Nothing here reads the cluster state or the clock: times come from the caller.
"""

from __future__ import annotations

import statistics
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
from cachetools import TTLCache

from ksched.config.estimate import (
    LEARN_MIN_PODS,
    Calibration,
    WorkloadCalibration,
)
from ksched.engine.estimate import BEST_EFFORT, FROM_REQUEST, LIMITED, RATIO_KINDS
from ksched.loop.metrics.across import FigureColumns, OwnFigures, most_measured

# Workloads remembered at once, and how long one is remembered after it last taught.
WORKLOAD_MEMORY = 4096
WORKLOAD_TTL_S = 3600.0
# Measured pods remembered per workload: enough for a steady figure; the oldest make way for a
# rolling update's new ones.
POD_MEMORY = 50
# Warm-ups remembered per workload (their median is the workload's warm-up).
WARMUP_MEMORY = 20
# ``/status``: the learned workloads shown (those with the most measured pods), and the
# ramping pods named.
STATUS_WORKLOADS = 20
STATUS_RAMPING = 20


class _Pod(NamedTuple):
    kind: int
    guess: float
    used: float
    # The revision of the workload's template it was made from (:func:`revision_of`).
    revision: str | None = None
    # False once the pod is gone (:meth:`WorkloadHistory.departed`).
    live: bool = True
    # Its ``namespace/name``, by which its usage is looked up again (:meth:`WorkloadHistory.live_keys`).
    key: str | None = None


@dataclass
class _Taught:
    # uid -> what the pod taught, oldest first.
    pods: OrderedDict[str, _Pod] = field(default_factory=OrderedDict)
    warmups: deque[float] = field(default_factory=lambda: deque(maxlen=WARMUP_MEMORY))
    figures: WorkloadCalibration | None = None


class _Remembered(TTLCache[str, _Taught]):
    """The remembered workloads (:data:`WORKLOAD_MEMORY` at most, each for
    :data:`WORKLOAD_TTL_S` after it last taught), telling ``forgotten`` of each it lets go, so
    that what is kept beside it (each workload's figures and warm-up) goes with it."""

    def __init__(self, timer: Callable[[], float], forgotten: Callable[[str], None]) -> None:
        super().__init__(maxsize=WORKLOAD_MEMORY, ttl=WORKLOAD_TTL_S, timer=timer)
        self._forgotten = forgotten

    def expire(self, time: float | None = None) -> list[tuple[str, _Taught]]:
        expired = list(super().expire(time))
        for workload, _ in expired:
            self._forgotten(workload)
        return expired

    def popitem(self) -> tuple[str, _Taught]:
        workload, taught = super().popitem()
        self._forgotten(workload)
        return workload, taught


class WorkloadHistory:
    """What each workload's stable pods taught, across cycles (see the module's docstring)."""

    def __init__(self, now: float = 0.0) -> None:
        self._now = now
        self._taught = _Remembered(lambda: self._now, self._forgotten)
        # The figures by workload and as columns, brought up to date at each build, and the
        # copy last handed out.
        self._columns = FigureColumns()
        self._figures = self._columns.snapshot()
        # The workloads taught, moved or departed from since the figures were last built (in
        # the order they were first), and those forgotten since: the next build redoes those.
        self._changed: dict[str, None] = {}
        self._left: set[str] = set()
        # Each remembered workload's warm-up (the median of its last ones), read once a measured
        # pod a cycle.
        self._warmups: dict[str, float] = {}

    def observe(
        self,
        now: float,
        workload: str,
        uid: str,
        kind: int,
        guess: float,
        used: float,
        displace: bool = True,
        revision: str | None = None,
        key: str | None = None,
    ) -> None:
        """A stable pod of ``workload`` (made from its template's ``revision``; ``key``: its
        ``namespace/name``) guessed at ``guess`` measured ``used`` (engine units). Without
        ``displace``, a workload not remembered yet is only taken where there is room: it
        pushes out no other."""
        if kind == LIMITED:
            kind = FROM_REQUEST  # its guess is its request too: it teaches the ratio
        if kind not in (FROM_REQUEST, BEST_EFFORT) or (kind == FROM_REQUEST and guess <= 0):
            return
        if not displace and workload not in self._taught and len(self._taught) >= WORKLOAD_MEMORY:
            return
        taught = self._entry(now, workload)
        taught.pods.pop(uid, None)
        taught.pods[uid] = _Pod(kind, guess, used, revision, key=key)
        while len(taught.pods) > POD_MEMORY:
            taught.pods.popitem(last=False)
        taught.figures = None

    def departed(self, workload: str, uid: str) -> None:
        """The pod ``uid`` of ``workload`` is gone (deleted or finished): what it taught stands
        while it was made from the revision of a live pod that taught that kind of guess, or
        while none did (:func:`_speaking`), so that a rolling update's old pods stop speaking for
        the workload once its new ones are measured, while a workload scaled down, a CronJob's
        finished runs and one scaled to zero keep their history. Its time to live is not
        renewed: a pod leaving teaches nothing."""
        taught = self._taught.get(workload)
        pod = taught.pods.get(uid) if taught is not None else None
        if taught is None or pod is None or not pod.live:
            return
        taught.pods[uid] = pod._replace(live=False)
        taught.figures = None
        self._changed[workload] = None

    def moved(self, workload: str, uid: str) -> None:
        """The pod ``uid`` now belongs to another workload (relabelled): it no longer speaks
        for ``workload`` at all."""
        taught = self._taught.get(workload)
        if taught is not None and taught.pods.pop(uid, None) is not None:
            taught.figures = None
            self._changed[workload] = None

    def live_keys(self, workload: str) -> list[str]:
        """The ``namespace/name`` of each remembered pod of ``workload`` still running, by
        which what they use now can be read again."""
        taught = self._taught.get(workload)
        if taught is None:
            return []
        return [p.key for p in taught.pods.values() if p.live and p.key is not None]

    def warmed(self, now: float, workload: str, seconds: float) -> None:
        """A pod of ``workload`` took ``seconds`` after its bind to use a stable amount."""
        taught = self._entry(now, workload)
        taught.warmups.append(seconds)
        taught.figures = None
        self._warmups[workload] = statistics.median(taught.warmups)

    def warmups(self, now: float) -> Mapping[str, float]:
        """How long each remembered workload's pods took to warm up (the median of the last
        ones), as of ``now``: a live view, which a warm-up taught later shows."""
        self._now = now
        self._taught.expire()
        return self._warmups

    def figures(self, now: float) -> OwnFigures:
        """Each remembered workload's figures, by workload and as columns (a new mapping
        whenever they changed: readers on other threads keep the one they hold). Only the
        workloads that changed or were forgotten since the last mapping are visited, in the
        order the cache holds them."""
        self._now = now
        self._taught.expire()
        if self._changed or self._left:
            for workload in self._left:
                self._columns.drop(workload)
            for workload in self._changed:
                taught = self._taught.get(workload)
                if taught is None:
                    self._columns.drop(workload)
                    continue
                if taught.figures is None:
                    taught.figures = _figures(taught)
                self._columns.set(workload, taught.figures)
            self._figures = self._columns.snapshot()
            self._changed.clear()
            self._left.clear()
        return self._figures

    def _forgotten(self, workload: str) -> None:
        """The cache let ``workload`` go (its time to live ran out, or it made room): taught
        again, it is marked changed then, where the cache puts it (last)."""
        self._left.add(workload)
        self._changed.pop(workload, None)
        self._warmups.pop(workload, None)

    def _entry(self, now: float, workload: str) -> _Taught:
        self._now = now
        taught = self._taught.get(workload)
        if taught is None:
            taught = _Taught()
        # Set again: the workload is the most recently taught, and its time to live restarts.
        self._taught[workload] = taught
        self._changed[workload] = None
        return taught


def _figures(taught: _Taught) -> WorkloadCalibration:
    """The workload's own figures, from as few as one measured pod (:func:`~ksched.loop.metrics.across.credible` weighs
    how far they are trusted): of each kind of guess, from the pods that speak for it
    (:func:`_speaking`: a rolling update's departed old revision does not)."""
    from_request = _speaking(taught, FROM_REQUEST)
    guesses = np.array([p.guess for p in from_request], dtype=np.float64)
    ratio = ratio_figures(guesses, np.array([p.used for p in from_request], dtype=np.float64), min_pods=1)
    best = mean_figures(
        np.array([p.used for p in _speaking(taught, BEST_EFFORT)], dtype=np.float64), min_pods=1
    )
    warmup = statistics.median(taught.warmups) if taught.warmups else None
    request = float(guesses.mean()) if len(guesses) else 0.0
    return WorkloadCalibration(*ratio, *best, warmup_s=warmup, ratio_request=request)


def _speaking(taught: _Taught, kind: int) -> list[_Pod]:
    """The pods whose figures stand for the workload's guesses of ``kind``: where any live pod
    taught it, those of the live pods' revisions (a rolling update's departed old pods fall
    silent once its new ones are measured; a scale-down's do not); else every remembered one
    (its history)."""
    pods = [p for p in taught.pods.values() if p.kind == kind]
    revisions = {p.revision for p in pods if p.live}
    return [p for p in pods if p.revision in revisions] if revisions else pods


def ratio_figures(
    guessed: npt.NDArray[np.float64], used: npt.NDArray[np.float64], min_pods: int = LEARN_MIN_PODS
) -> tuple[float | None, float, int]:
    """Measured over guessed usage (the ratio of the sums) and the spread of each pod's ratio
    around it weighted by its guess, so that a pod requesting 1m and using a core does not make
    every guess a thousand times too small; None below ``min_pods`` pods."""
    n = len(guessed)
    if n < max(1, min_pods):
        return None, 0.0, n
    mean = float(used.sum() / guessed.sum())
    spread = float(np.sqrt((guessed * (used / guessed - mean) ** 2).sum() / guessed.sum()))
    return mean, spread, n


def mean_figures(
    used: npt.NDArray[np.float64], min_pods: int = LEARN_MIN_PODS
) -> tuple[float | None, float, int]:
    """The mean measured usage and its spread; None below ``min_pods`` pods."""
    n = len(used)
    if n < max(1, min_pods):
        return None, 0.0, n
    return float(used.mean()), float(used.std()), n


def _taught_by(figure: float | None, settled: bool) -> str | None:
    """Which pods taught a cluster-wide figure (``/status``): none, the recent or the settled."""
    return None if figure is None else "settled" if settled else "recent"


def learned_json(resource: str | None, c: Calibration) -> dict[str, Any]:
    """What a learned estimate learned at the last cycle, for ``/status``: the measured over
    guessed usage of pods guessed from requests (summed) and its spread, the mean measured
    usage of BestEffort pods (engine units: millicores for cpu, else the resource's own) and
    its spread, how many measured pods each figure is from and which pods taught it
    (``ratioFrom``, ``bestEffortFrom``: ``recent``, the pods bound within the recent window,
    or ``settled``, those bound before it standing in while too few recent ones are measured;
    null with no figure) (a cluster-wide figure is null below ``LEARN_MIN_PODS``; a workload's
    is weighed against the collective figure,
    :func:`~ksched.loop.metrics.across.credible`); the prior a pod of a workload without history counts at (``ratioTypical``
    and ``bestEffortTypical``: the typical workload's figures, which the score counts it at; ``bestEffortFrom``: what
    taught the BestEffort prior: ``best-effort pods``, else ``requesting pods``); how the
    recent pods are counted (``sources``: pods by where their estimate came from, ``ramping``:
    the first of those still ramping up, ``rampingPods``: for the longest bound of them, what
    each counts at and measures, in engine units, and seconds since its bind); and the
    ``STATUS_WORKLOADS`` workloads with the most measured pods, with their figures, the mean
    guess their ratio is from (``ratioRequest``, engine units: one that requests next to
    nothing is left out of the prior, :meth:`~ksched.loop.metrics.across.FigureTable.sized`) and warm-up (seconds)."""
    return {
        "resource": resource,
        "ratio": c.ratio,
        "ratioStdDev": c.ratio_sd,
        "ratioPods": c.ratio_pods,
        "ratioFrom": _taught_by(c.ratio, c.ratio_settled),
        "bestEffort": c.best_effort,
        "bestEffortStdDev": c.best_effort_sd,
        "bestEffortPods": c.best_effort_pods,
        "bestEffortFrom": _taught_by(c.best_effort, c.best_effort_settled),
        "prior": {
            "ratio": c.prior_ratio,
            "ratioStdDev": c.prior_ratio_sd,
            "ratioTypical": c.prior_ratio_typical,
            "bestEffort": c.prior_best_effort,
            "bestEffortStdDev": c.prior_best_effort_sd,
            "bestEffortTypical": c.prior_best_effort_typical,
            "bestEffortFrom": c.prior_best_effort_from,
        },
        "sources": dict(c.sources),
        "ramping": list(c.ramping[:STATUS_RAMPING]),
        "risingShare": None if c.rising_share is None else round(c.rising_share, 3),
        "rampingPods": [
            {"pod": key, "counts": counts, "measured": measured, "age": round(age, 1)}
            for key, counts, measured, age in c.ramp
        ],
        "workloadCount": len(c.workloads),
        "workloads": [
            {
                "workload": workload,
                "ratio": w.ratio,
                "ratioStdDev": w.ratio_sd,
                "ratioPods": w.ratio_pods,
                "ratioRequest": w.ratio_request,
                "bestEffort": w.best_effort,
                "bestEffortStdDev": w.best_effort_sd,
                "bestEffortPods": w.best_effort_pods,
                "warmup": w.warmup_s,
            }
            for workload, w in most_measured(c.workloads, STATUS_WORKLOADS)
        ],
    }


def learn(
    guesses: npt.NDArray[np.float64], kinds: npt.NDArray[np.int8], known: npt.NDArray[np.float64]
) -> Calibration:
    """What the measured pods (``known`` not NaN) say of the guesses, cluster-wide: for pods
    guessed from their requests, measured over guessed usage
    (:func:`~ksched.loop.metrics.workloads.ratio_figures`); for BestEffort pods, the mean and
    spread of their measured usage. Each once at least ``LEARN_MIN_PODS`` of its kind are
    measured."""
    is_known = ~np.isnan(known)
    from_request = is_known & np.isin(kinds, RATIO_KINDS) & (guesses > 0)
    best_effort = is_known & (kinds == BEST_EFFORT)
    ratio = ratio_figures(guesses[from_request], known[from_request])
    best = mean_figures(known[best_effort])
    return Calibration(*ratio, *best)
