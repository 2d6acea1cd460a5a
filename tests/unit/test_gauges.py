"""The gauge server the local Prometheus scrapes (side-by-side bench, chaos soak, tests)."""

from __future__ import annotations

import socket
import urllib.request

from ksched.cluster.gauges import GaugeServer


def test_serves_what_render_returns_and_outlives_a_scrape_cut_short() -> None:
    values = {"a": 1}

    def render() -> bytes:
        return f'g{{node="a"}} {values["a"]}\n'.encode()

    with GaugeServer(render) as server:
        host, port = server.address.split(":")
        # A scraper that gives up at once: the server must go on answering.
        with socket.create_connection((host, int(port))) as s:
            s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        values["a"] = 2
        with urllib.request.urlopen(f"http://{server.address}/metrics", timeout=5) as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert r.read() == b'g{node="a"} 2\n'
