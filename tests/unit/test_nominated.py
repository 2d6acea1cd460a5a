"""Nominated pods through ``Engine.schedule``, as upstream: the nominated node first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ksched.bench.engine import run_preemption_bench
from ksched.config import Config
from ksched.engine import Engine, Placement
from ksched.engine.snapshot import build_snapshot
from ksched.loop.metrics.recent_pods import RecentPods
from ksched.loop.mirror.slim import slim_pod
from ksched.loop.scheduling.cycle import Scheduler
from ksched.loop.scheduling.queue import SchedulingQueue
from ksched.loop.telemetry import Telemetry
from ksched.objects import terminating_by_preemption
from tests.conftest import node, pod


def nominated(name: str, to: str | None, cpu: str = "1", priority: int = 0) -> dict[str, Any]:
    p = pod(name, cpu=cpu, priority=priority)
    if to is not None:
        p["status"] = {"nominatedNodeName": to}
    return p


# "busy" has 3 of 4 cpus requested, so LeastAllocated prefers "idle".
NODES = [node("idle"), node("busy"), node("full")]
EXISTING = [pod("load", cpu="3", node_name="busy"), pod("fill", cpu="3500m", node_name="full")]


@pytest.mark.parametrize(
    ("name", "pending", "nominees", "want"),
    [
        ("no nomination: best score", [nominated("p", None)], [], {"default/p": ("idle", True)}),
        (
            "nominated node fits: taken without scoring",
            [nominated("p", "busy")],
            [],
            {"default/p": ("busy", False)},
        ),
        (
            "nominated node does not fit: every node evaluated",
            [nominated("p", "full")],
            [],
            {"default/p": ("idle", True)},
        ),
        (
            "nominated node unknown: every node evaluated",
            [nominated("p", "gone")],
            [],
            {"default/p": ("idle", True)},
        ),
        (
            "room held there by a higher-priority nominee: every node evaluated",
            [nominated("p", "busy")],
            [nominated("vip", "busy", priority=100)],
            {"default/p": ("idle", True)},
        ),
        (
            "a lower-priority nominee holds nothing",
            [nominated("p", "busy", priority=5)],
            [nominated("low", "busy", priority=1)],
            {"default/p": ("busy", False)},
        ),
    ],
)
def test_nominated_node_first(
    name: str,
    pending: list[dict[str, Any]],
    nominees: list[dict[str, Any]],
    want: dict[str, tuple[str, bool]],
) -> None:
    snapshot = build_snapshot(NODES, EXISTING)
    placements = Engine(Config()).schedule(snapshot, pending, nominated=nominees).placements
    got = {p.pod: (p.node, p.score is not None) for p in placements}
    assert got == want, f"{name}: want {want}, got {got}"


def victim(name: str, deleting: bool, conditions: list[dict[str, str]]) -> dict[str, Any]:
    p = pod(name, cpu="2", node_name="n0", priority=1)
    if deleting:
        p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    p["status"] = {"conditions": conditions}
    return p


PREEMPTED = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
DRAINED = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}


@pytest.mark.parametrize(
    ("name", "victim_pod", "want_victims"),
    [
        # Upstream podTerminatingByPreemption: only a scheduler's preemption makes the
        # preemptor wait for its nominated node instead of evicting again.
        ("victim deleted by a preemption: wait for it", victim("v", True, [PREEMPTED]), ()),
        ("deleted for another reason: preempt again", victim("v", True, [DRAINED]), ("default/v",)),
        ("condition but not deleted: preempt again", victim("v", False, [PREEMPTED]), ("default/v",)),
        ("deleted, no condition: preempt again", victim("v", True, []), ("default/v",)),
    ],
)
def test_a_nominated_preemptor_waits_only_for_victims_terminating_by_preemption(
    name: str, victim_pod: dict[str, Any], want_victims: tuple[str, ...]
) -> None:
    snapshot = build_snapshot([node("n0", cpu="3")], [victim_pod])
    preemptor = nominated("p", "n0", cpu="2", priority=100)
    (placement,) = Engine(Config()).schedule(snapshot, [preemptor]).placements
    assert (placement.nominated_node, placement.victims) == ("n0", want_victims), name


def test_the_informers_keep_what_terminating_by_preemption_reads() -> None:
    scheduled = {"type": "PodScheduled", "status": "True"}
    p = victim("v", True, [scheduled, DRAINED, PREEMPTED])
    assert not terminating_by_preemption(slim_pod(p)), "the first DisruptionTarget decides, as upstream"
    p = victim("v", True, [scheduled, PREEMPTED])
    assert terminating_by_preemption(slim_pod(p))


def test_preemption_bench_places_every_preemptor_where_it_was_nominated() -> None:
    # PreemptionBasic at 20 nodes: each 3-cpu pod evicts 3 of the 4 low pods on a
    # node, and is placed on that node once they are gone; one preemptor per node.
    figures = run_preemption_bench(20, seed=1, batch_size=8)
    assert (figures.placed, figures.pods, figures.init_pods) == (20, 20, 80)


def with_port(p: dict[str, Any], port: int) -> dict[str, Any]:
    p["spec"]["containers"][0]["ports"] = [{"containerPort": port, "hostPort": port}]
    return p


@pytest.mark.parametrize(
    ("name", "priority", "port", "want_on_busy"),
    [
        ("lower priority, same host port: busy is held", 1, 8080, False),
        ("equal priority, same host port: busy is held", 100, 8080, False),
        ("higher priority: nothing held", 200, 8080, True),
        ("another host port: busy fits", 1, 9090, True),
    ],
)
def test_a_nominated_pod_holds_its_host_ports(
    name: str, priority: int, port: int, want_on_busy: bool
) -> None:
    # Only "busy" and "full" exist; busy has room for both pods, but "vip" (priority
    # 100, nominated to busy) holds host port 8080 there.
    snapshot = build_snapshot([node("busy"), node("full", cpu="1")], [])
    vip = with_port(nominated("vip", "busy", cpu="1", priority=100), 8080)
    p = with_port(nominated("p", None, cpu="2", priority=priority), port)
    (placement,) = Engine(Config()).schedule(snapshot, [p], nominated=[vip]).placements
    assert (placement.node == "busy") == want_on_busy, f"{name}: {placement}"


class VictimUsage:
    def __init__(self, uid: str) -> None:
        self.uid = uid


class UsageState:
    def __init__(self) -> None:
        self.usage = {"default/victim": VictimUsage("uid-victim")}
        # Victims counted as being evicted, and the calls left for the next sync.
        self.evicting: set[str] = set()
        self.calls: list[Callable[[], None]] = []

    def preempting(self, keys: tuple[str, ...]) -> None:
        self.evicting |= set(keys)

    def eviction_failed(self, keys: tuple[str, ...]) -> None:
        self.evicting -= set(keys)

    def at_this_point(self, call: Callable[[], None]) -> None:
        self.calls.append(call)

    recent = RecentPods(())


class RecordingBinder:
    def __init__(self) -> None:
        self.cleared: list[str] = []
        self.preempted: list[tuple[str, str, list[tuple[str, str, str]]]] = []
        # Each preemption's report of whether its nomination was written.
        self.done: list[Callable[[bool], None]] = []

    def clear_nomination(self, p: dict[str, Any]) -> None:
        self.cleared.append(p["metadata"]["name"])

    def unschedulable(self, p: dict[str, Any], message: str) -> None:
        pass

    def preempt(
        self, p: dict[str, Any], node: str, victims: list[tuple[str, str, str]], done: Callable[[bool], None]
    ) -> None:
        self.preempted.append((p["metadata"]["name"], node, victims))
        self.done.append(done)


def test_a_preemption_clears_lower_nominations_on_its_node() -> None:
    # Upstream prepareCandidate: pods of lower priority nominated to the chosen
    # node lose their nomination; equal priority or another node keep theirs.
    queue = SchedulingQueue(lambda: 1000.0)
    for name, priority, to in [("low", 1, "n0"), ("peer", 50, "n0"), ("away", 1, "n1")]:
        p = nominated(name, to, priority=priority)
        p["metadata"]["uid"] = f"uid-{name}"
        queue.add(p)
    for qp in queue.pop_batch(10, 0.0, 0.0):
        queue.done_unschedulable(qp, "no room")
    urgent = nominated("urgent", None, priority=50)
    urgent["metadata"]["uid"] = "uid-urgent"
    queue.add(urgent)
    (qp,) = queue.pop_batch(10, 0.0, 0.0)
    binder = RecordingBinder()
    scheduler = Scheduler(Config(), UsageState(), queue, binder, Telemetry(), lambda: True, None)  # type: ignore[arg-type]
    placement = Placement("default/urgent", None, None, "", nominated_node="n0", victims=("default/victim",))
    scheduler._preempt(qp, placement)
    assert binder.preempted == [("urgent", "n0", [("default", "victim", "uid-victim")])]
    assert binder.cleared == ["low"]
    assert sorted(p["metadata"]["name"] for p in queue.nominated()) == ["away", "peer"]


def test_a_preemptor_holds_its_room_before_the_watch_brings_its_nomination_back() -> None:
    # After an API server restart the watch took seconds to echo a nomination: a second
    # preemptor of the same priority chose the same victims for the same node's room.
    queue, binder, _, _ = _preempting("first")
    # The nomination was handed to the writer as the pod stood (the writer skips a node
    # already nominated without victims), and is held in the queue at once.
    assert binder.preempted == [("first", "n0", [("default", "victim", "uid-victim")])]
    (held,) = queue.nominated()
    assert held["metadata"]["name"] == "first" and held["status"]["nominatedNodeName"] == "n0"
    # The cycle's next engine call counts it on n0: no room there for a second preemptor.
    snap = build_snapshot([node("n0", cpu="2")], [pod("victim", cpu="2", node_name="n0", priority=0)])
    second = nominated("second", None, cpu="2", priority=50)
    engine = Engine(Config())
    assert engine.schedule(snap, [second]).placements[0].nominated_node == "n0", "alone, it would preempt"
    result = engine.schedule(snap, [second], nominated=[held])
    assert result.placements[0].nominated_node is None and result.placements[0].node is None
    # A copy the watch brings without the nomination (the pod's own PodScheduled condition,
    # written meanwhile) keeps it, as upstream's UpdateNominatedPod does...
    queue.add(_first())
    (held,) = queue.nominated()
    assert held["status"]["nominatedNodeName"] == "n0"
    # ...until the watch shows the nomination written; from then on the API server's copy rules.
    queue.add({**_first(), "status": {"nominatedNodeName": "n0"}})
    queue.add(_first())
    assert queue.nominated() == []


def _first() -> dict[str, Any]:
    first = nominated("first", None, cpu="2", priority=50)
    first["metadata"]["uid"] = "uid-first"
    return first


def _preempting(name: str) -> tuple[SchedulingQueue, RecordingBinder, Scheduler, Any]:
    """A queue whose one pod preempted on n0 (its nomination not yet written), then waits."""
    queue = SchedulingQueue(lambda: 1000.0)
    queue.add(_first())
    (qp,) = queue.pop_batch(10, 0.0, 0.0)
    binder = RecordingBinder()
    scheduler = Scheduler(Config(), UsageState(), queue, binder, Telemetry(), lambda: True, None)  # type: ignore[arg-type]
    placement = Placement(f"default/{name}", None, None, "", nominated_node="n0", victims=("default/victim",))
    scheduler._preempt(qp, placement)
    queue.done_unschedulable(qp, "waiting for its victims")
    return queue, binder, scheduler, qp


def test_a_nomination_that_was_not_written_holds_no_room() -> None:
    queue, binder, scheduler, _ = _preempting("first")
    (done,) = binder.done
    state = scheduler.state
    assert state.evicting == {"default/victim"}
    done(False)  # the PATCH failed (the API server restarting)
    assert queue.nominated() == []
    for call in state.calls:  # the scheduling thread's next sync
        call()
    assert state.evicting == set(), "a victim not evicted counts as the watch shows it"
    # A copy from the watch brings no nomination back.
    queue.add(_first())
    assert queue.nominated() == []


def test_a_nomination_dropped_when_the_pod_fits_nowhere_is_dropped_at_once() -> None:
    # Its clear on the API server brings no echo where the nomination was only held here.
    queue, binder, scheduler, qp = _preempting("first")
    scheduler._place(qp, Placement("default/first", None, None, "no node fits"), "default-scheduler", 0.0)
    assert binder.cleared == ["first"] and queue.nominated() == []


def test_victims_being_evicted_hold_their_preemptor_on_its_node_before_the_watch_shows_them() -> None:
    """Upstream's PodEligibleToPreemptOthers: a preemptor nominated to a node where victims
    terminate by preemption waits for them. ksched counts its own evictions so at once: in a
    soak, preemptors retried before the watch showed their victims terminating preempted again
    on other nodes, or took victims another preemptor had."""
    from ksched.loop.mirror.state import ClusterState

    state = ClusterState(())
    for n in ("n0", "n1"):
        state.on_node("ADDED", node(n, cpu="2"), None)
    victims = [pod(f"v{i}", cpu="2", node_name=f"n{i}", priority=0) for i in range(2)]
    for v in victims:
        v["metadata"]["uid"] = f"uid-{v['metadata']['name']}"
        state.on_pod("ADDED", v, None)
    state.sync()
    preemptor = nominated("p", "n0", cpu="2", priority=50)
    engine = Engine(Config())
    again = engine.schedule(state.snapshot(), [preemptor]).placements[0]
    assert again.nominated_node is not None and again.victims, "not yet shown terminating: it preempts again"
    state.preempting(["default/v0"])
    waits = engine.schedule(state.snapshot(), [preemptor]).placements[0]
    assert (waits.node, waits.nominated_node, waits.victims) == (None, "n0", ())
    # The watch's copy rules once it shows the victim terminating; a write that failed undoes it.
    state.eviction_failed(["default/v0"])
    assert engine.schedule(state.snapshot(), [preemptor]).placements[0].victims


def test_a_victim_being_evicted_stays_so_through_other_updates_until_the_watch_shows_it() -> None:
    from ksched.loop.mirror.state import ClusterState

    state = ClusterState(())
    state.on_node("ADDED", node("n0", cpu="2"), None)
    victim = pod("v0", cpu="2", node_name="n0", priority=0)
    victim["metadata"]["uid"] = "uid-v0"
    state.on_pod("ADDED", victim, None)
    state.sync()
    state.preempting(["default/v0"])
    relabelled = {**victim, "metadata": {**victim["metadata"], "labels": {"new": "yes"}}}
    state.on_pod("MODIFIED", relabelled, victim)
    state.sync()
    evictable = state.usage["default/v0"].evictable
    assert evictable is not None and evictable.preempted, "an unrelated update keeps the mark"
    terminating = {
        **relabelled,
        "metadata": {**relabelled["metadata"], "deletionTimestamp": "2026-11-29T19:00:00Z"},
        "status": {
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
        },
    }
    state.on_pod("MODIFIED", terminating, relabelled)
    state.sync()
    assert state._preempting == set(), "the watch shows it terminating: its copy rules"
    evictable = state.usage["default/v0"].evictable
    assert evictable is not None and evictable.preempted


def test_a_preemptor_nominated_elsewhere_before_holds_the_node_it_preempts_on() -> None:
    # Handed over to n1 (a replica's nomination), it preempts on n0: the queue holds n0 at
    # once, through copies that still show n1, until the watch shows n0.
    queue = SchedulingQueue(lambda: 1000.0)
    handed = {**_first(), "status": {"nominatedNodeName": "n1"}}
    queue.add(handed)
    (qp,) = queue.pop_batch(10, 0.0, 0.0)
    scheduler = Scheduler(Config(), UsageState(), queue, RecordingBinder(), Telemetry(), lambda: True, None)  # type: ignore[arg-type]
    scheduler._preempt(
        qp, Placement("default/first", None, None, "", nominated_node="n0", victims=("default/victim",))
    )
    queue.done_unschedulable(qp, "waiting for its victims")
    queue.add({**handed, "metadata": {**handed["metadata"], "labels": {"relabelled": "yes"}}})
    assert [p["status"]["nominatedNodeName"] for p in queue.nominated()] == ["n0"]
    queue.add({**handed, "status": {"nominatedNodeName": "n0"}})
    assert [p["status"]["nominatedNodeName"] for p in queue.nominated()] == ["n0"]
    queue.add({**handed, "status": {}})  # cleared on the API server by another: its copy rules
    assert queue.nominated() == []
