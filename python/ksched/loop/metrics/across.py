"""What the workloads' own figures say together: each workload's figures weighed against the
collective ones by how far its few measured pods can be trusted (:func:`credible`), and the
prior a pod of a workload without history counts at (:func:`prior_figures`).

The figures are held as numpy columns, one row a workload (:class:`FigureTable`), which
:class:`FigureColumns` keeps up to date from the workloads that changed, so that a cycle's
weighing costs a few array operations, not a pass over every remembered workload in Python:
it is redone whenever one workload taught or the cluster-wide figures moved, which in a
scale-up is every cycle. A weighed workload's :class:`~ksched.config.estimate.WorkloadCalibration`
is made only when a pod of it is counted (:class:`Weighed`).
"""

from __future__ import annotations

import heapq
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from ksched.config.estimate import LEARN_MIN_PODS, Calibration, Learned, WorkloadCalibration
from ksched.engine.estimate import BEST_EFFORT, RATIO_KINDS, WORKLOAD, Terms, terms

# Buhlmann's credibility constant (:func:`credibility_k`) until the workloads measured can
# estimate it: a workload with one measured pod is trusted half; and its floor: one measured
# pod is trusted at most two thirds.
DEFAULT_CREDIBILITY_K = 1.0
MIN_CREDIBILITY_K = 0.5
# A workload whose pods request less than this share of the median workload's is left out of
# the ratios across workloads (:meth:`FigureTable.sized`): its ratio is usage over a request too
# small to say anything (an agent requesting 10m and using 80m reads 8).
SMALL_REQUEST_SHARE = 0.1

Column = npt.NDArray[np.float64]
# The columns of a table, in the order of :class:`FigureTable`'s fields after ``rows``.
_FIELDS = 7
_RATIO, _RATIO_SD, _RATIO_PODS, _REQUEST, _BEST, _BEST_SD, _BEST_PODS = range(_FIELDS)
# A row no workload holds: no figure (NaN), no pods, no request.
_EMPTY = (np.nan, 0.0, 0.0, 0.0, np.nan, 0.0, 0.0)


@dataclass(frozen=True)
class FigureTable:
    """Workloads' figures as columns: ``rows`` maps each workload to its row; a figure a
    workload has none of is NaN. Rows no workload holds are empty (``_EMPTY``). Never
    changed once made: readers on other threads may hold it."""

    rows: Mapping[str, int]
    data: npt.NDArray[np.float64]

    @classmethod
    def of(cls, workloads: Mapping[str, WorkloadCalibration]) -> FigureTable:
        data = np.array([_row(w) for w in workloads.values()], dtype=np.float64).reshape(-1, _FIELDS)
        return cls({name: i for i, name in enumerate(workloads)}, np.ascontiguousarray(data.T))

    @property
    def ratio(self) -> Column:
        return self._column(_RATIO)

    @property
    def ratio_sd(self) -> Column:
        return self._column(_RATIO_SD)

    @property
    def ratio_pods(self) -> Column:
        return self._column(_RATIO_PODS)

    @property
    def request(self) -> Column:
        """The mean guess of the pods each workload's ratio is from (``ratio_request``)."""
        return self._column(_REQUEST)

    @property
    def best_effort(self) -> Column:
        return self._column(_BEST)

    @property
    def best_effort_sd(self) -> Column:
        return self._column(_BEST_SD)

    @property
    def best_effort_pods(self) -> Column:
        return self._column(_BEST_PODS)

    def _column(self, field: int) -> Column:
        column: Column = self.data[field]
        return column

    def sized(self) -> npt.NDArray[np.bool_]:
        """The workloads with a ratio whose pods request at least ``SMALL_REQUEST_SHARE`` of
        the median such workload's: those the prior's quantile, typical figure and spread, the
        credibility constant and the collective mean are taken over. A workload left out still
        counts at its own figures."""
        has = ~np.isnan(self.ratio)
        if not has.any():
            return has
        median = float(np.median(self.request[has]))
        return has & (self.request >= SMALL_REQUEST_SHARE * median)


def _row(w: WorkloadCalibration) -> tuple[float, ...]:
    return (
        np.nan if w.ratio is None else w.ratio,
        w.ratio_sd,
        w.ratio_pods,
        w.ratio_request,
        np.nan if w.best_effort is None else w.best_effort,
        w.best_effort_sd,
        w.best_effort_pods,
    )


class FigureColumns:
    """Every remembered workload's own figures, by workload (in the order first set) and as
    columns, set and dropped one workload at a time; :meth:`snapshot` copies both for readers.
    A dropped workload's row is reused."""

    def __init__(self) -> None:
        self._figures: dict[str, WorkloadCalibration] = {}
        self._rows: dict[str, int] = {}
        self._free: list[int] = []
        self._data = np.empty((_FIELDS, 0), dtype=np.float64)

    def set(self, workload: str, figures: WorkloadCalibration) -> None:
        self._figures[workload] = figures
        row = self._rows.get(workload)
        if row is None:
            row = self._rows[workload] = self._free.pop() if self._free else self._grow()
        self._data[:, row] = _row(figures)

    def drop(self, workload: str) -> None:
        self._figures.pop(workload, None)
        row = self._rows.pop(workload, None)
        if row is not None:
            self._data[:, row] = _EMPTY
            self._free.append(row)

    def table(self) -> FigureTable:
        used = len(self._rows) + len(self._free)
        return FigureTable(dict(self._rows), self._data[:, :used].copy())

    def snapshot(self) -> OwnFigures:
        return OwnFigures(dict(self._figures), self.table())

    def _grow(self) -> int:
        row = len(self._rows) + len(self._free)
        if row == self._data.shape[1]:
            grown = np.empty((_FIELDS, max(64, 2 * row)), dtype=np.float64)
            grown[:, :row] = self._data
            self._data = grown
        return row


class Tabled(Mapping[str, WorkloadCalibration]):
    """Workloads' figures by workload, with the same figures as columns (``table``)."""

    table: FigureTable

    @abstractmethod
    def __getitem__(self, workload: str) -> WorkloadCalibration: ...


class OwnFigures(Tabled):
    """Each remembered workload's own figures (:meth:`~ksched.loop.metrics.workloads.WorkloadHistory.figures`)."""

    def __init__(self, figures: dict[str, WorkloadCalibration], table: FigureTable) -> None:
        self.figures = figures
        self.table = table

    def __getitem__(self, workload: str) -> WorkloadCalibration:
        return self.figures[workload]

    def __iter__(self) -> Iterator[str]:
        return iter(self.figures)

    def __len__(self) -> int:
        return len(self.figures)

    def __contains__(self, workload: object) -> bool:
        return workload in self.figures


class Weighed(Tabled):
    """Each workload's figures as a pod of it counts (:func:`credible`): ``table`` holds them
    weighed; a workload's :class:`WorkloadCalibration` is made the first time it is read."""

    def __init__(self, own: Mapping[str, WorkloadCalibration], table: FigureTable) -> None:
        self._own = own
        self.table = table
        self._made: dict[str, WorkloadCalibration] = {}

    def __getitem__(self, workload: str) -> WorkloadCalibration:
        made = self._made.get(workload)
        if made is None:
            w, row, data = self._own[workload], self.table.rows[workload], self.table.data
            made = WorkloadCalibration(
                _figure(data[_RATIO, row]),
                float(data[_RATIO_SD, row]),
                w.ratio_pods,
                _figure(data[_BEST, row]),
                float(data[_BEST_SD, row]),
                w.best_effort_pods,
                warmup_s=w.warmup_s,
                ratio_request=w.ratio_request,
            )
            # Two threads may make it at once: they make the same figures.
            self._made[workload] = made
        return made

    def get(self, workload: str, default: WorkloadCalibration | None = None) -> WorkloadCalibration | None:  # type: ignore[override]
        return self[workload] if workload in self._own else default

    def __iter__(self) -> Iterator[str]:
        return iter(self._own)

    def __len__(self) -> int:
        return len(self._own)

    def __contains__(self, workload: object) -> bool:
        return workload in self._own


def _figure(value: np.float64) -> float | None:
    return None if np.isnan(value) else float(value)


def table_of(workloads: Mapping[str, WorkloadCalibration]) -> FigureTable:
    return workloads.table if isinstance(workloads, Tabled) else FigureTable.of(workloads)


def most_measured(
    workloads: Mapping[str, WorkloadCalibration], count: int
) -> list[tuple[str, WorkloadCalibration]]:
    """The ``count`` workloads with the most measured pods (both kinds together), most first and
    in the mapping's order where tied, as ``heapq.nlargest`` would take them; from a table's
    columns where it has one, so that only those ``count`` are read (a :class:`Weighed` mapping
    makes a workload's figures on its first read: ``/status`` would otherwise make them all)."""
    if not isinstance(workloads, Tabled):
        return heapq.nlargest(
            count, workloads.items(), key=lambda item: item[1].ratio_pods + item[1].best_effort_pods
        )
    table = workloads.table
    names = list(workloads)
    rows = np.fromiter((table.rows[name] for name in names), dtype=np.intp, count=len(names))
    pods = table.ratio_pods[rows] + table.best_effort_pods[rows]
    # A stable sort of the negated counts keeps the mapping's order among equal ones.
    return [(names[j], workloads[names[j]]) for j in np.argsort(-pods, kind="stable")[:count].tolist()]


def credible(
    workloads: Mapping[str, WorkloadCalibration], ratio: float | None, best_effort: float | None
) -> Weighed:
    """Each workload's figures as a pod of it counts: its own weighed against the collective
    figure (``ratio``, ``best_effort``: the cluster-wide ones, else the pods-weighted mean of the
    workloads') by how many of its pods were measured (:func:`credibility_k`), with a spread
    weighed alike between its own and the spread within workloads. So a workload counts at its
    own figures from its first measured pod, as far as one pod can be trusted, and a herd of a
    workload with three measured replicas counts at nearly what they use. The ratios' collective
    figures leave out the workloads that request next to nothing (:meth:`FigureTable.sized`)."""
    own = table_of(workloads)
    data = own.data.copy()
    data[_RATIO], data[_RATIO_SD] = _weighed(own.ratio, own.ratio_sd, own.ratio_pods, ratio, own.sized())
    data[_BEST], data[_BEST_SD] = _weighed(
        own.best_effort, own.best_effort_sd, own.best_effort_pods, best_effort, None
    )
    return Weighed(workloads, FigureTable(own.rows, data))


def _weighed(
    figure: Column,
    sd: Column,
    pods: Column,
    collective: float | None,
    pooled: npt.NDArray[np.bool_] | None,
) -> tuple[Column, Column]:
    """One figure of each workload (figure, spread, pods) weighed against ``collective`` (else
    the pods-weighted mean of the workloads'), the collective figures taken over the workloads
    in ``pooled`` (None: all that have the figure)."""
    has = ~np.isnan(figure)
    learned = has if pooled is None else has & pooled
    f, s, n = figure[learned], sd[learned], pods[learned]
    if collective is None and n.sum() > 0:
        collective = float((f * n).sum() / n.sum())
    k, within = credibility_k(f, s, n), _within(s, n)
    # One pod has no spread of its own: its replicas are taken to scatter as other workloads' do.
    around = sd if within is None else np.full_like(sd, within)
    spread = np.where(pods >= 2, sd, around)
    if collective is None:
        weighed, weighed_sd = figure, spread
    else:
        z = pods / (pods + k)
        weighed = z * figure + (1.0 - z) * collective
        weighed_sd = np.sqrt(z * spread * spread + (1.0 - z) * around * around)
    counted = has & (pods >= 1)
    return np.where(counted, weighed, np.nan), np.where(counted, weighed_sd, 0.0)


def _within(sd: Column, pods: Column) -> float | None:
    """The spread of pods around their own workload's figure, over the workloads with two
    measured pods or more (one pod has no spread of its own): each workload's spread is over its
    own pods (``pods``), so the pooled variance divides by ``pods - 1`` a workload to be
    unbiased. None where no workload has two."""
    two = pods >= 2
    freedom = float((pods[two] - 1.0).sum())
    if not freedom:
        return None
    return float(np.sqrt((pods[two] * sd[two] * sd[two]).sum() / freedom))


def credibility_k(figure: Column, sd: Column, pods: Column) -> float:
    """Buhlmann's credibility constant for one figure across workloads (each one's figure,
    spread and measured pods): the variance of a pod around its workload's figure over the
    variance of the workloads' figures around each other (less what their own few pods add to
    it). A workload with ``n`` measured pods is trusted ``n / (n + k)``: where its replicas agree
    and workloads differ, one pod says most; where they scatter as much as workloads do, it
    takes many. Between ``MIN_CREDIBILITY_K`` (one pod is never trusted whole: it may have been
    measured idle) and ``LEARN_MIN_PODS`` (a workload with that many pods is trusted at least
    half); ``DEFAULT_CREDIBILITY_K`` until two workloads, one of them with two pods, are
    measured."""
    within = _within(sd, pods)
    if within is None or len(figure) < 2:
        return DEFAULT_CREDIBILITY_K
    noise = float(np.mean(within * within / pods))
    between = float(figure.var(ddof=1)) - noise
    if between <= 0.0:
        return float(LEARN_MIN_PODS)
    return min(max(within * within / between, MIN_CREDIBILITY_K), float(LEARN_MIN_PODS))


class Prior(NamedTuple):
    """How a pod of a workload without enough history counts (:func:`prior_figures`): the
    cautious figure and the spread within workloads, per kind of guess, and the typical
    workload's figure (the mean over the learned workloads), which the metric's score counts
    a pod being placed at. None where no workload taught that kind."""

    ratio: float | None
    ratio_sd: float
    ratio_typical: float | None
    best_effort: float | None
    best_effort_sd: float
    best_effort_typical: float | None
    # What taught the BestEffort figures (:func:`prior_figures`): BestEffort pods
    # (``PRIOR_FROM_BEST_EFFORT``), else the requesting pods (``PRIOR_FROM_REQUESTS``); None
    # without figures.
    best_effort_from: str | None = None

    def onto(self, cluster: Calibration, workloads: Mapping[str, WorkloadCalibration]) -> Calibration:
        """The cluster-wide figures ``cluster`` with each workload's (``workloads``) and this
        prior: what a cycle's estimate counts by."""
        return replace(
            cluster,
            workloads=workloads,
            prior_ratio=self.ratio,
            prior_ratio_sd=self.ratio_sd,
            prior_ratio_typical=self.ratio_typical,
            prior_best_effort=self.best_effort,
            prior_best_effort_sd=self.best_effort_sd,
            prior_best_effort_typical=self.best_effort_typical,
            prior_best_effort_from=self.best_effort_from,
        )


PRIOR_FROM_BEST_EFFORT = "best-effort pods"
PRIOR_FROM_REQUESTS = "requesting pods"


def prior_figures(
    cluster: Learned,
    workloads: Mapping[str, WorkloadCalibration],
    quantile: float,
    requested: npt.NDArray[np.float64] | None = None,
    spread: float = 0.0,
) -> Prior:
    """How a pod of a workload without enough history counts: the ``quantile`` of the learned
    workloads' ratios (and BestEffort means), never below the cluster-wide figure, with the
    spread *within* workloads (the pods-weighted root mean square of theirs): the spread of the
    cluster-wide figure mixes workloads that use very different shares of their requests, and
    made every pod of an unknown workload look several times its size. The typical figure is
    the workloads' mean (each workload one, as a new workload is one more of them), never above
    the cautious one: what such a pod is expected to use, where the quantile is what it may.
    The ratios leave out the workloads that request next to nothing (:meth:`FigureTable.sized`).
    Until ``LEARN_MIN_PODS`` workloads taught a ratio, the guess as nothing measured it (ratio 1,
    with ``spread``, the estimate's initial spread) holds up each ratio figure: the 90th
    percentile of fewer is their highest, and in a fresh pool the first three measured read
    0.18.

    Until a BestEffort pod is measured, one counts as a pod of a workload without history that
    requests what the recent requesting pods do (``requested``, their guesses): the
    ``quantile`` of their guesses at the ratio prior above, else at the cluster-wide ratio, else
    (nothing measured) at the guess with ``spread`` (the estimate's initial one) of it; scored
    at their mean guess at the typical ratio. That holds up each BestEffort figure until
    ``LEARN_MIN_PODS`` BestEffort workloads are measured: the quantile of fewer is the highest
    of them, and of one its figure, which in a fresh pool was a light workload measured first.
    A pod that requests nothing tells nothing of its size, and counted at the configured guess
    (100m) it looked lightest on the smallest idle node, which is the first to run hot when it
    uses what other pods do."""
    t = table_of(workloads)
    sized = t.sized()
    ratio = _prior(cluster.ratio, t.ratio[sized], t.ratio_sd[sized], t.ratio_pods[sized], quantile)
    if int(sized.sum()) < LEARN_MIN_PODS:
        # Too few workloads for their quantile to be one: the guess as configured, which nothing
        # measured (its ratio 1 with ``spread``), holds each figure up.
        ratio = _held_up(ratio, (1.0, spread, 1.0))
    taught = ~np.isnan(t.best_effort)
    best = _prior(
        cluster.best_effort,
        t.best_effort[taught],
        t.best_effort_sd[taught],
        t.best_effort_pods[taught],
        quantile,
    )
    source = PRIOR_FROM_BEST_EFFORT if best[0] is not None else None
    if int(taught.sum()) >= LEARN_MIN_PODS or (best[0] is None and cluster.best_effort is not None):
        return Prior(*ratio, *best, best_effort_from=source)
    floor = _requested_prior(cluster, ratio, requested, quantile, spread)
    if floor is None:
        return Prior(*ratio, *best, best_effort_from=source)
    if best[0] is None:
        return Prior(*ratio, *floor, best_effort_from=PRIOR_FROM_REQUESTS)
    # Too few BestEffort workloads for their quantile to be one (of one it is that one's
    # figure): what the requesting pods say holds each figure up.
    return Prior(*ratio, *_held_up(best, floor), best_effort_from=source)


def _held_up(
    figures: tuple[float | None, float, float | None], floor: tuple[float, float, float]
) -> tuple[float | None, float, float | None]:
    """A prior's cautious figure, spread and typical figure, each at least ``floor``'s; no
    prior (None) stays none."""
    high, sd, typical = figures
    if high is None:
        return figures
    return max(high, floor[0]), max(sd, floor[1]), max(typical or 0.0, floor[2])


def _requested_prior(
    cluster: Learned,
    ratio: tuple[float | None, float, float | None],
    requested: npt.NDArray[np.float64] | None,
    quantile: float,
    spread: float,
) -> tuple[float, float, float] | None:
    """A BestEffort pod taken for a pod of a workload without history that requests what the
    recent requesting pods do (:func:`prior_figures`): its cautious figure, spread and typical
    figure; None without recent requesting pods."""
    if requested is None or not len(requested):
        return None
    size = float(np.quantile(requested, quantile, method="higher"))
    if ratio[0] is not None:
        scale, sd, typical = ratio[0], ratio[1], ratio[2] if ratio[2] is not None else ratio[0]
    elif cluster.ratio is not None:
        scale, sd, typical = cluster.ratio, cluster.ratio_sd, cluster.ratio
    else:
        scale, sd, typical = 1.0, spread, 1.0
    high = size * scale
    return high, size * sd, min(float(np.mean(requested)) * typical, high)


def _prior(
    cluster: float | None, figure: Column, sd: Column, pods: Column, quantile: float
) -> tuple[float | None, float, float | None]:
    if not len(figure):
        return None, 0.0, None
    high = max(float(np.quantile(figure, quantile, method="higher")), cluster if cluster is not None else 0.0)
    within = _within(sd, pods)
    return high, 0.0 if within is None else within, min(float(np.mean(figure)), high)


def pair_terms(
    calibration: Calibration | None, pairs: Sequence[tuple[int, str | None]], prior: str, spread: float
) -> tuple[npt.NDArray[np.float64], list[str], Column]:
    """:func:`~ksched.engine.estimate.terms` of each (kind of guess, workload) pair, as a pod of
    it counts: per pair its scale, offset, spread's scale and offset, and 1.0 where it counts at
    its limit; where its figures came from; and its prior's typical figure (NaN: none). A pair
    whose workload taught its kind of figure reads it from the weighed table, all at once (as
    ``terms`` would: the workload's own); each other pair counts as ``terms`` says, asked once a
    kind, as it says the same of every workload without figures of that kind."""
    n = len(pairs)
    table = np.zeros((n, 5), dtype=np.float64)
    sources = [WORKLOAD] * n
    typical = np.full(n, np.nan)
    weighed = calibration.workloads if calibration is not None else None
    own = np.zeros(n, dtype=np.bool_)
    if isinstance(weighed, Tabled) and n and weighed.table.data.shape[1]:
        t = weighed.table
        rows = np.fromiter((-1 if w is None else t.rows.get(w, -1) for _, w in pairs), np.intp, n)
        kinds = np.fromiter((k for k, _ in pairs), np.int64, n)
        at = np.where(rows >= 0, rows, 0)
        ratio, best = t.ratio[at], t.best_effort[at]
        by_ratio = (rows >= 0) & np.isin(kinds, RATIO_KINDS) & ~np.isnan(ratio)
        by_best = (rows >= 0) & (kinds == BEST_EFFORT) & ~np.isnan(best)
        own = by_ratio | by_best
        table[:, 0] = np.where(by_ratio, ratio, 0.0)
        table[:, 1] = np.where(by_best, best, 0.0)
        table[:, 2] = np.where(by_ratio, t.ratio_sd[at], 0.0)
        table[:, 3] = np.where(by_best, t.best_effort_sd[at], 0.0)
    asked: dict[tuple[int, str | bool | None], Terms] = {}
    for j in np.flatnonzero(~own):
        kind, workload = pairs[int(j)]
        # With a table, this workload taught nothing of its kind: counted as any such.
        key = (kind, workload is None) if isinstance(weighed, Tabled) else (kind, workload)
        found = asked.get(key)
        if found is None:
            found = asked[key] = terms(calibration, kind, workload, prior, spread)
        table[j] = (*found[:4], float(found.at_limit))
        sources[j] = found.source
        if found.typical is not None:
            typical[j] = found.typical
    return table, sources, typical
