"""The FailedScheduling message of a pod that fits nowhere, PostFilter included, as upstream.

Upstream v1.36's default profile runs two PostFilter plugins: DynamicResources
("no new claims to deallocate" for a pod without claims) and then
DefaultPreemption, whose own message is a FitError over the nodes
(``Evaluator.Preempt``). ``RunPostFilterPlugins`` joins their reasons with
", "; a preemption that nominates a node is a Success and leaves no message.
The cases follow upstream's ``TestPostFilter`` (plugins/defaultpreemption/
default_preemption_test.go), ``TestPodEligibleToPreemptOthers`` and the DRA
integration test's message (test/integration/dra/extendedresource.go).
"""

from __future__ import annotations

from typing import Any

import pytest

from ksched.config import Config, ProfileConfig
from ksched.engine import Engine
from ksched.engine.snapshot import build_snapshot
from tests.conftest import node, pod

Obj = dict[str, Any]
HIGH, MID, LOW = 1000, 100, 0
TAINT = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
NO_CLAIMS = "no new claims to deallocate"


def _p(name: str, priority: int, cpu: str = "100m", node_name: str | None = None, **spec: Any) -> Obj:
    p = pod(name, cpu=cpu, memory=None, node_name=node_name, **spec)
    p["spec"]["priority"] = priority
    return p


CASES = [
    pytest.param(
        [node("node1", pods="1")],
        [_p("p1", LOW, node_name="node1")],
        _p("p", HIGH),
        "0/1 nodes are available: 1 Too many pods.",
        "node1",
        id="pod with higher priority can be made schedulable",
    ),
    pytest.param(
        [node("node1", pods="1")],
        [_p("p1", LOW, node_name="node1")],
        _p("p", LOW),
        "0/1 nodes are available: 1 Too many pods. "
        f"{NO_CLAIMS}, preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.",
        None,
        id="pod with tied priority is still unschedulable",
    ),
    pytest.param(
        [node("node1", pods="1", taints=TAINT)],
        [_p("p1", LOW, node_name="node1")],
        _p("p", HIGH),
        "0/1 nodes are available: 1 node(s) had untolerated taint(s). "
        f"{NO_CLAIMS}, preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
        None,
        id="preemption should respect filteredNodesStatuses",
    ),
    pytest.param(
        [node("node1", pods="1"), node("node2", pods="1")],
        [_p("p1", HIGH, node_name="node1"), _p("p2", LOW, node_name="node2")],
        _p("p", MID),
        "0/2 nodes are available: 2 Too many pods.",
        "node2",
        id="pod can be made schedulable on one node",
    ),
    pytest.param(
        [node("node1"), node("node2")],
        [
            _p("p1", LOW, cpu="1", node_name="node1"),
            _p("h1", HIGH, cpu="2", node_name="node1"),
            _p("p2", LOW, cpu="1", node_name="node2"),
            _p("h2", HIGH, cpu="2", node_name="node2"),
        ],
        _p("p", HIGH, cpu="3"),
        f"0/2 nodes are available: 2 Insufficient cpu. {NO_CLAIMS}, "
        "preemption: 0/2 nodes are available: 2 Insufficient cpu.",
        None,
        id="no candidate nodes found, no enough resource after removing low priority pods",
    ),
    pytest.param(
        [node("node1", pods="1"), node("node2"), node("node3", pods="1")],
        [
            _p("p1", HIGH, node_name="node1"),
            _p("p2", LOW, cpu="1", node_name="node2"),
            _p("h2", HIGH, cpu="2", node_name="node2"),
            _p("p3", HIGH, node_name="node3"),
        ],
        _p("p", HIGH, cpu="3"),
        f"0/3 nodes are available: 1 Insufficient cpu, 2 Too many pods. {NO_CLAIMS}, "
        "preemption: 0/3 nodes are available: 1 Insufficient cpu, 2 No preemption victims found for incoming pod.",
        None,
        id="no candidate nodes found with mixed reasons, no lower priority pod and no enough CPU resource",
    ),
    pytest.param(
        [node("node1"), node("node2"), node("node3", taints=TAINT), node("node4", taints=TAINT)],
        [
            _p("p1", LOW, cpu="1", node_name="node1"),
            _p("h1", HIGH, cpu="2", node_name="node1"),
            _p("p2", LOW, cpu="1", node_name="node2"),
            _p("h2", HIGH, cpu="2", node_name="node2"),
        ],
        _p("p", HIGH, cpu="3"),
        "0/4 nodes are available: 2 Insufficient cpu, 2 node(s) had untolerated taint(s). "
        f"{NO_CLAIMS}, preemption: 0/4 nodes are available: 2 Insufficient cpu, "
        "2 Preemption is not helpful for scheduling.",
        None,
        id="no candidate nodes found with mixed reason, 2 UnschedulableAndUnresolvable nodes "
        "and 2 nodes don't have enough CPU resource",
    ),
    pytest.param(
        [node("node1", cpu="2")],
        [_p("p1", LOW, cpu="1", node_name="node1")],
        _p("p", HIGH, cpu="3"),
        f"0/1 nodes are available: 1 Insufficient cpu. {NO_CLAIMS}, "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
        None,
        id="request above the node's allocatable: Insufficient cpu is UnschedulableAndUnresolvable",
    ),
    pytest.param(
        [node("node1", pods="1")],
        [_p("p1", LOW, node_name="node1")],
        _p("p", HIGH, preemptionPolicy="Never"),
        f"0/1 nodes are available: 1 Too many pods. {NO_CLAIMS}, "
        "preemption: not eligible due to preemptionPolicy=Never.",
        None,
        id="TestPodEligibleToPreemptOthers: Pod with preemptionPolicy=Never",
    ),
    pytest.param(
        [node("node1", pods="1")],
        [],
        _p("p", HIGH, preemptionPolicy="Never", nodeSelector={"missing": "label"}),
        "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. "
        f"{NO_CLAIMS}, preemption: not eligible due to preemptionPolicy=Never.",
        None,
        id="preemptionPolicy=Never, nothing to evict anywhere",
    ),
]


@pytest.mark.parametrize(("nodes", "existing", "pending", "message", "nominated"), CASES)
def test_failed_scheduling_message_as_upstream(
    nodes: list[Obj], existing: list[Obj], pending: Obj, message: str, nominated: str | None
) -> None:
    placement = Engine(Config()).schedule(build_snapshot(nodes, existing), [pending]).placements[0]
    assert placement.node is None
    assert placement.nominated_node == nominated
    assert placement.message == message


def test_terminating_victims_on_the_nominated_node() -> None:
    """TestPodEligibleToPreemptOthers "Pod with nominated node, but the pods on it
    are being preempted": the nomination stays and nothing more is evicted."""
    victim = _p("victim", LOW, node_name="node1")
    victim["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    victim["status"] = {
        "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    }
    pending = _p("p", HIGH)
    pending["status"] = {"nominatedNodeName": "node1"}
    snapshot = build_snapshot([node("node1", pods="1")], [victim])
    placement = Engine(Config()).schedule(snapshot, [pending]).placements[0]
    assert placement.nominated_node == "node1" and placement.victims == ()
    assert placement.message == (
        f"0/1 nodes are available: 1 Too many pods. {NO_CLAIMS}, "
        "preemption: not eligible due to a terminating pod on the nominated node."
    )


def test_preemption_disabled_leaves_dynamic_resources_alone() -> None:
    """DefaultPreemption off in the profile: DynamicResources' PostFilter is the only one."""
    config = Config(profiles=(ProfileConfig(preemption=False),))
    snapshot = build_snapshot([node("node1", pods="1")], [_p("p1", LOW, node_name="node1")])
    placement = Engine(config).schedule(snapshot, [_p("p", HIGH)]).placements[0]
    assert placement.nominated_node is None
    assert placement.message == f"0/1 nodes are available: 1 Too many pods. {NO_CLAIMS}"


def test_prefilter_rejection_ends_with_dynamic_resources_missing_state() -> None:
    """A PreFilter rejection before DynamicResources' own PreFilter (here VolumeRestrictions,
    a claim that does not exist): its PostFilter fails on the missing state ("not found")
    and DefaultPreemption never runs."""
    pending = _p("p", HIGH)
    pending["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    placement = Engine(Config()).schedule(build_snapshot([node("node1")], []), [pending]).placements[0]
    assert placement.message == '0/1 nodes are available: persistentvolumeclaim "data" not found. not found'
