"""Steering (``ksched.loop.steering``): the hysteresis, the cap, the reconcile a new leader does,
the marks removed on stop, ksched's own engine ignoring its mark, and the section's validation.
The controller runs against an in-memory node API that checks resourceVersions as the API
server does (a stale one is a 409)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
import pytest

from ksched.config import Config, EstimateConfig, MetricConfig, parse_config
from ksched.config.estimate import Calibration
from ksched.config.steering import SteeringConfig
from ksched.engine.reference import make_nodes
from ksched.engine.snapshot import build_snapshot
from ksched.errors import ConfigError
from ksched.loop.client import Response
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.mirror.slim import slim_node
from ksched.loop.mirror.state import ClusterState
from ksched.loop.steering import controller
from ksched.loop.steering.controller import Steering
from ksched.loop.steering.marks import Graded, Marks, Reading, readings, warmer
from ksched.loop.telemetry import Telemetry
from tests.conftest import node

Obj = dict[str, Any]
KEY = "ksched.io/hot"
MARK = {"key": KEY, "effect": "PreferNoSchedule"}
WARM = {"key": "ksched.io/warm", "effect": "PreferNoSchedule"}
DEDICATED = {"key": "dedicated", "value": "db", "effect": "NoSchedule"}
HEAT = MetricConfig(name="heat", source="annotation", annotation="example.com/heat", above=0.8)


def hot(value: float, line: float = 0.8) -> list[Reading]:
    return [Reading("heat", value, line, "above")]


# -- hysteresis ------------------------------------------------------------

# (seconds, value, marked after the look): one node, line 0.8, margin 0.1 (clear under 0.72),
# hold 30 s.
HYSTERESIS = [
    (
        "marked at the line, not below it",
        [(0, 0.79, False), (10, 0.8, True)],
    ),
    (
        "under the line but within the margin keeps the mark, and never starts the hold",
        [(0, 0.9, True), (10, 0.75, True), (100, 0.73, True)],
    ),
    (
        "cleared once below the margin for the whole hold",
        [(0, 0.9, True), (10, 0.7, True), (39, 0.7, True), (40, 0.7, False)],
    ),
    (
        "a value back within the margin restarts the hold",
        [
            (0, 0.9, True),
            (10, 0.7, True),
            (30, 0.75, True),
            (45, 0.7, True),
            (74, 0.7, True),
            (75, 0.7, False),
        ],
    ),
    (
        "a node with no value cools as one below the margin",
        [(0, 0.9, True), (10, None, True), (40, None, False)],
    ),
]


@pytest.mark.parametrize(("name", "steps"), HYSTERESIS, ids=[h[0] for h in HYSTERESIS])
def test_hysteresis(name: str, steps: list[tuple[float, float | None, bool]]) -> None:
    marks = Marks(margin=0.1, hold_s=30.0, max_share=1.0)
    marked: set[str] = set()
    got, want = [], []
    for t, value, expected in steps:
        values = {"n0": hot(value)} if value is not None else {}
        marked = set(marks.decide(values, ["n0"], marked, now=float(t)).marks)
        got.append((t, "n0" in marked))
        want.append((t, expected))
    assert got == want, name


# -- the cap ---------------------------------------------------------------


def test_the_cap_marks_only_the_hottest_share_of_schedulable_nodes() -> None:
    """8 schedulable nodes, maxShare 0.25: of 5 hot nodes, the 2 furthest over their line
    (as a share of the line: metrics in other units rank together) are marked."""
    values = {
        "n0": hot(0.81),
        "n1": hot(0.99),
        "n2": [Reading("latency", 300.0, 200.0, "above")],  # 50 % over
        "n3": hot(0.85),
        "n4": [Reading("free", 0.05, 0.1, "below")],  # 50 % under a below-line: 50 % over
        "n5": hot(0.5),
    }
    nodes = [f"n{i}" for i in range(8)]
    decision = Marks(0.1, 30.0, 0.25).decide(values, nodes, set(), now=0.0)
    assert sorted(decision.marks) == ["n2", "n4"]
    assert sorted(decision.capped) == ["n0", "n1", "n3"]


def test_the_cap_counts_schedulable_nodes_and_keeps_a_marked_node_on_a_tie() -> None:
    values = {"n0": hot(0.9), "n1": hot(0.9)}
    # 4 schedulable (the cordoned ones are left out): 1 mark.
    decision = Marks(0.1, 30.0, 0.25).decide(values, ["n0", "n1", "n2", "n3"], {"n1"}, now=0.0)
    assert list(decision.marks) == ["n1"]
    assert Marks(0.1, 30.0, 0.25).decide(values, ["n0", "n1", "n2"], set(), now=0.0).marks == {}


def test_anticipation_never_marks_a_node_for_its_size_nor_before_a_node_at_its_line() -> None:
    """A heavy next pod of 2 CPUs takes an idle 2-CPU node to 1.0 on its own: that is the
    node's size, not its load, so no lead there. A node over its line ranks before one that
    only a heavy next pod would take there, however large that pod's share."""
    estimate = EstimateConfig(resource="cpu", calibration=Calibration(next_pod=2000.0))
    metric = replace(HEAT, estimate=estimate)
    nodes = [
        node("tiny", cpu="2", annotations={"example.com/heat": "0.0"}),
        node("small", cpu="4", annotations={"example.com/heat": "0.6"}),  # 0.6 + 0.5: 37.5 % over
        node("big", cpu="32", annotations={"example.com/heat": "0.85"}),  # 6 % over by itself
    ]
    snapshot = build_snapshot(nodes, [])
    matrix = replace(MetricStore([metric], None, None, lambda: nodes).matrix(snapshot), metrics=(metric,))
    ahead = readings(snapshot, matrix, SteeringConfig(enabled=True).lines((metric,)), anticipate=True)
    assert ahead["tiny"][0].lead == 0.0 and ahead["small"][0].lead == pytest.approx(0.5)
    decision = Marks(0.1, 30.0, 1 / 3).decide(ahead, ["tiny", "small", "big"], set(), now=0.0)
    assert (list(decision.marks), list(decision.capped)) == (["big"], ["small"])


def test_at_the_cap_a_marked_node_keeps_its_place_until_another_is_hotter_by_the_margin() -> None:
    # One mark (4 nodes, 25 %): n0 carries it at 5 % over its line.
    marks = Marks(0.1, 30.0, 0.25)
    nodes = ["n0", "n1", "n2", "n3"]
    slightly = {"n0": hot(0.84), "n1": hot(0.88)}  # n1 10 % over: hotter, not by the margin
    assert list(marks.decide(slightly, nodes, {"n0"}, now=0.0).marks) == ["n0"]
    clearly = {"n0": hot(0.84), "n1": hot(0.98)}  # n1 22.5 % over
    assert list(marks.decide(clearly, nodes, {"n0"}, now=10.0).marks) == ["n1"]


def test_a_node_threshold_annotation_wins_over_the_metric_line() -> None:
    """As in the filter: a node's own ``threshold.ksched.io/<metric>-above`` is its line."""
    nodes = [
        node("n0", annotations={"example.com/heat": "0.9", "threshold.ksched.io/heat-above": "0.95"}),
        node("n1", annotations={"example.com/heat": "0.9"}),
    ]
    snapshot = build_snapshot(nodes, [])
    store = MetricStore([HEAT], None, None, lambda: nodes)
    lines = SteeringConfig(enabled=True).lines((HEAT,))
    got = readings(snapshot, store.matrix(snapshot), lines)
    assert got == {"n0": [Reading("heat", 0.9, 0.95, "above")], "n1": [Reading("heat", 0.9, 0.8, "above")]}


def test_anticipation_marks_a_node_one_heavy_pod_from_its_line_by_its_size() -> None:
    """A heavy next pod (the p90 of the recent pods: 1 CPU here) takes a quarter of a 4-CPU
    node and a sixteenth of a 16-CPU one: at 0.7 against a line of 0.8 the small node is as
    good as hot for the next pod another scheduler places, the large one is not."""
    estimate = EstimateConfig(resource="cpu", calibration=Calibration(next_pod=1000.0))
    metric = replace(HEAT, estimate=estimate)
    nodes = [
        node("small", cpu="4", annotations={"example.com/heat": "0.7"}),
        node("large", cpu="16", annotations={"example.com/heat": "0.7"}),
    ]
    snapshot = build_snapshot(nodes, [])
    matrix = replace(MetricStore([metric], None, None, lambda: nodes).matrix(snapshot), metrics=(metric,))
    lines = SteeringConfig(enabled=True).lines((metric,))
    plain = readings(snapshot, matrix, lines)
    ahead = readings(snapshot, matrix, lines, anticipate=True)
    assert [r.over < 0 for r in plain["small"] + plain["large"]] == [True, True], "both under the line"
    (small,), (large,) = ahead["small"], ahead["large"]
    assert small.lead == pytest.approx(0.25) and large.lead == pytest.approx(1 / 16)
    decision = Marks(0.1, 30.0, 1.0).decide(ahead, ["small", "large"], set(), now=0.0)
    assert list(decision.marks) == ["small"]
    assert small.note() == "heat 0.7 with 0.25 for a heavy next pod at or over its line 0.8"
    quiet = replace(metric, estimate=replace(estimate, calibration=Calibration()))
    (idle,) = readings(snapshot, replace(matrix, metrics=(quiet,)), lines, anticipate=True)["small"]
    assert idle.lead == 0.0 and idle.over < 0, "no recent pods: nothing anticipated"


# -- the controller ----------------------------------------------------------


@dataclass
class NodeApi:
    """Nodes by name; GET and JSON merge PATCH of spec.taints with a resourceVersion
    precondition (409 when stale). ``conflicts``: nodes changed by someone else just before
    ksched's next patch of them."""

    nodes: dict[str, Obj]
    conflicts: set[str] = field(default_factory=set)
    asked: list[tuple[str, str]] = field(default_factory=list)
    # The informer: told each node as it changes.
    watch: Any = None

    def changed(self, obj: Obj) -> None:
        self._bump(obj)
        if self.watch is not None:
            self.watch("MODIFIED", slim_node(copy.deepcopy(obj)), None)

    def request(self, method: str, path: str, **kw: Any) -> Response:
        name = path.rsplit("/", 1)[1]
        self.asked.append((method, name))
        obj = self.nodes.get(name)
        if obj is None:
            return Response(404, b"{}")
        if method == "GET":
            return Response(200, orjson.dumps(obj))
        assert method == "PATCH" and kw["content_type"] == "application/merge-patch+json"
        if name in self.conflicts:
            self.conflicts.discard(name)
            self._bump(obj)
        body = kw["body"]
        if body["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            return Response(409, b'{"reason": "Conflict"}')
        obj["spec"]["taints"] = body["spec"]["taints"] or []
        self.changed(obj)
        return Response(200, orjson.dumps(obj))

    @staticmethod
    def _bump(obj: Obj) -> None:
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)

    def taints(self, name: str) -> list[Obj]:
        return list(self.nodes[name]["spec"]["taints"])


@dataclass
class Harness:
    steering: Steering
    api: NodeApi
    telemetry: Telemetry
    events: list[tuple[str, str, str]]
    leading: list[bool]

    def heat(self, values: dict[str, float]) -> None:
        """The nodes' heat annotations change, as the informer tells the cluster state."""
        for n, value in values.items():
            obj = self.api.nodes[n]
            obj["metadata"]["annotations"]["example.com/heat"] = str(value)
            self.api.changed(obj)
        state = self.steering.state
        shown = threading.Event()
        while not shown.is_set():  # the state's thread applies what the informer queued
            state.ask(lambda: shown.set() if not state.inbox else None, threading.Event(), 5.0)

    def count(self, change: str) -> float:
        return (
            self.telemetry.registry.get_sample_value("ksched_steering_marks_total", {"change": change}) or 0.0
        )


@pytest.fixture
def harness() -> Iterator[Any]:
    """``harness(heat, taints, **steering)``: a steering controller over nodes with the
    ``heat`` annotation values and taints given, the state's thread run as the scheduling
    loop runs it."""
    stop = threading.Event()

    def make(
        heat: dict[str, float],
        taints: dict[str, list[Obj]],
        labels: dict[str, dict[str, str]] | None = None,
        **steering: Any,
    ) -> Harness:
        nodes = []
        for i, (n, value) in enumerate(heat.items()):
            obj = node(
                n,
                labels=(labels or {}).get(n),
                annotations={"example.com/heat": str(value)},
                taints=copy.deepcopy(taints.get(n)),
            )
            obj["metadata"].update(uid=f"uid-{n}", resourceVersion=str(10 + i))
            nodes.append(obj)
        config = Config(metrics=(HEAT,), steering=SteeringConfig(**{"enabled": True, **steering}))
        state = ClusterState(config.metrics)
        for obj in nodes:
            state.on_node("ADDED", slim_node(obj), None)
        api = NodeApi({n["metadata"]["name"]: copy.deepcopy(n) for n in nodes}, watch=state.on_node)
        store = MetricStore(config.metrics, None, None, lambda: nodes)
        events: list[tuple[str, str, str]] = []
        leading = [True]
        telemetry = Telemetry()
        steering_ = Steering(
            config,
            state,
            store,
            api,  # type: ignore[arg-type]
            telemetry,
            lambda: leading[0],
            lambda obj, _kind, reason, _action, note: events.append((obj["metadata"]["name"], reason, note)),
            lambda: [slim_node(n) for n in nodes],
            clock=lambda: 0.0,
        )

        def loop() -> None:
            while not stop.wait(0.005):
                state.sync()

        threading.Thread(target=loop, daemon=True).start()
        return Harness(steering_, api, telemetry, events, leading)

    yield make
    stop.set()


def test_a_new_leader_reconciles_marks_with_the_nodes(harness: Any) -> None:
    """n0 is hot and unmarked; n1 cooled but carries a crashed leader's marks beside a taint of
    its own; n2 is hot and marked. The leader marks n0 (both marks: hot and warm), takes n1's
    off (its other taint stays), leaves n2 alone, and reports each change on the node."""
    h = harness(
        {"n0": 0.9, "n1": 0.3, "n2": 0.95, "n3": 0.1, "n4": 0.1, "n5": 0.1, "n6": 0.1, "n7": 0.1},
        {"n1": [DEDICATED, MARK, WARM], "n2": [MARK, WARM]},
        hold_s=0.0,
    )
    h.leading[0] = False
    assert h.steering.look() is None
    assert h.api.asked == [], "a follower writes nothing"
    h.leading[0] = True
    h.steering.look()
    assert h.api.taints("n0") == [MARK, WARM]
    assert h.api.taints("n1") == [DEDICATED]
    assert h.api.taints("n2") == [MARK, WARM]
    assert ("PATCH", "n2") not in h.api.asked
    assert [(n, reason) for n, reason, _ in h.events] == [("n1", "KschedUnmarked"), ("n0", "KschedMarkedHot")]
    assert h.events[1][2] == "other schedulers steered away: heat 0.9 at or over its line 0.8"
    assert sorted(h.steering.marked) == ["n0", "n2"]
    assert (h.count("added"), h.count("removed")) == (1.0, 1.0)
    assert h.telemetry.registry.get_sample_value("ksched_steering_marked_nodes") == 2.0
    status = h.steering.status()
    assert status["mode"] == "leader" and [m["node"] for m in status["marked"]] == ["n0", "n2"]  # type: ignore[attr-defined]


def test_a_node_changed_meanwhile_is_read_again_and_its_new_taints_kept(harness: Any) -> None:
    h = harness({"n0": 0.9, "n1": 0.1, "n2": 0.1, "n3": 0.1}, {})
    h.api.conflicts.add("n0")
    h.api.nodes["n0"]["spec"]["taints"] = [DEDICATED]  # added by someone after the informer saw n0
    h.steering.look()
    assert h.api.asked == [("GET", "n0"), ("PATCH", "n0"), ("GET", "n0"), ("PATCH", "n0")]
    assert h.api.taints("n0") == [DEDICATED, MARK, WARM]


def test_stopping_removes_every_mark_and_nothing_else(harness: Any) -> None:
    h = harness(
        {"n0": 0.9, "n1": 0.1, "n2": 0.1, "n3": 0.1}, {"n3": [MARK, DEDICATED]}, hold_s=600.0, max_share=0.5
    )
    h.steering.look()
    assert sorted(h.steering.marked) == ["n0", "n3"]  # n3 is held: cool for less than the hold
    h.steering.leading = True
    h.steering.stop()
    assert h.api.taints("n0") == [] and h.api.taints("n3") == [DEDICATED]
    assert h.steering.marked == {}


def test_a_node_selector_keeps_the_marks_to_its_pool(harness: Any) -> None:
    """Two pools: ksched steers pool a only. Pool b's hot node is never marked, and the mark
    another ksched left on pool b stays through a look and through stopping; the cap counts
    pool a's nodes (a quarter of four: one mark, not two of eight)."""
    pool = {f"a{i}": {"pool": "a"} for i in range(4)} | {f"b{i}": {"pool": "b"} for i in range(4)}
    heat = {"a0": 0.9, "a1": 0.85, "a2": 0.1, "a3": 0.1, "b0": 0.95, "b1": 0.9, "b2": 0.1, "b3": 0.1}
    h = harness(heat, {"b1": [MARK]}, labels=pool, node_selector=(("pool", "a"),))
    h.steering.look()
    marked = [n for n in heat if MARK in h.api.taints(n)]
    assert marked == ["a0", "b1"], "only pool a's hottest node is marked; b1's mark is not ksched's"
    assert all(name.startswith("a") for _, name in h.api.asked)
    h.steering.stop()
    assert h.api.taints("a0") == [] and h.api.taints("b1") == [MARK]


def _with_lead(lead: float | dict[str, float]) -> Any:
    """``readings`` as the controller calls it, each reading with a heavy next pod's room of
    ``lead`` (what a learned estimate's ``next_pod`` gives; by node where a map: a share of
    each node's size)."""

    def fake(*args: Any, **kw: Any) -> dict[str, list[Reading]]:
        return {
            n: [replace(r, lead=lead[n] if isinstance(lead, dict) else lead) for r in rs]
            for n, rs in readings(*args, **kw).items()
        }

    return fake


def test_two_marks_a_hot_node_carries_both_and_a_node_two_heavy_pods_away_the_lighter(
    harness: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A heavy next pod takes 0.15 of each node. n0 (0.9) is hot: both marks. n1 (0.55) is not
    one heavy pod from its line (0.70) but is two (0.85): the lighter mark only, so that
    kube-scheduler, counting a node's marks, takes the unmarked nodes first, then n1, then n0.
    Once n0 cools to two pods away it keeps the lighter mark; a cold n1 loses its mark."""
    monkeypatch.setattr(controller, "readings", _with_lead(0.15))
    heat = {"n0": 0.9, "n1": 0.55} | {f"n{i}": 0.1 for i in range(2, 8)}
    h = harness(heat, {}, hold_s=0.0)
    h.steering.look()
    assert (h.api.taints("n0"), h.api.taints("n1")) == ([MARK, WARM], [WARM])
    assert all(h.api.taints(f"n{i}") == [] for i in range(2, 8))
    assert [(n, reason) for n, reason, _ in h.events] == [
        ("n0", "KschedMarkedHot"),
        ("n1", "KschedMarkedWarm"),
    ]
    assert h.events[1][2] == (
        "other schedulers steered away, less: heat 0.55 with 0.3 for 2 heavy next pods at or over its line 0.8"
    )
    assert h.telemetry.registry.get_sample_value("ksched_steering_warm_nodes") == 1.0
    status = h.steering.status()
    assert [m["node"] for m in status["warm"]] == ["n1"] and status["warmKey"] == "ksched.io/warm"  # type: ignore[index]
    h.events.clear()
    h.heat({"n0": 0.52, "n1": 0.1})
    h.steering.look()
    assert (h.api.taints("n0"), h.api.taints("n1")) == ([WARM], [])
    assert sorted((n, reason) for n, reason, _ in h.events) == [
        ("n0", "KschedMarkedWarm"),
        ("n1", "KschedUnmarked"),
    ]
    assert (h.count("added"), h.count("removed")) == (2.0, 1.0), (
        "n0 went warm from hot: no node added or removed"
    )
    h.steering.stop()
    assert all(h.api.taints(n) == [] for n in heat)


def test_the_lighter_marks_stop_at_their_share_and_count_the_hot_ones(
    harness: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight nodes, maxShare 0.25 and warmShare 0.5: four marked at most. h0 and h1 are one
    heavy pod from their line (0.7 + 0.12); w0-w3 are not (0.45 + 0.3), but two of their
    heavier pods take them further over it than two take h0 and h1. The hot ones take their
    places first, and of the four nearest the lighter line, only two fit beside them."""
    lead = {"h0": 0.12, "h1": 0.12} | {f"w{i}": 0.3 for i in range(4)} | {"c0": 0.12, "c1": 0.12}
    monkeypatch.setattr(controller, "readings", _with_lead(lead))
    heat = {"h0": 0.7, "h1": 0.7} | {f"w{i}": 0.45 for i in range(4)} | {"c0": 0.1, "c1": 0.1}
    h = harness(heat, {}, warm_share=0.5)
    decision = h.steering.look()
    assert {n: h.api.taints(n) for n in heat if h.api.taints(n)} == {
        "h0": [MARK, WARM],
        "h1": [MARK, WARM],
        "w0": [WARM],
        "w1": [WARM],
    }
    assert sorted(decision.warm_capped) == ["w2", "w3"]
    h.heat({"w0": 0.1})
    h.steering.look()
    # w0 cooled: within its hold it still wants the mark, but at the cap it ranks behind w2.
    assert (h.api.taints("w0"), h.api.taints("w2")) == ([], [WARM])
    assert h.events[-2:] == [
        (
            "w0",
            "KschedUnmarked",
            "capped: at most 0.5 of 8 schedulable nodes carry a mark, the hottest first",
        ),
        ("w2", "KschedMarkedWarm", h.events[-1][2]),
    ]


def test_a_hot_mark_without_the_warm_one_is_completed_and_warm_off_writes_one_mark(harness: Any) -> None:
    """A node marked by a ksched with ``warm`` off carries the hot mark alone: the leader adds
    the lighter one, so that it ranks below the warm nodes. With ``warm`` off, a hot node
    carries the one mark and the lighter key is not ksched's to touch."""
    h = harness({"n0": 0.9, "n1": 0.1, "n2": 0.1, "n3": 0.1}, {"n0": [MARK]})
    h.steering.look()
    assert h.api.taints("n0") == [MARK, WARM]
    assert [(n, reason) for n, reason, _ in h.events] == [("n0", "KschedMarkedHot")]
    assert (h.count("added"), h.count("removed")) == (0.0, 0.0), "n0 was marked already"
    h.steering.look()
    assert h.api.asked.count(("PATCH", "n0")) == 1, "completed once, then left alone"
    off = harness({"n0": 0.9, "n1": 0.1, "n2": 0.1, "n3": 0.1}, {"n1": [WARM]}, warm=False)
    off.steering.look()
    assert (off.api.taints("n0"), off.api.taints("n1")) == ([MARK], [WARM])
    off.steering.stop()
    assert (off.api.taints("n0"), off.api.taints("n1")) == ([], [WARM])


def test_graded_marks_judge_the_lighter_one_on_more_room_but_never_a_node_for_its_size() -> None:
    """Two heavy next pods' room: a node at 0.5 with 0.2 a pod is warm (0.9), not hot (0.7).
    Where two pods alone reach the line (0.45 each on a small node), the one pod's room
    stays: an idle small node is not marked for its size."""
    readings_ = {
        "near": [Reading("cpu", 0.5, 0.8, "above", lead=0.2)],
        "small": [Reading("cpu", 0.1, 0.8, "above", lead=0.45)],
    }
    warm = warmer(readings_, 2.0)
    assert warm["near"][0].lead == pytest.approx(0.4) and warm["near"][0].pods == 2.0
    assert warm["small"][0].lead == 0.45 and warm["small"][0].pods == 1.0
    decision = Graded(0.1, 30.0, 0.5, 1.0, 2.0).decide(readings_, ["near", "small"], set(), set(), now=0.0)
    assert (decision.marks, list(decision.warm)) == ({}, ["near"])
    single = Graded(0.1, 30.0, 0.5, 1.0, None).decide(readings_, ["near", "small"], set(), set(), now=0.0)
    assert (single.marks, single.warm) == ({}, {})


def test_a_graded_node_cools_a_mark_at_a_time_each_after_its_hold() -> None:
    """Hold 30 s, margin 0.1, a heavy next pod 0.1: hot at 0.9; at 0.55 (0.65 with one pod,
    0.75 with two) it is below the hot line by the margin but not the lighter one's, so after
    its hold it keeps the lighter mark; at 0.3 it loses that after another hold."""
    graded = Graded(0.1, 30.0, 0.5, 1.0, 2.0)
    others = {f"n{i}": [Reading("heat", 0.1, 0.8, "above", lead=0.1)] for i in range(1, 4)}
    seen: list[tuple[float, str]] = []
    hot: set[str] = set()
    warm: set[str] = set()
    for at, value in [(0, 0.9), (10, 0.55), (39, 0.55), (40, 0.55), (50, 0.3), (79, 0.3), (80, 0.3)]:
        values = {"n0": [Reading("heat", value, 0.8, "above", lead=0.1)], **others}
        d = graded.decide(values, ["n0", *others], hot, warm, now=float(at))
        hot, warm = set(d.marks), set(d.marks) | set(d.warm)
        seen.append((at, "hot" if "n0" in d.marks else "warm" if "n0" in d.warm else "cool"))
    assert seen == [
        (0, "hot"),
        (10, "hot"),
        (39, "hot"),
        (40, "warm"),
        (50, "warm"),
        (79, "warm"),
        (80, "cool"),
    ]


# -- ksched's own engine -------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "kept"),
    [
        (SteeringConfig().own_marks, ["dedicated", "example.com/steer", "other"]),
        (("example.com/steer", "ksched.io/warm"), ["dedicated", KEY, "other"]),
        (SteeringConfig(warm=False).own_marks, ["dedicated", "example.com/steer", "other"]),
    ],
    ids=["default keys", "another hot key configured", "warm off: a lighter mark left behind still ignored"],
)
def test_the_engine_and_the_reference_leave_out_their_own_marks(
    keys: tuple[str, ...], kept: list[str]
) -> None:
    """The marks steer other schedulers: ksched's filter and score never see them (the
    configured keys' PreferNoSchedule taints only; the same key with another effect stays)."""
    taints = [DEDICATED, MARK, WARM, {"key": "example.com/steer", "effect": "PreferNoSchedule"}]
    taints += [{"key": "other", "effect": "NoSchedule"}, {"key": "ksched.io/warm", "effect": "NoSchedule"}]
    kept = [*kept, "ksched.io/warm"]
    n = node("n0", taints=taints)
    snapshot = build_snapshot([n], [], keys)
    assert len(snapshot.arrays["taint_keys"]) == len(kept)
    assert sorted(t["key"] for t in make_nodes([n], [], keys)["n0"].taints) == sorted(kept)


# -- the section -------------------------------------------------------------------

DOC = {
    "apiVersion": "ksched.io/v1alpha1",
    "kind": "KschedConfiguration",
    "metrics": [
        {"name": "heat", "source": "annotation", "annotation": "example.com/heat", "filter": {"above": 0.8}}
    ],
}


def test_the_section_defaults_and_lines() -> None:
    config = parse_config({**DOC, "steering": {"enabled": True}})
    s = config.steering
    assert (s.taint_key, s.interval_s, s.margin, s.hold_s, s.max_share) == (KEY, 2.0, 0.1, 60.0, 0.25)
    assert (s.warm, s.warm_key, s.warm_leads, s.warm_share) == (True, "ksched.io/warm", 2.0, 0.75)
    assert s.mark_keys == (KEY, "ksched.io/warm")
    assert parse_config({**DOC, "steering": {"warm": False}}).steering.mark_keys == (KEY,)
    wide = parse_config({**DOC, "steering": {"maxShare": 0.9}}).steering
    assert wide.warm_share == 0.9, "the lighter marks' share defaults to at least the hot one's"
    assert [(x.metric, x.line) for x in s.lines(config.metrics)] == [("heat", 0.8)]
    assert not parse_config(DOC).steering.enabled
    assert s.node_selector == () and s.selects({})
    pooled = parse_config({**DOC, "steering": {"enabled": True, "nodeSelector": {"pool": "a"}}}).steering
    assert pooled.selects({"pool": "a", "zone": "z1"}) and not pooled.selects({"pool": "b"})


@pytest.mark.parametrize(
    ("steering", "error"),
    [
        ({"maxShare": 1.5}, "steering.maxShare: 1.5 is not a share between 0 and 1"),
        ({"margin": -0.1}, "steering.margin"),
        ({"taintKey": "bad key"}, "steering.taintKey"),
        ({"interval": "100ms"}, "steering.interval"),
        ({"metrics": [{"name": "nope"}]}, "steering.metrics[0].name: 'nope' is not a metric"),
        ({"metrics": [{"name": "heat", "line": "x"}]}, "steering.metrics[0].line"),
        ({"colour": "red"}, "steering.colour: unknown key"),
        ({"nodeSelector": ["pool"]}, "steering.nodeSelector: expected a map"),
        ({"nodeSelector": {"bad key": "a"}}, "steering.nodeSelector: 'bad key' is not a label key"),
        ({"nodeSelector": {"pool": "a b"}}, "steering.nodeSelector.pool: 'a b' is not a label value"),
        ({"warmKey": "ksched.io/hot"}, "steering.warmKey: 'ksched.io/hot' is taintKey too"),
        ({"warmKey": "bad key"}, "steering.warmKey: 'bad key' is not a taint key"),
        ({"warmLeads": 0.5}, "steering.warmLeads: 0.5 is not a count of heavy next pods from 1 to 10"),
        ({"warmShare": 0.2}, "steering.warmShare: 0.2 is under maxShare 0.25"),
    ],
)
def test_the_section_is_validated_with_key_paths(steering: Obj, error: str) -> None:
    with pytest.raises(ConfigError, match=error.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        parse_config({**DOC, "steering": steering})


def test_enabled_without_a_line_is_refused() -> None:
    doc = {**DOC, "metrics": [{"name": "price", "source": "annotation", "annotation": "p"}]}
    with pytest.raises(ConfigError, match="nothing can mark a node"):
        parse_config({**doc, "steering": {"enabled": True}})
