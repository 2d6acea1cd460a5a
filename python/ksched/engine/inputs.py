"""The Python objects of one batch compiled into ``_core.schedule``'s inputs.

Owns the constraint classes of a batch (pods with equal node-level
constraints share a class), the pod batch (each pending pod's row: its
shape's requests, class, ports and images, the pod table, the claims, and
preemption's victims and reservations), the metric values, the metric specs,
load estimate v2's per-pod and per-node inputs to the metric filter and the
profile, each built as the TypedDict or array of
:mod:`ksched.core_types` the binding reads. Integer codes (operators, effects,
protocols) come from ``_core``'s own tables; nothing here calls the engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, cast

import numpy as np
import numpy.typing as npt

from ksched import _core
from ksched.config import MetricConfig, ProfileConfig
from ksched.core_types import (
    ClassTable,
    MetricLoad,
    MetricSpec,
    Missing,
    PodBatch,
    PreemptionArrays,
    Prefer,
    Profile,
    Strategy,
)
from ksched.engine.estimate import estimate_choice
from ksched.engine.pod_level import SpreadConstraint
from ksched.engine.pods import NodeConstraints, PodRequests
from ksched.engine.podtable import PendingPod
from ksched.engine.quantity import saturated
from ksched.engine.requirements import PodRequirements, requirements
from ksched.engine.selectors import Term
from ksched.engine.snapshot import Snapshot, node_thresholds
from ksched.engine.volumes import NO_VOLUMES, PodVolumes, VolumeColumns
from ksched.errors import MalformedObjectError
from ksched.objects import Obj, stable_keys

# The annotation the kubelet sets on a static pod's mirror: no scheduler places it.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def i64(values: Sequence[int]) -> npt.NDArray[np.int64]:
    return np.asarray(values, dtype=np.int64)


def _i32(values: Sequence[int]) -> npt.NDArray[np.int32]:
    return np.asarray(values, dtype=np.int32)


def _u8(values: Sequence[int]) -> npt.NDArray[np.uint8]:
    return np.asarray(values, dtype=np.uint8)


@dataclass
class _Terms:
    """Node selector terms and their requirements, shared by all classes of a batch."""

    offsets: list[int] = field(default_factory=lambda: [0])
    weights: list[int] = field(default_factory=list)
    keys: list[int] = field(default_factory=list)
    is_field: list[int] = field(default_factory=list)
    operators: list[int] = field(default_factory=list)
    value_offsets: list[int] = field(default_factory=lambda: [0])
    values: list[int] = field(default_factory=list)
    int_values: list[int] = field(default_factory=list)


@dataclass
class ClassColumns:
    """Constraint classes of one batch, built as flat columns (``ClassTable``)."""

    snapshot: Snapshot
    ids: dict[NodeConstraints, int] = field(default_factory=dict)
    node_names: list[int] = field(default_factory=list)
    tol_offsets: list[int] = field(default_factory=lambda: [0])
    tol_keys: list[int] = field(default_factory=list)
    tol_operators: list[int] = field(default_factory=list)
    tol_values: list[int] = field(default_factory=list)
    tol_effects: list[int] = field(default_factory=list)
    node_selector_term: list[int] = field(default_factory=list)
    has_required: list[int] = field(default_factory=list)
    required_offsets: list[int] = field(default_factory=lambda: [0])
    required_terms: list[int] = field(default_factory=list)
    preferred_offsets: list[int] = field(default_factory=lambda: [0])
    preferred_terms: list[int] = field(default_factory=list)
    has_prefilter: list[int] = field(default_factory=list)
    prefilter_offsets: list[int] = field(default_factory=lambda: [0])
    prefilter_nodes: list[int] = field(default_factory=list)
    terms: _Terms = field(default_factory=_Terms)
    # The profile's addedAffinity required terms, and their term ids.
    enforced: tuple[Term, ...] = ()
    enforced_terms: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.enforced_terms = [self._term(term) for term in self.enforced]

    def _term(self, term: Term, weight: int = 0) -> int:
        t, s = self.terms, self.snapshot.strings
        for r in term:
            t.keys.append(-1 if r.is_field else s(r.key))
            t.is_field.append(int(r.is_field))
            t.operators.append(_core.SELECTOR_OPERATORS[r.operator])
            t.values.extend(s(v) for v in r.values)
            t.value_offsets.append(len(t.values))
            t.int_values.append(int(r.values[0]) if r.operator in ("Gt", "Lt") else 0)
        t.weights.append(weight)
        t.offsets.append(len(t.keys))
        return len(t.weights) - 1

    def term(self, term: Term) -> int:
        """Add a required term outside any class (volume node affinity, provisioning topology)."""
        return self._term(term)

    def class_of(self, k: NodeConstraints, prefilter: set[str] | None) -> int:
        existing = self.ids.get(k)
        if existing is not None:
            return existing
        s = self.snapshot.strings
        self.node_names.append(s(k.node_name) if k.node_name else -1)
        for t in k.tolerations:
            self.tol_keys.append(s(t.key) if t.key else -1)
            self.tol_operators.append(_core.TOLERATION_OPERATORS[t.operator])
            self.tol_values.append(s(t.value))
            self.tol_effects.append(_core.EFFECTS[t.effect])
        self.tol_offsets.append(len(self.tol_keys))
        self.node_selector_term.append(self._term(k.node_selector) if k.node_selector else -1)
        self.has_required.append(int(k.required is not None))
        self.required_terms.extend(self._term(term) for term in k.required or ())
        self.required_offsets.append(len(self.required_terms))
        self.preferred_terms.extend(self._term(term, weight) for weight, term in k.preferred)
        self.preferred_offsets.append(len(self.preferred_terms))
        self.has_prefilter.append(int(prefilter is not None))
        if prefilter is not None:
            index = self.snapshot.index
            self.prefilter_nodes.extend(sorted(index[n] for n in prefilter if n in index))
        self.prefilter_offsets.append(len(self.prefilter_nodes))
        self.ids[k] = len(self.ids)
        return self.ids[k]

    def table(self) -> ClassTable:
        t = self.terms
        return {
            "count": len(self.ids),
            "class_node_names": _i32(self.node_names),
            "tol_offsets": i64(self.tol_offsets),
            "tol_keys": _i32(self.tol_keys),
            "tol_operators": _u8(self.tol_operators),
            "tol_values": _i32(self.tol_values),
            "tol_effects": _u8(self.tol_effects),
            "node_selector_term": i64(self.node_selector_term),
            "has_required": _u8(self.has_required),
            "required_offsets": i64(self.required_offsets),
            "required_terms": i64(self.required_terms),
            "preferred_offsets": i64(self.preferred_offsets),
            "preferred_terms": i64(self.preferred_terms),
            "has_prefilter": _u8(self.has_prefilter),
            "prefilter_offsets": i64(self.prefilter_offsets),
            "prefilter_nodes": i64(self.prefilter_nodes),
            "enforced_terms": i64(self.enforced_terms),
            "term_offsets": i64(t.offsets),
            "term_weights": i64(t.weights),
            "req_keys": _i32(t.keys),
            "req_is_field": _u8(t.is_field),
            "req_operators": _u8(t.operators),
            "req_value_offsets": i64(t.value_offsets),
            "req_values": _i32(t.values),
            "req_int_values": i64(t.int_values),
        }


def metric_specs(metrics: Sequence[MetricConfig], snapshot: Snapshot) -> list[MetricSpec]:
    """The engine's view of each metric: scoring direction, thresholds, missing policy, load estimate."""
    return [
        {
            "prefer": cast(Prefer, m.prefer),
            "target": m.target,
            "range": m.range,
            "above": m.above,
            "below": m.below,
            "missing": cast(Missing, m.missing),
            "weight": m.weight,
            "estimate": None
            if m.estimate is None
            else (snapshot.resources(m.estimate.resource), m.estimate.factor * m.load_sign),
        }
        for m in metrics
    ]


def metric_load(
    snapshot: Snapshot,
    rows: Sequence[Row],
    metrics: Sequence[MetricConfig],
    moved: Mapping[str, Mapping[str, float]] | None = None,
    caution: npt.NDArray[np.float64] | None = None,
) -> MetricLoad | None:
    """Load estimate v2's inputs to the metric filter for ``rows`` (in order): each pod's
    estimated usage of each metric's estimate resource (:func:`estimate_choice`: what its
    filter counts, and what its scores count: without the deviations where ``scoreByMean``, a
    pod of a workload without history at the typical figure), its thresholds (its
    priority band's), the metrics it is exempt from (its controller's kind is in the metric's
    ``exempt``, or it is a mirror pod), the nodes' own thresholds (:func:`node_thresholds`),
    and the caution in each node's value (``caution``, node x metric: the deviations the
    load estimate added, which the scores keep where the metric's estimate scores the nodes
    with it (all but ``scoreByMean: true``) and leave out otherwise, and which widen the risk
    term's deviation; None: none). None where none of it can change a verdict or an estimate
    (no metric filters and none has an estimate of its own): the specs alone then decide.

    ``moved``: pods (by key) that move a known load, a rebalancing move's replacement with
    its victim's usage (metric name -> engine units): that usage counts in place of their
    estimate, and each metric holds them to their own thresholds and the node's, whichever
    is stricter (``METRIC_STRICTER_THRESHOLDS``)."""
    nodes = [node_thresholds(snapshot, m.name) for m in metrics]
    filtering = any(
        m.above is not None or m.below is not None or m.bands or m.missing == "exclude" for m in metrics
    ) or any(not (np.isnan(above).all() and np.isnan(below).all()) for above, below in nodes)
    if not filtering and not any(m.estimate is not None and not m.estimate.legacy for m in metrics):
        return None
    count, width = len(rows), len(metrics)
    # What exempts a pod from a metric (nothing where no metric filters).
    owners = [_owner_kind(r.pod) for r in rows] if filtering else [""] * count
    amounts = np.zeros((count, width), dtype=np.int64)
    expected = np.zeros((count, width), dtype=np.int64)
    above = np.full((count, width), np.nan)
    below = np.full((count, width), np.nan)
    exempt = np.zeros((count, width), dtype=np.uint8)
    for k, m in enumerate(metrics):
        exempt[:, k] = [_core.METRIC_EXEMPT if kind is None or kind in m.exempt else 0 for kind in owners]
        if m.bands:
            for i, r in enumerate(rows):
                pod_above, pod_below = m.thresholds(r.req.priority)
                above[i, k] = np.nan if pod_above is None else pod_above
                below[i, k] = np.nan if pod_below is None else pod_below
        else:
            above[:, k] = np.nan if m.above is None else m.above
            below[:, k] = np.nan if m.below is None else m.below
        if m.estimate is not None:
            # Signed: a metric that falls with load (free memory) goes down by the pod's share.
            sign = int(m.load_sign)
            for i, r in enumerate(rows):
                choice = estimate_choice(
                    r.pod, PodRequests(r.req.requests, r.req.nonzero_cpu, r.req.nonzero_memory), m.estimate
                )
                amounts[i, k] = sign * saturated(choice.amount)
                expected[i, k] = sign * saturated(choice.expected)
    for i, r in enumerate(rows):
        known = (moved or {}).get(r.req.key)
        if known is None:
            continue
        for k, m in enumerate(metrics):
            exempt[i, k] = _core.METRIC_STRICTER_THRESHOLDS
            if m.estimate is not None and m.name in known and math.isfinite(known[m.name]):
                amounts[i, k] = expected[i, k] = int(m.load_sign) * saturated(round(known[m.name]))
    return {
        "incoming": [m.estimate is not None and not m.estimate.legacy for m in metrics],
        "risk": [
            m.estimate.score_risk if m.estimate is not None and not m.estimate.legacy else 0.0
            for m in metrics
        ],
        "amounts": amounts.reshape(-1),
        "expected": expected.reshape(-1),
        "pod_above": above.reshape(-1),
        "pod_below": below.reshape(-1),
        "exempt": exempt.reshape(-1),
        # Node-major, as the metric values.
        "node_above": np.stack([a for a, _ in nodes], axis=1).reshape(-1),
        "node_below": np.stack([b for _, b in nodes], axis=1).reshape(-1),
        "caution": (
            np.zeros(snapshot.count * width, dtype=np.float64)
            if caution is None
            else np.ascontiguousarray(caution[:, :width], dtype=np.float64).reshape(-1)
        ),
        "scores_caution": [m.estimate is not None and not m.estimate.score_by_mean for m in metrics],
    }


def _owner_kind(pod: Obj) -> str | None:
    """The kind of the pod's controller (its ownerReference with ``controller: true``; ""
    for none), or None for a mirror pod, which every metric exempts."""
    m = pod.get("metadata") or {}
    if MIRROR_ANNOTATION in (m.get("annotations") or {}):
        return None
    for ref in m.get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller"):
            kind = ref.get("kind")
            return kind if isinstance(kind, str) else ""
    return ""


def is_extended_resource(name: str) -> bool:
    """Upstream ``IsExtendedResourceName``: a qualified name outside ``kubernetes.io``."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def engine_profile(p: ProfileConfig, snapshot: Snapshot) -> Profile:
    """The profile with plugins by registry name and resources by the snapshot's columns."""
    res = snapshot.resources
    ignored = set(p.fit_ignored_resources)
    groups = set(p.fit_ignored_groups)
    return {
        "filters": list(p.filters),
        "weights": dict(p.weights),
        "hard_pod_affinity_weight": p.hard_pod_affinity_weight,
        "ignore_preferred_terms_of_existing_pods": p.ignore_preferred_terms_of_existing_pods,
        "fit_strategy": cast(Strategy, p.fit_strategy),
        "shape": list(p.shape),
        # A resource that no node or pod of the snapshot names has no column: allocatable 0
        # everywhere, which upstream's scorers skip (``if allocatable == 0 { continue }``).
        "fit_resources": [(c, w) for name, w in p.fit_resources if (c := res.get(name)) is not None],
        "fit_ignored": [
            c
            for c, name in enumerate(res.names)
            if is_extended_resource(name) and (name in ignored or name.partition("/")[0] in groups)
        ],
        "balanced_resources": [c for name in p.balanced_resources if (c := res.get(name)) is not None],
        "preemption": p.preemption,
        "max_pods_per_node": p.max_pods_per_node,
    }


@dataclass(slots=True)
class Row:
    """A pending pod as one engine row."""

    slot: int
    req: PodRequirements
    # Its shape's index in the batch (``ShapeRow``): the row's requests, class, ports, images.
    shape: int
    # The pod itself (what its requirements leave out: limits, owners, annotations).
    pod: Obj
    # The profile's default spread constraints, for a pod without constraints of its own.
    default_spread: tuple[SpreadConstraint, ...] = ()
    volumes: PodVolumes = NO_VOLUMES


class ShapeRow(NamedTuple):
    """The engine row parts all pods of one shape share in a batch."""

    requests: list[int]
    klass: int
    ports: list[tuple[int, int, int]]
    # Ids of the shape's images that some node has (ImageLocality).
    images: list[int]
    nonzero: tuple[int, int]
    containers: int


def shape_row(
    snapshot: Snapshot,
    classes: ClassColumns,
    req: PodRequirements,
    prefilter: set[str] | None,
    added_preferred: tuple[tuple[int, Term], ...],
) -> ShapeRow:
    """The engine row parts every pod of ``req``'s shape shares (``added_preferred``: the
    profile's addedAffinity preferred terms, merged into each pod's)."""
    res = snapshot.resources
    requests = [0] * len(res)
    # Clamped as the node table's counts are (QUANTITY_MAX): a request past it fits nowhere anyway.
    for resource, v in req.requests.items():
        requests[res(resource)] = saturated(v)
    constraints = req.constraints
    klass = classes.class_of(
        replace(constraints, preferred=constraints.preferred + added_preferred)
        if added_preferred
        else constraints,
        prefilter,
    )
    ports: list[tuple[int, int, int]] = [
        (_core.PROTOCOLS[p.protocol], snapshot.strings(p.ip), p.port) for p in req.host_ports
    ]
    return ShapeRow(
        requests,
        klass,
        ports,
        snapshot.image_ids(req.images),
        (saturated(req.nonzero_cpu), saturated(req.nonzero_memory)),
        req.containers,
    )


@dataclass(frozen=True)
class PodInputs:
    """``_core.schedule``'s ``pods`` for a batch, with what reading its output needs."""

    pods: PodBatch
    # The claims of the batch's pods (None: no pod has a claim to place).
    volumes: VolumeColumns | None
    # The evictable pods' keys, indexed by the output's victims.
    victim_keys: list[str]


def pod_batch(
    snapshot: Snapshot,
    rows: Sequence[Row],
    shapes: Sequence[ShapeRow],
    classes: ClassColumns,
    profile: ProfileConfig,
    *,
    pod_level: bool,
    nominated: Sequence[Obj],
) -> PodInputs:
    """The engine's ``pods`` for ``rows`` (in order): each row's shape parts, the pod table,
    the claims, and preemption's victims and reservations. ``pod_level``: some row has pod
    affinity or spreading; ``nominated``: pending pods outside the batch nominated to a node."""
    # Each row's shape: its request row, class, host ports and images are its shape's.
    at = np.asarray([r.shape for r in rows], dtype=np.int64)
    width = len(snapshot.resources)
    hp_offsets, hp_at = _ragged(shapes, at, lambda s: s.ports)
    img_offsets, img_at = _ragged(shapes, at, lambda s: s.images)
    hp = [p for s in shapes for p in s.ports]
    # Pods without claims (most batches hold none) cost nothing here.
    claims = None
    volumes = None
    if any(r.volumes is not NO_VOLUMES and not r.volumes.empty for r in rows):
        claims = VolumeColumns(
            snapshot.storage,
            snapshot.index,
            snapshot.strings,
            classes.term,
            snapshot.pods.claim_users,
            snapshot.node_names,
            snapshot.pods.claims_on_nodes,
        )
        for r in rows:
            claims.add(r.volumes)
        volumes = claims.arrays()
    reservations = _reservations(snapshot, rows, nominated)
    # The pending pods' rows of the pod table, built only where the table may be: with no
    # claims, no bound pod with terms and no pending pod with affinity or spreading, no
    # pod-level plugin has anything to act on and engine_table returns None whatever they are.
    tabled = volumes is not None or snapshot.pods.with_terms > 0 or pod_level
    table = snapshot.pods.engine_table(
        [
            PendingPod(r.req.info, r.default_spread, profile.spread_system_defaulted)
            if r.default_spread
            else PendingPod(r.req.info, r.req.spread)
            for r in rows
        ]
        if tabled
        else [],
        snapshot.namespaces,
        required=volumes is not None,
        nominated=[req.info for _, req in reservations],
    )
    # The nominated pods' rows follow the pending pods'.
    first_row = table["bound"] + len(rows) if table is not None else None
    preemption, victim_keys = _preemption(snapshot, rows, reservations, first_row, profile.preemption)
    pods: PodBatch = {
        "count": len(rows),
        "requests": i64([v for s in shapes for v in s.requests]).reshape(len(shapes), width)[at].reshape(-1),
        "nonzero_requests": i64([v for s in shapes for v in s.nonzero])
        .reshape(len(shapes), 2)[at]
        .reshape(-1),
        "pod_classes": i64([s.klass for s in shapes])[at],
        "pod_keys": np.frombuffer(stable_keys(r.req.key for r in rows), dtype="<u8").astype(np.uint64),
        "hp_offsets": hp_offsets,
        "hp_protocols": np.asarray([p[0] for p in hp], dtype=np.uint8)[hp_at],
        "hp_ips": np.asarray([p[1] for p in hp], dtype=np.int32)[hp_at],
        "hp_ports": np.asarray([p[2] for p in hp], dtype=np.int32)[hp_at],
        "img_offsets": img_offsets,
        "img_ids": np.asarray([i for s in shapes for i in s.images], dtype=np.int32)[img_at],
        "img_containers": i64([s.containers for s in shapes])[at],
        "table": table,
        "preemption": preemption,
        "volumes": volumes,
    }
    return PodInputs(pods, claims, victim_keys)


def metric_columns(
    snapshot: Snapshot, metrics: Sequence[MetricConfig], values: npt.NDArray[np.float64] | None
) -> npt.NDArray[np.float64]:
    """The engine's ``metric_values``: a node-major row of one value per metric (NaN: none)."""
    if values is None or not metrics:
        return np.full(snapshot.count * len(metrics), np.nan, dtype=np.float64)
    return np.ascontiguousarray(values[:, : len(metrics)], dtype=np.float64).reshape(-1)


def _ragged(
    shapes: Sequence[ShapeRow], at: npt.NDArray[np.int64], entries: Callable[[ShapeRow], Sequence[Any]]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The offsets of each row's ``entries`` (its shape's, ``at``: each row's shape) and,
    per entry in row order, its index among all shapes' entries laid end to end."""
    counts = np.asarray([len(entries(s)) for s in shapes], dtype=np.int64)
    row_counts = counts[at]
    offsets = np.concatenate((np.zeros(1, dtype=np.int64), np.cumsum(row_counts, dtype=np.int64)))
    starts = np.cumsum(counts, dtype=np.int64) - counts
    index = np.repeat(starts[at] - offsets[:-1], row_counts) + np.arange(offsets[-1], dtype=np.int64)
    return offsets, index


def _reservations(
    snapshot: Snapshot, rows: Sequence[Row], nominated: Sequence[Obj]
) -> list[tuple[int, PodRequirements]]:
    """The pods outside the batch nominated to a known node, with that node's index
    (a pod of the batch holds its own nomination in the engine)."""
    if not nominated:
        return []
    reservations = []
    in_batch = {r.req.key for r in rows}
    for pod in nominated:
        try:
            req = requirements(pod)
        except MalformedObjectError:
            continue
        node = snapshot.index.get(req.nominated_node)
        if node is not None and req.key not in in_batch:
            reservations.append((node, req))
    return reservations


def _preemption(
    snapshot: Snapshot,
    rows: Sequence[Row],
    reservations: Sequence[tuple[int, PodRequirements]],
    first_row: int | None,
    enabled: bool,
) -> tuple[PreemptionArrays | None, list[str]]:
    """The engine's ``preemption`` input, or None when no pod could preempt, nothing is
    held and no pod has a nominated node to try first. ``first_row``: the pod table
    row of the first reservation (None: no table); ``enabled``: the profile runs DefaultPreemption."""
    with_rows = first_row is not None
    # The bound pods' lowest priority is only looked up when some pod may preempt.
    below = max((r.req.priority for r in rows if r.req.may_preempt), default=None) if enabled else None
    lowest = snapshot.pods.min_evictable_priority() if below is not None else None
    if lowest is None or below is None or below <= lowest:
        below = None  # nobody here can evict anybody
        if not reservations and not any(r.req.nominated_node for r in rows):
            return None, []
    res = snapshot.resources
    victims, keys = snapshot.pods.victims(
        below if below is not None else -(2**62), snapshot.budgets, snapshot.strings, res, with_rows
    )
    # The nominated pods' host ports are held on their nodes as their requests are.
    held_ports = [
        (_core.PROTOCOLS[p.protocol], snapshot.strings(p.ip), p.port)
        for _, req in reservations
        for p in req.host_ports
    ]
    requests = np.zeros(len(reservations) * len(res), dtype=np.int64)
    for k, (_, req) in enumerate(reservations):
        for resource, v in req.requests.items():
            column = res.get(resource)  # a resource no node has holds nothing back
            if column is not None:
                requests[k * len(res) + column] = saturated(v)
    return {
        **victims,
        "pod_priorities": i64([r.req.priority for r in rows]),
        "pod_preempt": np.asarray([int(r.req.may_preempt) for r in rows], dtype=np.uint8),
        "pod_nominated": i64([snapshot.index.get(r.req.nominated_node, -1) for r in rows]),
        "r_nodes": i64([n for n, _ in reservations]),
        "r_rows": i64([first_row + k if first_row is not None else -1 for k in range(len(reservations))]),
        "r_priorities": i64([req.priority for _, req in reservations]),
        "r_requests": requests,
        "r_port_offsets": i64(np.cumsum([0] + [len(req.host_ports) for _, req in reservations]).tolist()),
        "r_port_protocols": np.asarray([p[0] for p in held_ports], dtype=np.uint8),
        "r_port_ips": np.asarray([p[1] for p in held_ports], dtype=np.int32),
        "r_port_ports": np.asarray([p[2] for p in held_ports], dtype=np.int32),
    }, keys
