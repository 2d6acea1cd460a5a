"""The cluster's storage objects as the volume plugins read them, and what ksched assumed.

Owns :class:`Storage`: the PersistentVolumes, claims, StorageClasses and CSINodes
that the informers or a cluster file give (:data:`STORAGE_KINDS` lists them), plus
the bindings ksched has chosen (:class:`ClaimBinding`) and not yet seen confirmed;
the annotations of upstream's volume binder and PV controller; and the readers of
the fields both sides share (a claim's request, a volume's capacity, a StorageClass
name). Compiling a pending pod's claims for the engine is :mod:`~ksched.engine.volumes`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from ksched.engine.quantity import parse_quantity
from ksched.errors import QuantityError
from ksched.objects import Obj, meta, name, namespace, spec

# Annotations of upstream's volume binder and PV controller.
SELECTED_NODE = "volume.kubernetes.io/selected-node"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
# The objects the volume plugins read (list path, apiVersion, kind): run's informers,
# live explain's lists and cluster files read this list.
STORAGE_KINDS = (
    ("/api/v1/persistentvolumes", "v1", "PersistentVolume"),
    ("/api/v1/persistentvolumeclaims", "v1", "PersistentVolumeClaim"),
    ("/apis/storage.k8s.io/v1/storageclasses", "storage.k8s.io/v1", "StorageClass"),
    ("/apis/storage.k8s.io/v1/csinodes", "storage.k8s.io/v1", "CSINode"),
)


def _storage(resources: object, kind: str) -> Fraction:
    """``storage`` of a PV's capacity or a claim's requests (0 where absent or malformed)."""
    raw = resources.get("storage") if isinstance(resources, dict) else None
    if raw is None:
        return Fraction(0)
    try:
        return parse_quantity(raw)
    except QuantityError:
        return Fraction(-1) if kind == "capacity" else Fraction(0)


def object_field(obj: Obj, key: str) -> Obj:
    """``obj[key]`` where it is an object, else empty (cluster files are not validated)."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def claim_request(claim: Obj) -> Fraction:
    return _storage(object_field(spec(claim), "resources").get("requests"), "request")


def volume_capacity(pv: Obj) -> Fraction:
    return _storage(spec(pv).get("capacity"), "capacity")


def storage_class_of(obj: Obj) -> str:
    """A claim's or a volume's StorageClass (upstream ``GetPersistentVolumeClaimClass`` and
    ``GetPersistentVolumeClass`` read both the same way): the beta annotation, else
    ``storageClassName``."""
    ann = meta(obj).get("annotations") or {}
    if BETA_STORAGE_CLASS in ann:
        return str(ann[BETA_STORAGE_CLASS])
    return str(spec(obj).get("storageClassName") or "")


@dataclass
class Storage:
    """PersistentVolumes (by name), claims (``namespace/name``), StorageClasses and
    CSINodes (by name) as the informers or a cluster file give them, and what
    ksched assumed: volumes it chose for a claim and claims it selected a node
    for, until the watch shows the API server has them (or the binder forgets them)."""

    volumes: dict[str, Obj] = field(default_factory=dict)
    claims: dict[str, Obj] = field(default_factory=dict)
    classes: dict[str, Obj] = field(default_factory=dict)
    csi_nodes: dict[str, Obj] = field(default_factory=dict)
    # PV name -> the claim key ksched bound it to.
    assumed_volumes: dict[str, str] = field(default_factory=dict)
    # Claim key -> the node ksched selected for provisioning it.
    assumed_selected: dict[str, str] = field(default_factory=dict)

    def update(self, kind: str, obj: Obj, deleted: bool) -> None:
        """Apply one object of ``kind`` (PersistentVolume, PersistentVolumeClaim, StorageClass, CSINode)."""
        table, key = {
            "PersistentVolume": (self.volumes, name(obj)),
            "PersistentVolumeClaim": (self.claims, f"{namespace(obj)}/{name(obj)}"),
            "StorageClass": (self.classes, name(obj)),
            "CSINode": (self.csi_nodes, name(obj)),
        }[kind]
        if deleted:
            table.pop(key, None)
        else:
            table[key] = obj
        if kind == "PersistentVolume" and (deleted or spec(obj).get("claimRef")):
            self.assumed_volumes.pop(key, None)
        if kind == "PersistentVolumeClaim" and (deleted or spec(obj).get("volumeName")):
            self.assumed_selected.pop(key, None)

    def assume(self, bindings: Sequence[ClaimBinding], node: str) -> None:
        for b in bindings:
            if b.volume is None:
                self.assumed_selected[b.claim] = node
            else:
                self.assumed_volumes[b.volume] = b.claim

    def forget(self, bindings: Sequence[ClaimBinding]) -> None:
        for b in bindings:
            if b.volume is None:
                self.assumed_selected.pop(b.claim, None)
            else:
                self.assumed_volumes.pop(b.volume, None)

    def claim_ref(self, pv: Obj) -> str | None:
        """The claim a volume is bound or assumed to (``namespace/name``), None if available."""
        ref = spec(pv).get("claimRef")
        if isinstance(ref, dict):
            return f"{ref.get('namespace') or 'default'}/{ref.get('name', '')}"
        return self.assumed_volumes.get(name(pv))

    def selected_node(self, key: str, claim: Obj) -> str | None:
        ann = meta(claim).get("annotations") or {}
        return str(ann[SELECTED_NODE]) if SELECTED_NODE in ann else self.assumed_selected.get(key)


@dataclass(frozen=True)
class ClaimBinding:
    """What binding a placed pod does for one unbound claim: bind ``volume``, or provision (None)."""

    claim: str
    volume: str | None
