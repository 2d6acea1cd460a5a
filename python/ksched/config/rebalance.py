"""``rebalance``: the rebalancer that moves pods off nodes their actual load made hot.

Owns the section's keys, defaults and validation (:class:`RebalanceConfig`), and which
metrics and thresholds it judges nodes by (:meth:`RebalanceConfig.thresholds`): by default
every metric of the profile that has a ``filter.above`` or ``filter.below``, with ``high`` the
metric's own threshold (the scheduler and the rebalancer then agree on what is hot) and
``low`` equal to it; ``rebalance.metrics`` may name a separate ``high``/``low`` pair per
metric. Off by default: evicting pods needs RBAC that the default manifests do not grant.

Which pods it may move is the profile's own by default; ``otherSchedulers``
(:class:`OtherSchedulers`) opts other schedulers' pods in, by scheduler name and optionally
namespace.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ksched.config.metrics import MetricConfig, metrics_named
from ksched.config.names import is_dns_label
from ksched.config.values import (
    as_bool,
    as_float,
    as_int,
    as_list,
    as_str,
    check_keys,
    duration_at,
)
from ksched.errors import ConfigError

_KEYS = (
    "enabled",
    "profile",
    "interval",
    "hotSamples",
    "metrics",
    "minPodAge",
    "allowLocalStorage",
    "moveJobPods",
    "maxPerCycle",
    "maxPerNode",
    "maxPerNamespace",
    "maxPerWorkload",
    "evictionsPerMinute",
    "workloadCooldown",
    "reservationTimeout",
    "replacementSettle",
    "otherSchedulers",
)
_METRIC_KEYS = ("name", "high", "low")
_OTHER_KEYS = ("schedulerNames", "namespaces")
MAX_LIMIT = 10_000
# The shortest interval between looks: each look reads every node and pod, and the hot
# lines judge samples that refresh every few seconds at best.
MIN_INTERVAL_S = 1.0
# The sources whose samples the rebalancer counts (hysteresis needs a time series; an
# annotation such as a price is not load that moving a pod changes).
JUDGED_SOURCES = ("prometheus", "metrics-server")


def direction(metric: MetricConfig) -> str:
    """ "above" where a node is hot over its line (the metric rises with load), "below" where
    under it: its filter's side, else the way load moves it."""
    if metric.above is not None:
        return "above"
    if metric.below is not None:
        return "below"
    return "below" if metric.load_sign < 0 else "above"


@dataclass(frozen=True)
class RebalanceThreshold:
    """One metric's hot line for the rebalancer. ``direction`` "above": a node is hot while
    the value is over ``high``, and a target must stay below ``low`` after the move;
    "below" (a ``filter.below`` metric, higher is better): hot while under ``high``, and a
    target must stay above ``low``."""

    metric: str
    direction: str
    high: float
    low: float

    def hot(self, value: float) -> bool:
        return value > self.high if self.direction == "above" else value < self.high


@dataclass(frozen=True)
class RebalanceMetric:
    """``rebalance.metrics[]``: a separate high/low pair for one metric."""

    name: str
    high: float
    low: float


@dataclass(frozen=True)
class OtherSchedulers:
    """``rebalance.otherSchedulers``: the other schedulers' pods the rebalancer may move. A pod
    is opted in when its ``schedulerName`` is listed and, where namespaces are listed, its
    namespace is. Empty: only the profile's own pods move."""

    scheduler_names: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()

    def opted_in(self, scheduler: str, namespace: str) -> bool:
        return scheduler in self.scheduler_names and (not self.namespaces or namespace in self.namespaces)


@dataclass(frozen=True)
class RebalanceConfig:
    enabled: bool = False
    # The profile whose engine, metrics and thresholds decide (None: the first profile).
    profile: str | None = None
    # How often the rebalancer looks at the nodes.
    interval_s: float = 30.0
    # A node is hot after this many consecutive fresh samples over the high line.
    hot_samples: int = 3
    metrics: tuple[RebalanceMetric, ...] = ()
    # Pods younger than this are never moved.
    min_pod_age_s: float = 300.0
    # Pods with emptyDir or hostPath volumes (local storage, lost on eviction) move only when
    # allowed.
    allow_local_storage: bool = False
    # A Job's pods move only when allowed: an evicted one starts its work over, and the
    # eviction counts against the Job's backoffLimit (unless its podFailurePolicy ignores it).
    move_job_pods: bool = False
    # Evictions per look, in all and per source node, namespace and workload.
    max_per_cycle: int = 5
    max_per_node: int = 1
    max_per_namespace: int = 2
    max_per_workload: int = 1
    # A ceiling on the eviction rate, over all nodes (a token bucket of one minute).
    evictions_per_minute: float = 10.0
    # A workload whose pod was moved is not moved again for this long.
    workload_cooldown_s: float = 600.0
    # A reserved node is held for the replacement this long, then released.
    reservation_timeout_s: float = 120.0
    # A landed replacement's moved load, less what it is measured to use, counts on its node
    # this long: it restarts cold and grows back (apart from the workload's cool-down, so a
    # short cool-down does not let the next move fill a node before its replacement is back).
    replacement_settle_s: float = 600.0
    # Other schedulers' pods it may move too (their replacements need the steering mark on
    # the source: :mod:`ksched.engine.rebalance`).
    other_schedulers: OtherSchedulers = field(default_factory=OtherSchedulers)

    def thresholds(self, metrics: tuple[MetricConfig, ...]) -> tuple[RebalanceThreshold, ...]:
        """The hot lines, one per metric that has one, for the profile's ``metrics``."""
        pairs = {m.name: m for m in self.metrics}
        out = []
        for m in metrics:
            if m.source not in JUDGED_SOURCES:
                continue
            pair = pairs.get(m.name)
            if pair is not None:
                out.append(RebalanceThreshold(m.name, direction(m), pair.high, pair.low))
            elif m.above is not None:
                out.append(RebalanceThreshold(m.name, "above", m.above, m.above))
            elif m.below is not None:
                out.append(RebalanceThreshold(m.name, "below", m.below, m.below))
        return tuple(out)


def _metric(obj: Any, path: str) -> RebalanceMetric:
    m = check_keys(obj, path, _METRIC_KEYS, _METRIC_KEYS)
    return RebalanceMetric(
        name=as_str(m["name"], f"{path}.name"),
        high=as_float(m["high"], f"{path}.high"),
        low=as_float(m["low"], f"{path}.low"),
    )


def _names(obj: Any, path: str, valid: Callable[[str], bool] | None, what: str) -> tuple[str, ...]:
    out = []
    for i, raw in enumerate(as_list(obj, path)):
        name = as_str(raw, f"{path}[{i}]")
        if valid is not None and not valid(name):
            raise ConfigError(f"{path}[{i}]: {name!r} is not {what}")
        if name in out:
            raise ConfigError(f"{path}[{i}]: {name!r} is listed twice")
        out.append(name)
    return tuple(out)


def _other_schedulers(obj: Any, path: str, profile: str) -> OtherSchedulers:
    # A scheduler's name is any non-empty string; a namespace's name is a DNS label (RFC 1123).
    o = check_keys(obj, path, _OTHER_KEYS)
    names = _names(o.get("schedulerNames", []), f"{path}.schedulerNames", None, "")
    namespaces = _names(
        o.get("namespaces", []), f"{path}.namespaces", is_dns_label, "a namespace name (a DNS label)"
    )
    if profile in names:
        i = names.index(profile)
        raise ConfigError(
            f"{path}.schedulerNames[{i}]: {profile!r} is the rebalancing profile's own; its pods "
            "move without being listed"
        )
    if namespaces and not names:
        raise ConfigError(f"{path}.namespaces: needs schedulerNames (whose pods, in these namespaces)")
    return OtherSchedulers(names, namespaces)


def parse_rebalance(obj: Any, profiles: list[str], metrics: tuple[MetricConfig, ...]) -> RebalanceConfig:
    path = "rebalance"
    r = check_keys(obj, path, _KEYS)
    d = RebalanceConfig
    pairs = tuple(
        _metric(m, f"{path}.metrics[{i}]")
        for i, m in enumerate(as_list(r.get("metrics", []), f"{path}.metrics"))
    )
    named = metrics_named([p.name for p in pairs], metrics, path)
    for i, (pair, metric) in enumerate(zip(pairs, named, strict=True)):
        if metric.source not in JUDGED_SOURCES:
            raise ConfigError(
                f"{path}.metrics[{i}]: {pair.name} is read from {metric.source}; the rebalancer judges "
                f"only metrics sampled over time ({', '.join(JUDGED_SOURCES)})"
            )
        if direction(metric) == "below" and pair.low < pair.high:
            raise ConfigError(
                f"{path}.metrics[{i}]: {pair.name} falls as load rises (higher is better), "
                "so low must not be under high"
            )
        if direction(metric) == "above" and pair.low > pair.high:
            raise ConfigError(f"{path}.metrics[{i}]: low must not exceed high")

    def limit(key: str, default: int) -> int:
        return as_int(r.get(key, default), f"{path}.{key}", 0, MAX_LIMIT)

    profile = as_str(r["profile"], f"{path}.profile", tuple(profiles)) if "profile" in r else profiles[0]
    config = RebalanceConfig(
        enabled=as_bool(r.get("enabled", d.enabled), f"{path}.enabled"),
        profile=profile,
        interval_s=duration_at(r, "interval", d.interval_s, path, at_least=MIN_INTERVAL_S),
        hot_samples=as_int(r.get("hotSamples", d.hot_samples), f"{path}.hotSamples", 1, 100),
        metrics=pairs,
        min_pod_age_s=duration_at(r, "minPodAge", d.min_pod_age_s, path),
        allow_local_storage=as_bool(
            r.get("allowLocalStorage", d.allow_local_storage), f"{path}.allowLocalStorage"
        ),
        move_job_pods=as_bool(r.get("moveJobPods", d.move_job_pods), f"{path}.moveJobPods"),
        max_per_cycle=limit("maxPerCycle", d.max_per_cycle),
        max_per_node=limit("maxPerNode", d.max_per_node),
        max_per_namespace=limit("maxPerNamespace", d.max_per_namespace),
        max_per_workload=limit("maxPerWorkload", d.max_per_workload),
        evictions_per_minute=as_float(
            r.get("evictionsPerMinute", d.evictions_per_minute), f"{path}.evictionsPerMinute"
        ),
        workload_cooldown_s=duration_at(r, "workloadCooldown", d.workload_cooldown_s, path),
        reservation_timeout_s=duration_at(r, "reservationTimeout", d.reservation_timeout_s, path),
        replacement_settle_s=duration_at(r, "replacementSettle", d.replacement_settle_s, path),
        other_schedulers=_other_schedulers(
            r.get("otherSchedulers") or {}, f"{path}.otherSchedulers", profile
        ),
    )
    if config.enabled:
        _check_enabled(config, metrics)
    if config.evictions_per_minute < 0:
        raise ConfigError(f"{path}.evictionsPerMinute: must not be negative")
    if config.reservation_timeout_s <= 0:
        raise ConfigError(f"{path}.reservationTimeout: must be positive")
    return config


def _check_enabled(config: RebalanceConfig, metrics: tuple[MetricConfig, ...]) -> None:
    """An enabled rebalancer has a hot line to judge by, and knows what moving a pod moves:
    each judged metric has an ``estimate`` (the resource a pod's share is counted in)."""
    if config.evictions_per_minute == 0:
        raise ConfigError(
            "rebalance.evictionsPerMinute: must be above 0 while rebalancing is enabled "
            "(0 moves nothing: set enabled: false instead)"
        )
    lines = config.thresholds(metrics)
    if not lines:
        raise ConfigError(
            "rebalance.enabled: no metric has a filter.above or filter.below, nor a rebalance.metrics "
            "high/low pair: nothing can make a node hot"
        )
    by_name = {m.name: m for m in metrics}
    for line in lines:
        if by_name[line.metric].estimate is None:
            raise ConfigError(
                f"rebalance: metric {line.metric!r} has no estimate; the rebalancer needs "
                "estimate.resource to know how much of the metric a moved pod takes with it"
            )
