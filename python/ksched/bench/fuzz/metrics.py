"""The ``metrics`` kind: crafted Prometheus answers, and odd ``simulate --metrics`` files.

``simulate`` reads no live metrics, so a Prometheus answer goes the way ``ksched run`` takes
it: a small HTTP server in this process answers ``/api/v1/query`` with the case (non-finite
and extreme values, ``NaN``, ``+Inf``, ``1e999``, duplicate series for one node, no node
label, the wrong ``resultType``, wrong types, truncated JSON, huge and slow answers, HTTP
errors), and :class:`~ksched.loop.metrics.prometheus.PrometheusSource` reads it through a
:class:`~ksched.loop.metrics.metric_sources.MetricStore`, whose matrix the
:class:`~ksched.engine.Engine` schedules with. Nothing may raise; every value left is finite
and within the metric limit; a node served a sane value alone keeps it, one served an unusable
value has none, counted by ``ksched_metric_values_rejected_total``; every pod (they fit the good
nodes) is placed. Metric files go through ``simulate --metrics`` in process with the same
oddities: exit 0, 1 or 2 as the pods kind checks it, and on 0 or 1 every pod placed.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ksched.bench.fuzz.nodes import fitting_pods, good_nodes
from ksched.bench.fuzz.report import NAMESPACE, Cli, FuzzReport
from ksched.bench.fuzz.simulate import call_simulate, check_simulate
from ksched.config import parse_config
from ksched.engine import Engine
from ksched.engine.snapshot import METRIC_VALUE_LIMIT, build_snapshot
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.metrics.prometheus import PrometheusSource
from ksched.loop.telemetry import Telemetry
from ksched.objects import Obj

KIND = "metrics"
METRIC = "load"
# The source's timeout in the fuzz: a slow answer is one that takes longer.
TIMEOUT_S = 0.5
SLOW_S = 1.2
VALUES: list[Any] = [
    "0.5", "NaN", "+Inf", "-Inf", "1e999", "-1e999", "1e308", "-1e308", "1e19", "-1e19", "-5", "0",
    "1e18", "abc", "", 5, None, [], "0x1p3", " 1", "1_000", "inf", "nan",
]  # fmt: skip
# What Prometheus itself writes: every answer of these is read, its bad values dropped per node.
PROMETHEUS_VALUES = [
    "0.5",
    "NaN",
    "+Inf",
    "-Inf",
    "1e999",
    "-1e308",
    "1e308",
    "1e19",
    "-1e19",
    "-5",
    "0",
    "1e18",
]


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    delay_s: float = 0.0


class _Prometheus:
    """``/api/v1/query`` answering whatever :attr:`answer` holds."""

    def __init__(self) -> None:
        self.answer = Answer()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                a = outer.answer
                if a.delay_s:
                    time.sleep(a.delay_s)
                try:
                    self.send_response(a.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(a.body)))
                    self.end_headers()
                    self.wfile.write(a.body)
                except OSError:
                    pass  # the source gave up first

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @contextmanager
    def running(self) -> Iterator[_Prometheus]:
        thread = threading.Thread(target=self.httpd.serve_forever, name="fuzz-prometheus", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()


def _series(node: Any, value: Any, label: str = "node") -> Obj:
    return {"metric": {label: node, "__name__": METRIC}, "value": [time.time(), value]}


def _vector(result: Any, result_type: Any = "vector") -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": result_type, "result": result}}).encode()


def _sane(value: Any) -> float | None:
    """The value a lone series for a node must leave, None for one that must leave none."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        v = float(value)
    except ValueError:
        return None
    return v if math.isfinite(v) and abs(v) <= METRIC_VALUE_LIMIT else None


def _case(rng: random.Random, names: list[str]) -> tuple[str, Answer, dict[str, Any]]:
    """(what, the answer, node -> the value served alone, for the checks; empty for an answer
    whose values are not all served one per node)."""
    kind = rng.randrange(14)
    values = {n: rng.choice(VALUES if kind == 4 else PROMETHEUS_VALUES) for n in names}
    if kind <= 4:
        return f"values {values}", Answer(body=_vector([_series(n, v) for n, v in values.items()])), values
    if kind == 5:
        dup = rng.choice(names)
        result = [_series(n, v) for n, v in values.items()] + [_series(dup, rng.choice(VALUES))]
        return f"duplicate series for {dup}", Answer(body=_vector(result)), {}
    if kind == 6:
        result = [_series(n, v) for n, v in values.items()]
        del result[0]["metric"]["node"]
        result.append({"metric": {}, "value": [1, "1"]})
        result.append({"value": [1, "1"]})
        result.append(_series(rng.choice([5, None, ["x"], "unknown-node"]), "1"))
        return "missing and odd node labels", Answer(body=_vector(result)), {}
    if kind == 7:
        rt = rng.choice(["matrix", "scalar", "string", None, 5, ""])
        body = _vector([_series(n, v) for n, v in values.items()], rt)
        return f"resultType {rt!r}", Answer(body=body), {}
    if kind == 8:
        odd: Any = rng.choice(
            [
                {"status": "error", "errorType": "bad_data", "error": "parse error"},
                {"status": "success"},
                {"status": "success", "data": None},
                {"status": "success", "data": {"resultType": "vector", "result": None}},
                {"status": "success", "data": {"resultType": "vector", "result": {"a": 1}}},
                {"status": "success", "data": {"resultType": "vector", "result": [1, "x", None]}},
                {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"node": names[0]}}]}},
                {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"node": names[0]}, "value": [1]}]}},
                {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"node": names[0]}, "value": ["x", "1"]}]}},
                {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"node": names[0]}, "value": "1"}]}},
                [],
                None,
                "success",
            ]
        )  # fmt: skip
        return f"wrong types {json.dumps(odd)[:80]}", Answer(body=json.dumps(odd).encode()), {}
    if kind == 9:
        body = _vector([_series(n, v) for n, v in values.items()])
        cut = rng.randrange(len(body))
        return f"truncated at {cut}", Answer(body=body[:cut]), {}
    if kind == 10:
        body = rng.choice([b"", b"not json", b"<html>502</html>", b"\xff\xfe", b"{" * 100000])
        return f"not JSON {body[:20]!r}", Answer(body=body), {}
    if kind == 11:
        n = rng.choice([10_000, 100_000])
        result = [_series(f"other-{i}", "1") for i in range(n)] + [_series(x, v) for x, v in values.items()]
        return f"huge: {n} series", Answer(body=_vector(result)), values
    if kind == 12:
        status = rng.choice([500, 503, 404, 400, 302, 204])
        return f"HTTP {status}", Answer(status=status, body=_vector([])), {}
    return "slow", Answer(body=_vector([_series(n, "1") for n in names]), delay_s=SLOW_S), {}


def _config(url: str) -> Obj:
    return {
        "apiVersion": "ksched.io/v1alpha1",
        "kind": "KschedConfiguration",
        "prometheus": {"url": url, "timeout": f"{TIMEOUT_S}s"},
        "metrics": [
            {
                "name": METRIC,
                "source": "prometheus",
                "query": "node_load",
                "nodeLabel": "node",
                "prefer": "lower",
                "missing": "neutral",
            }
        ],
    }


def _rejected(t: Telemetry) -> float:
    return sum(
        t.registry.get_sample_value("ksched_metric_values_rejected_total", {"metric": METRIC, "reason": r})
        or 0.0
        for r in ("not_finite", "out_of_range")
    )


def _one_answer(
    report: FuzzReport, i: int, what: str, served: dict[str, Any], url: str, nodes: list[Obj], pods: list[Obj]
) -> None:
    """Read the served answer as ``ksched run`` does and schedule with it."""
    config = parse_config(_config(url))
    telemetry = Telemetry()
    store = MetricStore(config.metrics, PrometheusSource(url, TIMEOUT_S), telemetry, lambda: nodes)
    snapshot = build_snapshot(nodes, [])
    store.refresh(config.metrics[0])
    matrix = store.matrix(snapshot)
    values = matrix.values
    if np.any(np.isinf(values)) or np.any(np.abs(np.nan_to_num(values)) > METRIC_VALUE_LIMIT):
        report.defect("metrics", i, f"{what}: a value left past the limit: {values.tolist()}", kind=KIND)
    if served and matrix.metrics:
        column = values[:, 0]
        for row, node in enumerate(snapshot.node_names):
            want = _sane(served.get(node))
            got = None if math.isnan(column[row]) else float(column[row])
            if want != got:
                report.defect(
                    "metrics", i, f"{what}: node {node} has {got}, served {served.get(node)!r}", kind=KIND
                )
        unusable = sum(1 for n in snapshot.node_names if _sane(served.get(n)) is None)
        counted = _rejected(telemetry)
        if counted != unusable:
            report.defect(
                "metrics",
                i,
                f"{what}: {unusable} unusable values served, ksched_metric_values_rejected_total counted {counted:g}",
                kind=KIND,
            )
    result = Engine(config, "ksched").schedule(snapshot, pods, values, metrics=matrix.metrics)
    for p in result.placements:
        if p.node is None:
            report.defect("metrics", i, f"{what}: a pod that fits was left pending: {p.message}", kind=KIND)
            break
    report.count(KIND, "answer read" if matrix.metrics else "answer refused (metric degraded)")


def metrics_answers(report: FuzzReport, count: int, seed: int) -> None:
    """``count`` crafted Prometheus answers through PrometheusSource, MetricStore and the engine."""
    rng = random.Random(f"metrics-{seed}")
    nodes = good_nodes()
    names = [n["metadata"]["name"] for n in nodes]
    pods = [{**p, "metadata": {**p["metadata"], "uid": f"u{i}"}} for i, p in enumerate(fitting_pods())]
    with _Prometheus().running() as prometheus:
        for i in range(count):
            what, answer, served = _case(rng, names)
            prometheus.answer = answer
            try:
                _one_answer(report, i, what, served, prometheus.url, nodes, pods)
            except Exception as exc:  # a traceback is what the fuzzer looks for
                report.raised("metrics", i, what, exc, KIND, "exception")


def _metrics_file(rng: random.Random, names: list[str]) -> tuple[str, bytes]:
    kind = rng.randrange(6)
    if kind <= 2:
        doc: Any = {n: {METRIC: rng.choice(VALUES if kind == 2 else PROMETHEUS_VALUES[-6:])} for n in names}
        text = yaml.safe_dump(doc) if kind else json.dumps(doc)
        return f"values {doc}", text.encode()
    if kind == 3:
        doc = rng.choice(
            [
                {"unknown-node": {METRIC: 1}},
                {names[0]: {"other_metric": 1}},
                {names[0]: [1]},
                {names[0]: None},
                [1, 2],
                "x",
                None,
                {names[0]: {METRIC: {"a": 1}}},
                {names[0]: {METRIC: True}},
            ]
        )
        return f"odd shape {doc!r}", json.dumps(doc).encode()
    if kind == 4:
        body = rng.choice(
            [
                b"\xff\xfe\x00",
                f"{names[0]}:\n  {METRIC}: 1\n{names[0]}:\n  {METRIC}: 2\n".encode(),
                b"a: &a [*a]",
                b"a: &x [1,1,1,1,1,1,1,1,1]\nb: &y [*x,*x,*x,*x,*x,*x,*x,*x,*x]\nc: [*y,*y,*y,*y,*y,*y,*y,*y,*y]\n",
                b"{" * 10000,
                b"",
            ]
        )
        return f"odd text {body[:30]!r}", body
    return "huge", json.dumps({f"n{i}": {METRIC: 1} for i in range(200_000)}).encode()


def metrics_files(report: FuzzReport, count: int, seed: int, workdir: Path, cli: Cli) -> None:
    """``count`` odd ``--metrics`` files through ``simulate`` in process."""
    rng = random.Random(f"metrics-files-{seed}")
    nodes, pods = good_nodes(), fitting_pods()
    names = [n["metadata"]["name"] for n in nodes]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    cluster, config, metrics = workdir / "m-cluster.json", workdir / "m-config.yaml", workdir / "m-values"
    cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [*nodes, namespace, *pods]}))
    config.write_text(yaml.safe_dump(_config("http://127.0.0.1:9")))
    for i in range(count):
        what, body = _metrics_file(rng, names)
        metrics.write_bytes(body)
        result = call_simulate(cli, cluster, ["--config", str(config), "--metrics", str(metrics)])
        code = check_simulate(report, "metrics file", i, result, len(pods), kind=KIND)
        report.count(KIND, f"file: simulate exit {code if code is not None else 'exception'}")
        if code == 1:
            report.defect("metrics file", i, f"{what}: a pod that fits was left pending", kind=KIND)
