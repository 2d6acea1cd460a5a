"""Reason strings and the FailedScheduling message, character for character as upstream.

The engine reports integer reason codes counted per node. Upstream's fixed
strings live in the engine beside the plugin that defines each and come from
``_core.REASONS``; this module adds the parameterized ones (``Insufficient
<resource>``, metric thresholds) and ``FitError.Error()``'s layout: ``0/N nodes are available: <count> <reason>, ...``
with the entries sorted as strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ksched import _core

# The engine's fixed reasons (code -> upstream's string, and the plugin that reports it)
# and where the per-resource and per-metric codes start.
FIXED_REASONS = {r["code"]: r["message"] for r in _core.REASONS}
PLUGIN_OF_REASON = {r["code"]: r["plugin"] for r in _core.REASONS}
_LAYOUT = _core.REASON_LAYOUT
FIRST_INSUFFICIENT = _LAYOUT["first_insufficient"]
PER_METRIC = _LAYOUT["per_metric"]
# NodeAffinity PreFilter: matchFields terms whose node names cannot all hold.
AFFINITY_CONFLICT = "pod affinity terms conflict"
# A pod with spec.resourceClaims: DRA claims are allocated by default-scheduler only.
RESOURCE_CLAIMS_UNSUPPORTED = (
    "pod has spec.resourceClaims: ksched does not allocate ResourceClaims "
    "(dynamic resource allocation); schedule it with default-scheduler"
)

# PostFilter: the default profile runs DynamicResources, then DefaultPreemption
# (v1.36 default_plugins.go). Upstream RunPostFilterPlugins joins the reasons of
# the Unschedulable statuses with ", "; a Success (a node nominated) has no message.
# DynamicResources' status for a pod without claims (ksched places no other):
NO_CLAIMS_TO_DEALLOCATE = "no new claims to deallocate"
# ...and after a PreFilter rejection that stopped before its own PreFilter ran:
# its cycle state is missing, an Error whose message ends the list.
DRA_STATE_NOT_FOUND = "not found"
# DefaultPreemption (PodEligibleToPreemptOthers, Evaluator.Preempt).
NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING = "not eligible due to a terminating pod on the nominated node."
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
POSTFILTER = _core.POSTFILTER_CODES


def _number(x: float) -> str:
    return f"{x:g}"


class ReasonNames:
    """Maps reason codes to strings for one resource index and metric list."""

    def __init__(self, resources: Sequence[str], metrics: Sequence[tuple[str, float | None, float | None]]):
        self.resources = list(resources)
        self.metrics = list(metrics)

    def reason(self, code: int) -> str:
        if code == POSTFILTER["not_helpful"]:
            return NOT_HELPFUL
        if code == POSTFILTER["no_victims"]:
            return NO_VICTIMS
        if code in FIXED_REASONS:
            return FIXED_REASONS[code]
        r = code - FIRST_INSUFFICIENT
        if 0 <= r < len(self.resources):
            return f"Insufficient {self.resources[r]}"
        m, kind = divmod(r - len(self.resources), PER_METRIC)
        metric, above, below = self.metrics[m]
        if kind == _LAYOUT["metric_above"]:
            return f"node(s) had {metric} above {_number(above or 0.0)}"
        if kind == _LAYOUT["metric_below"]:
            return f"node(s) had {metric} below {_number(below or 0.0)}"
        return f"node(s) had no value for {metric}"

    @property
    def first_metric_code(self) -> int:
        """The lowest of the metrics' reason codes, which follow every other filter reason."""
        return FIRST_INSUFFICIENT + len(self.resources)

    def threshold(self, code: int) -> tuple[int, str] | None:
        """The metric (its index) and side (``above``, ``below``) of a threshold reason;
        None for any other reason."""
        r = code - self.first_metric_code
        if r < 0 or code in FIXED_REASONS:
            return None
        m, kind = divmod(r, PER_METRIC)
        if m >= len(self.metrics):
            return None
        if kind == _LAYOUT["metric_above"]:
            return m, "above"
        if kind == _LAYOUT["metric_below"]:
            return m, "below"
        return None

    def threshold_code(self, metric: int, side: str) -> int:
        """The reason code of metric ``metric``'s threshold on ``side`` (``above``, ``below``):
        :meth:`threshold`'s inverse."""
        kind = _LAYOUT["metric_above"] if side == "above" else _LAYOUT["metric_below"]
        return self.first_metric_code + metric * PER_METRIC + kind

    def plugin(self, code: int) -> str:
        if code in PLUGIN_OF_REASON:
            return PLUGIN_OF_REASON[code]
        r = code - FIRST_INSUFFICIENT
        if 0 <= r < len(self.resources):
            return "NodeResourcesFit"
        m = (r - len(self.resources)) // PER_METRIC
        return f"Metric/{self.metrics[m][0]}"


def fit_error(total_nodes: int, reason_counts: Iterable[tuple[str, int]]) -> str:
    """Upstream ``FitError.Error()`` without a PostFilter suffix (``with_post_filter`` adds it)."""
    counts: dict[str, int] = {}
    for reason, n in reason_counts:
        counts[reason] = counts.get(reason, 0) + n
    entries = sorted(f"{n} {reason}" for reason, n in counts.items())
    msg = f"0/{total_nodes} nodes are available:"
    if entries:
        msg += f" {', '.join(entries)}."
    return msg


def prefilter_error(total_nodes: int, message: str) -> str:
    """Upstream ``FitError.Error()`` when a PreFilter plugin before DynamicResources
    rejected the pod as UnschedulableAndUnresolvable (every PreFilter ksched runs:
    NodeAffinity, VolumeRestrictions, VolumeBinding): DynamicResources' PostFilter
    finds no state of its own and fails, so DefaultPreemption never runs."""
    return f"0/{total_nodes} nodes are available: {message}. {DRA_STATE_NOT_FOUND}"


def post_filter(preemption: str | None) -> str:
    """Upstream ``RunPostFilterPlugins``' message for a pod without claims that fits
    nowhere: DynamicResources' reason, then DefaultPreemption's (``preemption``:
    None where it is disabled, "" where it nominated a node: a Success, which
    ends the run with no message)."""
    if preemption == "":
        return ""
    if preemption is None:
        return NO_CLAIMS_TO_DEALLOCATE
    return f"{NO_CLAIMS_TO_DEALLOCATE}, preemption: {preemption}"


def with_post_filter(fit: str, post: str) -> str:
    """``FitError.Error()`` with its PostFilter message."""
    return f"{fit} {post}" if post else fit
