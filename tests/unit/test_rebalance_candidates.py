"""The rebalance planner's candidates (``ksched.engine.rebalance.plan``): the pods it never
moves, and the order it takes the others in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ksched.config.rebalance import parse_rebalance
from ksched.engine.rebalance import (
    COOLING,
    DAEMONSET,
    JOB_POD,
    LOCAL_STORAGE,
    MIRROR,
    NO_CONTROLLER,
    SYSTEM_CRITICAL,
    TERMINATING,
    Budget,
)
from ksched.errors import ConfigError
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


def guaranteed(requests: dict[str, str], limits: dict[str, str]) -> Obj:
    """A pod on n0 whose one container has these requests and limits."""
    container = {"name": "c", "image": "pause", "resources": {"requests": requests, "limits": limits}}
    return workload_pod("guaranteed", "n0", cpu="1", containers=[container])


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
    (
        "hostPath",
        lambda: workload_pod("p", "n0", volumes=[{"name": "logs", "hostPath": {"path": "/var/log"}}]),
        LOCAL_STORAGE,
    ),
    ("a Job's pod", lambda: workload_pod("p", "n0", kind="Job"), JOB_POD),
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


OPTED_IN: list[tuple[str, Callable[[], Obj], dict[str, bool]]] = [
    (
        "emptyDir with allowLocalStorage",
        lambda: workload_pod("p", "n0", volumes=[{"name": "scratch", "emptyDir": {}}]),
        {"allow_local_storage": True},
    ),
    (
        "hostPath with allowLocalStorage",
        lambda: workload_pod("p", "n0", volumes=[{"name": "logs", "hostPath": {"path": "/var/log"}}]),
        {"allow_local_storage": True},
    ),
    ("a Job's pod with moveJobPods", lambda: workload_pod("p", "n0", kind="Job"), {"move_job_pods": True}),
    (
        "a Job's pod with emptyDir and both",
        lambda: workload_pod("p", "n0", kind="Job", volumes=[{"name": "scratch", "emptyDir": {}}]),
        {"move_job_pods": True, "allow_local_storage": True},
    ),
]


@pytest.mark.parametrize(("name", "make", "opt_in"), OPTED_IN, ids=[o[0] for o in OPTED_IN])
def test_pods_that_move_only_when_opted_in(
    name: str, make: Callable[[], Obj], opt_in: dict[str, bool]
) -> None:
    plan_ = run_plan([0.9, 0.5, 0.3, 0.55], [make()], config=rebalance(**opt_in))
    assert (moved(plan_), reasons(plan_)) == ([("default/p", "n0", "n2")], {}), name


def test_one_opt_in_does_not_lift_the_other() -> None:
    job_with_scratch = workload_pod("p", "n0", kind="Job", volumes=[{"name": "scratch", "emptyDir": {}}])
    for opt_in, reason in (
        ({"move_job_pods": True}, LOCAL_STORAGE),
        ({"allow_local_storage": True}, JOB_POD),
    ):
        plan_ = run_plan([0.9, 0.5, 0.3, 0.55], [job_with_scratch], config=rebalance(**opt_in))
        assert (plan_.moves, reasons(plan_)) == ((), {"default/p": reason}), opt_in


@pytest.mark.parametrize(
    ("given", "want"),
    [({}, False), ({"moveJobPods": False}, False), ({"moveJobPods": True}, True)],
    ids=["default off", "false", "true"],
)
def test_move_job_pods_is_read_from_the_configuration(given: dict[str, bool], want: bool) -> None:
    assert parse_rebalance(given, ["ksched"], ()).move_job_pods is want


@pytest.mark.parametrize("value", ["true", 1, None, "yes"])
def test_move_job_pods_must_be_a_boolean(value: object) -> None:
    with pytest.raises(ConfigError, match=r"rebalance\.moveJobPods: .* is not a boolean"):
        parse_rebalance({"moveJobPods": value}, ["ksched"], ())


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
                guaranteed({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"}),
                workload_pod("burstable", "n0", cpu="300m"),
            ],
            "default/burstable",
        ),
        (
            "Guaranteed whatever the units its requests and limits are written in",
            [
                guaranteed({"cpu": "1", "memory": "1024Mi"}, {"cpu": "1000m", "memory": "1Gi"}),
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
