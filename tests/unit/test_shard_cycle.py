"""One scheduling cycle of a sharded replica (``sharding``): it places the pods it owns onto
the nodes it owns, leaves the others' pods to them, and hands a pod that none of its nodes
takes, or that would preempt there, to the replica whose node takes it."""

from __future__ import annotations

from typing import Any

from ksched.config import Config
from ksched.engine.cluster_file import ClusterFile
from ksched.engine.simulation import run_simulation
from ksched.loop.client import MERGE_PATCH, Response
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.mirror.slim import slim_node
from ksched.loop.mirror.state import ClusterState
from ksched.loop.scheduling.binder import Outcome
from ksched.loop.scheduling.cycle import Scheduler
from ksched.loop.scheduling.evictor import Evictor
from ksched.loop.scheduling.queue import SchedulingQueue
from ksched.loop.shards import owner
from ksched.loop.telemetry import Telemetry
from ksched.objects import HANDED_OVER, Obj, handed_over, holds_nomination
from tests.conftest import node, pod
from tests.unit.test_shards import Clock, FakeLeases, replica, tick_all

MEMBERS = ("a", "b")
# The condition a hand-over by replica "b" wrote.
HAND_OVER = {"type": HANDED_OVER, "status": "True", "reason": "HandedOver", "message": "by b"}


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

    def hand_over(self, p: Obj, node_name: str, note: str, done: Any) -> None:
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


def test_a_hand_over_holds_no_room_against_a_preemptors_nomination() -> None:
    """A soak's violation: replica "a" preempted on its node for "first" (its victims gone
    since), and "b", whose watch had not yet shown that, handed "second", a preemptor of the
    same priority, over to the same node. Both nominations held the node's one room, so
    neither fit; "first" was cleared, and "second" took the room "first"'s victims had left:
    "first" was neither bound nor nominated. A hand-over only routes the pod: "first" binds."""
    (mine,), (theirs,) = named("a", "node"), named("b", "node")
    nodes = [node(mine, cpu="4"), node(theirs, cpu="4")]
    keeper, full = pod("keeper", cpu="2", node_name=mine), pod("full", cpu="4", node_name=theirs)
    (first_uid,), (second_uid,) = named("a", "uid"), named("b", "uid")
    second = with_uid(pod("second", cpu="2"), second_uid)  # older: first in the queue
    second["status"] = {
        "nominatedNodeName": mine,
        "conditions": [HAND_OVER],
    }
    first = with_uid(pod("first", cpu="2"), first_uid)
    first["status"] = {"nominatedNodeName": mine}
    for p in (keeper, full, first, second):
        p["spec"]["priority"] = 1000
    binder, queue, _ = cycle(nodes, [keeper, full], [second, first])
    assert binder.bound == {"first": mine} and not binder.preempted
    (failed,) = binder.failed
    assert failed.startswith("second: 0/2 nodes are available: 2 Insufficient cpu"), failed
    assert queue.nominated() == [], "a hand-over holds no room, even this replica's own view of it"


def test_a_hand_over_is_placed_by_the_owners_view_and_its_own_nomination_holds() -> None:
    """The owner places a pod handed to it as any pending pod of its own (not its handed
    node first); should it preempt, the nomination it writes holds the room."""
    (mine,), (theirs,) = named("a", "node"), named("b", "node")
    nodes = [node(mine, cpu="4"), node(theirs, cpu="4")]
    low = pod("low", cpu="3", node_name=mine)
    low["spec"]["priority"] = 0
    full = pod("full", cpu="4", node_name=theirs)
    full["spec"]["priority"] = 1000
    (uid,) = named("b", "uid")
    handed = with_uid(pod("handed", cpu="2"), uid)
    handed["spec"]["priority"] = 1000
    handed["status"] = {
        "nominatedNodeName": mine,
        "conditions": [HAND_OVER],
    }
    binder, queue, _ = cycle(nodes, [low, full], [handed])
    assert binder.preempted == ["handed"]
    (held,) = queue.nominated()
    assert held["status"]["nominatedNodeName"] == mine and not handed_over(held)


class StatusWrites:
    """A Kube that records each request and answers 200."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, Any, str | None]] = []

    def request(
        self, method: str, path: str, body: Any = None, content_type: str | None = None, **_: Any
    ) -> Any:
        self.writes.append((method, path, body, content_type))
        return Response(200, b"{}")


def test_a_hand_over_writes_its_condition_true_and_the_owners_nomination_turns_it_false() -> None:
    kube = StatusWrites()
    evictor = Evictor(kube, lambda: True, Telemetry(), lambda *_: None)  # type: ignore[arg-type]
    p = with_uid(pod("p", cpu="1"), "uid-p")
    assert evictor.nominate(p, "n1", [], hand_over="handed to replica b: it fits on n1, its node")
    ((method, path, body, content_type),) = kube.writes
    # A strategic merge patch: the condition merges into the pod's others by its type.
    assert (method, path, content_type) == ("PATCH", "/api/v1/namespaces/default/pods/p/status", MERGE_PATCH)
    assert MERGE_PATCH == "application/strategic-merge-patch+json"
    (condition,) = body["status"]["conditions"]
    assert body["status"]["nominatedNodeName"] == "n1"
    assert (condition["type"], condition["status"], condition["reason"]) == (
        HANDED_OVER,
        "True",
        "HandedOver",
    )
    assert condition["message"] == "handed to replica b: it fits on n1, its node"
    # As the watch brings it back: the owner's nomination of the same node is written, False.
    p["status"] = {"nominatedNodeName": "n1", "conditions": [condition]}
    assert handed_over(p) and not holds_nomination(p)
    assert evictor.nominate(p, "n1", [])
    assert kube.writes[-1][2]["status"]["conditions"][0]["status"] == "False"
    # A plain nomination, or a clear, is nominatedNodeName alone; nothing to clear, no write.
    plain = with_uid(pod("q", cpu="1"), "uid-q")
    assert evictor.nominate(plain, "n2", [])
    plain["status"] = {"nominatedNodeName": "n2"}
    assert evictor.nominate(plain, None, [])
    assert [w[2] for w in kube.writes[-2:]] == [
        {"status": {"nominatedNodeName": "n2"}},
        {"status": {"nominatedNodeName": None}},
    ]
    writes = len(kube.writes)
    handed_then_cleared = {**p, "status": {"conditions": [condition]}}
    assert evictor.nominate(handed_then_cleared, None, []) and len(kube.writes) == writes


def test_a_nomination_whose_write_failed_writes_the_hand_overs_condition_false_when_retried() -> None:
    """The queue's copy turned the condition False when this replica nominated the pod; the
    write failed, so the API server's is True still: the next nomination writes it False."""
    queue = SchedulingQueue(lambda: 1000.0)
    handed = with_uid(pod("handed", cpu="1"), "uid-handed")
    handed["status"] = {"nominatedNodeName": "n0", "conditions": [HAND_OVER]}
    queue.add(handed)
    (qp,) = queue.pop_batch(10, 0.0, 0.0)
    queue.nominate(qp, "n1")
    queue.nomination_failed(qp, "n1")
    assert queue.nominated() == [] and not handed_over(qp.pod)
    kube = StatusWrites()
    evictor = Evictor(kube, lambda: True, Telemetry(), lambda *_: None)  # type: ignore[arg-type]
    assert evictor.nominate(qp.pod, "n1", [])
    ((_, _, body, _),) = kube.writes
    assert body["status"]["nominatedNodeName"] == "n1"
    assert [c["status"] for c in body["status"]["conditions"]] == ["False"]


def test_the_queue_holds_room_for_its_own_nomination_of_a_pod_handed_to_it_until_the_watch_shows_it() -> None:
    handed = with_uid(pod("handed", cpu="1"), "uid-handed")
    handed["status"] = {"nominatedNodeName": "n0", "conditions": [HAND_OVER]}
    queue = SchedulingQueue(lambda: 1000.0)
    queue.add(handed)
    assert queue.nominated() == []
    (qp,) = queue.pop_batch(10, 0.0, 0.0)
    queue.nominate(qp, "n0")  # this replica preempts there: the same node, now held
    queue.done_unschedulable(qp, "waiting for its victims")
    queue.add(handed)  # a copy written before this replica's nomination (its own condition)
    (held,) = queue.nominated()
    assert held["status"]["nominatedNodeName"] == "n0" and not handed_over(held)
    written = {
        **handed,
        "status": {"nominatedNodeName": "n0", "conditions": [{**HAND_OVER, "status": "False"}]},
    }
    queue.add(written)
    assert queue.nominated() == [written]


def test_simulate_places_a_handed_over_pod_as_its_owner_would() -> None:
    """``ksched simulate`` on a dump taken mid hand-over: its node is not tried first (nor
    scored unscored, as a nominated node is); the pod goes where the scores send it."""
    busy = pod("busy", cpu="3", node_name="busy-node")
    handed = pod("handed", cpu="500m")
    handed["status"] = {
        "nominatedNodeName": "busy-node",
        "conditions": [HAND_OVER],
    }
    nominated = {
        **handed,
        "metadata": {**handed["metadata"], "name": "nominated"},
        "status": {"nominatedNodeName": "busy-node"},
    }
    nodes = [node("busy-node", cpu="4"), node("idle-node", cpu="4")]
    cluster = ClusterFile(nodes=nodes, existing=[busy], pending=[handed, nominated], ignored=0)
    ((result,), _) = run_simulation(cluster, Config(), None, seed=0)
    assert {p.pod: p.node for p in result.placements} == {
        "default/handed": "idle-node",
        "default/nominated": "busy-node",
    }
