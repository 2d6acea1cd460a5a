"""``source: metrics-server``: nodes' usage from the resource metrics API (``metrics.k8s.io``).

Owns one list of ``/apis/metrics.k8s.io/v1beta1/nodes`` per refresh, through the
loop's API client (the aggregation layer forwards it to metrics-server), turned into
each node's usage of the metric's resource over its allocatable. The sample is as old
as its oldest item's ``timestamp``, and averages over the longest item's ``window``
(the load estimate fades a placed pod out over it). A node metrics-server does not list,
or one without allocatable, has no value.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ksched.config import MetricConfig
from ksched.engine.quantity import parse_quantity
from ksched.errors import QuantityError
from ksched.loop.client import ApiUnavailableError, Kube
from ksched.loop.metrics.samples import Sample, SourceError, parse_time
from ksched.objects import Obj

NODE_METRICS_PATH = "/apis/metrics.k8s.io/v1beta1/nodes"
QUERY_TIMEOUT_S = 5.0
# A Go duration as metav1.Duration writes it (``10.5s``, ``1m0.25s``).
_GO_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?)(h|ms|us|µs|ns|m|s)")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def go_duration_s(raw: object) -> float | None:
    """A Go duration string in seconds (None where absent or malformed)."""
    if not isinstance(raw, str) or not raw:
        return None
    parts = _GO_DURATION_PART.findall(raw)
    if not parts or "".join(n + u for n, u in parts) != raw:
        return None
    return sum(float(n) * _GO_UNITS[u] for n, u in parts)


def _quantity(raw: object) -> float | None:
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        return None
    try:
        return float(parse_quantity(raw))
    except (QuantityError, OverflowError):  # OverflowError: past float's range (1e999)
        return None


class MetricsServerSource:
    """Node usage from metrics-server, read through the API server."""

    def __init__(self, kube: Kube, timeout_s: float = QUERY_TIMEOUT_S) -> None:
        self.kube = kube
        self.timeout_s = timeout_s

    def query(self, metric: MetricConfig, nodes: Sequence[Obj]) -> Sample:
        resource = metric.resource or "cpu"
        try:
            r = self.kube.request("GET", NODE_METRICS_PATH, timeout=self.timeout_s)
        except ApiUnavailableError as err:
            raise SourceError(f"{metric.name}: metrics-server: {err}") from None
        if not r.ok:
            raise SourceError(
                f"{metric.name}: metrics-server: HTTP status {r.status} on {NODE_METRICS_PATH} ({r.data[:300]!r})"
            )
        try:
            items = r.json()["items"]
        except (ValueError, KeyError, TypeError):
            raise SourceError(f"{metric.name}: metrics-server: the answer is not a NodeMetricsList") from None
        allocatable: dict[str, float] = {}
        for node in nodes:
            amount = _quantity(((node.get("status") or {}).get("allocatable") or {}).get(resource))
            if amount:
                allocatable[str((node.get("metadata") or {}).get("name"))] = amount
        values: dict[str, float] = {}
        times: list[float] = []
        windows: list[float] = []
        unmapped = not_finite = 0
        for item in items or []:
            name = str((item.get("metadata") or {}).get("name"))
            used = _quantity((item.get("usage") or {}).get(resource))
            if name not in allocatable:
                unmapped += 1
                continue
            if used is None:
                not_finite += 1
                continue
            values[name] = used / allocatable[name]
            at = parse_time(item.get("timestamp"))
            if at is not None:
                times.append(at)
            window = go_duration_s(item.get("window"))
            if window is not None:
                windows.append(window)
        if not times:
            raise SourceError(f"{metric.name}: metrics-server listed no node with a usage timestamp")
        return Sample(values, min(times), unmapped, not_finite, max(windows, default=None))
