"""Objects the cluster state cannot read are left out, counted and reported (issue 48): a node
left out of the node table counts in ``ksched_objects_rejected_total{kind,reason}`` once per
problem, and ``/status`` lists the objects left out now (at most ``LEFT_OUT_SHOWN``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ksched.config import Config
from ksched.loop.leader import Leadership
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.mirror.slim import slim_node
from ksched.loop.mirror.state import LEFT_OUT_SHOWN, ClusterState
from ksched.loop.run import Running
from ksched.loop.scheduling.cycle import Scheduler
from ksched.loop.scheduling.queue import SchedulingQueue
from ksched.loop.telemetry import Telemetry
from tests.conftest import node


def rejected(telemetry: Telemetry, reason: str) -> float:
    value = telemetry.registry.get_sample_value(
        "ksched_objects_rejected_total", {"kind": "Node", "reason": reason}
    )
    return value or 0.0


def with_nodes(telemetry: Telemetry, *nodes: dict[str, Any]) -> ClusterState:
    state = ClusterState(telemetry=telemetry)
    for n in nodes:
        state.on_node("ADDED", slim_node(n), None)
    state.sync()
    return state


def test_a_node_with_a_malformed_allocatable_is_left_out_counted_and_listed() -> None:
    telemetry = Telemetry()
    state = with_nodes(telemetry, node("bad", cpu="lots"), node("good"))
    assert state.snapshot().node_names == ["good"]
    assert list(state.left_out) == ["bad"]
    assert rejected(telemetry, "unreadable_quantity") == 1
    report = state.left_out_report()
    assert report["count"] == 1
    [entry] = report["objects"]
    assert entry["kind"] == "Node" and entry["name"] == "bad" and entry["reason"] == "unreadable_quantity"
    assert entry["problem"].startswith("status.allocatable.cpu: "), entry


def test_a_node_left_out_counts_once_per_problem_and_again_after_it_was_fixed() -> None:
    telemetry = Telemetry()
    state = with_nodes(telemetry, node("bad", cpu="lots"), node("good"))
    state.snapshot()
    state.on_node("ADDED", slim_node(node("other")), None)  # a rebuild: "bad" is still out
    state.sync()
    state.snapshot()
    assert rejected(telemetry, "unreadable_quantity") == 1
    state.on_node("MODIFIED", slim_node(node("bad")), None)
    state.sync()
    assert state.snapshot().node_names == ["bad", "good", "other"]
    assert state.left_out == {} and state.left_out_report() == {"count": 0, "objects": []}
    state.on_node("MODIFIED", slim_node(node("bad", memory="a lot")), None)
    state.sync()
    state.snapshot()
    assert rejected(telemetry, "unreadable_quantity") == 2


def test_a_node_whose_images_cannot_be_read_is_malformed() -> None:
    telemetry = Telemetry()
    bad = node("bad")
    bad["status"]["images"] = [{"names": 5, "sizeBytes": 1}]
    state = with_nodes(telemetry, bad)
    assert state.snapshot().node_names == []
    assert rejected(telemetry, "malformed") == 1
    [entry] = state.left_out_report()["objects"]
    assert entry["name"] == "bad" and entry["reason"] == "malformed" and "TypeError" in entry["problem"]


def test_the_status_lists_at_most_a_hundred_objects_and_counts_them_all() -> None:
    telemetry = Telemetry()
    state = with_nodes(telemetry, *(node(f"bad-{i:03}", cpu="lots") for i in range(LEFT_OUT_SHOWN + 5)))
    state.snapshot()
    report = state.left_out_report()
    assert report["count"] == LEFT_OUT_SHOWN + 5
    assert len(report["objects"]) == LEFT_OUT_SHOWN
    assert rejected(telemetry, "unreadable_quantity") == LEFT_OUT_SHOWN + 5


def test_a_state_without_telemetry_still_leaves_the_node_out() -> None:
    state = ClusterState()
    state.on_node("ADDED", slim_node(node("bad", cpu="lots")), None)
    state.sync()
    assert state.snapshot().node_names == [] and list(state.left_out) == ["bad"]


def test_status_lists_the_nodes_left_out() -> None:
    """``/status`` (``ksched status -o json``) carries the report: the node and its field."""
    config = replace(Config(), leader_election=replace(Config().leader_election, leader_elect=False))
    telemetry = Telemetry()
    state = with_nodes(telemetry, node("bad", cpu="lots"), node("good"))
    state.snapshot()
    queue = SchedulingQueue()
    metrics = MetricStore([], None, telemetry)
    scheduler = Scheduler(config, state, queue, None, telemetry, lambda: True, metrics)  # type: ignore[arg-type]
    leadership = Leadership(config.leader_election, "me", on_lost=lambda: None)
    running = Running(config, scheduler, queue, state, None, leadership, {}, None)  # type: ignore[arg-type]
    left_out = running.status()["leftOut"]
    assert left_out["count"] == 1  # type: ignore[index]
    [entry] = left_out["objects"]  # type: ignore[index]
    assert entry["name"] == "bad" and entry["problem"].startswith("status.allocatable.cpu: ")


def test_a_node_whose_allocatable_is_not_a_mapping_is_left_out_not_fatal() -> None:
    """An allocatable written as a list made the node-table build raise AttributeError, which
    nothing caught: every cycle failed for one node."""
    bad = node("bad")
    bad["status"]["allocatable"] = ["cpu", "4"]
    telemetry = Telemetry()
    state = with_nodes(telemetry, bad, node("good"))
    assert state.snapshot().node_names == ["good"]
    assert list(state.left_out) == ["bad"]
    assert rejected(telemetry, "malformed") + rejected(telemetry, "unreadable_quantity") == 1
