"""The API-server connection: configuration, raw JSON requests, a write rate limit.

The official client supplies what it does well: loading a kubeconfig or the
in-cluster service account (with token refresh), TLS, and its urllib3 pool.
Requests on the hot path (list, watch, bind, events, status patches) go
through :meth:`Kube.request` with orjson bodies instead of the generated API
methods: in client v37 each generated call validates its arguments with
pydantic and builds model objects. Measured on the local control plane:
listing 301 pods took 70 ms of client CPU through
``list_pod_for_all_namespaces`` and 10 ms as a raw GET parsed by orjson; one
pod read took 863 us against 606 us.

The two writes every scheduled pod costs (its binding and its ``Scheduled``
event) go through :class:`Connection` instead: one persistent HTTP/1.1
connection per writer thread, the request written as bytes and the answer read
with only what the writer needs (status, body). Measured on one thread against
a local plain-HTTP server: 529 us of client CPU per binding POST through
``Kube.request`` (urllib3: header objects, ``email`` header parsing, pool
bookkeeping), 57 us through :class:`Connection`. Drained through the binder,
2,000 binds and their events on the local control plane cost 2.77 ms of CPU
per pod on 64 bind and 32 report threads and 0.91 ms on 8 writers, before the
token was cached and the events pipelined (the README has the later figures).

This module and the leader module are the only ones that import the Kubernetes
client.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import orjson
import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.rest import should_bypass_proxies

from ksched.errors import KschedError
from ksched.loop.protobuf import ACCEPT as ACCEPT_PROTOBUF
from ksched.loop.protobuf import PROTOBUF

JSON = "application/json"
MERGE_PATCH = "application/strategic-merge-patch+json"
# A request that takes longer is abandoned and retried by its caller.
REQUEST_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 5.0
# A connection idle for longer is checked before use (the server may have closed it);
# a busy one is not: the check is a system call that hands the GIL over.
IDLE_CHECK_S = 1.0
# The authorization header is read from the client's configuration (which runs its
# token refresh) at most this often: the refresh hook of a kubeconfig resets the
# configuration's proxy, which scans the environment: 110 us per request.
AUTH_REFRESH_S = 1.0


class ApiUnavailableError(KschedError):
    """The API server could not be reached (connection refused, reset, timed out)."""


@dataclass(frozen=True)
class Response:
    status: int
    data: bytes

    def json(self) -> Any:
        return orjson.loads(self.data) if self.data else None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class RateLimiter:
    """Token bucket (client-go's ``flowcontrol`` QPS/burst): ``acquire`` blocks until a token is free."""

    def __init__(self, qps: float, burst: int, clock: Any = time.monotonic) -> None:
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._clock = clock
        self._last = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take a token; returns how long the caller must wait before using it."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def acquire(self) -> None:
        wait = self.reserve()
        if wait > 0:
            time.sleep(wait)


def service_account_kubeconfig(
    kube: Kube, kubeconfig: Path, account: tuple[str, str], seconds: int, out: Path
) -> str:
    """A token of the ServiceAccount ``account`` (namespace, name), valid ``seconds``, and at
    ``out`` a copy of ``kubeconfig`` whose users present it instead of their own credentials."""
    ns, name = account
    r = kube.request(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/{name}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        },
    )
    if not r.ok:
        raise KschedError(f"token for service account {ns}/{name}: HTTP {r.status} {r.data[:200]!r}")
    token = str(r.json()["status"]["token"])
    config = yaml.safe_load(kubeconfig.read_text())
    config["users"] = [{"name": user["name"], "user": {"token": token}} for user in config["users"]]
    out.write_text(yaml.safe_dump(config))
    return token


def load_configuration(kubeconfig: str | None, pool_size: int) -> client.Configuration:
    """In-cluster configuration inside a pod (unless a kubeconfig is given), else the kubeconfig."""
    configuration = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        try:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        except (config.ConfigException, OSError) as err:
            where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise KschedError(f"cannot load kubeconfig {where}: {err}") from None
    configuration.connection_pool_maxsize = pool_size
    # The leader-election library builds its own API objects from the default configuration.
    client.Configuration.set_default(configuration)
    return configuration


class Kube:
    """Raw JSON access to the API server over the client's connection pool."""

    def __init__(self, configuration: client.Configuration, qps: float = 500.0, burst: int = 1000) -> None:
        self.configuration = configuration
        self.api_client = client.ApiClient(configuration)
        self._pool = self.api_client.rest_client.pool_manager
        self.host = configuration.host.rstrip("/")
        self.writes = RateLimiter(qps, burst)
        self._tls: ssl.SSLContext | None = None
        self._auth_cache: tuple[float, tuple[tuple[str, str], ...], bytes] | None = None
        self._tls_lock = threading.Lock()

    def direct(self) -> bool:
        """Whether :class:`Connection` can reach the API server itself (no proxy in the way)."""
        c = self.configuration
        return not (c.proxy and not should_bypass_proxies(c.host, c.no_proxy or ""))

    def connection(self) -> Connection | Kube:
        """A connection of the caller's own for the hot writes: a :class:`Connection`, or
        this client's pool where a proxy is configured (the pool knows how to use it)."""
        return Connection(self) if self.direct() else self

    def tls_context(self) -> ssl.SSLContext:
        """TLS as the client's pool sets it up: the kubeconfig's or service account's CA,
        client certificate, ``insecure-skip-tls-verify`` and ``tls-server-name``."""
        with self._tls_lock:
            if self._tls is None:
                c = self.configuration
                ctx = ssl.create_default_context(cafile=c.ssl_ca_cert, cadata=c.ca_cert_data)
                if c.cert_file:
                    ctx.load_cert_chain(c.cert_file, c.key_file)
                if not c.verify_ssl:
                    ctx.check_hostname = False
                    ctx.verify_mode = ssl.CERT_NONE
                elif c.assert_hostname is False:
                    ctx.check_hostname = False
                self._tls = ctx
            return self._tls

    def auth_header(self) -> bytes:
        """The authorization header line(s), the token refreshed as the client does."""
        return self._auth()[1]

    def _auth(self) -> tuple[tuple[tuple[str, str], ...], bytes]:
        """The authorization headers, as pairs and as header lines, the token refreshed
        as the client does (at most every ``AUTH_REFRESH_S``)."""
        now = time.monotonic()
        cached = self._auth_cache
        if cached is not None and now - cached[0] < AUTH_REFRESH_S:
            return cached[1], cached[2]
        settings: dict[str, Any] = dict(self.configuration.auth_settings())
        pairs = tuple(
            (str(auth["key"]), str(auth["value"]))
            for auth in settings.values()
            if auth.get("in") == "header" and auth.get("value")
        )
        lines = "".join(f"{k}: {v}\r\n" for k, v in pairs).encode("latin-1")
        self._auth_cache = (now, pairs, lines)
        return pairs, lines

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": accept(content_type), "User-Agent": "ksched"}
        if content_type:
            headers["Content-Type"] = content_type
        headers.update(self._auth()[0])
        return headers

    def url(self, path: str, query: dict[str, Any] | None = None) -> str:
        q = {k: ("true" if v is True else v) for k, v in (query or {}).items() if v is not None}
        return f"{self.host}{path}" + (f"?{urlencode(q)}" if q else "")

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float = REQUEST_TIMEOUT_S,
        rate_limited: bool = False,
        raw: bytes | None = None,
        answer: str | None = None,
    ) -> Response:
        """One request; raises :class:`ApiUnavailableError` only when no HTTP answer came back.
        ``raw`` is a body already encoded (``body`` is encoded as JSON). ``answer``: the
        encoding asked for (PROTOBUF: protobuf, or JSON from a server without it)."""
        if rate_limited:
            self.writes.acquire()
        data = raw if raw is not None else None if body is None else orjson.dumps(body)
        headers = self._headers(content_type if data is not None else None)
        if answer is not None:
            headers["Accept"] = accept(answer)
        try:
            r = self._pool.request(
                method,
                self.url(path, query),
                body=data,
                headers=headers,
                timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=timeout),
                retries=False,
                preload_content=True,
            )
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise ApiUnavailableError(f"{method} {path}: {err}") from None
        return Response(r.status, r.data)

    def stream(
        self, path: str, query: dict[str, Any], timeout: float, content_type: str | None = None
    ) -> urllib3.BaseHTTPResponse:
        """Open a streaming GET (a watch) asking for ``content_type`` (protobuf, or JSON where
        the server has none) or JSON; the caller reads and closes it."""
        headers = self._headers(None)
        headers["Accept"] = accept(content_type)
        try:
            return self._pool.request(
                "GET",
                self.url(path, query),
                headers=headers,
                timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=timeout),
                retries=False,
                preload_content=False,
            )
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise ApiUnavailableError(f"GET {path} (watch): {err}") from None


class Connection:
    """One persistent HTTP/1.1 connection to the API server, for one thread at a time.

    Opened on first use and reopened when the server closed it while idle; a request
    whose answer does not come back raises :class:`ApiUnavailableError` (the caller
    retries, as through the pool) and closes the connection. Answers are read by
    ``Content-Length`` or chunked transfer encoding."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        parts = urlsplit(kube.host)
        self.https = parts.scheme == "https"
        self.address = (parts.hostname or "localhost", parts.port or (443 if self.https else 80))
        self.host_header = parts.netloc.encode("latin-1")
        c = kube.configuration
        self.server_hostname = c.tls_server_name or (
            c.assert_hostname if isinstance(c.assert_hostname, str) else self.address[0]
        )
        self.prefix = parts.path.rstrip("/")
        self._sock: socket.socket | None = None
        self._buf = b""
        self._used = 0.0
        self._timeout: float | None = None

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
        self._buf = b""
        self._timeout = None

    def open(self) -> None:
        """Connect now (TCP and TLS), so that the first request does not wait for the
        handshake; where that fails, the first request connects (and reports) as usual."""
        with contextlib.suppress(OSError):  # ssl.SSLError and socket timeouts are OSErrors
            self._usable()
            self._used = time.monotonic()

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=CONNECT_TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.https:
            sock = self.kube.tls_context().wrap_socket(sock, server_hostname=self.server_hostname)
        return sock

    def _usable(self) -> socket.socket:
        sock = self._sock
        if sock is not None and (self._buf or time.monotonic() - self._used > IDLE_CHECK_S):
            # An idle connection the server closed (or wrote to) reads as ready: open a new one.
            readable, _, _ = select.select([sock], [], [], 0)
            if readable or self._buf:
                self.close()
                sock = None
        if sock is None:
            sock = self._sock = self._connect()
        return sock

    def request(
        self,
        method: str,
        path: str,
        *,
        raw: bytes,
        content_type: str = JSON,
        timeout: float = REQUEST_TIMEOUT_S,
        rate_limited: bool = False,
    ) -> Response:
        """Send ``raw`` (an encoded body) and read the answer; raises
        :class:`ApiUnavailableError` only when no HTTP answer came back."""
        if rate_limited:
            self.kube.writes.acquire()
        (answer,) = self.pipeline([(method, path, raw)], content_type=content_type, timeout=timeout)
        if isinstance(answer, ApiUnavailableError):
            raise answer
        return answer

    def pipeline(
        self,
        requests: list[tuple[str, str, bytes]],
        *,
        content_type: str = JSON,
        timeout: float = REQUEST_TIMEOUT_S,
    ) -> list[Response | ApiUnavailableError]:
        """Send (method, path, encoded body) requests at once and read their answers in
        order (HTTP/1.1 pipelining: the server answers them one after the other). A request
        whose answer did not come back has an :class:`ApiUnavailableError` in its place; it
        may or may not have been applied."""
        auth = self.kube.auth_header()
        ctype, acc = content_type.encode(), accept(content_type).encode()
        data = b"".join(
            (
                b"%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: ksched\r\nAccept: %s\r\n"
                b"Content-Type: %s\r\nContent-Length: %d\r\n%s\r\n%s"
            )
            % (
                method.encode(),
                (self.prefix + path).encode(),
                self.host_header,
                acc,
                ctype,
                len(raw),
                auth,
                raw,
            )
            for method, path, raw in requests
        )
        answers: list[Response | ApiUnavailableError] = []
        problem = "the API server closed the connection"
        try:
            sock = self._usable()
            if timeout != self._timeout:
                sock.settimeout(timeout)
                self._timeout = timeout
            sock.sendall(data)
            for _ in requests:
                answers.append(self._answer(sock))
                if self._sock is None:
                    break  # closed after that answer: the rest were not read
            self._used = time.monotonic()
        except (OSError, ValueError, ssl.SSLError) as err:
            self.close()
            problem = str(err) or type(err).__name__
        for method, path, _ in requests[len(answers) :]:
            answers.append(ApiUnavailableError(f"{method} {path}: {problem}"))
        return answers

    def _read(self, sock: socket.socket) -> None:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionResetError("the API server closed the connection")
        self._buf += chunk

    def _answer(self, sock: socket.socket) -> Response:
        while (end := self._buf.find(b"\r\n\r\n")) < 0:
            self._read(sock)
        head = self._buf[:end]
        self._buf = self._buf[end + 4 :]
        status = int(head.split(b" ", 2)[1])
        # Three headers matter; found in the lowered head rather than by splitting every line
        # (the API server sends seven: 7 us an answer, two answers a pod).
        lower = head.lower() + b"\r\n"
        value = _header(lower, b"content-length")
        length = int(value) if value is not None else -1
        chunked = b"chunked" in (_header(lower, b"transfer-encoding") or b"")
        close = b"close" in (_header(lower, b"connection") or b"")
        if chunked:
            data = self._chunks(sock)
        elif length >= 0:
            while len(self._buf) < length:
                self._read(sock)
            data, self._buf = self._buf[:length], self._buf[length:]
        else:  # no length: the body runs to the end of the connection
            while True:
                try:
                    self._read(sock)
                except ConnectionResetError:
                    break
            data, close = self._buf, True
        if close:
            self.close()
        return Response(status, data)

    def _chunks(self, sock: socket.socket) -> bytes:
        parts: list[bytes] = []
        while True:
            while (end := self._buf.find(b"\r\n")) < 0:
                self._read(sock)
            size = int(self._buf[:end].split(b";", 1)[0], 16)
            start = end + 2
            while len(self._buf) < start + size + 2:
                self._read(sock)
            if size == 0:
                # Trailers (none expected) end with an empty line.
                while (stop := self._buf.find(b"\r\n", start)) != start:
                    if stop < 0:
                        self._read(sock)
                    else:
                        start = stop + 2
                self._buf = self._buf[start + 2 :]
                return b"".join(parts)
            parts.append(self._buf[start : start + size])
            self._buf = self._buf[start + size + 2 :]


def _header(lower_head: bytes, name: bytes) -> bytes | None:
    """The value of header ``name`` (lowercase) in a lowered response head ending in CRLF."""
    start = lower_head.find(b"\r\n" + name + b":")
    if start < 0:
        return None
    start += len(name) + 3
    return lower_head[start : lower_head.index(b"\r\n", start)]


def accept(content_type: str | None) -> str:
    """The Accept header for a request sending ``content_type``: protobuf answers to protobuf."""
    return ACCEPT_PROTOBUF if content_type == PROTOBUF else JSON


def pod_path(namespace: str, name: str, sub: str = "") -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}" + (f"/{sub}" if sub else "")
