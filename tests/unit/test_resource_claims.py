"""Pods with ResourceClaims (DRA) are never ksched's: the webhook leaves them, the engine
refuses them with a message, and the loop hands them off at once or parks them."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from ksched.config import Config, HandoffConfig
from ksched.engine import Engine
from ksched.engine.messages import RESOURCE_CLAIMS_UNSUPPORTED
from ksched.engine.snapshot import build_snapshot
from ksched.loop.metrics.recent_pods import RecentPods
from ksched.loop.mirror.slim import slim_pod
from ksched.loop.scheduling.cycle import Scheduler
from ksched.loop.scheduling.handoff import OPT_OUT
from ksched.loop.scheduling.queue import UNSCHEDULABLE_FLUSH_S, SchedulingQueue
from ksched.loop.scheduling.webhook import review_response
from ksched.loop.telemetry import Telemetry
from tests.conftest import node, pod

CLAIMS = [{"name": "gpu", "resourceClaimName": "gpu-claim"}]


def claiming(name: str, **extra: Any) -> dict[str, Any]:
    p = pod(name, resourceClaims=CLAIMS, **extra)
    p["metadata"]["uid"] = f"uid-{name}"
    return p


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "r1", "kind": {"kind": "Pod"}, "operation": "CREATE", "object": obj},
    }


@pytest.mark.parametrize(
    ("name", "obj", "routed"),
    [
        ("plain pod", pod("p", scheduler="default-scheduler"), True),
        ("pod with claims", pod("p", scheduler="default-scheduler", resourceClaims=CLAIMS), False),
        ("empty claims list", pod("p", scheduler="default-scheduler", resourceClaims=[]), True),
    ],
)
def test_webhook_routes_only_pods_without_claims(name: str, obj: dict[str, Any], routed: bool) -> None:
    response = review_response(review(obj), "ksched", lambda _: True)["response"]
    assert response["allowed"]
    got = "patch" in response
    assert got == routed, f"{name}: want routed={routed}, got {got}"
    if routed:
        patch = json.loads(base64.b64decode(response["patch"]))
        assert {"op": "add", "path": "/spec/schedulerName", "value": "ksched"} in patch


def test_engine_refuses_a_pod_with_claims_and_places_the_others() -> None:
    snapshot = build_snapshot([node("a")], [])
    placements = Engine(Config()).schedule(snapshot, [claiming("dra"), pod("plain")]).placements
    got = {p.pod: (p.node, p.message) for p in placements}
    assert got == {"default/dra": (None, RESOURCE_CLAIMS_UNSUPPORTED), "default/plain": ("a", None)}


def test_slim_pod_keeps_the_claims() -> None:
    assert slim_pod(claiming("dra"))["spec"]["resourceClaims"] == CLAIMS


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeState:
    def sync(self) -> None:
        pass

    recent = RecentPods(())


class FakeBinder:
    def __init__(self) -> None:
        self.unschedulable_messages: list[tuple[str, str]] = []

    def unschedulable(self, p: dict[str, Any], message: str) -> None:
        self.unschedulable_messages.append((p["metadata"]["name"], message))


class FakeHandoff:
    def __init__(self, ok: bool) -> None:
        self.ok = ok
        self.submitted: list[tuple[str, str]] = []

    def submit(self, p: dict[str, Any], reason: str, done: Any) -> None:
        self.submitted.append((p["metadata"]["name"], reason))
        done(self.ok)


def scheduler(
    handoff_enabled: bool, ok: bool = True
) -> tuple[Scheduler, SchedulingQueue, FakeBinder, FakeHandoff]:
    config = Config(handoff=HandoffConfig(enabled=handoff_enabled))
    queue = SchedulingQueue(Clock())
    binder, handoff = FakeBinder(), FakeHandoff(ok)
    s = Scheduler(
        config,
        FakeState(),  # type: ignore[arg-type]
        queue,
        binder,  # type: ignore[arg-type]
        Telemetry(),
        lambda: True,
        None,  # type: ignore[arg-type]
        handoff,  # type: ignore[arg-type]
    )
    return s, queue, binder, handoff


def test_with_hand_off_a_pod_with_claims_goes_to_default_scheduler_at_once() -> None:
    s, queue, binder, handoff = scheduler(handoff_enabled=True)
    queue.add(claiming("dra"))
    s.cycle(queue.pop_batch(10, 0.0, 0.0))
    assert handoff.submitted == [("dra", "uses ResourceClaims")]
    assert binder.unschedulable_messages == []
    assert "default/dra" not in queue, "handed off: it left ksched's queue"


def test_a_failed_hand_off_is_retried_after_backoff() -> None:
    s, queue, _, handoff = scheduler(handoff_enabled=True, ok=False)
    queue.add(claiming("dra"))
    s.cycle(queue.pop_batch(10, 0.0, 0.0))
    assert queue.counts()["backoff"] == 1
    assert handoff.submitted == [("dra", "uses ResourceClaims")]


@pytest.mark.parametrize(
    ("name", "handoff_enabled", "annotations"),
    [("hand-off off", False, {}), ("opted out of hand-off", True, {OPT_OUT: "false"})],
)
def test_otherwise_it_gets_one_event_and_stays_parked(
    name: str, handoff_enabled: bool, annotations: dict[str, str]
) -> None:
    s, queue, binder, handoff = scheduler(handoff_enabled)
    dra = claiming("dra")
    dra["metadata"]["annotations"] = annotations
    queue.add(dra)
    s.cycle(queue.pop_batch(10, 0.0, 0.0))
    assert handoff.submitted == [], name
    assert binder.unschedulable_messages == [("dra", RESOURCE_CLAIMS_UNSUPPORTED)], name
    assert queue.counts()["parked"] == 1, name
    # Neither cluster events, updates to the pod nor the periodic flush retry it.
    queue.move_all("NodeAdd")
    queue.move_all("AssignedPodAdd")
    queue.add(dra)
    queue.clock.now += 10 * UNSCHEDULABLE_FLUSH_S  # type: ignore[attr-defined]
    assert queue.pop_batch(10, 0.0, 0.0) == [], name
    assert queue.take_overdue(0.0) == [], name
