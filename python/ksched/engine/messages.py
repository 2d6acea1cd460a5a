"""Reason strings and the FailedScheduling message, character for character as upstream.

The engine reports integer reason codes counted per node; this module owns
the strings (upstream's constants, in the plugin that defines each) and
``FitError.Error()``'s layout: ``0/N nodes are available: <count> <reason>, ...``
with the entries sorted as strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# Codes of ksched-core's reasons.rs.
NODE_UNSCHEDULABLE = 1
NODE_NAME = 2
TAINT_TOLERATION = 3
NODE_AFFINITY = 4
NODE_AFFINITY_PREFILTER = 5
NODE_PORTS = 6
TOO_MANY_PODS = 7
SPREAD = 8
SPREAD_MISSING_LABEL = 9
POD_AFFINITY = 10
POD_ANTI_AFFINITY = 11
EXISTING_ANTI_AFFINITY = 12
FIRST_INSUFFICIENT = 13
PER_METRIC = 3

FIXED_REASONS = {
    NODE_UNSCHEDULABLE: "node(s) were unschedulable",
    NODE_NAME: "node(s) didn't match the requested node name",
    TAINT_TOLERATION: "node(s) had untolerated taint(s)",
    NODE_AFFINITY: "node(s) didn't match Pod's node affinity/selector",
    NODE_AFFINITY_PREFILTER: "node(s) didn't satisfy plugin(s) [NodeAffinity]",
    NODE_PORTS: "node(s) didn't have free ports for the requested pod ports",
    TOO_MANY_PODS: "Too many pods",
    SPREAD: "node(s) didn't match pod topology spread constraints",
    SPREAD_MISSING_LABEL: "node(s) didn't match pod topology spread constraints (missing required label)",
    POD_AFFINITY: "node(s) didn't match pod affinity rules",
    POD_ANTI_AFFINITY: "node(s) didn't match pod anti-affinity rules",
    EXISTING_ANTI_AFFINITY: "node(s) didn't satisfy existing pods anti-affinity rules",
}
PLUGIN_OF_REASON = {
    NODE_UNSCHEDULABLE: "NodeUnschedulable",
    NODE_NAME: "NodeName",
    TAINT_TOLERATION: "TaintToleration",
    NODE_AFFINITY: "NodeAffinity",
    NODE_AFFINITY_PREFILTER: "NodeAffinity",
    NODE_PORTS: "NodePorts",
    TOO_MANY_PODS: "NodeResourcesFit",
    SPREAD: "PodTopologySpread",
    SPREAD_MISSING_LABEL: "PodTopologySpread",
    POD_AFFINITY: "InterPodAffinity",
    POD_ANTI_AFFINITY: "InterPodAffinity",
    EXISTING_ANTI_AFFINITY: "InterPodAffinity",
}
# NodeAffinity PreFilter: matchFields terms whose node names cannot all hold.
AFFINITY_CONFLICT = "pod affinity terms conflict"


def _number(x: float) -> str:
    return f"{x:g}"


class ReasonNames:
    """Maps reason codes to strings for one resource index and metric list."""

    def __init__(self, resources: Sequence[str], metrics: Sequence[tuple[str, float | None, float | None]]):
        self.resources = list(resources)
        self.metrics = list(metrics)

    def reason(self, code: int) -> str:
        if code in FIXED_REASONS:
            return FIXED_REASONS[code]
        r = code - FIRST_INSUFFICIENT
        if 0 <= r < len(self.resources):
            return f"Insufficient {self.resources[r]}"
        m, kind = divmod(r - len(self.resources), PER_METRIC)
        metric, above, below = self.metrics[m]
        if kind == 0:
            return f"node(s) had {metric} above {_number(above or 0.0)}"
        if kind == 1:
            return f"node(s) had {metric} below {_number(below or 0.0)}"
        return f"node(s) had no value for {metric}"

    def plugin(self, code: int) -> str:
        if code in PLUGIN_OF_REASON:
            return PLUGIN_OF_REASON[code]
        r = code - FIRST_INSUFFICIENT
        if 0 <= r < len(self.resources):
            return "NodeResourcesFit"
        m = (r - len(self.resources)) // PER_METRIC
        return f"Metric/{self.metrics[m][0]}"


def fit_error(total_nodes: int, reason_counts: Iterable[tuple[str, int]]) -> str:
    """Upstream ``FitError.Error()`` without a PostFilter (preemption) suffix."""
    counts: dict[str, int] = {}
    for reason, n in reason_counts:
        counts[reason] = counts.get(reason, 0) + n
    entries = sorted(f"{n} {reason}" for reason, n in counts.items())
    msg = f"0/{total_nodes} nodes are available:"
    if entries:
        msg += f" {', '.join(entries)}."
    return msg


def prefilter_error(total_nodes: int, message: str) -> str:
    """Upstream ``FitError.Error()`` when a PreFilter plugin rejected the pod."""
    return f"0/{total_nodes} nodes are available: {message}."
