"""The workloads' pods and namespaces, the exporter of two live per-node gauges that
Prometheus scrapes for the metrics workload, and the ksched configuration per workload."""

from __future__ import annotations

import contextlib
import math
import time
import zlib
from collections.abc import Iterator

from ksched.bench.sidebyside.options import (
    HOSTNAME,
    KUBE_SCHEDULER_QPS,
    METRIC_PERIOD_S,
    POWER,
    UTILIZATION,
    ZONE,
)
from ksched.cluster.gauges import GaugeServer
from ksched.errors import KschedError
from ksched.loop.client import Kube
from ksched.objects import Obj


def _container(cpu: str, memory: str) -> list[Obj]:
    return [{"name": "app", "image": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]


def workload_pods(
    workload: str, namespace: str, scheduler_name: str, count: int, prefix: str, nodes: int, owner: Obj | None
) -> list[Obj]:
    """``count`` pods of ``workload``; ``owner`` is the ReplicaSet of the replicaset workload."""
    pods = []
    # Anti-affinity: groups small enough that each fits on half the nodes.
    groups = max(1, math.ceil(2 * count / max(nodes, 1)))
    for i in range(count):
        labels = {"app": workload}
        spec: Obj = {"schedulerName": scheduler_name, "containers": _container("100m", "128Mi")}
        meta: Obj = {"name": f"{prefix}-{i}", "namespace": namespace, "labels": labels}
        if workload == "replicaset" and owner is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        elif workload == "anti-affinity":
            labels["group"] = f"g{i % groups}"
            spec["affinity"] = {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"group": labels["group"]}},
                            "topologyKey": HOSTNAME,
                        }
                    ]
                }
            }
        elif workload == "spread":
            spec["topologySpreadConstraints"] = [
                {
                    "maxSkew": 1,
                    "topologyKey": ZONE,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": workload}},
                }
            ]
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    return pods


def fill_pods(
    namespace: str, scheduler_name: str, first: int, cpu_millis: int, sizes: tuple[tuple[int, int], ...]
) -> tuple[list[Obj], int]:
    """Bare pods named ``f-<first>``, ``f-<first + 1>``, ... whose cpu requests add up to at
    least ``cpu_millis``, each request the next of ``sizes`` (cpu millicores, memory MiB) in
    turn from the ``first``-th; and the millicores they request."""
    pods: list[Obj] = []
    total, i = 0, first
    while total < cpu_millis:
        cpu, memory = sizes[i % len(sizes)]
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"f-{i}", "namespace": namespace, "labels": {"app": "fill"}},
                "spec": {"schedulerName": scheduler_name, "containers": _container(f"{cpu}m", f"{memory}Mi")},
            }
        )
        total += cpu
        i += 1
    return pods, total


def setup_namespace(kube: Kube, namespace: str, workload: str, count: int) -> Obj | None:
    """The namespace, and for the replicaset workload its Service and ReplicaSet (returned).

    No controller-manager runs: the bench creates the ReplicaSet's pods itself, with the
    ownerReference the ReplicaSet controller would set, so the creation rate is the same
    for every scheduler and no controller competes for the CPU."""
    r = kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    if not r.ok and r.status != 409:
        raise KschedError(f"creating namespace {namespace}: HTTP {r.status}: {r.data[:200]!r}")
    if workload != "replicaset":
        return None
    selector = {"app": workload}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {"selector": selector, "ports": [{"port": 80}]},
    }
    kube.request("POST", f"/api/v1/namespaces/{namespace}/services", body=service)
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "replicas": count,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {"containers": _container("100m", "128Mi")},
            },
        },
    }
    r = kube.request("POST", f"/apis/apps/v1/namespaces/{namespace}/replicasets", body=rs)
    if r.status == 409:
        r = kube.request("GET", f"/apis/apps/v1/namespaces/{namespace}/replicasets/web")
    if not r.ok:
        raise KschedError(f"creating the ReplicaSet in {namespace}: HTTP {r.status}: {r.data[:200]!r}")
    owner: Obj = r.json()
    return owner


# ---------------------------------------------------------------------------
# Exporter of two live per-node gauges


def _metric_values(nodes: list[str], now: float) -> str:
    period = int(now // METRIC_PERIOD_S)
    lines = [f"# TYPE {UTILIZATION} gauge\n"]
    power = [f"# TYPE {POWER} gauge\n"]
    for n in nodes:
        h = zlib.crc32(f"{n}/{period}".encode())
        lines.append(f'{UTILIZATION}{{node="{n}"}} {(h % 1000) / 1000:.3f}\n')
        power.append(f'{POWER}{{node="{n}"}} {100 + (h >> 10) % 300}\n')
    return "".join(lines + power)


@contextlib.contextmanager
def exporter(nodes: list[str]) -> Iterator[str]:
    """Serve the gauges on loopback for Prometheus to scrape; yields host:port."""

    cache: dict[int, bytes] = {}

    def body() -> bytes:
        # Rendered once per period: thousands of nodes, scraped every second.
        now = time.time()
        period = int(now // METRIC_PERIOD_S)
        if period not in cache:
            cache.clear()
            cache[period] = _metric_values(nodes, now).encode()
        return cache[period]

    with GaugeServer(body) as server:
        yield server.address


def ksched_config(workload: str, prometheus: str | None) -> Obj:
    config: Obj = {
        "apiVersion": "ksched.io/v1alpha1",
        "kind": "KschedConfiguration",
        "leaderElection": {"leaderElect": False},
        # The client rate limit kube-scheduler gets here: its own default (500 qps) would cap
        # ksched's binds and events at 500 writes/s, below the API server's ceiling.
        "clientConnection": {"qps": KUBE_SCHEDULER_QPS, "burst": int(KUBE_SCHEDULER_QPS * 2)},
    }
    if workload == "metrics":
        refresh = {"min": "1s", "max": "5s"}
        config["prometheus"] = {"url": prometheus}
        config["metrics"] = [
            {"name": "utilization", "source": "prometheus", "query": UTILIZATION, "nodeLabel": "node"}
            | {"prefer": "lower", "missing": "neutral", "weight": 2, "maxAge": "1m", "refresh": refresh},
            {"name": "power", "source": "prometheus", "query": POWER, "nodeLabel": "node"}
            | {"prefer": "lower", "missing": "neutral", "weight": 1, "maxAge": "1m", "refresh": refresh},
        ]
    return config
