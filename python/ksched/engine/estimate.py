"""What a placed pod is expected to use before any metric shows it (load estimate v2).

Owns one figure per pod and resource, in the engine's canonical unit (millicores for
CPU, bytes otherwise): the pod's limit where it sets one above its request (it may
use all of it), else its request times the metric's ``estimate.factor``, else (it
requests none: BestEffort) the configured default. The scheduling loop counts
recently bound pods by it and the engine counts each pod it places by it, so both
sides of a batch agree on what a placement adds to a node's metric.

A learned estimate (``estimate.learn``) calibrates the last two guesses by what the
measured pods used (:class:`ksched.config.metrics.Calibration`, kept by
:mod:`ksched.loop.metrics.recent_pods`): :func:`guess` gives the uncalibrated figure and its kind,
:func:`calibration_terms` how each kind of guess turns into a mean and a standard deviation
(for one pod here, for every recent pod at once there).
"""

from __future__ import annotations

from ksched.config import EstimateConfig
from ksched.config.metrics import BEST_EFFORT_DEFAULTS, Calibration
from ksched.engine.pods import PodRequests
from ksched.engine.quantity import Nano, canonical, canonical_nano, parse_nano, parse_quantity
from ksched.objects import Obj


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


# What a guess was made from (:func:`guess`): only the last two are calibrated.
FIXED = 0  # a limit above the request (an upper bound), or a legacy estimate
FROM_REQUEST = 1
BEST_EFFORT = 2


def guess(pod: Obj, requests: PodRequests, estimate: EstimateConfig) -> tuple[int, int]:
    """The pod's configured guess of its usage of ``estimate.resource`` (engine unit), and
    what it was made from (``FIXED``, ``FROM_REQUEST``, ``BEST_EFFORT``)."""
    request = requests.requests.get(estimate.resource, 0)
    if estimate.legacy:
        return round(request * estimate.factor), FIXED
    limit = pod_limit(pod, estimate.resource)
    if limit is not None and limit > request:
        return limit, FIXED
    if request > 0:
        return round(request * estimate.factor), FROM_REQUEST
    return best_effort_amount(estimate), BEST_EFFORT


def calibration_terms(calibration: Calibration | None) -> tuple[tuple[float, float, float, float], ...]:
    """Per kind of guess (indexed by ``FIXED``, ``FROM_REQUEST``, ``BEST_EFFORT``), how a pod
    guessed at ``amount`` counts: ``(scale, offset, sd_scale, sd_offset)``, its expected usage
    being ``amount * scale + offset`` and its standard deviation ``amount * sd_scale +
    sd_offset``. A kind nothing was learned of counts at its guess with no spread."""
    plain = (1.0, 0.0, 0.0, 0.0)
    if calibration is None:
        return (plain, plain, plain)
    from_request = plain if calibration.ratio is None else (calibration.ratio, 0.0, calibration.ratio_sd, 0.0)
    best_effort = (
        plain
        if calibration.best_effort is None
        else (0.0, calibration.best_effort, 0.0, calibration.best_effort_sd)
    )
    return (plain, from_request, best_effort)


def estimated_usage(pod: Obj, requests: PodRequests, estimate: EstimateConfig) -> int:
    """What a pod being placed counts as, of ``estimate.resource`` in the engine's unit: its
    guess, calibrated where the estimate learned, plus ``deviations`` of its spread."""
    amount, kind = guess(pod, requests, estimate)
    if estimate.calibration is None:
        return amount
    scale, offset, sd_scale, sd_offset = calibration_terms(estimate.calibration)[kind]
    return round(amount * scale + offset + estimate.deviations * (amount * sd_scale + sd_offset))
