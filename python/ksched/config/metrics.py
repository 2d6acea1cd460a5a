"""``metrics``: each metric's source, how its value scores and filters nodes, and
how fresh it must be. Defaults are :class:`MetricConfig`'s field defaults."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ksched.config.estimate import EstimateConfig, parse_estimate, parse_resource
from ksched.config.values import (
    MAX_WEIGHT,
    as_float,
    as_int,
    as_list,
    as_str,
    check_keys,
    duration_at,
    parse_duration,
)
from ksched.errors import ConfigError

PREFER = ("lower", "higher", "target(<number>)")
MISSING = ("neutral", "worst", "exclude")
SOURCES = ("prometheus", "annotation", "metrics-server")
ON_STALE = ("open", "closed")
ON_SATURATION = ("pending", "leastLoaded")
# How several series for one node (or one pod, in ``estimate.podQuery``) combine into its value.
AGGREGATES = ("sum", "max", "min", "avg")
# metrics-server's resource metrics: the node's usage of this resource over its allocatable.
METRICS_SERVER_RESOURCES = ("cpu", "memory")
# Owner kinds whose pods the metric filters pass by default (a DaemonSet pod must land on
# its node whatever the load). Mirror (static) pods are never scheduled by anyone.
DEFAULT_EXEMPT = ("DaemonSet",)
# A node annotation ``<prefix><metric>-above`` / ``-below`` overrides the metric's threshold there.
NODE_THRESHOLD_PREFIX = "threshold.ksched.io/"
# A range selector or subquery range in PromQL (``[5m]``, ``[1h30m:1m]``), and its parts.
_RANGE = re.compile(r"\[\s*((?:\d+(?:ms|s|m|h|d|w|y))+)\s*(?::[^\]]*)?\]")
_RANGE_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_PROMQL_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
# Pod priorities are int32.
_PRIORITY = (-(2**31), 2**31 - 1)
_TARGET = re.compile(r"^target\(\s*([-+0-9.eE]+)\s*\)$")
_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# The shortest refresh interval: each refresh is a query to the source, and 0 turns the
# refresher into a tight loop against it; two queries a second per metric is already more
# than any source refreshes its values (the integration tests refresh this fast).
MIN_REFRESH_S = 0.5
_KEYS = (
    "name",
    "source",
    "query",
    "annotation",
    "nodeLabel",
    "prefer",
    "normalization",
    "filter",
    "missing",
    "weight",
    "maxAge",
    "refresh",
    "herdEstimate",
    "estimate",
    "timestampAnnotation",
    "resource",
    "onStale",
    "onSaturation",
    "aggregate",
)


@dataclass(frozen=True)
class Band:
    """``filter.bands[]``: pods at or above ``min_priority`` use these thresholds instead
    (None: no threshold on that side for them)."""

    min_priority: int
    above: float | None
    below: float | None


@dataclass(frozen=True)
class MetricConfig:
    name: str
    source: str
    query: str | None = None
    annotation: str | None = None
    node_label: str = "node"
    prefer: str = "lower"
    target: float | None = None
    range: tuple[float, float] | None = None
    above: float | None = None
    below: float | None = None
    missing: str = "neutral"
    weight: float = 1.0
    max_age_s: float = 120.0
    min_refresh_s: float = 5.0
    max_refresh_s: float = 60.0
    # Recently placed pods counted on their nodes until the metric shows them (None: off).
    estimate: EstimateConfig | None = None
    # annotation source: the node annotation holding the RFC 3339 time the value was
    # measured (None: ``<annotation>-timestamp``); a value older than maxAge is stale.
    timestamp_annotation: str | None = None
    # metrics-server source: the resource whose usage/allocatable is the value.
    resource: str | None = None
    # Stale or unreachable source: ``open`` drops the metric (degraded mode), ``closed``
    # filters out every node without a fresh value.
    on_stale: str = "open"
    # Every feasible node over a threshold: ``pending`` leaves the pod pending, ``leastLoaded``
    # places it as if the thresholds were off (metric scores still rank the nodes).
    on_saturation: str = "pending"
    # Priority bands (highest ``min_priority`` first) and owner kinds the filter passes.
    bands: tuple[Band, ...] = ()
    exempt: tuple[str, ...] = DEFAULT_EXEMPT
    # Several series for one node (or pod) in a Prometheus answer: combined by this (one of
    # AGGREGATES); None: they are an error and the refresh fails.
    aggregate: str | None = None

    @property
    def timestamp_key(self) -> str | None:
        if self.source != "annotation" or self.annotation is None:
            return None
        return self.timestamp_annotation or f"{self.annotation}-timestamp"

    @property
    def load_sign(self) -> float:
        """Which way a pod's load moves the value: +1 for a metric that rises with load
        (utilisation, latency), -1 for one that falls (free memory: ``prefer: higher``, or a
        ``filter.below`` without ``filter.above``). The load estimate adds or takes off by it."""
        if self.prefer == "higher" or (self.above is None and self.below is not None):
            return -1.0
        return 1.0

    def window_s(self) -> float:
        """How long a placed pod is still partly missing from the metric's value."""
        if self.estimate is None:
            return 0.0
        if self.estimate.window_s is not None:
            return self.estimate.window_s
        return query_window_s(self.query or "")

    def thresholds(self, priority: int) -> tuple[float | None, float | None]:
        """``(above, below)`` for a pod of this priority."""
        for band in self.bands:
            if priority >= band.min_priority:
                return band.above, band.below
        return self.above, self.below


def query_window_s(query: str) -> float:
    """How far back a PromQL query's value reaches, in seconds (0: no range at all).

    A range selector reaches back its range (``rate(x[5m])``: 300). A subquery reaches back its
    own range plus what its inner expression reaches: ``max_over_time(rate(x[1m])[5m:30s])``
    shows a pod 360 s after it starts, not 300. Ranges side by side take the longest
    (``a[5m] + b[1m]``: 300). An ``offset`` is not counted."""
    return max((_reach(query, m) for m in _RANGE.finditer(query)), default=0.0)


def _seconds(duration: str) -> float:
    return float(sum(int(n) * _PROMQL_UNITS[u] for n, u in _RANGE_PART.findall(duration)))


def _reach(query: str, match: re.Match[str]) -> float:
    """One range's reach: its own range, plus its inner expression's reach where it closes a
    subquery (the range follows a parenthesised expression)."""
    own = _seconds(match.group(1))
    end = match.start() - 1
    while end >= 0 and query[end].isspace():
        end -= 1
    if end < 0 or query[end] != ")":
        return own
    depth = 0
    for start in range(end, -1, -1):
        depth += {")": 1, "(": -1}.get(query[start], 0)
        if depth == 0:
            return own + query_window_s(query[start + 1 : end])
    return own


def _bands(raw: Any, path: str) -> tuple[Band, ...]:
    bands = []
    for i, raw_band in enumerate(as_list(raw, path)):
        b = check_keys(raw_band, f"{path}[{i}]", ("minPriority", "above", "below"), ("minPriority",))
        band = Band(
            min_priority=as_int(b["minPriority"], f"{path}[{i}].minPriority", *_PRIORITY),
            above=as_float(b["above"], f"{path}[{i}].above") if "above" in b else None,
            below=as_float(b["below"], f"{path}[{i}].below") if "below" in b else None,
        )
        _check_thresholds(band.above, band.below, f"{path}[{i}]")
        bands.append(band)
    if len({b.min_priority for b in bands}) != len(bands):
        raise ConfigError(f"{path}: duplicate minPriority")
    return tuple(sorted(bands, key=lambda b: -b.min_priority))


def _check_thresholds(above: float | None, below: float | None, path: str) -> None:
    """A node passes a filter with its value at most ``above`` and at least ``below``: with
    ``below`` over ``above`` no value passes, and the filter would reject every node."""
    if above is not None and below is not None and below > above:
        raise ConfigError(
            f"{path}: below ({below:g}) is over above ({above:g}): no value passes, every node would be rejected"
        )


def _prefer(obj: Any, path: str) -> tuple[str, float | None]:
    """``prefer``: the scoring direction, and the target of ``target(x)``."""
    raw = as_str(obj.get("prefer", MetricConfig.prefer), f"{path}.prefer")
    m = _TARGET.match(raw)
    if m:
        try:
            target = float(m.group(1))
        except ValueError:
            raise ConfigError(f"{path}.prefer: {raw!r} has no numeric target") from None
        if not math.isfinite(target):
            raise ConfigError(f"{path}.prefer: {raw!r}: the target must be a finite number")
        return "target", target
    if raw in ("lower", "higher"):
        return raw, None
    raise ConfigError(f"{path}.prefer: {raw!r} is not allowed (allowed: {', '.join(PREFER)})")


def _range(obj: Any, path: str) -> tuple[float, float] | None:
    """``normalization``: min-max over the nodes (None), or a fixed ``range``."""
    norm = obj.get("normalization", "minmax")
    if norm == "minmax":
        return None
    n = check_keys(norm, f"{path}.normalization", ("range",), ("range",))
    r = as_list(n["range"], f"{path}.normalization.range")
    if len(r) != 2:
        raise ConfigError(f"{path}.normalization.range: must be [low, high]")
    lo, hi = (
        as_float(r[0], f"{path}.normalization.range[0]"),
        as_float(r[1], f"{path}.normalization.range[1]"),
    )
    if not lo < hi:
        raise ConfigError(f"{path}.normalization.range: low must be below high")
    return lo, hi


def _aggregate(obj: Any, path: str, estimate: EstimateConfig | None) -> str | None:
    """``aggregate``: only where a Prometheus query gives the values (the metric's own, or its
    estimate's ``podQuery``): no other source answers with several series for one node."""
    if "aggregate" not in obj:
        return None
    aggregate = as_str(obj["aggregate"], f"{path}.aggregate", AGGREGATES)
    if obj.get("source") != "prometheus" and (estimate is None or estimate.pod_query is None):
        raise ConfigError(
            f"{path}.aggregate: only for a metric read by a Prometheus query "
            "(source: prometheus, or an estimate.podQuery)"
        )
    return aggregate


def parse_metric(obj: Any, path: str) -> MetricConfig:
    check_keys(obj, path, _KEYS, ("name", "source"))
    name = as_str(obj["name"], f"{path}.name")
    if not _NAME.match(name):
        raise ConfigError(f"{path}.name: {name!r} must be a metric-style identifier ([a-zA-Z_][a-zA-Z0-9_]*)")
    source = as_str(obj["source"], f"{path}.source", SOURCES)
    query = annotation = resource = None
    if source == "prometheus":
        query = as_str(obj.get("query"), f"{path}.query")
    elif source == "annotation":
        annotation = as_str(obj.get("annotation"), f"{path}.annotation")
    else:
        resource = as_str(obj.get("resource"), f"{path}.resource", METRICS_SERVER_RESOURCES)
    prefer, target = _prefer(obj, path)
    rng = _range(obj, path)
    f = check_keys(obj.get("filter") or {}, f"{path}.filter", ("above", "below", "bands", "exempt"))
    above = as_float(f["above"], f"{path}.filter.above") if "above" in f else None
    below = as_float(f["below"], f"{path}.filter.below") if "below" in f else None
    _check_thresholds(above, below, f"{path}.filter")
    refresh = check_keys(obj.get("refresh") or {}, f"{path}.refresh", ("min", "max"))
    min_refresh = parse_duration(
        refresh.get("min", MetricConfig.min_refresh_s), f"{path}.refresh.min", at_least=MIN_REFRESH_S
    )
    max_refresh = parse_duration(refresh.get("max", MetricConfig.max_refresh_s), f"{path}.refresh.max")
    if min_refresh > max_refresh:
        raise ConfigError(f"{path}.refresh: min must not exceed max")
    weight = as_float(obj.get("weight", MetricConfig.weight), f"{path}.weight")
    if not 0 <= weight <= MAX_WEIGHT:
        raise ConfigError(f"{path}.weight: {weight!r} is not in 0..{MAX_WEIGHT}")
    if "herdEstimate" in obj and "estimate" in obj:
        raise ConfigError(f"{path}: set estimate or herdEstimate (its first version), not both")
    estimate = None
    if "estimate" in obj:
        estimate = parse_estimate(obj["estimate"], f"{path}.estimate", resource)
    elif "herdEstimate" in obj:
        herd = check_keys(obj["herdEstimate"], f"{path}.herdEstimate", ("resource", "factor"), ("resource",))
        herd_factor = as_float(herd.get("factor", EstimateConfig.factor), f"{path}.herdEstimate.factor")
        if herd_factor < 0:
            raise ConfigError(f"{path}.herdEstimate.factor: must not be negative")
        estimate = EstimateConfig(
            resource=parse_resource(herd["resource"], f"{path}.herdEstimate.resource"),
            factor=herd_factor,
            legacy=True,
        )
    if estimate is not None and estimate.pod_query is not None and source == "annotation":
        raise ConfigError(
            f"{path}.estimate.podQuery: only for metrics read from a live source (prometheus or "
            "metrics-server); an annotation metric's estimate counts pods by their requests"
        )
    exempt = tuple(
        as_str(k, f"{path}.filter.exempt[{i}]")
        for i, k in enumerate(as_list(f.get("exempt", list(DEFAULT_EXEMPT)), f"{path}.filter.exempt"))
    )
    metric = MetricConfig(
        estimate=estimate,
        timestamp_annotation=(
            as_str(obj["timestampAnnotation"], f"{path}.timestampAnnotation")
            if "timestampAnnotation" in obj
            else None
        ),
        resource=resource,
        on_stale=as_str(obj.get("onStale", MetricConfig.on_stale), f"{path}.onStale", ON_STALE),
        on_saturation=as_str(
            obj.get("onSaturation", MetricConfig.on_saturation), f"{path}.onSaturation", ON_SATURATION
        ),
        bands=_bands(f.get("bands") or [], f"{path}.filter.bands"),
        exempt=exempt,
        aggregate=_aggregate(obj, path, estimate),
        name=name,
        source=source,
        query=query,
        annotation=annotation,
        node_label=as_str(obj.get("nodeLabel", MetricConfig.node_label), f"{path}.nodeLabel"),
        prefer=prefer,
        target=target,
        range=rng,
        above=above,
        below=below,
        missing=as_str(obj.get("missing", MetricConfig.missing), f"{path}.missing", MISSING),
        weight=weight,
        # 0 would make every sample stale on arrival.
        max_age_s=duration_at(obj, "maxAge", MetricConfig.max_age_s, path, positive=True),
        min_refresh_s=min_refresh,
        max_refresh_s=max_refresh,
    )
    if (
        estimate is not None
        and estimate.score_risk > 0
        and (prefer == "target" or (prefer == "lower" and metric.load_sign < 0))
    ):
        # The risk term moves a node's value the way the pod's load moves it: a penalty only
        # where more load scores worse.
        raise ConfigError(
            f"{path}.estimate.scoreRisk: needs a metric that scores worse with load: prefer: lower on "
            "one that rises with load, or prefer: higher; not prefer: target(x), nor prefer: lower "
            "with only filter.below"
        )
    return metric


def metrics_named(names: list[str], metrics: tuple[MetricConfig, ...], path: str) -> list[MetricConfig]:
    """The metric each of ``names`` names (``path``.metrics[i].name, as a section that judges
    some of the metrics lists them); a name no metric has, or one given twice, is an error."""
    by_name = {m.name: m for m in metrics}
    for i, name in enumerate(names):
        if name not in by_name:
            raise ConfigError(
                f"{path}.metrics[{i}].name: {name!r} is not a metric "
                f"(metrics: {', '.join(by_name) or 'none defined'})"
            )
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}.metrics: duplicate metric name")
    return [by_name[name] for name in names]
