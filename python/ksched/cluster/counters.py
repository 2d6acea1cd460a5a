"""The load simulation's CPU counters, counted from each container's start as a kubelet's are.

Owns one process beside KWOK (``python -m ksched.cluster.counters``), which
:func:`ksched.cluster.local.up` starts with the load simulation. KWOK keeps a container's
cumulative usage (``pod_cpu_usage_seconds_total``, ``container_cpu_usage_seconds_total``)
from the first time anything reads its node's resource metrics, so a pod's first scrape read
0 core-seconds where a kubelet's reads the CPU time since the container started (its cgroup
counts from then). A query that measures a pod from its first scrape, its CPU time over the
seconds since ``container_start_time_seconds`` (``examples/load-aware.yaml``'s
``podQuery``), then read every simulated pod as idle for a scrape. This process watches the
bound pods and, once one has a ``startTime``, reads its node's resource metrics once, so that
KWOK's counters for it start within a moment of that. Promises: one read per node for the
pods that started together; reads only KWOK's loopback address; a failed read or a dropped
watch is logged and never ends the process.
"""

from __future__ import annotations

import argparse
import json
import logging
import queue
import ssl
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import urllib3

from ksched.cluster.load import resource_metrics_path
from ksched.cluster.processes import PYTHON_COMPONENT, Launcher

log = logging.getLogger("ksched.cluster.counters")

# How long the watch may stay silent before it is opened again (the API server ends it sooner).
WATCH_S = 300
# The bound pods, which the list and the watch both ask for.
BOUND_PODS = "/api/v1/pods?fieldSelector=spec.nodeName%21%3D"
# The read of a node's resource metrics; a slow one is dropped, the next pod's read retries.
READ_TIMEOUT_S = 5.0


class Started:
    """Which bound pods have started, by UID: a pod's first event with a ``startTime`` names
    its node once; a deleted pod is forgotten."""

    def __init__(self) -> None:
        self._uids: set[str] = set()

    def node(self, event: dict[str, Any]) -> str | None:
        """The node whose counters to start for this watch event, if any."""
        pod = event.get("object") or {}
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        if event.get("type") == "DELETED":
            self._uids.discard(uid)
            return None
        node = (pod.get("spec") or {}).get("nodeName")
        if not uid or not node or not (pod.get("status") or {}).get("startTime") or uid in self._uids:
            return None
        self._uids.add(uid)
        return str(node)

    def __len__(self) -> int:
        return len(self._uids)


class Reader:
    """Reads nodes' resource metrics from KWOK on a thread of its own, each node once for every
    run of requests that arrive before its read starts."""

    def __init__(self, metrics_url: str) -> None:
        self._pool = urllib3.PoolManager(maxsize=2, retries=False)
        self._base = metrics_url.rstrip("/")
        self._queue: queue.Queue[str] = queue.Queue()
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._run, name="counters-read", daemon=True).start()

    def request(self, node: str) -> None:
        with self._lock:
            if node in self._pending:
                return
            self._pending.add(node)
        self._queue.put(node)

    def _run(self) -> None:
        while True:
            node = self._queue.get()
            with self._lock:
                self._pending.discard(node)
            try:
                r = self._pool.request(
                    "GET",
                    self._base + resource_metrics_path(node),
                    timeout=READ_TIMEOUT_S,
                    preload_content=True,
                )
                if r.status != 200:
                    log.warning("reading %s's resource metrics: HTTP %d", node, r.status)
            except (urllib3.exceptions.HTTPError, OSError) as err:
                log.warning("reading %s's resource metrics: %s", node, err)


def _api(kubeconfig: str) -> tuple[urllib3.PoolManager, str, dict[str, str]]:
    """A connection pool, the API server's URL and the headers from the local cluster's kubeconfig."""
    with open(kubeconfig) as f:
        config = json.load(f)
    cluster = config["clusters"][0]["cluster"]
    pool = urllib3.PoolManager(retries=False)
    if "certificate-authority" in cluster:
        context = ssl.create_default_context(cafile=cluster["certificate-authority"])
        pool = urllib3.PoolManager(ssl_context=context, retries=False)
    token = config["users"][0]["user"]["token"]
    return pool, str(cluster["server"]).rstrip("/"), {"Authorization": f"Bearer {token}"}


def _events(
    pool: urllib3.PoolManager, server: str, headers: dict[str, str], version: str
) -> Iterator[dict[str, Any]]:
    """The bound pods' watch events from ``version`` on, until the watch ends."""
    query = f"watch=true&allowWatchBookmarks=false&timeoutSeconds={WATCH_S}"
    response = pool.request(
        "GET",
        f"{server}{BOUND_PODS}&{query}&resourceVersion={version}",
        headers=headers,
        preload_content=False,
        timeout=urllib3.Timeout(connect=5.0, read=WATCH_S + 30),
    )
    try:
        if response.status != 200:
            raise OSError(f"watch: HTTP {response.status}")
        buffer = b""
        for chunk in response.stream(65536):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    yield orjson.loads(line)
    finally:
        # A watch left unread (an ERROR event, or stopping) must not go back to the pool.
        response.close()
        response.release_conn()


def _bound_pods(pool: urllib3.PoolManager, server: str, headers: dict[str, str]) -> tuple[str, list[Any]]:
    """The bound pods now, and the resourceVersion to watch from."""
    r = pool.request("GET", f"{server}{BOUND_PODS}", headers=headers, timeout=30.0)
    if r.status != 200:
        raise OSError(f"listing pods: HTTP {r.status}")
    listing = orjson.loads(r.data)
    return str(listing["metadata"]["resourceVersion"]), list(listing.get("items") or [])


def run(kubeconfig: str, metrics_url: str, stop: threading.Event | None = None) -> None:
    """Watch the bound pods until ``stop`` is set (for ever without it), starting each one's
    counters as it starts."""
    pool, server, headers = _api(kubeconfig)
    reader, started = Reader(metrics_url), Started()
    log.info(
        "watching the bound pods at %s; reading a node at %s once a pod on it starts", server, metrics_url
    )
    version: str | None = None
    while stop is None or not stop.is_set():
        try:
            if version is None:
                # From a list: pods that started before the watch (or while it was down) have
                # their nodes read too; a read too many does no harm.
                version, pods = _bound_pods(pool, server, headers)
                for pod in pods:
                    node = started.node({"type": "ADDED", "object": pod})
                    if node is not None:
                        reader.request(node)
            opened = time.monotonic()
            for event in _events(pool, server, headers, version):
                if event.get("type") == "ERROR":
                    # 410 Gone: list again, and watch from there.
                    log.warning("watch: %s", (event.get("object") or {}).get("message"))
                    version = None
                    break
                meta = (event.get("object") or {}).get("metadata") or {}
                version = str(meta.get("resourceVersion") or version)
                node = started.node(event)
                if node is not None:
                    reader.request(node)
            else:
                if time.monotonic() - opened < 1.0:
                    raise OSError("the watch ended at once")
        except (urllib3.exceptions.HTTPError, OSError, ValueError, KeyError) as err:
            # Listed again before the next watch: a version the API server refused (HTTP
            # 410) is never asked for twice.
            version = None
            log.warning("watching pods: %s; listing and watching again in 1 s", err)
            if stop is None:
                time.sleep(1.0)
            elif stop.wait(1.0):
                return


def start(launcher: Launcher) -> None:
    """Start the process for the cluster ``launcher`` starts, once KWOK serves its nodes."""
    state = launcher.state
    launcher.start(
        "counters",
        sys.executable,
        [
            "-m",
            PYTHON_COMPONENT.format("counters"),
            f"--kubeconfig={state.kubeconfig}",
            f"--metrics-url=http://127.0.0.1:{state.ports['kwok']}",
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ksched.cluster.counters", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--metrics-url", required=True, help="KWOK's loopback address, http://127.0.0.1:PORT")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    run(args.kubeconfig, args.metrics_url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
