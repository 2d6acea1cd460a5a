"""The ``connections`` kind: hostile clients (:mod:`~.connections`) held against ksched's two
servers, started in process as ``ksched run`` starts them: the HTTP server (``/healthz``,
``/metrics``) and the webhook (TLS). While an attack is held for HOLD_S, a well-formed client
(``GET /healthz``, or a valid AdmissionReview) is timed again and again: each must be
answered 200 within WELL_FORMED_S, and the p99 is reported per attack. After the attack's
clients close, the server's ``serving`` count must be back to 0 within SETTLE_S.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import socket
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from ksched.bench.fuzz import connections as c
from ksched.bench.fuzz.report import FuzzReport
from ksched.bench.fuzz.webhook import review
from ksched.config import WebhookConfig
from ksched.loop import server as server_module
from ksched.loop.scheduling.webhook import Webhook
from ksched.loop.server import BackgroundServer, HealthServer

KIND = "connections"
HOST = "127.0.0.1"
# How long each attack is held while the well-formed client is timed: past the servers'
# handshake timeout, so that the keeper's re-opened clients are part of it.
HOLD_S = 6.0
WELL_FORMED_S = 1.0
SETTLE_S = 5.0
# Clients per attack, and in a flood (past the servers' MAX_CONNECTIONS).
CLIENTS = 40

Attack = Callable[[int, int], contextlib.AbstractContextManager[list[socket.socket]]]


def _attacks(tls: bool) -> list[tuple[str, Attack]]:
    flood = server_module.MAX_CONNECTIONS + 32
    path = "/mutate" if tls else "/metrics"
    common: list[tuple[str, Attack]] = [
        ("idle", lambda port, n: c.idle_clients(HOST, port, n)),
        ("half-sent headers", lambda port, n: c.half_sent_requests(HOST, port, n, path, tls=tls)),
        ("short body", lambda port, n: c.short_bodies(HOST, port, n, path, tls=tls)),
        ("slow", lambda port, n: c.slow_clients(HOST, port, n, path, tls=tls)),
        (f"flood of {flood} idle", lambda port, n: c.idle_clients(HOST, port, flood)),
        (
            f"flood of {flood} half-sent",
            lambda port, n: c.half_sent_requests(HOST, port, flood, path, tls=tls),
        ),
    ]
    if tls:
        common.insert(1, ("mid TLS handshake", lambda port, n: c.mid_handshake_clients(HOST, port, n)))
    return common


def _attack_once(
    report: FuzzReport, name: str, attack: Attack, server: BackgroundServer, request: Callable[[], int]
) -> None:
    before = report.kind_defects[KIND]
    printed = io.StringIO()
    # socketserver prints a failed connection's traceback to stderr: each is a defect.
    with contextlib.redirect_stderr(printed), attack(server.port, CLIENTS) as held:
        opened = len(held)
        timed = c.timed_requests(request, HOLD_S)
    seconds = [s for s, _ in timed]
    report.p99_s[name] = max(report.p99_s.get(name, 0.0), c.p99(seconds))
    slow = [f"{s:.2f} s" for s, status in timed if s > WELL_FORMED_S]
    failed = [status for _, status in timed if status != 200]
    if slow or failed:
        report.defect(
            "connections",
            None,
            f"{name} ({opened} held): {len(timed)} well-formed requests, {len(failed)} not answered 200 "
            f"(statuses {sorted(set(failed))}), {len(slow)} slower than {WELL_FORMED_S} s "
            f"(p99 {c.p99(seconds):.2f} s)",
            kind=KIND,
        )
    deadline = time.monotonic() + SETTLE_S
    while server.httpd.serving and time.monotonic() < deadline:
        time.sleep(0.05)
    if server.httpd.serving:
        report.defect(
            "connections", None, f"{name}: serving {server.httpd.serving} after the clients closed", kind=KIND
        )
    _tracebacks(report, name, printed.getvalue())
    report.count(KIND, "passed" if report.kind_defects[KIND] == before else "failed")


def _tracebacks(report: FuzzReport, name: str, printed: str) -> None:
    lines = printed.splitlines()
    errors = collections.Counter(
        next((x.strip() for x in lines[i + 1 :] if x and not x.startswith(" ")), "(truncated)")
        for i, line in enumerate(lines)
        if line.startswith("Traceback (most recent call last)")
    )
    for error, n in errors.items():
        report.defect("connections", None, f"{name}: the server printed {n} tracebacks: {error}", kind=KIND)


def connections_phase(report: FuzzReport, rounds: int) -> None:
    """``rounds`` attacks, taken in turn from the HTTP server's and the webhook's lists."""
    health = HealthServer(f"{HOST}:0", CollectorRegistry(), lambda: [])
    config = WebhookConfig(
        enabled=True, address=f"{HOST}:0", hosts=(HOST,), configuration_name=None, secret_name=None
    )
    hook = Webhook(config, "ksched", lambda pod: True, None)  # type: ignore[arg-type]
    body = json.dumps(review()).encode()
    plans = [
        (f"http {name}", attack, health, lambda: c.get(HOST, health.port, "/healthz", 5.0))
        for name, attack in _attacks(tls=False)
    ] + [
        (f"webhook {name}", attack, hook, lambda: c.post(HOST, hook.port, "/mutate", body, 5.0))
        for name, attack in _attacks(tls=True)
    ]
    health.start()
    hook.start()
    try:
        for i in range(rounds):
            name, attack, server, request = plans[i % len(plans)]
            _attack_once(report, name, attack, server, request)
    finally:
        health.stop()
        hook.stop()
