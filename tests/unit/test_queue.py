"""SchedulingQueue: order, backoff, unschedulable moves, drops. A fake clock and no sleeps, but for
the batch window, which waits on the real clock (short waits)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from ksched.config import Config
from ksched.engine import Engine
from ksched.engine.gangs import POD_GROUP_LABEL
from ksched.engine.snapshot import build_snapshot
from ksched.loop.scheduling.queue import (
    MAX_BACKOFF_S,
    UNSCHEDULABLE_FLUSH_S,
    SchedulingQueue,
    backoff_s,
    node_events,
)
from tests.conftest import node as cluster_node
from tests.conftest import pod


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def queued(name: str, priority: int = 0, uid: str | None = None) -> dict[str, Any]:
    p = pod(name, priority=priority)
    p["metadata"]["uid"] = uid or f"uid-{name}"
    return p


def names(batch: list[Any]) -> list[str]:
    return [qp.key.split("/")[1] for qp in batch]


def pop(q: SchedulingQueue, size: int = 100) -> list[Any]:
    return q.pop_batch(size, 0.0, timeout_s=0.0)


def test_priority_then_arrival() -> None:
    q = SchedulingQueue(Clock())
    for name, prio in [("a", 0), ("b", 10), ("c", 0), ("d", 10), ("e", -5)]:
        q.add(queued(name, prio))
    assert names(pop(q, 3)) == ["b", "d", "a"]
    assert names(pop(q)) == ["c", "e"]
    assert pop(q) == []


@pytest.mark.parametrize(("attempts", "want"), [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (9, 10.0)])
def test_backoff_doubles_to_ten_seconds(attempts: int, want: float) -> None:
    assert backoff_s(attempts) == want


def test_error_waits_out_its_backoff() -> None:
    clock = Clock()
    q = SchedulingQueue(clock)
    q.add(queued("a"))
    (a,) = pop(q)
    q.done_error(a)
    assert pop(q) == [], "still backing off"
    assert q.counts()["backoff"] == 1
    clock.now += 1.0
    (a,) = pop(q)
    q.done_error(a)
    clock.now += 1.5
    assert pop(q) == [], "second failure backs off 2 s"
    clock.now += 0.5
    assert names(pop(q)) == ["a"]


def test_unschedulable_moves_back_on_a_cluster_event_after_backoff() -> None:
    clock = Clock()
    q = SchedulingQueue(clock)
    q.add(queued("a"))
    (a,) = pop(q)
    q.done_unschedulable(a, "0/1 nodes are available")
    clock.now += 5
    assert pop(q) == [] and q.counts()["unschedulable"] == 1, "parked until something changes"
    q.move_all("NodeAdd")
    assert names(pop(q)) == ["a"]


def test_unschedulable_is_retried_every_30_seconds_without_events() -> None:
    clock = Clock()
    q = SchedulingQueue(clock)
    q.add(queued("a"))
    (a,) = pop(q)
    q.done_unschedulable(a, "no")
    clock.now += UNSCHEDULABLE_FLUSH_S - 1
    assert pop(q) == []
    clock.now += 1
    assert names(pop(q)) == ["a"]


def test_event_during_the_attempt_sends_the_pod_to_backoff_not_unschedulable() -> None:
    clock = Clock()
    q = SchedulingQueue(clock)
    q.add(queued("a"))
    (a,) = pop(q)
    q.move_all("NodeAdd")  # a node arrived while the engine was deciding
    q.done_unschedulable(a, "no")
    assert q.counts()["backoff"] == 1
    clock.now += MAX_BACKOFF_S
    assert names(pop(q)) == ["a"]


def test_deleted_or_bound_pods_are_dropped_wherever_they_wait() -> None:
    clock = Clock()
    q = SchedulingQueue(clock)
    for n in "abc":
        q.add(queued(n))
    a, b, _ = pop(q)
    q.done_error(a)
    q.done_unschedulable(b, "no")
    q.add(queued("d"))
    for n in "abd":
        q.remove(f"default/{n}")
    clock.now += 100
    q.move_all("NodeAdd")
    assert pop(q) == []
    assert "default/c" in q, "the pod still in flight is kept"
    assert all(f"default/{n}" not in q for n in "abd")


def test_a_pod_recreated_under_the_same_name_replaces_the_old_one() -> None:
    q = SchedulingQueue(Clock())
    q.add(queued("a", uid="one"))
    (old,) = pop(q)
    q.add(queued("a", uid="two"))
    q.done_bound(old)  # the old pod's attempt ends; the new pod stays queued
    (new,) = pop(q)
    assert new.uid == "two"


def test_an_update_to_an_unschedulable_pod_retries_it() -> None:
    clock = Clock()
    q = SchedulingQueue(clock)
    q.add(queued("a"))
    (a,) = pop(q)
    q.done_unschedulable(a, "no")
    clock.now += 1
    updated = queued("a")
    updated["spec"]["tolerations"] = [{"operator": "Exists"}]
    q.add(updated)
    (again,) = pop(q)
    assert again.pod["spec"]["tolerations"]


def test_nominated_pods_are_listed_while_waiting_and_until_bound() -> None:
    clock = Clock()
    q = SchedulingQueue(clock)
    nominee = queued("nominee", 100)
    nominee["status"] = {"nominatedNodeName": "n0"}
    q.add(nominee)
    q.add(queued("plain"))
    assert [object_name(p) for p in q.nominated()] == ["nominee"]
    batch = pop(q)
    assert q.nominated() == [], "a pod in flight holds nothing: it is being placed"
    for qp in batch:
        q.done_unschedulable(qp, "no room")
    assert [object_name(p) for p in q.nominated()] == ["nominee"]
    cleared = queued("nominee", 100)
    cleared["status"] = {}
    q.add(cleared)  # the nomination was cleared
    assert q.nominated() == []
    q.add(nominee)
    clock.now += MAX_BACKOFF_S  # past its backoff
    (qp,) = [qp for qp in pop(q) if qp.key.endswith("nominee")]
    q.done_bound(qp)
    assert q.nominated() == [] and "default/nominee" not in q


def object_name(p: dict[str, Any]) -> str:
    return str(p["metadata"]["name"])


def test_a_preemption_takes_the_nominations_of_lower_priority_pods_on_its_node() -> None:
    q = SchedulingQueue(Clock())
    for name, priority, node in [("low", 1, "n0"), ("equal", 5, "n0"), ("elsewhere", 1, "n1")]:
        p = queued(name, priority)
        p["status"] = {"nominatedNodeName": node}
        q.add(p)
    for qp in pop(q):
        q.done_unschedulable(qp, "no room")
    taken = q.take_nominations("n0", below=5)
    assert [object_name(p) for p in taken] == ["low"]
    assert taken[0]["status"]["nominatedNodeName"] == "n0", "the pod as the API server has it, to patch"
    assert sorted(object_name(p) for p in q.nominated()) == ["elsewhere", "equal"], "low holds nothing now"
    assert q.take_nominations("n0", below=5) == []


def _add_later(q: SchedulingQueue, delay_s: float, *pods: dict[str, Any]) -> threading.Thread:
    def run() -> None:
        time.sleep(delay_s)
        for p in pods:
            q.add(p)

    t = threading.Thread(target=run)
    t.start()
    return t


def test_an_idle_loop_schedules_a_lone_pod_without_waiting_for_the_batch_to_fill() -> None:
    # The loop waits on an empty queue; one pod arrives. It is handed out at once, not after
    # maxWait (30 s here): at a steady trickle every pod would otherwise wait the whole window.
    q = SchedulingQueue()
    adder = _add_later(q, 0.05, queued("a"))
    started = time.monotonic()
    batch = q.pop_batch(100, 30.0, timeout_s=20.0)
    elapsed = time.monotonic() - started
    adder.join()
    assert names(batch) == ["a"]
    assert elapsed < 10.0, f"waited {elapsed:.1f} s for a batch to fill"


def test_a_busy_loop_still_waits_for_its_batch_to_fill() -> None:
    # Pods were waiting when the loop came back (it is behind) and more keep coming: it
    # waits for them (up to maxWait), so they share one engine call.
    q = SchedulingQueue(fill_gap_s=20.0)
    q.add(queued("a"))
    adder = _add_later(q, 0.1, queued("b"), queued("c"))
    batch = q.pop_batch(3, 30.0, timeout_s=20.0)
    adder.join()
    assert names(batch) == ["a", "b", "c"]


def test_a_busy_loop_waits_no_longer_than_max_wait() -> None:
    q = SchedulingQueue(fill_gap_s=20.0)
    q.add(queued("a"))
    started = time.monotonic()
    batch = q.pop_batch(100, 0.2, timeout_s=20.0)
    elapsed = time.monotonic() - started
    assert names(batch) == ["a"]
    assert 0.2 <= elapsed < 10.0


def test_a_busy_loop_stops_waiting_once_pods_stop_coming() -> None:
    # A pod came during the last cycle, then nothing: it is not held for the batch window.
    q = SchedulingQueue(fill_gap_s=0.05)
    q.add(queued("a"))
    started = time.monotonic()
    batch = q.pop_batch(100, 30.0, timeout_s=20.0)
    assert names(batch) == ["a"]
    assert time.monotonic() - started < 10.0, "waited for the whole batch window"


def test_wake_ends_an_idle_wait_and_is_ignored_by_a_loop_with_pods() -> None:
    q = SchedulingQueue()
    waker = threading.Thread(target=lambda: (time.sleep(0.05), q.wake()))
    waker.start()
    started = time.monotonic()
    assert q.pop_batch(100, 0.0, timeout_s=20.0) == []
    waker.join()
    assert time.monotonic() - started < 10.0, "woken, not timed out"
    q.wake()  # nobody waits: nothing to end
    q.add(queued("a"))
    assert names(q.pop_batch(100, 0.0, timeout_s=20.0)) == ["a"]


def shaped(name: str, shape: str) -> dict[str, Any]:
    """A pending pod with no pod-level constraint ("plain"), pod affinity or a pod group."""
    p = queued(name)
    if shape == "affinity":
        p["spec"]["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}
    elif shape == "gang":
        p["metadata"]["labels"] = {POD_GROUP_LABEL: "g"}
    return p


# (case, pod shape, plugins that rejected it (None: no plugin verdict), event, retried)
ROUTING = [
    ("fit: a pod deleted frees room", "plain", {"NodeResourcesFit"}, "AssignedPodDelete", True),
    ("fit: a node's allocatable grew", "plain", {"NodeResourcesFit"}, "NodeAllocatableChange", True),
    ("fit: a node relabelled cannot help", "plain", {"NodeResourcesFit"}, "NodeLabelChange", False),
    ("taints: a taint removed", "plain", {"TaintToleration"}, "NodeTaintChange", True),
    ("taints: a pod deleted cannot help", "plain", {"TaintToleration"}, "AssignedPodDelete", False),
    ("node affinity: a node relabelled", "plain", {"NodeAffinity"}, "NodeLabelChange", True),
    ("node affinity: room cannot help", "plain", {"NodeAffinity"}, "NodeAllocatableChange", False),
    (
        "either rejecting plugin's event",
        "plain",
        {"NodeAffinity", "NodeResourcesFit"},
        "AssignedPodDelete",
        True,
    ),
    ("pod affinity: a pod bound", "affinity", {"InterPodAffinity"}, "AssignedPodAdd", True),
    ("pod affinity: a pod relabelled", "affinity", {"InterPodAffinity"}, "AssignedPodLabelChange", True),
    (
        "affinity pod rejected for room: a bind cannot help",
        "affinity",
        {"NodeResourcesFit"},
        "AssignedPodAdd",
        False,
    ),
    ("spread: a node deleted", "affinity", {"PodTopologySpread"}, "NodeDelete", True),
    ("volumes: a volume added", "plain", {"VolumeBinding"}, "PersistentVolumeAdd", True),
    ("volumes: a CSINode cannot help a zone conflict", "plain", {"VolumeZone"}, "CSINodeUpdate", False),
    ("unexplained: a node added", "plain", None, "NodeAdd", True),
    ("unexplained: a node's images changed", "plain", None, "NodeUpdate", True),
    ("unexplained: another pod's bind", "plain", None, "AssignedPodAdd", False),
    ("unexplained pod-level pod: another pod's bind", "affinity", None, "AssignedPodAdd", True),
    ("no nodes at all: a node added", "plain", set(), "NodeAdd", True),
    ("a metric threshold: a node annotated", "plain", {"Metric/load"}, "NodeAnnotationChange", True),
    ("gang member: its PodGroup changed", "gang", {"NodeResourcesFit"}, "PodGroupUpdate", True),
    ("gang member: a member bound", "gang", {"NodeResourcesFit"}, "AssignedPodAdd", True),
    ("not a gang: a PodGroup changed", "plain", {"NodeResourcesFit"}, "PodGroupUpdate", False),
]


@pytest.mark.parametrize(
    ("case", "shape", "rejected_by", "event", "retried"), ROUTING, ids=[c[0] for c in ROUTING]
)
def test_an_event_retries_a_pod_only_if_a_plugin_that_rejected_it_registered_it(
    case: str, shape: str, rejected_by: set[str] | None, event: str, retried: bool
) -> None:
    clock = Clock()
    q = SchedulingQueue(clock)
    q.add(shaped("a", shape))
    (a,) = pop(q)
    q.done_unschedulable(a, "no", None if rejected_by is None else frozenset(rejected_by))
    clock.now += MAX_BACKOFF_S
    q.move_all(event)
    got = names(pop(q)) == ["a"]
    assert got == retried, f"{case}: want retried={retried} got {got}"


@pytest.mark.parametrize(("event", "backs_off"), [("NodeLabelChange", True), ("AssignedPodDelete", False)])
def test_an_event_during_the_attempt_counts_only_if_a_rejecting_plugin_registered_it(
    event: str, backs_off: bool
) -> None:
    q = SchedulingQueue(Clock())
    q.add(queued("a"))
    (a,) = pop(q)
    q.move_all(event)
    q.done_unschedulable(a, "no", frozenset({"NodeAffinity"}))
    assert q.counts()["backoff" if backs_off else "unschedulable"] == 1


def test_an_event_a_pod_waited_for_at_an_earlier_attempt_does_not_move_it() -> None:
    clock = Clock()
    q = SchedulingQueue(clock)
    q.add(queued("a"))
    (a,) = pop(q)
    q.done_unschedulable(a, "no", frozenset({"NodeAffinity"}))
    clock.now += UNSCHEDULABLE_FLUSH_S  # the periodic flush retries it
    (a,) = pop(q)
    q.done_unschedulable(a, "no", frozenset({"NodeResourcesFit"}))
    clock.now += MAX_BACKOFF_S
    q.move_all("NodeLabelChange")
    assert pop(q) == [] and q.counts()["unschedulable"] == 1
    q.move_all("AssignedPodDelete")
    assert names(pop(q)) == ["a"]


def test_an_unknown_event_is_refused() -> None:
    with pytest.raises(ValueError, match="NodeChange"):
        SchedulingQueue(Clock()).move_all("NodeChange")


def _node(**changes: Any) -> dict[str, Any]:
    n: dict[str, Any] = {
        "metadata": {"name": "n0", "labels": {"zone": "a"}, "annotations": {}},
        "spec": {},
        "status": {"allocatable": {"cpu": "4"}, "images": []},
    }
    for path, value in changes.items():
        part, key = path.split("__")
        n[part] = {**n[part], key: value}
    return n


@pytest.mark.parametrize(
    ("case", "new", "old", "want"),
    [
        ("added", _node(), None, ["NodeAdd"]),
        ("relabelled", _node(metadata__labels={"zone": "b"}), _node(), ["NodeLabelChange"]),
        ("tainted", _node(spec__taints=[{"key": "k", "effect": "NoSchedule"}]), _node(), ["NodeTaintChange"]),
        ("cordoned", _node(spec__unschedulable=True), _node(), ["NodeTaintChange"]),
        ("resized", _node(status__allocatable={"cpu": "8"}), _node(), ["NodeAllocatableChange"]),
        ("annotated", _node(metadata__annotations={"price": "3"}), _node(), ["NodeAnnotationChange"]),
        ("images only", _node(status__images=[{"names": ["x"]}]), _node(), ["NodeUpdate"]),
        (
            "relabelled and cordoned",
            _node(metadata__labels={}, spec__unschedulable=True),
            _node(),
            ["NodeLabelChange", "NodeTaintChange"],
        ),
    ],
)
def test_a_node_change_is_reported_as_the_events_of_what_changed(
    case: str, new: dict[str, Any], old: dict[str, Any] | None, want: list[str]
) -> None:
    assert node_events(new, old) == want, case


def test_the_engine_names_the_plugins_that_rejected_a_pod_and_the_queue_waits_for_theirs() -> None:
    nodes = [
        cluster_node("tainted", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]),
        cluster_node("small", cpu="1"),
    ]
    big = queued("big")
    big["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    (placement,) = Engine(Config()).schedule(build_snapshot(nodes, []), [big]).placements
    assert placement.node is None
    assert placement.rejected_by == {"TaintToleration", "NodeResourcesFit"}
    clock = Clock()
    q = SchedulingQueue(clock)
    q.add(big)
    (qp,) = pop(q)
    q.done_unschedulable(qp, placement.message, placement.rejected_by)
    clock.now += MAX_BACKOFF_S
    q.move_all("NodeLabelChange")
    assert pop(q) == [], "neither plugin registered a label change"
    q.move_all("NodeTaintChange")
    assert names(pop(q)) == ["big"]
