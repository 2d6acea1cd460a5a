"""``profiles``: which plugins each profile runs, their weights, and their args.

A profile's ``plugins.multiPoint`` switches plugins on and off (the engine's
registry, ``_core.PLUGINS``, names them and gives upstream's default weights);
its ``pluginConfig`` sets plugin args. Each plugin with args has one parser in
:data:`PLUGIN_ARGS`, which reads its upstream ``*Args`` object and returns the
profile with those fields set. Every default is :class:`ProfileConfig`'s field
default: an arg left out of ``args`` takes it, and a unit test checks that the
defaults send the engine's own default profile (``_core.DEFAULT_PROFILE``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ksched import _core
from ksched.config.names import is_label_value, is_qualified_name
from ksched.config.values import MAX_WEIGHT, as_bool, as_int, as_list, as_str, check_keys
from ksched.errors import ConfigError
from ksched.objects import Obj

DEFAULT_PROFILE = "ksched"
# The engine's plugin registry: filters in the order they run, and upstream's
# default score weights (pkg/scheduler/apis/config/v1/default_plugins.go); the
# default-equivalent profile runs those the registry enables by default.
FILTER_PLUGINS = tuple(p["name"] for p in _core.PLUGINS if p["filter"])
DEFAULT_SCORE_WEIGHTS = {p["name"]: p["default_weight"] for p in _core.PLUGINS if p["score"]}
DEFAULT_FILTERS = tuple(p["name"] for p in _core.PLUGINS if p["filter"] and p["default_enabled"])
DEFAULT_WEIGHTS = {
    p["name"]: p["default_weight"] for p in _core.PLUGINS if p["score"] and p["default_enabled"]
}
# PostFilter: preemption when a pod fits nowhere.
POST_FILTER_PLUGINS = ("DefaultPreemption",)
ALL_PLUGINS = tuple(dict.fromkeys(FILTER_PLUGINS + tuple(DEFAULT_SCORE_WEIGHTS) + POST_FILTER_PLUGINS))
# Upstream PodTopologySpread systemDefaultConstraints (ScheduleAnyway).
SYSTEM_DEFAULT_SPREAD = (("kubernetes.io/hostname", 3, False), ("topology.kubernetes.io/zone", 5, False))
DEFAULTING_TYPES = ("System", "List")
WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
STRATEGIES = ("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio")
# Upstream MaxCustomPriorityScore and maxUtilization bound RequestedToCapacityRatio shapes.
MAX_SHAPE_SCORE = 10
MAX_UTILIZATION = 100
# The largest int32, upstream's bound on maxSkew and bindTimeoutSeconds.
MAX_INT32 = 2**31 - 1
NODE_SELECTOR_OPERATORS = tuple(_core.SELECTOR_OPERATORS)


@dataclass(frozen=True)
class ProfileConfig:
    scheduler_name: str = DEFAULT_PROFILE
    filters: tuple[str, ...] = DEFAULT_FILTERS
    weights: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    fit_strategy: str = "LeastAllocated"
    fit_resources: tuple[tuple[str, int], ...] = (("cpu", 1), ("memory", 1))
    # RequestedToCapacityRatio's shape: none by default, as upstream (the strategy requires one).
    shape: tuple[tuple[int, int], ...] = ()
    balanced_resources: tuple[str, ...] = ("cpu", "memory")
    # InterPodAffinity args: the score an existing pod's required affinity term gives.
    hard_pod_affinity_weight: int = 1
    # DefaultPreemption enabled.
    preemption: bool = True
    # PodTopologySpread defaults for pods without constraints: (topology key, maxSkew,
    # DoNotSchedule), and whether they are upstream's system defaults.
    spread_defaults: tuple[tuple[str, int, bool], ...] = SYSTEM_DEFAULT_SPREAD
    spread_system_defaulted: bool = True
    # VolumeBindingArgs.bindTimeoutSeconds (upstream's default): how long binding waits
    # for a pod's claims to be bound.
    volume_bind_timeout_s: int = 600
    # NodeResourcesFit args: extended resources (by name, and by the part of the
    # name before "/") its filter does not check.
    fit_ignored_resources: tuple[str, ...] = ()
    fit_ignored_groups: tuple[str, ...] = ()
    # NodeAffinity args: ``addedAffinity`` (a nodeAffinity object, validated),
    # required of and preferred for every pod of the profile.
    added_affinity: Obj | None = None
    # InterPodAffinity args: a pod without preferred pod (anti-)affinity terms
    # is not scored by the existing pods' terms.
    ignore_preferred_terms_of_existing_pods: bool = False
    # NodePodLimit args (ksched's own plugin): ``maxPods``, the most pods a node may hold;
    # the kubelet's default maxPods, so enabling the plugin alone changes nothing on default nodes.
    max_pods_per_node: int = 110
    # ``metrics`` (ksched's extension key): the names of the metrics this profile filters and
    # scores with (None: every metric). The configuration checks that each is defined.
    metrics: tuple[str, ...] | None = None

    def uses(self, metric: str) -> bool:
        """Whether the profile filters and scores with the metric named ``metric``."""
        return self.metrics is None or metric in self.metrics


# Where an arg is left out: the defaults, read from the fields above.
_DEFAULT = ProfileConfig()


def parse_profile(obj: Any, path: str) -> ProfileConfig:
    check_keys(obj, path, ("schedulerName", "plugins", "pluginConfig", "metrics"), ("schedulerName",))
    name = as_str(obj["schedulerName"], f"{path}.schedulerName")
    profile = _multi_point(obj.get("plugins") or {}, f"{path}.plugins", name)
    if "metrics" in obj:
        profile = replace(profile, metrics=_metric_names(obj["metrics"], f"{path}.metrics"))
    for i, pc in enumerate(as_list(obj.get("pluginConfig") or [], f"{path}.pluginConfig")):
        p = f"{path}.pluginConfig[{i}]"
        check_keys(pc, p, ("name", "args"), ("name",))
        plugin = as_str(pc["name"], f"{p}.name", tuple(PLUGIN_ARGS))
        profile = PLUGIN_ARGS[plugin](profile, pc.get("args") or {}, f"{p}.args")
    return profile


def _multi_point(obj: Any, path: str, name: str) -> ProfileConfig:
    """``plugins.multiPoint``: the plugins disabled, then those enabled (with their weights)."""
    filters = list(DEFAULT_FILTERS)
    weights = dict(DEFAULT_WEIGHTS)
    preemption = _DEFAULT.preemption
    plugins = check_keys(obj, path, ("multiPoint",))
    multi = check_keys(plugins.get("multiPoint") or {}, f"{path}.multiPoint", ("enabled", "disabled"))
    for i, d in enumerate(as_list(multi.get("disabled") or [], f"{path}.multiPoint.disabled")):
        p = f"{path}.multiPoint.disabled[{i}]"
        plugin = as_str(check_keys(d, p, ("name",), ("name",))["name"], f"{p}.name", ALL_PLUGINS)
        if plugin in filters:
            filters.remove(plugin)
        weights.pop(plugin, None)
        if plugin in POST_FILTER_PLUGINS:
            preemption = False
    for i, e in enumerate(as_list(multi.get("enabled") or [], f"{path}.multiPoint.enabled")):
        p = f"{path}.multiPoint.enabled[{i}]"
        check_keys(e, p, ("name", "weight"), ("name",))
        plugin = as_str(e["name"], f"{p}.name", ALL_PLUGINS)
        if plugin in FILTER_PLUGINS and plugin not in filters:
            filters.append(plugin)
        if plugin in POST_FILTER_PLUGINS:
            preemption = True
        if plugin in DEFAULT_SCORE_WEIGHTS:
            weights[plugin] = as_int(
                e.get("weight", DEFAULT_SCORE_WEIGHTS[plugin]), f"{p}.weight", 0, MAX_WEIGHT
            )
        elif "weight" in e:
            raise ConfigError(
                f"{p}.weight: {plugin} does not score (scoring plugins: {', '.join(DEFAULT_SCORE_WEIGHTS)})"
            )
    return ProfileConfig(
        name, tuple(f for f in FILTER_PLUGINS if f in filters), weights, preemption=preemption
    )


def _node_resources_fit(profile: ProfileConfig, args: Any, path: str) -> ProfileConfig:
    """NodeResourcesFitArgs: ``scoringStrategy`` and the extended resources its filter ignores."""
    check_keys(args, path, ("scoringStrategy", "ignoredResources", "ignoredResourceGroups"))
    ignored = _resource_names(args.get("ignoredResources") or [], f"{path}.ignoredResources")
    ignored_groups = _resource_names(
        args.get("ignoredResourceGroups") or [], f"{path}.ignoredResourceGroups", groups=True
    )
    sp = f"{path}.scoringStrategy"
    s = check_keys(args.get("scoringStrategy") or {}, sp, ("type", "resources", "requestedToCapacityRatio"))
    strategy = as_str(s.get("type", _DEFAULT.fit_strategy), f"{sp}.type", STRATEGIES)
    profile = replace(
        profile, fit_strategy=strategy, fit_ignored_resources=ignored, fit_ignored_groups=ignored_groups
    )
    if "resources" in s:
        profile = replace(profile, fit_resources=_resources(s["resources"], f"{sp}.resources"))
    if strategy == "RequestedToCapacityRatio":
        rp = f"{sp}.requestedToCapacityRatio"
        rtcr = check_keys(s.get("requestedToCapacityRatio"), rp, ("shape",), ("shape",))
        profile = replace(profile, shape=_shape(rtcr["shape"], f"{rp}.shape"))
    return profile


def _node_resources_balanced_allocation(profile: ProfileConfig, args: Any, path: str) -> ProfileConfig:
    """NodeResourcesBalancedAllocationArgs: the ``resources`` it balances (their weights unused)."""
    check_keys(args, path, ("resources",))
    if "resources" not in args:
        return profile
    return replace(
        profile, balanced_resources=tuple(r for r, _ in _resources(args["resources"], f"{path}.resources"))
    )


def _node_affinity(profile: ProfileConfig, args: Any, path: str) -> ProfileConfig:
    """NodeAffinityArgs: ``addedAffinity``, required of and preferred for every pod."""
    check_keys(args, path, ("addedAffinity",))
    if args.get("addedAffinity") is None:
        return profile
    return replace(profile, added_affinity=_added_affinity(args["addedAffinity"], f"{path}.addedAffinity"))


def _inter_pod_affinity(profile: ProfileConfig, args: Any, path: str) -> ProfileConfig:
    """InterPodAffinityArgs: ``hardPodAffinityWeight`` and ``ignorePreferredTermsOfExistingPods``."""
    check_keys(args, path, ("hardPodAffinityWeight", "ignorePreferredTermsOfExistingPods"))
    return replace(
        profile,
        hard_pod_affinity_weight=as_int(
            args.get("hardPodAffinityWeight", _DEFAULT.hard_pod_affinity_weight),
            f"{path}.hardPodAffinityWeight",
            0,
            MAX_WEIGHT,
        ),
        ignore_preferred_terms_of_existing_pods=as_bool(
            args.get("ignorePreferredTermsOfExistingPods", _DEFAULT.ignore_preferred_terms_of_existing_pods),
            f"{path}.ignorePreferredTermsOfExistingPods",
        ),
    )


def _pod_topology_spread(profile: ProfileConfig, args: Any, path: str) -> ProfileConfig:
    """PodTopologySpreadArgs: the default constraints, and whether they are the system's."""
    check_keys(args, path, ("defaultingType", "defaultConstraints"))
    defaulting = as_str(args.get("defaultingType", "System"), f"{path}.defaultingType", DEFAULTING_TYPES)
    if defaulting == "System":
        if args.get("defaultConstraints"):
            raise ConfigError(f"{path}.defaultConstraints: must be empty when defaultingType is System")
        return replace(profile, spread_defaults=SYSTEM_DEFAULT_SPREAD, spread_system_defaulted=True)
    items = []
    for j, c in enumerate(as_list(args.get("defaultConstraints") or [], f"{path}.defaultConstraints")):
        q = f"{path}.defaultConstraints[{j}]"
        check_keys(c, q, ("maxSkew", "topologyKey", "whenUnsatisfiable"), ("maxSkew", "topologyKey"))
        when = as_str(
            c.get("whenUnsatisfiable", "DoNotSchedule"), f"{q}.whenUnsatisfiable", WHEN_UNSATISFIABLE
        )
        items.append(
            (
                as_str(c["topologyKey"], f"{q}.topologyKey"),
                as_int(c["maxSkew"], f"{q}.maxSkew", 1, MAX_INT32),
                when == "DoNotSchedule",
            )
        )
    return replace(profile, spread_defaults=tuple(items), spread_system_defaulted=False)


def _volume_binding(profile: ProfileConfig, args: Any, path: str) -> ProfileConfig:
    """VolumeBindingArgs: ``bindTimeoutSeconds`` (``shape`` needs the alpha
    StorageCapacityScoring gate, off in v1.36 as in ksched)."""
    check_keys(args, path, ("bindTimeoutSeconds",))
    timeout = as_int(
        args.get("bindTimeoutSeconds", _DEFAULT.volume_bind_timeout_s),
        f"{path}.bindTimeoutSeconds",
        0,
        MAX_INT32,
    )
    return replace(profile, volume_bind_timeout_s=timeout)


def _node_pod_limit(profile: ProfileConfig, args: Any, path: str) -> ProfileConfig:
    """NodePodLimitArgs: ``maxPods``, at least 1 (a node that may hold no pod is cordoned)."""
    check_keys(args, path, ("maxPods",))
    max_pods = as_int(args.get("maxPods", _DEFAULT.max_pods_per_node), f"{path}.maxPods", 1, MAX_INT32)
    return replace(profile, max_pods_per_node=max_pods)


# Each plugin with args -> its parser: (the profile so far, the args object, its key path) ->
# the profile with the args set. The order is the one the error for an unknown name lists.

PLUGIN_ARGS: dict[str, Callable[[ProfileConfig, Any, str], ProfileConfig]] = {
    "NodeResourcesFit": _node_resources_fit,
    "NodeResourcesBalancedAllocation": _node_resources_balanced_allocation,
    "NodeAffinity": _node_affinity,
    "InterPodAffinity": _inter_pod_affinity,
    "PodTopologySpread": _pod_topology_spread,
    "VolumeBinding": _volume_binding,
    "NodePodLimit": _node_pod_limit,
}


def _metric_names(obj: Any, path: str) -> tuple[str, ...]:
    """``metrics``: the names of the profile's metrics, each once (whether each is
    defined is checked with the whole configuration)."""
    names = tuple(as_str(n, f"{path}[{i}]") for i, n in enumerate(as_list(obj, path)))
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: duplicate metric name in {list(names)}")
    return names


def _resources(obj: Any, path: str) -> tuple[tuple[str, int], ...]:
    out = []
    for i, r in enumerate(as_list(obj, path)):
        p = f"{path}[{i}]"
        check_keys(r, p, ("name", "weight"), ("name",))
        out.append((as_str(r["name"], f"{p}.name"), as_int(r.get("weight", 1), f"{p}.weight", 1, MAX_WEIGHT)))
    if not out:
        raise ConfigError(f"{path}: must list at least one resource")
    return tuple(out)


def _shape(obj: Any, path: str) -> tuple[tuple[int, int], ...]:
    """A RequestedToCapacityRatio ``shape``: (utilization, score) points, utilization increasing."""
    points = []
    for j, pt in enumerate(as_list(obj, path)):
        q = f"{path}[{j}]"
        check_keys(pt, q, ("utilization", "score"), ("utilization", "score"))
        points.append(
            (
                as_int(pt["utilization"], f"{q}.utilization", 0, MAX_UTILIZATION),
                as_int(pt["score"], f"{q}.score", 0, MAX_SHAPE_SCORE),
            )
        )
    if not points or any(a[0] >= b[0] for a, b in itertools.pairwise(points)):
        raise ConfigError(f"{path}: needs at least one point, utilization strictly increasing")
    return tuple(points)


def _resource_names(obj: Any, path: str, groups: bool = False) -> tuple[str, ...]:
    """NodeResourcesFitArgs ``ignoredResources`` / ``ignoredResourceGroups`` (upstream validation)."""
    out = []
    for i, name in enumerate(as_list(obj, path)):
        p = f"{path}[{i}]"
        if not isinstance(name, str):
            raise ConfigError(f"{p}: must be a string")
        if groups and "/" in name:
            raise ConfigError(f"{p}: {name!r}: resource group name can't contain '/'")
        if not is_qualified_name(name):
            raise ConfigError(
                f"{p}: {name!r} is not a valid resource name (a qualified name, e.g. example.com/gpu)"
            )
        out.append(name)
    return tuple(out)


def _added_affinity(obj: Any, path: str) -> Obj:
    """NodeAffinityArgs ``addedAffinity``: a nodeAffinity with required and preferred terms."""
    required_key = "requiredDuringSchedulingIgnoredDuringExecution"
    preferred_key = "preferredDuringSchedulingIgnoredDuringExecution"
    check_keys(obj, path, (required_key, preferred_key))
    if required_key in obj:
        rp = f"{path}.{required_key}"
        required = check_keys(obj[required_key], rp, ("nodeSelectorTerms",), ("nodeSelectorTerms",))
        terms = as_list(required["nodeSelectorTerms"], f"{rp}.nodeSelectorTerms")
        if not terms:
            raise ConfigError(f"{rp}.nodeSelectorTerms: must have at least one term")
        for i, t in enumerate(terms):
            _node_selector_term(t, f"{rp}.nodeSelectorTerms[{i}]")
    for i, t in enumerate(as_list(obj.get(preferred_key) or [], f"{path}.{preferred_key}")):
        p = f"{path}.{preferred_key}[{i}]"
        check_keys(t, p, ("weight", "preference"), ("weight", "preference"))
        as_int(t["weight"], f"{p}.weight", 1, MAX_WEIGHT)
        _node_selector_term(t["preference"], f"{p}.preference")
    return dict(obj)


def _node_selector_term(obj: Any, path: str) -> None:
    """One node selector term as upstream's ``NewNodeSelector`` accepts it: every
    requirement must parse (addedAffinity is checked strictly, unlike pods' terms)."""
    check_keys(obj, path, ("matchExpressions", "matchFields"))
    for part in ("matchExpressions", "matchFields"):
        for i, r in enumerate(as_list(obj.get(part) or [], f"{path}.{part}")):
            p = f"{path}.{part}[{i}]"
            check_keys(r, p, ("key", "operator", "values"), ("key", "operator"))
            key = as_str(r["key"], f"{p}.key")
            op = as_str(
                r["operator"],
                f"{p}.operator",
                ("In", "NotIn") if part == "matchFields" else NODE_SELECTOR_OPERATORS,
            )
            values = as_list(r.get("values") or [], f"{p}.values")
            if not all(isinstance(v, str) for v in values):
                raise ConfigError(f"{p}.values: must be a list of strings")
            if part == "matchFields":
                if key != "metadata.name" or len(values) != 1:
                    raise ConfigError(f"{p}: a field selector takes key metadata.name and exactly one value")
            elif op in ("In", "NotIn"):
                bad = [v for v in values if not is_label_value(v)]
                if not values or bad:
                    raise ConfigError(
                        f"{p}.values: {op} takes one or more valid label values (invalid: {bad})"
                    )
            elif op in ("Exists", "DoesNotExist") and values:
                raise ConfigError(f"{p}.values: {op} takes no values")
            elif op in ("Gt", "Lt") and (len(values) != 1 or not re.match(r"^[+-]?\d+$", values[0])):
                raise ConfigError(f"{p}.values: {op} takes exactly one integer value")
