"""``/healthz``, ``/livez``, ``/readyz``, ``/metrics`` and small JSON documents over HTTP(S).

``/readyz`` answers 200 only when every check passes and lists each one as
kube-apiserver does (``[+]informers ok`` / ``[-]leader failed: ...``);
``/metrics`` is the process's Prometheus registry. Each of ``documents``
(``/status``, ``/shadow``) is served as JSON; a document that answers None
is not available in this mode (404). Before a request is answered the server asks its
``gate`` (when given) with the path, the headers and the client's verified certificate;
who may read what is decided there (:mod:`ksched.loop.serving`), not here.

:class:`BackgroundServer` (this server and the webhook) serves each connection on a thread of
its own, at most MAX_CONNECTIONS at once, and never waits on a client for long: the TLS
handshake runs on that thread, not on the one accepting connections, and a client that sends
nothing for HANDSHAKE_TIMEOUT_S during the handshake or READ_TIMEOUT_S during its request is
closed. So one client that connects and stays silent, or many that send half a request, hold a
thread each for seconds, not forever, and never stop the others from being answered: when
every slot is taken, the connection that has waited longest on its client is closed to make
room for a new one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import json
import logging
import socket
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from email.message import Message
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Check = tuple[str, bool, str]
"""(name, passed, detail)."""
Document = Callable[[dict[str, str]], object]
"""A JSON document served at a path, given the request's query parameters (None: not
available)."""
Gate = Callable[[str, Message, dict[str, Any] | None], tuple[int, bytes] | None]
"""Asked before a request is answered, with its path, its headers and the client's verified
certificate (``SSLSocket.getpeercert()``; None without one): None to answer it, or the
(status, plain-text body) to answer instead."""


log = logging.getLogger(__name__)

# A TLS handshake takes milliseconds on a cluster network; a client that has not finished
# its part in 5 s (half the API server's default 10 s wait for a webhook) is not going to.
HANDSHAKE_TIMEOUT_S = 5.0
# The kubelet's probes, Prometheus and the API server send a request at once; a client silent
# this long in the middle of one is gone or stalling (Prometheus gives up on a scrape after 10 s).
READ_TIMEOUT_S = 10.0
# Connections served at once, a thread each: far more than the probes, scrapes and reviews
# that arrive together, and few enough that a flood of slow clients costs bounded memory.
MAX_CONNECTIONS = 128
# How long a new connection waits for one of them to end before it is closed unanswered.
FULL_WAIT_S = 1.0
# How long stopping a server waits for the answers being written to end, and then for the
# threads of the connections it closed.
DRAIN_S = 5.0
FORCE_S = 0.5
# A generated certificate's life: a year, as long as any process runs without a restart.
CERT_DAYS = 365


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` (``:port`` means every interface)."""
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"{address!r} is not host:port")
    return host or "0.0.0.0", int(port)


def self_signed(
    hosts: list[str], ca_name: str = "ksched-ca", days: int = CERT_DAYS
) -> tuple[bytes, bytes, bytes]:
    """A CA named ``ca_name``, and a serving certificate for ``hosts`` signed by it, both valid
    ``days``: (ca_pem, cert_pem, key_pem)."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca)
        .issuer_name(ca)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return ca_cert.public_bytes(pem), cert.public_bytes(pem), key_pem


def tls_context(cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """A server context serving a certificate and key held in memory."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory() as d:
        Path(d, "tls.crt").write_bytes(cert_pem)
        Path(d, "tls.key").write_bytes(key_pem)
        context.load_cert_chain(str(Path(d, "tls.crt")), str(Path(d, "tls.key")))
    return context


TlsContext = Callable[[], ssl.SSLContext]
"""The TLS context to serve a new connection with, asked once per connection."""


class _BoundedHTTPServer(HTTPServer):
    """An HTTPServer that serves each connection on a daemon thread of its own, at most
    ``max_connections`` at once, with the TLS handshake (when ``tls`` is given) on that thread
    and a timeout on every read."""

    # Connections the kernel holds for the accepting thread while it waits for a free slot.
    request_queue_size = MAX_CONNECTIONS

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        name: str,
        tls: TlsContext | None,
        read_timeout: float,
    ) -> None:
        super().__init__(address, handler)
        self.name = name
        self.tls = tls
        self.read_timeout = read_timeout
        # Read here, not at import, so that tests may lower them.
        self.handshake_timeout = HANDSHAKE_TIMEOUT_S
        self.max_connections = MAX_CONNECTIONS
        self.full_wait = FULL_WAIT_S
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._full = False
        # Connections being served now (a thread may outlive its connection by a moment).
        self.serving = 0
        # Guards serving and _open; notified each time a connection ends.
        self._serving_lock = threading.Condition()
        # Each open connection by file descriptor: its socket and, while it waits on its
        # client (the handshake, a request line, headers), since when (None: being answered).
        self._open: dict[int, tuple[socket.socket, float | None]] = {}
        self.RequestHandlerClass = _tracked(handler)

    # A TCP server's requests are sockets (socketserver types them for UDP too).
    def process_request(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        """On the accepting thread: hand the connection to a thread of its own. When every slot
        is taken, the connection that has waited longest on its client (silent in its handshake
        or its request's headers) is closed to make room, as a server with an idle timeout
        would close it anyway: clients that connect and stall, however many and however fast
        they come back, then only ever push each other out, and a client that sends its request
        at once is answered. Only when every slot is answering a request, for ``full_wait``, is
        the new connection closed."""
        if not self._slots.acquire(blocking=False):
            evicted = self._evict_longest_waiting()
            if not self._full:
                log.warning(
                    "%s: %d connections open, the most served at once; closing %s",
                    self.name,
                    self.max_connections,
                    "the longest silent to make room" if evicted else "new ones until one ends",
                )
                self._full = True
            if not self._slots.acquire(timeout=self.full_wait):
                self.shutdown_request(request)
                return
        else:
            self._full = False
        fd = request.fileno()
        with self._serving_lock:
            self.serving += 1
            self._open[fd] = (request, time.monotonic())
        try:
            threading.Thread(
                target=self._serve_connection,
                args=(request, client_address, fd),
                name=f"{self.name}-connection",
                daemon=True,
            ).start()
        except RuntimeError:  # no thread to be had: refuse this connection, not the next
            self._forget(fd)
            self._done()
            self.shutdown_request(request)

    def _serve_connection(self, request: socket.socket, client_address: object, fd: int) -> None:
        connection = request
        try:
            if self.tls is not None:
                request.settimeout(self.handshake_timeout)
                connection = self.tls().wrap_socket(request, server_side=True, do_handshake_on_connect=False)
                self._wrapped(fd, connection)  # the plain socket is detached now
                try:
                    connection.do_handshake()
                except OSError as err:  # a port scan, a probe, a client that trusts another CA
                    log.debug("%s: TLS handshake with %s failed: %s", self.name, client_address, err)
                    return
            connection.settimeout(self.read_timeout)
            self.finish_request(connection, client_address)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLEOFError) as err:
            # The client hung up before its answer was written (a half-sent request ends at
            # its EOF; over TLS, without a close_notify): nothing went wrong here, so no
            # traceback on stderr.
            log.debug("%s: %s hung up before its answer: %s", self.name, client_address, err)
        except Exception:
            self.handle_error(connection, client_address)
        finally:
            self._forget(fd)
            self.shutdown_request(connection)
            self._done()

    def _done(self) -> None:
        with self._serving_lock:
            self.serving -= 1
            self._serving_lock.notify_all()
        self._slots.release()

    def drain(self, timeout: float) -> bool:
        """Once no new connection is accepted: close every connection that waits on its client
        (looking again as answers end), and wait up to ``timeout`` for the answers being
        written; then close whatever is still open (a client reading its answer or sending its
        body that slowly is not waited for) and give its thread FORCE_S to end. True when no
        connection is left. A server stopped without this would leave threads that still
        answer, and log, after it is gone."""
        deadline = time.monotonic() + timeout
        forced = False
        while True:
            with self._serving_lock:
                if not self.serving:
                    return True
                left = deadline - time.monotonic()
                if left <= 0 and forced:
                    return False
                if left <= 0:
                    forced = True
                    deadline = time.monotonic() + FORCE_S
                closing = [sock for sock, since in self._open.values() if forced or since is not None]
            for sock in closing:
                _shut_down(sock)
            with self._serving_lock:
                # Woken as a connection ends; a short step so a newly idle one is closed too.
                self._serving_lock.wait(max(0.0, min(deadline - time.monotonic(), 0.05)))

    def _forget(self, fd: int) -> None:
        """Before the descriptor is closed (and may be reused by a new connection)."""
        with self._serving_lock:
            self._open.pop(fd, None)

    def _wrapped(self, fd: int, connection: socket.socket) -> None:
        with self._serving_lock:
            entry = self._open.get(fd)
            if entry is not None:
                self._open[fd] = (connection, entry[1])

    def waiting(self, connection: socket.socket, on_client: bool) -> None:
        """The connection (by its descriptor) now waits on its client, or is being answered."""
        with self._serving_lock:
            entry = self._open.get(connection.fileno())
            if entry is not None:
                self._open[connection.fileno()] = (entry[0], time.monotonic() if on_client else None)

    def _evict_longest_waiting(self) -> bool:
        """Shut down the connection that has waited longest on its client (its thread's read
        then ends and frees the slot); False when every connection is being answered."""
        with self._serving_lock:
            waiting = [(since, fd, sock) for fd, (sock, since) in self._open.items() if since is not None]
            if not waiting:
                return False
            _, fd, sock = min(waiting, key=lambda w: w[0])
            self._open[fd] = (sock, None)  # never chosen twice
        _shut_down(sock)
        return True


def _shut_down(sock: socket.socket) -> None:
    """End a connection served on another thread: the descriptor's shutdown, not
    SSLSocket.shutdown, since the TLS state belongs to the connection's own thread, which now
    sees its read end and closes it there."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _tracked(handler: type[BaseHTTPRequestHandler]) -> type[BaseHTTPRequestHandler]:
    """``handler`` telling its server when its connection waits on the client (from the start
    of each request until its headers are read) and when it is being answered."""

    class Tracked(handler):  # type: ignore[valid-type,misc]
        server: _BoundedHTTPServer

        def handle_one_request(self) -> None:
            self.server.waiting(self.connection, True)
            super().handle_one_request()

        def parse_request(self) -> bool:
            parsed = bool(super().parse_request())
            self.server.waiting(self.connection, False)
            return parsed

    Tracked.__name__ = Tracked.__qualname__ = handler.__name__
    return Tracked


class BackgroundServer:
    """A threading HTTP(S) server on its own daemon thread (health endpoint, webhook), bounded
    as the module says. ``tls`` gives the context for each new connection, so a server can change
    its certificate while it runs; ``read_timeout`` overrides READ_TIMEOUT_S."""

    def __init__(
        self,
        address: str,
        handler: type[BaseHTTPRequestHandler],
        name: str,
        tls: TlsContext | None = None,
        read_timeout: float | None = None,
    ) -> None:
        timeout = READ_TIMEOUT_S if read_timeout is None else read_timeout
        self.httpd = _BoundedHTTPServer(parse_address(address), handler, name, tls, timeout)
        self._thread = threading.Thread(target=self.httpd.serve_forever, name=name, daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting and close the listening socket (a new client is refused at once, not
        left in the backlog), then end the connections still open (see ``drain``)."""
        self.httpd.shutdown()
        self.httpd.server_close()
        if not self.httpd.drain(DRAIN_S):
            log.warning("%s: %d connections still open after stopping", self.httpd.name, self.httpd.serving)


class HealthServer(BackgroundServer):
    """The health, metrics and document endpoint; over TLS when ``tls`` is given, each request
    past ``gate`` first when one is."""

    def __init__(
        self,
        address: str,
        registry: CollectorRegistry,
        checks: Callable[[], list[Check]],
        documents: dict[str, Document] | None = None,
        tls: TlsContext | None = None,
        gate: Gate | None = None,
    ) -> None:
        outer = self
        served = dict(documents or {})

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                if gate is not None:
                    peer = (
                        self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
                    )
                    refused = gate(path, self.headers, peer or None)
                    if refused is not None:
                        self._reply(refused[0], refused[1], "text/plain; charset=utf-8")
                        return
                if path in ("/healthz", "/livez"):
                    self._reply(200, b"ok", "text/plain")
                elif path == "/readyz":
                    results = checks()
                    body = "".join(
                        f"[+]{n} ok{': ' + d if d else ''}\n" if ok else f"[-]{n} failed: {d}\n"
                        for n, ok, d in results
                    )
                    ready = all(ok for _, ok, _ in results)
                    body += "readyz check passed\n" if ready else "readyz check failed\n"
                    self._reply(200 if ready else 503, body.encode(), "text/plain")
                elif path == "/metrics":
                    self._reply(200, generate_latest(outer.registry), CONTENT_TYPE_LATEST)
                elif path in served:
                    try:
                        doc = served[path](dict(urllib.parse.parse_qsl(query)))
                    except Exception:  # a document that cannot be built answers, and the rest serves on
                        log.exception("serving %s", path)
                        self._reply(500, b'{"error": "see ksched\'s log"}', "application/json")
                        return
                    if doc is None:
                        self._reply(404, b'{"error": "not available in this mode"}', "application/json")
                    else:
                        self._reply(200, json.dumps(doc).encode(), "application/json")
                else:
                    self._reply(404, b"not found", "text/plain")

            def _reply(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # probes every few seconds: keep quiet
                return

        self.registry = registry
        super().__init__(address, Handler, "http", tls)
