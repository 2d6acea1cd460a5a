"""The write path of binds and Scheduled events: the writer threads' outcomes and the
persistent connection they write through."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

import ksched.loop.client as client_module
from ksched.loop.client import ApiUnavailableError, Connection, Kube, Response
from ksched.loop.scheduling.binder import Binder, Outcome
from ksched.loop.telemetry import Telemetry
from tests.unit.wire_bodies import body as wire_body

# Appended to a scripted answer: the server closes the connection after sending it.
CLOSE = b"<close>"
POD = {"metadata": {"name": "p", "namespace": "default", "uid": "u1"}, "spec": {}}


class Api:
    """Answers binds with ``bind_status``; records every write and what came before it."""

    def __init__(self, bind_status: int = 201, event_status: int = 201) -> None:
        self.bind_status = bind_status
        self.event_status = event_status
        self.log: list[str] = []
        self.sent: list[tuple[str, str, Any]] = []
        self.lock = threading.Lock()
        api = self

        class Writes:
            def acquire(self) -> None:
                api.log.append("token")

        self.writes = Writes()

    def connection(self) -> Api:
        return self

    def request(self, method: str, path: str, *, raw: bytes | None = None, **kw: Any) -> Response:
        if kw.get("rate_limited"):
            self.writes.acquire()
        with self.lock:
            self.log.append(f"{method} {path.rsplit('/', 1)[-1]}")
            self.sent.append((method, path, wire_body(raw) if raw else kw.get("body")))
        status = self.bind_status if path.endswith("/binding") else self.event_status
        return Response(status, b"{}")


def bind(api: Api, is_leader: Callable[[], bool] = lambda: True, workers: int = 4) -> Outcome:
    outcomes: list[Outcome] = []
    binder = Binder(api, workers, "ksched-a", Telemetry(), is_leader)  # type: ignore[arg-type]
    binder.bind(POD, "node-1", outcomes.append)
    binder.shutdown()
    (outcome,) = outcomes
    return outcome


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (201, Outcome.BOUND),
        (409, Outcome.CONFLICT),
        (404, Outcome.GONE),
        (500, Outcome.ERROR),
        (503, Outcome.ERROR),
        (429, Outcome.ERROR),
        (403, Outcome.ERROR),
    ],
)
def test_each_answer_to_a_bind_is_its_outcome(status: int, outcome: Outcome) -> None:
    api = Api(bind_status=status)
    assert bind(api) is outcome
    (binding,) = [body for _, path, body in api.sent if path.endswith("/binding")]
    assert binding["metadata"] == {"name": "p", "namespace": "default", "uid": "u1"}
    assert binding["target"]["name"] == "node-1"
    events = [body for _, path, body in api.sent if path.endswith("/events")]
    if outcome is Outcome.BOUND:
        (event,) = events
        assert event["reason"] == "Scheduled"
        assert event["note"] == "Successfully assigned default/p to node-1"
        assert event["reportingInstance"] == "ksched-a"
    else:
        assert not events, "a bind that failed has no Scheduled event"


def test_the_rate_limit_is_waited_out_before_the_lease_is_checked_and_the_bind_sent() -> None:
    api = Api()
    order = api.log

    def is_leader() -> bool:
        order.append("lease")
        return True

    assert bind(api, is_leader) is Outcome.BOUND
    assert order[:3] == ["token", "lease", "POST binding"]
    # The event takes a token of its own.
    assert order[3:] == ["token", "POST events"]


def test_a_replica_that_is_not_leader_writes_nothing() -> None:
    api = Api()
    assert bind(api, lambda: False) is Outcome.NOT_LEADER
    assert api.sent == []


def test_an_unreachable_api_server_is_an_error_and_the_writer_goes_on() -> None:
    class Down(Api):
        def request(self, method: str, path: str, **kw: Any) -> Response:
            if path.endswith("/binding") and not self.sent:
                self.sent.append((method, path, None))
                raise ApiUnavailableError("connection refused")
            return super().request(method, path, **kw)

    api = Down()
    outcomes: list[Outcome] = []
    binder = Binder(api, 1, "ksched-a", Telemetry(), lambda: True)  # type: ignore[arg-type]
    binder.bind(POD, "node-1", outcomes.append)
    binder.bind({**POD, "metadata": {**POD["metadata"], "name": "q"}}, "node-2", outcomes.append)
    binder.shutdown()
    assert outcomes == [Outcome.ERROR, Outcome.BOUND]


def test_binds_go_before_events_waiting_for_the_same_writer() -> None:
    api = Api()
    gate = threading.Event()
    outcomes: list[Outcome] = []
    binder = Binder(api, 1, "ksched-a", Telemetry(), lambda: True)  # type: ignore[arg-type]
    # The one writer is held in the first bind's callback while more binds queue up.
    binder.bind(POD, "node-1", lambda o: (outcomes.append(o), gate.wait(5)))
    for i in range(3):
        binder.bind({**POD, "metadata": {**POD["metadata"], "name": f"q{i}"}}, "node-2", outcomes.append)
    gate.set()
    binder.shutdown()
    writes = [line for line in api.log if line.startswith("POST")]
    assert writes == ["POST binding"] * 4 + ["POST events"] * 4
    assert outcomes == [Outcome.BOUND] * 4


def test_a_scheduled_event_refused_as_unavailable_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    import ksched.loop.scheduling.binder as binder_module

    monkeypatch.setattr(binder_module, "EVENT_RETRY_S", 0.01)

    class Flaky(Api):
        tries = 0

        def request(self, method: str, path: str, **kw: Any) -> Response:
            if path.endswith("/events"):
                self.tries += 1
                if self.tries == 1:
                    return Response(503, b"")
            return super().request(method, path, **kw)

    api = Flaky()
    assert bind(api) is Outcome.BOUND
    assert api.tries == 2
    assert [body["reason"] for _, path, body in api.sent if path.endswith("/events")] == ["Scheduled"]


# -- the connection ---------------------------------------------------------------------


class Server:
    """An HTTP/1.1 server on a local port that answers from a script and records requests:
    (connection number, request head lines, body)."""

    def __init__(self, answers: list[bytes | None], port: int = 0) -> None:
        self.answers = answers
        self.requests: list[tuple[int, list[str], bytes]] = []
        self.sock = socket.create_server(("127.0.0.1", port))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        # Set each time the server has closed a connection.
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn, self.connections), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        try:
            self._answer(conn, number)
        finally:
            self.closed.set()

    def _answer(self, conn: socket.socket, number: int) -> None:
        buf = b""
        with conn:
            while self.answers:
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                length = next(
                    (
                        int(v)
                        for k, _, v in (x.partition(":") for x in lines)
                        if k.lower() == "content-length"
                    ),
                    0,
                )
                while len(buf) < length:
                    buf += conn.recv(65536)
                self.requests.append((number, lines, buf[:length]))
                buf = buf[length:]
                answer = self.answers.pop(0)
                if answer is None:
                    return  # close without answering
                conn.sendall(answer.removesuffix(CLOSE))
                if answer.endswith(CLOSE):
                    return  # answer, then close while the client is idle

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server() -> Iterator[Callable[[list[bytes | None]], tuple[Server, Kube]]]:
    servers: list[Server] = []

    def start(answers: list[bytes | None]) -> tuple[Server, Kube]:
        s = Server(answers)
        servers.append(s)
        configuration = client.Configuration()
        configuration.host = f"http://127.0.0.1:{s.port}"
        configuration.api_key = {"BearerToken": "first"}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return s, Kube(configuration)

    yield start
    for s in servers:
        s.close()


def created(body: bytes) -> bytes:
    return b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


def test_one_connection_carries_every_write_with_the_current_token(
    server: Callable[[list[bytes | None]], tuple[Server, Kube]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "AUTH_REFRESH_S", 0.0)
    s, kube = server([created(b'{"n":1}'), created(b'{"n":2}'), created(b"")])
    tokens = iter(["first", "second", "third"])

    def refresh(configuration: client.Configuration) -> None:
        configuration.api_key["BearerToken"] = next(tokens)

    kube.configuration.refresh_api_key_hook = refresh
    conn = kube.connection()
    assert isinstance(conn, Connection)
    answers = [conn.request("POST", f"/api/v1/x/{i}", raw=b'{"i":%d}' % i) for i in range(3)]
    conn.close()
    assert [(a.status, a.data) for a in answers] == [(201, b'{"n":1}'), (201, b'{"n":2}'), (201, b"")]
    assert s.connections == 1
    assert [r[1][0] for r in s.requests] == [f"POST /api/v1/x/{i} HTTP/1.1" for i in range(3)]
    assert [r[2] for r in s.requests] == [b'{"i":0}', b'{"i":1}', b'{"i":2}']
    auth = [next(h for h in r[1] if h.lower().startswith("authorization:")) for r in s.requests]
    assert auth == [
        "authorization: Bearer first",
        "authorization: Bearer second",
        "authorization: Bearer third",
    ]


def test_the_token_is_read_from_the_configuration_at_most_once_a_refresh_interval(
    server: Callable[[list[bytes | None]], tuple[Server, Kube]], monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]
    monkeypatch.setattr(client_module.time, "monotonic", lambda: now[0])
    s, kube = server([created(b"{}")] * 3)
    calls = []

    def refresh(configuration: client.Configuration) -> None:
        calls.append(now[0])
        configuration.api_key["BearerToken"] = f"t{len(calls)}"

    kube.configuration.refresh_api_key_hook = refresh
    conn = kube.connection()
    assert isinstance(conn, Connection)
    conn.request("POST", "/a", raw=b"{}")
    now[0] += client_module.AUTH_REFRESH_S / 2
    conn.request("POST", "/b", raw=b"{}")
    now[0] += client_module.AUTH_REFRESH_S
    conn.request("POST", "/c", raw=b"{}")
    auth = [next(h for h in r[1] if h.lower().startswith("authorization:")) for r in s.requests]
    assert auth == ["authorization: Bearer t1", "authorization: Bearer t1", "authorization: Bearer t2"]


def test_a_chunked_answer_is_read_whole(server: Callable[[list[bytes | None]], tuple[Server, Kube]]) -> None:
    chunked = b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n"
    s, kube = server([chunked, created(b"{}")])
    conn = kube.connection()
    assert isinstance(conn, Connection)
    r = conn.request("POST", "/a", raw=b"{}")
    assert (r.status, r.data) == (409, b"hello world")
    assert conn.request("POST", "/b", raw=b"{}").status == 201
    assert s.connections == 1


def test_a_connection_the_server_closed_is_opened_again(
    server: Callable[[list[bytes | None]], tuple[Server, Kube]],
) -> None:
    closing = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
    s, kube = server([closing, created(b"{}")])
    conn = kube.connection()
    assert isinstance(conn, Connection)
    assert conn.request("POST", "/a", raw=b"{}").status == 200
    assert conn.request("POST", "/b", raw=b"{}").status == 201
    assert s.connections == 2


def test_a_connection_closed_while_idle_is_opened_again(
    server: Callable[[list[bytes | None]], tuple[Server, Kube]], monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]
    monkeypatch.setattr(client_module.time, "monotonic", lambda: now[0])
    s, kube = server([created(b"{}") + CLOSE, created(b"{}")])
    conn = kube.connection()
    assert isinstance(conn, Connection)
    assert conn.request("POST", "/a", raw=b"{}").status == 201
    now[0] += client_module.IDLE_CHECK_S + 1
    assert s.closed.wait(5), "the server closed the connection"
    assert conn.request("POST", "/b", raw=b"{}").status == 201
    assert s.connections == 2


def test_no_answer_is_unavailable_and_the_next_request_reconnects(
    server: Callable[[list[bytes | None]], tuple[Server, Kube]],
) -> None:
    s, kube = server([None, created(b"{}")])
    conn = kube.connection()
    assert isinstance(conn, Connection)
    with pytest.raises(ApiUnavailableError, match="POST /a"):
        conn.request("POST", "/a", raw=b"{}")
    assert conn.request("POST", "/b", raw=b"{}").status == 201
    assert s.connections == 2


def test_a_closed_port_is_unavailable() -> None:
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    conn = Kube(configuration).connection()
    assert isinstance(conn, Connection)
    with pytest.raises(ApiUnavailableError):
        conn.request("POST", "/a", raw=b"{}")


def test_a_proxy_in_the_way_sends_writes_through_the_clients_pool() -> None:
    configuration = client.Configuration()
    configuration.host = "https://10.0.0.1:6443"
    configuration.proxy = "http://proxy.internal:3128"
    kube = Kube(configuration)
    assert kube.connection() is kube


def test_pipelined_requests_get_their_own_answers_and_those_cut_off_are_unavailable(
    server: Callable[[list[bytes | None]], tuple[Server, Kube]],
) -> None:
    closing = b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
    s, kube = server([created(b'{"a":1}'), closing + CLOSE, created(b"{}")])
    conn = kube.connection()
    assert isinstance(conn, Connection)
    answers = conn.pipeline([("POST", f"/p{i}", b"{}") for i in range(3)])
    assert [(a.status, a.data) for a in answers[:2] if isinstance(a, Response)] == [
        (201, b'{"a":1}'),
        (404, b"{}"),
    ]
    assert isinstance(answers[2], ApiUnavailableError)
    assert "POST /p2" in str(answers[2])
    # The next request goes out on a new connection.
    assert conn.request("POST", "/q", raw=b"{}").status == 201
    assert s.connections == 2


def status_line(code: int) -> bytes:
    return b"HTTP/1.1 %d X\r\nContent-Length: 2\r\n\r\n{}" % code


def pods(n: int) -> list[dict[str, Any]]:
    return [{"metadata": {"name": f"p{i}", "namespace": "default", "uid": f"u{i}"}} for i in range(n)]


def test_binds_sent_together_each_get_their_outcome_and_only_the_bound_pod_an_event(
    server: Callable[[list[bytes | None]], tuple[Server, Kube]],
) -> None:
    s, kube = server([status_line(c) for c in (201, 409, 404, 503, 201)])
    binder = Binder(kube, 1, "ksched-a", Telemetry(), lambda: True)
    outcomes: dict[str, Outcome] = {}
    # The writer waits for the lock the binder's queue is guarded by: it takes all four at once.
    with binder._wake:
        for pod in pods(4):
            binder.bind(pod, "n1", lambda o, name=pod["metadata"]["name"]: outcomes.__setitem__(name, o))
    binder.shutdown()
    assert outcomes == {"p0": Outcome.BOUND, "p1": Outcome.CONFLICT, "p2": Outcome.GONE, "p3": Outcome.ERROR}
    lines = [r[1][0] for r in s.requests]
    assert lines[:4] == [f"POST /api/v1/namespaces/default/pods/p{i}/binding HTTP/1.1" for i in range(4)]
    assert lines[4:] == ["POST /apis/events.k8s.io/v1/namespaces/default/events HTTP/1.1"]
    assert wire_body(s.requests[4][2])["regarding"]["name"] == "p0"
    # Binds and events go as protobuf, as kube-scheduler sends them, and ask for protobuf back.
    for _, head, _ in s.requests:
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}
        assert headers["content-type"] == "application/vnd.kubernetes.protobuf"
        assert headers["accept"] == "application/vnd.kubernetes.protobuf, application/json"
    assert s.connections == 1


def test_binds_sent_together_after_the_lease_was_lost_write_nothing(
    server: Callable[[list[bytes | None]], tuple[Server, Kube]],
) -> None:
    s, kube = server([status_line(201)] * 4)
    binder = Binder(kube, 1, "ksched-a", Telemetry(), lambda: False)
    outcomes: list[Outcome] = []
    with binder._wake:
        for pod in pods(4):
            binder.bind(pod, "n1", outcomes.append)
    binder.shutdown()
    assert outcomes == [Outcome.NOT_LEADER] * 4
    assert s.requests == []


def test_a_victim_already_gone_gets_no_preempted_event() -> None:
    # The chaos soak found ksched posting "Preempted by pod X" on victims an earlier preemption had
    # already deleted (its watch lagging after an API server restart), naming preemptors that took
    # nothing from them. Upstream's executor stops at NotFound without an event; so does ksched.
    statuses = {
        ("PATCH", "present/status"): 200,
        ("DELETE", "present"): 200,
        ("PATCH", "gone/status"): 404,
        ("PATCH", "raced/status"): 200,
        ("DELETE", "raced"): 404,
    }
    sent: list[tuple[str, str, Any]] = []

    class Kube(Api):
        def request(self, method: str, path: str, *, raw: bytes | None = None, **kw: Any) -> Response:
            body = wire_body(raw) if raw else kw.get("body")
            sent.append((method, path, body))
            tail = "/".join(path.rsplit("/", 2)[-2:]) if path.endswith("/status") else path.rsplit("/", 1)[-1]
            return Response(statuses.get((method, tail), 201), b"{}")

    binder = Binder(Kube(), 2, "ksched-a", Telemetry(), lambda: True)  # type: ignore[arg-type]
    victims = [("default", name, f"uid-{name}") for name in ("present", "gone", "raced")]
    written: list[bool] = []
    binder.preempt(POD, "node-1", victims, written.append)
    binder.shutdown()
    assert written == [True], "the caller hears that the nomination was written"
    deletes = [path.rsplit("/", 1)[-1] for method, path, _ in sent if method == "DELETE"]
    assert deletes == ["present", "raced"], "a victim whose condition patch found it gone is not deleted"
    events = [body for method, path, body in sent if path.endswith("/events")]
    assert [(e["reason"], e["regarding"]["name"]) for e in events] == [("Preempted", "present")]
    assert events[0]["note"] == "Preempted by pod u1 on node node-1"


def test_each_bind_is_sent_alone_right_after_its_lease_check(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pipelined binds were read by the API server only as the requests ahead of them on the
    # connection were answered: the full chaos soak saw 14 received 9 s after the lease ran out.
    import ksched.loop.scheduling.binder as binder_module

    writes: list[list[str]] = []
    real = binder_module.send_all

    def recording(conn: Any, requests: list[tuple[str, str, bytes]]) -> Any:
        writes.append(
            [path.rsplit("/", 2)[-2] if path.endswith("/binding") else "event" for _, path, _ in requests]
        )
        return real(conn, requests)

    monkeypatch.setattr(binder_module, "send_all", recording)
    api = Api()
    outcomes: list[Outcome] = []
    binder = Binder(api, 1, "ksched-a", Telemetry(), lambda: True)  # type: ignore[arg-type]
    for i in range(5):
        binder.bind({**POD, "metadata": {**POD["metadata"], "name": f"p{i}"}}, "node-1", outcomes.append)
    binder.shutdown()
    assert outcomes == [Outcome.BOUND] * 5
    bind_writes = [w for w in writes if "event" not in w]
    assert bind_writes and all(len(w) == 1 for w in bind_writes), writes


def test_the_writers_connect_before_the_first_bind_and_carry_it_on_those_connections(
    server: Callable[[list[bytes | None]], tuple[Server, Kube]],
) -> None:
    s, kube = server([created(b"{}"), created(b"{}")])
    binder = Binder(kube, 4, "ksched-a", Telemetry(), lambda: True)
    try:
        deadline = time.monotonic() + 5
        while s.connections < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (s.connections, s.requests) == (4, [])
        outcomes: list[Outcome] = []
        binder.bind(POD, "node-1", outcomes.append)
    finally:
        binder.shutdown()
    assert outcomes == [Outcome.BOUND]
    assert [r[1][0] for r in s.requests] == [
        "POST /api/v1/namespaces/default/pods/p/binding HTTP/1.1",
        "POST /apis/events.k8s.io/v1/namespaces/default/events HTTP/1.1",
    ]
    assert s.connections == 4


def test_a_writer_that_cannot_connect_at_start_connects_for_its_first_write() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    # Nothing listens on that port yet: the start's connect fails.
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    kube = Kube(configuration)
    conn = kube.connection()
    assert isinstance(conn, Connection)
    conn.open()
    s = Server([created(b"{}")], port=port)
    try:
        assert conn.request("POST", "/a", raw=b"{}").status == 201
    finally:
        s.close()
    assert s.connections == 1
