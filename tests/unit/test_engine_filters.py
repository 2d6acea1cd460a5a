"""Table-driven: each filter's verdict and upstream's FailedScheduling text."""

from __future__ import annotations

from typing import Any

import pytest

from ksched.config import Config
from ksched.engine import Engine
from ksched.engine.snapshot import build_snapshot
from tests.conftest import failed_scheduling, no_victims, node, not_helpful, pod


def schedule(
    nodes: list[dict[str, Any]], pending: list[dict[str, Any]], existing: list[dict[str, Any]] | None = None
) -> list[Any]:
    return Engine(Config()).schedule(build_snapshot(nodes, existing or []), pending).placements


GPU_TAINT = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
CASES: list[tuple[str, list[dict[str, Any]], dict[str, Any], str | None, str | None]] = [
    ("fits", [node("a")], pod("p"), "a", None),
    (
        "cordoned node",
        [node("a", unschedulable=True)],
        pod("p"),
        None,
        failed_scheduling("0/1 nodes are available: 1 node(s) were unschedulable.", not_helpful(1)),
    ),
    (
        "cordoned but tolerated",
        [node("a", unschedulable=True)],
        pod(
            "p",
            tolerations=[
                {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
            ],
        ),
        "a",
        None,
    ),
    (
        "untolerated taint",
        [node("a", taints=[GPU_TAINT])],
        pod("p"),
        None,
        failed_scheduling("0/1 nodes are available: 1 node(s) had untolerated taint(s).", not_helpful(1)),
    ),
    (
        "tolerated Equal",
        [node("a", taints=[GPU_TAINT])],
        pod("p", tolerations=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}]),
        "a",
        None,
    ),
    (
        "empty key Exists tolerates all",
        [node("a", taints=[GPU_TAINT])],
        pod("p", tolerations=[{"operator": "Exists"}]),
        "a",
        None,
    ),
    (
        "NoExecute untolerated",
        [node("a", taints=[{"key": "x", "effect": "NoExecute"}])],
        pod("p"),
        None,
        failed_scheduling("0/1 nodes are available: 1 node(s) had untolerated taint(s).", not_helpful(1)),
    ),
    (
        "nodeSelector mismatch",
        [node("a", labels={"zone": "z1"})],
        pod("p", nodeSelector={"zone": "z2"}),
        None,
        failed_scheduling(
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.", not_helpful(1)
        ),
    ),
    (
        "affinity Gt",
        [node("a", labels={"cores": "8"}), node("b", labels={"cores": "32"})],
        pod(
            "p",
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["16"]}]}
                        ]
                    }
                }
            },
        ),
        "b",
        None,
    ),
    (
        "matchFields metadata.name",
        [node("a"), node("b"), node("c")],
        pod(
            "p",
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["zz"]}]}
                        ]
                    }
                }
            },
        ),
        None,
        failed_scheduling(
            "0/3 nodes are available: 3 node(s) didn't satisfy plugin(s) [NodeAffinity].", not_helpful(3)
        ),
    ),
    (
        "insufficient cpu and memory",
        [node("a", cpu="1", memory="1Gi")],
        pod("p", cpu="2", memory="2Gi"),
        None,
        failed_scheduling(
            "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory.", not_helpful(1)
        ),
    ),
    (
        "extended resource",
        [node("a"), node("g", extra={"nvidia.com/gpu": "2"})],
        {
            **pod("p"),
            "spec": {
                **pod("p")["spec"],
                "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
            },
        },
        "g",
        None,
    ),
    (
        "mixed reasons sorted as strings",
        [node("a", cpu="100m"), node("b", cpu="100m"), node("c", taints=[GPU_TAINT])]
        + [node(f"n{i}", cpu="100m") for i in range(8)],
        pod("p", cpu="1"),
        None,
        failed_scheduling(
            "0/11 nodes are available: 1 node(s) had untolerated taint(s), 10 Insufficient cpu.",
            not_helpful(11),
        ),
    ),
]


@pytest.mark.parametrize(
    ("name", "nodes", "pending", "want_node", "want_message"), CASES, ids=[c[0] for c in CASES]
)
def test_filter_cases(
    name: str,
    nodes: list[dict[str, Any]],
    pending: dict[str, Any],
    want_node: str | None,
    want_message: str | None,
) -> None:
    [got] = schedule(nodes, [pending])
    assert got.node == want_node, f"{name}: want node {want_node}, got {got.node} ({got.message})"
    if want_message is not None:
        assert got.message == want_message


def test_too_many_pods_counts_existing_pods() -> None:
    [got] = schedule([node("a", pods="1")], [pod("p")], [pod("old", node_name="a")])
    assert got.node is None
    assert got.message == failed_scheduling("0/1 nodes are available: 1 Too many pods.", no_victims(1))


def test_host_port_conflict_with_existing_and_in_batch() -> None:
    port = {"containerPort": 80, "hostPort": 8080}
    web = pod("web")
    web["spec"]["containers"][0]["ports"] = [port]
    web2 = pod("web2")
    web2["spec"]["containers"][0]["ports"] = [port]
    placements = schedule([node("a"), node("b")], [web, web2])
    assert {p.node for p in placements} == {"a", "b"}, "two pods with the same host port never share a node"


def test_init_containers_count_as_max_and_sidecars_add() -> None:
    p = pod("p", cpu="500m")
    p["spec"]["initContainers"] = [
        {"name": "init", "resources": {"requests": {"cpu": "1500m"}}},
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "600m"}}},
    ]
    # effective cpu = max(500m + 600m, 1500m) = 1500m: fits 1500m but not 1400m.
    assert schedule([node("a", cpu="1500m")], [p])[0].node == "a"
    assert schedule([node("a", cpu="1400m")], [p])[0].node is None


def test_overhead_counts() -> None:
    p = pod("p", cpu="900m")
    p["spec"]["overhead"] = {"cpu": "200m"}
    assert schedule([node("a", cpu="1")], [p])[0].message == failed_scheduling(
        "0/1 nodes are available: 1 Insufficient cpu.", not_helpful(1)
    )


def test_batch_never_overcommits() -> None:
    pending = [pod(f"p{i}", cpu="1") for i in range(10)]
    placements = schedule([node("a", cpu="4"), node("b", cpu="4")], pending)
    placed = [p.node for p in placements if p.node]
    assert len(placed) == 8
    assert placed.count("a") == 4 and placed.count("b") == 4


def test_priority_orders_the_batch() -> None:
    low = pod("low", cpu="3")
    high = pod("high", cpu="3", priority=1000)
    placements = schedule([node("a", cpu="4")], [low, high])
    assert [(p.pod, p.node) for p in placements] == [("default/high", "a"), ("default/low", None)]


def test_least_allocated_prefers_emptier_node() -> None:
    existing = [pod("busy", cpu="3", node_name="a")]
    [got] = schedule([node("a"), node("b")], [pod("p")], existing)
    assert got.node == "b"


def test_preferred_affinity_and_prefer_no_schedule() -> None:
    pref = pod(
        "p",
        affinity={
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "preference": {
                            "matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]
                        },
                    }
                ]
            }
        },
    )
    assert schedule([node("a"), node("b", labels={"disk": "ssd"})], [pref])[0].node == "b"
    soft = {"key": "spot", "effect": "PreferNoSchedule"}
    assert schedule([node("a", taints=[soft]), node("b")], [pod("q")])[0].node == "b"


@pytest.mark.parametrize(
    ("field", "mutate", "fragment"),
    [
        (
            "quantity",
            lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(cpu="lots"),
            "spec.containers[0].resources.requests.cpu",
        ),
        (
            "operator",
            lambda p: p["spec"].update(
                affinity={
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "a", "operator": "Near", "values": ["b"]}]}
                            ]
                        }
                    }
                }
            ),
            "unknown operator 'Near'",
        ),
        (
            "toleration",
            lambda p: p["spec"].update(tolerations=[{"key": "a", "operator": "Maybe"}]),
            "spec.tolerations[0].operator",
        ),
        ("missing containers", lambda p: p["spec"].update(containers="nope"), "spec.containers"),
    ],
)
def test_malformed_pod_gets_message_and_others_still_placed(field: str, mutate: Any, fragment: str) -> None:
    bad = pod("bad")
    mutate(bad)
    placements = {p.pod: p for p in schedule([node("a")], [bad, pod("good")])}
    assert placements["default/good"].node == "a"
    assert placements["default/bad"].node is None
    assert placements["default/bad"].message is not None and fragment in placements["default/bad"].message


def test_seed_makes_ties_reproducible() -> None:
    nodes = [node(f"n{i}") for i in range(8)]
    runs = {
        tuple(
            p.node
            for p in Engine(Config(), seed=s).schedule(build_snapshot(nodes, []), [pod("p")]).placements
        )
        for s in range(20)
    }
    again = Engine(Config(), seed=3).schedule(build_snapshot(nodes, []), [pod("p")]).placements[0].node
    assert (
        again == Engine(Config(), seed=3).schedule(build_snapshot(nodes, []), [pod("p")]).placements[0].node
    )
    assert len(runs) > 1, "different seeds break ties differently"
