"""A cluster file: Kubernetes objects as ``kubectl get -o yaml`` prints them, sorted for scheduling.

Owns reading a file (a ``kind: List`` or multi-document YAML/JSON, read through
:mod:`ksched.config.documents`: refused above a size limit, with aliases bounded),
splitting its pods into existing (``spec.nodeName`` set), pending (their
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

# (apiVersion, kind) of the objects the volume plugins read.
STORAGE_OBJECT_KINDS = {(api_version, kind) for _, api_version, kind in STORAGE_KINDS}
# A cluster file above this is refused before parsing: it would not fit the
# machines ksched runs on, and the limit keeps a mistaken path (a device, a pipe) from hanging.
MAX_CLUSTER_FILE_BYTES = 512 * 1024 * 1024


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


def read_objects(path: str | Path) -> list[Obj]:
    """The Kubernetes objects of a cluster file."""
    source = str(path)
    data = read_bounded(path, MAX_CLUSTER_FILE_BYTES, "cluster file", ClusterFileError)
    docs = load_documents(decode(data, source, ClusterFileError), source, ClusterFileError)
    return [obj for doc in docs for obj in _objects(doc, source)]


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
    for obj in objects:
        kind = obj.get("kind")
        storage_kind = (str(obj.get("apiVersion")), str(kind)) in STORAGE_OBJECT_KINDS
        if storage_kind:
            storage.update(str(kind), obj, deleted=False)
        elif kind == "Node":
            nodes.append(obj)
        elif kind == "Namespace":
            labels = meta(obj).get("labels") or {}
            namespaces[str(meta(obj).get("name", ""))] = {str(k): str(v) for k, v in labels.items()}
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
