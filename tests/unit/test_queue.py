"""SchedulingQueue: order, backoff, unschedulable moves, drops. A fake clock and no sleeps, but for
the batch window, which waits on the real clock (short waits)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from ksched.loop.queue import MAX_BACKOFF_S, UNSCHEDULABLE_FLUSH_S, SchedulingQueue, backoff_s
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
