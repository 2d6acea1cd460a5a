"""``/healthz``, ``/readyz``, ``/metrics`` and small JSON documents over plain HTTP.

``/readyz`` answers 200 only when every check passes and lists each one as
kube-apiserver does (``[+]informers ok`` / ``[-]leader failed: ...``);
``/metrics`` is the process's Prometheus registry. Each of ``documents``
(``/status``, ``/shadow``) is served as JSON; a document that answers None
is not available in this mode (404).
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Check = tuple[str, bool, str]
"""(name, passed, detail)."""
Document = Callable[[], object]
"""A JSON document served at a path (None: not available)."""


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` (``:port`` means every interface)."""
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"{address!r} is not host:port")
    return host or "0.0.0.0", int(port)


class BackgroundServer:
    """A threading HTTP(S) server on its own daemon thread (health endpoint, webhook)."""

    def __init__(
        self,
        address: str,
        handler: type[BaseHTTPRequestHandler],
        name: str,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.httpd = ThreadingHTTPServer(parse_address(address), handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self._thread = threading.Thread(target=self.httpd.serve_forever, name=name, daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class HealthServer(BackgroundServer):
    def __init__(
        self,
        address: str,
        registry: CollectorRegistry,
        checks: Callable[[], list[Check]],
        documents: dict[str, Document] | None = None,
    ) -> None:
        outer = self
        served = dict(documents or {})

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
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
                    doc = served[path]()
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
        super().__init__(address, Handler, "http")
