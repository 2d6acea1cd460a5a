"""The live cluster as a cluster file: what ``ksched explain NS/POD`` reads without one.

Lists, through the kubeconfig, every kind the offline form reads from a file
(nodes, pods, namespaces, PodDisruptionBudgets, PodGroups when the CRD is
served, Services and workload controllers, PersistentVolumes, claims,
StorageClasses and CSINodes) and gives each item the
``apiVersion`` and ``kind`` a list response leaves out, so the objects go to
the same :func:`~ksched.engine.cluster_file.sort_objects` and
:func:`~ksched.engine.simulation.run_simulation` as a file's. Live metrics
are read once from the configured Prometheus into the offline form's
``node -> {metric: value}`` mapping; a metric that cannot be read is dropped,
as the running scheduler drops it (degraded mode).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ksched.config import Config
from ksched.engine.gangs import POD_GROUP_API
from ksched.engine.spread_selectors import SELECTOR_OWNERS
from ksched.engine.storage import STORAGE_KINDS
from ksched.errors import KschedError
from ksched.loop.client import Kube, load_configuration
from ksched.loop.metrics.metric_sources import SourceError
from ksched.loop.metrics.prometheus import NodeResolver, PrometheusSource
from ksched.objects import Obj

# (list path, apiVersion, kind, optional: a CRD that may not be installed)
LIVE_KINDS = (
    ("/api/v1/nodes", "v1", "Node", False),
    ("/api/v1/namespaces", "v1", "Namespace", False),
    ("/api/v1/pods", "v1", "Pod", False),
    ("/apis/policy/v1/poddisruptionbudgets", "policy/v1", "PodDisruptionBudget", False),
    (f"/apis/{POD_GROUP_API}/podgroups", POD_GROUP_API, "PodGroup", True),
    *((path, api_version, kind, False) for path, api_version, kind, _ in SELECTOR_OWNERS),
    *((path, api_version, kind, False) for path, api_version, kind in STORAGE_KINDS),
)
PAGE_SIZE = 500
# One list at a time: a handful of connections is plenty.
POOL_SIZE = 4
HTTP_NOT_FOUND = 404


def connect(kubeconfig: str | None) -> Kube:
    return Kube(load_configuration(kubeconfig, POOL_SIZE))


def live_objects(kube: Kube) -> list[Obj]:
    """Every object of :data:`LIVE_KINDS`, with its apiVersion and kind set."""
    out: list[Obj] = []
    for path, api_version, kind, optional in LIVE_KINDS:
        cont: str | None = None
        while True:
            r = kube.request("GET", path, query={"limit": PAGE_SIZE, "continue": cont})
            if r.status == HTTP_NOT_FOUND and optional:
                break
            if not r.ok:
                raise KschedError(f"list {path}: HTTP {r.status}: {r.data[:200].decode(errors='replace')}")
            body: dict[str, Any] = r.json()
            for item in body.get("items") or []:
                out.append({"apiVersion": api_version, "kind": kind, **item})
            cont = (body.get("metadata") or {}).get("continue")
            if not cont:
                break
    return out


def live_metrics(config: Config, nodes: list[Obj]) -> tuple[Config, dict[str, dict[str, float]], list[str]]:
    """One read of each Prometheus metric: the configuration without the metrics that could
    not be read, their values as ``node -> {metric: value}``, and why each dropped one was."""
    live = [m for m in config.metrics if m.source == "prometheus"]
    values: dict[str, dict[str, float]] = {}
    degraded: list[str] = []
    dropped: set[str] = set()
    if not live:
        return config, values, degraded
    source = (
        PrometheusSource(config.prometheus.url, config.prometheus.timeout_s)
        if config.prometheus.url
        else None
    )
    resolve = NodeResolver(nodes)
    for m in live:
        why = None
        if source is None:
            why = "no Prometheus URL configured"
        else:
            try:
                sample = source.query(m, resolve)
            except SourceError as err:
                why = str(err)
            else:
                if not sample.values:
                    why = "no value for any node"
                for node, v in sample.values.items():
                    values.setdefault(node, {})[m.name] = v
        if why is not None:
            dropped.add(m.name)
            degraded.append(f"{m.name}: {why}")
    kept = tuple(m for m in config.metrics if m.name not in dropped)
    return dataclasses.replace(config, metrics=kept), values, degraded
