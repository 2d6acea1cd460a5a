"""``metrics``: each metric's source, how its value scores and filters nodes, and
how fresh it must be. Defaults are :class:`MetricConfig`'s field defaults."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ksched.config.values import MAX_WEIGHT, as_float, as_list, as_str, check_keys, parse_duration
from ksched.errors import ConfigError

PREFER = ("lower", "higher", "target(<number>)")
MISSING = ("neutral", "worst", "exclude")
SOURCES = ("prometheus", "annotation")
_TARGET = re.compile(r"^target\(\s*([-+0-9.eE]+)\s*\)$")
_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
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
)


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
    # Herd avoidance: a pod bound after the sample adds request/allocatable of this
    # resource times ``herd_factor`` to its node's value (None: off).
    herd_resource: str | None = None
    herd_factor: float = 1.0


def _prefer(obj: Any, path: str) -> tuple[str, float | None]:
    """``prefer``: the scoring direction, and the target of ``target(x)``."""
    raw = as_str(obj.get("prefer", MetricConfig.prefer), f"{path}.prefer")
    m = _TARGET.match(raw)
    if m:
        try:
            return "target", float(m.group(1))
        except ValueError:
            raise ConfigError(f"{path}.prefer: {raw!r} has no numeric target") from None
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


def parse_metric(obj: Any, path: str) -> MetricConfig:
    check_keys(obj, path, _KEYS, ("name", "source"))
    name = as_str(obj["name"], f"{path}.name")
    if not _NAME.match(name):
        raise ConfigError(f"{path}.name: {name!r} must be a metric-style identifier ([a-zA-Z_][a-zA-Z0-9_]*)")
    source = as_str(obj["source"], f"{path}.source", SOURCES)
    query = annotation = None
    if source == "prometheus":
        query = as_str(obj.get("query"), f"{path}.query")
    else:
        annotation = as_str(obj.get("annotation"), f"{path}.annotation")
    prefer, target = _prefer(obj, path)
    rng = _range(obj, path)
    f = check_keys(obj.get("filter") or {}, f"{path}.filter", ("above", "below"))
    above = as_float(f["above"], f"{path}.filter.above") if "above" in f else None
    below = as_float(f["below"], f"{path}.filter.below") if "below" in f else None
    refresh = check_keys(obj.get("refresh") or {}, f"{path}.refresh", ("min", "max"))
    min_refresh = parse_duration(refresh.get("min", MetricConfig.min_refresh_s), f"{path}.refresh.min")
    max_refresh = parse_duration(refresh.get("max", MetricConfig.max_refresh_s), f"{path}.refresh.max")
    if min_refresh > max_refresh:
        raise ConfigError(f"{path}.refresh: min must not exceed max")
    weight = as_float(obj.get("weight", MetricConfig.weight), f"{path}.weight")
    if not 0 <= weight <= MAX_WEIGHT:
        raise ConfigError(f"{path}.weight: {weight!r} is not in 0..{MAX_WEIGHT}")
    herd = check_keys(obj.get("herdEstimate") or {}, f"{path}.herdEstimate", ("resource", "factor"))
    herd_resource = as_str(herd["resource"], f"{path}.herdEstimate.resource") if "resource" in herd else None
    herd_factor = as_float(herd.get("factor", MetricConfig.herd_factor), f"{path}.herdEstimate.factor")
    if herd and herd_resource is None:
        raise ConfigError(f"{path}.herdEstimate.resource: required (e.g. cpu)")
    return MetricConfig(
        herd_resource=herd_resource,
        herd_factor=herd_factor,
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
        max_age_s=parse_duration(obj.get("maxAge", MetricConfig.max_age_s), f"{path}.maxAge"),
        min_refresh_s=min_refresh,
        max_refresh_s=max_refresh,
    )
