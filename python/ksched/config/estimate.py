"""``metrics[].estimate``: how a recently placed pod's load is counted on its node until the
metric shows it, and what the loop learns from the measured pods (:class:`Calibration`, set on
the estimate each cycle, never parsed). :mod:`ksched.config.metrics` reads the rest of a metric."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ksched.config.names import is_qualified_name
from ksched.config.values import as_float, as_str, check_keys, finite_number, parse_duration
from ksched.errors import ConfigError

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
# changes (:class:`ksched.loop.metrics.pod_series.PodSeries`). Prometheus's default.
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
# A Kubernetes quantity (``100m``, ``200Mi``, ``1.5``, ``1e3``).
_QUANTITY = re.compile(r"^[+]?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$")


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
    the figures across workloads (:func:`ksched.loop.metrics.across.prior_figures`)."""

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
    # What taught the BestEffort prior (``/status``): BestEffort pods, else the requesting pods
    # (:func:`ksched.loop.metrics.across.prior_figures`); None without one.
    prior_best_effort_from: str | None = None
    # How the recent pods were counted (``/status``): pods by source of their estimate, and
    # the keys of those still ramping up.
    sources: Mapping[str, int] = field(default_factory=dict, compare=False)
    ramping: tuple[str, ...] = field(default=(), compare=False)
    # The longest bound of those (``/status`` shows a few): key, what it counts at, what it
    # measures (engine units) and seconds since its bind.
    ramp: tuple[tuple[str, float, float, float], ...] = field(default=(), compare=False)
    # The share of the recent pods judged at their first chance that showed a rise then: how
    # much of its estimate's excess a ramping pod whose samples show none is held at (None:
    # none judged yet, all of it).
    rising_share: float | None = field(default=None, compare=False)
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
    caution, weighed by the chance that it takes the node past the metric's line and by the
    weight ``score_risk`` gives a crossing.

    A learned estimate learns per workload too (``workload_label``, else the pod's controller):
    a pod counts at its own workload's figures, a pod of a workload without a measured pod at
    the ``prior`` (its score at the typical workload's figure) and a pod ramping up (for at most ``warmup_s`` after its bind) at the larger
    of its estimate and what it is climbing to (its measured usage and the rest of its climb:
    :meth:`ksched.loop.metrics.pod_series.PodSeries.climb`). A pod annotated ``ksched.io/expected-<resource>``
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
    # it is expected to use), weighed by the chance that it takes the node past the metric's
    # line there (the node's caution and the pod's, in quadrature, as the deviation of the
    # node's reading around its mean), times this weight (the engine's ``LoadInputs.risk``;
    # ``true``: 1, 0: off).
    score_risk: float = 0.0
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


def parse_resource(obj: Any, path: str) -> str:
    """An estimate's ``resource``: a Kubernetes resource name (cpu, memory, example.com/gpu)."""
    resource = as_str(obj, path)
    if not is_qualified_name(resource):
        raise ConfigError(
            f"{path}: {resource!r} is not a resource name (examples: cpu, memory, example.com/gpu)"
        )
    return resource


def parse_estimate(obj: Any, path: str, metric_resource: str | None) -> EstimateConfig:
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
    resource = parse_resource(e.get("resource", metric_resource), f"{path}.resource")
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
    score_risk = _risk_weight(e.get("scoreRisk", False), f"{path}.scoreRisk")
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


def _risk_weight(raw: Any, path: str) -> float:
    """``scoreRisk``: false (0), true (weight 1) or how many times the pod's caution a crossing
    of the line costs in the score."""
    if isinstance(raw, bool):
        return 1.0 if raw else 0.0
    weight = finite_number(raw)
    if weight is None or weight < 0:
        raise ConfigError(f"{path}: must be true, false or a weight (a number, at least 0), not {raw!r}")
    return weight


def _label_key(raw: Any, path: str) -> str:
    key = as_str(raw, path)
    if not is_qualified_name(key):
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
