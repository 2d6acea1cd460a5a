"""One scheduling cycle of a sharded replica (``sharding``): it places the pods it owns onto
the nodes it owns, leaves the others' pods to them, and hands a pod that none of its nodes
takes, or that would preempt there, to the replica whose node takes it."""

from __future__ import annotations

from typing import Any

from ksched.config import Config
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.mirror.slim import slim_node
from ksched.loop.mirror.state import ClusterState
from ksched.loop.scheduling.binder import Outcome
from ksched.loop.scheduling.cycle import Scheduler
from ksched.loop.scheduling.queue import SchedulingQueue
from ksched.loop.shards import owner
from ksched.loop.telemetry import Telemetry
from ksched.objects import Obj
from tests.conftest import node, pod
from tests.unit.test_shards import Clock, FakeLeases, replica, tick_all

MEMBERS = ("a", "b")


def named(who: str, prefix: str, count: int = 1) -> list[str]:
    """The first ``count`` names ``prefix-N`` that ``who`` owns among MEMBERS."""
    out = [f"{prefix}-{i}" for i in range(200) if owner(MEMBERS, f"{prefix}-{i}") == who]
    return out[:count]


class Binder:
    def __init__(self) -> None:
        self.bound: dict[str, str] = {}
        self.handed: dict[str, str] = {}
        self.preempted: list[str] = []
        self.failed: list[str] = []
        self.events: list[str] = []

    def bind(self, p: Obj, node_name: str, done: Any, *args: Any) -> None:
        self.bound[p["metadata"]["name"]] = node_name
        done(Outcome.BOUND)

    def hand_over(self, p: Obj, node_name: str, done: Any) -> None:
        self.handed[p["metadata"]["name"]] = node_name
        done(True)

    def preempt(self, p: Obj, node_name: str, victims: Any, done: Any) -> None:
        self.preempted.append(p["metadata"]["name"])
        done(True)

    def clear_nomination(self, p: Obj) -> None:
        pass

    def report(self, p: Obj, kind: str, reason: str, action: str, note: str) -> None:
        self.events.append(f"{reason}: {note}")

    def unschedulable(self, p: Obj, message: str) -> None:
        self.failed.append(f"{p['metadata']['name']}: {message}")


def cycle(
    nodes: list[Obj], bound: list[Obj], pending: list[Obj]
) -> tuple[Binder, SchedulingQueue, Telemetry]:
    """One cycle of replica "a" (beside "b") over ``nodes`` with ``bound`` running there."""
    api, clock = FakeLeases(), Clock()
    a, b = replica(api, "a", clock), replica(api, "b", clock)
    for _ in range(4):
        tick_all(clock, [a, b])
    assert a.active() and a.members() == MEMBERS
    config = Config()
    state = ClusterState(config.metrics)
    for n in nodes:
        state.on_node("ADDED", slim_node(n), None)
    queue = SchedulingQueue(lambda: 1000.0)
    binder, telemetry = Binder(), Telemetry()
    store = MetricStore([], None, None, lambda: nodes)
    scheduler = Scheduler(config, state, queue, binder, telemetry, a.active, store, shards=a)  # type: ignore[arg-type]
    for p in bound:
        scheduler.on_pod("ADDED", p, None)
    for p in pending:
        scheduler.on_pod("ADDED", p, None)
    state.sync()
    scheduler.cycle(queue.pop_batch(100, 0.0, 0.0))
    return binder, queue, telemetry


def with_uid(p: Obj, uid: str) -> Obj:
    p["metadata"]["uid"] = uid
    return p


def test_a_replica_places_its_own_pods_onto_its_own_nodes_and_leaves_the_others_pods() -> None:
    (mine,), (theirs,) = named("a", "node"), named("b", "node")
    # "theirs" is the emptier node: LeastAllocated would pick it.
    nodes = [node(mine, cpu="4"), node(theirs, cpu="4")]
    busy = pod("busy", cpu="2", node_name=mine)
    my_uids, their_uids = named("a", "uid", 3), named("b", "uid", 2)
    pending = [with_uid(pod(f"p{i}", cpu="100m"), u) for i, u in enumerate(my_uids)]
    pending += [with_uid(pod(f"q{i}", cpu="100m"), u) for i, u in enumerate(their_uids)]
    binder, queue, _ = cycle(nodes, [busy], pending)
    assert binder.bound == {"p0": mine, "p1": mine, "p2": mine}
    assert queue.counts()["elsewhere"] == 2 and not binder.handed and not binder.failed


def test_a_pod_that_fits_only_on_another_replicas_node_is_handed_to_it() -> None:
    (mine,), (theirs,) = named("a", "node"), named("b", "node")
    nodes = [node(mine, cpu="2"), node(theirs, cpu="4")]
    (uid,) = named("a", "uid")
    binder, queue, telemetry = cycle(nodes, [], [with_uid(pod("big", cpu="3"), uid)])
    assert binder.handed == {"big": theirs} and not binder.bound and not binder.failed
    assert binder.events == [f"HandedOver: handed to replica b: it fits on {theirs}, its node"]
    assert queue.counts()["elsewhere"] == 1
    assert telemetry.registry.get_sample_value("ksched_shard_handoffs_total") == 1.0


def test_a_pod_that_would_preempt_here_but_fits_on_another_replicas_node_preempts_no_one() -> None:
    (mine,), (theirs,) = named("a", "node"), named("b", "node")
    nodes = [node(mine, cpu="4"), node(theirs, cpu="4")]
    low = pod("low", cpu="3", node_name=mine)
    low["spec"]["priority"] = 0
    (uid,) = named("a", "uid")
    urgent = with_uid(pod("urgent", cpu="2"), uid)
    urgent["spec"]["priority"] = 1000
    binder, _, _ = cycle(nodes, [low], [urgent])
    assert binder.handed == {"urgent": theirs} and binder.preempted == []


def test_a_pod_that_fits_nowhere_is_reported_with_every_node_counted() -> None:
    (mine,), (theirs,) = named("a", "node"), named("b", "node")
    nodes = [node(mine, cpu="2"), node(theirs, cpu="2")]
    (uid,) = named("a", "uid")
    binder, _, _ = cycle(nodes, [], [with_uid(pod("huge", cpu="8"), uid)])
    assert not binder.handed and not binder.bound
    (failed,) = binder.failed
    assert failed.startswith("huge: 0/2 nodes are available: 2 Insufficient cpu"), failed
