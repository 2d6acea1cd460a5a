"""Slow and silent clients at ksched's servers (issue 48): the webhook set TLS up on the thread
that accepts connections, with no timeout, so one client that connected and sent nothing made
every AdmissionReview time out; the HTTP server (/healthz, /metrics) held a thread for each
half-sent request forever. Real sockets on 127.0.0.1, with the timeouts lowered."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pytest
from prometheus_client import CollectorRegistry

from ksched.bench.fuzz.webhook import review
from ksched.config import WebhookConfig
from ksched.loop import server as server_module
from ksched.loop.scheduling.webhook import Webhook
from ksched.loop.server import HealthServer

IDLE_CLIENTS = 20
HALF_SENT = 100
# The slack a busy machine may need past a timeout before the server has acted on it.
MARGIN_S = 3.0


def wait_until(done: Callable[[], bool], within: float) -> bool:
    deadline = time.monotonic() + within
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before]


def connect(clients: list[socket.socket], port: int, count: int, send: bytes = b"") -> None:
    """Open ``count`` connections into ``clients`` (so a failure leaves them to be closed)."""
    for _ in range(count):
        clients.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        clients[-1].sendall(send)


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed this connection (EOF or reset), without waiting."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


@pytest.fixture
def clients() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


class Server(Protocol):
    port: int

    def start(self) -> None: ...

    def stop(self) -> None: ...


@pytest.fixture
def serving(clients: list[socket.socket]) -> Iterator[Callable[[Callable[[], Any]], Any]]:
    """``serving(make)``: the server ``make`` builds, started, and stopped after the test
    (after its clients are closed: the old webhook's accept loop was stuck in their
    handshakes until they closed)."""
    started: list[Server] = []

    def start(make: Callable[[], Any]) -> Any:
        server = make()
        server.start()
        started.append(server)
        return server

    yield start
    for sock in clients:
        sock.close()
    for server in started:
        server.stop()


@pytest.fixture
def webhook(serving: Callable[[Callable[[], Any]], Any]) -> Callable[[], Webhook]:
    config = WebhookConfig(
        enabled=True, address="127.0.0.1:0", hosts=("127.0.0.1",), configuration_name=None, secret_name=None
    )
    return lambda: serving(lambda: Webhook(config, "ksched", lambda pod: True, None))  # type: ignore[arg-type]


def post_review(port: int, timeout: float) -> tuple[int, Any]:
    """(status, the AdmissionReview's response)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=context)
    try:
        conn.request("POST", "/mutate", json.dumps(review()), {"Content-Type": "application/json"})
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read())["response"]
    finally:
        conn.close()


@pytest.mark.parametrize("idle", [1, IDLE_CLIENTS])
def test_idle_tcp_clients_do_not_delay_a_review(
    idle: int, webhook: Callable[[], Webhook], clients: list[socket.socket]
) -> None:
    hook = webhook()
    connect(clients, hook.port, idle)
    started = time.monotonic()
    try:
        status, answer = post_review(hook.port, timeout=2.0)
    except TimeoutError:
        pytest.fail(f"no answer in 2 s with {idle} idle clients connected")
    assert status == 200
    assert (answer["uid"], answer["allowed"], answer["patchType"]) == ("fuzz-uid", True, "JSONPatch")
    assert time.monotonic() - started < 2.0


def test_an_idle_client_is_closed_after_the_handshake_timeout(
    monkeypatch: pytest.MonkeyPatch, webhook: Callable[[], Webhook], clients: list[socket.socket]
) -> None:
    monkeypatch.setattr(server_module, "HANDSHAKE_TIMEOUT_S", 0.5)
    hook = webhook()
    connect(clients, hook.port, IDLE_CLIENTS)
    assert wait_until(lambda: all(closed_by_server(s) for s in clients), 0.5 + MARGIN_S)
    assert post_review(hook.port, timeout=2.0)[0] == 200


@pytest.fixture
def health(serving: Callable[[Callable[[], Any]], Any]) -> Callable[[], HealthServer]:
    return lambda: serving(lambda: HealthServer("127.0.0.1:0", CollectorRegistry(), lambda: []))


def healthz(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2.0)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    finally:
        conn.close()


def test_half_sent_requests_hold_no_thread_past_the_read_timeout(
    monkeypatch: pytest.MonkeyPatch, health: Callable[[], HealthServer], clients: list[socket.socket]
) -> None:
    read_timeout = 3.0
    monkeypatch.setattr(server_module, "READ_TIMEOUT_S", read_timeout)
    server = health()
    before = set(threading.enumerate())
    connect(clients, server.port, HALF_SENT, b"GET /heal")
    assert wait_until(lambda: server.httpd.serving == HALF_SENT, read_timeout), "each served, for now"
    assert healthz(server.port) == 200, "answered meanwhile"
    assert wait_until(lambda: new_threads(before) == [], read_timeout + MARGIN_S), (
        f"{len(new_threads(before))} threads still held"
    )
    assert all(closed_by_server(s) for s in clients)
    assert healthz(server.port) == 200


def test_stopping_ends_every_open_connection_at_once(
    health: Callable[[], HealthServer], clients: list[socket.socket]
) -> None:
    # A stopped server left each connection's thread to its read timeout: threads that
    # answered, and logged, after the server was gone, racing whatever came next.
    server = health()
    before = set(threading.enumerate())
    connect(clients, server.port, IDLE_CLIENTS // 2)  # silent
    connect(clients, server.port, IDLE_CLIENTS // 2, b"GET /heal")  # half sent
    assert healthz(server.port) == 200
    assert wait_until(lambda: server.httpd.serving == IDLE_CLIENTS, MARGIN_S), "each served, for now"
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < server_module.READ_TIMEOUT_S / 2
    assert server.httpd.serving == 0
    assert wait_until(lambda: new_threads(before) == [], MARGIN_S)
    assert all(closed_by_server(s) for s in clients)


def test_stopping_closes_a_review_whose_body_never_comes(
    monkeypatch: pytest.MonkeyPatch, webhook: Callable[[], Webhook], clients: list[socket.socket]
) -> None:
    # Past its headers a connection is being answered, not waiting on its client: the drain
    # waits DRAIN_S for it, then closes it.
    monkeypatch.setattr(server_module, "DRAIN_S", 0.5)
    hook = webhook()
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    raw = socket.create_connection(("127.0.0.1", hook.port), timeout=5)
    clients.append(raw)
    tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
    tls.sendall(
        b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    )
    assert wait_until(lambda: hook.httpd.serving == 1, MARGIN_S)
    time.sleep(0.2)  # its headers read: the thread now waits for the body
    started = time.monotonic()
    hook.stop()
    assert time.monotonic() - started < 0.5 + server_module.FORCE_S + MARGIN_S
    assert hook.httpd.serving == 0


def test_connections_served_at_once_are_bounded(
    monkeypatch: pytest.MonkeyPatch, health: Callable[[], HealthServer], clients: list[socket.socket]
) -> None:
    bound, read_timeout = 8, 2.0
    monkeypatch.setattr(server_module, "MAX_CONNECTIONS", bound)
    monkeypatch.setattr(server_module, "READ_TIMEOUT_S", read_timeout)
    monkeypatch.setattr(
        server_module, "FULL_WAIT_S", 0.5
    )  # time for an evicted connection's thread to free its slot
    server = health()
    before = set(threading.enumerate())
    connect(clients, server.port, 3 * bound, b"GET /heal")
    peak = 0

    def all_closed() -> bool:
        nonlocal peak
        # Connections served at once (a thread may outlive its connection by a moment, so
        # the threads alive are not the measure).
        peak = max(peak, server.httpd.serving)
        return all(closed_by_server(s) for s in clients)

    assert wait_until(all_closed, 3 * read_timeout + MARGIN_S), "every connection ends"
    assert peak == bound, f"{peak} connections served at once"
    assert wait_until(lambda: new_threads(before) == [], MARGIN_S)
    assert healthz(server.port) == 200


def test_a_document_is_given_the_requests_query() -> None:
    server = HealthServer(
        "127.0.0.1:0", CollectorRegistry(), lambda: [], {"/status": lambda query: {"asked": query}}
    )
    server.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.request("GET", "/status?pod=default%2Fweb-0")
        reply = conn.getresponse()
        assert reply.status == 200
        assert json.loads(reply.read()) == {"asked": {"pod": "default/web-0"}}
        conn.request("GET", "/status")
        assert json.loads(conn.getresponse().read()) == {"asked": {}}
    finally:
        server.stop()


def test_a_document_that_fails_answers_500_and_the_server_serves_on() -> None:
    def broken(query: dict[str, str]) -> object:
        raise ValueError("cannot build it")

    server = HealthServer("127.0.0.1:0", CollectorRegistry(), lambda: [], {"/status": broken})
    server.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.request("GET", "/status?pod=a%2Fb")
        reply = conn.getresponse()
        assert (reply.status, json.loads(reply.read())) == (500, {"error": "see ksched's log"})
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
    finally:
        server.stop()
