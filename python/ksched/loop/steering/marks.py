"""Which nodes carry the steering mark: each node's readings against its lines, the
hysteresis, and the cap.

Owns three rules:

- **Readings** (:func:`readings`): a node's value of each marking metric, as the engine is
  given it (:meth:`~ksched.loop.metrics.load_model.LoadModel.scheduling`: the sample plus the
  recent pods of every scheduler), against the line the filter holds an ordinary pod to there
  (the node's own threshold annotation winning: :func:`~ksched.engine.load.lines_on_nodes`).
  How far over the line a node is (:attr:`Reading.over`) is a share of the line, so metrics
  in different units rank together. With ``anticipate``, a node counts the room a heavy next
  pod would take there (:attr:`Reading.lead`: ``Calibration.next_pod``, the 90th percentile of
  what the recent pods count, as a share of that node), so that a node one pod away from its
  line is marked before another scheduler's pod takes it over.
- **Hysteresis** (:meth:`Marks.decide`): a node is marked once a value is at or over its line;
  a marked node keeps its mark until every value has been below the line by ``margin`` (a
  share of the line) for ``hold_s`` without a break. A node with no value is cool: a stale
  metric never keeps a node marked forever, nor marks one.
- **Cap**: at most ``max_share`` of the schedulable nodes are marked, the hottest first; a
  node marked already keeps its place until another is hotter by ``margin`` (and wins a
  tie). When most nodes are hot a mark says nothing.
- **Two marks** (:class:`Graded`): with ``warm``, a node within ``warm_leads`` heavy next pods
  of its line (:func:`warmer`) carries the lighter mark, with the same hysteresis; at most
  ``warm_share`` of the schedulable nodes carry either mark (the hot ones counted first). A
  hot node carries both, so that another scheduler, counting a node's marks, takes the
  unmarked nodes first, then the warm ones, and the hot ones last.

Reads no clock and writes nothing: the controller (:mod:`ksched.loop.steering.controller`)
feeds it and writes what it decides.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from ksched.config.metrics import MetricConfig
from ksched.config.steering import SteeringLine
from ksched.engine.load import allocatable, lines_on_nodes
from ksched.engine.snapshot import Snapshot
from ksched.loop.metrics.metric_sources import Matrix


@dataclass(frozen=True)
class Reading:
    """One node's value of one metric against its line there."""

    metric: str
    value: float
    line: float
    direction: str
    # How far ``pods`` heavy next pods would move the value toward the hot side (0: not
    # anticipated).
    lead: float = 0.0
    pods: float = 1.0

    @property
    def over(self) -> float:
        """How far the value (with the next pod's ``lead``) is on the hot side of the line, as
        a share of the line (the plain difference for a line of 0); negative on the cool side."""
        return self._share(self.lead)

    @property
    def at_line(self) -> bool:
        """Whether the value itself, without the lead, is at or over the line."""
        return self._share(0.0) >= 0

    def _share(self, lead: float) -> float:
        gap = self.value - self.line if self.direction == "above" else self.line - self.value
        gap += lead
        return gap / abs(self.line) if self.line != 0 else gap

    def note(self) -> str:
        """``cpu 0.93 at or over its line 0.80`` (``cpu 0.7 with 0.15 for a heavy next pod at
        or over its line 0.8``): for events and ``/status``."""
        side = "at or over" if self.direction == "above" else "at or under"
        if self.over < 0:
            side = "under" if self.direction == "above" else "over"
        heavy = "a heavy next pod" if self.pods == 1 else f"{self.pods:g} heavy next pods"
        ahead = f" with {self.lead:.3g} for {heavy}" if self.lead > 0 else ""
        return f"{self.metric} {self.value:.3g}{ahead} {side} its line {self.line:.3g}"

    def as_json(self) -> dict[str, object]:
        return {
            "metric": self.metric,
            "value": self.value,
            "line": self.line,
            "direction": self.direction,
            "nextPod": self.lead,
            "nextPods": self.pods,
        }


def readings(
    snapshot: Snapshot, matrix: Matrix, lines: Sequence[SteeringLine], anticipate: bool = False
) -> dict[str, list[Reading]]:
    """Each node's readings, by node name (a metric with no value on a node is left out); with
    ``anticipate``, each with the room a heavy next pod would take there (:func:`leads`)."""
    columns = {m.name: k for k, m in enumerate(matrix.metrics)}
    out: dict[str, list[Reading]] = {n: [] for n in snapshot.node_names}
    for line in lines:
        k = columns.get(line.metric)
        if k is None:
            continue  # dropped from the matrix: stale or degraded
        above, below = lines_on_nodes(
            snapshot,
            line.metric,
            line.line if line.direction == "above" else math.nan,
            line.line if line.direction == "below" else math.nan,
        )
        on_node = above if line.direction == "above" else below
        values = matrix.values[:, k]
        lead = leads(snapshot, matrix.metrics[k], line.direction, on_node) if anticipate else None
        for row, node in enumerate(snapshot.node_names):
            value, at = float(values[row]), float(on_node[row])
            if math.isfinite(value) and math.isfinite(at):
                ahead = float(lead[row]) if lead is not None else 0.0
                out[node].append(Reading(line.metric, value, at, line.direction, ahead))
    return out


def leads(
    snapshot: Snapshot, metric: MetricConfig, direction: str, lines: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64] | None:
    """How far a heavy next pod (``Calibration.next_pod``) would move ``metric`` toward its hot
    side on each node: its share of the node's allocatable of the estimated resource; 0 where,
    held above ``lines`` (each node's), that share alone reaches the line. None where the metric
    has no learned estimate or no recent pod, or where load moves it away from the hot side (a
    metric that rises with load, held below a line)."""
    estimate = metric.estimate
    calibration = estimate.calibration if estimate is not None else None
    if estimate is None or calibration is None or not calibration.next_pod:
        return None
    if (metric.load_sign > 0) != (direction == "above"):
        return None
    alloc = allocatable(snapshot, estimate.resource)
    if alloc is None:
        return None
    out = np.divide(calibration.next_pod, alloc, out=np.zeros_like(alloc), where=alloc > 0)
    # Where one heavy pod alone would take an idle node to the line, the node's size is what
    # that says, not its load: no lead there (a small node would otherwise stay marked idle).
    if direction == "above":
        out = np.where(out < lines, out, 0.0)
    return out


def warmer(readings: Mapping[str, Sequence[Reading]], pods: float) -> dict[str, list[Reading]]:
    """The readings with the room of ``pods`` heavy next pods instead of one: what the lighter
    mark is judged on. Where that room alone takes an idle node to its line (held above), the
    node's size is what it says, not its load: the one pod's room stays there."""
    return {node: [_warmer(r, pods) for r in rs] for node, rs in readings.items()}


def _warmer(reading: Reading, pods: float) -> Reading:
    lead = reading.lead * pods
    if reading.lead <= 0 or (reading.direction == "above" and lead >= reading.line):
        return reading
    return replace(reading, lead=lead, pods=pods)


def schedulable(snapshot: Snapshot) -> list[str]:
    """The nodes of the snapshot that are not cordoned."""
    cordoned = np.asarray(snapshot.arrays["unschedulable"], dtype=bool)
    return [n for n, off in zip(snapshot.node_names, cordoned, strict=True) if not off]


@dataclass
class Decision:
    """One look's marks: the nodes to mark hot and why (the hottest reading; None: a marked
    node with no value now, kept through its hold time), the nodes the cap left unmarked, and
    the nodes that carry the lighter mark only (:class:`Graded`)."""

    marks: dict[str, Reading | None] = field(default_factory=dict)
    capped: dict[str, Reading | None] = field(default_factory=dict)
    warm: dict[str, Reading | None] = field(default_factory=dict)
    # Nodes that would carry the lighter mark but for ``warm_share`` (none of them hot).
    warm_capped: dict[str, Reading | None] = field(default_factory=dict)


class Marks:
    """The hysteresis and the cap over successive looks.

    >>> marks = Marks(margin=0.1, hold_s=30.0, max_share=0.5)
    >>> hot = {"n0": [Reading("cpu", 0.9, 0.8, "above")], "n1": [Reading("cpu", 0.5, 0.8, "above")]}
    >>> sorted(marks.decide(hot, ["n0", "n1"], set(), now=0.0).marks)
    ['n0']
    """

    def __init__(self, margin: float, hold_s: float, max_share: float) -> None:
        self.margin = margin
        self.hold_s = hold_s
        self.max_share = max_share
        # Marked nodes below the line by the margin (or with no value): since when, unbroken.
        self.cool_since: dict[str, float] = {}

    def decide(
        self,
        readings: Mapping[str, Sequence[Reading]],
        schedulable: Collection[str],
        marked: Collection[str],
        now: float,
    ) -> Decision:
        """The marks for this look, given the nodes that carry one now (``marked``)."""
        wanted: dict[str, Reading | None] = {}
        for node in schedulable:
            hottest = max(readings.get(node, ()), key=lambda r: r.over, default=None)
            over = hottest.over if hottest is not None else -math.inf
            if over >= 0 or (node in marked and over >= -self.margin):
                # Hot; or marked and under the line by less than the margin: not cooling.
                wanted[node] = hottest
                self.cool_since.pop(node, None)
            elif node in marked and now - self.cool_since.setdefault(node, now) < self.hold_s:
                wanted[node] = hottest
        for node in set(self.cool_since) - set(wanted):
            del self.cool_since[node]
        cap = math.floor(self.max_share * len(schedulable) + 1e-9)
        # A marked node keeps its place in the cap until another is hotter by the margin: at
        # the cap, the hottest nodes swap places from look to look, and each swap writes two.
        ranked = sorted(wanted.items(), key=lambda kv: _order(kv[0], kv[1], marked, self.margin))
        return Decision(dict(ranked[:cap]), dict(ranked[cap:]))


def _order(
    node: str, reading: Reading | None, marked: Collection[str], margin: float
) -> tuple[bool, float, bool, str]:
    """A node's place in the cap's order: nodes at their line before nodes only a heavy next
    pod away from it, each the farthest over first, a marked node that is over ``margin``
    ahead (and first on a tie); a node with no value last."""
    if reading is None:
        return (True, math.inf, node not in marked, node)
    over = reading.over
    if node in marked and over >= 0:
        over += margin
    return (not reading.at_line, -over, node not in marked, node)


class Graded:
    """The hot marks (:class:`Marks`), and with ``warm_leads`` the lighter ones: a node within
    that many heavy next pods of its line (:func:`warmer`), with the same hysteresis, at most
    ``warm_share`` of the schedulable nodes marked either way, the hot ones counted first.

    >>> graded = Graded(margin=0.1, hold_s=30.0, max_share=0.25, warm_share=0.75, warm_leads=2.0)
    >>> near = [Reading("cpu", 0.6, 0.8, "above", lead=0.15)]
    >>> hot = {"n0": [Reading("cpu", 0.9, 0.8, "above", lead=0.15)], "n1": near}
    >>> cool = {f"n{i}": [Reading("cpu", 0.1, 0.8, "above", lead=0.15)] for i in range(2, 4)}
    >>> d = graded.decide({**hot, **cool}, ["n0", "n1", "n2", "n3"], set(), set(), now=0.0)
    >>> sorted(d.marks), sorted(d.warm)
    (['n0'], ['n1'])
    """

    def __init__(
        self, margin: float, hold_s: float, max_share: float, warm_share: float, warm_leads: float | None
    ) -> None:
        self.hot = Marks(margin, hold_s, max_share)
        self.warm_share = warm_share
        self.warm_leads = warm_leads
        self.warm = Marks(margin, hold_s, warm_share) if warm_leads is not None else None

    def decide(
        self,
        readings: Mapping[str, Sequence[Reading]],
        schedulable: Collection[str],
        hot: Collection[str],
        warm: Collection[str],
        now: float,
    ) -> Decision:
        """The marks for this look, given the nodes that carry the hot mark now (``hot``) and
        those that carry the lighter one (``warm``, the hot ones among them)."""
        decision = self.hot.decide(readings, schedulable, hot, now)
        if self.warm is None or self.warm_leads is None:
            return decision
        lighter = self.warm.decide(warmer(readings, self.warm_leads), schedulable, warm, now)
        room = max(math.floor(self.warm_share * len(schedulable) + 1e-9) - len(decision.marks), 0)
        only = [(n, r) for n, r in lighter.marks.items() if n not in decision.marks]
        decision.warm = dict(only[:room])
        left = [*only[room:], *lighter.capped.items()]
        decision.warm_capped = {n: r for n, r in left if n not in decision.marks}
        return decision

    def forget(self) -> None:
        """Drop the hysteresis (a replica that stopped leading)."""
        self.hot.cool_since.clear()
        if self.warm is not None:
            self.warm.cool_since.clear()
