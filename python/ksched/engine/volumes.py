"""A pending pod's PersistentVolumeClaims as upstream's VolumeBinding and VolumeZone read them.

Owns the two plugins' PreFilter (a missing claim, an unbound Immediate claim, a
missing volume: a message for the whole pod, with upstream's wording), and the
compilation of a batch's claims into the engine's ``VolumeArrays``: per claim its
bound volume, or the volumes that could serve it on some node (upstream's
``FindMatchingVolume`` without the node, smallest first), whether its class
provisions and where (``allowedTopologies``). It reads the cluster's storage
objects from :class:`~ksched.engine.storage.Storage`. The engine decides per
node; nothing here looks at nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from ksched import _core
from ksched.core_types import VolumeArrays
from ksched.engine.pod_level import PodClaim
from ksched.engine.selectors import Requirement, Term, label_selector, node_selector_term, selector_matches
from ksched.engine.storage import (
    BIND_COMPLETED,
    ClaimBinding,
    Storage,
    claim_request,
    object_field,
    storage_class_of,
    volume_capacity,
)
from ksched.errors import MalformedObjectError
from ksched.objects import Obj, meta, name, spec

# A StorageClass that cannot provision (local volumes).
NO_PROVISIONER = "kubernetes.io/no-provisioner"
# VolumeZone's topology labels, in upstream's order, and the GA key of each beta one.
ZONE_LABELS = (
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
)
_GA_LABEL = {ZONE_LABELS[0]: ZONE_LABELS[2], ZONE_LABELS[1]: ZONE_LABELS[3]}
_CODES = _core.VOLUME_CODES


@dataclass(frozen=True)
class ClaimPlan:
    """One claim of a pending pod as the engine needs it."""

    key: str
    # The volume it is bound to ("" when unbound); whether that volume is missing.
    bound_to: str = ""
    missing: bool = False
    selected_node: str | None = None
    candidates: tuple[str, ...] = ()
    provisioner: bool = False
    topology: tuple[Term, ...] = ()


@dataclass(frozen=True)
class PodVolumes:
    """A pending pod's claims in upstream's order (bound, selected, then by increasing
    request) and its bound volumes' zone constraints (label key, alternative key, values)."""

    claims: tuple[ClaimPlan, ...] = ()
    zones: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    # VolumeRestrictions: its ReadWriteOncePod claims.
    rwop: tuple[str, ...] = ()
    # NodeVolumeLimits: the (volume, CSI driver) pairs it attaches.
    attach: tuple[tuple[str, str], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.claims and not self.zones and not self.rwop and not self.attach


# A pod without claims.
NO_VOLUMES = PodVolumes()


def _is_bound(claim: Obj) -> bool:
    """Upstream ``isPVCFullyBound``: a volume name and the bind-completed annotation."""
    return bool(spec(claim).get("volumeName")) and BIND_COMPLETED in (meta(claim).get("annotations") or {})


def _delay_binding(storage: Storage, claim: Obj) -> bool:
    cls = storage.classes.get(storage_class_of(claim))
    return cls is not None and cls.get("volumeBindingMode") == "WaitForFirstConsumer"


def _claim_errors(storage: Storage, claims: Sequence[PodClaim]) -> str | None:
    """VolumeBinding's PreFilter on the claims themselves (upstream ``podHasPVCs``)."""
    for c in claims:
        claim = storage.claims.get(c.key)
        if claim is None:
            if c.ephemeral:
                return (
                    f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{c.name}"'
                )
            return f'persistentvolumeclaim "{c.name}" not found'
        if (claim.get("status") or {}).get("phase") == "Lost":
            return (
                f'persistentvolumeclaim "{c.name}" bound to non-existent persistentvolume '
                f'"{spec(claim).get("volumeName", "")}"'
            )
        if meta(claim).get("deletionTimestamp"):
            return f'persistentvolumeclaim "{c.name}" is being deleted'
    return None


def _strings(values: object) -> tuple[str, ...]:
    """A list of label values; anything else has none (so it matches no node)."""
    return tuple(str(v) for v in values) if isinstance(values, list) else ()


def _topology(cls: Obj) -> tuple[Term, ...]:
    """A StorageClass's ``allowedTopologies`` as node selector terms (each expression an ``In``)."""
    out = []
    for t in cls.get("allowedTopologies") or ():
        exprs = t.get("matchLabelExpressions") if isinstance(t, dict) else None
        out.append(
            tuple(
                Requirement(str(e.get("key", "")), "In", _strings(e.get("values")))
                for e in exprs or ()
                if isinstance(e, dict)
            )
        )
    return tuple(out)


def _candidates(storage: Storage, key: str, claim: Obj) -> tuple[str, ...]:
    """Upstream ``FindMatchingVolume`` without the node: the volume pre-bound to the claim
    alone, else every available volume that could serve it, smallest first (then by name)."""
    request = claim_request(claim)
    wanted_class = storage_class_of(claim)
    claim_spec = spec(claim)
    modes = set(claim_spec.get("accessModes") or ())
    mode = claim_spec.get("volumeMode") or "Filesystem"
    try:
        selector = label_selector(key, "spec.selector", claim_spec.get("selector"))
    except MalformedObjectError:
        return ()
    fits: list[tuple[Fraction, str]] = []
    for pv_name in sorted(storage.volumes):
        pv = storage.volumes[pv_name]
        pv_spec = spec(pv)
        ref = storage.claim_ref(pv)
        if ref is not None and ref != key:
            continue
        capacity = volume_capacity(pv)
        if capacity < request or (pv_spec.get("volumeMode") or "Filesystem") != mode:
            continue
        if pv_spec.get("volumeAttributesClassName") or claim_spec.get("volumeAttributesClassName"):
            continue
        if meta(pv).get("deletionTimestamp"):
            continue
        if ref == key:
            return (pv_name,)
        if (pv.get("status") or {}).get("phase") != "Available":
            continue
        if claim_spec.get("selector") is not None and not selector_matches(
            selector, meta(pv).get("labels") or {}
        ):
            continue
        if storage_class_of(pv) != wanted_class or not modes <= set(pv_spec.get("accessModes") or ()):
            continue
        fits.append((capacity, pv_name))
    return tuple(n for _, n in sorted(fits))


def volume_affinity(pv: Obj) -> tuple[Term, ...] | None:
    """A volume's required node affinity terms (ORed), None where it has none.
    A malformed one admits no node."""
    affinity = spec(pv).get("nodeAffinity")
    if affinity is None:
        return None
    if not isinstance(affinity, dict):
        return ()
    required = affinity.get("required")
    if required is None:
        return None
    try:
        return tuple(
            node_selector_term(name(pv), f"spec.nodeAffinity.required.nodeSelectorTerms[{i}]", t)
            for i, t in enumerate(required.get("nodeSelectorTerms") or ())
        )
    except (MalformedObjectError, AttributeError):
        return ()


def attachable(storage: Storage, key: str) -> tuple[str, str] | None:
    """NodeVolumeLimits' unique name and CSI driver of a claim's volume (upstream
    ``getCSIDriverInfo``): the bound volume's CSI driver and handle, or for a claim
    without a volume its class's provisioner; None where neither is known."""
    claim = storage.claims.get(key)
    if claim is None:
        return None
    pv = storage.volumes.get(str(spec(claim).get("volumeName") or ""))
    if pv is not None:
        csi = spec(pv).get("csi")
        if not isinstance(csi, dict) or not csi.get("driver") or not csi.get("volumeHandle"):
            return None
        return f"{csi['driver']}/{csi['volumeHandle']}", str(csi["driver"])
    cls = storage.classes.get(storage_class_of(claim))
    if cls is None or not cls.get("provisioner"):
        return None
    provisioner = str(cls["provisioner"])
    return f"{provisioner}/-{key}", provisioner


def node_volume_limits(storage: Storage, node: str) -> list[tuple[str, int]]:
    """A node's CSINode attach limits: (driver, ``allocatable.count``)."""
    csi_node = storage.csi_nodes.get(node)
    out = []
    for d in spec(csi_node).get("drivers") or () if csi_node is not None else ():
        count = object_field(d, "allocatable").get("count") if isinstance(d, dict) else None
        if isinstance(count, int) and not isinstance(count, bool):
            out.append((str(d.get("name", "")), count))
    return out


def pod_volumes(
    storage: Storage,
    claims: Sequence[PodClaim],
    *,
    restrictions: bool,
    binding: bool,
    zone: bool,
    limits: bool = False,
) -> PodVolumes | str:
    """A pending pod's claims for the engine, or the PreFilter message that rejects it.
    ``restrictions``, ``binding`` and ``zone``: whether VolumeRestrictions,
    VolumeBinding and VolumeZone run (their PreFilters run in that order)."""
    if not claims or not (restrictions or binding or zone or limits):
        return NO_VOLUMES
    attach = tuple(a for a in (attachable(storage, c.key) for c in claims) if a is not None) if limits else ()
    rwop: list[str] = []
    if restrictions:
        for c in claims:
            if c.ephemeral:
                continue
            claim = storage.claims.get(c.key)
            if claim is None:
                return f'persistentvolumeclaim "{c.name}" not found'
            if "ReadWriteOncePod" in (spec(claim).get("accessModes") or ()):
                rwop.append(c.key)
    if binding:
        error = _claim_errors(storage, claims)
        if error is not None:
            return error
    elif not zone:
        return PodVolumes(rwop=tuple(rwop), attach=attach)
    plans: list[ClaimPlan] = []
    selected: list[ClaimPlan] = []
    unbound: list[tuple[Fraction, int, ClaimPlan]] = []
    zones: list[tuple[str, str, tuple[str, ...]]] = []
    for c in claims:
        claim = storage.claims.get(c.key)
        if claim is None:  # VolumeZone alone (VolumeBinding off)
            return f'persistentvolumeclaim "{c.name}" not found'
        volume_name = str(spec(claim).get("volumeName") or "")
        if binding and not _is_bound(claim):
            if volume_name or not _delay_binding(storage, claim):
                return "pod has unbound immediate PersistentVolumeClaims"
            cls = storage.classes[storage_class_of(claim)]
            provisioner = str(cls.get("provisioner") or "")
            plan = ClaimPlan(
                c.key,
                selected_node=storage.selected_node(c.key, claim),
                candidates=_candidates(storage, c.key, claim),
                provisioner=provisioner not in ("", NO_PROVISIONER),
                topology=_topology(cls),
            )
            if plan.selected_node is not None:
                selected.append(plan)
            else:
                unbound.append((claim_request(claim), len(unbound), plan))
        elif binding:
            plans.append(ClaimPlan(c.key, bound_to=volume_name, missing=volume_name not in storage.volumes))
        if zone:
            why = _zone_constraints(storage, c, claim, zones)
            if why is not None:
                return why
    plans.extend(selected)
    plans.extend(plan for _, _, plan in sorted(unbound, key=lambda t: (t[0], t[1])))
    return PodVolumes(tuple(plans), tuple(zones), tuple(rwop), attach)


def _zone_constraints(
    storage: Storage, c: PodClaim, claim: Obj, out: list[tuple[str, str, tuple[str, ...]]]
) -> str | None:
    """VolumeZone's PreFilter for one claim (upstream ``getPVbyPod``): its bound volume's
    zone constraints into ``out``, or the message that rejects the pod."""
    volume_name = str(spec(claim).get("volumeName") or "")
    if not volume_name:
        class_name = storage_class_of(claim)
        if not class_name:
            return "PersistentVolumeClaim had no pv name and storageClass name"
        cls = storage.classes.get(class_name)
        if cls is None:
            return f'storageclass.storage.k8s.io "{class_name}" not found'
        if cls.get("volumeBindingMode") == "WaitForFirstConsumer":
            return None
        return "PersistentVolume had no name"
    pv = storage.volumes.get(volume_name)
    if pv is None:
        return f'persistentvolume "{volume_name}" not found'
    labels = meta(pv).get("labels") or {}
    for key in ZONE_LABELS:
        if key in labels:
            values = tuple(sorted(v for v in str(labels[key]).split("__") if v))
            out.append((key, _GA_LABEL.get(key, key), values))
    return None


class VolumeColumns:
    """The batch's claims compiled into ``VolumeArrays``; volume node affinity and
    provisioning topology become terms of the class table (``add_term``)."""

    def __init__(
        self,
        storage: Storage,
        node_index: Mapping[str, int],
        intern: Callable[[str], int],
        add_term: Callable[[Term], int],
        users: Callable[[str], list[int]],
        node_names: Sequence[str] = (),
        claims_on_nodes: Callable[[], dict[str, list[int]]] = dict,
    ) -> None:
        self.storage = storage
        self.node_index = node_index
        self.intern = intern
        self.add_term = add_term
        self.pv_index: dict[str, int] = {}
        self.pv_names: list[str] = []
        self.pv_has_affinity: list[int] = []
        self.pv_term_offsets = [0]
        self.pv_terms: list[int] = []
        self.claim_offsets = [0]
        self.claim_keys: list[str] = []
        self.claim_pvs: list[int] = []
        self.claim_selected: list[int] = []
        self.candidate_offsets = [0]
        self.candidates: list[int] = []
        self.provisionable: list[int] = []
        self.topology_offsets = [0]
        self.topology_terms: list[int] = []
        self.zone_offsets = [0]
        self.zone_keys: list[int] = []
        self.zone_alt_keys: list[int] = []
        self.zone_value_offsets = [0]
        self.zone_values: list[int] = []
        self.users = users
        self.rwop_ids: dict[str, int] = {}
        self.rwop_offsets = [0]
        self.rwop_claims: list[int] = []
        self.rwop_user_offsets = [0]
        self.rwop_users: list[int] = []
        self.attach_offsets = [0]
        self.attach_volumes: list[int] = []
        self.attach_drivers: list[int] = []
        self.node_names = node_names
        self.claims_on_nodes = claims_on_nodes
        self.any = False

    def _pv(self, pv_name: str) -> int:
        i = self.pv_index.get(pv_name)
        if i is None:
            i = self.pv_index[pv_name] = len(self.pv_names)
            self.pv_names.append(pv_name)
            affinity = volume_affinity(self.storage.volumes[pv_name])
            self.pv_has_affinity.append(int(affinity is not None))
            self.pv_terms.extend(self.add_term(t) for t in affinity or ())
            self.pv_term_offsets.append(len(self.pv_terms))
        return i

    def add(self, pod: PodVolumes) -> None:
        """The next pending pod's row."""
        self.any = self.any or not pod.empty
        for plan in pod.claims:
            self.claim_keys.append(plan.key)
            if plan.bound_to:
                self.claim_pvs.append(_CODES["missing_pv"] if plan.missing else self._pv(plan.bound_to))
            else:
                self.claim_pvs.append(_CODES["unbound"])
            if plan.selected_node is None:
                self.claim_selected.append(_CODES["no_selected_node"])
            else:
                self.claim_selected.append(self.node_index.get(plan.selected_node, _CODES["unknown_node"]))
            self.candidates.extend(self._pv(n) for n in plan.candidates)
            self.candidate_offsets.append(len(self.candidates))
            self.provisionable.append(int(plan.provisioner))
            self.topology_terms.extend(self.add_term(t) for t in plan.topology)
            self.topology_offsets.append(len(self.topology_terms))
        self.claim_offsets.append(len(self.claim_keys))
        for key, alt, values in pod.zones:
            self.zone_keys.append(self.intern(key))
            self.zone_alt_keys.append(self.intern(alt))
            self.zone_values.extend(self.intern(v) for v in values)
            self.zone_value_offsets.append(len(self.zone_values))
        self.zone_offsets.append(len(self.zone_keys))
        for key in pod.rwop:
            c = self.rwop_ids.get(key)
            if c is None:
                c = self.rwop_ids[key] = len(self.rwop_ids)
                self.rwop_users.extend(self.users(key))
                self.rwop_user_offsets.append(len(self.rwop_users))
            self.rwop_claims.append(c)
        self.rwop_offsets.append(len(self.rwop_claims))
        for volume, driver in pod.attach:
            self.attach_volumes.append(self.intern(volume))
            self.attach_drivers.append(self.intern(driver))
        self.attach_offsets.append(len(self.attach_volumes))

    def _node_tables(self) -> dict[str, list[int]]:
        """NodeVolumeLimits' per-node limits and attached volumes, or empty tables
        when no node has a limit (or no pending pod attaches a volume)."""
        limits = [node_volume_limits(self.storage, n) for n in self.node_names] if self.attach_volumes else []
        if not any(limits):
            return {
                k: []
                for k in (
                    "limit_offsets",
                    "limit_drivers",
                    "limit_counts",
                    "attached_offsets",
                    "attached_volumes",
                    "attached_drivers",
                )
            }
        out: dict[str, list[int]] = {
            k: [] for k in ("limit_drivers", "limit_counts", "attached_volumes", "attached_drivers")
        }
        out["limit_offsets"] = [0]
        for node_limits in limits:
            out["limit_drivers"].extend(self.intern(d) for d, _ in node_limits)
            out["limit_counts"].extend(c for _, c in node_limits)
            out["limit_offsets"].append(len(out["limit_drivers"]))
        attached: list[dict[str, str]] = [{} for _ in self.node_names]
        for claim, nodes in self.claims_on_nodes().items():
            a = attachable(self.storage, claim)
            if a is not None:
                for node in nodes:
                    if 0 <= node < len(attached):
                        attached[node][a[0]] = a[1]
        out["attached_offsets"] = [0]
        for on_node in attached:
            for volume, driver in sorted(on_node.items()):
                out["attached_volumes"].append(self.intern(volume))
                out["attached_drivers"].append(self.intern(driver))
            out["attached_offsets"].append(len(out["attached_volumes"]))
        return out

    def arrays(self) -> VolumeArrays | None:
        """The engine's ``pods["volumes"]``, or None when no pod of the batch has a claim."""
        if not self.any:
            return None

        def i64(v: list[int]) -> npt.NDArray[np.int64]:
            return np.asarray(v, dtype=np.int64)

        def i32(v: list[int]) -> npt.NDArray[np.int32]:
            return np.asarray(v, dtype=np.int32)

        nodes = self._node_tables()

        return {
            "pvs": len(self.pv_names),
            "pv_has_affinity": np.asarray(self.pv_has_affinity, dtype=np.uint8),
            "pv_term_offsets": i64(self.pv_term_offsets),
            "pv_terms": i64(self.pv_terms),
            "claim_offsets": i64(self.claim_offsets),
            "claim_pvs": i64(self.claim_pvs),
            "claim_selected_nodes": i64(self.claim_selected),
            "candidate_offsets": i64(self.candidate_offsets),
            "candidates": i64(self.candidates),
            "provisionable": np.asarray(self.provisionable, dtype=np.uint8),
            "topology_offsets": i64(self.topology_offsets),
            "topology_terms": i64(self.topology_terms),
            "zone_label_keys": i32([self.intern(k) for k in ZONE_LABELS]),
            "zone_offsets": i64(self.zone_offsets),
            "zone_keys": i32(self.zone_keys),
            "zone_alt_keys": i32(self.zone_alt_keys),
            "zone_value_offsets": i64(self.zone_value_offsets),
            "zone_values": i32(self.zone_values),
            "rwop_offsets": i64(self.rwop_offsets),
            "rwop_claims": i64(self.rwop_claims),
            "rwop_user_offsets": i64(self.rwop_user_offsets),
            "rwop_users": i64(self.rwop_users),
            "limit_offsets": i64(nodes["limit_offsets"]),
            "limit_drivers": i32(nodes["limit_drivers"]),
            "limit_counts": i64(nodes["limit_counts"]),
            "attached_offsets": i64(nodes["attached_offsets"]),
            "attached_volumes": i32(nodes["attached_volumes"]),
            "attached_drivers": i32(nodes["attached_drivers"]),
            "attach_offsets": i64(self.attach_offsets),
            "attach_volumes": i32(self.attach_volumes),
            "attach_drivers": i32(self.attach_drivers),
        }

    def bindings(self, row: int, chosen: Sequence[int]) -> tuple[ClaimBinding, ...]:
        """A placed row's unbound claims with the volume each binds (None: provision),
        from the engine's ``Outcome["volumes"]`` entries of that row."""
        lo = self.claim_offsets[row]
        out = []
        for k, pv in enumerate(chosen):
            if self.claim_pvs[lo + k] != _CODES["unbound"]:
                continue
            out.append(ClaimBinding(self.claim_keys[lo + k], None if pv < 0 else self.pv_names[pv]))
        return tuple(out)
