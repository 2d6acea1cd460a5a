"""A cluster file: Kubernetes objects as ``kubectl get -o yaml`` prints them, sorted for scheduling.

Owns reading a file (a ``kind: List`` or multi-document YAML/JSON, read through
:mod:`ksched.config.documents`: refused above a size limit, with aliases bounded),
checking the shape of the objects scheduling reads besides pods (nodes, namespaces,
storage: a field of the wrong type is refused with the object and field named, as the
API server would refuse it; pods are checked per pod by the engine, which leaves a
malformed one pending with its reason), refusing a file with no objects, an unnamed
node or the same node or pod twice, splitting its pods into existing (``spec.nodeName`` set), pending (their
``schedulerName`` names a profile) and ignored, keeping the objects scheduling reads
(namespaces, PodGroups, disruption budgets, spreading selectors, storage), and
making any pod pending so ``explain`` can name it. Live explain
(:mod:`ksched.commands.live`) sorts the API server's objects with the same
:func:`sort_objects`; :mod:`ksched.engine.simulation` schedules the result.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ksched.config.documents import decode, load_documents, read_bounded
from ksched.engine.disruption_budgets import DisruptionBudget, disruption_budget
from ksched.engine.gangs import POD_GROUP_API, PodGroup, pod_group
from ksched.engine.spread_selectors import SELECTOR_OWNER_KINDS, SpreadSelectors
from ksched.engine.storage import STORAGE_KINDS, Storage
from ksched.errors import ClusterFileError, MalformedObjectError
from ksched.objects import Obj, meta, pod_key, scheduler_name, spec
from ksched.objects import name as object_name

# (apiVersion, kind) of the objects the volume plugins read.
STORAGE_OBJECT_KINDS = {(api_version, kind) for _, api_version, kind in STORAGE_KINDS}
# A cluster file above this is refused before parsing: it would not fit the
# machines ksched runs on, and the limit keeps a mistaken path (a device, a pipe) from hanging.
MAX_CLUSTER_FILE_BYTES = 512 * 1024 * 1024
# What scheduling reads of the objects other than pods, by kind: each field, where set, must
# have this shape (the API server's validation; a cluster file is not validated by anyone
# else). "labels" is a mapping of names to scalar values.
_SHAPES: dict[str, tuple[tuple[str, str], ...]] = {
    "Node": (
        ("metadata.labels", "labels"),
        ("metadata.annotations", "labels"),
        ("spec", "mapping"),
        ("spec.taints", "list of mappings"),
        ("spec.unschedulable", "boolean"),
        ("status", "mapping"),
        ("status.allocatable", "mapping"),
        ("status.images", "list of mappings"),
    ),
    "Namespace": (("metadata.labels", "labels"),),
    "PersistentVolumeClaim": (
        ("metadata.annotations", "labels"),
        ("spec", "mapping"),
        ("spec.resources", "mapping"),
        ("spec.resources.requests", "mapping"),
        ("spec.accessModes", "list of strings"),
        ("spec.volumeName", "string"),
        ("spec.storageClassName", "string"),
        ("spec.selector", "mapping"),
        ("status", "mapping"),
        ("status.phase", "string"),
    ),
    "PersistentVolume": (
        ("metadata.labels", "labels"),
        ("metadata.annotations", "labels"),
        ("spec", "mapping"),
        ("spec.capacity", "mapping"),
        ("spec.accessModes", "list of strings"),
        ("spec.claimRef", "mapping"),
        ("spec.nodeAffinity", "mapping"),
        ("spec.storageClassName", "string"),
        ("status", "mapping"),
        ("status.phase", "string"),
    ),
    "StorageClass": (
        ("metadata.annotations", "labels"),
        ("provisioner", "string"),
        ("volumeBindingMode", "string"),
        ("allowedTopologies", "list of mappings"),
    ),
    "CSINode": (("spec", "mapping"), ("spec.drivers", "list of mappings")),
}
_SCALARS = (str, int, float, bool)


@dataclass
class ClusterFile:
    nodes: list[Obj]
    existing: list[Obj]
    pending: list[Obj]
    ignored: int
    # Namespace -> labels (affinity terms' namespaceSelector) and PodGroups (gangs).
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    pod_groups: list[PodGroup] = field(default_factory=list)
    # Services and workload controllers (default topology spreading).
    spread_selectors: SpreadSelectors = field(default_factory=SpreadSelectors)
    # PodDisruptionBudgets (preemption prefers victims no budget protects).
    budgets: list[DisruptionBudget] = field(default_factory=list)
    # Unbound pods of other schedulers (counted in ``ignored``; ``explain`` can name them).
    others: list[Obj] = field(default_factory=list)
    # PersistentVolumes, PersistentVolumeClaims, StorageClasses and CSINodes (the volume plugins).
    storage: Storage = field(default_factory=Storage)


def _objects(doc: Any, source: str) -> Iterator[Obj]:
    """The objects of one document: itself, or the items of a ``List`` or a plain list
    (nested lists too, read iteratively: the parsers already bound their depth)."""
    stack = [doc]
    while stack:
        d = stack.pop()
        if d is None:
            continue
        if isinstance(d, list):
            stack.extend(reversed(d))
            continue
        if not isinstance(d, dict):
            raise ClusterFileError(f"{source}: expected Kubernetes objects, found {type(d).__name__}")
        if d.get("kind") == "List" or (str(d.get("kind", "")).endswith("List") and "items" in d):
            items = d.get("items") or []
            if not isinstance(items, list):
                raise ClusterFileError(f"{source}: {d.get('kind')}: items: must be a list of objects")
            stack.extend(reversed(items))
            continue
        yield d


def _shape_problem(value: Any, shape: str) -> str | None:
    """What is wrong with a field's value of the expected ``shape`` (None: nothing)."""
    if shape == "mapping" or shape == "labels":
        if not isinstance(value, dict):
            return "must be a mapping"
        if shape == "labels":
            bad = next((k for k, v in value.items() if not isinstance(v, _SCALARS)), None)
            if bad is not None:
                return f"{bad!r}: must be a string, found {type(value[bad]).__name__}"
        return None
    if shape.startswith("list"):
        element = {"list of mappings": dict, "list of strings": str}[shape]
        if not isinstance(value, list):
            return f"must be a {shape}"
        bad_index = next((i for i, v in enumerate(value) if not isinstance(v, element)), None)
        return None if bad_index is None else f"[{bad_index}]: must be a {shape[len('list of ') : -1]}"
    expected = {"string": str, "boolean": bool}[shape]
    return None if isinstance(value, expected) else f"must be a {shape}, found {type(value).__name__}"


def check_object(obj: Obj, kind: str, position: int) -> None:
    """Refuse a node, namespace or storage object whose name or a field scheduling reads
    has the wrong type (:data:`_SHAPES`); ``position`` (from 1) names an unnamed object."""
    label = kind.lower() if kind in ("Node", "Namespace") else kind
    if not isinstance(obj.get("metadata"), dict):
        raise MalformedObjectError(f"{label} (object {position})", "metadata", "must be a mapping")
    name = obj["metadata"].get("name")
    if not isinstance(name, str) or not name:
        raise MalformedObjectError(
            f"{label} (object {position})", "metadata.name", "must be a non-empty string"
        )
    if not isinstance(obj["metadata"].get("namespace", ""), str):
        raise MalformedObjectError(f"{label} {name}", "metadata.namespace", "must be a string")
    for path, shape in _SHAPES.get(kind, ()):
        value: Any = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            problem = _shape_problem(value, shape)
            if problem is not None:
                raise MalformedObjectError(f"{label} {name}", path, problem)


def read_objects(path: str | Path) -> list[Obj]:
    """The Kubernetes objects of a cluster file (at least one)."""
    source = str(path)
    data = read_bounded(path, MAX_CLUSTER_FILE_BYTES, "cluster file", ClusterFileError)
    docs = load_documents(decode(data, source, ClusterFileError), source, ClusterFileError)
    objects = [obj for doc in docs for obj in _objects(doc, source)]
    if not any(isinstance(obj.get("kind"), str) for obj in objects):
        raise ClusterFileError(f"{source}: no objects (expected Nodes and Pods, each with its kind)")
    return objects


def load_cluster(path: str | Path, scheduler_names: set[str]) -> ClusterFile:
    """Read a cluster file and sort its pods into existing, pending and ignored."""
    return sort_objects(read_objects(path), scheduler_names, str(path))


def sort_objects(objects: list[Obj], scheduler_names: set[str], source: str) -> ClusterFile:
    """Nodes, pods (existing, pending for a profile, ignored) and the objects scheduling reads."""
    nodes, existing, pending, others = [], [], [], []
    namespaces: dict[str, dict[str, str]] = {}
    groups: list[PodGroup] = []
    budgets: list[DisruptionBudget] = []
    selectors = SpreadSelectors()
    storage = Storage()
    ignored = 0
    seen: dict[str, set[str]] = {"node": set(), "pod": set()}
    for position, obj in enumerate(objects, 1):
        kind = obj.get("kind")
        storage_kind = (str(obj.get("apiVersion")), str(kind)) in STORAGE_OBJECT_KINDS
        if storage_kind or kind in ("Node", "Namespace"):
            try:
                check_object(obj, str(kind), position)
            except MalformedObjectError as err:
                raise ClusterFileError(f"{source}: {err}") from None
        if kind in ("Node", "Pod") and meta(obj).get("name"):
            key = object_name(obj) if kind == "Node" else pod_key(obj)
            if key in seen[kind.lower()]:
                raise ClusterFileError(f"{source}: {kind.lower()} {key} appears twice")
            seen[kind.lower()].add(key)
        if storage_kind:
            storage.update(str(kind), obj, deleted=False)
        elif kind == "Node":
            nodes.append(obj)
        elif kind == "Namespace":
            labels = meta(obj).get("labels") or {}
            namespaces[object_name(obj)] = {str(k): str(v) for k, v in labels.items()}
        elif (str(obj.get("apiVersion")), str(kind)) in SELECTOR_OWNER_KINDS:
            selectors.update(str(obj.get("apiVersion")), str(kind), obj)
        elif kind == "PodGroup" and obj.get("apiVersion") == POD_GROUP_API:
            try:
                groups.append(pod_group(obj))
            except MalformedObjectError as err:
                raise ClusterFileError(f"{source}: {err}") from None
        elif kind == "PodDisruptionBudget" and obj.get("apiVersion") == "policy/v1":
            try:
                budgets.append(disruption_budget(obj))
            except MalformedObjectError as err:
                raise ClusterFileError(f"{source}: {err}") from None
        elif kind == "Pod":
            if spec(obj).get("nodeName"):
                existing.append(obj)
            elif scheduler_name(obj) in scheduler_names:
                pending.append(obj)
            else:
                others.append(obj)
                ignored += 1
        else:
            ignored += 1
    return ClusterFile(
        nodes, existing, pending, ignored, namespaces, groups, selectors, budgets, others, storage
    )


def as_pending(cluster: ClusterFile, key: str, profile: str) -> tuple[ClusterFile, str | None]:
    """The cluster with pod ``key`` pending for a profile, so ``explain`` can name any pod:
    a bound pod is taken off its node (where would ksched place it now, without it), a pod
    of another scheduler gets ``profile``. Returns the cluster and a note saying what changed."""
    if any(pod_key(p) == key for p in cluster.pending):
        return cluster, None
    bound = next((p for p in cluster.existing if pod_key(p) == key), None)
    if bound is not None:
        name = scheduler_name(bound)
        if name not in {scheduler_name(p) for p in cluster.pending} | {profile}:
            name = profile
        unbound = {**bound, "spec": {**spec(bound), "schedulerName": name}}
        del unbound["spec"]["nodeName"]
        note = f"{key} is bound to {spec(bound)['nodeName']}: explained as if pending, without it ({name})"
        existing = [p for p in cluster.existing if p is not bound]
        return replace(cluster, existing=existing, pending=[*cluster.pending, unbound]), note
    other = next((p for p in cluster.others if pod_key(p) == key), None)
    if other is None:
        return cluster, None
    moved = {**other, "spec": {**spec(other), "schedulerName": profile}}
    note = f"{key} is for {scheduler_name(other)}: explained under profile {profile}"
    others = [p for p in cluster.others if p is not other]
    return replace(cluster, pending=[*cluster.pending, moved], others=others), note
