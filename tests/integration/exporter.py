"""A tiny Prometheus exporter serving per-node gauges on loopback, for the real Prometheus to scrape."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

NODE_VALUES = {"kwok-node-00000": 0.25, "kwok-node-00001": 0.75, "kwok-node-00002": 0.5}


def utilization_metric(**extra: Any) -> dict[str, Any]:
    """ksched's metric on the exported gauge: the lowest utilization wins, a node without one is excluded."""
    return {
        "name": "utilization",
        "source": "prometheus",
        "query": "node_test_utilization",
        "nodeLabel": "node",
        "prefer": "lower",
        "missing": "exclude",
        "weight": 10,
        **extra,
    }


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = "# TYPE node_test_utilization gauge\n" + "".join(
            f'node_test_utilization{{node="{n}"}} {v}\n' for n, v in NODE_VALUES.items()
        )
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return


@contextmanager
def serve() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
