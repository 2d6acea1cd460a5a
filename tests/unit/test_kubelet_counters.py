"""The load simulation's counters process (:mod:`ksched.cluster.counters`): a pod's start
makes it read the pod's node once from KWOK, so KWOK's CPU counters for the pod count from
then, as a kubelet's do, rather than from the pod's first scrape."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ksched.cluster import counters


def pod(uid: str, node: str | None, started: bool) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "name": uid, "namespace": "ns", "resourceVersion": "7"},
        "spec": {"nodeName": node} if node else {},
        "status": {"startTime": "2026-12-01T10:00:00Z"} if started else {},
    }


def test_a_pod_names_its_node_once_when_it_has_started() -> None:
    started = counters.Started()
    assert started.node({"type": "ADDED", "object": pod("a", "n1", started=False)}) is None
    assert started.node({"type": "MODIFIED", "object": pod("a", "n1", started=True)}) == "n1"
    assert started.node({"type": "MODIFIED", "object": pod("a", "n1", started=True)}) is None
    assert started.node({"type": "ADDED", "object": pod("b", None, started=True)}) is None
    assert len(started) == 1
    assert started.node({"type": "DELETED", "object": pod("a", "n1", started=True)}) is None
    assert len(started) == 0


class _Servers:
    """A fake API server, whose list of pods is ``listed``, whose first watch sends ``events``
    and every later one nothing, and a fake KWOK that records the paths read from it."""

    def __init__(self, listed: list[dict[str, Any]], events: list[dict[str, Any]]) -> None:
        self.reads: list[str] = []
        self.authorizations: list[str | None] = []
        watches = [0]
        outer = self

        class Api(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.authorizations.append(self.headers.get("Authorization"))
                if "watch=true" not in self.path:
                    body = json.dumps({"metadata": {"resourceVersion": "5"}, "items": listed}).encode()
                else:
                    watches[0] += 1
                    lines = events if watches[0] == 1 else []
                    body = b"".join(json.dumps(e).encode() + b"\n" for e in lines)
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class Kwok(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.reads.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.api = ThreadingHTTPServer(("127.0.0.1", 0), Api)
        self.kwok = ThreadingHTTPServer(("127.0.0.1", 0), Kwok)
        for server in (self.api, self.kwok):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def close(self) -> None:
        for server in (self.api, self.kwok):
            server.shutdown()
            server.server_close()


@pytest.fixture
def servers() -> Iterator[_Servers]:
    s = _Servers(
        [pod("before-the-watch", "n3", started=True)],
        [
            {"type": "ADDED", "object": pod("waiting", "n1", started=False)},
            {"type": "MODIFIED", "object": pod("running", "n2", started=True)},
            {"type": "MODIFIED", "object": pod("running", "n2", started=True)},
        ],
    )
    yield s
    s.close()


def test_a_started_pod_has_its_node_read_from_kwok_once(servers: _Servers, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "clusters": [{"cluster": {"server": f"http://127.0.0.1:{servers.api.server_port}"}}],
                "users": [{"user": {"token": "secret"}}],
            }
        )
    )
    stop = threading.Event()
    thread = threading.Thread(
        target=counters.run, args=(str(kubeconfig), f"http://127.0.0.1:{servers.kwok.server_port}", stop)
    )
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while len(servers.reads) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # a second read, if one were coming, would come now
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    # The pod listed before the watch, then the one the watch saw start; each once, although
    # every watch after the first ends at once and the pods are listed again.
    assert servers.reads == ["/metrics/nodes/n3/metrics/resource", "/metrics/nodes/n2/metrics/resource"]
    assert set(servers.authorizations) == {"Bearer secret"}
