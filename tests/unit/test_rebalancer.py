"""The rebalancer inside ``ksched run`` (``ksched.loop.rebalancing.rebalancer``) against a fake API server:
a hot node's pod is evicted only after its target is reserved; a PodDisruptionBudget's refusal
releases the reservation and says so; a follower and a shadow evict nothing; the eviction rate
and the workload cool-down hold across looks; a stale metric makes nothing hot; an evicted
pod's load the metric still shows does not make its node give a second pod; an unclaimed
reservation expires."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

import numpy as np
import orjson
import pytest

from ksched.commands.rebalance import preview
from ksched.config import Config, MetricConfig
from ksched.config.rebalance import RebalanceConfig, RebalanceMetric, parse_rebalance
from ksched.config.steering import SteeringConfig
from ksched.engine import Engine
from ksched.engine.cluster_file import sort_objects
from ksched.engine.rebalance import BUDGET_SPENT, COOLING, TERMINATING, Plan
from ksched.errors import ConfigError
from ksched.loop.client import Response
from ksched.loop.metrics.load_model import Departure
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.metrics.samples import Sample
from ksched.loop.mirror.slim import slim_node, slim_pod
from ksched.loop.mirror.state import ClusterState
from ksched.loop.rebalancing.rebalancer import FOLLOWER, LEADER, SHADOW, Rebalancer
from ksched.loop.rebalancing.reservations import Reservations
from ksched.loop.telemetry import Telemetry
from tests.conftest import estimated_metric, node, pod

Obj = dict[str, Any]

T0 = 1_800_000_000.0
LONG_AGO = "2020-01-01T00:00:00Z"
CPU = estimated_metric(window_s=10.0, above=0.8, max_age_s=30.0)
PDB_REFUSAL = "Cannot evict pod as it would violate the pod's disruption budget."


def workload_pod(name: str, node_name: str, owner: str) -> Obj:
    """A running pod of ReplicaSet ``owner`` using 1 CPU (0.25 of a node)."""
    p = pod(name, cpu="1", node_name=node_name)
    p["metadata"].update(
        uid=f"uid-{name}",
        creationTimestamp=LONG_AGO,
        labels={"app": owner, "pod-template-hash": "abc123"},
        ownerReferences=[
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": owner,
                "uid": f"uid-{owner}",
                "controller": True,
            }
        ],
    )
    p["status"] = {"phase": "Running", "startTime": LONG_AGO}
    return p


class Source:
    """Prometheus: each node's ``cpu`` as the test sets it, sampled at the clock's time."""

    def __init__(self, clock: Clock, values: dict[str, float]) -> None:
        self.clock, self.values = clock, values

    def query(self, metric: MetricConfig, resolve: object) -> Sample:
        return Sample(dict(self.values), self.clock.now)


@dataclass
class Clock:
    now: float = T0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeKube:
    """Lists the pods on a node and answers evictions (201 unless ``answers`` says otherwise:
    then the pod is terminating), noting what the reservations held when each eviction came."""

    pods: list[Obj]
    reservations: Reservations
    answers: dict[str, tuple[int, Obj]] = field(default_factory=dict)
    evictions: list[tuple[str, Obj, int]] = field(default_factory=list)
    lists: int = 0

    def request(self, method: str, path: str, **kw: Any) -> Response:
        if method == "GET" and path == "/api/v1/pods":
            self.lists += 1
            wanted = dict(s.split("=", 1) for s in kw["query"]["fieldSelector"].split(","))
            items = [p for p in self.pods if p["spec"].get("nodeName") == wanted["spec.nodeName"]]
            return Response(200, orjson.dumps({"items": items}))
        assert method == "POST" and path.endswith("/eviction"), (method, path)
        name = unquote(path.split("/")[-2])
        self.evictions.append((name, kw["body"], len(self.reservations)))
        status, body = self.answers.get(name, (201, {}))
        if status == 201:
            evicted = next(p for p in self.pods if p["metadata"]["name"] == name)
            evicted["metadata"]["deletionTimestamp"] = LONG_AGO
        return Response(status, orjson.dumps(body))


@dataclass
class Harness:
    rebalancer: Rebalancer
    kube: FakeKube
    source: Source
    clock: Clock
    store: MetricStore
    state: ClusterState
    reservations: Reservations
    telemetry: Telemetry
    events: list[tuple[str, str, str, str]]

    def look(self, after_s: float = 2.0) -> None:
        """A look ``after_s`` after the last, on a new sample."""
        self.clock.now += after_s
        self.store.refresh(CPU)
        self.rebalancer.look()

    def evicted(self) -> list[str]:
        return [name for name, _, _ in self.kube.evictions]

    def count(self, name: str, **labels: str) -> float:
        return self.telemetry.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
def harness() -> Iterator[Any]:
    """``harness(values, pods, leader=True, shadow=False, steering=False, **rebalance)``: a
    rebalancer over nodes n0..n3 (4 CPUs each) with ``cpu`` at ``values``; the state's thread
    is run by the fixture, as the scheduling loop runs it."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def make(
        values: dict[str, float],
        pods: list[Obj],
        leader: bool = True,
        shadow: bool = False,
        steering: bool = False,
        **rebalance: Any,
    ) -> Harness:
        defaults: dict[str, Any] = {
            "enabled": True,
            "hot_samples": 2,
            "metrics": (RebalanceMetric("cpu", high=0.8, low=0.6),),
        }
        config = Config(
            metrics=(CPU,),
            rebalance=RebalanceConfig(**{**defaults, **rebalance}),
            steering=SteeringConfig(enabled=steering),
        )
        clock = Clock()
        nodes = [node(n) for n in ("n0", "n1", "n2", "n3")]
        state = ClusterState(config.metrics, clock=clock)
        for n in nodes:
            state.on_node("ADDED", slim_node(n), None)
        for p in pods:
            state.on_pod("ADDED", slim_pod(p), None)
        source = Source(clock, values)
        store = MetricStore([CPU], source, None, lambda: nodes, clock=clock)  # type: ignore[arg-type]
        reservations = Reservations(settle_s=config.rebalance.replacement_settle_s, clock=clock)
        telemetry = Telemetry()
        kube = FakeKube(pods, reservations)
        events: list[tuple[str, str, str, str]] = []

        def event(obj: Obj, kind: str, reason: str, action: str, note: str) -> None:
            events.append((f"{obj.get('kind', 'Pod')}/{obj['metadata']['name']}", kind, reason, note))

        rebalancer = Rebalancer(
            config,
            state,
            store,
            Engine(config),
            kube,  # type: ignore[arg-type]
            reservations,
            telemetry,
            lambda: leader,
            shadow,
            event,
            clock=clock,
        )

        def loop() -> None:
            while not stop.wait(0.005):
                state.sync()

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        threads.append(thread)
        return Harness(rebalancer, kube, source, clock, store, state, reservations, telemetry, events)

    yield make
    stop.set()
    for t in threads:
        t.join()


# n0 is hot with two pods of 1 CPU (0.25 each); only n1 stays below low (0.6) with one of them.
HOT = {"n0": 0.9, "n1": 0.2, "n2": 0.7, "n3": 0.75}


def hot_pods() -> list[Obj]:
    return [workload_pod("api-1", "n0", "api"), workload_pod("web-1", "n0", "web")]


def test_the_target_is_reserved_before_the_eviction_and_both_are_reported(harness: Any) -> None:
    h = harness(HOT, hot_pods())
    h.look()
    assert h.kube.evictions == [], "one hot sample is not enough (hotSamples 2)"
    h.look()
    ((name, body, held),) = h.kube.evictions
    assert name == "api-1"
    assert held == 1, "the reservation was held when the eviction was posted"
    assert body["kind"] == "Eviction" and body["deleteOptions"] == {"preconditions": {"uid": "uid-api-1"}}
    ((reservation),) = h.reservations.as_json()
    assert reservation["target"] == "n1" and reservation["pod"] == "default/api-1"
    note = "moved to n1: cpu 0.90 on n0 over high 0.80; n1 0.20 -> 0.45 (low 0.60)"
    assert h.events == [
        ("Pod/api-1", "Normal", "Rebalanced", note),
        ("Node/n0", "Normal", "Rebalanced", f"evicted default/api-1, {note}"),
    ]
    assert h.count("ksched_rebalance_evictions_total", reason="cpu") == 1.0
    assert h.count("ksched_rebalance_hot_nodes", metric="cpu") == 1.0
    assert h.count("ksched_rebalance_reservations") == 1.0
    status = h.rebalancer.status()
    assert status["mode"] == LEADER and status["evictions"] == 1
    assert [m["target"] for m in status["lastPlan"]["moves"]] == ["n1"]  # type: ignore[index]


def test_a_budget_s_refusal_releases_the_reservation_and_says_so(harness: Any) -> None:
    h = harness(HOT, hot_pods())
    h.kube.answers["api-1"] = (
        429,
        {
            "kind": "Status",
            "message": PDB_REFUSAL,
            "code": 429,
            "details": {
                "causes": [{"reason": "DisruptionBudget", "message": "The disruption budget api needs 2"}]
            },
        },
    )
    h.look()
    h.look()
    assert h.evicted() == ["api-1"]
    assert len(h.reservations) == 0
    assert h.events == [("Pod/api-1", "Warning", "RebalanceBlocked", f"not moved to n1: {PDB_REFUSAL}")]
    assert h.count("ksched_rebalance_blocked_total", reason="pdb") == 1.0
    assert h.count("ksched_rebalance_evictions_total", reason="cpu") == 0.0
    h.look()
    assert h.evicted() == ["api-1", "web-1"], "the refused workload cools down; the next candidate goes"


@pytest.mark.parametrize(
    ("status", "reason"),
    # A 429 without a DisruptionBudget cause is the API server throttling, not a budget.
    [(404, None), (500, "failed"), (429, "failed")],
)
def test_an_eviction_that_did_not_happen_releases_the_reservation(
    harness: Any, status: int, reason: str | None
) -> None:
    h = harness(HOT, hot_pods())
    h.kube.answers["api-1"] = (status, {"message": "no"})
    h.look()
    h.look()
    assert h.evicted() == ["api-1"] and len(h.reservations) == 0 and h.events == []
    assert h.count("ksched_rebalance_blocked_total", reason="failed") == (1.0 if reason else 0.0)


@pytest.mark.parametrize(("leader", "shadow", "mode"), [(False, False, FOLLOWER), (False, True, SHADOW)])
def test_a_follower_and_a_shadow_evict_nothing(harness: Any, leader: bool, shadow: bool, mode: str) -> None:
    h = harness(HOT, hot_pods(), leader=leader, shadow=shadow)
    for _ in range(3):
        h.look()
    assert h.kube.evictions == [] and h.events == [] and len(h.reservations) == 0
    assert h.count("ksched_rebalance_evictions_total", reason="cpu") == 0.0
    status = h.rebalancer.status()
    assert status["mode"] == mode
    assert [x["node"] for x in status["hot"]] == ["n0"]  # type: ignore[attr-defined]
    if shadow:
        assert status["wouldEvict"] == 1, "what it would have moved, once: as if the metric still showed it"
        assert h.count("ksched_rebalance_shadow_moves_total") == 1.0
    else:
        assert status["lastPlan"] is None and h.kube.lists == 0, "a follower does not plan"


# n0 and n3 hot with one pod each; n1 and n2 take either.
TWO_HOT = {"n0": 0.9, "n1": 0.2, "n2": 0.1, "n3": 0.9}


def test_the_eviction_rate_holds_across_looks(harness: Any) -> None:
    h = harness(
        TWO_HOT,
        [workload_pod("api-0", "n0", "api"), workload_pod("web-3", "n3", "web")],
        evictions_per_minute=1,
    )
    h.look()
    h.look()
    assert h.evicted() == ["api-0"]
    assert BUDGET_SPENT in h.rebalancer.status()["lastPlan"]["skipped"]  # type: ignore[index]
    h.look(after_s=30)
    assert h.evicted() == ["api-0"], "half a minute refills half a token"
    h.look(after_s=30)
    assert h.evicted() == ["api-0", "web-3"]


def test_a_moved_workload_cools_down(harness: Any) -> None:
    h = harness(
        TWO_HOT,
        [workload_pod("web-0", "n0", "web"), workload_pod("web-3", "n3", "web")],
        workload_cooldown_s=100,
    )
    h.look()
    h.look()
    assert h.evicted() == ["web-0"], "one per workload in a look (maxPerWorkload)"
    h.look()
    assert h.evicted() == ["web-0"]
    assert h.rebalancer.status()["lastPlan"]["skipped"] == {TERMINATING: 1, COOLING: 1}  # type: ignore[index]
    h.look(after_s=100)
    assert h.evicted() == ["web-0", "web-3"]


def test_a_replacement_settles_for_its_own_time_not_the_workload_cool_down() -> None:
    metrics = (CPU,)
    config = parse_rebalance(
        {"enabled": True, "workloadCooldown": "3m", "replacementSettle": "15m"}, ["ksched"], metrics
    )
    assert (config.workload_cooldown_s, config.replacement_settle_s) == (180.0, 900.0)
    assert parse_rebalance({"enabled": True}, ["ksched"], metrics).replacement_settle_s == 600.0
    with pytest.raises(ConfigError, match=r"rebalance\.replacementSettle"):
        parse_rebalance({"replacementSettle": "soon"}, ["ksched"], metrics)


def test_each_look_with_hot_nodes_is_logged_once_with_why_pods_stay(
    harness: Any, caplog: pytest.LogCaptureFixture
) -> None:
    h = harness(
        TWO_HOT,
        [workload_pod("web-0", "n0", "web"), workload_pod("web-3", "n3", "web")],
        workload_cooldown_s=100,
    )
    stuck = f"rebalancer: 2 hot nodes (n0, n3), 0 moves; not moved: 1 {TERMINATING}, 1 {COOLING}"
    with caplog.at_level(logging.INFO, logger="ksched.loop.rebalancing.rebalancer"):
        for _ in range(4):
            h.look()
        hot = dict(h.source.values)
        h.source.values.update({"n0": 0.5, "n3": 0.5})
        h.look()
        h.source.values.update(hot)
        h.look()
        h.look()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("rebalancer: ")]
    assert lines == [
        "rebalancer: 2 hot nodes (n0, n3), 1 move; not moved: 1 limit maxPerWorkload reached",
        stuck,
        stuck,
    ], "logged when the summary changes, not while it stays the same; again once the nodes were cool between"


def test_a_stale_metric_makes_no_node_hot(harness: Any) -> None:
    h = harness(HOT, hot_pods(), hot_samples=1)
    h.store.refresh(CPU)
    h.clock.now += CPU.max_age_s + 1
    h.rebalancer.look()
    assert h.kube.evictions == [] and h.kube.lists == 0
    assert h.count("ksched_rebalance_hot_nodes", metric="cpu") == 0.0


def test_samples_between_looks_count_toward_hot_samples(harness: Any) -> None:
    """Three refreshes 5 s apart under one look: with each fed to the tracker as it comes (the
    run loop does so every second), the node is hot at that look, as ``hotSamples`` x the
    refresh says; a look alone sees one sample and waits for two more looks."""
    fed, alone = harness(HOT, hot_pods(), hot_samples=3), harness(HOT, hot_pods(), hot_samples=3)
    for h in (fed, alone):
        for _ in range(3):
            h.clock.now += 5.0
            h.store.refresh(CPU)
            if h is fed:
                h.rebalancer.feed()
        h.rebalancer.look()
    assert [hot.node for hot in fed.rebalancer.hot] == ["n0"] and len(fed.evicted()) == 1
    assert alone.rebalancer.hot == [] and alone.evicted() == []


def test_a_node_does_not_give_a_second_pod_while_the_metric_still_shows_the_first(harness: Any) -> None:
    h = harness(HOT, hot_pods())
    h.look()
    h.look()
    assert h.evicted() == ["api-1"]
    # The pod is still terminating and the metric still shows n0 at 0.9: nothing more moves.
    h.look()
    h.look()
    assert h.evicted() == ["api-1"]
    assert h.rebalancer.status()["lastPlan"]["moves"] == []  # type: ignore[index]
    # Gone (first seen at this look): a sample taken as it left still shows all of it.
    h.state.on_pod("DELETED", slim_pod(hot_pods()[0]), None)
    h.look()
    assert h.evicted() == ["api-1"]
    assert h.rebalancer.status()["lastPlan"]["skipped"] == {TERMINATING: 1}  # type: ignore[index]
    # A sample a whole window after it left shows none of it: a node still this hot is judged
    # for its next pod (which stays: n1 holds the first pod's replacement, and no other node
    # stays below low).
    h.look(after_s=CPU.window_s())
    ((reason, count),) = [
        (r, n)
        for r, n in h.rebalancer.status()["lastPlan"]["skipped"].items()  # type: ignore[index]
        if r != TERMINATING
    ]
    assert reason.startswith(
        "no feasible node for its replacement: 0/4 nodes are available: 4 node(s) had cpu above 0.6"
    ), reason
    assert count == 1


def test_a_source_never_gives_back_more_than_its_sample_measured(harness: Any) -> None:
    """Two pods left n0 together and were measured at more than n0 now shows (each read over
    its own window): n0 reads 0, not below, and the next look would not draw moves onto it."""
    h = harness({"n0": 0.3, "n1": 0.2, "n2": 0.7, "n3": 0.75}, [])
    h.store.refresh(CPU)
    h.rebalancer.load.departed = [
        Departure("default/api-1", "uid-a", "n0", "cpu", 0.25),
        Departure("default/web-1", "uid-b", "n0", "cpu", 0.25),
        Departure("default/db-1", "uid-c", "n2", "cpu", 0.25),
    ]
    done = threading.Event()
    out: dict[str, Any] = {}

    def take() -> None:  # on the state's thread, as the rebalancer's plan runs
        snapshot = h.state.snapshot()
        out["row"] = {name: snapshot.index[name] for name in ("n0", "n1", "n2", "n3")}
        values = np.zeros((snapshot.count, 1))
        for name, v in {"n0": 0.3, "n1": 0.2, "n2": 0.7, "n3": 0.75}.items():
            values[out["row"][name], 0] = v
        h.rebalancer.load._take_departed(snapshot, [CPU], h.rebalancer.lines, values, h.clock.now)
        out["values"] = values
        done.set()

    h.state.at_this_point(take)
    assert done.wait(5)
    row, values = out["row"], out["values"]
    # Still terminating, so the sample shows all of each: n0 gives back its 0.3, not 0.5;
    # n2 its one pod's 0.25; the others nothing.
    assert values[row["n0"], 0] == pytest.approx(0.0)
    assert values[row["n2"], 0] == pytest.approx(0.45)
    assert values[row["n1"], 0] == pytest.approx(0.2) and values[row["n3"], 0] == pytest.approx(0.75)


def test_an_unclaimed_reservation_expires(harness: Any) -> None:
    h = harness(HOT, hot_pods(), reservation_timeout_s=30)
    h.look()
    h.look()
    assert len(h.reservations) == 1
    h.source.values = {**HOT, "n0": 0.5}
    h.look(after_s=30)
    assert len(h.reservations) == 0
    assert h.count("ksched_rebalance_replacements_total", outcome="expired") == 1.0


class LaggingSource(Source):
    """Prometheus whose sample was evaluated ``lag_s`` before the clock's time (a scrape and
    a rule interval behind), as a real one is."""

    lag_s = 6.0

    def query(self, metric: MetricConfig, resolve: object) -> Sample:
        return Sample(dict(self.values), self.clock.now - self.lag_s)


def recently_bound(name: str, node_name: str, cpu: str, bound_s_ago: float) -> Obj:
    """A running ReplicaSet pod bound ``bound_s_ago`` before T0 (inside the estimate's window)."""
    p = workload_pod(name, node_name, "fresh")
    p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
    at = datetime.fromtimestamp(T0 - bound_s_ago, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    p["metadata"]["creationTimestamp"] = at
    p["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": at}]
    return p


def test_the_dry_run_proposes_the_plan_one_live_look_makes(harness: Any) -> None:
    """On the same nodes, samples (taken 6 s before the look) and recent pods (one bound 3 s
    before the sample, on the node that reads coolest), ``ksched rebalance --dry-run`` and one live look
    propose the same moves with the same values before and after. The dry run used to count
    recent pods from the clock's time, without the sample's own time, measured usage or a
    learned calibration, and so proved other moves than the live rebalancer would make."""
    pods = [
        workload_pod("api-1", "n0", "api"),
        workload_pod("web-1", "n0", "web"),
        recently_bound("new-1", "n1", "1500m", 9.0),
    ]
    values = {"n0": 0.95, "n1": 0.2, "n2": 0.3, "n3": 0.7}
    h = harness(values, pods, shadow=True, hot_samples=1)
    h.source.__class__ = LaggingSource
    h.store.refresh(CPU)
    live = h.rebalancer.look()
    assert live is not None and live.moves, live

    config = h.rebalancer.engine.config
    objects = [{"kind": "Node", **node(n)} for n in ("n0", "n1", "n2", "n3")] + [
        {"kind": "Pod", **p} for p in pods
    ]
    for p in pods:  # the live look found them terminating-free: the dry run reads them as listed
        p["metadata"].pop("deletionTimestamp", None)
    cluster = sort_objects(objects, {"ksched"}, "the test")
    dry, _ = preview(config, cluster, h.kube, h.clock.now, prometheus=h.source)

    def moves(p: Plan) -> list[tuple[str, str, str, float, float, float, float]]:
        return [
            (m.pod, m.source, m.target, m.source_before, m.source_after, m.target_before, m.target_after)
            for m in p.moves
        ]

    assert moves(dry) == moves(live)
    assert [(h.node, h.metric, h.value) for h in dry.hot] == [(h.node, h.metric, h.value) for h in live.hot]
    # n1 reads 0.2 but holds a pod the sample cannot show yet (1.5 of 4 CPUs, bound 2 s before
    # it, so 8 s of its 10 s window miss it): 0.5 before the move, too warm to take 0.25 more.
    assert {m.target for m in live.moves} == {"n2"}
