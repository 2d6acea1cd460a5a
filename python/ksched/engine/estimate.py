"""What a placed pod is expected to use before any metric shows it (load estimate v2).

Owns one figure per pod and resource, in the engine's canonical unit (millicores for
CPU, bytes otherwise): the pod's limit where it sets one above its request (it may
use all of it), else its request times the metric's ``estimate.factor``, else (it
requests none: BestEffort) the configured default. The scheduling loop counts
recently bound pods by it and the engine counts each pod it places by it, so both
sides of a batch agree on what a placement adds to a node's metric.
"""

from __future__ import annotations

from ksched.config import EstimateConfig
from ksched.config.metrics import BEST_EFFORT_DEFAULTS
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


def estimated_usage(pod: Obj, requests: PodRequests, estimate: EstimateConfig) -> int:
    """The pod's expected usage of ``estimate.resource`` in the engine's unit."""
    request = requests.requests.get(estimate.resource, 0)
    if estimate.legacy:
        return round(request * estimate.factor)
    limit = pod_limit(pod, estimate.resource)
    if limit is not None and limit > request:
        return limit
    if request > 0:
        return round(request * estimate.factor)
    return best_effort_amount(estimate)
