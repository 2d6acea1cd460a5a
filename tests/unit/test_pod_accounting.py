"""What a pod holds on its node and what a selector matches, as upstream v1.36
counts them: sidecar host ports, in-place resizes, pod-level hugepages,
invalid label values in node affinity, and allocatable (never capacity)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from ksched.config import Config
from ksched.engine import Engine, Placement
from ksched.engine.pods import host_ports, pod_requests
from ksched.engine.requirements import counted_requests
from ksched.engine.snapshot import build_snapshot
from ksched.loop.mirror.slim import slim_node, slim_pod
from tests.conftest import failed_scheduling, no_victims, node, not_helpful, pod

NO_PORTS = failed_scheduling(
    "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports.", no_victims(1)
)
# Asking more than a node's whole allocatable: no eviction helps (upstream Unresolvable).
NO_ALLOCATABLE = failed_scheduling(
    "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 1 Too many pods.", not_helpful(1)
)
NO_AFFINITY = failed_scheduling(
    "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.", not_helpful(1)
)
INSUFFICIENT_CPU = failed_scheduling("0/1 nodes are available: 1 Insufficient cpu.", no_victims(1))


def schedule(
    nodes: list[dict[str, Any]], pending: list[dict[str, Any]], existing: Sequence[dict[str, Any]] = ()
) -> list[Placement]:
    return Engine(Config()).schedule(build_snapshot(nodes, list(existing)), pending).placements


def with_sidecar_port(p: dict[str, Any], host_port: int) -> dict[str, Any]:
    p["spec"]["initContainers"] = [
        {
            "name": "proxy",
            "image": "proxy",
            "restartPolicy": "Always",
            "ports": [{"containerPort": 1, "hostPort": host_port}],
        },
        {"name": "setup", "image": "setup", "ports": [{"containerPort": 2, "hostPort": host_port + 1}]},
    ]
    return p


def with_container_port(p: dict[str, Any], host_port: int) -> dict[str, Any]:
    p["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": host_port}]
    return p


def test_sidecar_host_ports_count_and_plain_init_container_ports_do_not() -> None:
    assert [hp.port for hp in host_ports(with_sidecar_port(pod("p"), 8080))] == [8080]
    cases = [
        (
            "bound sidecar holds its port",
            with_sidecar_port(pod("old", node_name="a"), 8080),
            with_container_port(pod("p"), 8080),
            NO_PORTS,
        ),
        (
            "pending sidecar needs its port",
            with_container_port(pod("old", node_name="a"), 8080),
            with_sidecar_port(pod("p"), 8080),
            NO_PORTS,
        ),
        (
            "a plain init container's port is free again",
            with_sidecar_port(pod("old", node_name="a"), 8080),
            with_container_port(pod("p"), 8081),
            None,
        ),
    ]
    for name, existing, pending, want in cases:
        [got] = schedule([node("a")], [pending], [slim_pod(existing)])
        assert got.message == want, name
        assert (got.node == "a") == (want is None), name


def resized(
    spec_cpu: str,
    actuated: str | None,
    allocated: str | None,
    infeasible: bool = False,
    sidecar: bool = False,
) -> dict[str, Any]:
    """A running pod whose one container (or sidecar) asks for ``spec_cpu`` while the kubelet reports the rest."""
    p = pod("r", cpu=None, memory=None, node_name="a")
    container = {"name": "app", "image": "app", "resources": {"requests": {"cpu": spec_cpu}}}
    if sidecar:
        p["spec"]["initContainers"] = [{**container, "restartPolicy": "Always"}]
        p["spec"]["containers"][0]["resources"] = {}
    else:
        p["spec"]["containers"] = [container]
    status: dict[str, Any] = {"name": "app"}
    if actuated is not None:
        status["resources"] = {"requests": {"cpu": actuated}}
    if allocated is not None:
        status["allocatedResources"] = {"cpu": allocated}
    p["status"] = {
        "phase": "Running",
        "initContainerStatuses" if sidecar else "containerStatuses": [status],
        "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]
        if infeasible
        else [],
    }
    return p


@pytest.mark.parametrize(
    ("name", "running", "want_millicpu"),
    [
        ("no resize: the spec", resized("1", "1", "1"), 1000),
        ("resize up not yet actuated: the spec", resized("3", "1", "1"), 3000),
        ("resize down not yet actuated: the actuated", resized("1", "3", "3"), 3000),
        ("allocated but not actuated: the allocated", resized("1", "1", "2"), 2000),
        ("infeasible resize up: the spec does not count", resized("3", "1", "1", infeasible=True), 1000),
        ("status without resources: the spec alone", resized("2", None, "3"), 2000),
        ("sidecar resize counts too", resized("1", "2", "2", sidecar=True), 2000),
    ],
)
def test_in_place_resize_counts_the_largest_of_spec_actuated_allocated(
    name: str, running: dict[str, Any], want_millicpu: int
) -> None:
    got = pod_requests(slim_pod(running)).requests.get("cpu", 0)
    assert got == want_millicpu, f"{name}: want {want_millicpu}m, got {got}m"


def test_a_pending_resize_holds_the_node() -> None:
    # 4 cpu node; the running pod asks 1 but still holds 3 actuated: a 2 cpu pod does not fit.
    [got] = schedule([node("a", cpu="4")], [pod("p", cpu="2")], [slim_pod(resized("1", "3", "3"))])
    assert got.message == INSUFFICIENT_CPU
    [got] = schedule([node("a", cpu="4")], [pod("p", cpu="2")], [slim_pod(resized("1", "1", "1"))])
    assert got.node == "a"


def test_pod_level_resize_counts_status_resources() -> None:
    p = pod("r", node_name="a")
    p["spec"]["resources"] = {"requests": {"cpu": "1"}}
    p["status"] = {
        "phase": "Running",
        "resources": {"requests": {"cpu": "3"}},
        "allocatedResources": {"cpu": "3"},
    }
    assert pod_requests(slim_pod(p)).requests["cpu"] == 3000


def test_pod_level_hugepages_are_requested() -> None:
    p = pod("p")
    p["spec"]["resources"] = {"requests": {"cpu": "100m", "hugepages-2Mi": "1Gi", "example.com/gpu": "1"}}
    requests = pod_requests(p).requests
    assert requests.get("hugepages-2Mi") == 1 << 30
    assert "example.com/gpu" not in requests, "only cpu, memory and hugepages-* are pod-level resources"
    cases = [
        (
            "too few hugepages",
            "512Mi",
            failed_scheduling("0/1 nodes are available: 1 Insufficient hugepages-2Mi.", not_helpful(1)),
        ),
        ("enough", "2Gi", None),
    ]
    for name, have, want in cases:
        [got] = schedule([node("a", extra={"hugepages-2Mi": have})], [p])
        assert got.message == want, name


def affinity(*terms: list[dict[str, Any]], preferred: bool = False) -> dict[str, Any]:
    if preferred:
        return {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": t}} for t in terms
                ]
            }
        }
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]
            }
        }
    }


INVALID_NOT_IN = [{"key": "zone", "operator": "NotIn", "values": ["not a label value"]}]
INVALID_IN = [{"key": "zone", "operator": "In", "values": ["z1", "-z2"]}]
ZONE_Z1 = [{"key": "zone", "operator": "In", "values": ["z1"]}]


@pytest.mark.parametrize(
    ("name", "terms", "want_nodes"),
    [
        # Upstream's LazyErrorNodeSelector: a term that does not parse matches no node; the others still do.
        ("NotIn with an invalid value matches nothing", [INVALID_NOT_IN], set()),
        ("In with an invalid value matches nothing", [INVALID_IN], set()),
        ("the other terms still match", [INVALID_NOT_IN, ZONE_Z1], {"z1"}),
    ],
)
def test_required_term_with_invalid_label_value(name: str, terms: list[Any], want_nodes: set[str]) -> None:
    nodes = [node("z1", labels={"zone": "z1"}), node("z2", labels={"zone": "z2"}), node("none")]
    pending = [pod(f"p{i}", affinity=affinity(*terms)) for i in range(3)]
    got = {p.node for p in schedule(nodes, pending)} - {None}
    assert got == want_nodes, name


def test_required_term_with_invalid_value_reports_node_affinity() -> None:
    [got] = schedule([node("a", labels={"zone": "z1"})], [pod("p", affinity=affinity(INVALID_NOT_IN))])
    assert got.message == NO_AFFINITY


def test_preferred_term_with_invalid_label_value_fails_the_pod() -> None:
    [got] = schedule([node("a")], [pod("p", affinity=affinity(INVALID_NOT_IN, preferred=True))])
    assert got.node is None
    assert "not a valid label value" in (got.message or "")


def test_nodes_offer_allocatable_never_capacity() -> None:
    n = node("a")
    n["status"] = {"capacity": n["status"]["allocatable"]}
    for name, table in (("the node object", n), ("what the informer keeps", slim_node(n))):
        [got] = schedule([table], [pod("p")])
        assert got.node is None, name
        assert got.message == NO_ALLOCATABLE, name


def test_pods_sharing_a_spec_each_count_their_own_resize_and_name_their_own_errors() -> None:
    # Parses are shared by pods of one spec: a pod whose status holds a resize still counts it.
    plain, held = slim_pod(resized("1", "1", "1")), slim_pod(resized("1", "3", "3"))
    assert counted_requests(plain)[0].requests["cpu"] == 1000
    assert counted_requests(held)[0].requests["cpu"] == 3000
    # A 4 cpu node holding the resized pod (3 cpu) after its plain twin was counted: 2 cpu do not fit.
    schedule([node("a", cpu="4")], [], [plain])
    [got] = schedule([node("a", cpu="4")], [pod("p", cpu="2")], [held])
    assert got.message == INSUFFICIENT_CPU
    # A malformed spec is reported for every pod that has it, each by its own name.
    bad = [pod(f"bad-{i}", cpu="lots") for i in range(2)]
    got_bad = schedule([node("a")], bad)
    assert [p.message.split(":")[0] for p in got_bad] == ["invalid pod", "invalid pod"]
    assert [p.pod for p in got_bad] == ["default/bad-0", "default/bad-1"]
