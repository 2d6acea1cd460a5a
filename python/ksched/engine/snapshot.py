"""The node table the engine scores: nodes and the pods bound to them.

Owns string interning (every label, taint, node name and IP becomes an
integer id; id 0 is the empty string) and the numpy columns handed to the
engine zero-copy. A :class:`Snapshot` is built once from nodes and pods and
then kept current in place (:func:`apply_bound_pods`, O(changes)), so the
engine never waits on an O(nodes) rebuild. Also reads a node annotation as a
metric value for every node (:func:`annotation_column`), and the nodes' own
metric thresholds (:func:`node_thresholds`, once per snapshot).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ksched import _core
from ksched.config.metrics import NODE_THRESHOLD_PREFIX
from ksched.config.steering import DEFAULT_MARK_KEYS, is_mark
from ksched.core_types import NodeTable
from ksched.engine.disruption_budgets import DisruptionBudget
from ksched.engine.pod_level import PodInfo, pod_info
from ksched.engine.pods import CountedRequests, HostPort, PodRequests, priority, start_time
from ksched.engine.podtable import Evictable, PodTable
from ksched.engine.quantity import QUANTITY_MAX, canonical, parse_quantity, saturated, saturating_add
from ksched.engine.requirements import counted_requests
from ksched.engine.selectors import parse_int64
from ksched.engine.spread_selectors import SpreadSelectors
from ksched.engine.storage import Storage
from ksched.errors import KschedError, MalformedObjectError, QuantityError
from ksched.objects import (
    Obj,
    StringId,
    is_terminal,
    meta,
    name,
    object_key,
    spec,
    stable_key,
    terminating_by_preemption,
)

log = logging.getLogger(__name__)

NATIVE_RESOURCES = ("cpu", "memory", "ephemeral-storage")
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
WILDCARD_IP = "0.0.0.0"

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


class Interner:
    """String -> dense id; id 0 is always the empty string."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {"": 0}
        self.strings: list[str] = [""]

    def __call__(self, s: str) -> StringId:
        i = self._ids.get(s)
        if i is None:
            i = len(self.strings)
            self._ids[s] = i
            self.strings.append(s)
        return StringId(i)

    def get(self, s: str) -> StringId | None:
        i = self._ids.get(s)
        return None if i is None else StringId(i)


class ResourceIndex:
    """Resource name -> column; cpu, memory, ephemeral-storage come first."""

    def __init__(self) -> None:
        self.names: list[str] = list(NATIVE_RESOURCES)
        self._cols = {n: i for i, n in enumerate(self.names)}

    def __call__(self, resource: str) -> int:
        c = self._cols.get(resource)
        if c is None:
            c = len(self.names)
            self._cols[resource] = c
            self.names.append(resource)
        return c

    def get(self, resource: str) -> int | None:
        return self._cols.get(resource)

    def __len__(self) -> int:
        return len(self.names)


def _csr(rows: list[list[int]]) -> tuple[I64, I64]:
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r) for r in rows])
    flat = np.fromiter((v for r in rows for v in r), dtype=np.int64, count=int(offsets[-1]))
    return offsets, flat


@dataclass
class Snapshot:
    """Nodes with their bound pods, as engine columns."""

    node_names: list[str]
    node_objects: list[Obj]
    strings: Interner
    resources: ResourceIndex
    arrays: dict[str, npt.NDArray[np.generic]]
    warnings: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    # Labels, namespaces and affinity terms of the bound pods (pod-level plugins).
    pods: PodTable = field(init=False)
    # Namespace -> labels, for affinity terms' namespaceSelector.
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    # PodDisruptionBudgets, which preemption prefers not to violate.
    budgets: list[DisruptionBudget] = field(default_factory=list)
    # Services and controllers' selectors, for default topology spreading.
    spread_selectors: SpreadSelectors = field(default_factory=SpreadSelectors)
    # Image name -> id (ImageLocality), apart from ``strings`` so the per-image columns are dense.
    images: Interner = field(default_factory=Interner)
    # PersistentVolumes, claims, StorageClasses and CSINodes (the volume plugins).
    storage: Storage = field(default_factory=Storage)
    # Per metric name: each node's own (above, below) thresholds (``node_thresholds``).
    thresholds: dict[str, tuple[F64, F64]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.pods = PodTable(self.strings)

    @property
    def count(self) -> int:
        return len(self.node_names)

    def engine_nodes(self) -> NodeTable:
        """The node table `ksched._core.schedule` takes as its `nodes` argument."""
        s = self.strings
        # ``arrays`` holds every array column of NodeTable (kept up to date in place).
        return cast(
            NodeTable,
            {
                **self.arrays,
                "count": self.count,
                "resources": len(self.resources),
                "strings": (s(WILDCARD_IP), s(UNSCHEDULABLE_TAINT), 0),
            },
        )

    def image_ids(self, names: Sequence[str]) -> list[int]:
        """Ids of the images some node has, one per name (ImageLocality: the others add nothing)."""
        known = (self.images.get(n) for n in names)
        return [i for i in known if i]

    def ensure_resources(self, names: set[str]) -> None:
        """Add zero columns for resources some pending pod requests but no node has."""
        before = len(self.resources)
        for r in sorted(names):
            self.resources(r)
        extra = len(self.resources) - before
        if extra:
            for key in ("allocatable", "requested"):
                m = self.arrays[key].reshape(self.count, before)
                self.arrays[key] = np.ascontiguousarray(np.pad(m, ((0, 0), (0, extra)))).reshape(-1)


def _node_resources(node: Obj, resources: ResourceIndex) -> tuple[dict[int, int], int]:
    """Allocatable per resource column, and the allowed pod count."""
    status = node.get("status") or {}
    # Allocatable only, as upstream: a node that reports none offers nothing.
    alloc = status.get("allocatable") or {}
    out: dict[int, int] = {}
    allowed_pods = 0
    for r, q in alloc.items():
        try:
            v = canonical(str(r), parse_quantity(q))
        except QuantityError as err:
            raise MalformedObjectError(f"node {name(node)}", f"status.allocatable.{r}", str(err)) from None
        if r == "pods":
            allowed_pods = v
        else:
            out[resources(str(r))] = v
    return out, allowed_pods


def node_problem(node: Obj) -> str | None:
    """Why the node cannot enter a node table (a malformed allocatable or image list), or None.
    Values past int64 are clamped, not refused (:data:`~ksched.engine.quantity.QUANTITY_MAX`);
    whatever else cannot be read as numbers keeps this one node out, never the others."""
    try:
        _node_resources(node, ResourceIndex())
        _node_images([node])
    except MalformedObjectError as err:
        return str(err)
    except (OverflowError, ValueError, TypeError, AttributeError) as err:
        return f"node {name(node)}: {type(err).__name__}: {err}"
    return None


def _node_images(nodes: list[Obj]) -> tuple[Interner, dict[str, npt.NDArray[np.generic]]]:
    """The nodes' ``status.images`` as upstream's image states: every name of
    an image is an entry with the image's size (as first reported) and the
    number of nodes that have it."""
    images = Interner()
    sizes = [0]
    counts = [0]
    rows: list[list[int]] = []
    for node in nodes:
        row: set[int] = set()
        for image in (node.get("status") or {}).get("images") or []:
            size = image.get("sizeBytes") if isinstance(image, dict) else None
            for image_name in (image.get("names") if isinstance(image, dict) else None) or []:
                i = images(str(image_name))
                if i == len(sizes):
                    # Upstream's sizeBytes is an int64; a larger one is clamped, a negative one is 0.
                    size_bytes = size if isinstance(size, int) and not isinstance(size, bool) else 0
                    sizes.append(max(0, saturated(size_bytes)))
                    counts.append(0)
                if i not in row:
                    row.add(i)
                    counts[i] += 1
        rows.append(sorted(row))
    offsets, ids = _csr(rows)
    return images, {
        "image_offsets": offsets,
        "image_ids": ids.astype(np.int32),
        "image_sizes": np.array(sizes, dtype=np.int64),
        "image_node_counts": np.array(counts, dtype=np.int64),
    }


def annotation_column(snapshot: Snapshot, key: str) -> npt.NDArray[np.float64]:
    """Each node's annotation ``key`` as a number (NaN where absent or not a number)."""
    return np.array(
        [to_number((meta(node).get("annotations") or {}).get(key)) for node in snapshot.node_objects],
        dtype=np.float64,
    )


# Malformed threshold annotations already logged: (node, annotation, value).
_reported_thresholds: set[tuple[str, str, str]] = set()


def node_thresholds(snapshot: Snapshot, metric: str) -> tuple[F64, F64]:
    """Each node's own ``above`` and ``below`` threshold of ``metric`` (the annotations
    ``threshold.ksched.io/<metric>-above`` and ``-below``), NaN where it has none. Read once
    per snapshot (a node's annotations change only with the node, which rebuilds it); a
    value that is not a finite number is logged once and ignored."""
    cached = snapshot.thresholds.get(metric)
    if cached is not None:
        return cached
    sides = []
    for side in ("above", "below"):
        key = f"{NODE_THRESHOLD_PREFIX}{metric}-{side}"
        column = np.full(snapshot.count, np.nan, dtype=np.float64)
        for i, node in enumerate(snapshot.node_objects):
            raw = (meta(node).get("annotations") or {}).get(key)
            if raw is None:
                continue
            value = to_number(raw)
            if math.isfinite(value):
                column[i] = value
            elif (snapshot.node_names[i], key, str(raw)) not in _reported_thresholds:
                _reported_thresholds.add((snapshot.node_names[i], key, str(raw)))
                log.warning(
                    "node %s: annotation %s=%r is not a number; ignored", snapshot.node_names[i], key, raw
                )
        sides.append(column)
    snapshot.thresholds[metric] = (sides[0], sides[1])
    return sides[0], sides[1]


def to_number(raw: Any) -> float:
    """A metric value, or NaN for anything that is not a number (infinite for an integer
    past float's range, which :func:`drop_unusable` then drops)."""
    try:
        return float(raw) if raw is not None else math.nan
    except (TypeError, ValueError):
        return math.nan
    except OverflowError:
        return math.inf


# A metric value past this, of either sign, is a sentinel or a fault (a largest float written
# for "unknown", a counter read as a gauge), not a measurement: no per-node figure in use
# reaches it in any unit (an exabyte; a thousand GPUs' FLOPS; 31 years in nanoseconds), and
# far below it estimates add and values subtract without leaving float's range.
METRIC_VALUE_LIMIT = 1e18
# Why a value is dropped: the ``reason`` of ``ksched_metric_values_rejected_total``.
NOT_FINITE = "not_finite"
OUT_OF_RANGE = "out_of_range"


def drop_unusable(column: F64) -> dict[str, int]:
    """In place, every infinite value of a metric's column, or one past +-METRIC_VALUE_LIMIT,
    becomes NaN: no value, so the metric's ``missing`` policy applies to that node alone.
    Returns how many were dropped per reason (reasons with none left out)."""
    infinite = np.isinf(column)
    with np.errstate(invalid="ignore"):
        beyond = (np.abs(column) > METRIC_VALUE_LIMIT) & ~infinite
    counts = {NOT_FINITE: int(infinite.sum()), OUT_OF_RANGE: int(beyond.sum())}
    column[infinite | beyond] = np.nan
    return {reason: n for reason, n in counts.items() if n}


def dropped_note(counts: dict[str, int]) -> str:
    """What :func:`drop_unusable` dropped, for people."""
    what = {NOT_FINITE: "not finite", OUT_OF_RANGE: f"past +-{METRIC_VALUE_LIMIT:g}"}
    return (
        ", ".join(f"{n} node value(s) {what[reason]}" for reason, n in sorted(counts.items()))
        + ": treated as missing"
    )


def build_snapshot(
    nodes: list[Obj], pods: list[Obj], own_marks: tuple[str, ...] = DEFAULT_MARK_KEYS
) -> Snapshot:
    """Build the node table from nodes and the pods bound to them (``spec.nodeName``).
    ksched's own steering marks (the ``PreferNoSchedule`` taints under ``own_marks``,
    ``steering.taintKey`` and ``steering.warmKey``) are left out: they steer other
    schedulers, never ksched's pods."""
    strings = Interner()
    resources = ResourceIndex()
    warnings: list[str] = []
    names = [name(n) for n in nodes]
    index = {n: i for i, n in enumerate(names)}
    if len(index) != len(names):
        raise KschedError("duplicate node names in the cluster")
    allowed = np.zeros(len(nodes), dtype=np.int64)
    per_node: list[dict[int, int]] = []
    for i, node in enumerate(nodes):
        res, allowed[i] = _node_resources(node, resources)
        per_node.append(res)
    columns = len(resources)
    alloc = np.zeros((len(nodes), columns), dtype=np.int64)
    for i, res in enumerate(per_node):
        for c, v in res.items():
            alloc[i, c] = v

    label_rows: list[list[int]] = []
    label_vals: list[int] = []
    label_ints: list[int] = []
    label_valid: list[int] = []
    taint_rows: list[list[int]] = []
    taint_vals: list[int] = []
    taint_effects: list[int] = []
    unschedulable = np.zeros(len(nodes), dtype=np.uint8)
    for i, node in enumerate(nodes):
        labels = meta(node).get("labels") or {}
        keyed = sorted((strings(str(k)), str(v)) for k, v in labels.items())
        label_rows.append([int(k) for k, _ in keyed])
        for _, label_value in keyed:
            label_vals.append(strings(label_value))
            parsed = parse_int64(label_value)
            label_ints.append(parsed if parsed is not None else 0)
            label_valid.append(parsed is not None)
        row_keys: list[int] = []
        for t in spec(node).get("taints") or []:
            if is_mark(t, own_marks):
                continue
            effect = _core.EFFECTS.get(str(t.get("effect") or ""))
            if not effect:
                warnings.append(
                    f"node {names[i]}: taint {t.get('key')!r} has unknown effect {t.get('effect')!r}; ignored"
                )
                continue
            row_keys.append(strings(str(t.get("key") or "")))
            taint_vals.append(strings(str(t.get("value") or "")))
            taint_effects.append(effect)
        taint_rows.append(row_keys)
        unschedulable[i] = bool(spec(node).get("unschedulable"))
    label_offsets, label_keys = _csr(label_rows)
    taint_offsets, taint_keys = _csr(taint_rows)
    images, image_arrays = _node_images(nodes)
    arrays: dict[str, npt.NDArray[np.generic]] = {
        "allocatable": alloc.reshape(-1),
        "requested": np.zeros(len(nodes) * columns, dtype=np.int64),
        "nonzero_requested": np.zeros(len(nodes) * 2, dtype=np.int64),
        "allowed_pods": allowed,
        "pod_count": np.zeros(len(nodes), dtype=np.int64),
        "unschedulable": unschedulable,
        "names": np.array([strings(n) for n in names], dtype=np.int32),
        "keys": np.array([stable_key(n) for n in names], dtype=np.uint64),
        "label_offsets": label_offsets,
        "label_keys": label_keys.astype(np.int32),
        "label_values": np.array(label_vals, dtype=np.int32),
        "label_int_values": np.array(label_ints, dtype=np.int64),
        "label_int_valid": np.array(label_valid, dtype=np.uint8),
        "taint_offsets": taint_offsets,
        "taint_keys": taint_keys.astype(np.int32),
        "taint_values": np.array(taint_vals, dtype=np.int32),
        "taint_effects": np.array(taint_effects, dtype=np.uint8),
        "port_offsets": np.zeros(len(nodes) + 1, dtype=np.int64),
        "port_protocols": np.zeros(0, dtype=np.uint8),
        "port_ips": np.zeros(0, dtype=np.int32),
        "port_ports": np.zeros(0, dtype=np.int32),
        **image_arrays,
    }
    for w in warnings:
        log.warning("%s", w)
    snapshot = Snapshot(names, nodes, strings, resources, arrays, warnings, index, images=images)
    return apply_bound_pods(snapshot, pods)


def apply_bound_pods(snapshot: Snapshot, pods: list[Obj]) -> Snapshot:
    """Count newly bound pods on their nodes, in place: O(pods), not O(nodes)."""
    usage: list[tuple[int, PodRequests, tuple[HostPort, ...]]] = []
    for pod in pods:
        i = snapshot.index.get(str(spec(pod).get("nodeName") or ""))
        if i is None or is_terminal(pod):
            continue
        try:
            reqs, ports = counted_requests(pod)
            usage.append((i, reqs, ports))
            snapshot.pods.add(object_key(pod), i, safe_pod_info(pod), evictable(pod, reqs, ports))
        except MalformedObjectError as err:
            snapshot.pods.add(object_key(pod), i, safe_pod_info(pod))
            warning = f"bound pod counted without requests: {err}"
            log.warning("%s", warning)
            snapshot.warnings.append(warning)
            snapshot.arrays["pod_count"][i] += 1
    return add_usage(snapshot, usage)


def evictable(pod: Obj, reqs: CountedRequests, ports: tuple[HostPort, ...]) -> Evictable | None:
    """What preemption needs of a bound pod (None when its priority is malformed)."""
    try:
        return Evictable(priority(pod), start_time(pod), reqs, ports, terminating_by_preemption(pod))
    except MalformedObjectError:
        return None


def safe_pod_info(pod: Obj) -> PodInfo:
    """The pod's labels and affinity terms; a bound pod with malformed terms still counts by its labels."""
    try:
        return pod_info(pod)
    except MalformedObjectError as err:
        log.warning("bound pod's affinity terms ignored: %s", err)
        m = meta(pod)
        labels = m.get("labels") or {}
        return PodInfo(
            str(m.get("namespace") or "default"),
            tuple(sorted((str(k), str(v)) for k, v in labels.items())) if isinstance(labels, dict) else (),
            None,
            m.get("deletionTimestamp") is not None,
        )


def add_usage(
    snapshot: Snapshot, usage: Sequence[tuple[int, CountedRequests, tuple[HostPort, ...]]]
) -> Snapshot:
    """Count already-parsed pods (node index, requests, host ports) on their nodes, in place."""
    snapshot.ensure_resources({r for _, reqs, _ in usage for r in reqs.requests})
    _count_many(snapshot, usage)
    new_ports: dict[int, list[tuple[int, int, int]]] = {}
    for i, _, ports in usage:
        if ports:
            new_ports.setdefault(i, []).extend(
                (_core.PROTOCOLS[p.protocol], snapshot.strings(p.ip), p.port) for p in ports
            )
    if new_ports:
        _add_ports(snapshot, new_ports)
    return snapshot


def remove_usage(snapshot: Snapshot, node: int, reqs: CountedRequests) -> None:
    """Stop counting a pod without host ports on its node, in place (port rows are rebuilt instead)."""
    _count(snapshot, node, reqs, -1)


def _count(snapshot: Snapshot, i: int, reqs: CountedRequests, sign: int) -> None:
    """Count (sign 1) or uncount (-1) a pod on node ``i``; the sums saturate
    (:func:`~ksched.engine.quantity.saturating_add`): a node whose requests pass int64 is full."""
    r = len(snapshot.resources)
    a = snapshot.arrays
    a["pod_count"][i] += sign
    requested, nonzero = a["requested"], a["nonzero_requested"]
    for resource_name, v in reqs.requests.items():
        at = i * r + snapshot.resources(resource_name)
        requested[at] = saturating_add(int(requested[at]), sign * v)
    nonzero[2 * i] = saturating_add(int(nonzero[2 * i]), sign * reqs.nonzero_cpu)
    nonzero[2 * i + 1] = saturating_add(int(nonzero[2 * i + 1]), sign * reqs.nonzero_memory)


# Up to this many pods are counted item by item rather than with array operations.
FEW = 8


def _count_many(snapshot: Snapshot, usage: Sequence[tuple[int, CountedRequests, object]]) -> None:
    """:func:`_count` (sign 1) for every pod of ``usage``, each column written once."""
    if len(usage) <= FEW:
        # One pod (a bind assumed, a watch event): item by item. ``np.add.at`` costs more here,
        # and under load waiting for the GIL again after it made the scheduling thread slower.
        _count_each(snapshot, usage)
        return
    r = len(snapshot.resources)
    a = snapshot.arrays
    # Column and value per resource, once per distinct requests mapping (a workload's pods share one).
    columns: dict[int, tuple[dict[str, int], list[tuple[int, int]]]] = {}
    flat: list[int] = []
    values: list[int] = []
    for i, reqs, _ in usage:
        known = columns.get(id(reqs.requests))
        if known is None:
            known = columns[id(reqs.requests)] = (
                reqs.requests,
                [(snapshot.resources(name), v) for name, v in reqs.requests.items()],
            )
        for column, v in known[1]:
            flat.append(i * r + column)
            values.append(v)
    added = np.asarray(values, dtype=np.int64)
    cpu = np.asarray([q.nonzero_cpu for _, q, _ in usage], dtype=np.int64)
    memory = np.asarray([q.nonzero_memory for _, q, _ in usage], dtype=np.int64)
    if not _sums_fit(snapshot, (added, cpu, memory)):
        _count_each(snapshot, usage)
        return
    nodes = np.asarray([i for i, _, _ in usage], dtype=np.int64)
    np.add.at(a["pod_count"], nodes, 1)
    np.add.at(a["requested"], np.asarray(flat, dtype=np.int64), added)
    np.add.at(a["nonzero_requested"], 2 * nodes, cpu)
    np.add.at(a["nonzero_requested"], 2 * nodes + 1, memory)


def _count_each(snapshot: Snapshot, usage: Sequence[tuple[int, CountedRequests, object]]) -> None:
    for i, reqs, _ in usage:
        _count(snapshot, i, reqs, 1)


# Below this, ``np.add.at`` adds counts in int64 with room to spare (float sums of the counts are
# exact to far less than the margin): a quarter of the range, as QUANTITY_MAX.
_SAFE_SUM = float(QUANTITY_MAX)


def _sums_fit(snapshot: Snapshot, added: Sequence[npt.NDArray[np.int64]]) -> bool:
    """Whether the sums stay exact with ``added`` counted all at once: every count within
    QUANTITY_MAX and the largest sum so far plus all of them below it too (always, but for
    absurd requests, which are then counted one by one with saturating sums)."""
    a = snapshot.arrays
    largest = max(float(a["requested"].max(initial=0)), float(a["nonzero_requested"].max(initial=0)))
    return largest + sum(float(np.abs(x).sum(dtype=np.float64)) for x in added) < _SAFE_SUM


def _add_ports(snapshot: Snapshot, new_ports: dict[int, list[tuple[int, int, int]]]) -> None:
    a = snapshot.arrays
    offsets = a["port_offsets"]
    rows = [
        list(
            zip(
                a["port_protocols"][offsets[i] : offsets[i + 1]].tolist(),
                a["port_ips"][offsets[i] : offsets[i + 1]].tolist(),
                a["port_ports"][offsets[i] : offsets[i + 1]].tolist(),
                strict=True,
            )
        )
        + new_ports.get(i, [])
        for i in range(snapshot.count)
    ]
    counts = np.array([len(row) for row in rows], dtype=np.int64)
    a["port_offsets"] = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    flat = [p for row in rows for p in row]
    a["port_protocols"] = np.array([p[0] for p in flat], dtype=np.uint8)
    a["port_ips"] = np.array([p[1] for p in flat], dtype=np.int32)
    a["port_ports"] = np.array([p[2] for p in flat], dtype=np.int32)
