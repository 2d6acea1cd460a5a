"""`ksched bench --fuzz`'s offline kinds, small and seeded (CI's version; the live phase's odd
nodes are in tests/integration/test_fuzz.py): odd nodes through simulate, crafted Prometheus
answers and metric files, mutated configurations, and hostile clients at the real HTTP server
and webhook (timeouts lowered so an attack is held past them in a second or two)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from ksched.bench.fuzz import connections as c
from ksched.bench.fuzz import floods
from ksched.bench.fuzz.configs import configs_phase
from ksched.bench.fuzz.metrics import metrics_answers, metrics_files
from ksched.bench.fuzz.nodes import generate_nodes, nodes_simulate
from ksched.bench.fuzz.report import FuzzReport
from ksched.bench.fuzz.run import parse_kinds, share_out
from ksched.commands.cli import main
from ksched.errors import KschedError
from ksched.loop import server as server_module
from ksched.loop.server import HealthServer


def test_odd_nodes_through_simulate(tmp_path: Path) -> None:
    report = FuzzReport(3, 0)
    nodes_simulate(report, generate_nodes(60, seed=3), tmp_path, main)
    assert report.defect_count == 0, report.render()
    # Some odd nodes are read (and the good nodes' pods still placed), some refuse the file.
    assert report.cases["nodes"] == 60
    assert report.results["nodes"]["simulate exit 0"] > 0 and report.results["nodes"]["simulate exit 2"] > 0


def test_crafted_prometheus_answers_and_metric_files(tmp_path: Path) -> None:
    report = FuzzReport(3, 0)
    metrics_answers(report, 60, seed=3)
    metrics_files(report, 30, seed=3, workdir=tmp_path, cli=main)
    assert report.defect_count == 0, report.render()
    results = report.results["metrics"]
    assert report.cases["metrics"] == 90
    assert results["answer read"] > 0 and results["answer refused (metric degraded)"] > 0
    assert results["file: simulate exit 0"] > 0 and results["file: simulate exit 2"] > 0


def test_mutated_configurations(tmp_path: Path) -> None:
    report = FuzzReport(3, 0)
    configs_phase(report, 150, seed=3, workdir=tmp_path, cli=main)
    assert report.defect_count == 0, report.render()
    assert report.cases["configs"] == 150
    accepted = sum(n for r, n in report.results["configs"].items() if r.startswith("accepted"))
    assert 0 < accepted < 150


def test_attacks_on_both_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    # Lowered so each attack is held past the servers' timeouts: the keeper re-opens closed clients.
    monkeypatch.setattr(server_module, "HANDSHAKE_TIMEOUT_S", 0.5)
    monkeypatch.setattr(server_module, "READ_TIMEOUT_S", 0.7)
    monkeypatch.setattr(floods, "HOLD_S", 1.5)
    # Each well-formed webhook request pays a TLS handshake on two cores that the attack's own
    # handshakes share: the bench holds it to 1 s, this test to what no starved client meets
    # (a client past a full server is closed unanswered: status 0, not a late 200).
    monkeypatch.setattr(floods, "WELL_FORMED_S", 5.0)
    report = FuzzReport(3, 0)
    # Every attack on both servers, the floods past MAX_CONNECTIONS included.
    plans = len(floods._attacks(tls=False)) + len(floods._attacks(tls=True))
    floods.connections_phase(report, plans)
    assert report.defect_count == 0, report.render()
    assert report.results["connections"]["passed"] == plans
    assert all(p99 < 5.0 for p99 in report.p99_s.values())


def test_a_well_formed_client_is_answered_during_a_flood(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_module, "MAX_CONNECTIONS", 8)
    server = HealthServer("127.0.0.1:0", CollectorRegistry(), lambda: [])
    server.start()
    try:
        with c.idle_clients("127.0.0.1", server.port, 12):
            timed = c.timed_requests(lambda: c.get("127.0.0.1", server.port, "/healthz", 5.0), 1.5)
    finally:
        server.stop()
    # Before the server made room by closing the longest silent client, each of these waited
    # FULL_WAIT_S and was closed unanswered (status 0).
    assert timed and all(status == 200 and s < 5.0 for s, status in timed), timed


def test_held_clients_are_reopened_after_the_server_closes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_module, "READ_TIMEOUT_S", 0.3)
    server = HealthServer("127.0.0.1:0", CollectorRegistry(), lambda: [])
    server.start()
    try:
        with c.half_sent_requests("127.0.0.1", server.port, 5) as held:
            first = {s.getsockname() for s in held}
            time.sleep(1.5)
            assert len(held) == 5 and not first & {s.getsockname() for s in held}, "every one re-opened"
            assert all(isinstance(s, socket.socket) for s in held)
        with c.idle_clients("127.0.0.1", server.port, 3, keep=False) as held:
            assert len(held) == 3
        deadline = time.monotonic() + 3
        while server.httpd.serving and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.httpd.serving == 0
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("text", "specs", "want"),
    [
        ("", 10000, {"pods": 6000, "nodes": 1500, "metrics": 1000, "configs": 1480, "connections": 20}),
        ("nodes,configs", 100, {"nodes": 50, "configs": 50}),
        ("pods=7,connections", 100, {"pods": 7, "connections": 100}),
    ],
)
def test_fuzz_kinds_share_the_specs(text: str, specs: int, want: dict[str, int]) -> None:
    assert share_out(specs, parse_kinds(text)) == want


def test_an_unknown_fuzz_kind_is_refused() -> None:
    with pytest.raises(KschedError, match="'disks' is not one of pods, nodes"):
        parse_kinds("pods,disks")
