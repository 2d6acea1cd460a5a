"""``steering``: marking hot nodes so that other schedulers prefer other nodes.

Owns the section's keys, defaults and validation (:class:`SteeringConfig`), which metrics and
lines mark a node (:meth:`SteeringConfig.lines`: by default every metric with a
``filter.above`` or ``filter.below``, at the line the filter holds an ordinary pod to; a
node's own threshold annotation still wins, as in the filter), and what the mark is: a
``PreferNoSchedule`` taint under ``taintKey`` (:func:`is_mark`), which kube-scheduler's
TaintToleration scores down and ksched's own engine ignores; with ``warm`` (the default), a
lighter ``PreferNoSchedule`` taint under ``warmKey`` on the nodes a few heavy next pods from
their line and on every hot node, so that the other scheduler's preference is graded.
``nodeSelector`` (label key to value, all matching) limits the marks to a pool of nodes: a
node outside it is never marked, and a mark under the keys there is left alone (another
ksched's pool). Off by default: the
marks need ``patch`` on nodes, which the default manifests do not grant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ksched.config.metrics import MetricConfig, metrics_named
from ksched.config.names import is_label_value, is_qualified_name
from ksched.config.values import as_bool, as_float, as_list, as_str, check_keys, duration_at
from ksched.errors import ConfigError
from ksched.objects import Obj

_KEYS = (
    "enabled",
    "taintKey",
    "interval",
    "metrics",
    "margin",
    "hold",
    "maxShare",
    "nodeSelector",
    "anticipate",
    "warm",
    "warmKey",
    "warmLeads",
    "warmShare",
)
_METRIC_KEYS = ("name", "line")
DEFAULT_TAINT_KEY = "ksched.io/hot"
# The lighter mark (``steering.warm``): on a node a few heavy next pods from its line, and on
# every hot node too, so that kube-scheduler's TaintToleration, which counts a node's
# PreferNoSchedule taints the pod does not tolerate, ranks hot below warm below unmarked.
DEFAULT_WARM_KEY = "ksched.io/warm"
# ksched's own marks under the default keys: what its engine leaves out unless told others.
DEFAULT_MARK_KEYS = (DEFAULT_TAINT_KEY, DEFAULT_WARM_KEY)
# The mark's effect: a preference only. A pod that tolerates nothing still lands on a marked
# node when it has no other room.
MARK_EFFECT = "PreferNoSchedule"
# ``warmLeads`` past this is a node marked for load it is nowhere near.
MAX_WARM_LEADS = 10.0
# The shortest interval between looks: each reads every node's values and may write nodes.
MIN_INTERVAL_S = 1.0


def is_mark(taint: Obj, keys: str | tuple[str, ...]) -> bool:
    """Whether ``taint`` is one of ksched's steering marks under ``keys`` (one key, or several):
    what ksched's own engine does not score, and what the steering controller adds and removes
    (and nothing else)."""
    if not isinstance(taint, dict) or taint.get("effect") != MARK_EFFECT:
        return False
    key = taint.get("key")
    return key == keys if isinstance(keys, str) else key in keys


@dataclass(frozen=True)
class SteeringLine:
    """One metric's mark line for an ordinary pod; a node's own threshold annotation wins.
    ``direction`` "above": marked at or over ``line``; "below": at or under it."""

    metric: str
    direction: str
    line: float


@dataclass(frozen=True)
class SteeringMetric:
    """``steering.metrics[]``: a metric that marks, and its line (None: the filter's)."""

    name: str
    line: float | None = None


@dataclass(frozen=True)
class SteeringConfig:
    enabled: bool = False
    # The taint's key; its effect is always PreferNoSchedule.
    taint_key: str = DEFAULT_TAINT_KEY
    # How often the leader looks at the nodes. Between two looks another scheduler places by
    # requests alone, at a deployment's pace tens of pods a second (docs/steering.md, "How
    # often to look"). A look costs what a scheduling cycle's values do, once, and writes only
    # the marks that change.
    interval_s: float = 2.0
    # The metrics that mark (empty: every metric with a filter line).
    metrics: tuple[SteeringMetric, ...] = ()
    # A marked node is unmarked once below its line by this share of the line ...
    margin: float = 0.1
    # ... for this long without a break.
    hold_s: float = 60.0
    # At most this share of the schedulable nodes is marked at once, the hottest first.
    max_share: float = 0.25
    # Only nodes with all these labels are marked (empty: every node).
    node_selector: tuple[tuple[str, str], ...] = ()
    # Mark a node once a heavy next pod (the 90th percentile of what the recent pods count)
    # would take it to its line, not only once it is there: another scheduler places by
    # requests, and a node one pod from its line is where its next pod makes a hot spot.
    anticipate: bool = True
    # Graded marks: a node within ``warm_leads`` heavy next pods of its line carries the
    # lighter mark under ``warm_key`` (a hot node carries both), so that another scheduler
    # takes the cool nodes first, then the warm ones, and the hot ones last. At most
    # ``warm_share`` of the schedulable nodes carry either mark. A binary mark leaves the
    # other scheduler to choose among every unmarked node by requests alone, the nodes just
    # under the line included (docs/steering.md, "Two marks").
    warm: bool = True
    warm_key: str = DEFAULT_WARM_KEY
    warm_leads: float = 2.0
    warm_share: float = 0.75

    @property
    def mark_keys(self) -> tuple[str, ...]:
        """The keys of the marks ksched writes: the hot one, and the warm one where ``warm``."""
        return (self.taint_key, self.warm_key) if self.warm else (self.taint_key,)

    @property
    def own_marks(self) -> tuple[str, ...]:
        """The keys ksched's own engine leaves out: both, ``warm`` or not (a lighter mark left
        from before ``warm`` was turned off, or another pool's, never steers ksched's pods)."""
        return (self.taint_key, self.warm_key)

    def selects(self, labels: Mapping[str, str] | None) -> bool:
        """Whether a node with ``labels`` is one the marks are for."""
        return all((labels or {}).get(k) == v for k, v in self.node_selector)

    def lines(self, metrics: tuple[MetricConfig, ...]) -> tuple[SteeringLine, ...]:
        """The mark lines, one per marking metric that has a line."""
        chosen = {m.name: m for m in self.metrics}
        out = []
        for m in metrics:
            if chosen and m.name not in chosen:
                continue
            above, below = m.thresholds(0)
            direction = "above" if above is not None else "below"
            line = chosen[m.name].line if m.name in chosen else None
            if line is None:
                line = above if above is not None else below
            if line is not None:
                out.append(SteeringLine(m.name, direction, line))
        return tuple(out)


def _metric(obj: Any, path: str) -> SteeringMetric:
    m = check_keys(obj, path, _METRIC_KEYS, ("name",))
    line = as_float(m["line"], f"{path}.line") if "line" in m else None
    return SteeringMetric(as_str(m["name"], f"{path}.name"), line)


def parse_steering(obj: Any, metrics: tuple[MetricConfig, ...]) -> SteeringConfig:
    path = "steering"
    s = check_keys(obj, path, _KEYS)
    d = SteeringConfig
    chosen = tuple(
        _metric(m, f"{path}.metrics[{i}]")
        for i, m in enumerate(as_list(s.get("metrics", []), f"{path}.metrics"))
    )
    named = metrics_named([c.name for c in chosen], metrics, path)
    for i, (c, metric) in enumerate(zip(chosen, named, strict=True)):
        if c.line is None and metric.above is None and metric.below is None:
            raise ConfigError(
                f"{path}.metrics[{i}]: {c.name} has no filter.above or filter.below; give its line"
            )
    key = _taint_key(s, "taintKey", d.taint_key, path)
    warm_key = _taint_key(s, "warmKey", d.warm_key, path)
    warm = as_bool(s.get("warm", d.warm), f"{path}.warm")
    if warm and warm_key == key:
        raise ConfigError(f"{path}.warmKey: {warm_key!r} is taintKey too; the two marks need two keys")
    warm_leads = as_float(s.get("warmLeads", d.warm_leads), f"{path}.warmLeads")
    if not 1.0 <= warm_leads <= MAX_WARM_LEADS:
        raise ConfigError(
            f"{path}.warmLeads: {warm_leads:g} is not a count of heavy next pods from 1 to {MAX_WARM_LEADS:g}"
        )
    max_share = _share(s, "maxShare", d.max_share, path)
    warm_share = _share(s, "warmShare", max(d.warm_share, max_share), path)
    if warm_share < max_share:
        raise ConfigError(
            f"{path}.warmShare: {warm_share:g} is under maxShare {max_share:g}; it counts the hot nodes too"
        )
    config = SteeringConfig(
        enabled=as_bool(s.get("enabled", d.enabled), f"{path}.enabled"),
        taint_key=key,
        interval_s=duration_at(s, "interval", d.interval_s, path, at_least=MIN_INTERVAL_S),
        metrics=chosen,
        margin=_share(s, "margin", d.margin, path),
        hold_s=duration_at(s, "hold", d.hold_s, path),
        max_share=max_share,
        node_selector=_node_selector(s.get("nodeSelector") or {}, f"{path}.nodeSelector"),
        anticipate=as_bool(s.get("anticipate", d.anticipate), f"{path}.anticipate"),
        warm=warm,
        warm_key=warm_key,
        warm_leads=warm_leads,
        warm_share=warm_share,
    )
    if config.enabled and not config.lines(metrics):
        raise ConfigError(
            f"{path}.enabled: no metric has a filter.above or filter.below, nor a {path}.metrics "
            "line: nothing can mark a node"
        )
    return config


def _taint_key(s: Obj, key: str, default: str, path: str) -> str:
    value = as_str(s.get(key, default), f"{path}.{key}")
    if not is_qualified_name(value):
        raise ConfigError(f"{path}.{key}: {value!r} is not a taint key (an optional prefix/ and a name)")
    return value


def _node_selector(obj: Any, path: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(obj, dict):
        raise ConfigError(f"{path}: expected a map of node label keys to values")
    out = []
    for key, value in sorted(obj.items()):
        if not isinstance(key, str) or not is_qualified_name(key):
            raise ConfigError(f"{path}: {key!r} is not a label key (an optional prefix/ and a name)")
        text = as_str(value, f"{path}.{key}")
        if not is_label_value(text):
            raise ConfigError(f"{path}.{key}: {text!r} is not a label value")
        out.append((key, text))
    return tuple(out)


def _share(s: Obj, key: str, default: float, path: str) -> float:
    value = as_float(s.get(key, default), f"{path}.{key}")
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{path}.{key}: {value:g} is not a share between 0 and 1")
    return value
