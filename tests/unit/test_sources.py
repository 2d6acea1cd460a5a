"""Metric sources: node mapping, adaptive refresh, and what the engine receives when a source fails."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from ksched.config import EstimateConfig, MetricConfig
from ksched.engine.pods import pod_requests
from ksched.engine.snapshot import build_snapshot
from ksched.loop.metrics.metric_sources import (
    MetricStore,
    NodeResolver,
    PrometheusSource,
    Sample,
    SourceError,
    _next_interval,
)
from ksched.loop.mirror.slim import slim_node
from ksched.loop.mirror.state import ClusterState
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


def test_the_metrics_first_refreshes_are_spread_over_the_shortest_interval() -> None:
    """Two metrics do not query Prometheus at the same moment (each query takes a core there)."""
    metrics = [MetricConfig(name=n, source="prometheus", query="q", min_refresh_s=0.6) for n in ("a", "b")]
    first: dict[str, float] = {}

    class Recording(FakeSource):
        def query(self, metric: MetricConfig, resolve: object) -> Sample:
            first.setdefault(metric.name, time.monotonic())
            return super().query(metric, resolve)

    nodes = [slim_node(node("n0"))]
    store = MetricStore(metrics, Recording(), None, lambda: nodes)  # type: ignore[arg-type]
    store.start()
    try:
        deadline = time.monotonic() + 5
        while len(first) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        store.stop()
    assert first["b"] - first["a"] >= 0.2, "b starts half the shortest interval (0.3 s) after a"


def test_a_refresh_that_raises_degrades_the_metric_and_its_thread_goes_on() -> None:
    """A malformed answer (a metrics-server item without ``usage``) is not a SourceError."""
    m = MetricConfig(name="u", source="prometheus", query="q", min_refresh_s=0.05, max_refresh_s=0.05)
    calls: list[int] = []
    # The third refresh (the first to succeed) waits until the failures have been looked at.
    looked = threading.Event()

    class Malformed(FakeSource):
        def query(self, metric: MetricConfig, resolve: object) -> Sample:
            calls.append(1)
            if len(calls) <= 2:
                raise KeyError("usage")
            looked.wait(5)
            return super().query(metric, resolve)

    nodes = [slim_node(node("n0")), slim_node(node("n1"))]
    store = MetricStore([m], Malformed(), None, lambda: nodes)  # type: ignore[arg-type]
    snap = build_snapshot(nodes, [])
    store.start()
    try:
        deadline = time.monotonic() + 5
        while len(calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.state["u"].last_error == "refresh failed: KeyError: 'usage'"
        assert store.matrix(snap).metrics == ()
        looked.set()
        while len(calls) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        store.stop()
    assert len(calls) >= 4, "the refresh thread went on after the failures"
    assert store.matrix(snap).values[:, 0].tolist() == [0.2, 0.8]


def test_a_sample_older_than_max_age_is_dropped() -> None:
    m = MetricConfig(name="u", source="prometheus", query="q", max_age_s=30)
    store, _, snap = store_and_snapshot(m)
    store.cache["u"] = Sample({"n0": 0.1}, time.time() - 31)
    assert store.matrix(snap).degraded == ["u: no value younger than 30s"]  # type: ignore[arg-type]


def test_each_new_samples_column_holds_its_values_at_their_nodes_rows() -> None:
    # The rows of a sample's nodes are kept for the next sample; every column must still be
    # each node's own value, whatever the next sample names, in whatever order, and on a
    # rebuilt node table.
    m = MetricConfig(name="u", source="prometheus", query="q")
    store, _, snap = store_and_snapshot(m)
    other = build_snapshot([slim_node(node("n1")), slim_node(node("n2")), slim_node(node("n0"))], [])
    samples = [
        (snap, {"n0": 0.1, "n1": 0.2}),
        (snap, {"n0": 0.3, "n1": 0.4}),  # the same nodes in the same order: the kept rows
        (snap, {"n1": 0.5, "n0": 0.6}),  # reordered
        (snap, {"n0": 0.7, "gone": 0.9}),  # a node the table does not have, one missing
        (other, {"n0": 0.7, "gone": 0.9}),  # the same names on a rebuilt table
        (other, {"n2": 1.0, "n0": float("nan")}),
    ]
    for table, values in samples:
        store.cache["u"] = Sample(values, time.time())
        column = store.matrix(table).values[:, 0]  # type: ignore[arg-type]
        want = [values.get(name, np.nan) for name in table.node_names]  # type: ignore[attr-defined]
        assert np.array_equal(column, np.array(want), equal_nan=True), (values, column)


def test_the_estimate_adds_the_load_bound_after_the_sample() -> None:
    m = MetricConfig(
        name="u", source="prometheus", query="q", estimate=EstimateConfig(resource="cpu", legacy=True)
    )
    state = ClusterState((m,))
    state.on_node("ADDED", slim_node(node("n0", cpu="4")), None)
    state.sync()
    sampled = time.time() - 1
    state.assume("default/a", "uid-a", "n0", pod_requests(pod("a", cpu="1")), ())
    values = np.array([0.25])
    state.recent.add_to(state.snapshot(), m, sampled, values)
    assert values[0] == pytest.approx(0.5), "a 1-cpu pod on a 4-cpu node adds 0.25"
    later = np.array([0.25])
    state.recent.add_to(state.snapshot(), m, time.time() + 1, later)
    assert later[0] == 0.25, "binds before the sample are already in it"


@contextlib.contextmanager
def answering(status: int, body: bytes) -> Iterator[PrometheusSource]:
    """A PrometheusSource on an HTTP server that answers every query with ``status`` and ``body``
    (a real Prometheus cannot be made to give most of these; the real one's bad-query, hang and
    NaN answers are in tests/integration/test_metrics.py)."""

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield PrometheusSource(f"http://127.0.0.1:{server.server_address[1]}", timeout_s=2)
    finally:
        server.shutdown()
        server.server_close()


def vector(*series: tuple[dict[str, str], float, str]) -> bytes:
    result = [{"metric": labels, "value": [at, raw]} for labels, at, raw in series]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


@pytest.mark.parametrize("status", [500, 503])
def test_a_prometheus_answering_an_error_status_is_a_source_error(status: int) -> None:
    m = MetricConfig(name="u", source="prometheus", query="up")
    with (
        answering(status, b'{"status":"error","error":"internal"}') as source,
        pytest.raises(SourceError, match=f"u: query failed: HTTP status {status} .*internal"),
    ):
        source.query(m, NodeResolver([]))


def test_an_instant_vector_maps_to_nodes_by_name_and_address() -> None:
    nodes = [with_address("n1", "10.0.0.1"), with_address("n2", "10.0.0.2"), with_address("n3", "10.0.0.3")]
    body = vector(
        ({"node": "n1", "job": "x"}, 1000.5, "0.25"),
        ({"node": "10.0.0.2:9100"}, 999.0, "1e-3"),
        ({"node": "n3"}, 1001.0, "NaN"),
        ({"node": "elsewhere"}, 1002.0, "+Inf"),
        ({"node": "10.9.9.9:9100"}, 1003.0, "7"),
        ({"job": "no node label"}, 1004.0, "-2"),
    )
    m = MetricConfig(name="u", source="prometheus", query="q", node_label="node")
    with answering(200, body) as source:
        sample = source.query(m, NodeResolver(nodes))
    assert sample.values == {"n1": 0.25, "n2": 0.001}
    assert sample.not_finite == 2, "NaN and +Inf are counted, never scored"
    assert sample.unmapped == 2, "an unknown address and a series without the label match no node"
    assert sample.sampled_at == 999.0, "the oldest sample time, not the newest"


def test_node_names_alone_take_the_same_values_as_the_series_by_series_mapping() -> None:
    nodes = [with_address(f"n{i}", f"10.0.0.{i}") for i in range(5)]
    by_name = NodeResolver(nodes)
    labels, values = [f"n{i}" for i in (0, 1, 3, 1)], [0.1, 0.2, 0.3, 0.4]
    assert by_name.mapped(labels, values) == (labels, values, 0), "each series kept, several for n1 too"
    mixed = [*labels, "10.0.0.4:9100", "nowhere"]
    assert by_name.mapped(mixed, [*values, 0.5, 0.6]) == ([*labels, "n4"], [*values, 0.5], 1)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            b'{"status":"success","data":{"resultType":"scalar","result":[1000,"2"]}}',
            "not return an instant vector",
        ),
        (
            b'{"status":"success","data":{"resultType":"string","result":[1000,"a"]}}',
            "not return an instant vector",
        ),
        (
            b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"]]}]}}',
            "not return an instant vector",
        ),
        (b'{"status":"success","data":{"result":{"x":1}}}', "expected an instant vector, got object"),
        (b'{"status":"success"}', "the answer has no data.result"),
        (b"<html>proxy error</html>", "the answer is not JSON"),
        (vector(({"node": "n1"}, 1.0, "1")) + b" {}", "the answer is not JSON: trailing characters"),
        (b"[1]", "expected a Prometheus API answer"),
        (vector(({"node": "n1"}, 1.0, "fast")), 'value "fast" is not a number'),
    ],
    ids=[
        "scalar",
        "string",
        "matrix",
        "not-a-list",
        "no-result",
        "not-json",
        "trailing",
        "not-an-object",
        "not-a-number",
    ],
)
def test_an_answer_that_is_not_a_vector_of_numbers_is_a_source_error(body: bytes, error: str) -> None:
    m = MetricConfig(name="u", source="prometheus", query="q")
    with answering(200, body) as source, pytest.raises(SourceError, match=f"^u: .*{error}"):
        source.query(m, NodeResolver([with_address("n1", "10.0.0.1")]))
