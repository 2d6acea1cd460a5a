"""Prometheus as a metric source: one instant query for every node, mapped to nodes by a
label holding the node name or an instance address; and pods' measured usage for the load
estimate (``estimate.podQuery``), in the engine's unit.

The query goes through prometheus-api-client's session (its TLS, retry and proxy set-up),
but the answer is decoded by ``ksched._core`` with the GIL released rather than by the
client's ``custom_query`` (see :mod:`ksched.loop.metrics.metric_sources`). Raises
:class:`~ksched.loop.metrics.samples.SourceError` for an unreachable server, an HTTP error
or an answer it cannot read; keeps no state between queries.

A node (or pod) gets one value. Several series for it (a query without ``sum by (node)``
answers per CPU, per device, per container) are combined by the metric's ``aggregate``, and
without one they are a SourceError naming the query and the node: the metric is degraded
rather than scored by whichever series came last.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence

import requests
from urllib3.util.retry import Retry

from ksched import _core
from ksched.config import MetricConfig
from ksched.config.metrics import AGGREGATES
from ksched.loop.metrics.samples import Sample, SourceError
from ksched.objects import Obj, meta

QUERY_TIMEOUT_S = 5.0
HTTP_OK = 200
# A pod usage query answers in the resource's own unit (cores, bytes); the engine counts
# CPU in millicores.
ENGINE_UNITS = {"cpu": 1000.0}
# How each of AGGREGATES (a metric's ``aggregate``) combines one node's (or pod's) series.
COMBINE: dict[str, Callable[[list[float]], float]] = {
    "sum": math.fsum,
    "max": max,
    "min": min,
    "avg": statistics.fmean,
}


def node_addresses(node: Obj) -> list[str]:
    status = node.get("status") or {}
    return [str(a.get("address")) for a in status.get("addresses") or [] if a.get("address")]


def _strip_port(instance: str) -> str:
    if instance.startswith("["):  # [ipv6]:port
        return instance[1 : instance.find("]")]
    host, sep, port = instance.rpartition(":")
    return host if sep and port.isdigit() and ":" not in host else instance


class NodeResolver:
    """Maps a series label value to a node name: the name itself, else a node address.

    The address table is built on the first label that is not a node's name: a metric
    labelled by node name (the usual case) never pays for it."""

    def __init__(self, nodes: Sequence[Obj]) -> None:
        self.nodes = nodes
        # Inline rather than meta(): a set of 5,000 names each refresh.
        self.names = {str((n.get("metadata") or {}).get("name")) for n in nodes}
        self._by_address: dict[str, str] | None = None

    @property
    def by_address(self) -> dict[str, str]:
        if self._by_address is None:
            self._by_address = {a: str(meta(n).get("name")) for n in self.nodes for a in node_addresses(n)}
        return self._by_address

    def __call__(self, label: str) -> str | None:
        if label in self.names:
            return label
        host = _strip_port(label)
        if host in self.names:
            return host
        return self.by_address.get(host)

    def mapped(self, labels: list[str], values: list[float]) -> tuple[list[str], list[float], int]:
        """The node of each series labelled ``labels`` that names one, its value, and how many
        series match no node (a node named by several series is named as often)."""
        if self.names.issuperset(labels):
            return labels, values, 0
        nodes: list[str] = []
        kept: list[float] = []
        for label, v in zip(labels, values, strict=True):
            node = self(label)
            if node is not None:
                nodes.append(node)
                kept.append(v)
        return nodes, kept, len(labels) - len(nodes)


def one_value_each(
    keys: list[str], values: list[float], aggregate: str | None, what: str, noun: str, by: str
) -> dict[str, float]:
    """Key (a node, or ``namespace/pod``) -> its series' value. Several series for one key are
    combined by ``aggregate``; without one, they are a SourceError saying that ``what`` (the
    metric and its query) returned them for the ``noun`` (node, pod) named, and that a
    ``sum by (<by>)`` would aggregate them."""
    one = dict(zip(keys, values, strict=True))
    if len(one) == len(keys):
        return one
    series: dict[str, list[float]] = {}
    for key, v in zip(keys, values, strict=True):
        series.setdefault(key, []).append(v)
    if aggregate is not None:
        return {key: COMBINE[aggregate](vs) for key, vs in series.items()}
    several = [(key, len(vs)) for key, vs in series.items() if len(vs) > 1]
    key, n = several[0]
    others = len(several) - 1
    more = f" (and {others} more {noun}{'s' if others > 1 else ''})" if others else ""
    raise SourceError(
        f"{what} returned {n} series for {noun} {key}{more}: aggregate them, "
        f"e.g. sum by ({by}) (...), or set aggregate: {'|'.join(AGGREGATES)}"
    )


class PrometheusSource:
    """Instant queries on prometheus-api-client's session, decoded by ``ksched._core``."""

    def __init__(self, url: str, timeout_s: float = QUERY_TIMEOUT_S) -> None:
        from prometheus_api_client import PrometheusConnect

        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.session = requests.Session()
        # No client-side retries: the refresh loop retries on its own cadence, and a
        # retrying client would hide an outage for several timeouts.
        self.client = PrometheusConnect(
            url=url, session=self.session, timeout=timeout_s, retry=Retry(total=0)
        )

    def _answer(self, query: str, what: str) -> bytes:
        """The body of an instant query's answer; a SourceError naming ``what`` failed."""
        try:
            response = self.session.get(
                f"{self.url}/api/v1/query",
                params={"query": query},
                headers=self.client.headers,
                timeout=self.timeout_s,
            )
        except requests.RequestException as err:
            raise SourceError(f"{what} failed: {err}") from None
        if response.status_code != HTTP_OK:
            raise SourceError(
                f"{what} failed: HTTP status {response.status_code} ({response.content[:500]!r})"
            )
        return response.content

    def query(self, metric: MetricConfig, resolve: NodeResolver) -> Sample:
        content = self._answer(metric.query or "", f"{metric.name}: query")
        sampled_at = time.time()
        try:
            labels, values, oldest, not_finite = _core.decode_instant_vector(content, metric.node_label)
        except ValueError as err:
            raise SourceError(f"{metric.name}: {err}") from None
        nodes, kept, unmapped = resolve.mapped(labels, values)
        what = f"{metric.name}: query"
        mapped = one_value_each(nodes, kept, metric.aggregate, what, "node", metric.node_label)
        return Sample(mapped, sampled_at if oldest is None else min(sampled_at, oldest), unmapped, not_finite)

    def pod_usage(self, metric: MetricConfig) -> Sample:
        """Each pod's measured usage of the estimated resource (``estimate.podQuery``), by
        ``namespace/pod``, in the engine's unit."""
        estimate = metric.estimate
        assert estimate is not None and estimate.pod_query is not None
        content = self._answer(estimate.pod_query, f"{metric.name}: pod usage query")
        sampled_at = time.time()
        try:
            # Two passes over one answer keep the same series in the same order.
            pods, values, oldest, not_finite = _core.decode_instant_vector(content, estimate.pod_label)
            namespaces, _, _, _ = _core.decode_instant_vector(content, estimate.namespace_label)
        except ValueError as err:
            raise SourceError(f"{metric.name}: pod usage query: {err}") from None
        unit = ENGINE_UNITS.get(estimate.resource, 1.0)
        keys: list[str] = []
        kept: list[float] = []
        for ns, pod, v in zip(namespaces, pods, values, strict=True):
            if ns and pod:
                keys.append(f"{ns}/{pod}")
                kept.append(v * unit)
        by = f"{estimate.namespace_label}, {estimate.pod_label}"
        usage = one_value_each(keys, kept, metric.aggregate, f"{metric.name}: pod usage query", "pod", by)
        return Sample(
            usage,
            sampled_at if oldest is None else min(sampled_at, oldest),
            len(pods) - len(keys),
            not_finite,
        )
