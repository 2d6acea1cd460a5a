"""The shapes that cross the Python/Rust boundary (``ksched._core``), typed.

``_core.pyi`` imports these, as pydantic-core's stub imports ``core_schema``:
every input of ``_core.schedule`` and its result is a TypedDict whose keys are
exactly the names the binding reads (the arrays in ``rust/python/src/views.rs``,
the profile and metric specs in ``convert.rs``), each array with its dtype.
Integer codes (plugins, reasons, enum values) are not copied here: ``_core``
exports its own tables (``PLUGINS``, ``REASONS``, ``EFFECTS``, ...) and Python
reads them.

This module imports nothing from ksched: it is the leaf both sides agree on.
"""

from __future__ import annotations

from typing import Literal, TypeAlias, TypedDict

import numpy as np
import numpy.typing as npt

I64: TypeAlias = npt.NDArray[np.int64]
I32: TypeAlias = npt.NDArray[np.int32]
U64: TypeAlias = npt.NDArray[np.uint64]
U8: TypeAlias = npt.NDArray[np.uint8]
F64: TypeAlias = npt.NDArray[np.float64]


class PluginInfo(TypedDict):
    """One row of the engine's plugin registry, in registry (filter) order."""

    name: str
    filter: bool
    score: bool
    default_weight: int
    # Runs in the default-equivalent profile (every upstream plugin; ksched's own are enabled by a profile).
    default_enabled: bool
    # The cluster events that can make a pod it rejected schedulable (upstream's EventsToRegister).
    events: list[str]


class ReasonInfo(TypedDict):
    """A fixed filter-failure reason: its code, the plugin that reports it, upstream's string."""

    code: int
    plugin: str
    message: str


class ReasonLayout(TypedDict):
    """Where the parameterized reasons sit in the dense code space.

    ``Insufficient <resource>`` is ``first_insufficient + column``; metric
    thresholds follow the resource codes, ``per_metric`` per metric, offset by
    ``metric_above``, ``metric_below`` or ``metric_missing``."""

    first_insufficient: int
    per_metric: int
    metric_above: int
    metric_below: int
    metric_missing: int


class NodeTable(TypedDict):
    """The node table: ``count`` rows, ``resources`` columns per resource matrix."""

    count: int
    resources: int
    # Interned ids of the wildcard host IP, the unschedulable taint key and "".
    strings: tuple[int, int, int]
    allocatable: I64
    requested: I64
    nonzero_requested: I64
    allowed_pods: I64
    pod_count: I64
    unschedulable: U8
    names: I32
    keys: U64
    label_offsets: I64
    label_keys: I32
    label_values: I32
    label_int_values: I64
    label_int_valid: U8
    taint_offsets: I64
    taint_keys: I32
    taint_values: I32
    taint_effects: U8
    port_offsets: I64
    port_protocols: U8
    port_ips: I32
    port_ports: I32
    # ImageLocality: node -> image ids (sorted per node); per image id its size and node count.
    image_offsets: I64
    image_ids: I32
    image_sizes: I64
    image_node_counts: I64


class ClassTable(TypedDict):
    """Constraint classes (tolerations, node selector and affinity, node name) and their selector terms."""

    count: int
    class_node_names: I32
    tol_offsets: I64
    tol_keys: I32
    tol_operators: U8
    tol_values: I32
    tol_effects: U8
    node_selector_term: I64
    has_required: U8
    required_offsets: I64
    required_terms: I64
    preferred_offsets: I64
    preferred_terms: I64
    has_prefilter: U8
    prefilter_offsets: I64
    prefilter_nodes: I64
    # The profile's NodeAffinity addedAffinity required terms (ORed), for every class.
    enforced_terms: I64
    term_offsets: I64
    term_weights: I64
    req_keys: I32
    req_is_field: U8
    req_operators: U8
    req_value_offsets: I64
    req_values: I32
    req_int_values: I64


class PodTableArrays(TypedDict):
    """Bound pods, then the batch's pending pods: labels, namespaces, affinity terms, spread constraints."""

    bound: int
    hostname_key: int
    pt_nodes: I64
    pt_namespaces: I32
    pt_label_sets: I64
    pt_term_sets: I64
    pt_terminating: U8
    ls_offsets: I64
    ls_keys: I32
    ls_values: I32
    sel_offsets: I64
    sel_nothing: U8
    sel_keys: I32
    sel_operators: U8
    sel_value_offsets: I64
    sel_values: I32
    term_selectors: I64
    term_topology_keys: I32
    term_weights_pod: I64
    term_all_namespaces: U8
    term_namespace_offsets: I64
    term_namespaces: I32
    ts_offsets: I64
    ts_terms: I64
    sp_offsets: I64
    sp_max_skew: I64
    sp_min_domains: I64
    sp_topology_keys: I32
    sp_hard: U8
    sp_selectors: I64
    sp_honor_affinity: U8
    sp_honor_taints: U8
    sp_system_default: U8


class VictimArrays(TypedDict):
    """The bound pods preemption may evict, with their PodDisruptionBudgets."""

    victims: int
    v_rows: I64
    v_nodes: I64
    v_priorities: I64
    v_requests: I64
    v_start_times: I64
    v_terminating: U8
    v_port_offsets: I64
    v_port_protocols: U8
    v_port_ips: I32
    v_port_ports: I32
    v_pdb_offsets: I64
    v_pdbs: I64
    pdb_allowed: I64


class PreemptionArrays(VictimArrays):
    """Priorities, preemption policy and nominations of the batch, and the held reservations."""

    pod_priorities: I64
    pod_preempt: U8
    pod_nominated: I64
    r_nodes: I64
    r_rows: I64
    r_priorities: I64
    r_requests: I64
    r_port_offsets: I64
    r_port_protocols: U8
    r_port_ips: I32
    r_port_ports: I32


class VolumeArrays(TypedDict):
    """The batch's PersistentVolumeClaims and the PersistentVolumes they may bind (VolumeBinding, VolumeZone).

    Node affinity and ``allowedTopologies`` terms index the class table's selector terms."""

    pvs: int
    pv_has_affinity: U8
    pv_term_offsets: I64
    pv_terms: I64
    claim_offsets: I64
    claim_pvs: I64
    claim_selected_nodes: I64
    candidate_offsets: I64
    candidates: I64
    provisionable: U8
    topology_offsets: I64
    topology_terms: I64
    zone_label_keys: I32
    zone_offsets: I64
    zone_keys: I32
    zone_alt_keys: I32
    zone_value_offsets: I64
    zone_values: I32
    rwop_offsets: I64
    rwop_claims: I64
    rwop_user_offsets: I64
    rwop_users: I64
    # NodeVolumeLimits (empty per-node tables: no node has a limit).
    limit_offsets: I64
    limit_drivers: I32
    limit_counts: I64
    attached_offsets: I64
    attached_volumes: I32
    attached_drivers: I32
    attach_offsets: I64
    attach_volumes: I32
    attach_drivers: I32


class PodBatch(TypedDict):
    """The batch's pending pods, in queue order."""

    count: int
    requests: I64
    nonzero_requests: I64
    pod_classes: I64
    pod_keys: U64
    hp_offsets: I64
    hp_protocols: U8
    hp_ips: I32
    hp_ports: I32
    # ImageLocality: pod -> ids of its images some node has; init containers plus containers.
    img_offsets: I64
    img_ids: I32
    img_containers: I64
    table: PodTableArrays | None
    preemption: PreemptionArrays | None
    # Needs ``table`` where present.
    volumes: VolumeArrays | None


Prefer = Literal["lower", "higher", "target"]
Missing = Literal["neutral", "worst", "exclude"]
Strategy = Literal["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"]


class MetricSpec(TypedDict):
    """How one metric filters and scores (see ``MetricConfig``)."""

    prefer: Prefer
    # The target of ``prefer: target``; None otherwise.
    target: float | None
    # Fixed normalization range; None for min-max over the feasible nodes.
    range: tuple[float, float] | None
    above: float | None
    below: float | None
    missing: Missing
    weight: float
    # Load estimate: (resource column, factor), or None. With a ``MetricLoad`` a placed
    # pod adds its ``amounts`` entry over the node's allocatable instead of request x factor.
    estimate: tuple[int, float] | None


class MetricLoad(TypedDict):
    """Load estimate v2's inputs to the metric filter. Matrices are row-major, one
    column per metric (``metric_specs`` order); NaN stands for no threshold."""

    # Per metric: the incoming pod's estimate counts against the thresholds.
    incoming: list[bool]
    # Per metric: the incoming pod's score weighs its caution (``amounts`` over ``expected``)
    # by the chance that it takes the node past its line, times this weight (``scoreRisk``;
    # 0: not at all).
    risk: list[float]
    # ``pods x metrics``: each pod's estimated usage of the estimate's column (engine units):
    # what the metric filter counts it at ...
    amounts: I64
    # ... and what the metric scores count it at (without the deviations where the estimate
    # has ``scoreByMean``, and a pod of a workload without history at the typical workload's
    # figure, not the prior's quantile; else the same).
    expected: I64
    # ``pods x metrics``: each pod's thresholds (its priority band's).
    pod_above: F64
    pod_below: F64
    # ``pods x metrics``: 1 where the metric does not filter the pod (its controller's kind
    # is in the metric's ``exempt``, a mirror pod); its scores still apply.
    exempt: U8
    # ``nodes x metrics``: thresholds that replace the pod's on that node.
    node_above: F64
    node_below: F64
    # ``nodes x metrics``: the caution in each node's value (the deviations the load
    # estimate added, with ``scoreByMean`` or ``scoreRisk``; else 0): the filter reads the
    # value, the scores the value less this unless ``scores_caution``.
    caution: F64
    # Per metric: the scores read each node's value with its caution (every estimate but
    # ``scoreByMean: true``); it then only widens the deviation that ``risk`` weighs.
    scores_caution: list[bool]


class Profile(TypedDict):
    """A compiled profile: plugins by registry name, with their arguments."""

    # Plugins whose Filter runs.
    filters: list[str]
    # Score weight per scoring plugin (a plugin left out does not score).
    weights: dict[str, int]
    hard_pod_affinity_weight: int
    # InterPodAffinity's ignorePreferredTermsOfExistingPods.
    ignore_preferred_terms_of_existing_pods: bool
    fit_strategy: Strategy
    # RequestedToCapacityRatio's shape: (utilization 0..100, score 0..10) points.
    shape: list[tuple[int, int]]
    # (resource column, weight) scored by NodeResourcesFit.
    fit_resources: list[tuple[int, int]]
    # Resource columns NodeResourcesFit's filter does not check (ignoredResources, ignoredResourceGroups).
    fit_ignored: list[int]
    # Resource columns scored by NodeResourcesBalancedAllocation.
    balanced_resources: list[int]
    # DefaultPreemption (PostFilter).
    preemption: bool
    # NodePodLimit's maxPods: the most pods a node may hold.
    max_pods_per_node: int


class ExplanationArrays(TypedDict):
    """Per-node detail of one pod: the failing plugin's reasons, or every score plugin's scores."""

    pod: int
    reason_offsets: I64
    reason_codes: npt.NDArray[np.uint32]
    # Score plugins by registry name, then ``metric:<index>``.
    plugins: list[str]
    weights: F64
    # ``plugins x nodes``, NaN where infeasible.
    raw: F64
    normalized: F64
    totals: F64


class Outcome(TypedDict):
    """One batch's result, one row per pod."""

    # Chosen node, or UNSCHEDULABLE / NOT_ATTEMPTED.
    nodes: I64
    scores: F64
    feasible: I64
    reason_offsets: I64
    reason_codes: npt.NDArray[np.uint32]
    reason_counts: I64
    nominated: I64
    victim_offsets: I64
    victims: I64
    # DefaultPreemption's PostFilter per pod that fits nowhere: the pod's row, its verdict
    # (``POSTFILTER_CODES``), and the (reason code, nodes) of its FitError for "no_candidate".
    postfilter_pods: I64
    postfilter_verdicts: npt.NDArray[np.uint8]
    postfilter_offsets: I64
    postfilter_codes: npt.NDArray[np.uint32]
    postfilter_counts: I64
    # Per placed pod, per claim (``VolumeArrays`` order): the PersistentVolume it binds, or ``VOLUME_CODES["provision"]``.
    volume_offsets: I64
    volumes: I64
    # Per pod that fits nowhere, the nodes the threshold of a metric the call names
    # (``threshold_metrics``) rejected after every other filter passed there, each with its
    # reason code (above or below that metric's line).
    threshold_offsets: I64
    threshold_nodes: npt.NDArray[np.uint32]
    threshold_codes: npt.NDArray[np.uint32]
    explanation: ExplanationArrays | None
