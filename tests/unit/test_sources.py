"""Metric sources: node mapping, adaptive refresh, and what the engine receives when a source fails."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ksched.config import MetricConfig
from ksched.engine.pods import pod_requests
from ksched.engine.snapshot import build_snapshot
from ksched.loop.metric_sources import MetricStore, NodeResolver, Sample, SourceError, _next_interval
from ksched.loop.slim import slim_node
from ksched.loop.state import ClusterState
from tests.conftest import node, pod


def with_address(name: str, ip: str) -> dict[str, object]:
    n = node(name)
    n["status"]["addresses"] = [{"type": "InternalIP", "address": ip}]
    return slim_node(n)


@pytest.mark.parametrize(
    ("label", "want"),
    [
        ("n1", "n1"),
        ("10.0.0.2:9100", "n2"),
        ("10.0.0.2", "n2"),
        ("n1:9100", "n1"),
        ("[fd00::3]:9100", "n3"),
        ("10.9.9.9:9100", None),
        ("", None),
    ],
)
def test_series_map_to_nodes_by_name_or_instance_address(label: str, want: str | None) -> None:
    resolve = NodeResolver(
        [with_address("n1", "10.0.0.1"), with_address("n2", "10.0.0.2"), with_address("n3", "fd00::3")]
    )
    assert resolve(label) == want


def test_refresh_interval_shortens_while_values_move_and_grows_while_still() -> None:
    m = MetricConfig(name="u", source="prometheus", query="q", min_refresh_s=5, max_refresh_s=60)
    before = Sample({f"n{i}": 0.5 for i in range(10)}, 0.0)
    moved = Sample({f"n{i}": 0.5 + 0.1 * (i % 2) for i in range(10)}, 1.0)
    assert _next_interval(m, 20, before, moved) == 10
    assert _next_interval(m, 6, before, moved) == 5
    assert _next_interval(m, 20, before, before) == 30
    assert _next_interval(m, 50, before, before) == 60
    assert _next_interval(m, 50, None, before) == 5


class FakeSource:
    """Answers like a Prometheus would, from a table (the real one is in the integration tests)."""

    def __init__(self) -> None:
        self.values: dict[str, float] | None = {"n0": 0.2, "n1": 0.8}

    def query(self, metric: MetricConfig, resolve: object) -> Sample:
        if self.values is None:
            raise SourceError(f"{metric.name}: query failed: connection refused")
        return Sample(dict(self.values), time.time())


def store_and_snapshot(metric: MetricConfig) -> tuple[MetricStore, FakeSource, object]:
    nodes = [slim_node(node("n0")), slim_node(node("n1"))]
    source = FakeSource()
    store = MetricStore([metric], source, None, lambda: nodes)  # type: ignore[arg-type]
    return store, source, build_snapshot(nodes, [])


def test_a_failed_source_drops_the_metric_instead_of_excluding_every_node() -> None:
    m = MetricConfig(name="u", source="prometheus", query="q", missing="exclude")
    store, source, snap = store_and_snapshot(m)
    store.refresh(m)
    fresh = store.matrix(snap)  # type: ignore[arg-type]
    assert [c.name for c in fresh.metrics] == ["u"] and fresh.values[:, 0].tolist() == [0.2, 0.8]
    source.values = None
    store.refresh(m)
    down = store.matrix(snap)  # type: ignore[arg-type]
    assert down.metrics == () and down.degraded == ["u: u: query failed: connection refused"]
    source.values = {"n9": 1.0}  # answers, but for no node we know
    store.refresh(m)
    assert store.matrix(snap).degraded == ["u: no value for any node"]  # type: ignore[arg-type]


def test_a_sample_older_than_max_age_is_dropped() -> None:
    m = MetricConfig(name="u", source="prometheus", query="q", max_age_s=30)
    store, _, snap = store_and_snapshot(m)
    store.cache["u"] = Sample({"n0": 0.1}, time.time() - 31)
    assert store.matrix(snap).degraded == ["u: no value younger than 30s"]  # type: ignore[arg-type]


def test_herd_estimate_adds_the_load_bound_after_the_sample() -> None:
    m = MetricConfig(name="u", source="prometheus", query="q", herd_resource="cpu", herd_factor=1.0)
    state = ClusterState((m,))
    state.on_node("ADDED", slim_node(node("n0", cpu="4")), None)
    state.sync()
    sampled = time.time() - 1
    state.assume("default/a", "uid-a", "n0", pod_requests(pod("a", cpu="1")), ())
    values = np.array([0.25])
    state.herd_estimate(m, sampled, values)
    assert values[0] == pytest.approx(0.5), "a 1-cpu pod on a 4-cpu node adds 0.25"
    later = np.array([0.25])
    state.herd_estimate(m, time.time() + 1, later)
    assert later[0] == 0.25, "binds before the sample are already in it"


@pytest.mark.parametrize("status", [500, 503])
def test_a_prometheus_answering_an_error_status_is_a_source_error(status: int) -> None:
    """prometheus-api-client against an HTTP server that answers every query with an error
    (a real Prometheus cannot be made to; the real one's bad-query, hang and NaN answers are
    in tests/integration/test_metrics.py)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from ksched.loop.metric_sources import PrometheusSource

    class Failing(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.end_headers()
            self.wfile.write(b'{"status":"error","error":"internal"}')

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        source = PrometheusSource(f"http://127.0.0.1:{server.server_address[1]}", timeout_s=2)
        m = MetricConfig(name="u", source="prometheus", query="up")
        with pytest.raises(SourceError, match="u: query failed"):
            source.query(m, NodeResolver([]))
    finally:
        server.shutdown()
        server.server_close()
