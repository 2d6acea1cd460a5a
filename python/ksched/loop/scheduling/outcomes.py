"""Placement outcomes: whether the node a pod was placed on went hot within a horizon after it.

Owns, for each placement made within the horizon (a metric's window plus
``outcomes.margin``, the longest over the metrics with a filter line), the looks at its node
and, once the horizon has ended, its verdict: ``went_hot`` when a look found the node hot,
``stayed_cool`` when every look found it on the cool side, ``unmeasured`` when no look had a
value for it. A node is hot when a metric with a filter line reads at or over the line the
filter holds an ordinary pod to there, a node's own threshold annotation winning
(:func:`ksched.loop.steering.marks.readings`, as the steering marks read it), over what the
metrics read (:meth:`~ksched.loop.metrics.load_model.LoadModel.observed`: each fresh sample,
nothing estimated). The estimate's unmeasured pods and deviations read a node hotter than it
turns out: judged by them, a shadow counted 40.9 hot node-minutes where Prometheus recorded
14.8. The horizon covers the metric's window, so a placement's pod shows in it.

Live mode judges every placement, ksched's (its own binds, or a pod of a ksched profile) and
other schedulers' apart: ``ksched_placements_judged_total`` and ``/status``. Shadow mode
also carries ksched's choice for each pod another scheduler placed, and estimates whether
that node would have gone hot with the pod's usage added (measured where the pod query has
it, else its estimate; nothing for a metric without an estimate) and without the pods the
other scheduler piled on it that ksched would have sent elsewhere; and how long each
node was hot, in node-seconds counted once per node (:meth:`Outcomes.observe`), for
``ksched shadow report``'s hot node-minutes avoided. ksched's choices are the ones it made in
the other scheduler's world: what it would have chosen in its own is not modelled.

Memory is O(placements within the horizon) plus a watermark per node: a verdict leaves as it
is given. Looks run every ``outcomes.interval`` on the cluster state's thread
(:meth:`~ksched.loop.mirror.state.ClusterState.ask`), only while a placement waits for one.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ksched.config import Config, MetricConfig, SteeringConfig
from ksched.config.metrics import query_window_s
from ksched.engine.estimate import estimated_usage
from ksched.engine.load import allocatable, before_event
from ksched.engine.requirements import counted_requests
from ksched.engine.snapshot import Snapshot
from ksched.loop.metrics.load_model import LoadModel
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.mirror.state import ClusterState
from ksched.loop.steering.marks import Reading, readings
from ksched.loop.telemetry import JUDGED_OUTCOMES, PLACED_BY, Telemetry
from ksched.objects import Obj

log = logging.getLogger(__name__)

KSCHED, OTHER = PLACED_BY
STAYED_COOL, WENT_HOT, UNMEASURED = JUDGED_OUTCOMES
# A look this many intervals after the one before counts no more than that as hot: the state
# thread was busy, and what the node did meanwhile is unknown.
MAX_GAP_INTERVALS = 2.0
# Placements waiting for their verdict past this are dropped, the oldest first: looks that
# stopped (a stuck state thread) must not grow memory without end.
MAX_PENDING = 200_000
# How long a look waits for the cluster state's thread.
VIEW_WAIT_S = 10.0
# Node-seconds to node-minutes.
MINUTE_S = 60.0


def window_of(metric: MetricConfig) -> float:
    """How long after a pod starts the metric may still not show it in full: its estimate's
    window, else its query's range (0: an annotation, metrics-server)."""
    return metric.window_s() if metric.estimate is not None else query_window_s(metric.query or "")


def expected_usage(pod: Obj, metrics: Sequence[MetricConfig]) -> dict[str, float]:
    """What ``pod`` is expected to use of each estimating metric's resource (engine units), as
    the engine counts a pod it places (:func:`~ksched.engine.estimate.estimated_usage`, with
    the metrics' learned calibration where ``metrics`` carry one)."""
    requests, _ = counted_requests(pod)
    return {
        m.name: float(estimated_usage(pod, requests, m.estimate)) for m in metrics if m.estimate is not None
    }


@dataclass
class Placement:
    """One placement waiting for its verdict, and what the looks found so far."""

    pod: str
    uid: str
    node: str
    scheduler: str
    at: float
    end: float
    # Shadow mode: the node ksched would have chosen (None: none, or it would have left the
    # pod pending), and the pod's estimated usage per metric where nothing measures it.
    choice: str | None = None
    usage: dict[str, float] = field(default_factory=dict)
    observed: bool = False
    hot: bool = False
    hot_s: float = 0.0
    choice_observed: bool = False
    choice_hot: bool = False
    choice_hot_s: float = 0.0


@dataclass(frozen=True)
class Judgement:
    """A placement's verdict once its horizon ended; ``hot_minutes``: the minutes its node was
    hot within the horizon that no earlier placement on the node counted (so judgements add up
    to node-minutes); the ``ksched_`` fields: ksched's choice, estimated with the pod added."""

    pod: str
    node: str
    scheduler: str
    at: float
    outcome: str
    hot_minutes: float
    ksched_node: str | None = None
    ksched_outcome: str | None = None
    ksched_hot_minutes: float = 0.0

    def as_json(self) -> dict[str, Any]:
        """One line of ``shadow.log``: ``type`` tells it from a decision."""
        return {"type": "outcome", **asdict(self)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Judgement:
        known = {k: v for k, v in obj.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def _verdict(observed: bool, hot: bool) -> str:
    return WENT_HOT if hot else STAYED_COOL if observed else UNMEASURED


class Outcomes:
    """The placements within the horizon and the verdicts given; reads no clock (the caller
    gives each time). ``place`` and ``observe`` run on one thread; the counters are read
    from others under a lock.

    >>> o = Outcomes(horizon_s=60.0, interval_s=10.0, started=0.0)
    >>> o.place("ns/web", "u1", "n0", 5.0, KSCHED)
    >>> o.observe(10.0, lambda node: node == "n0", lambda p: None)
    []
    >>> [(j.outcome, j.hot_minutes) for j in o.observe(70.0, lambda node: False, lambda p: None)]
    [('went_hot', 0.08333333333333333)]
    """

    def __init__(self, horizon_s: float, interval_s: float, started: float) -> None:
        self.horizon_s = horizon_s
        self.interval_s = interval_s
        # Placements before this (the pods already bound when the watch started) are not judged.
        self.started = started
        self.pending: dict[str, Placement] = {}
        self.counts = {s: dict.fromkeys(JUDGED_OUTCOMES, 0) for s in PLACED_BY}
        # (scheduler, node, ksched's choice?) -> until when its hot time is counted.
        self._counted: dict[tuple[str, str, bool], float] = {}
        self._last: float | None = None
        self._lock = threading.Lock()

    def place(
        self,
        key: str,
        uid: str,
        node: str,
        at: float,
        scheduler: str,
        choice: str | None = None,
        usage: Mapping[str, float] | None = None,
    ) -> None:
        """A pod placed at ``at`` (ignored from before the start)."""
        if at < self.started:
            return
        self.pending.pop(key, None)
        while len(self.pending) >= MAX_PENDING:
            del self.pending[next(iter(self.pending))]
        self.pending[key] = Placement(
            key, uid, node, scheduler, at, at + self.horizon_s, choice, dict(usage or {})
        )

    def forget(self, key: str, uid: str) -> None:
        """The pod's bind failed: it was never placed."""
        p = self.pending.get(key)
        if p is not None and p.uid == uid:
            del self.pending[key]

    def observe(
        self, now: float, hot: Callable[[str], bool | None], choice_hot: Callable[[Placement], bool | None]
    ) -> list[Judgement]:
        """One look at ``now``: ``hot(node)`` says whether a node is hot (None: no value);
        ``choice_hot(placement)`` whether ksched's choice would be with the pod added. The time
        since the previous look (at most ``MAX_GAP_INTERVALS`` intervals) counts as hot where
        the look finds it hot. Returns the verdicts of the placements whose horizon ended."""
        since = max(
            self._last if self._last is not None else now - self.interval_s,
            now - MAX_GAP_INTERVALS * self.interval_s,
        )
        self._last = now
        nodes: dict[str, bool | None] = {}
        spans: dict[tuple[str, str, bool], list[tuple[Placement, float, float]]] = defaultdict(list)
        for p in self.pending.values():
            lo, hi = max(since, p.at), min(now, p.end)
            if hi <= lo:
                continue
            if p.node not in nodes:
                nodes[p.node] = hot(p.node)
            state = nodes[p.node]
            p.observed |= state is not None
            if state:
                p.hot = True
                spans[p.scheduler, p.node, False].append((p, lo, hi))
            if p.choice is not None:
                would = choice_hot(p)
                p.choice_observed |= would is not None
                if would:
                    p.choice_hot = True
                    spans[p.scheduler, p.choice, True].append((p, lo, hi))
        for key, found in spans.items():
            self._count(key, found)
        self._counted = {k: v for k, v in self._counted.items() if v >= since}
        return self._judge(now)

    def _count(self, key: tuple[str, str, bool], spans: list[tuple[Placement, float, float]]) -> None:
        """Give each placement the hot seconds of its span that no earlier one on the node
        counted: the node's hot time is counted once, however many pods landed on it."""
        cursor = self._counted.get(key, -math.inf)
        for p, lo, hi in sorted(spans, key=lambda s: (s[0].at, s[0].pod)):
            start = max(lo, cursor)
            if hi > start:
                if key[2]:
                    p.choice_hot_s += hi - start
                else:
                    p.hot_s += hi - start
                cursor = hi
        self._counted[key] = cursor

    def _judge(self, now: float) -> list[Judgement]:
        done = [p for p in self.pending.values() if p.end <= now]
        out = []
        for p in done:
            del self.pending[p.pod]
            out.append(
                Judgement(
                    p.pod,
                    p.node,
                    p.scheduler,
                    p.at,
                    _verdict(p.observed, p.hot),
                    p.hot_s / MINUTE_S,
                    p.choice,
                    _verdict(p.choice_observed, p.choice_hot) if p.choice is not None else None,
                    p.choice_hot_s / MINUTE_S,
                )
            )
        with self._lock:
            for j in out:
                self.counts[j.scheduler][j.outcome] += 1
        return out

    def status(self) -> dict[str, Any]:
        """``/status``'s ``outcomes``: the verdicts by who placed the pod, and the share that
        went hot of those measured."""
        with self._lock:
            counts = {s: dict(c) for s, c in self.counts.items()}
        out: dict[str, Any] = {"horizonSeconds": self.horizon_s, "waiting": len(self.pending)}
        for scheduler, c in counts.items():
            measured = c[WENT_HOT] + c[STAYED_COOL]
            out[scheduler] = {
                "wentHot": c[WENT_HOT],
                "stayedCool": c[STAYED_COOL],
                "unmeasured": c[UNMEASURED],
                "wentHotShare": c[WENT_HOT] / measured if measured else None,
            }
        return out


class OutcomeWatch:
    """The looks inside ``ksched run``: every ``outcomes.interval``, while a placement waits,
    read the nodes' values against their lines on the cluster state's thread and judge.

    Fed by the cluster state (live mode: ``ClusterState.placements``) or by the shadow loop
    (with ksched's choice); ``on_judged`` hears each verdict, on the state's thread."""

    def __init__(
        self,
        config: Config,
        state: ClusterState,
        metrics: MetricStore,
        telemetry: Telemetry,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # The filter's lines for an ordinary pod, as the steering marks read them.
        self.lines = SteeringConfig().lines(config.metrics)
        judged = {line.metric for line in self.lines}
        window = max((window_of(m) for m in config.metrics if m.name in judged), default=0.0)
        self.ksched_names = {p.scheduler_name for p in config.profiles}
        self.state = state
        self.metrics = metrics
        self.telemetry = telemetry
        self.clock = clock
        self.interval_s = config.outcomes.interval_s
        self.outcomes = Outcomes(window + config.outcomes.margin_s, self.interval_s, clock())
        self.on_judged: list[Callable[[Judgement], None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="outcomes", daemon=True)

    @property
    def enabled(self) -> bool:
        """Whether any metric has a line to judge by."""
        return bool(self.lines)

    # -- the cluster state's thread -----------------------------------------

    def placed(self, key: str, uid: str, node: str, at: float, scheduler: str | None) -> None:
        """A pod bound at ``at`` by ``scheduler`` (None: by this ksched)."""
        if self.enabled:
            by = KSCHED if scheduler is None or scheduler in self.ksched_names else OTHER
            self.outcomes.place(key, uid, node, at, by)

    def compared(
        self,
        key: str,
        uid: str,
        node: str,
        at: float,
        scheduler: str,
        choice: str | None,
        pod: Obj,
        metrics: Sequence[MetricConfig],
    ) -> None:
        """Shadow mode: a pod ``scheduler`` bound to ``node``, where ksched would have chosen
        ``choice`` (None: left it pending); ``metrics``: the matrix's, learned calibration included."""
        if self.enabled:
            by = KSCHED if scheduler in self.ksched_names else OTHER
            self.outcomes.place(key, uid, node, at, by, choice, expected_usage(pod, metrics))

    def forgotten(self, key: str, uid: str) -> None:
        self.outcomes.forget(key, uid)

    def look(self) -> list[Judgement]:
        """One look (on the cluster state's thread): judge, count and pass on the verdicts."""
        if not self.outcomes.pending:
            return []
        now = self.clock()
        snapshot = self.state.snapshot()
        matrix = LoadModel(self.metrics, self.state.recent).observed(snapshot)
        found = readings(snapshot, matrix, self.lines)
        by_name = {m.name: m for m in matrix.metrics}
        taken_off, added = self._moved(snapshot, by_name)

        def hot(node: str) -> bool | None:
            return _hot(found.get(node))

        def choice_hot(p: Placement) -> bool | None:
            assert p.choice is not None
            return _hot(
                [
                    replace(
                        r,
                        value=r.value
                        + taken_off.get((p.choice, r.metric), 0.0)
                        + added.get((p.pod, r.metric), 0.0),
                    )
                    for r in found.get(p.choice) or ()
                ]
            )

        judged = self.outcomes.observe(now, hot, choice_hot)
        for j in judged:
            self.telemetry.placements_judged.labels(scheduler=j.scheduler, outcome=j.outcome).inc()
            for call in self.on_judged:
                call(j)
        return judged

    def _moved(
        self, snapshot: Snapshot, by_name: Mapping[str, MetricConfig]
    ) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
        """Shadow mode, for reading ksched's choices: per (node, metric), what the metric's sample
        shows of the pods still within their horizon (and still bound) that the other scheduler
        put there and ksched would have put elsewhere, taken off; and per (pod, metric), that
        pod's usage (measured where the pod query has it, else its estimate; nothing for a
        metric without one) as a share of ksched's choice for it. A choice is read as its node
        without the pods the other scheduler piled on it that ksched would have sent elsewhere,
        plus the pod alone: ksched's own choices are not piled up, since ksched, placing them,
        would have seen each one it made and spread the next (a shadow that piled them read
        -61 hot node-minutes avoided where kube-scheduler's pool ran 10.75). One pass over the
        placements a metric, with the nodes' allocatable read once."""
        taken_off: dict[tuple[str, str], float] = defaultdict(float)
        added: dict[tuple[str, str], float] = {}
        elsewhere = []
        for p in self.outcomes.pending.values():
            usage = self.state.usage.get(p.pod)
            if p.choice is not None and p.choice != p.node and usage is not None and usage.uid == p.uid:
                elsewhere.append((p, snapshot.index.get(p.node), snapshot.index.get(p.choice)))
        for m in by_name.values() if elsewhere else ():
            alloc = None if m.estimate is None else allocatable(snapshot, m.estimate.resource)
            if m.estimate is None or alloc is None:
                continue
            measured = self.metrics.pod_usage(m) or {}
            sample = self.metrics.latest(m.name)
            window = m.window_s()
            for p, source, choice in elsewhere:
                amount = measured.get(p.pod)
                if amount is None or not math.isfinite(amount):
                    amount = p.usage.get(m.name)
                if amount is None:
                    continue
                if choice is not None and alloc[choice] > 0:
                    added[p.pod, m.name] = m.load_sign * amount / alloc[choice]
                if source is not None and alloc[source] > 0:
                    # A pod bound within the sample's window shows in it only in part.
                    shown = (
                        1.0 if sample is None else 1.0 - float(before_event(p.at, sample.sampled_at, window))
                    )
                    taken_off[p.node, m.name] -= m.load_sign * shown * amount / alloc[source]
        return taken_off, added

    # -- its own thread ---------------------------------------------------

    def start(self) -> None:
        if self.enabled:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if not self.outcomes.pending:
                continue
            try:
                self.state.ask(self.look, self._stop, VIEW_WAIT_S)
            except Exception:
                log.exception("placement outcomes look failed")

    def status(self) -> dict[str, Any]:
        """``/status``'s ``outcomes`` (``enabled`` false: no metric has a line)."""
        if not self.enabled:
            return {"enabled": False}
        return {"enabled": True, **self.outcomes.status()}


def _hot(found: Sequence[Reading] | None) -> bool | None:
    """Whether any reading is at or over its line (None: no reading)."""
    if not found:
        return None
    return any(r.over >= 0 for r in found)
