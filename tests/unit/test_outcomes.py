"""Placement outcomes (``ksched.loop.scheduling.outcomes``): whether a placement's node went
hot within its horizon, ksched's placements and other schedulers' apart; in shadow mode the
hot node-minutes the other scheduler's placements led to, ksched's estimate for its own
choices, and the same report from ``shadow.log``. Runs the real cluster state, metric store,
load model and shadow loop on node annotations, with a clock the test moves."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest

from ksched.commands.shadow import render_report, render_status, report_from_log
from ksched.config import parse_config
from ksched.engine.requirements import counted_requests
from ksched.loop.metrics.load_model import LoadModel
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.mirror.state import ClusterState
from ksched.loop.scheduling.outcomes import OutcomeWatch
from ksched.loop.scheduling.shadow import Shadow
from ksched.loop.telemetry import Telemetry
from tests.conftest import Obj, node, pod

HEAT = "example.com/heat"
HORIZON_S = 60.0
CONFIG: dict[str, Any] = {
    "apiVersion": "ksched.io/v1alpha1",
    "kind": "KschedConfiguration",
    # A node is hot at 0.8 of heat; a pod adds its CPU over the node's (the estimate).
    "metrics": [
        {
            "name": "heat",
            "source": "annotation",
            "annotation": HEAT,
            "filter": {"above": 0.8},
            "weight": 5,
            "prefer": "lower",
            "estimate": {"resource": "cpu"},
        }
    ],
    # An annotation has no window: the horizon is the margin.
    "outcomes": {"margin": f"{HORIZON_S:g}s", "interval": "10s"},
}


class Clock:
    """Wall time moved by the test (shadow decisions are stamped with the real time)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def heated(name: str, heat: float, **annotations: str) -> Obj:
    return node(name, cpu="1", annotations={HEAT: str(heat), **annotations})


class Cluster:
    """The cluster state, metric store and outcome looks of one ksched, on a test clock."""

    def __init__(self, config: dict[str, Any] = CONFIG, nodes: tuple[Obj, ...] = ()) -> None:
        self.config = parse_config(config)
        self.clock = Clock()
        self.start = self.clock.now
        self.telemetry = Telemetry()
        self.state = ClusterState(self.config.metrics, clock=self.clock)
        self.metrics = MetricStore(self.config.metrics, None, self.telemetry, clock=self.clock)
        self.watch = OutcomeWatch(self.config, self.state, self.metrics, self.telemetry, clock=self.clock)
        self.state.placements = self.watch
        for n in nodes:
            self.state.on_node("ADDED", n, None)
        self.state.sync()

    def heat(self, name: str, value: float, **annotations: str) -> None:
        self.state.on_node("MODIFIED", heated(name, value, **annotations), None)
        self.state.sync()

    def look_at(self, seconds: float) -> list[tuple[str, str, str]]:
        """A look ``seconds`` after the start: the verdicts given, as (pod, who, outcome)."""
        self.clock.now = self.start + seconds
        return [(j.pod, j.scheduler, j.outcome) for j in self.watch.look()]

    def judged(self, scheduler: str, outcome: str) -> float:
        return self.telemetry.placements_judged.labels(scheduler=scheduler, outcome=outcome)._value.get()


def place_by_ksched(c: Cluster, name: str, node_name: str) -> None:
    """ksched assumes the pod on the node, as its cycle does before the bind."""
    p = pod(name)
    requests, ports = counted_requests(p)
    c.state.assume(f"default/{name}", name, node_name, requests, ports, pod=p)


def place_by_other(c: Cluster, name: str, node_name: str) -> None:
    p = pod(name, scheduler="default-scheduler", node_name=node_name)
    p["metadata"]["uid"] = name
    c.state.on_pod("ADDED", p, None)
    c.state.sync()


# name, heat of n0 at each look (seconds after the placement, at 0: value), looks, want
LIVE = [
    ("crosses the line within the horizon", {20: 0.9}, (10, 30, 60), "went_hot"),
    ("reaches the line exactly", {20: 0.8}, (10, 30, 60), "went_hot"),
    ("stays below the line", {20: 0.79}, (10, 30, 60), "stayed_cool"),
    ("crosses it only after the horizon", {61: 0.95}, (10, 30, 60, 70), "stayed_cool"),
]


@pytest.mark.parametrize(("name", "changes", "looks", "want"), LIVE, ids=[c[0] for c in LIVE])
@pytest.mark.parametrize("placed_by", ["ksched", "other"])
def test_a_placement_is_judged_by_its_node_within_the_horizon(
    name: str, changes: dict[float, float], looks: tuple[float, ...], want: str, placed_by: str
) -> None:
    c = Cluster(nodes=(heated("n0", 0.5),))
    (place_by_ksched if placed_by == "ksched" else place_by_other)(c, "web", "n0")
    verdicts = []
    for at in looks:
        for when, value in sorted(changes.items()):
            if when <= at:
                c.heat("n0", value)
        verdicts += c.look_at(at)
    assert verdicts == [("default/web", placed_by, want)]
    assert c.judged(placed_by, want) == 1
    other = "other" if placed_by == "ksched" else "ksched"
    assert sum(c.judged(other, o) for o in ("went_hot", "stayed_cool", "unmeasured")) == 0


def test_a_node_the_estimate_reads_hot_but_the_metric_never_does_stayed_cool() -> None:
    """The verdict is the metric's: a pod's estimate (500m on a 1-CPU node at 0.5) reads the
    node at 1.0 until a sample shows the pod, but the metric never passes 0.6, so the node
    never went hot. Judged by the estimate, a shadow counted 2.8x the hot node-minutes
    Prometheus recorded."""
    config = copy.deepcopy(CONFIG)
    config["metrics"][0]["estimate"]["window"] = "90s"  # the pod counts until a sample 90 s on
    c = Cluster(config, nodes=(heated("n0", 0.5),))
    p = pod("web", cpu="500m", scheduler="default-scheduler", node_name="n0")
    p["metadata"]["uid"] = "web"
    c.state.on_pod("ADDED", p, None)
    c.state.sync()
    estimated = LoadModel(c.metrics, c.state.recent).scheduling(c.state.snapshot())
    assert estimated.values[0, 0] == pytest.approx(1.0), "the estimate reads it hot"
    verdicts = c.look_at(10)
    c.heat("n0", 0.6)
    for at in range(30, 170, 20):  # the horizon: the 90 s window and the 60 s margin
        verdicts += c.look_at(at)
    assert verdicts == [("default/web", "other", "stayed_cool")]


def test_a_placement_whose_horizon_has_not_ended_is_not_judged_yet() -> None:
    c = Cluster(nodes=(heated("n0", 0.95),))
    place_by_ksched(c, "web", "n0")
    assert c.look_at(10) == [] and c.look_at(59) == []
    assert c.watch.status()["waiting"] == 1
    assert c.watch.status()["ksched"]["wentHot"] == 0
    assert c.look_at(60) == [("default/web", "ksched", "went_hot")]
    assert c.watch.status()["waiting"] == 0


def test_the_node_threshold_annotation_wins_over_the_filter_line() -> None:
    own = {"threshold.ksched.io/heat-above": "0.5"}
    c = Cluster(nodes=(heated("n0", 0.6, **own), heated("n1", 0.6)))
    place_by_ksched(c, "on-n0", "n0")
    place_by_ksched(c, "on-n1", "n1")
    c.look_at(10)
    assert sorted(c.look_at(60)) == [
        ("default/on-n0", "ksched", "went_hot"),
        ("default/on-n1", "ksched", "stayed_cool"),
    ]


def test_ksched_and_other_schedulers_placements_are_counted_apart() -> None:
    c = Cluster(nodes=(heated("cool", 0.2), heated("hot", 0.9)))
    place_by_ksched(c, "mine", "cool")
    place_by_other(c, "theirs-1", "hot")
    place_by_other(c, "theirs-2", "cool")
    # A pod listed at start (bound before the watch began) is not judged.
    old = pod("old", node_name="hot")
    old["metadata"]["creationTimestamp"] = "2020-01-01T00:00:00Z"
    c.state.on_pod("ADDED", old, None)
    c.state.sync()
    c.look_at(10)
    c.look_at(60)
    status = c.watch.status()
    assert status["ksched"] == {"wentHot": 0, "stayedCool": 1, "unmeasured": 0, "wentHotShare": 0.0}
    assert status["other"] == {"wentHot": 1, "stayedCool": 1, "unmeasured": 0, "wentHotShare": 0.5}
    text = render_status(quiet_status(outcomes=c.watch.status()), "127.0.0.1:10259")
    assert (
        "outcomes:  within 60s of the placement: ksched 0 of 1 went hot (0.0%), "
        "other schedulers 1 of 2 went hot (50.0%); 0 not judged yet"
    ) in text


def test_a_failed_bind_is_not_judged() -> None:
    c = Cluster(nodes=(heated("n0", 0.9),))
    place_by_ksched(c, "web", "n0")
    c.state.forget("default/web", "web")
    c.state.sync()
    c.look_at(10)
    assert c.look_at(60) == []


# -- shadow mode ---------------------------------------------------------------


def shadow_of(tmp_path: Path, nodes: tuple[Obj, ...]) -> tuple[Shadow, Cluster, Path]:
    log = tmp_path / "shadow.jsonl"
    config = {**CONFIG, "shadow": {"enabled": True, "namespaces": ["default"], "log": str(log)}}
    c = Cluster(config, nodes)
    c.state.placements = None  # a shadow hands its comparisons over itself
    shadow = Shadow(c.config, c.state, c.metrics, c.telemetry, outcomes=c.watch)
    return shadow, c, log


def bind(shadow: Shadow, c: Cluster, name: str, node_name: str, cpu: str = "100m") -> None:
    """The watch events of a pod created unbound, then bound by default-scheduler."""
    p = pod(name, cpu=cpu, scheduler="default-scheduler")
    p["metadata"]["uid"] = name
    bound = {**p, "spec": {**p["spec"], "nodeName": node_name}}
    shadow.on_pod("ADDED", p, None)
    shadow.on_pod("MODIFIED", bound, p)
    c.state.sync()


def test_shadow_counts_a_hot_node_once_and_estimates_ksched_s_cool_choice(tmp_path: Path) -> None:
    # "hot" is over the line; ksched would choose "cool", which stays cool with 100m added.
    shadow, c, _ = shadow_of(tmp_path, (heated("cool", 0.3), heated("hot", 0.9)))
    bind(shadow, c, "web-1", "hot")
    c.look_at(10)
    bind(shadow, c, "web-2", "hot")  # 10 s later, on the same node
    assert [(d.pod, d.outcome, d.ksched_node) for d in shadow.ledger.recent] == [
        ("default/web-1", "other", "cool"),
        ("default/web-2", "other", "cool"),
    ]
    for at in (20, 30, 40, 50, 60, 70):
        c.look_at(at)
    o = shadow.ledger.report()["outcomes"]
    assert o["counts"] == {"stayed_cool": 0, "went_hot": 2, "unmeasured": 0}
    # "hot" was hot from the first placement to the end of the second's horizon: 70 s, once,
    # not 60 s for each pod.
    assert o["hotNodeMinutes"] == pytest.approx(70 / 60, abs=1e-3)
    assert o["kschedCountsEstimated"] == {"stayed_cool": 2, "went_hot": 0, "unmeasured": 0}
    assert o["kschedHotNodeMinutesEstimated"] == 0.0
    assert o["hotNodeMinutesAvoidedEstimated"] == pytest.approx(70 / 60, abs=1e-3)
    assert c.telemetry.shadow_hot_minutes.labels(scheduler="other")._value.get() == pytest.approx(
        70 / 60, abs=1e-3
    )
    text = render_report(shadow.ledger.report(), "test")
    assert "hot node-minutes, the other scheduler's placements:  1.2" in text
    assert "hot node-minutes avoided (estimated):                 1.2" in text


def test_shadow_adds_the_pod_to_ksched_s_choice(tmp_path: Path) -> None:
    # ksched chooses "warm" at 0.65 (under the line even with the pod); it warms to 0.75 after
    # the decision: cool as it is, hot with the pod's 100m of its 1 CPU added.
    shadow, c, _ = shadow_of(tmp_path, (heated("warm", 0.65), heated("hot", 0.9)))
    bind(shadow, c, "web", "hot")
    assert shadow.ledger.recent[-1].ksched_node == "warm"
    c.heat("warm", 0.75)
    c.look_at(30)
    c.look_at(60)
    o = shadow.ledger.report()["outcomes"]
    assert o["kschedCountsEstimated"]["went_hot"] == 1
    assert o["kschedHotNodeMinutesEstimated"] == pytest.approx(o["hotNodeMinutes"])
    assert o["hotNodeMinutesAvoidedEstimated"] == pytest.approx(0.0)


def test_ksched_s_choice_is_read_in_the_world_ksched_would_have_made(tmp_path: Path) -> None:
    # default-scheduler puts web-1 (200m) on "hot" (ksched: "a" at 0.4); "a" warms to 0.5;
    # default-scheduler puts web-2 (300m) on "a" (ksched: "b" at 0.45), and "a" reads 0.8 with
    # it. Read as the other scheduler's world plus web-1, "a" would be hot (1.0); in ksched's
    # world web-2 is on "b", so "a" holds web-1 (0.7) and "b" web-2 (0.75): both stay cool.
    shadow, c, _ = shadow_of(tmp_path, (heated("hot", 0.9), heated("a", 0.4), heated("b", 0.45)))
    bind(shadow, c, "web-1", "hot", cpu="200m")
    c.heat("a", 0.5)
    bind(shadow, c, "web-2", "a", cpu="300m")
    assert [(d.pod, d.ksched_node) for d in shadow.ledger.recent] == [
        ("default/web-1", "a"),
        ("default/web-2", "b"),
    ]
    c.heat("a", 0.8)
    for at in (10, 30, 60, 70):
        c.look_at(at)
    o = shadow.ledger.report()["outcomes"]
    assert o["kschedCountsEstimated"] == {"stayed_cool": 2, "went_hot": 0, "unmeasured": 0}
    assert o["kschedHotNodeMinutesEstimated"] == 0.0
    assert o["hotNodeMinutes"] > 0 and o["hotNodeMinutesAvoidedEstimated"] == pytest.approx(
        o["hotNodeMinutes"]
    )


def test_a_pod_gone_before_its_verdict_moves_nothing_in_ksched_s_world(tmp_path: Path) -> None:
    # web (600m) goes to "hot"; ksched would have chosen "cool" (0.1). The pod finishes at
    # once: in ksched's world it is gone too, so "cool" stays at 0.1, not 0.7.
    shadow, c, _ = shadow_of(tmp_path, (heated("hot", 0.9), heated("cool", 0.1)))
    bind(shadow, c, "web", "hot", cpu="600m")
    assert shadow.ledger.recent[-1].ksched_node == "cool"
    gone = pod("web", cpu="600m", scheduler="default-scheduler", node_name="hot")
    gone["metadata"]["uid"] = "web"
    c.state.on_pod("DELETED", gone, None)
    c.state.sync()
    c.heat("cool", 0.3)  # 0.3 + 0.6 would be over the line
    for at in (10, 30, 60, 70):
        c.look_at(at)
    assert shadow.ledger.report()["outcomes"]["kschedCountsEstimated"]["stayed_cool"] == 1


def test_the_report_from_the_shadow_log_equals_the_report_from_shadow(tmp_path: Path) -> None:
    shadow, c, log = shadow_of(tmp_path, (heated("cool", 0.3), heated("hot", 0.9), heated("mid", 0.5)))
    bind(shadow, c, "web-1", "hot")
    bind(shadow, c, "web-2", "mid")
    c.look_at(10)
    c.heat("mid", 0.85)
    bind(shadow, c, "web-3", "hot")
    for at in (30, 50, 70, 90):
        c.look_at(at)
    served = shadow.ledger.report()
    assert served["outcomes"]["judged"] == 3
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line.get("type") for line in logged].count("outcome") == 3
    from_log = report_from_log(log, keep=1000)
    assert from_log["outcomes"] == served["outcomes"]
    assert {k: from_log[k] for k in ("total", "counts", "reasons")} == {
        k: served[k] for k in ("total", "counts", "reasons")
    }


def quiet_status(**fields: Any) -> dict[str, Any]:
    return {
        "identity": "ksched-0",
        "mode": "scheduling",
        "leaderElection": False,
        "leading": False,
        "leader": None,
        "synced": True,
        "queues": {"active": 0},
        "bound": 0,
        "metrics": {"live": [], "degraded": [], "learned": {}},
        "failures": [],
        **fields,
    }
