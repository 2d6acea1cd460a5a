"""Hostile clients held open against a server (:func:`idle_clients`, :func:`half_sent_requests`,
:func:`mid_handshake_clients`, :func:`slow_clients`, :func:`short_bodies`), and a well-formed
client timed while they are held (:func:`timed_requests`).

Each attack is a context manager that opens ``count`` connections, holds them until the
``with`` block ends and closes them then. The servers close a silent client after their
HANDSHAKE_TIMEOUT_S or READ_TIMEOUT_S (that is their defence); with ``keep`` (the default) a
thread re-opens every connection the server closed, every KEEP_EVERY_S, so the pressure lasts
as long as the block. The yielded list holds the connections open now (the keeper updates it
in place): a closed one is replaced, and one that could not be opened (the server full,
refusing) is tried again on the next round. Nothing here reads ksched: the tools take a host and port, so
a live benchmark can aim them at a running ksched.

Example::

    with idle_clients("127.0.0.1", 8080, 200), half_sent_requests("127.0.0.1", 8080, 50):
        latencies = timed_requests(lambda: get("127.0.0.1", 8080, "/healthz"), 5.0)
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

# How often the keeper looks for connections the server closed and re-opens them.
KEEP_EVERY_S = 0.5
# A connect (and, with TLS, a handshake) that takes longer is given up until the next round:
# a full server closes a new connection after its FULL_WAIT_S (1 s).
OPEN_TIMEOUT_S = 3.0
# Connections opened at once: enough to open hundreds in a few seconds on two cores.
OPEN_WORKERS = 32
# Slow clients send one byte every this many seconds.
SLOW_BYTE_EVERY_S = 1.0

Opener = Callable[[], socket.socket]


def _client_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _closed(sock: socket.socket) -> bool:
    """Whether the server has closed (or answered, which ends a held request) this connection,
    without waiting."""
    try:
        sock.setblocking(False)
        try:
            sock.recv(1)  # the end of the stream, or the server's answer
            return True
        finally:
            sock.setblocking(True)
    except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
        return False
    except OSError:
        return True


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()


class _Held:
    """``count`` connections from ``opener``, re-opened while ``keep``; ``tick`` (if given) is
    called with the open ones each round, on the keeper's thread."""

    def __init__(
        self,
        opener: Opener,
        count: int,
        keep: bool,
        tick: Callable[[list[socket.socket]], None] | None = None,
    ) -> None:
        self.opener = opener
        self.count = count
        self.keep = keep
        self.tick = tick
        self.sockets: list[socket.socket] = []
        # Found closed at the last round: closed at the next (see _keeper).
        self._stale: list[socket.socket] = []
        self.reopened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keeper, name="fuzz-held-clients", daemon=True)

    def _open(self, _: int = 0) -> socket.socket | None:
        try:
            return self.opener()
        except OSError:
            return None

    def _open_many(self, n: int) -> list[socket.socket]:
        if n <= 0:
            return []
        with ThreadPoolExecutor(min(OPEN_WORKERS, n)) as pool:
            return [s for s in pool.map(self._open, range(n)) if s is not None]

    def start(self) -> None:
        self.sockets.extend(self._open_many(self.count))
        if self.keep or self.tick is not None:
            self._thread.start()

    def _keeper(self) -> None:
        while not self._stop.wait(KEEP_EVERY_S):
            if self.tick is not None:
                self.tick(list(self.sockets))
            if not self.keep:
                continue
            open_now: list[socket.socket] = []
            stale: list[socket.socket] = []
            for sock in self.sockets:
                (stale if _closed(sock) else open_now).append(sock)
            fresh = self._open_many(self.count - len(open_now))
            self.reopened += len(fresh)
            self.sockets[:] = open_now + fresh
            # Closed a round after they left the list, so that a reader still going over the
            # old list (a copy taken before) does not find them closed under it.
            for sock in self._stale:
                _close(sock)
            self._stale = stale

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        for s in self.sockets + self._stale:
            _close(s)


@contextlib.contextmanager
def _holding(
    opener: Opener, count: int, keep: bool, tick: Callable[[list[socket.socket]], None] | None = None
) -> Iterator[list[socket.socket]]:
    held = _Held(opener, count, keep, tick)
    try:
        held.start()
        yield held.sockets
    finally:
        held.stop()


def _tcp(host: str, port: int) -> socket.socket:
    return socket.create_connection((host, port), timeout=OPEN_TIMEOUT_S)


def _tls(host: str, port: int) -> socket.socket:
    raw = _tcp(host, port)
    try:
        return _client_context().wrap_socket(raw, server_hostname=host)
    except BaseException:
        raw.close()
        raise


def _request_head(path: str, host: str) -> bytes:
    """A request line and headers without the blank line that ends them."""
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: ksched-fuzz\r\nAccept: */*\r\n".encode()


def idle_clients(
    host: str, port: int, count: int, keep: bool = True
) -> contextlib.AbstractContextManager[list[socket.socket]]:
    """``count`` TCP connections that send nothing (to a TLS server: no ClientHello), held
    until the block ends; with ``keep``, re-opened when the server closes them."""
    return _holding(lambda: _tcp(host, port), count, keep)


def half_sent_requests(
    host: str, port: int, count: int, path: str = "/metrics", tls: bool = False, keep: bool = True
) -> contextlib.AbstractContextManager[list[socket.socket]]:
    """``count`` connections (over TLS when ``tls``, the handshake completed) that each send a
    request line for ``path`` and some headers but never the blank line that ends them; held
    until the block ends, re-opened with ``keep``."""

    def opener() -> socket.socket:
        sock = _tls(host, port) if tls else _tcp(host, port)
        try:
            sock.sendall(_request_head(path, host))
        except BaseException:
            sock.close()
            raise
        return sock

    return _holding(opener, count, keep)


def _client_hello(host: str) -> bytes:
    """The first flight of a TLS handshake (the ClientHello), as a client would send it."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = _client_context().wrap_bio(incoming, outgoing, server_hostname=host)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def mid_handshake_clients(
    host: str, port: int, count: int, keep: bool = True
) -> contextlib.AbstractContextManager[list[socket.socket]]:
    """``count`` connections to a TLS server that send half a ClientHello and stop there."""
    hello = _client_hello(host)

    def opener() -> socket.socket:
        sock = _tcp(host, port)
        try:
            sock.sendall(hello[: max(1, len(hello) // 2)])
        except BaseException:
            sock.close()
            raise
        return sock

    return _holding(opener, count, keep)


def short_bodies(
    host: str, port: int, count: int, path: str = "/mutate", tls: bool = True, keep: bool = True
) -> contextlib.AbstractContextManager[list[socket.socket]]:
    """``count`` POSTs whose Content-Length is larger than the body they send, then nothing."""

    def opener() -> socket.socket:
        sock = _tls(host, port) if tls else _tcp(host, port)
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            "Content-Length: 100000\r\n\r\n{"
        )
        try:
            sock.sendall(head.encode())
        except BaseException:
            sock.close()
            raise
        return sock

    return _holding(opener, count, keep)


def slow_clients(
    host: str, port: int, count: int, path: str = "/metrics", tls: bool = False, keep: bool = True
) -> contextlib.AbstractContextManager[list[socket.socket]]:
    """``count`` connections that send a request one byte per SLOW_BYTE_EVERY_S (never finishing
    in any time a server should wait: the request is padded with a long header)."""
    request = _request_head(path, host) + b"X-Pad: " + b"a" * 100_000 + b"\r\n\r\n"
    sent: dict[int, int] = {}
    last = [time.monotonic()]

    def opener() -> socket.socket:
        sock = _tls(host, port) if tls else _tcp(host, port)
        sent[id(sock)] = 0
        return sock

    def tick(sockets: list[socket.socket]) -> None:
        if time.monotonic() - last[0] < SLOW_BYTE_EVERY_S:
            return
        last[0] = time.monotonic()
        for sock in sockets:
            at = sent.get(id(sock), 0)
            with contextlib.suppress(OSError):
                sock.sendall(request[at : at + 1])
                sent[id(sock)] = at + 1

    return _holding(opener, count, keep, tick)


def get(host: str, port: int, path: str, timeout: float, tls: bool = False) -> int:
    """One well-formed GET: its status (an exception when there is no answer in ``timeout``)."""
    conn: http.client.HTTPConnection = (
        http.client.HTTPSConnection(host, port, timeout=timeout, context=_client_context())
        if tls
        else http.client.HTTPConnection(host, port, timeout=timeout)
    )
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        answer.read()
        return int(answer.status)
    finally:
        conn.close()


def post(host: str, port: int, path: str, body: bytes, timeout: float, tls: bool = True) -> int:
    """One well-formed JSON POST (an AdmissionReview to the webhook): its status."""
    conn: http.client.HTTPConnection = (
        http.client.HTTPSConnection(host, port, timeout=timeout, context=_client_context())
        if tls
        else http.client.HTTPConnection(host, port, timeout=timeout)
    )
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        answer = conn.getresponse()
        answer.read()
        return int(answer.status)
    finally:
        conn.close()


def timed_requests(
    request: Callable[[], int], seconds: float, every: float = 0.05
) -> list[tuple[float, int]]:
    """Call ``request`` (one well-formed request, its status) again and again for ``seconds``:
    (seconds each took, its status; 0 when it raised)."""
    out: list[tuple[float, int]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.monotonic()
        try:
            status = request()
        except (OSError, http.client.HTTPException):
            status = 0
        out.append((time.monotonic() - started, status))
        time.sleep(every)
    return out


def p99(values: list[float]) -> float:
    """The 99th percentile (nearest rank) of ``values``; 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, -(-99 * len(ordered) // 100) - 1))]
