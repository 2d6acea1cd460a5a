"""The quality benchmark's figures, from node utilisation sampled over time.

Owns what a run is judged by: hotspot node-minutes above a threshold, the maximum and p95 of
node utilisation over every node and sample, the coefficient of variation across nodes
(averaged over samples), the pods on nodes over the threshold at the end, the pods left
pending and the rate at which the scheduler placed them; for the shadow setup, what its
shadow ksched said (:class:`ShadowOutcomes`); for a steering setup, its marks
(:class:`~.marks.MarkFigures`); for the traced setup, one pod's estimate over time
(:class:`~.estimates.EstimateTrace`). Pure functions of the samples.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from ksched.bench.invariants import allocatable
from ksched.bench.quality.estimates import EstimateTrace
from ksched.bench.quality.marks import MarkFigures
from ksched.bench.quality.rebalance import RebalanceFigures
from ksched.cluster import load
from ksched.engine.estimate import workload_of
from ksched.engine.pods import pod_requests
from ksched.errors import MalformedObjectError, QuantityError
from ksched.objects import Obj

# Utilisation (cores used / allocatable) over which a node counts as hot.
DEFAULT_THRESHOLD = 0.8
# A round whose node samples are missing beyond this share is not judged (:func:`unjudged`):
# a missing sample counts as idle, so a scrape that stopped would read as a cool pool.
MAX_MISSING = 0.05


@dataclass
class Series:
    """Node utilisation at each sample time: ``values[t][node]``."""

    times: list[float]
    values: list[dict[str, float]]
    step_s: float


@dataclass(frozen=True)
class ShadowOutcomes:
    """What ``/shadow`` said at the end of the round (its ``outcomes``, and its decisions)."""

    decisions: int
    judged: int
    hot_node_minutes: float
    ksched_hot_node_minutes_estimated: float
    left_pending: int
    hot_node_minutes_avoided_estimated: float
    # ``/shadow`` as read (results.json keeps it: ``ksched shadow report``'s figures, from
    # ``ksched.commands.shadow.render_report``).
    report: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, report: dict[str, Any]) -> ShadowOutcomes:
        o = report["outcomes"]
        return cls(
            decisions=int(report["total"]),
            judged=int(o["judged"]),
            hot_node_minutes=float(o["hotNodeMinutes"]),
            ksched_hot_node_minutes_estimated=float(o["kschedHotNodeMinutesEstimated"]),
            left_pending=int(o["leftPending"]),
            hot_node_minutes_avoided_estimated=float(o["hotNodeMinutesAvoidedEstimated"]),
            report=report,
        )


@dataclass(frozen=True)
class ShapeFigures:
    """One node shape of a pool (its nodes' allocatable CPU): how many pods each took, how hot
    they ran, and where they ended. A scheduler that gives small nodes as many unknown pods
    per core as large ones runs the small ones hotter: one pod moves their share most."""

    cores: float
    nodes: int
    pods_per_node: float
    # How far the nodes' pod counts differ (population standard deviation): a scheduler that
    # deals unknown pods unevenly within a shape widens the spread without knowing why.
    pods_sd: float
    hotspot_node_minutes: float
    # Each node's utilisation over the last minute of samples: the mean over the shape's nodes
    # and the hottest of them.
    end_mean: float
    end_max: float


# How many of a pool's hottest nodes a round describes pod by pod (:func:`hottest_nodes`).
HOTTEST = 3


@dataclass(frozen=True)
class HotPod:
    """A pod on one of the hottest nodes, as the load simulation runs it."""

    name: str
    # Its workload (:func:`ksched.engine.estimate.workload_of`; None: none).
    workload: str | None
    # Its CPU request (millicores) and the load simulation's usage multiple of it (None: unset).
    request_m: int
    base: float | None
    # The seconds over which its usage ramps up (0: none).
    ramp_s: float
    # When it was bound, in seconds from the first sample, which is taken just before the
    # first create (None: not known).
    bound_s: float | None
    # Its place among its workload's pods in the pool by bind time, from 1 (0: no workload):
    # a first replica is placed before anything of its workload is measured.
    nth: int


@dataclass(frozen=True)
class HotNode:
    """One of a pool's hottest nodes: how long it ran hot, where it ended, and its pods."""

    node: str
    cores: float
    hot_minutes: float
    end: float
    pods: tuple[HotPod, ...]

    def described(self) -> list[str]:
        """The node, then a line per pod, largest expected usage first."""
        lines = [f"{self.node} ({self.cores:g} cores): {self.hot_minutes:g} hot min, ended at {self.end:.2f}"]
        for p in sorted(self.pods, key=lambda p: -(p.request_m * (p.base or 0.0))):
            uses = "-" if p.base is None else f"{p.base:.2f}x"
            ramp = f", ramps {p.ramp_s:.0f} s" if p.ramp_s else ""
            at = "?" if p.bound_s is None else f"{p.bound_s:.0f} s"
            nth = f", replica #{p.nth} of {p.workload}" if p.workload and p.nth else ""
            lines.append(f"  {p.name}: requests {p.request_m}m, uses {uses}{ramp}, bound at {at}{nth}")
        return lines


@dataclass
class QualityFigures:
    scheduler: str
    scenario: str
    pods: int
    hotspot_node_minutes: float = 0.0
    # How far over the line the hot nodes ran, over time: each node's utilisation past the
    # threshold, summed over the samples, in node-minutes (a node at 0.9 for a minute against
    # 0.8: 0.1). Where a pool's load cannot all stay under the line, the hot node-minutes
    # reward heaping it on a few nodes far over; this does not.
    excess_node_minutes: float = 0.0
    # The pool's load where it ended: its nodes' ends (:func:`ends`) weighed by their cores
    # (alike where no node states its cores), and the line it was judged against. Where the
    # load ends at or past the line, no placement keeps every node under it, and the hot
    # node-minutes reward heaping what is over on a few nodes far past it: read the excess.
    end_load: float = 0.0
    line: float = 0.0
    max_utilisation: float = 0.0
    p95_utilisation: float = 0.0
    cv: float = 0.0
    # The spread across nodes (standard deviation over mean) of where they ended (each node's
    # mean over the last minute of samples): the placement's spread once the pods all show,
    # apart from the fill, over which ``cv`` averages too.
    end_cv: float = 0.0
    pods_on_hot_nodes: int = 0
    pending: int = 0
    pods_per_s: float = 0.0
    # The 99th percentile and the longest of create to bind over the scenario's pods (seconds,
    # to the second the API server keeps): a cautious estimate must not leave pods waiting.
    p99_bind_s: float = 0.0
    max_bind_s: float = 0.0
    # How many pods waited each whole number of seconds from create to bind: whether a p99
    # is a few pods held back (a cautious filter) or every pod of a burst bound at one pace
    # (the API server's, shared by the pools of a round).
    bind_waits: dict[int, int] = field(default_factory=dict)
    # Pods ksched placed over a metric's threshold because every node read over it with them
    # (``onSaturation: leastLoaded``: a PlacedOverThreshold event each), rather than leaving
    # them pending: the caution's price, beside the hot node-minutes it saves. None: not
    # counted (a setup without ksched, which never places over a threshold, or events that
    # could not be listed).
    over_threshold: int | None = None
    # The CPU seconds (user and system) its ksched process used from its start to the end of
    # the window: what the metrics cost, beside ksched without metrics in the same round.
    # None: a setup without ksched, or one whose process could not be read.
    cpu_s: float | None = None
    # The share of the pods of a workload (:func:`ksched.engine.estimate.workload_of`) that
    # ended on a node with another replica of their workload: replicas share their usage, so
    # the more of them together, the more a node's load swings with one workload's.
    replicas_together: float = 0.0
    # The share of node samples Prometheus had no value for.
    missing_samples: float = 0.0
    # Per sample: (seconds from the first create, p50, p95, max) across nodes, for the plot.
    bands: list[tuple[float, float, float, float]] = field(default_factory=list)
    # Where the scenario's pods could be moved (controllers own them): what moving them did.
    rebalance: RebalanceFigures | None = None
    # The shadow setup's: what its shadow ksched said at the end (:mod:`.setups`).
    shadow: ShadowOutcomes | None = None
    # A steering setup's: when its pool's nodes were marked hot and unmarked (:mod:`.marks`).
    marks: MarkFigures | None = None
    # The traced setup's: one pod's estimate from its bind until its usage settled
    # (:mod:`.estimates`).
    estimate: EstimateTrace | None = None
    # Per node shape, smallest first (:func:`by_shape`).
    shapes: list[ShapeFigures] = field(default_factory=list)
    # The nodes that ran hot longest, pod by pod (:func:`hottest_nodes`).
    hottest: list[HotNode] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The figures ``--json`` prints (the bands stay in results.json)."""
        keys = (
            "hotspot_node_minutes",
            "excess_node_minutes",
            "end_load",
            "p95_utilisation",
            "cv",
            "end_cv",
            "pods_on_hot_nodes",
            "pending",
            "pods_per_s",
            "p99_bind_s",
            "max_bind_s",
            "over_threshold",
            "cpu_s",
            "replicas_together",
        )
        out = {k: getattr(self, k) for k in keys}
        if self.rebalance is not None:
            out["rebalance"] = {
                k: v for k, v in asdict(self.rebalance).items() if k not in ("moves", "hot_at_end")
            }
        if self.shadow is not None:
            out["shadow"] = {k: v for k, v in asdict(self.shadow).items() if k != "report"}
        if self.marks is not None:
            out["marks"] = {k: v for k, v in asdict(self.marks).items() if k != "intervals"}
        return out


def hottest_nodes(
    series: Series,
    pods: list[Obj],
    bound_at: dict[str, float],
    threshold: float,
    cores: dict[str, float],
    top: int = HOTTEST,
) -> list[HotNode]:
    """The ``top`` nodes of ``cores`` (node to allocatable CPU: the pool) that ran hot longest
    (none where no node did), with the pods that ended on them (``bound_at``: pod name to its
    bind time, by the wall clock like ``series.times``): what made a node hot, and whether its
    workload was measured when it came."""
    minutes = Counter(
        {n: sum(v.get(n, 0.0) > threshold for v in series.values) * series.step_s / 60.0 for n in cores}
    )
    hot = [(n, m) for n, m in minutes.most_common(top) if m > 0]
    if not hot:
        return []
    start = series.times[0] if series.times else 0.0
    order: dict[str, list[tuple[float, str]]] = {}
    for pod in pods:
        name, workload = pod["metadata"]["name"], workload_of(pod)
        if workload is not None and name in bound_at:
            order.setdefault(workload, []).append((bound_at[name], name))
    rank = {name: k for times in order.values() for k, (_, name) in enumerate(sorted(times), start=1)}
    end_of = ends(series, [n for n, _ in hot])
    out = []
    for node, hot_minutes in hot:
        on_node = []
        for pod in pods:
            if pod["spec"].get("nodeName") != node:
                continue
            name = pod["metadata"]["name"]
            annotations = pod["metadata"].get("annotations") or {}
            try:
                request = int(pod_requests(pod).requests.get("cpu", 0))
            except MalformedObjectError:
                request = 0
            on_node.append(
                HotPod(
                    name,
                    workload_of(pod),
                    request,
                    _number(annotations.get(load.BASE)),
                    _number(annotations.get(load.RAMP_SECONDS)) or 0.0,
                    round(bound_at[name] - start, 1) if name in bound_at else None,
                    rank.get(name, 0),
                )
            )
        out.append(HotNode(node, cores[node], round(hot_minutes, 2), round(end_of[node], 3), tuple(on_node)))
    return out


def _number(raw: object) -> float | None:
    """An annotation's number (None: unset, or not a number)."""
    try:
        return None if raw is None else float(str(raw))
    except ValueError:
        return None


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by the nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def replicas_together(pods: list[Obj]) -> float:
    """The share of the bound pods of a workload that share their node with another replica of
    their workload (0.0 for none)."""
    on_node: Counter[tuple[str, str]] = Counter()
    for pod in pods:
        node, workload = pod["spec"].get("nodeName"), workload_of(pod)
        if node and workload is not None:
            on_node[(workload, node)] += 1
    placed = sum(on_node.values())
    together = sum(n for n in on_node.values() if n > 1)
    return round(together / placed, 3) if placed else 0.0


def node_cores(nodes: list[Obj]) -> dict[str, float]:
    """Each node's allocatable CPU in cores (0 where it states none, or none that reads)."""
    cores = {}
    for n in nodes:
        try:
            cpu = allocatable(n).get("cpu", 0) / 1000
        except QuantityError:
            cpu = 0.0
        cores[n["metadata"]["name"]] = cpu
    return cores


def judge(
    figures: QualityFigures,
    series: Series,
    nodes: list[str],
    bound: dict[str, str],
    threshold: float,
    cores: dict[str, float] | None = None,
) -> None:
    """Fill ``figures`` from the samples over ``nodes`` (a node with no sample counts as idle)
    and the pods' nodes at the end (``bound``: pod name to node); with ``cores``
    (:func:`node_cores`), per node shape too."""
    everything: list[float] = []
    cvs: list[float] = []
    missing = 0
    start = series.times[0] if series.times else 0.0
    for t, sample in zip(series.times, series.values, strict=True):
        missing += sum(1 for n in nodes if n not in sample)
        row = [sample.get(n, 0.0) for n in nodes]
        everything += row
        figures.hotspot_node_minutes += sum(v > threshold for v in row) * series.step_s / 60.0
        figures.excess_node_minutes += sum(max(v - threshold, 0.0) for v in row) * series.step_s / 60.0
        mean = statistics.fmean(row) if row else 0.0
        if mean > 0:
            cvs.append(statistics.pstdev(row) / mean)
        figures.bands.append((t - start, percentile(row, 0.5), percentile(row, 0.95), max(row, default=0.0)))
    figures.missing_samples = (
        round(missing / (len(nodes) * len(series.times)), 3) if nodes and series.times else 1.0
    )
    figures.hotspot_node_minutes = round(figures.hotspot_node_minutes, 2)
    figures.excess_node_minutes = round(figures.excess_node_minutes, 3)
    figures.max_utilisation = round(max(everything, default=0.0), 3)
    figures.p95_utilisation = round(percentile(everything, 0.95), 3)
    figures.cv = round(statistics.fmean(cvs), 3) if cvs else 0.0
    end_of = ends(series, nodes)
    ended = list(end_of.values())
    end_mean = statistics.fmean(ended) if ended else 0.0
    figures.end_cv = round(statistics.pstdev(ended) / end_mean, 3) if end_mean > 0 else 0.0
    figures.end_load, figures.line = round(pool_load(end_of, cores), 3), threshold
    last = series.values[-1] if series.values else {}
    figures.pods_on_hot_nodes = sum(1 for node in bound.values() if last.get(node, 0.0) > threshold)
    if cores is not None:
        figures.shapes = by_shape(series, {n: cores.get(n, 0.0) for n in nodes}, bound, threshold, end_of)


def pool_load(end_of: dict[str, float], cores: dict[str, float] | None) -> float:
    """The pool's load from where each node ended (``end_of``, :func:`ends`): their mean
    weighed by each node's cores (``cores``, :func:`node_cores`), so that an 8-core node counts
    twice a 4-core one; alike where no node of the pool states its cores (0.0 for no node)."""
    weights = {n: cores.get(n, 0.0) for n in end_of} if cores is not None else {}
    total = sum(weights.values())
    if total <= 0:
        return statistics.fmean(end_of.values()) if end_of else 0.0
    return sum(end * weights[n] for n, end in end_of.items()) / total


# How far back :func:`by_shape` averages a node's samples as where it ended.
END_S = 60.0


def ends(series: Series, nodes: list[str]) -> dict[str, float]:
    """Where each node ended: its mean over the last :data:`END_S` of samples (a node with no
    sample counts as idle; 0.0 everywhere without samples)."""
    last = max(1, round(END_S / series.step_s)) if series.step_s > 0 else 1
    end = series.values[-last:]
    return {n: statistics.fmean(v.get(n, 0.0) for v in end) if end else 0.0 for n in nodes}


def by_shape(
    series: Series,
    cores: dict[str, float],
    bound: dict[str, str],
    threshold: float,
    end_of: dict[str, float],
) -> list[ShapeFigures]:
    """:class:`ShapeFigures` of the nodes in ``cores`` (node to allocatable CPU), from the
    samples (a node with no sample counts as idle), where each node ended (``end_of``,
    :func:`ends`) and the pods' nodes at the end (``bound``)."""
    pods = Counter(bound.values())
    shapes = []
    for size in sorted(set(cores.values())):
        nodes = [n for n, c in cores.items() if c == size]
        hot = sum(v.get(n, 0.0) > threshold for v in series.values for n in nodes)
        ended = [end_of[n] for n in nodes]
        counts = [pods[n] for n in nodes]
        shapes.append(
            ShapeFigures(
                cores=size,
                nodes=len(nodes),
                pods_per_node=round(statistics.fmean(counts), 2),
                pods_sd=round(statistics.pstdev(counts), 2),
                hotspot_node_minutes=round(hot * series.step_s / 60.0, 2),
                end_mean=round(statistics.fmean(ended), 3),
                end_max=round(max(ended), 3),
            )
        )
    return shapes


def unjudged(figures: QualityFigures) -> list[str]:
    """Why the round's figures are no judgement (empty when they are): too many node samples
    missing, which reads as idle nodes (KWOK's endpoint or Prometheus's scrape stopped)."""
    if figures.missing_samples <= MAX_MISSING:
        return []
    return [
        f"{figures.scenario}/{figures.scheduler}: Prometheus has no utilisation for "
        f"{figures.missing_samples:.0%} of the node samples (a stopped scrape reads as idle nodes): "
        "these figures are not a judgement; run the scenario again"
    ]


@dataclass
class QualityResults:
    options: dict[str, Any]
    figures: list[QualityFigures] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def by_scenario(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``{"scenarios": {NAME: {SCHEDULER: {...}}}}`` as ``--json`` prints it."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for f in self.figures:
            out.setdefault(f.scenario, {})[f.scheduler] = f.summary()
        return out
