"""Type stub of the Rust engine module (rust/python). The dict shapes live in ``ksched.core_types``."""

from typing import Any, final

import numpy as np
import numpy.typing as npt

from ksched.core_types import (
    ClassTable,
    MetricLoad,
    MetricSpec,
    NodeTable,
    Outcome,
    PluginInfo,
    PodBatch,
    Profile,
    ReasonInfo,
    ReasonLayout,
)

__all__ = [
    "CLUSTER_EVENTS",
    "DEFAULT_PROFILE",
    "EFFECTS",
    "METRIC_EXEMPT",
    "METRIC_POD_THRESHOLDS",
    "METRIC_STRICTER_THRESHOLDS",
    "NOT_ATTEMPTED",
    "PLUGINS",
    "POD_PROJECTION",
    "POD_SELECTOR_OPERATORS",
    "POSTFILTER_CODES",
    "PROTOCOLS",
    "REASONS",
    "REASON_LAYOUT",
    "SELECTOR_OPERATORS",
    "TOLERATION_OPERATORS",
    "UNSCHEDULABLE",
    "VOLUME_CODES",
    "EngineInputError",
    "ScheduleCache",
    "decode_instant_vector",
    "decode_pod_event",
    "decode_pod_frame",
    "decode_pod_list",
    "decode_pod_list_proto",
    "schedule",
]

# `Outcome["nodes"]` of a pod that fits no node, and of one the deadline left unattempted.
UNSCHEDULABLE: int
NOT_ATTEMPTED: int
# The fields a pod's projection keeps (``ksched.loop.mirror.slim``): metadata, spec, condition types, container.
POD_PROJECTION: dict[str, list[str]]
# The plugin registry, in filter order.
PLUGINS: list[PluginInfo]
# Every cluster event a plugin may register (``PluginInfo["events"]``), by name.
CLUSTER_EVENTS: list[str]
# The fixed filter-failure reasons, and where the per-resource and per-metric ones sit.
REASONS: list[ReasonInfo]
REASON_LAYOUT: ReasonLayout
# Enum values of the input tables, by their Kubernetes names ("" is a toleration's empty effect).
EFFECTS: dict[str, int]
TOLERATION_OPERATORS: dict[str, int]
SELECTOR_OPERATORS: dict[str, int]
POD_SELECTOR_OPERATORS: dict[str, int]
PROTOCOLS: dict[str, int]
# The engine's default profile (``Profile::default``, what its own tests run with): Python's
# defaults for an empty configuration must send exactly this.
DEFAULT_PROFILE: Profile
# The volume tables' sentinels: "unbound" and "missing_pv" (a claim's volume),
# "no_selected_node" and "unknown_node" (its selected node), "provision" (Outcome["volumes"]).
VOLUME_CODES: dict[str, int]
# DefaultPreemption's verdicts in Outcome["postfilter_verdicts"] ("nominated", "never",
# "terminating", "no_candidate") and the pseudo reason codes of its FitError
# in Outcome["postfilter_codes"] ("not_helpful", "no_victims").
POSTFILTER_CODES: dict[str, int]
# ``MetricLoad["exempt"]``'s codes (0: the metric filters the pod as usual): the metric does
# not filter the pod (its scores still apply), or only the pod's own thresholds apply, not
# the node's.
METRIC_EXEMPT: int
METRIC_POD_THRESHOLDS: int
METRIC_STRICTER_THRESHOLDS: int

class EngineInputError(ValueError): ...

@final
class ScheduleCache:
    """What one ``schedule`` call leaves for the next given the same cache (the engine's
    class and signature caches), reused only where the later call's inputs show them valid."""

    def __new__(cls) -> ScheduleCache: ...
    def clear(self) -> None: ...
    @property
    def signatures(self) -> int: ...

def schedule(
    nodes: NodeTable,
    classes: ClassTable,
    pods: PodBatch,
    metric_values: npt.NDArray[np.float64],
    metric_specs: list[MetricSpec],
    profile: Profile,
    *,
    metric_load: MetricLoad | None = None,
    seed: int = 0,
    deadline_s: float | None = None,
    explain: int | None = None,
    parallel: bool = True,
    cache: ScheduleCache | None = None,
    threshold_metrics: list[int] = ...,
) -> Outcome: ...
def decode_pod_event(line: bytes) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """One line of a pod watch: the event's type, the object's resourceVersion, the object's
    projection (what ``ksched.loop.mirror.slim.slim_pod`` keeps, in its key order) and its Status
    fields (code, reason, message where present). Holds the GIL; raises ValueError for a line
    that is not a JSON object or is nested deeper than 127 levels."""

def decode_pod_frame(frame: bytes) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """One frame of a protobuf pod watch (after its 4-byte length): what ``decode_pod_event``
    gives for the same event's JSON line, the projection in the same key order. Holds the GIL;
    raises ValueError for a frame that is not a Pod (or Status) watch event."""

def decode_pod_list(body: bytes) -> tuple[list[dict[str, Any]], Any, Any]:
    """One page of a JSON pod list: each item's projection (what ``decode_pod_event`` makes of
    it; items that are not objects are left out), the page's ``continue`` token and its
    resourceVersion (None where absent). Holds the GIL; raises ValueError for a body that is
    not JSON."""

def decode_pod_list_proto(body: bytes) -> tuple[list[dict[str, Any]], Any, Any]:
    """One page of a protobuf pod list (``k8s\\0`` and a ``runtime.Unknown`` holding a
    PodList), read as ``decode_pod_list`` reads a JSON page: the same projections, continue
    token and resourceVersion. Holds the GIL; raises ValueError for a body it cannot read."""

def decode_instant_vector(body: bytes, label: str) -> tuple[list[str], list[float], float | None, int]:
    """A Prometheus instant query's JSON answer: each series' ``label`` value ("" where it has
    none) and value, finite values only; the oldest sample time (None for an empty vector);
    how many series had a NaN or infinite value. Decoded with the GIL released; raises
    ValueError, saying why, for an answer that is not an instant vector of numbers."""
