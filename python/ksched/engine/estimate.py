"""What a placed pod is expected to use before any metric shows it (load estimate v2).

Owns one figure per pod and resource, in the engine's canonical unit (millicores for
CPU, bytes otherwise): the pod's limit where it sets one above its request (it may
use all of it), else its request times the metric's ``estimate.factor``, else (it
requests none: BestEffort) the configured default. The scheduling loop counts
recently bound pods by it and the engine counts each pod it places by it, so both
sides of a batch agree on what a placement adds to a node's metric.

A learned estimate (``estimate.learn``) calibrates the last two guesses by what the
measured pods used (:class:`ksched.config.estimate.Calibration`, kept by
:mod:`ksched.loop.metrics.recent_pods`): :func:`guess` gives the uncalibrated figure and its kind,
:func:`calibration_terms` how each kind of guess turns into a mean and a standard deviation
(for one pod here, for every recent pod at once there).

Load estimate v3 learns per workload (:func:`workload_of`: the pod's Deployment, StatefulSet,
CronJob, other controller, or an operator's label): :func:`terms` picks, for one kind of guess
and one workload, the workload's own figures (weighed against the collective figure), else
the prior for a workload without a measured pod, else the cluster-wide figures;
:func:`expected` applies them, to one pod or to many.
A pod annotated ``ksched.io/expected-<resource>`` (:func:`declared_usage`) is expected to use
that and nothing is learned for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from ksched.config import EstimateConfig, MetricConfig
from ksched.config.estimate import BEST_EFFORT_DEFAULTS, Calibration, Learned
from ksched.engine.pods import CountedRequests, PodRequests, pod_requests
from ksched.engine.quantity import (
    QUANTITY_MAX,
    Nano,
    canonical,
    canonical_nano,
    parse_nano,
    parse_quantity,
)
from ksched.errors import QuantityError
from ksched.objects import Obj, controller_of, meta

# A pod's declared expected usage of a resource (``ksched.io/expected-cpu: "750m"``), in the
# resource's unit; an operator may fill it from VPA's recommendations. A resource with a
# domain prefix (``example.com/gpu``) names it with ``_`` for ``/`` (an annotation key has
# one ``/``): ``ksched.io/expected-example.com_gpu``.
EXPECTED_PREFIX = "ksched.io/expected-"
# The label a ReplicaSet's pods carry, whose value ends the ReplicaSet's name after its
# Deployment's (``web-7d4b9c`` of Deployment ``web``).
TEMPLATE_HASH_LABEL = "pod-template-hash"
# The cronjob controller names each Job ``<cronjob>-<scheduled time in minutes>``.
_JOB_SUFFIX = re.compile(r"-\d+$")


def pod_limit(pod: Obj, resource: str) -> int | None:
    """The pod's limit of ``resource`` (pod-level limits first, else the sum over its
    containers and restartable init containers); None where any of them is unlimited."""
    spec = pod.get("spec") or {}
    pod_level = ((spec.get("resources") or {}).get("limits") or {}).get(resource)
    if pod_level is not None:
        return canonical_nano(resource, parse_nano(pod_level))
    containers = list(spec.get("containers") or []) + [
        c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"
    ]
    if not containers:
        return None
    total: Nano = 0
    for c in containers:
        q = ((c.get("resources") or {}).get("limits") or {}).get(resource)
        if q is None:
            return None
        total += parse_nano(q)
    return canonical_nano(resource, total)


def best_effort_amount(estimate: EstimateConfig) -> int:
    """What a pod that requests none of the resource counts as."""
    q = estimate.best_effort or BEST_EFFORT_DEFAULTS.get(estimate.resource)
    return 0 if q is None else canonical(estimate.resource, parse_quantity(q))


# What a guess was made from (:func:`guess`): only FROM_REQUEST, LIMITED and BEST_EFFORT are
# calibrated.
FIXED = 0  # a limit above the request (an upper bound) where nothing is learned, or a legacy estimate
FROM_REQUEST = 1
BEST_EFFORT = 2
DECLARED = 3  # the pod's ``ksched.io/expected-<resource>``
# From its request, where the pod's limit is above it and the estimate learns: it counts at
# its workload's figures once they are learned (at most its limit), at its limit until then.
LIMITED = 4
# The kinds whose guess is the request (they teach and read the ratio).
RATIO_KINDS = (FROM_REQUEST, LIMITED)

# Where an estimate's figures came from (:class:`Terms`, ``/status``, ``explain``).
CONFIGURED = "configured"  # the guess as configured: nothing learned for it
LIMIT = "limit"  # the pod's limit, above its request (an upper bound), or a legacy estimate
DECLARED_SOURCE = "declared"
WORKLOAD = "workload"
CLUSTER = "cluster-wide"
PRIOR = "prior"
# Counted by the loop only: a recent pod's measured usage, and one still ramping up to it.
MEASURED = "measured"
RAMPING = "ramping"


def expected_annotation(resource: str) -> str:
    return EXPECTED_PREFIX + resource.replace("/", "_")


def declared_usage(pod: Obj, resource: str) -> tuple[int | None, str | None]:
    """The pod's declared expected usage of ``resource`` (engine unit), or why its annotation
    cannot be read (a value that is not a non-negative quantity): ``(None, None)`` without one."""
    key = expected_annotation(resource)
    raw = (meta(pod).get("annotations") or {}).get(key)
    if raw is None:
        return None, None
    try:
        q = parse_quantity(raw)
    except QuantityError as err:
        return None, f"annotation {key}: {err}"
    if q < 0:
        return None, f"annotation {key}: {raw!r} is negative"
    return canonical(resource, q), None


def workload_of(pod: Obj, label: str | None = None) -> str | None:
    """The workload a pod's usage is learned under: ``namespace/<label>=<value>`` where the pod
    carries ``label``, else its controller, ``namespace/<Kind>/<name>``, with a ReplicaSet made
    by a Deployment taken as that Deployment (its pods keep what was learned through a rolling
    update) and a Job with a numeric suffix as its CronJob; None for a pod without a controller
    (it counts at the cluster-wide figures)."""
    m = meta(pod)
    namespace = m.get("namespace") or "default"
    labels = m.get("labels") or {}
    if label is not None and label in labels:
        return f"{namespace}/{label}={labels[label]}"
    owner = controller_of(pod)
    if owner is None:
        return None
    kind, name = str(owner.get("kind") or ""), str(owner.get("name") or "")
    template_hash = labels.get(TEMPLATE_HASH_LABEL)
    if kind == "ReplicaSet" and template_hash and name.endswith(f"-{template_hash}"):
        kind, name = "Deployment", name[: -len(template_hash) - 1]
    elif kind == "Job" and _JOB_SUFFIX.search(name):
        kind, name = "CronJob", _JOB_SUFFIX.sub("", name)
    return f"{namespace}/{kind}/{name}"


# The label a StatefulSet's or DaemonSet's controller puts on each pod of one revision.
CONTROLLER_REVISION_LABEL = "controller-revision-hash"


def revision_of(pod: Obj) -> str | None:
    """Which revision of its workload's template the pod was made from (a Deployment's
    ReplicaSet, a StatefulSet's or DaemonSet's controller revision); None where nothing says."""
    labels = meta(pod).get("labels") or {}
    found = labels.get(TEMPLATE_HASH_LABEL) or labels.get(CONTROLLER_REVISION_LABEL)
    return str(found) if found else None


def guess(pod: Obj, requests: CountedRequests, estimate: EstimateConfig) -> tuple[int, int]:
    """The pod's configured guess of its usage of ``estimate.resource`` (engine unit), and
    what it was made from (``FIXED``, ``FROM_REQUEST``, ``LIMITED``, ``BEST_EFFORT``, ``DECLARED``)."""
    request = requests.requests.get(estimate.resource, 0)
    if estimate.legacy:
        return round(request * estimate.factor), FIXED
    declared, _ = declared_usage(pod, estimate.resource)
    if declared is not None:
        return declared, DECLARED
    limit = pod_limit(pod, estimate.resource)
    if limit is not None and limit > request:
        if estimate.learns and request > 0:
            return round(request * estimate.factor), LIMITED
        return limit, FIXED
    if request > 0:
        return round(request * estimate.factor), FROM_REQUEST
    return best_effort_amount(estimate), BEST_EFFORT


class Terms(NamedTuple):
    """How a pod guessed at ``amount`` counts: expected usage ``amount * scale + offset``
    (its limit instead where ``at_limit`` and it sets one), standard deviation ``amount *
    sd_scale + sd_offset``; ``source``: where the figures came from, ``pods``: how many
    measured pods taught them."""

    scale: float
    offset: float
    sd_scale: float
    sd_offset: float
    source: str
    pods: int = 0
    at_limit: bool = False
    # A prior's typical workload's figure (a ratio, or a BestEffort pod's mean): what the pod
    # is expected to use, which the metric's score counts (``Calibration.prior_*_typical``).
    typical: float | None = None


def terms(
    calibration: Calibration | None, kind: int, workload: str | None, prior: str = "", spread: float = 0.0
) -> Terms:
    """The figures a pod of ``kind`` and ``workload`` counts by: its workload's own where it
    taught one (from one measured pod, weighed against the collective figure:
    :func:`ksched.loop.metrics.across.credible`), else, for a pod of a workload, the prior
    where other workloads taught one or it is a fixed ratio (``prior`` is the estimate's
    ``prior`` mode: ``limit`` counts the pod at its limit where it sets one), else the
    cluster-wide figures, else its guess as configured, with ``spread`` (the estimate's
    ``initial_spread``) as its standard deviation over the guess where the estimate learns:
    a guess nothing measured has calibrated is no surer than the guesses measured pods
    contradict."""
    source = {FIXED: LIMIT, DECLARED: DECLARED_SOURCE}.get(kind, CONFIGURED)
    if kind == LIMITED:
        # Its workload's figures where it taught any, else its limit: what a pod allowed past
        # its request will use is not what other workloads use of theirs.
        own = (
            calibration.workloads.get(workload) if calibration is not None and workload is not None else None
        )
        learned = None if own is None else _figures(own, FROM_REQUEST, WORKLOAD)
        return learned or Terms(1.0, 0.0, 0.0, 0.0, LIMIT, at_limit=True)
    if calibration is None or kind not in (FROM_REQUEST, BEST_EFFORT):
        return Terms(1.0, 0.0, 0.0, 0.0, source)
    plain = Terms(1.0, 0.0, spread, 0.0, source)
    own = calibration.workloads.get(workload) if workload is not None else None
    learned = None if own is None else _figures(own, kind, WORKLOAD)
    if learned is not None:
        return learned
    cluster = _figures(calibration, kind, CLUSTER)
    if workload is None:
        return cluster or plain
    base = _prior_terms(calibration, kind) or cluster
    if prior == "limit" and base is not None:
        return base._replace(source=PRIOR, at_limit=True)
    return base or plain


def _figures(learned: Learned, kind: int, source: str) -> Terms | None:
    if kind == FROM_REQUEST and learned.ratio is not None:
        return Terms(learned.ratio, 0.0, learned.ratio_sd, 0.0, source, learned.ratio_pods)
    if kind == BEST_EFFORT and learned.best_effort is not None:
        return Terms(0.0, learned.best_effort, 0.0, learned.best_effort_sd, source, learned.best_effort_pods)
    return None


def _prior_terms(c: Calibration, kind: int) -> Terms | None:
    if kind == FROM_REQUEST and c.prior_ratio is not None:
        return Terms(c.prior_ratio, 0.0, c.prior_ratio_sd, 0.0, PRIOR, typical=c.prior_ratio_typical)
    if kind == BEST_EFFORT and c.prior_best_effort is not None:
        typical = c.prior_best_effort_typical
        return Terms(0.0, c.prior_best_effort, 0.0, c.prior_best_effort_sd, PRIOR, typical=typical)
    return None


Amount = TypeVar("Amount", float, npt.NDArray[np.float64])


def expected(
    amount: Amount,
    limit: Amount,
    scale: Amount,
    offset: Amount,
    sd_scale: Amount,
    sd_offset: Amount,
    at_limit: Amount,
    deviations: float = 0.0,
) -> tuple[Amount, Amount]:
    """A pod's expected usage and its standard deviation from its guess ``amount`` and its
    :class:`Terms` (one pod, or numpy columns of many): its limit where ``at_limit`` and it
    sets one (``limit`` > 0; an upper bound, without spread). A pod never counts past a limit
    it sets, which it cannot use past: the mean is at most the limit, and the spread at most
    what keeps ``deviations`` of it within the limit."""
    use_limit = (at_limit > 0) & (limit > 0)
    capped = limit > 0
    mean = np.where(use_limit, limit, amount * scale + offset)
    mean = np.where(capped, np.minimum(mean, limit), mean)
    sd = np.where(use_limit, 0.0, amount * sd_scale + sd_offset)
    if deviations > 0:
        sd = np.where(capped, np.minimum(sd, (limit - mean) / deviations), sd)
    return mean, sd  # type: ignore[return-value]


def typical_usage(
    amount: Amount, limit: Amount, typical: Amount, at_limit: Amount, from_request: Amount
) -> Amount:
    """What a pod counted at a prior is expected to use (one pod, or numpy columns of many): the
    typical workload's figure ``typical``, times its guess ``amount`` where the guess is from
    its request (``from_request``); NaN where it has no typical figure (``typical`` NaN: not
    counted at a prior) or counts at its limit (``at_limit`` and ``limit`` > 0)."""
    none = np.isnan(typical) | ((at_limit > 0) & (limit > 0))
    return np.where(none, np.nan, np.where(from_request > 0, amount * typical, typical))  # type: ignore[return-value]


@dataclass(frozen=True)
class Choice:
    """What a pod being placed counts as, and why (``explain``)."""

    amount: int
    source: str
    workload: str | None
    # The figure it was counted by (usage over guess, or a BestEffort pod's mean usage) and
    # how many measured pods taught it; None for a guess counted as it is.
    figure: float | None
    pods: int
    # Why a declared expected usage was ignored (an annotation that is not a quantity).
    problem: str | None = None
    # What the metric scores count it at (None: ``amount``, which the filter holds it to):
    # ``amount`` without the ``deviations`` where ``scoreByMean``, and for a pod of a workload
    # without history the typical workload's figure in place of the prior's quantile.
    mean: int | None = None
    # The part of ``amount`` that is the estimate's ``deviations`` of the pod's spread (its
    # learned spread, else the initial one).
    caution: int = 0
    # Whether the metric's score also counts the gap from ``expected`` up to ``amount`` by the
    # chance that it takes the node past the line (``scoreRisk``); only where they differ.
    risk: bool = False

    @property
    def expected(self) -> int:
        return self.amount if self.mean is None else self.mean


def estimate_choice(pod: Obj, requests: PodRequests, estimate: EstimateConfig) -> Choice:
    """What a pod being placed counts as, of ``estimate.resource`` in the engine's unit: its
    guess, calibrated where the estimate learned (its workload's figures, else the prior, else
    the cluster-wide ones), plus ``deviations`` of its spread; and what the metric scores count
    it at (``expected``): without the deviations where ``score_by_mean``, and a pod of a
    workload without history at the typical workload's figure."""
    amount, kind = guess(pod, requests, estimate)
    problem = None if estimate.legacy else declared_usage(pod, estimate.resource)[1]
    if estimate.calibration is None:
        if kind == LIMITED:  # nothing learned (yet): its limit, as a pod placed without learning
            return Choice(pod_limit(pod, estimate.resource) or amount, LIMIT, None, None, 0, problem)
        return Choice(amount, terms(None, kind, None).source, None, None, 0, problem)
    workload = workload_of(pod, estimate.workload_label)
    t = terms(estimate.calibration, kind, workload, estimate.prior[0], estimate.initial_spread)
    limit = pod_limit(pod, estimate.resource) or 0
    mean, sd = expected(
        float(amount),
        float(limit),
        t.scale,
        t.offset,
        t.sd_scale,
        t.sd_offset,
        float(t.at_limit),
        estimate.deviations,
    )
    figure = (
        None
        if t.source in (CONFIGURED, LIMIT, DECLARED_SOURCE)
        else t.scale
        if kind in RATIO_KINDS
        else t.offset
    )
    value = min(float(mean + estimate.deviations * sd), float(QUANTITY_MAX))
    # A pod of a workload without history is scored at the typical workload's figure: the
    # prior's quantile is what it may use, which the filter holds it to, not what it is
    # expected to. The score counts it at its mean where the deviations are for the filter
    # only (``scoreByMean``), else with them, as every other pod.
    typical = typical_usage(
        float(amount),
        float(limit),
        np.nan if t.typical is None else t.typical,
        float(t.at_limit),
        float(kind in RATIO_KINDS),
    )
    centre = mean if np.isnan(typical) else min(typical, limit) if limit > 0 else typical
    scored = centre if estimate.scores_pod_by_mean else centre + estimate.deviations * sd
    amount = round(value)
    expect = round(min(float(scored), float(QUANTITY_MAX)))
    caution = max(amount - round(min(float(mean), float(QUANTITY_MAX))), 0)
    scored_at = None if expect == amount else expect
    return Choice(
        amount,
        t.source,
        workload,
        figure,
        t.pods,
        problem,
        scored_at,
        caution,
        estimate.score_risk > 0 and scored_at is not None,
    )


def pod_estimates(pod: Obj, metrics: Sequence[MetricConfig]) -> list[tuple[str, str, Choice]]:
    """What ``pod`` counts as on a node for each metric with an estimate, and why: (metric,
    resource, choice). Raises MalformedObjectError for requests that cannot be read."""
    requests = pod_requests(pod)
    return [
        (m.name, m.estimate.resource, estimate_choice(pod, requests, m.estimate))
        for m in metrics
        if m.estimate is not None
    ]


def estimated_usage(pod: Obj, requests: PodRequests, estimate: EstimateConfig) -> int:
    """What a pod being placed counts as (:func:`estimate_choice`)."""
    return estimate_choice(pod, requests, estimate).amount
