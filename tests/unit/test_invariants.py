"""ksched.bench.invariants: what must hold in a cluster, on small node and pod lists."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from ksched.bench import invariants
from ksched.objects import Obj

ZONE = "topology.kubernetes.io/zone"


def node(name: str, labels: dict[str, str] | None = None, **allocatable: str) -> Obj:
    alloc = {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "10Gi", "pods": "110", **allocatable}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {"allocatable": alloc},
    }


def pod(
    name: str,
    on: str | None = None,
    requests: dict[str, str] | None = None,
    phase: str = "Running",
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels or {}},
        "spec": {
            **({"nodeName": on} if on else {}),
            "containers": [{"name": "app", "resources": {"requests": requests or {}}}],
            **spec,
        },
        "status": {"phase": phase},
    }


@dataclass
class OvercommitCase:
    name: str
    nodes: list[Obj]
    pods: list[Obj]
    want: list[str] = field(default_factory=list)


OVERCOMMIT_CASES = [
    OvercommitCase(
        "fits exactly", [node("n1")], [pod("a", "n1", {"cpu": "3"}), pod("b", "n1", {"cpu": "1000m"})]
    ),
    OvercommitCase(
        "cpu", [node("n1")], [pod("a", "n1", {"cpu": "3"}), pod("b", "n1", {"cpu": "1001m"})], ["n1: cpu"]
    ),
    OvercommitCase(
        "memory",
        [node("n1")],
        [pod("a", "n1", {"memory": "8Gi"}), pod("b", "n1", {"memory": "1"})],
        ["n1: memory"],
    ),
    OvercommitCase(
        "ephemeral-storage",
        [node("n1")],
        [pod("a", "n1", {"ephemeral-storage": "6Gi"}), pod("b", "n1", {"ephemeral-storage": "5Gi"})],
        ["n1: ephemeral-storage"],
    ),
    OvercommitCase("pod count", [node("n1", pods="1")], [pod("a", "n1"), pod("b", "n1")], ["n1: pods"]),
    OvercommitCase(
        "extended resource",
        [node("n1", **{"nvidia.com/gpu": "1"})],
        [pod("a", "n1", {"nvidia.com/gpu": "1"}), pod("b", "n1", {"nvidia.com/gpu": "1"})],
        ["n1: nvidia.com/gpu"],
    ),
    OvercommitCase(
        "a resource the node does not offer",
        [node("n1")],
        [pod("a", "n1", {"example.com/fpga": "1"})],
        ["n1: example.com/fpga"],
    ),
    OvercommitCase(
        "an init container larger than the app containers counts, as in the engine",
        [node("n1")],
        [
            pod(
                "a",
                "n1",
                {"cpu": "1"},
                initContainers=[{"name": "init", "resources": {"requests": {"cpu": "5"}}}],
            )
        ],
        ["n1: cpu"],
    ),
    OvercommitCase(
        "overhead counts", [node("n1")], [pod("a", "n1", {"cpu": "4"}, overhead={"cpu": "100m"})], ["n1: cpu"]
    ),
    OvercommitCase(
        "several resources on one node",
        [node("n1", pods="1")],
        [pod("a", "n1", {"cpu": "5"}), pod("b", "n1", {"memory": "9Gi"})],
        ["n1: cpu, memory, pods"],
    ),
    OvercommitCase(
        "ended pods hold nothing",
        [node("n1")],
        [
            pod("a", "n1", {"cpu": "4"}),
            pod("b", "n1", {"cpu": "4"}, phase="Succeeded"),
            pod("c", "n1", {"cpu": "4"}, phase="Failed"),
        ],
    ),
    OvercommitCase(
        "pending pods hold nothing",
        [node("n1")],
        [pod("a", "n1", {"cpu": "4"}), pod("b", None, {"cpu": "4"})],
    ),
    OvercommitCase("a node that is gone is left out", [node("n1")], [pod("a", "gone", {"cpu": "40"})]),
    OvercommitCase(
        "only the over-committed node",
        [node("n1"), node("n2")],
        [pod("a", "n1", {"cpu": "5"}), pod("b", "n2", {"cpu": "4"})],
        ["n1: cpu"],
    ),
]


@pytest.mark.parametrize("case", OVERCOMMIT_CASES, ids=lambda c: c.name)
def test_overcommitted(case: OvercommitCase) -> None:
    got = [str(o) for o in invariants.overcommitted(case.nodes, case.pods)]
    assert got == case.want, f"want {case.want}, got {got}"


def test_unknown_nodes_names_the_nodes_pods_are_bound_to_but_the_listing_lacks() -> None:
    pods = [pod("a", "n1"), pod("b", "gone"), pod("c", "gone2", phase="Succeeded"), pod("d")]
    assert invariants.unknown_nodes([node("n1")], pods) == ["gone"]


def spread(max_skew: int = 1, when: str = "DoNotSchedule") -> list[Obj]:
    return [
        {
            "maxSkew": max_skew,
            "topologyKey": ZONE,
            "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": {"app": "s"}},
        }
    ]


def anti(group: str) -> Obj:
    term = {"labelSelector": {"matchLabels": {"group": group}}, "topologyKey": "kubernetes.io/hostname"}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def zone_affinity(*zones: str) -> Obj:
    expr = {"key": ZONE, "operator": "In", "values": list(zones)}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expr]}]
            }
        }
    }


ZONED = [node("a1", {ZONE: "a", "disk": "ssd"}), node("a2", {ZONE: "a"}), node("b1", {ZONE: "b"})]


@dataclass
class ConstraintCase:
    name: str
    pods: list[Obj]
    want: list[str] = field(default_factory=list)


CONSTRAINT_CASES = [
    ConstraintCase("nodeSelector met", [pod("p", "a1", nodeSelector={"disk": "ssd"})]),
    ConstraintCase(
        "nodeSelector broken",
        [pod("p", "a2", nodeSelector={"disk": "ssd"})],
        ["nodeSelector: default/p (+1)"],
    ),
    ConstraintCase("required node affinity met", [pod("p", "b1", affinity=zone_affinity("b"))]),
    ConstraintCase(
        "required node affinity broken",
        [pod("p", "a1", affinity=zone_affinity("b"))],
        ["node affinity: default/p (+1)"],
    ),
    ConstraintCase(
        "anti-affinity apart",
        [
            pod("p", "a1", labels={"group": "g"}, affinity=anti("g")),
            pod("q", "a2", labels={"group": "g"}, affinity=anti("g")),
        ],
    ),
    ConstraintCase(
        "anti-affinity together: each pod of the pair breaks it",
        [
            pod("p", "a1", labels={"group": "g"}, affinity=anti("g")),
            pod("q", "a1", labels={"group": "g"}, affinity=anti("g")),
        ],
        ["pod anti-affinity: default/p (+1)", "pod anti-affinity: default/q (+1)"],
    ),
    ConstraintCase(
        "anti-affinity of another group",
        [pod("p", "a1", labels={"group": "g"}, affinity=anti("g")), pod("q", "a1", labels={"group": "h"})],
    ),
    ConstraintCase(
        "spread within maxSkew",
        [
            pod("p", "a1", labels={"app": "s"}, topologySpreadConstraints=spread()),
            pod("q", "b1", labels={"app": "s"}, topologySpreadConstraints=spread()),
        ],
    ),
    ConstraintCase(
        "spread skew 3 over maxSkew 1",
        [pod(f"p{i}", "a1", labels={"app": "s"}, topologySpreadConstraints=spread()) for i in range(3)],
        ["topology spread: default over topology.kubernetes.io/zone (+2)"],
    ),
    ConstraintCase(
        "ScheduleAnyway is a preference",
        [
            pod(f"p{i}", "a1", labels={"app": "s"}, topologySpreadConstraints=spread(when="ScheduleAnyway"))
            for i in range(3)
        ],
    ),
]


@pytest.mark.parametrize("case", CONSTRAINT_CASES, ids=lambda c: c.name)
def test_constraint_violations(case: ConstraintCase) -> None:
    got = [str(v) for v in invariants.constraint_violations(ZONED, case.pods)]
    assert got == case.want, f"want {case.want}, got {got}"


def test_unaccounted_pods_are_pending_unreported_and_not_being_deleted() -> None:
    deleting = pod("deleting")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pods = [pod("bound", "n1"), pod("reported"), deleting, pod("lost")]
    got = [p["metadata"]["name"] for p in invariants.unaccounted(pods, {"uid-reported"})]
    assert got == ["lost"]


def test_vanished_pods_are_gone_without_a_known_delete() -> None:
    created = [("default", "here"), ("default", "deleted"), ("default", "gone")]
    got = invariants.vanished(created, [pod("here")], {("default", "deleted")})
    assert got == [("default", "gone")]


def test_pending_that_fit_names_the_pods_left_with_room_for_them() -> None:
    nodes = [node("a", cpu="2"), node("b", cpu="2"), {**node("c", cpu="8"), "spec": {"unschedulable": True}}]
    pods = [
        pod("full-a", on="a", requests={"cpu": "2"}),
        pod("half-b", on="b", requests={"cpu": "1"}),
        pod("fits", requests={"cpu": "500m"}),  # b has 1 cpu left
        pod("too-big", requests={"cpu": "1500m"}),  # only the cordoned c has room
        pod("leaving", requests={"cpu": "100m"})
        | {"metadata": {"name": "leaving", "namespace": "default", "deletionTimestamp": "x"}},
    ]
    assert invariants.pending_that_fit(nodes, pods) == ["default/fits"]
    # A node's pod count caps it too.
    assert invariants.pending_that_fit([node("p", pods="1")], [pod("one", on="p"), pod("two")]) == []


def test_unowned_names_the_pods_no_controller_owns() -> None:
    adopted = pod("adopted", "n1")
    adopted["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "web", "controller": True}]
    # An owner that is not the controller (a garbage-collection dependency) adopts nothing.
    referenced = pod("referenced", "n1")
    referenced["metadata"]["ownerReferences"] = [{"kind": "ConfigMap", "name": "c"}]
    assert invariants.unowned([adopted, referenced, pod("orphan")]) == ["orphan", "referenced"]
