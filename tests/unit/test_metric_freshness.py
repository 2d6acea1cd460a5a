"""Freshness: annotation values carry their time and expire after maxAge; a stale metric is
dropped (``onStale: open``) or filters out every node without a fresh value (``closed``), and
both are listed as degraded; metrics-server's nodes as a source."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import orjson
import pytest

from ksched.commands.annotate import value_annotations
from ksched.config import Config, EstimateConfig, MetricConfig
from ksched.engine import Engine
from ksched.engine.snapshot import build_snapshot
from ksched.loop.client import Response
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.metrics.metrics_server import NODE_METRICS_PATH, MetricsServerSource, go_duration_s
from ksched.loop.metrics.samples import Sample, SourceError
from ksched.loop.mirror.slim import slim_node
from tests.conftest import node, pod

T0 = 1_800_000_000.0
PRICE = "ksched.io/price"
STAMP = "ksched.io/price-timestamp"


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Clock:
    now: float = T0

    def __call__(self) -> float:
        return self.now


def price(on_stale: str = "open", **extra: Any) -> MetricConfig:
    return MetricConfig(
        name="price", source="annotation", annotation=PRICE, max_age_s=60, on_stale=on_stale, **extra
    )


def priced(*values: tuple[str, str | None, float | None]) -> list[dict[str, Any]]:
    """Nodes with a price and the time it was measured (None: no timestamp annotation)."""
    nodes = []
    for name, value, at in values:
        annotations = {} if value is None else {PRICE: value}
        if at is not None:
            annotations[STAMP] = rfc3339(at)
        nodes.append(slim_node(node(name, annotations=annotations)))
    return nodes


def test_an_annotation_older_than_max_age_is_missing_and_one_without_a_time_is_fresh() -> None:
    m = price()
    nodes = priced(
        ("fresh", "1", T0 - 30), ("stale", "2", T0 - 61), ("untimed", "3", None), ("none", None, None)
    )
    store = MetricStore([m], None, clock=Clock())
    matrix = store.matrix(build_snapshot(nodes, []))
    assert np.array_equal(matrix.values[:, 0], [1.0, np.nan, 3.0, np.nan], equal_nan=True)
    assert matrix.degraded == [], "some nodes are fresh: the metric is used, the stale one is missing"
    assert store.degraded() == ["price: 1 node(s) have a value older than 60s"]


def test_a_stale_annotation_metric_is_dropped_when_open() -> None:
    nodes = priced(("a", "1", T0 - 100), ("b", "2", T0 - 100))
    store = MetricStore([price()], None, clock=Clock())
    matrix = store.matrix(build_snapshot(nodes, []))
    assert matrix.metrics == () and matrix.degraded == ["price: no value younger than 60s"]
    assert store.status() == "degraded (price: no value younger than 60s)"


def test_a_stale_metric_that_fails_closed_leaves_pods_pending_with_its_missing_reason() -> None:
    m = price("closed")
    nodes = priced(("a", "1", T0 - 100), ("b", "2", T0 - 100))
    snapshot = build_snapshot(nodes, [])
    store = MetricStore([m], None, clock=Clock())
    matrix = store.matrix(snapshot)
    assert [(g.name, g.missing) for g in matrix.metrics] == [("price", "exclude")]
    assert np.isnan(matrix.values).all()
    closed = " (onStale: closed: nodes without a fresh value are filtered out)"
    assert matrix.degraded == [f"price: no value younger than 60s{closed}"]
    assert store.degraded() == [f"price: no value younger than 60s{closed}"]
    engine = Engine(Config(metrics=(m,)), parallel=False)
    [placement] = engine.schedule(snapshot, [pod("web")], matrix.values, metrics=matrix.metrics).placements
    assert placement.node is None and placement.message is not None
    assert "2 node(s) had no value for price" in placement.message, placement.message
    # Open, the same stale values are dropped and the pod is placed.
    open_store = MetricStore([price()], None, clock=Clock())
    dropped = open_store.matrix(snapshot)
    [placed] = (
        Engine(Config(metrics=(price(),)), parallel=False)
        .schedule(snapshot, [pod("web")], dropped.values, metrics=dropped.metrics)
        .placements
    )
    assert placed.node is not None


class DownSource:
    def query(self, metric: MetricConfig, resolve: object) -> Sample:
        raise SourceError(f"{metric.name}: query failed: connection refused")


@pytest.mark.parametrize(
    ("on_stale", "used", "column"),
    [("open", [], None), ("closed", ["exclude"], [np.nan, np.nan])],
)
def test_an_unreachable_source_is_dropped_or_filters_every_node(
    on_stale: str, used: list[str], column: list[float] | None
) -> None:
    m = MetricConfig(name="load", source="prometheus", query="q", on_stale=on_stale)
    nodes = [slim_node(node("a")), slim_node(node("b"))]
    store = MetricStore([m], DownSource(), None, lambda: nodes)  # type: ignore[arg-type]
    store.refresh(m)
    matrix = store.matrix(build_snapshot(nodes, []))
    assert [g.missing for g in matrix.metrics] == used
    if column is not None:
        assert np.array_equal(matrix.values[:, 0], column, equal_nan=True)
    assert matrix.degraded[0].startswith("load: load: query failed: connection refused")
    assert store.degraded()[0].startswith("load: load: query failed")
    assert ("closed" in store.status()) == (on_stale == "closed")


def test_annotate_writes_the_time_beside_the_value_and_removes_both() -> None:
    at = datetime(2026, 11, 27, 17, 0, 5, 123, tzinfo=UTC)
    assert value_annotations(PRICE, STAMP, "0.12", at) == {PRICE: "0.12", STAMP: "2026-11-27T17:00:05Z"}
    assert value_annotations(PRICE, STAMP, None, at) == {PRICE: None, STAMP: None}


class FakeKube:
    """Answers the node metrics list as the aggregation layer would, from a table."""

    def __init__(self, status: int, body: Any) -> None:
        self.status, self.body = status, body
        self.paths: list[str] = []

    def request(self, method: str, path: str, **kw: Any) -> Response:
        self.paths.append(path)
        return Response(self.status, orjson.dumps(self.body))


def node_metrics(name: str, at: float, cpu: str, memory: str, window: str = "10.5s") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "timestamp": rfc3339(at),
        "window": window,
        "usage": {"cpu": cpu, "memory": memory},
    }


def test_metrics_server_gives_usage_over_allocatable_as_old_as_its_oldest_item() -> None:
    nodes = [slim_node(node("a", cpu="4", memory="8Gi")), slim_node(node("b", cpu="8", memory="8Gi"))]
    kube = FakeKube(
        200,
        {
            "kind": "NodeMetricsList",
            "items": [
                node_metrics("a", T0, "1000000000n", "2Gi"),
                node_metrics("b", T0 - 5, "2", "6Gi", "1m0.5s"),
                node_metrics("gone", T0, "1", "1Gi"),
            ],
        },
    )
    source = MetricsServerSource(kube)  # type: ignore[arg-type]
    cpu = source.query(MetricConfig(name="cpu", source="metrics-server", resource="cpu"), nodes)
    assert cpu.values == {"a": 0.25, "b": 0.25} and cpu.unmapped == 1
    assert cpu.sampled_at == T0 - 5 and cpu.window_s == 60.5
    memory = source.query(MetricConfig(name="mem", source="metrics-server", resource="memory"), nodes)
    assert memory.values == {"a": 0.25, "b": 0.75}
    assert kube.paths == [NODE_METRICS_PATH, NODE_METRICS_PATH]


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (503, {"message": "service unavailable"}, "HTTP status 503"),
        (200, {"kind": "Status"}, "not a NodeMetricsList"),
        (200, {"items": []}, "no node with a usage timestamp"),
    ],
)
def test_metrics_server_failures_are_source_errors(status: int, body: Any, error: str) -> None:
    m = MetricConfig(name="cpu", source="metrics-server", resource="cpu")
    with pytest.raises(SourceError, match=error):
        MetricsServerSource(FakeKube(status, body)).query(m, [slim_node(node("a"))])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "want"),
    [("10.5s", 10.5), ("1m0.25s", 60.25), ("15s", 15.0), ("250ms", 0.25), ("x", None), (None, None)],
)
def test_go_durations(raw: object, want: float | None) -> None:
    assert go_duration_s(raw) == want


def test_a_metrics_server_metric_fades_pods_over_its_own_window() -> None:
    """Without an explicit estimate window, the estimate uses the window metrics-server names."""
    m = MetricConfig(
        name="cpu", source="metrics-server", resource="cpu", estimate=EstimateConfig(resource="cpu")
    )
    nodes = [slim_node(node("a", cpu="4"))]
    kube = FakeKube(200, {"items": [node_metrics("a", T0, "1", "1Gi", "15s")]})
    clock = Clock(T0 + 1)
    store = MetricStore([m], None, None, lambda: nodes, MetricsServerSource(kube), clock)  # type: ignore[arg-type]
    store.refresh(m)
    seen: list[tuple[float, float | None]] = []

    def estimate(
        metric: MetricConfig,
        sampled_at: float,
        column: Any,
        window_s: Any = None,
        measured: Any = None,
        measured_at: Any = None,
        caution: Any = None,
        node_sampled_at: Any = None,
    ) -> None:
        seen.append((sampled_at, window_s))

    matrix = store.matrix(build_snapshot(nodes, []), estimate)
    assert matrix.values[:, 0].tolist() == [0.25] and seen == [(T0, 15.0)]
