"""The rebalance planner's candidates (``ksched.engine.rebalance.plan``): the pods it never
moves, and the order it takes the others in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ksched.engine.rebalance import (
    COOLING,
    DAEMONSET,
    LOCAL_STORAGE,
    MIRROR,
    NO_CONTROLLER,
    SYSTEM_CRITICAL,
    TERMINATING,
    Budget,
)
from tests.unit.test_rebalance_plan import (
    A_MINUTE_AGO,
    LONG_AGO,
    moved,
    reasons,
    rebalance,
    run_plan,
    workload_pod,
)

Obj = dict[str, Any]


def labelled(p: Obj, **changes: Any) -> Obj:
    p["metadata"].update(changes)
    return p


EXCLUSIONS: list[tuple[str, Callable[[], Obj], str]] = [
    ("a DaemonSet's pod", lambda: workload_pod("p", "n0", kind="DaemonSet"), DAEMONSET),
    (
        "a mirror pod",
        lambda: labelled(workload_pod("p", "n0"), annotations={"kubernetes.io/config.mirror": "x"}),
        MIRROR,
    ),
    (
        "a system-critical priority class",
        lambda: workload_pod("p", "n0", priorityClassName="system-node-critical"),
        SYSTEM_CRITICAL,
    ),
    ("a system priority", lambda: workload_pod("p", "n0", priority=2_000_000_000), SYSTEM_CRITICAL),
    ("a young pod", lambda: workload_pod("p", "n0", started=A_MINUTE_AGO), "younger than minPodAge 5m0s"),
    (
        "emptyDir",
        lambda: workload_pod("p", "n0", volumes=[{"name": "scratch", "emptyDir": {}}]),
        LOCAL_STORAGE,
    ),
    ("no controller", lambda: labelled(workload_pod("p", "n0"), ownerReferences=[]), NO_CONTROLLER),
    ("a controller that does not re-create it", lambda: workload_pod("p", "n0", kind="Foo"), NO_CONTROLLER),
    (
        "another scheduler's pod",
        lambda: workload_pod("p", "n0", schedulerName="default-scheduler"),
        "not scheduled by ksched (schedulerName default-scheduler)",
    ),
    ("a workload cooling down", lambda: workload_pod("p", "n0", owner="cool"), COOLING),
    ("a terminating pod", lambda: labelled(workload_pod("p", "n0"), deletionTimestamp=LONG_AGO), TERMINATING),
]


@pytest.mark.parametrize(("name", "make", "reason"), EXCLUSIONS, ids=[e[0] for e in EXCLUSIONS])
def test_pods_that_never_move(name: str, make: Callable[[], Obj], reason: str) -> None:
    budget = Budget(evictions=5, cooling=frozenset({"ReplicaSet/default/cool"}))
    p = run_plan([0.9, 0.5, 0.3, 0.55], [make()], budget=budget)
    assert (p.moves, reasons(p)) == ((), {"default/p": reason}), name


def test_empty_dir_moves_when_local_storage_is_allowed() -> None:
    p = workload_pod("p", "n0", volumes=[{"name": "scratch", "emptyDir": {}}])
    plan_ = run_plan([0.9, 0.5, 0.3, 0.55], [p], config=rebalance(allow_local_storage=True))
    assert moved(plan_) == [("default/p", "n0", "n2")]


@pytest.mark.parametrize(
    ("name", "pods", "first"),
    [
        (
            "lowest priority first",
            [workload_pod("big", "n0", cpu="1"), workload_pod("low", "n0", cpu="300m", priority=-5)],
            "default/low",
        ),
        (
            "BestEffort before Burstable",
            [workload_pod("big", "n0", cpu="1"), workload_pod("be", "n0", cpu=None, memory=None)],
            "default/be",
        ),
        (
            "Burstable before Guaranteed",
            [
                workload_pod(
                    "guaranteed",
                    "n0",
                    cpu="1",
                    memory="1Gi",
                    containers=[
                        {
                            "name": "c",
                            "image": "pause",
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi"},
                                "limits": {"cpu": "1", "memory": "1Gi"},
                            },
                        }
                    ],
                ),
                workload_pod("burstable", "n0", cpu="300m"),
            ],
            "default/burstable",
        ),
        (
            "Guaranteed whatever the units its requests and limits are written in",
            [
                workload_pod(
                    "guaranteed",
                    "n0",
                    cpu="1",
                    containers=[
                        {
                            "name": "c",
                            "image": "pause",
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1024Mi"},
                                "limits": {"cpu": "1000m", "memory": "1Gi"},
                            },
                        }
                    ],
                ),
                workload_pod("burstable", "n0", cpu="300m"),
            ],
            "default/burstable",
        ),
        (
            "then the largest usage",
            [workload_pod("small", "n0", cpu="300m"), workload_pod("big", "n0", cpu="500m")],
            "default/big",
        ),
    ],
)
def test_candidate_order(name: str, pods: list[Obj], first: str) -> None:
    p = run_plan([0.9, 0.3, 0.3, 0.3], pods, budget=Budget(evictions=1))
    assert [m.pod for m in p.moves] == [first], name
