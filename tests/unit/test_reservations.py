"""The rebalancer's reservations (``ksched.loop.rebalancing.reservations``) and how the scheduling cycle
honours them: a replacement is matched by namespace, controller and pod template; the cycle
steers it to its reserved node; until it shows up, other pods cannot take the reserved room
(its resources nor the metric headroom the move needs); its binding ends the reservation,
counted by where it landed; and a reservation past its timeout is dropped. The cycle reads
them as its one provider of held room (``ksched.loop.rebalancing.held.HeldRoom``)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from ksched.config import Config, MetricConfig
from ksched.engine.rebalance import MOVED_USAGE_ANNOTATION, Move, build_replacement
from ksched.engine.snapshot import build_snapshot
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.metrics.samples import Sample
from ksched.loop.mirror.slim import slim_node
from ksched.loop.mirror.state import ClusterState
from ksched.loop.rebalancing.reservations import ELSEWHERE, EXPIRED, ON_SOURCE, ON_TARGET, Reservations
from ksched.loop.scheduling.binder import Outcome
from ksched.loop.scheduling.cycle import Scheduler
from ksched.loop.scheduling.queue import SchedulingQueue
from ksched.loop.telemetry import Telemetry
from tests.conftest import estimated_metric, node, pod

Obj = dict[str, Any]

T0 = 1_800_000_000.0
CPU = estimated_metric(above=0.8, max_age_s=60.0)
# The share of CPU left free: higher is better.
FREE = estimated_metric(below=0.2, max_age_s=60.0)


def owned(name: str, owner: str = "web", template: str = "abc123", cpu: str = "2", **fields: Any) -> Obj:
    """A pod of ReplicaSet ``owner`` (uid ``uid-<owner>``) with pod-template-hash ``template``."""
    p = pod(name, cpu=cpu, **fields)
    p["metadata"].update(
        uid=f"uid-{name}",
        labels={"app": owner, "pod-template-hash": template},
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
    return p


def move(victim: Obj, source: str = "n0", target: str = "n1", proved_m: float | None = 2000.0) -> Move:
    """The move of ``victim`` from ``source`` (4 CPUs) to ``target``, proved with the victim
    using ``proved_m`` millicores (None: the replacement carries no proved usage)."""
    replacement = build_replacement(victim, source)
    if proved_m is not None:
        replacement["metadata"]["annotations"] = {MOVED_USAGE_ANNOTATION: json.dumps({"cpu": proved_m})}
    return Move(
        pod=f"default/{victim['metadata']['name']}",
        uid=victim["metadata"]["uid"],
        namespace="default",
        workload="ReplicaSet/default/web",
        owner_uid="uid-web",
        template_hash="abc123",
        source=source,
        target=target,
        metric="cpu",
        usage=(proved_m or 0.0) / 4000,
        source_before=0.9,
        source_after=0.4,
        target_before=0.2,
        target_after=0.45,
        replacement={**replacement, "status": {"nominatedNodeName": target}},
    )


@pytest.mark.parametrize(
    ("name", "candidate", "matches"),
    [
        ("the same controller and template", owned("web-new"), True),
        ("another namespace", owned("web-new", namespace="other"), False),
        ("another controller", owned("api-new", owner="api"), False),
        ("another template of the same controller", owned("web-new", template="def456"), False),
        ("no controller", pod("bare"), False),
    ],
)
def test_a_replacement_is_matched_by_namespace_controller_and_template(
    name: str, candidate: Obj, matches: bool
) -> None:
    reservations = Reservations()
    reservations.hold(move(owned("web-1", node_name="n0")), T0 + 60)
    assert (reservations.match(candidate) is not None) == matches, name


def test_a_pod_matches_one_reservation_the_oldest_and_keeps_it() -> None:
    reservations = Reservations()
    first = reservations.hold(move(owned("web-1", node_name="n0"), target="n1"), T0 + 60)
    second = reservations.hold(move(owned("web-2", node_name="n0"), target="n2"), T0 + 60)
    a, b = owned("web-a"), owned("web-b")
    assert reservations.match(a) is first
    assert reservations.match(a) is first, "the same pod again: the same reservation"
    assert reservations.match(b) is second
    assert reservations.match(owned("web-c")) is None, "every reservation has its pod"
    assert reservations.holding() == [], "matched reservations hold no room as ghosts"


def test_a_replacement_is_steered_to_its_reservations_target() -> None:
    # The cycle's entry (HeldRoom.steered_to): the target of the reservation ``match`` gives.
    reservations = Reservations()
    reservations.hold(move(owned("web-1", node_name="n0"), target="n1"), T0 + 60)
    reservations.hold(move(owned("web-2", node_name="n0"), target="n2"), T0 + 60)
    cases = [
        ("the first replacement: the oldest reservation", owned("web-a"), "n1"),
        ("the same pod again: the same target", owned("web-a"), "n1"),
        ("the second replacement", owned("web-b"), "n2"),
        ("every reservation has its pod", owned("web-c"), None),
        ("not a replacement", owned("api-new", owner="api"), None),
    ]
    for name, candidate, want in cases:
        got = reservations.steered_to(candidate)
        assert got == want, f"{name}: want {want}, got {got}"


def test_binding_ends_the_reservation_counted_by_where_it_landed() -> None:
    reservations = Reservations()
    reservations.hold(move(owned("web-1", node_name="n0"), target="n1"), T0 + 60)
    reservations.hold(move(owned("web-2", node_name="n0"), target="n2"), T0 + 60)
    reservations.hold(move(owned("web-3", node_name="n0"), target="n2"), T0 + 60)
    assert reservations.landed(owned("other", owner="api"), "n1") is None
    assert reservations.landed(owned("web-a"), "n1") == ON_TARGET
    assert reservations.landed(owned("web-b"), "n3") == ELSEWHERE
    assert reservations.landed(owned("web-c"), "n0") == ON_SOURCE, "back where it was moved off"
    assert len(reservations) == 0
    assert reservations.outcomes == {ON_TARGET: 1, ON_SOURCE: 1, ELSEWHERE: 1, EXPIRED: 0}


def test_expiry_drops_the_reservations_past_their_time() -> None:
    reservations = Reservations()
    early = reservations.hold(move(owned("web-1", node_name="n0")), T0 + 30)
    reservations.hold(move(owned("web-2", node_name="n0")), T0 + 120)
    assert reservations.expire(T0 + 29) == []
    assert reservations.expire(T0 + 30) == [early]
    assert len(reservations) == 1 and reservations.outcomes[EXPIRED] == 1
    assert reservations.match(owned("web-a")) is not None, "the one left still matches"


@pytest.mark.parametrize(
    ("name", "proved_m", "metric", "want"),
    [
        # 2 CPUs on an 8-CPU target: 0.25.
        ("what the move was proved with", 2000.0, CPU, 0.45),
        # Its requests (1 CPU) where the move carries nothing for the metric: 0.125.
        ("else the replacement's estimate", None, CPU, 0.325),
        # A metric where higher is better loses what the pod takes.
        ("taken off a below metric", 2000.0, FREE, -0.05),
    ],
)
def test_a_waiting_reservation_counts_its_load_on_its_target(
    name: str, proved_m: float | None, metric: MetricConfig, want: float
) -> None:
    snapshot = build_snapshot([node("n0", cpu="4"), node("n1", cpu="8"), node("n2", cpu="8")], [])
    reservations = Reservations()
    reservations.hold(move(owned("web-1", node_name="n0", cpu="1"), proved_m=proved_m), T0 + 60)
    values = np.array([[0.9], [0.2], [0.3]])
    reservations.add_to(values, snapshot, [metric])
    assert values[:, 0].tolist() == [0.9, pytest.approx(want), 0.3], name
    reservations.match(owned("web-a"))
    values = np.array([[0.9], [0.2], [0.3]])
    reservations.add_to(values, snapshot, [metric])
    assert values[:, 0].tolist() == [0.9, 0.2, 0.3], "its replacement showed up: counted as itself"


def test_a_landed_replacement_keeps_the_load_it_was_moved_with_while_it_grows_back() -> None:
    """Moved with 2 CPUs to an 8-CPU node: a replacement measured at 500m (it restarted cold)
    still holds the other 1.5 CPUs (0.1875) there, for settle_s after it landed; none once it
    uses what it was moved with, and none after settle_s."""
    clock = [T0]
    snapshot = build_snapshot([node("n0", cpu="4"), node("n1", cpu="8")], [])
    reservations = Reservations(settle_s=600.0, clock=lambda: clock[0])
    reservations.hold(move(owned("web-1", node_name="n0", cpu="1")), T0 + 60)
    assert reservations.landed(owned("web-a"), "n1") == ON_TARGET
    usage = {"default/web-a": 500.0}

    def settled(metric: MetricConfig = CPU) -> list[float]:
        values = np.array([[0.9], [0.2]])
        reservations.add_settling(values, snapshot, [metric], lambda key, m: usage.get(key))
        return [round(float(v), 4) for v in values[:, 0]]

    assert settled() == [0.9, 0.3875]
    assert settled(FREE) == [0.9, 0.0125], "taken off a metric where higher is better"
    usage["default/web-a"] = 2500.0
    assert settled() == [0.9, 0.2], "it uses what it was moved with: the metric shows it"
    usage.clear()
    clock[0] = T0 + 599
    assert settled() == [0.9, 0.45], "not measured: all of it"
    clock[0] = T0 + 600
    assert settled() == [0.9, 0.2] and reservations.settling() == 0


# -- the scheduling cycle ------------------------------------------------------


class FakeBinder:
    def __init__(self) -> None:
        self.bound: dict[str, str] = {}

    def bind(self, p: Obj, node_name: str, done: Any, *args: Any) -> None:
        self.bound[p["metadata"]["name"]] = node_name
        done(Outcome.BOUND)

    def unschedulable(self, p: Obj, message: str) -> None:
        raise AssertionError(f"{p['metadata']['name']} unschedulable: {message}")


class Source:
    def __init__(self, values: dict[str, float]) -> None:
        self.values = values

    def query(self, metric: MetricConfig, resolve: object) -> Sample:
        return Sample(dict(self.values), T0)


def cycle(pending: Obj, values: dict[str, float], reservations: Reservations) -> tuple[str, Telemetry]:
    """One cycle on n0 (4 CPUs, busy), n1 (2 CPUs, the reserved target) and n2 (4 CPUs) with
    ``cpu`` at ``values``: where ``pending`` is bound, and the telemetry."""
    nodes = [node("n0", cpu="4"), node("n1", cpu="2"), node("n2", cpu="4")]
    config = Config(metrics=(CPU,))
    state = ClusterState(config.metrics, clock=lambda: T0)
    for n in nodes:
        state.on_node("ADDED", slim_node(n), None)
    state.sync()
    store = MetricStore([CPU], Source(values), None, lambda: nodes, clock=lambda: T0)  # type: ignore[arg-type]
    store.refresh(CPU)
    queue = SchedulingQueue(lambda: 1000.0)
    binder, telemetry = FakeBinder(), Telemetry()
    scheduler = Scheduler(
        config,
        state,
        queue,
        binder,  # type: ignore[arg-type]
        telemetry,
        lambda: True,
        store,
        held=reservations,
    )
    scheduler.on_pod("ADDED", pending, None)
    scheduler.cycle(queue.pop_batch(10, 0.0, 0.0))
    landed = binder.bound[pending["metadata"]["name"]]
    scheduler.on_pod("MODIFIED", {**pending, "spec": {**pending["spec"], "nodeName": landed}}, pending)
    return landed, telemetry


def replacements(telemetry: Telemetry, outcome: str) -> float | None:
    return telemetry.registry.get_sample_value("ksched_rebalance_replacements_total", {"outcome": outcome})


def test_the_cycle_steers_the_replacement_to_its_reserved_node() -> None:
    reservations = Reservations()
    reservations.hold(move(owned("web-1", node_name="n0", cpu="1"), target="n1", proved_m=1000.0), T0 + 60)
    # n2 scores better on cpu; the replacement still goes where its room is held.
    landed, telemetry = cycle(owned("web-new", cpu="1"), {"n0": 0.9, "n1": 0.2, "n2": 0.1}, reservations)
    assert landed == "n1"
    assert len(reservations) == 0, "its binding ended the reservation"
    assert replacements(telemetry, ON_TARGET) == 1.0


def test_without_a_reservation_the_same_pod_goes_to_the_better_node() -> None:
    landed, _ = cycle(owned("web-new", cpu="1"), {"n0": 0.9, "n1": 0.2, "n2": 0.1}, Reservations())
    assert landed == "n2"


@pytest.mark.parametrize(
    ("name", "victim_cpu", "proved_m", "cpu", "values"),
    [
        # The replacement's 2 CPUs fill n1; its load (40m of 2 CPUs) leaves the metric room.
        ("its requests", "2", 40.0, "1", {"n0": 0.9, "n1": 0.1, "n2": 0.5}),
        # 100m fits beside the replacement's 1 CPU, but n1's 0.3 plus the move's 0.5 (1 CPU of
        # 2) and the pod's own 0.05 is over the 0.8 filter.
        ("the metric headroom the move needs", "1", 1000.0, "100m", {"n0": 0.9, "n1": 0.3, "n2": 0.5}),
    ],
)
def test_other_pods_cannot_take_the_reserved_room(
    name: str, victim_cpu: str, proved_m: float, cpu: str, values: dict[str, float]
) -> None:
    reservations = Reservations()
    reservations.hold(
        move(owned("web-1", node_name="n0", cpu=victim_cpu), target="n1", proved_m=proved_m), T0 + 60
    )
    other = owned("api-1", owner="api", cpu=cpu)
    assert cycle(other, values, Reservations())[0] == "n1", "without the reservation it would take n1"
    landed, telemetry = cycle(other, values, reservations)
    assert landed == "n2", name
    assert len(reservations) == 1, "still held for its replacement"
    assert replacements(telemetry, ON_TARGET) == 0.0


def test_another_schedulers_replacement_is_counted_where_it_binds() -> None:
    """kube-scheduler binds a moved default-scheduler pod's replacement back on its source:
    ksched never queued it, yet its binding (seen by the pod watch) ends the reservation as
    a ping-pong, and its scheduler is remembered as having put one back on that node for
    settle_s."""
    nodes = [node("n0", cpu="4"), node("n1", cpu="4")]
    config = Config(metrics=(CPU,))
    state = ClusterState(config.metrics, clock=lambda: T0)
    for n in nodes:
        state.on_node("ADDED", slim_node(n), None)
    reservations = Reservations(settle_s=600.0, clock=lambda: T0)
    victim = owned("web-1", node_name="n0", schedulerName="default-scheduler")
    reservations.hold(move(victim, source="n0", target="n1"), T0 + 60)
    queue, telemetry = SchedulingQueue(lambda: 1000.0), Telemetry()
    store = MetricStore([CPU], Source({}), None, lambda: nodes, clock=lambda: T0)  # type: ignore[arg-type]
    binder = FakeBinder()
    scheduler = Scheduler(config, state, queue, binder, telemetry, lambda: True, store, held=reservations)  # type: ignore[arg-type]
    pending = owned("web-a", schedulerName="default-scheduler")
    scheduler.on_pod("ADDED", pending, None)
    assert "default/web-a" not in queue, "not ksched's to place"
    scheduler.on_pod("MODIFIED", {**pending, "spec": {**pending["spec"], "nodeName": "n0"}}, pending)
    assert len(reservations) == 0
    assert replacements(telemetry, ON_SOURCE) == 1.0
    assert reservations.placed_back() == {("n0", "default-scheduler")}
