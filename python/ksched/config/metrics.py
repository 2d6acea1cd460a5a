"""``metrics``: each metric's source, how its value scores and filters nodes, and
how fresh it must be. Defaults are :class:`MetricConfig`'s field defaults."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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
# What a pod that requests nothing of the estimated resource is counted as (Koordinator's
# and upstream's non-zero defaults: 100m CPU, 200Mi memory).
BEST_EFFORT_DEFAULTS = {"cpu": "100m", "memory": "200Mi"}
# A learned estimate needs at least this many recently placed pods of a kind (estimated from
# requests, or BestEffort) measured before it replaces the configured guess for that kind.
LEARN_MIN_PODS = 10
# ``Calibration.next_pod``: the quantile of the recent pods' counted usage a heavy next pod is.
NEXT_POD_QUANTILE = 0.9
# ``estimate.warmup``: the longest a pod may take to reach its usage after it starts (Java and
# Python services warm up over 30 s to 3 min); while it ramps it counts at least its estimate.
DEFAULT_WARMUP_S = 180.0
MAX_WARMUP_S = 3600.0
# ``estimate.scrapeInterval``: how often the pod query's values are sampled (Prometheus's
# ``scrape_interval`` for their series), taken until ksched learned it from the values'
# changes (:class:`ksched.loop.metrics.workloads.PodSeries`). Prometheus's default.
DEFAULT_SCRAPE_INTERVAL_S = 60.0
MAX_SCRAPE_INTERVAL_S = 600.0
# ``estimate.prior``: how a pod of a workload nothing was learned of counts. A quantile of the
# workloads' learned ratios (``p90``), its limit (``limit``), or a fixed ratio (a number).
DEFAULT_PRIOR = ("quantile", 0.9)
PRIORS = ("p<0-100>", "limit", "<number>")
# A fixed prior ratio above this is a typo (a pod using a hundred times its guess).
MAX_PRIOR_RATIO = 100.0
# ``estimate.initialSpread``: the standard deviation of usage over guess taken for a guess that
# nothing measured has calibrated yet (a fresh cluster, or the first BestEffort pods). The
# default is a public trace's: in the Alibaba 2018 sample (PyPI package ``spar``) instances'
# CPU usage over request has mean 0.87 and standard deviation 0.67 (p10 0.17, p90 1.82).
DEFAULT_INITIAL_SPREAD = 0.7
MAX_INITIAL_SPREAD = 10.0
_PRIOR_QUANTILE = re.compile(r"^p(\d{1,3})$")
# ``estimate.workloadLabel``: a label key (an optional DNS prefix, then a name).
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
# A range selector or subquery range in PromQL (``[5m]``, ``[1h30m:1m]``), and its parts.
_RANGE = re.compile(r"\[\s*((?:\d+(?:ms|s|m|h|d|w|y))+)\s*(?::[^\]]*)?\]")
_RANGE_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_PROMQL_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
# A Kubernetes quantity (``100m``, ``200Mi``, ``1.5``, ``1e3``).
_QUANTITY = re.compile(r"^[+]?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$")
# Pod priorities are int32.
_PRIORITY = (-(2**31), 2**31 - 1)
_TARGET = re.compile(r"^target\(\s*([-+0-9.eE]+)\s*\)$")
_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# The shortest refresh interval: each refresh is a query to the source, and 0 turns the
# refresher into a tight loop against it; two queries a second per metric is already more
# than any source refreshes its values (the integration tests refresh this fast).
MIN_REFRESH_S = 0.5
# A Kubernetes resource name: a qualified name, an optional DNS subdomain prefix then a name.
MAX_RESOURCE_NAME = 63
MAX_RESOURCE_PREFIX = 253
_RESOURCE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
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
class Learned:
    """What measured pods say about the guesses. ``ratio``: measured over guessed usage of the
    pods guessed from their requests (summed over them), and the standard deviation of each
    pod's ratio around it, weighted by its guess; ``best_effort``: the mean measured usage of
    BestEffort pods (engine units), and its standard deviation. None where fewer than
    ``LEARN_MIN_PODS`` of that kind are measured."""

    ratio: float | None = None
    ratio_sd: float = 0.0
    ratio_pods: int = 0
    best_effort: float | None = None
    best_effort_sd: float = 0.0
    best_effort_pods: int = 0


@dataclass(frozen=True)
class WorkloadCalibration(Learned):
    """What one workload's own measured pods taught (they may have left the recent window),
    ``warmup_s``: how long after their bind its pods took to use a stable amount (None: none of
    them was seen ramping to it), and ``ratio_request``: the mean guess (engine units) of the
    pods its ratio is from, by which a workload that requests next to nothing is left out of
    the figures across workloads (:func:`ksched.loop.metrics.workloads.prior_figures`)."""

    warmup_s: float | None = None
    ratio_request: float = 0.0


@dataclass(frozen=True)
class Calibration(Learned):
    """What the recently placed pods that are already measured (and stable) say about the
    guesses (``estimate.learn``); set on a metric's estimate by the loop each cycle, never
    parsed. Its own figures are the cluster-wide ones (every recent pod's); ``workloads``
    holds each workload's own (:func:`ksched.engine.estimate.workload_of`), and the ``prior_*``
    figures are how a pod of a workload without a measured pod counts (``estimate.prior``:
    None where nothing is learned, the guess then stands)."""

    workloads: Mapping[str, WorkloadCalibration] = field(default_factory=dict, compare=False)
    prior_ratio: float | None = None
    prior_ratio_sd: float = 0.0
    prior_best_effort: float | None = None
    prior_best_effort_sd: float = 0.0
    # What a typical workload's pods use (the learned workloads' mean figure, at most the
    # prior's): what the metric's score counts a prior pod being placed at (the filter: the
    # prior's figure).
    prior_ratio_typical: float | None = None
    prior_best_effort_typical: float | None = None
    # How the recent pods were counted (``/status``): pods by source of their estimate, and
    # the keys of those still ramping up.
    sources: Mapping[str, int] = field(default_factory=dict, compare=False)
    ramping: tuple[str, ...] = field(default=(), compare=False)
    # The longest bound of those (``/status`` shows a few): key, what it counts at, what it
    # measures (engine units) and seconds since its bind.
    ramp: tuple[tuple[str, float, float, float], ...] = field(default=(), compare=False)
    # What a heavy next pod is counted at (engine units): the ``NEXT_POD_QUANTILE`` of what the
    # recent pods count (measured, ramping or estimated); None without recent pods. Steering
    # keeps that much room below a node's line (``steering.anticipate``).
    next_pod: float | None = field(default=None, compare=False)
    # Whether the cluster-wide ratio, and the BestEffort figures, are the settled pods' standing
    # in (too few recent pods of that kind measured; ``/status`` says which pods taught them).
    ratio_settled: bool = field(default=False, compare=False)
    best_effort_settled: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class EstimateConfig:
    """How a recently placed pod's load is counted on its node until the metric shows it.

    A pod counts as its estimated usage of ``resource`` over the node's allocatable: its
    limit where that is above its request, else its request times ``factor``, else (it
    requests none) ``best_effort``. Where ``pod_query`` is set, a pod's measured usage
    replaces the estimate. Each pod counts fully until the metric's sample, then fades out
    linearly over ``window_s`` (the query's range selector: a ``rate(...[5m])`` shows a new
    pod fully only five minutes later). ``legacy`` is the first herd estimate
    (``herdEstimate``): only pods ksched bound, requests times factor, no window, and the
    incoming pod not counted against the filter.

    With ``learn`` (it needs ``pod_query``) the guesses are calibrated by the recently placed
    pods already measured (:class:`Calibration`): a pod guessed from its requests counts as
    its guess times their measured/guessed ratio, a BestEffort pod as their mean measured
    usage. ``deviations`` adds that many standard deviations of what the measured pods
    strayed: to each pod being placed, and to each node as the combined spread of its recent
    pods not measured yet (independent: the root of the sum of squares). With
    ``score_by_mean`` they count in the metric's filter only, and its score reads the mean;
    with ``score_pod_by_mean`` only the pod being placed is scored at its mean, while each
    node's reading keeps its caution. With ``score_risk`` the score also counts the pod's
    caution, weighed by the chance that it takes the node past the metric's line.

    A learned estimate learns per workload too (``workload_label``, else the pod's controller):
    a pod counts at its own workload's figures, a pod of a workload without a measured pod at
    the ``prior`` (its score at the typical workload's figure) and a pod ramping up (for at most ``warmup_s`` after its bind) at the larger
    of its estimate and its measured usage. A pod annotated ``ksched.io/expected-<resource>``
    counts as that, uncalibrated, in every estimate but the legacy one."""

    resource: str
    factor: float = 1.0
    # None: taken from the query's range selector (0 where it has none).
    window_s: float | None = None
    # The quantity a BestEffort pod counts as (None: BEST_EFFORT_DEFAULTS, else 0).
    best_effort: str | None = None
    # PromQL giving each pod's usage of ``resource`` in its own unit (cores, bytes).
    pod_query: str | None = None
    pod_label: str = "pod"
    namespace_label: str = "namespace"
    legacy: bool = False
    # Calibrate the guesses by recently measured pods (needs pod_query).
    learn: bool = False
    deviations: float = 0.0
    # The deviations count in the filter only; the metric's score reads nodes and pods at the
    # mean (the engine's caution: Matrix.caution, LoadInputs.expected).
    score_by_mean: bool = False
    # ``scoreByMean: pod``: the pod being placed is scored at its mean (implied by
    # ``score_by_mean``); each node keeps its caution in the score.
    score_pod_by_mean: bool = False
    # ``scoreRisk``: the score adds the pod's caution (what the filter counts it at over what
    # it is expected to use; with ``score_by_mean`` the node's caution too, which the score
    # then leaves out), weighed by the chance that it takes the node past the metric's line
    # there (the engine's ``LoadInputs.risk``).
    score_risk: bool = False
    # The pod label that names a pod's workload where set (None: its controller).
    workload_label: str | None = None
    # The longest a pod is taken to ramp up after its bind.
    warmup_s: float = DEFAULT_WARMUP_S
    # How often the pod query's values are sampled, until learned from their changes.
    scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S
    # How a pod of a workload without history counts: ("quantile", q), ("limit", 0) or ("ratio", x).
    prior: tuple[str, float] = DEFAULT_PRIOR
    # The standard deviation of usage over guess of a guess nothing calibrated yet: what the
    # ``deviations`` count before the measured pods taught a spread.
    initial_spread: float = DEFAULT_INITIAL_SPREAD
    # The loop's current calibration (set each cycle where ``learns``; never parsed).
    calibration: Calibration | None = None

    @property
    def scores_pod_by_mean(self) -> bool:
        """Whether the metric's score reads the pod being placed at its mean."""
        return self.score_by_mean or self.score_pod_by_mean

    @property
    def learns(self) -> bool:
        return self.learn and not self.legacy and self.pod_query is not None


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


def _resource(obj: Any, path: str) -> str:
    """An estimate's ``resource``: a Kubernetes resource name (cpu, memory, example.com/gpu)."""
    resource = as_str(obj, path)
    prefix, _, name = resource.rpartition("/")
    if not _RESOURCE.match(resource) or len(name) > MAX_RESOURCE_NAME or len(prefix) > MAX_RESOURCE_PREFIX:
        raise ConfigError(
            f"{path}: {resource!r} is not a resource name (examples: cpu, memory, example.com/gpu)"
        )
    return resource


def _estimate(obj: Any, path: str, metric_resource: str | None) -> EstimateConfig:
    """``estimate``; ``metric_resource``: a metrics-server metric's resource, which the
    estimate's defaults to and must be (the metric measures nothing else)."""
    e = check_keys(
        obj,
        path,
        (
            "resource",
            "factor",
            "window",
            "bestEffort",
            "podQuery",
            "podLabel",
            "namespaceLabel",
            "learn",
            "deviations",
            "scoreByMean",
            "scoreRisk",
            "workloadLabel",
            "warmup",
            "scrapeInterval",
            "prior",
            "initialSpread",
        ),
        () if metric_resource is not None else ("resource",),
    )
    resource = _resource(e.get("resource", metric_resource), f"{path}.resource")
    if metric_resource is not None and resource != metric_resource:
        raise ConfigError(
            f"{path}.resource: {resource!r} is not the metric's resource {metric_resource!r} "
            "(a metrics-server metric measures its own resource only)"
        )
    factor = as_float(e.get("factor", EstimateConfig.factor), f"{path}.factor")
    if factor < 0:
        raise ConfigError(f"{path}.factor: must not be negative")
    best_effort = e.get("bestEffort")
    if best_effort is not None:
        best_effort = str(best_effort)
        if not _QUANTITY.match(best_effort):
            raise ConfigError(f"{path}.bestEffort: {best_effort!r} is not a quantity (examples: 100m, 200Mi)")
    learn = e.get("learn", False)
    if not isinstance(learn, bool):
        raise ConfigError(f"{path}.learn: must be true or false")
    if learn and "podQuery" not in e:
        raise ConfigError(f"{path}.learn: needs podQuery (it learns from the pods' measured usage)")
    deviations = as_float(e.get("deviations", EstimateConfig.deviations), f"{path}.deviations")
    if deviations < 0:
        raise ConfigError(f"{path}.deviations: must not be negative")
    if deviations > 0 and not learn:
        raise ConfigError(
            f"{path}.deviations: needs learn: true (podQuery set): "
            "the deviations are those of the measured pods"
        )
    score_by_mean = e.get("scoreByMean", EstimateConfig.score_by_mean)
    # Not `in (True, False, "pod")`: 0 and 1 equal False and True in Python.
    if not isinstance(score_by_mean, bool) and score_by_mean != "pod":
        raise ConfigError(f"{path}.scoreByMean: must be true, false or pod")
    if score_by_mean and not learn:
        raise ConfigError(
            f"{path}.scoreByMean: needs learn: true (podQuery set): the mean and the deviations "
            "are those of the measured pods"
        )
    score_risk = e.get("scoreRisk", EstimateConfig.score_risk)
    if not isinstance(score_risk, bool):
        raise ConfigError(f"{path}.scoreRisk: must be true or false")
    if score_risk and not learn:
        raise ConfigError(
            f"{path}.scoreRisk: needs learn: true (podQuery set): the risk it weighs is the "
            "spread the measured pods taught"
        )
    for key in ("workloadLabel", "warmup", "scrapeInterval", "prior", "initialSpread"):
        if key in e and not learn:
            raise ConfigError(f"{path}.{key}: needs learn: true (podQuery set): it shapes what is learned")
    warmup = parse_duration(e["warmup"], f"{path}.warmup") if "warmup" in e else EstimateConfig.warmup_s
    if not 0 <= warmup <= MAX_WARMUP_S:
        raise ConfigError(f"{path}.warmup: {warmup:g}s is not in 0..{MAX_WARMUP_S:g}s")
    scrape = (
        parse_duration(e["scrapeInterval"], f"{path}.scrapeInterval")
        if "scrapeInterval" in e
        else EstimateConfig.scrape_interval_s
    )
    if not 0 < scrape <= MAX_SCRAPE_INTERVAL_S:
        raise ConfigError(f"{path}.scrapeInterval: {scrape:g}s is not in (0, {MAX_SCRAPE_INTERVAL_S:g}s]")
    spread = as_float(e.get("initialSpread", DEFAULT_INITIAL_SPREAD), f"{path}.initialSpread")
    if not 0 <= spread <= MAX_INITIAL_SPREAD:
        raise ConfigError(f"{path}.initialSpread: {spread:g} is not in 0..{MAX_INITIAL_SPREAD:g}")
    return EstimateConfig(
        workload_label=_label_key(e["workloadLabel"], f"{path}.workloadLabel")
        if "workloadLabel" in e
        else None,
        warmup_s=warmup,
        scrape_interval_s=scrape,
        prior=_prior(e["prior"], f"{path}.prior") if "prior" in e else DEFAULT_PRIOR,
        initial_spread=spread,
        resource=resource,
        factor=factor,
        window_s=parse_duration(e["window"], f"{path}.window") if "window" in e else None,
        best_effort=best_effort,
        pod_query=as_str(e["podQuery"], f"{path}.podQuery") if "podQuery" in e else None,
        pod_label=as_str(e.get("podLabel", EstimateConfig.pod_label), f"{path}.podLabel"),
        namespace_label=as_str(
            e.get("namespaceLabel", EstimateConfig.namespace_label), f"{path}.namespaceLabel"
        ),
        learn=learn,
        deviations=deviations,
        score_by_mean=score_by_mean is True,
        score_pod_by_mean=score_by_mean == "pod",
        score_risk=score_risk,
    )


def _label_key(raw: Any, path: str) -> str:
    key = as_str(raw, path)
    prefix, _, name = key.rpartition("/")
    if not _LABEL_KEY.match(key) or len(name) > MAX_RESOURCE_NAME or len(prefix) > MAX_RESOURCE_PREFIX:
        raise ConfigError(f"{path}: {key!r} is not a label key (example: app.kubernetes.io/name)")
    return key


def _prior(raw: Any, path: str) -> tuple[str, float]:
    """``estimate.prior``: ``pNN`` (a quantile of the workloads' ratios), ``limit``, or a ratio."""
    if isinstance(raw, str):
        m = _PRIOR_QUANTILE.match(raw)
        if m and int(m.group(1)) <= 100:
            return "quantile", int(m.group(1)) / 100
        if raw == "limit":
            return "limit", 0.0
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise ConfigError(f"{path}: {raw!r} is not allowed (allowed: {', '.join(PRIORS)})")
    try:
        ratio = float(raw)
    except ValueError:
        raise ConfigError(f"{path}: {raw!r} is not allowed (allowed: {', '.join(PRIORS)})") from None
    if not 0 < ratio <= MAX_PRIOR_RATIO:
        raise ConfigError(f"{path}: {raw!r}: a ratio must be in (0, {MAX_PRIOR_RATIO:g}]")
    return "ratio", ratio


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
        estimate = _estimate(obj["estimate"], f"{path}.estimate", resource)
    elif "herdEstimate" in obj:
        herd = check_keys(obj["herdEstimate"], f"{path}.herdEstimate", ("resource", "factor"), ("resource",))
        herd_factor = as_float(herd.get("factor", EstimateConfig.factor), f"{path}.herdEstimate.factor")
        if herd_factor < 0:
            raise ConfigError(f"{path}.herdEstimate.factor: must not be negative")
        estimate = EstimateConfig(
            resource=_resource(herd["resource"], f"{path}.herdEstimate.resource"),
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
        and estimate.score_risk
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
