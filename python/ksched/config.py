"""``KschedConfiguration``: profiles, plugin weights and args, metric definitions.

Shaped like ``KubeSchedulerConfiguration`` (profiles with ``plugins.multiPoint``
and ``pluginConfig``) plus ksched's ``metrics`` and ``batch``. Every unknown
key and bad value is rejected when the file is loaded, with the key path and
the allowed values; a missing file section takes upstream's default.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ksched import _core
from ksched.errors import ConfigError
from ksched.objects import Obj

API_VERSION = "ksched.io/v1alpha1"
KIND = "KschedConfiguration"
DEFAULT_PROFILE = "ksched"

# The engine's plugin registry: filters in the order they run, and upstream's
# default score weights (pkg/scheduler/apis/config/v1/default_plugins.go).
FILTER_PLUGINS = tuple(p["name"] for p in _core.PLUGINS if p["filter"])
DEFAULT_SCORE_WEIGHTS = {p["name"]: p["default_weight"] for p in _core.PLUGINS if p["score"]}
# Upstream PodTopologySpread systemDefaultConstraints (ScheduleAnyway).
SYSTEM_DEFAULT_SPREAD = (("kubernetes.io/hostname", 3, False), ("topology.kubernetes.io/zone", 5, False))
DEFAULTING_TYPES = ("System", "List")
WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
# PostFilter: preemption when a pod fits nowhere.
POST_FILTER_PLUGINS = ("DefaultPreemption",)
ALL_PLUGINS = tuple(dict.fromkeys(FILTER_PLUGINS + tuple(DEFAULT_SCORE_WEIGHTS) + POST_FILTER_PLUGINS))
STRATEGIES = ("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio")
PREFER = ("lower", "higher", "target(<number>)")
MISSING = ("neutral", "worst", "exclude")
SOURCES = ("prometheus", "annotation")
_TARGET = re.compile(r"^target\(\s*([-+0-9.eE]+)\s*\)$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
# Upstream MaxCustomPriorityScore and maxUtilization bound RequestedToCapacityRatio shapes.
MAX_SHAPE_SCORE = 10
MAX_UTILIZATION = 100
MAX_WEIGHT = 100
# Upstream VolumeBindingArgs.bindTimeoutSeconds default.
DEFAULT_BIND_TIMEOUT_S = 600
# Upstream ValidateLabelName (a qualified name: optional DNS subdomain prefix, then a name).
_LABEL_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
NODE_SELECTOR_OPERATORS = tuple(_core.SELECTOR_OPERATORS)
# The client's leaderelection requires renewDeadline > 1.2 x retryPeriod (its jitter factor).
LEADER_JITTER = 1.2


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


@dataclass(frozen=True)
class ProfileConfig:
    scheduler_name: str = DEFAULT_PROFILE
    filters: tuple[str, ...] = FILTER_PLUGINS
    weights: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_SCORE_WEIGHTS))
    fit_strategy: str = "LeastAllocated"
    fit_resources: tuple[tuple[str, int], ...] = (("cpu", 1), ("memory", 1))
    shape: tuple[tuple[int, int], ...] = ((0, 10), (100, 0))
    balanced_resources: tuple[str, ...] = ("cpu", "memory")
    # InterPodAffinity args: the score an existing pod's required affinity term gives.
    hard_pod_affinity_weight: int = 1
    # DefaultPreemption enabled.
    preemption: bool = True
    # PodTopologySpread defaults for pods without constraints: (topology key, maxSkew,
    # DoNotSchedule), and whether they are upstream's system defaults.
    spread_defaults: tuple[tuple[str, int, bool], ...] = SYSTEM_DEFAULT_SPREAD
    spread_system_defaulted: bool = True
    # VolumeBindingArgs.bindTimeoutSeconds: how long binding waits for a pod's claims to be bound.
    volume_bind_timeout_s: int = DEFAULT_BIND_TIMEOUT_S
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


@dataclass(frozen=True)
class BatchConfig:
    max_size: int = 512
    max_wait_s: float = 0.05
    # A batch's engine call stops placing pods after this long; the rest are
    # retried without metric plugins (degraded mode).
    decision_deadline_s: float = 2.0
    # Concurrent binds of pods with volumes to bind (each may wait for the PV
    # controller); reports get half as many threads. Binds of other pods and their
    # Scheduled events go through min(bind_workers, binder.WRITERS) writer threads,
    # each with one persistent connection.
    bind_workers: int = 64


@dataclass(frozen=True)
class HandoffConfig:
    """Pods ksched has not placed for ``after_s`` are handed to default-scheduler
    (off by default: it needs RBAC to delete and create pods)."""

    enabled: bool = False
    after_s: float = 300.0


@dataclass(frozen=True)
class ShadowConfig:
    """Shadow mode: ksched binds nothing and writes nothing to pods; for each pod another
    scheduler binds, it records where ``profile`` would have placed it (see ksched.loop.shadow)."""

    enabled: bool = False
    # The profile the pods are scored under (default: the first profile).
    profile: str | None = None
    # Only pods of these namespaces are compared (empty: every namespace).
    namespaces: tuple[str, ...] = ()
    # Decisions kept in memory for ``/shadow`` (the counters cover every decision).
    keep: int = 1000
    # A file each decision is appended to as one JSON line (``ksched shadow report --file``).
    log: str | None = None


@dataclass(frozen=True)
class WebhookConfig:
    """The mutating admission webhook that routes opted-in pods to ksched."""

    enabled: bool = False
    address: str = "0.0.0.0:9443"
    cert_file: str | None = None
    key_file: str | None = None
    # Names in a self-generated serving certificate (the webhook Service's DNS names).
    hosts: tuple[str, ...] = ("ksched.kube-system.svc", "ksched.kube-system.svc.cluster.local")
    # The MutatingWebhookConfiguration whose caBundle a self-generated CA is written into.
    configuration_name: str | None = "ksched"
    # The profile routed pods get (default: the first profile).
    scheduler_name: str | None = None


@dataclass(frozen=True)
class PrometheusConfig:
    url: str | None = None
    timeout_s: float = 5.0


@dataclass(frozen=True)
class LeaderElectionConfig:
    """Upstream ``leaderElection`` (component-base defaults: 15 s / 10 s / 2 s)."""

    leader_elect: bool = True
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    resource_name: str = "ksched"
    resource_namespace: str = "kube-system"


@dataclass(frozen=True)
class ClientConnectionConfig:
    """Client-side rate limit for writes (binds, events, status patches).

    Upstream kube-scheduler defaults to 50 qps / 100 burst, which caps it near
    50 binds/s; ksched batches, so its default allows ten times that."""

    qps: float = 500.0
    burst: int = 1000


@dataclass(frozen=True)
class Config:
    profiles: tuple[ProfileConfig, ...] = (ProfileConfig(),)
    metrics: tuple[MetricConfig, ...] = ()
    batch: BatchConfig = BatchConfig()
    leader_election: LeaderElectionConfig = LeaderElectionConfig()
    client_connection: ClientConnectionConfig = ClientConnectionConfig()
    prometheus: PrometheusConfig = PrometheusConfig()
    webhook: WebhookConfig = WebhookConfig()
    handoff: HandoffConfig = HandoffConfig()
    shadow: ShadowConfig = ShadowConfig()

    def profile(self, scheduler_name: str) -> ProfileConfig | None:
        for p in self.profiles:
            if p.scheduler_name == scheduler_name:
                return p
        return None


def _keys(obj: Any, path: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ConfigError(f"{path or 'configuration'}: must be a mapping")
    for k in obj:
        if k not in allowed:
            raise ConfigError(f"{path + '.' if path else ''}{k}: unknown key (allowed: {', '.join(allowed)})")
    for k in required:
        if k not in obj:
            raise ConfigError(f"{path + '.' if path else ''}{k}: required")
    return obj


def _list(obj: Any, path: str) -> list[Any]:
    if not isinstance(obj, list):
        raise ConfigError(f"{path}: must be a list")
    return obj


def _int(obj: Any, path: str, lo: int, hi: int) -> int:
    if not isinstance(obj, int) or isinstance(obj, bool) or not lo <= obj <= hi:
        raise ConfigError(f"{path}: {obj!r} is not an integer in {lo}..{hi}")
    return obj


def _float(obj: Any, path: str) -> float:
    if not isinstance(obj, int | float) or isinstance(obj, bool) or not math.isfinite(obj):
        raise ConfigError(f"{path}: {obj!r} is not a number")
    return float(obj)


def _bool(obj: Any, path: str) -> bool:
    if not isinstance(obj, bool):
        raise ConfigError(f"{path}: {obj!r} is not a boolean (allowed: true, false)")
    return obj


def _str(obj: Any, path: str, allowed: tuple[str, ...] | None = None) -> str:
    if not isinstance(obj, str) or not obj:
        raise ConfigError(f"{path}: must be a non-empty string")
    if allowed is not None and obj not in allowed:
        raise ConfigError(f"{path}: {obj!r} is not allowed (allowed: {', '.join(allowed)})")
    return obj


def parse_duration(obj: Any, path: str) -> float:
    """A duration as ``250ms``, ``30s``, ``5m``, ``1h`` or a number of seconds."""
    if isinstance(obj, int | float) and not isinstance(obj, bool) and obj >= 0:
        return float(obj)
    m = _DURATION.match(obj) if isinstance(obj, str) else None
    if m is None:
        raise ConfigError(f"{path}: {obj!r} is not a duration (examples: 250ms, 30s, 5m)")
    return float(m.group(1)) * _DURATION_UNITS[m.group(2)]


def _resources(obj: Any, path: str) -> tuple[tuple[str, int], ...]:
    out = []
    for i, r in enumerate(_list(obj, path)):
        p = f"{path}[{i}]"
        _keys(r, p, ("name", "weight"), ("name",))
        out.append((_str(r["name"], f"{p}.name"), _int(r.get("weight", 1), f"{p}.weight", 1, MAX_WEIGHT)))
    if not out:
        raise ConfigError(f"{path}: must list at least one resource")
    return tuple(out)


def _label_names(obj: Any, path: str, groups: bool = False) -> tuple[str, ...]:
    """NodeResourcesFitArgs ``ignoredResources`` / ``ignoredResourceGroups`` (upstream validation)."""
    out = []
    for i, name in enumerate(_list(obj, path)):
        p = f"{path}[{i}]"
        if not isinstance(name, str):
            raise ConfigError(f"{p}: must be a string")
        if groups and "/" in name:
            raise ConfigError(f"{p}: {name!r}: resource group name can't contain '/'")
        if len(name.rpartition("/")[2]) > 63 or not _LABEL_NAME.match(name):
            raise ConfigError(
                f"{p}: {name!r} is not a valid resource name (a qualified name, e.g. example.com/gpu)"
            )
        out.append(name)
    return tuple(out)


def _node_selector_term(obj: Any, path: str) -> None:
    """One node selector term as upstream's ``NewNodeSelector`` accepts it: every
    requirement must parse (addedAffinity is checked strictly, unlike pods' terms)."""
    _keys(obj, path, ("matchExpressions", "matchFields"))
    for part in ("matchExpressions", "matchFields"):
        for i, r in enumerate(_list(obj.get(part) or [], f"{path}.{part}")):
            p = f"{path}.{part}[{i}]"
            _keys(r, p, ("key", "operator", "values"), ("key", "operator"))
            key = _str(r["key"], f"{p}.key")
            op = _str(
                r["operator"],
                f"{p}.operator",
                ("In", "NotIn") if part == "matchFields" else NODE_SELECTOR_OPERATORS,
            )
            values = _list(r.get("values") or [], f"{p}.values")
            if not all(isinstance(v, str) for v in values):
                raise ConfigError(f"{p}.values: must be a list of strings")
            if part == "matchFields":
                if key != "metadata.name" or len(values) != 1:
                    raise ConfigError(f"{p}: a field selector takes key metadata.name and exactly one value")
            elif op in ("In", "NotIn"):
                bad = [v for v in values if len(v) > 63 or not _LABEL_VALUE.match(v)]
                if not values or bad:
                    raise ConfigError(
                        f"{p}.values: {op} takes one or more valid label values (invalid: {bad})"
                    )
            elif op in ("Exists", "DoesNotExist") and values:
                raise ConfigError(f"{p}.values: {op} takes no values")
            elif op in ("Gt", "Lt") and (len(values) != 1 or not re.match(r"^[+-]?\d+$", values[0])):
                raise ConfigError(f"{p}.values: {op} takes exactly one integer value")


def _added_affinity(obj: Any, path: str) -> Obj:
    """NodeAffinityArgs ``addedAffinity``: a nodeAffinity with required and preferred terms."""
    required_key = "requiredDuringSchedulingIgnoredDuringExecution"
    preferred_key = "preferredDuringSchedulingIgnoredDuringExecution"
    _keys(obj, path, (required_key, preferred_key))
    if required_key in obj:
        rp = f"{path}.{required_key}"
        required = _keys(obj[required_key], rp, ("nodeSelectorTerms",), ("nodeSelectorTerms",))
        terms = _list(required["nodeSelectorTerms"], f"{rp}.nodeSelectorTerms")
        if not terms:
            raise ConfigError(f"{rp}.nodeSelectorTerms: must have at least one term")
        for i, t in enumerate(terms):
            _node_selector_term(t, f"{rp}.nodeSelectorTerms[{i}]")
    for i, t in enumerate(_list(obj.get(preferred_key) or [], f"{path}.{preferred_key}")):
        p = f"{path}.{preferred_key}[{i}]"
        _keys(t, p, ("weight", "preference"), ("weight", "preference"))
        _int(t["weight"], f"{p}.weight", 1, MAX_WEIGHT)
        _node_selector_term(t["preference"], f"{p}.preference")
    return dict(obj)


def _spread_defaults(args: Any, path: str) -> tuple[tuple[tuple[str, int, bool], ...], bool]:
    """PodTopologySpreadArgs: the default constraints, and whether they are the system's."""
    _keys(args, path, ("defaultingType", "defaultConstraints"))
    defaulting = _str(args.get("defaultingType", "System"), f"{path}.defaultingType", DEFAULTING_TYPES)
    if defaulting == "System":
        if args.get("defaultConstraints"):
            raise ConfigError(f"{path}.defaultConstraints: must be empty when defaultingType is System")
        return SYSTEM_DEFAULT_SPREAD, True
    items = []
    for j, c in enumerate(_list(args.get("defaultConstraints") or [], f"{path}.defaultConstraints")):
        q = f"{path}.defaultConstraints[{j}]"
        _keys(c, q, ("maxSkew", "topologyKey", "whenUnsatisfiable"), ("maxSkew", "topologyKey"))
        when = _str(c.get("whenUnsatisfiable", "DoNotSchedule"), f"{q}.whenUnsatisfiable", WHEN_UNSATISFIABLE)
        items.append(
            (
                _str(c["topologyKey"], f"{q}.topologyKey"),
                _int(c["maxSkew"], f"{q}.maxSkew", 1, 2**31 - 1),
                when == "DoNotSchedule",
            )
        )
    return tuple(items), False


def _profile(obj: Any, path: str) -> ProfileConfig:
    _keys(obj, path, ("schedulerName", "plugins", "pluginConfig"), ("schedulerName",))
    name = _str(obj["schedulerName"], f"{path}.schedulerName")
    filters = list(FILTER_PLUGINS)
    weights = dict(DEFAULT_SCORE_WEIGHTS)
    preemption = True
    plugins = _keys(obj.get("plugins") or {}, f"{path}.plugins", ("multiPoint",))
    multi = _keys(plugins.get("multiPoint") or {}, f"{path}.plugins.multiPoint", ("enabled", "disabled"))
    for i, d in enumerate(_list(multi.get("disabled") or [], f"{path}.plugins.multiPoint.disabled")):
        p = f"{path}.plugins.multiPoint.disabled[{i}]"
        plugin = _str(_keys(d, p, ("name",), ("name",))["name"], f"{p}.name", ALL_PLUGINS)
        if plugin in filters:
            filters.remove(plugin)
        weights.pop(plugin, None)
        if plugin in POST_FILTER_PLUGINS:
            preemption = False
    for i, e in enumerate(_list(multi.get("enabled") or [], f"{path}.plugins.multiPoint.enabled")):
        p = f"{path}.plugins.multiPoint.enabled[{i}]"
        _keys(e, p, ("name", "weight"), ("name",))
        plugin = _str(e["name"], f"{p}.name", ALL_PLUGINS)
        if plugin in FILTER_PLUGINS and plugin not in filters:
            filters.append(plugin)
        if plugin in POST_FILTER_PLUGINS:
            preemption = True
        if plugin in DEFAULT_SCORE_WEIGHTS:
            weights[plugin] = _int(
                e.get("weight", DEFAULT_SCORE_WEIGHTS[plugin]), f"{p}.weight", 0, MAX_WEIGHT
            )
        elif "weight" in e:
            raise ConfigError(
                f"{p}.weight: {plugin} does not score (scoring plugins: {', '.join(DEFAULT_SCORE_WEIGHTS)})"
            )
    fit_strategy = "LeastAllocated"
    fit_resources: tuple[tuple[str, int], ...] = (("cpu", 1), ("memory", 1))
    shape: tuple[tuple[int, int], ...] = ((0, 10), (100, 0))
    balanced: tuple[str, ...] = ("cpu", "memory")
    hard_weight = 1
    spread_defaults: tuple[tuple[str, int, bool], ...] = SYSTEM_DEFAULT_SPREAD
    system_defaulted = True
    bind_timeout = DEFAULT_BIND_TIMEOUT_S
    ignored: tuple[str, ...] = ()
    ignored_groups: tuple[str, ...] = ()
    added_affinity: Obj | None = None
    ignore_existing = False
    for i, pc in enumerate(_list(obj.get("pluginConfig") or [], f"{path}.pluginConfig")):
        p = f"{path}.pluginConfig[{i}]"
        _keys(pc, p, ("name", "args"), ("name",))
        plugin = _str(
            pc["name"],
            f"{p}.name",
            (
                "NodeResourcesFit",
                "NodeResourcesBalancedAllocation",
                "NodeAffinity",
                "InterPodAffinity",
                "PodTopologySpread",
                "VolumeBinding",
            ),
        )
        args = pc.get("args") or {}
        if plugin == "VolumeBinding":
            # ``shape`` needs the alpha StorageCapacityScoring gate, off in v1.36 as in ksched.
            _keys(args, f"{p}.args", ("bindTimeoutSeconds",))
            bind_timeout = _int(
                args.get("bindTimeoutSeconds", DEFAULT_BIND_TIMEOUT_S),
                f"{p}.args.bindTimeoutSeconds",
                0,
                2**31 - 1,
            )
        elif plugin == "PodTopologySpread":
            spread_defaults, system_defaulted = _spread_defaults(args, f"{p}.args")
        elif plugin == "InterPodAffinity":
            _keys(args, f"{p}.args", ("hardPodAffinityWeight", "ignorePreferredTermsOfExistingPods"))
            hard_weight = _int(
                args.get("hardPodAffinityWeight", 1), f"{p}.args.hardPodAffinityWeight", 0, MAX_WEIGHT
            )
            ignore_existing = _bool(
                args.get("ignorePreferredTermsOfExistingPods", False),
                f"{p}.args.ignorePreferredTermsOfExistingPods",
            )
        elif plugin == "NodeAffinity":
            _keys(args, f"{p}.args", ("addedAffinity",))
            if args.get("addedAffinity") is not None:
                added_affinity = _added_affinity(args["addedAffinity"], f"{p}.args.addedAffinity")
        elif plugin == "NodeResourcesFit":
            _keys(args, f"{p}.args", ("scoringStrategy", "ignoredResources", "ignoredResourceGroups"))
            ignored = _label_names(args.get("ignoredResources") or [], f"{p}.args.ignoredResources")
            ignored_groups = _label_names(
                args.get("ignoredResourceGroups") or [], f"{p}.args.ignoredResourceGroups", groups=True
            )
            s = _keys(
                args.get("scoringStrategy") or {},
                f"{p}.args.scoringStrategy",
                ("type", "resources", "requestedToCapacityRatio"),
            )
            sp = f"{p}.args.scoringStrategy"
            fit_strategy = _str(s.get("type", "LeastAllocated"), f"{sp}.type", STRATEGIES)
            if "resources" in s:
                fit_resources = _resources(s["resources"], f"{sp}.resources")
            if fit_strategy == "RequestedToCapacityRatio":
                rp = f"{sp}.requestedToCapacityRatio"
                rtcr = _keys(s.get("requestedToCapacityRatio"), rp, ("shape",), ("shape",))
                points = []
                for j, pt in enumerate(_list(rtcr["shape"], f"{rp}.shape")):
                    q = f"{rp}.shape[{j}]"
                    _keys(pt, q, ("utilization", "score"), ("utilization", "score"))
                    points.append(
                        (
                            _int(pt["utilization"], f"{q}.utilization", 0, MAX_UTILIZATION),
                            _int(pt["score"], f"{q}.score", 0, MAX_SHAPE_SCORE),
                        )
                    )
                if not points or any(a[0] >= b[0] for a, b in itertools.pairwise(points)):
                    raise ConfigError(
                        f"{rp}.shape: needs at least one point, utilization strictly increasing"
                    )
                shape = tuple(points)
        else:
            _keys(args, f"{p}.args", ("resources",))
            if "resources" in args:
                balanced = tuple(r for r, _ in _resources(args["resources"], f"{p}.args.resources"))
    return ProfileConfig(
        name,
        tuple(f for f in FILTER_PLUGINS if f in filters),
        weights,
        fit_strategy,
        fit_resources,
        shape,
        balanced,
        hard_weight,
        preemption,
        spread_defaults,
        system_defaulted,
        bind_timeout,
        fit_ignored_resources=ignored,
        fit_ignored_groups=ignored_groups,
        added_affinity=added_affinity,
        ignore_preferred_terms_of_existing_pods=ignore_existing,
    )


def _metric(obj: Any, path: str) -> MetricConfig:
    allowed = (
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
    _keys(obj, path, allowed, ("name", "source"))
    name = _str(obj["name"], f"{path}.name")
    if not re.match(r"^[a-zA-Z_][a-zA-Z0-9_]*$", name):
        raise ConfigError(f"{path}.name: {name!r} must be a metric-style identifier ([a-zA-Z_][a-zA-Z0-9_]*)")
    source = _str(obj["source"], f"{path}.source", SOURCES)
    query = annotation = None
    if source == "prometheus":
        query = _str(obj.get("query"), f"{path}.query")
    else:
        annotation = _str(obj.get("annotation"), f"{path}.annotation")
    prefer_raw = _str(obj.get("prefer", "lower"), f"{path}.prefer")
    target = None
    m = _TARGET.match(prefer_raw)
    if m:
        try:
            target = float(m.group(1))
        except ValueError:
            raise ConfigError(f"{path}.prefer: {prefer_raw!r} has no numeric target") from None
        prefer = "target"
    elif prefer_raw in ("lower", "higher"):
        prefer = prefer_raw
    else:
        raise ConfigError(f"{path}.prefer: {prefer_raw!r} is not allowed (allowed: {', '.join(PREFER)})")
    rng = None
    norm = obj.get("normalization", "minmax")
    if norm != "minmax":
        n = _keys(norm, f"{path}.normalization", ("range",), ("range",))
        r = _list(n["range"], f"{path}.normalization.range")
        if len(r) != 2:
            raise ConfigError(f"{path}.normalization.range: must be [low, high]")
        lo, hi = (
            _float(r[0], f"{path}.normalization.range[0]"),
            _float(r[1], f"{path}.normalization.range[1]"),
        )
        if not lo < hi:
            raise ConfigError(f"{path}.normalization.range: low must be below high")
        rng = (lo, hi)
    f = _keys(obj.get("filter") or {}, f"{path}.filter", ("above", "below"))
    above = _float(f["above"], f"{path}.filter.above") if "above" in f else None
    below = _float(f["below"], f"{path}.filter.below") if "below" in f else None
    refresh = _keys(obj.get("refresh") or {}, f"{path}.refresh", ("min", "max"))
    min_refresh = parse_duration(refresh.get("min", 5), f"{path}.refresh.min")
    max_refresh = parse_duration(refresh.get("max", 60), f"{path}.refresh.max")
    if min_refresh > max_refresh:
        raise ConfigError(f"{path}.refresh: min must not exceed max")
    weight = _float(obj.get("weight", 1), f"{path}.weight")
    if not 0 <= weight <= MAX_WEIGHT:
        raise ConfigError(f"{path}.weight: {weight!r} is not in 0..{MAX_WEIGHT}")
    herd = _keys(obj.get("herdEstimate") or {}, f"{path}.herdEstimate", ("resource", "factor"))
    herd_resource = _str(herd["resource"], f"{path}.herdEstimate.resource") if "resource" in herd else None
    herd_factor = _float(herd.get("factor", 1.0), f"{path}.herdEstimate.factor")
    if herd and herd_resource is None:
        raise ConfigError(f"{path}.herdEstimate.resource: required (e.g. cpu)")
    return MetricConfig(
        herd_resource=herd_resource,
        herd_factor=herd_factor,
        name=name,
        source=source,
        query=query,
        annotation=annotation,
        node_label=_str(obj.get("nodeLabel", "node"), f"{path}.nodeLabel"),
        prefer=prefer,
        target=target,
        range=rng,
        above=above,
        below=below,
        missing=_str(obj.get("missing", "neutral"), f"{path}.missing", MISSING),
        weight=weight,
        max_age_s=parse_duration(obj.get("maxAge", 120), f"{path}.maxAge"),
        min_refresh_s=min_refresh,
        max_refresh_s=max_refresh,
    )


def parse_config(obj: Obj) -> Config:
    """Validate a decoded configuration document."""
    _keys(
        obj,
        "",
        (
            "apiVersion",
            "kind",
            "profiles",
            "metrics",
            "batch",
            "leaderElection",
            "clientConnection",
            "prometheus",
            "webhook",
            "handoff",
            "shadow",
        ),
        ("apiVersion", "kind"),
    )
    _str(obj["apiVersion"], "apiVersion", (API_VERSION,))
    _str(obj["kind"], "kind", (KIND,))
    profiles = tuple(
        _profile(p, f"profiles[{i}]")
        for i, p in enumerate(_list(obj.get("profiles") or [{"schedulerName": DEFAULT_PROFILE}], "profiles"))
    )
    names = [p.scheduler_name for p in profiles]
    if len(set(names)) != len(names):
        raise ConfigError(f"profiles: duplicate schedulerName in {names}")
    metrics = tuple(
        _metric(m, f"metrics[{i}]") for i, m in enumerate(_list(obj.get("metrics") or [], "metrics"))
    )
    if len({m.name for m in metrics}) != len(metrics):
        raise ConfigError("metrics: duplicate metric name")
    b = _keys(obj.get("batch") or {}, "batch", ("maxSize", "maxWait", "bindWorkers", "decisionDeadline"))
    batch = BatchConfig(
        max_size=_int(b.get("maxSize", 512), "batch.maxSize", 1, 100_000),
        max_wait_s=parse_duration(b.get("maxWait", 0.05), "batch.maxWait"),
        bind_workers=_int(b.get("bindWorkers", BatchConfig.bind_workers), "batch.bindWorkers", 1, 256),
        decision_deadline_s=parse_duration(b.get("decisionDeadline", 2.0), "batch.decisionDeadline"),
    )
    pr = _keys(obj.get("prometheus") or {}, "prometheus", ("url", "timeout"))
    prometheus = PrometheusConfig(
        url=_str(pr["url"], "prometheus.url") if "url" in pr else None,
        timeout_s=parse_duration(pr.get("timeout", 5.0), "prometheus.timeout"),
    )

    return Config(
        profiles,
        metrics,
        batch,
        _leader_election(obj.get("leaderElection") or {}),
        _client_connection(obj.get("clientConnection") or {}),
        prometheus,
        _webhook(obj.get("webhook") or {}, names),
        _handoff(obj.get("handoff") or {}),
        _shadow(obj.get("shadow") or {}, names),
    )


def _handoff(obj: Any) -> HandoffConfig:
    h = _keys(obj, "handoff", ("enabled", "after"))
    enabled = _bool(h.get("enabled", False), "handoff.enabled")
    return HandoffConfig(enabled=enabled, after_s=parse_duration(h.get("after", "5m"), "handoff.after"))


def _shadow(obj: Any, profiles: list[str]) -> ShadowConfig:
    path = "shadow"
    sh = _keys(obj, path, ("enabled", "profile", "namespaces", "keep", "log"))
    enabled = _bool(sh.get("enabled", False), f"{path}.enabled")
    raw = _list(sh.get("namespaces", []), f"{path}.namespaces")
    return ShadowConfig(
        enabled=enabled,
        profile=_str(sh["profile"], f"{path}.profile", tuple(profiles)) if "profile" in sh else profiles[0],
        namespaces=tuple(_str(n, f"{path}.namespaces[{i}]") for i, n in enumerate(raw)),
        keep=_int(sh.get("keep", ShadowConfig.keep), f"{path}.keep", 1, 100_000),
        log=_str(sh["log"], f"{path}.log") if "log" in sh else None,
    )


def _webhook(obj: Any, profiles: list[str]) -> WebhookConfig:
    path = "webhook"
    w = _keys(
        obj,
        path,
        ("enabled", "address", "certFile", "keyFile", "hosts", "configurationName", "schedulerName"),
    )
    default = WebhookConfig()
    enabled = _bool(w.get("enabled", False), f"{path}.enabled")
    cert = _str(w["certFile"], f"{path}.certFile") if "certFile" in w else None
    key = _str(w["keyFile"], f"{path}.keyFile") if "keyFile" in w else None
    if (cert is None) != (key is None):
        raise ConfigError(
            f"{path}: certFile and keyFile go together (or neither, for a self-generated certificate)"
        )
    raw_hosts = _list(w.get("hosts", list(default.hosts)), f"{path}.hosts")
    hosts = tuple(_str(h, f"{path}.hosts[{i}]") for i, h in enumerate(raw_hosts))
    if not hosts:
        raise ConfigError(f"{path}.hosts: must name at least one host")
    scheduler = (
        _str(w["schedulerName"], f"{path}.schedulerName", tuple(profiles))
        if "schedulerName" in w
        else profiles[0]
    )
    name = w.get("configurationName", default.configuration_name)
    return WebhookConfig(
        enabled=enabled,
        address=_str(w.get("address", default.address), f"{path}.address"),
        cert_file=cert,
        key_file=key,
        hosts=hosts,
        configuration_name=None if name is None else _str(name, f"{path}.configurationName"),
        scheduler_name=scheduler,
    )


def _leader_election(obj: Any) -> LeaderElectionConfig:
    path = "leaderElection"
    le = _keys(
        obj,
        path,
        ("leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceName", "resourceNamespace"),
    )
    default = LeaderElectionConfig()
    leader_elect = _bool(le.get("leaderElect", default.leader_elect), f"{path}.leaderElect")
    out = LeaderElectionConfig(
        leader_elect=leader_elect,
        lease_duration_s=parse_duration(le.get("leaseDuration", "15s"), f"{path}.leaseDuration"),
        renew_deadline_s=parse_duration(le.get("renewDeadline", "10s"), f"{path}.renewDeadline"),
        retry_period_s=parse_duration(le.get("retryPeriod", "2s"), f"{path}.retryPeriod"),
        resource_name=_str(le.get("resourceName", default.resource_name), f"{path}.resourceName"),
        resource_namespace=_str(
            le.get("resourceNamespace", default.resource_namespace), f"{path}.resourceNamespace"
        ),
    )
    # Upstream's validation: the lease must outlast the renew deadline, which must outlast the retry period.
    if not out.lease_duration_s > out.renew_deadline_s:
        raise ConfigError(f"{path}.leaseDuration: must be greater than renewDeadline")
    if out.lease_duration_s != int(out.lease_duration_s):
        raise ConfigError(f"{path}.leaseDuration: must be whole seconds (a Lease stores seconds)")
    # The client's leaderelection also wants whole-second periods and 20 % jitter room.
    if out.retry_period_s < 1:
        raise ConfigError(f"{path}.retryPeriod: must be at least 1s")
    if not out.renew_deadline_s > LEADER_JITTER * out.retry_period_s:
        raise ConfigError(f"{path}.renewDeadline: must be greater than {LEADER_JITTER} x retryPeriod")
    return out


def _client_connection(obj: Any) -> ClientConnectionConfig:
    cc = _keys(obj, "clientConnection", ("qps", "burst"))
    qps = _float(cc.get("qps", 500), "clientConnection.qps")
    if not qps > 0:
        raise ConfigError(f"clientConnection.qps: {qps!r} must be positive")
    return ClientConnectionConfig(
        qps=qps, burst=_int(cc.get("burst", 1000), "clientConnection.burst", 1, 1_000_000)
    )


def load_config(path: str | Path | None) -> Config:
    """Read a configuration file; None gives the default (one profile named ``ksched``)."""
    if path is None:
        return Config()
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ConfigError(f"cannot read configuration {path}: {err.strerror}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    return parse_config(doc)
