"""One bad value cannot break scheduling (issue 48): counts past int64 saturate, sums
never wrap, and a node whose values cannot be read is left out alone.

Each case is a cluster a kubelet, a device plugin or a client could produce, run through
``ksched simulate`` or the engine, with the outcome a user would see.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from ksched.commands.cli import main
from ksched.config import MetricConfig
from ksched.engine.quantity import QUANTITY_MAX, REQUESTED_MAX, canonical, parse_quantity
from ksched.engine.requirements import counted_requests
from ksched.engine.snapshot import build_snapshot, node_problem, remove_usage
from ksched.loop.metrics.metric_sources import MetricStore, Sample
from ksched.loop.metrics.metrics_server import _quantity as metrics_server_quantity
from ksched.loop.mirror.slim import slim_node
from ksched.loop.mirror.state import ClusterState
from ksched.loop.telemetry import Telemetry
from tests.conftest import node, pod

Obj = dict[str, Any]


def cluster(tmp_path: Path, objs: list[Obj]) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objs}))
    return str(path)


def simulate(tmp_path: Path, objs: list[Obj], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[Obj]]:
    code = main(["simulate", cluster(tmp_path, objs), "-o", "json"])
    out = capsys.readouterr().out
    return code, json.loads(out)["placements"]


def with_status(n: Obj, **status: Any) -> Obj:
    return {**n, "status": {**n["status"], **status}}


def huge(field: str, name: str = "big") -> Obj:
    """Node ``name`` with one valid quantity past int64 (as a kubelet or device plugin may write)."""
    big = node(name)
    alloc = big["status"]["allocatable"]
    if field == "memory":
        alloc["memory"] = "10Ei"
    elif field == "cpu":
        alloc["cpu"] = "1e16"
    elif field == "extended":
        alloc["example.com/dev"] = "1e19"
    else:
        big = with_status(big, images=[{"names": ["registry/app:1"], "sizeBytes": 10**30}])
    return big


HUGE = ("memory", "cpu", "extended", "image")


@pytest.mark.parametrize("field", HUGE)
def test_a_node_with_a_quantity_past_int64_does_not_stop_scheduling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str
) -> None:
    """Was: OverflowError: Python int too large to convert to C long."""
    code, placements = simulate(tmp_path, [huge(field), node("ok"), pod("p1")], capsys)
    assert code == 0
    assert placements[0]["node"] in {"big", "ok"}
    assert placements[0]["score"] is not None and 0 <= placements[0]["score"] < 10_000


@pytest.mark.parametrize(
    ("resource", "text"),
    [
        ("memory", "10Ei"),
        ("cpu", "1e16"),
        ("example.com/dev", "1e19"),
        ("memory", "1e1000"),
        ("cpu", "-1e30"),
    ],
)
def test_quantities_saturate_when_parsed(resource: str, text: str) -> None:
    want = -QUANTITY_MAX if text.startswith("-") else QUANTITY_MAX
    assert canonical(resource, parse_quantity(text)) == want


def test_the_snapshot_stores_clamped_counts() -> None:
    snap = build_snapshot([huge("memory"), huge("image", "big-image")], [])
    alloc = snap.arrays["allocatable"].reshape(snap.count, len(snap.resources))
    assert alloc[0, snap.resources("memory")] == QUANTITY_MAX
    assert snap.arrays["image_sizes"].max() == QUANTITY_MAX


def test_a_node_that_cannot_be_read_is_left_out_counted_and_the_others_schedule() -> None:
    """Was: build_snapshot raised TypeError and every cycle failed."""
    bad = with_status(node("bad"), images=[{"names": 5, "sizeBytes": 1}])
    assert node_problem(bad) is not None
    assert node_problem(huge("memory")) is None, "a value past int64 is clamped, not refused"
    state = ClusterState()
    for n in (bad, node("good"), huge("memory")):
        state.on_node("ADDED", slim_node(n), None)
    state.sync()
    assert state.snapshot().node_names == ["big", "good"]
    assert list(state.left_out) == ["bad"]


def over_committed(tmp_path: Path, capsys: pytest.CaptureFixture[str], bound: int) -> tuple[int, list[Obj]]:
    """Node ``n1`` (4 cpu) with ``bound`` pods of 9e15 cpu each (under the per-pod cap) and a 100m pod."""
    existing = [pod(f"b{i}", cpu="9e15", node_name="n1") for i in range(bound)]
    return simulate(tmp_path, [node("n1"), *existing, pod("p1")], capsys)


@pytest.mark.parametrize("bound", [2, 12])
def test_bound_pods_whose_requests_pass_int64_fill_the_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bound: int
) -> None:
    """Was: the sum wrapped negative and the new pod was placed (rc 0). 12 pods take the
    snapshot's vectorised count, 2 its one-by-one count."""
    code, placements = over_committed(tmp_path, capsys, bound)
    assert code == 1
    assert placements[0]["node"] is None
    assert "Insufficient cpu" in placements[0]["message"]


def test_a_saturated_sum_stays_saturated_when_a_pod_leaves() -> None:
    """Saturation forgets what the sum held: it stays full until the table is rebuilt."""
    # Each request is clamped to QUANTITY_MAX, a quarter of int64: five saturate the sum.
    pods = [pod(f"b{i}", cpu="9e15", node_name="n1") for i in range(5)]
    snap = build_snapshot([node("n1")], pods)
    cpu = snap.resources("cpu")
    assert snap.arrays["requested"][cpu] == REQUESTED_MAX
    remove_usage(snap, 0, counted_requests(pods[0])[0])
    assert snap.arrays["requested"][cpu] == REQUESTED_MAX


@pytest.mark.parametrize("bound", [3, 20])
def test_ordinary_sums_are_exact(bound: int) -> None:
    snap = build_snapshot([node("n1")], [pod(f"b{i}", cpu="250m", node_name="n1") for i in range(bound)])
    assert snap.arrays["requested"][snap.resources("cpu")] == 250 * bound
    assert snap.arrays["requested"].dtype == np.int64


# -- metric values ------------------------------------------------------------

PRICE = """apiVersion: ksched.io/v1alpha1
kind: KschedConfiguration
metrics:
- {name: price, source: annotation, annotation: ksched.io/price, prefer: lower, weight: 2, missing: worst}
"""
LOAD = """apiVersion: ksched.io/v1alpha1
kind: KschedConfiguration
metrics:
- {name: load, source: prometheus, query: q, prefer: lower, weight: 2}
"""


def priced(price: str) -> list[Obj]:
    return [
        node("n1", annotations={"ksched.io/price": price}),
        node("n2", annotations={"ksched.io/price": "0.5"}),
        node("n3", annotations={"ksched.io/price": "0.3"}),
        pod("p1"),
    ]


@pytest.mark.parametrize("price", ["inf", "-inf", "1e999", "-1.7e308", "1e19"])
def test_one_unusable_annotation_is_missing_on_its_node_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], price: str
) -> None:
    """Was (inf): pending with "0/3 nodes are available:" and no reason; (-1.7e308): n1,
    the node whose value is garbage."""
    config = tmp_path / "price.yaml"
    config.write_text(PRICE)
    code = main(["simulate", cluster(tmp_path, priced(price)), "--config", str(config), "-o", "json"])
    placement = json.loads(capsys.readouterr().out)["placements"][0]
    assert code == 0 and placement["node"] == "n3", placement


def extremes(tmp_path: Path) -> list[str]:
    """``simulate``'s arguments for n1: 1.7e308, n2: -1.7e308, n3: 0.3 under prefer: lower."""
    config = tmp_path / "load.yaml"
    config.write_text(LOAD)
    metrics = tmp_path / "m.yaml"
    metrics.write_text("n1: {load: 1.7e308}\nn2: {load: -1.7e308}\nn3: {load: 0.3}\n")
    path = cluster(tmp_path, [node("n1"), node("n2"), node("n3"), pod("p1")])
    return [path, "--config", str(config), "--metrics", str(metrics), "-o", "json"]


def test_finite_extremes_from_metrics_are_dropped_not_scored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: n1 (1.7e308, the highest under prefer: lower) chosen; n2's total NaN."""
    assert main(["simulate", *extremes(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["placements"][0]["node"] == "n3"


class Answers:
    """A live source answering with a fixed table."""

    def __init__(self, values: dict[str, float]) -> None:
        self.values = values

    def query(self, metric: MetricConfig, resolve: object) -> Sample:
        return Sample(dict(self.values), time.time())


def test_live_values_that_are_unusable_are_dropped_counted_and_degraded() -> None:
    m = MetricConfig(name="load", source="prometheus", query="q")
    nodes = [slim_node(node(f"n{i}")) for i in range(4)]
    telemetry = Telemetry()
    source = Answers({"n0": 0.2, "n1": 1.7e308, "n2": -1e19, "n3": math.inf})
    store = MetricStore([m], source, telemetry, lambda: nodes)  # type: ignore[arg-type]
    store.refresh(m)
    matrix = store.matrix(build_snapshot(nodes, []))
    assert [c.name for c in matrix.metrics] == ["load"], "the metric stays, for the other nodes"
    assert matrix.values[0, 0] == 0.2 and np.isnan(matrix.values[1:, 0]).all()
    count = telemetry.registry.get_sample_value
    assert count("ksched_metric_values_rejected_total", {"metric": "load", "reason": "out_of_range"}) == 2
    assert count("ksched_metric_values_rejected_total", {"metric": "load", "reason": "not_finite"}) == 1
    assert count("ksched_degraded", {"reason": "metric_values_rejected"}) == 1
    assert store.degraded() == [
        "load: 1 node value(s) not finite, 2 node value(s) past +-1e+18: treated as missing"
    ]
    source.values = {"n0": 0.2, "n1": 0.3}
    store.refresh(m)
    store.matrix(build_snapshot(nodes, []))
    assert store.degraded() == [] and count("ksched_degraded", {"reason": "metric_values_rejected"}) == 0


def test_an_annotation_value_is_counted_once_per_node_table() -> None:
    m = MetricConfig(name="price", source="annotation", annotation="ksched.io/price")
    nodes = [slim_node(n) for n in priced("inf")[:3]]
    telemetry = Telemetry()
    store = MetricStore([m], None, telemetry, lambda: nodes)
    snap = build_snapshot(nodes, [])
    for _ in range(3):
        values = store.matrix(snap).values
    assert np.isnan(values[0, 0]) and values[2, 0] == 0.3
    count = telemetry.registry.get_sample_value
    assert count("ksched_metric_values_rejected_total", {"metric": "price", "reason": "not_finite"}) == 1


def test_a_metrics_server_usage_past_float_is_no_value_not_a_failed_refresh() -> None:
    assert metrics_server_quantity("1e999") is None
    assert metrics_server_quantity("250m") == 0.25


def test_explain_json_never_holds_nan_or_infinity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: a bare NaN (a missing metric's raw value), which is not JSON."""
    argv = extremes(tmp_path)
    assert main(["explain", argv[0], "default/p1", *argv[1:]]) == 0
    out = capsys.readouterr().out
    # Strict JSON: json.loads accepts NaN and Infinity unless told not to.
    explained = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in explain -o json"))
    rows = {n["node"]: n for n in explained[0]["nodes"]}
    assert rows["n3"]["chosen"] and rows["n2"]["total"] is not None
    assert rows["n1"]["scores"]["Metric/load"]["raw"] is None, "a dropped value has none"
