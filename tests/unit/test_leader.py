"""Leader election against an in-memory Lease: when this replica counts as the leader."""

from __future__ import annotations

import copy
import datetime as dt
import threading
import time
from types import SimpleNamespace
from typing import Any

from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord

from ksched.config import LeaderElectionConfig
from ksched.loop.client import Response
from ksched.loop.leader import Leadership
from ksched.loop.scheduling.binder import Binder, Outcome
from ksched.loop.telemetry import Telemetry

# The shortest timings the client library accepts.
FAST = LeaderElectionConfig(lease_duration_s=3, renew_deadline_s=2, retry_period_s=1, resource_name="t")


class MemoryLease:
    """The Lease as the API server keeps it, for the library's lock calls."""

    def __init__(self) -> None:
        self.record: Any = None
        self.reads = 0
        self.lock = threading.Lock()

    def get(self, name: str, namespace: str) -> tuple[bool, Any]:
        with self.lock:
            self.reads += 1
            if self.record is None:
                return False, SimpleNamespace(body='{"code": 404}', reason="NotFound")
            return True, copy.copy(self.record)

    def create(self, name: str, namespace: str, record: Any) -> bool:
        with self.lock:
            self.record = copy.copy(record)
        return True

    def update(self, name: str, namespace: str, record: Any) -> bool:
        with self.lock:
            self.record = copy.copy(record)
        return True

    def take(self, holder: str) -> None:
        """Another replica acquires the lease (as after this one was frozen past it)."""
        now = str(dt.datetime.now())
        with self.lock:
            self.record = LeaderElectionRecord(holder, "3", now, now)
            self.reads = 0


def wait_for(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_leader_that_finds_the_lease_taken_stops_leading_at_once() -> None:
    lease = MemoryLease()
    leadership = Leadership(FAST, "replica-a", on_lost=lambda: None, store=lease)
    leadership.start()
    try:
        assert wait_for(leadership.is_leader, 5)
        # Stop this replica's writes from winning again, then let another replica take the lease.
        lease.update = lambda name, namespace, record: False  # type: ignore[method-assign]
        lease.take("replica-b")
        assert wait_for(lambda: leadership.holder() == "replica-b", 3), "the elector read the lease again"
        # Binding now would be a bind by a non-leader: the renew loop has not given up yet,
        # but the lease names someone else.
        assert not leadership.is_leader()
        assert leadership.leader_alive(), "the other replica's lease is current"
    finally:
        leadership._lock.released = True  # type: ignore[union-attr]  # ends the election thread


def test_a_leader_whose_renewals_stop_stops_leading_within_the_renew_deadline() -> None:
    lease = MemoryLease()
    leadership = Leadership(FAST, "replica-a", on_lost=lambda: None, store=lease)
    leadership.start()
    try:
        assert wait_for(leadership.is_leader, 5)
        lease.update = lambda name, namespace, record: False  # type: ignore[method-assign]
        stopped = time.monotonic()
        assert wait_for(lambda: not leadership.is_leader(), 4)
        # Within the renew deadline (2 s), not the lease's duration (3 s); a loaded machine
        # may wake this thread late, so the time it saw is held to the lease's duration.
        assert time.monotonic() - stopped < FAST.lease_duration_s
    finally:
        leadership._lock.released = True  # type: ignore[union-attr]


class LeaseLostWhileWaiting:
    """A write limiter whose wait outlasts the lease: leadership is lost during ``acquire``."""

    def __init__(self, leading: list[bool]) -> None:
        self.leading = leading

    def acquire(self) -> None:
        self.leading[0] = False


class RecordingApi:
    def __init__(self, leading: list[bool]) -> None:
        self.writes = LeaseLostWhileWaiting(leading)
        self.sent: list[str] = []

    def connection(self) -> RecordingApi:
        return self

    def request(self, method: str, path: str, **_: Any) -> Response:
        self.sent.append(f"{method} {path}")
        return Response(201, b"{}")


def test_a_bind_that_waited_for_the_rate_limit_past_the_lease_is_not_sent() -> None:
    leading = [True]
    api = RecordingApi(leading)
    binder = Binder(api, 1, "replica-a", Telemetry(), lambda: leading[0])  # type: ignore[arg-type]
    outcomes: list[Outcome] = []
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u1"}, "spec": {}}
    binder.bind(pod, "node-1", outcomes.append)
    binder.shutdown()
    assert outcomes == [Outcome.NOT_LEADER]
    assert not [s for s in api.sent if s.endswith("/binding")], "no binding sent after the lease was lost"
