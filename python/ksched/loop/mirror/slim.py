"""What the informers keep of each watched object.

An informer stores the projection of each object that ksched reads, never the
whole object: an update that changes nothing ksched reads then compares equal
and costs no work, and the cache holds a fraction of the cluster's bytes.
"""

from __future__ import annotations

from typing import Any

from ksched import _core
from ksched.engine.storage import BETA_STORAGE_CLASS, BIND_COMPLETED, BOUND_BY_CONTROLLER, SELECTED_NODE
from ksched.objects import INITIAL_EVENTS_END, Obj


def _pick(obj: Any, keys: tuple[str, ...]) -> Obj:
    return {k: obj[k] for k in keys if k in obj} if isinstance(obj, dict) else {}


# What a pod's projection keeps, defined once beside its Rust decoder (``decode_pod_event``).
_POD_META = tuple(_core.POD_PROJECTION["metadata"])
_POD_SPEC = tuple(_core.POD_PROJECTION["spec"])
_POD_CONDITIONS = tuple(_core.POD_PROJECTION["conditions"])
_CONTAINER = tuple(_core.POD_PROJECTION["container"])
# A condition's fields; PodScheduled's lastTransitionTime is the pod's bind time (load estimate).
_CONDITION = ("type", "status", "lastTransitionTime", "reason", "message")
_NODE_META = ("name", "uid", "labels", "annotations")


def slim_pod(pod: Obj) -> Obj:
    """The fields of a pod ksched reads; everything else (and resourceVersion) is dropped,
    so an update that changes nothing ksched reads compares equal."""
    s = pod.get("spec") or {}
    spec = _pick(s, _POD_SPEC)
    spec["containers"] = [_pick(c, _CONTAINER) for c in s.get("containers") or []]
    if s.get("initContainers"):
        spec["initContainers"] = [_pick(c, _CONTAINER) for c in s["initContainers"]]
    # Image volumes (ImageLocality) and the volumes that use a claim (the volume
    # plugins), each with only what names the image or the claim.
    volumes: list[Obj] = []
    for v in s.get("volumes") or []:
        if not isinstance(v, dict):
            continue
        if v.get("image"):
            volumes.append(_pick(v, ("name", "image")))
        elif "persistentVolumeClaim" in v:
            volumes.append(_pick(v, ("name", "persistentVolumeClaim")))
        elif "ephemeral" in v:
            volumes.append({"name": v.get("name"), "ephemeral": {}})
    if volumes:
        spec["volumes"] = volumes
    status = pod.get("status") or {}
    slim_status: Obj = {"phase": status.get("phase")}
    conditions = [c for c in status.get("conditions") or [] if c.get("type") in _POD_CONDITIONS]
    if conditions:
        slim_status["conditions"] = [_pick(c, _CONDITION) for c in conditions]
    # In-place resize: what the kubelet allocated and actuated counts while a resize is pending.
    for list_field in ("containerStatuses", "initContainerStatuses"):
        resized = [
            _pick(cs, ("name", "allocatedResources", "resources"))
            for cs in status.get(list_field) or []
            if cs.get("allocatedResources") or cs.get("resources")
        ]
        if resized:
            slim_status[list_field] = resized
    for pod_level in ("resources", "allocatedResources"):
        if status.get(pod_level):
            slim_status[pod_level] = status[pod_level]
    if status.get("nominatedNodeName"):
        slim_status["nominatedNodeName"] = status["nominatedNodeName"]
    if status.get("startTime"):
        slim_status["startTime"] = status["startTime"]
    metadata = _pick(pod.get("metadata"), _POD_META)
    # Only ksched's own annotations (opt-outs, markers): others can be large and change often.
    # And the one that ends a streamed list's initial events, on its bookmark.
    ours = {
        k: v
        for k, v in ((pod.get("metadata") or {}).get("annotations") or {}).items()
        if k.startswith("ksched.io/") or k == INITIAL_EVENTS_END
    }
    if ours:
        metadata["annotations"] = ours
    return {"metadata": metadata, "spec": spec, "status": slim_status}


# A pod watch line read in one pass into (type, resourceVersion, ``slim_pod`` of the object, its
# Status fields): what ``orjson.loads`` and ``slim_pod`` make of it, without building the fields
# ``slim_pod`` drops (about 40 % of the pod informer's parsing; ``tests/unit/test_watch_decode.py``
# holds it equal to ``slim_pod``).
decode_pod_event = _core.decode_pod_event
decode_pod_frame = _core.decode_pod_frame
# A page of a pod list, each item as ``decode_pod_event`` reads it (the relist).
decode_pod_list = _core.decode_pod_list
# One page of a protobuf pod list, as ``decode_pod_list`` reads a JSON page.
decode_pod_list_proto = _core.decode_pod_list_proto


def slim_namespace(ns: Obj) -> Obj:
    """Name and labels: what affinity terms' namespaceSelector reads."""
    return {"metadata": _pick(ns.get("metadata"), ("name", "labels"))}


def slim_pod_group(group: Obj) -> Obj:
    """Identity and spec (minMember, scheduleTimeoutSeconds): status changes compare equal."""
    return {
        "metadata": _pick(group.get("metadata"), ("name", "namespace", "uid")),
        "spec": group.get("spec") or {},
    }


def slim_selector_owner(obj: Obj) -> Obj:
    """Identity and selector of a Service or workload controller (default topology spreading)."""
    return {
        "metadata": _pick(obj.get("metadata"), ("name", "namespace")),
        "spec": {"selector": (obj.get("spec") or {}).get("selector")},
    }


def slim_budget(pdb: Obj) -> Obj:
    """Selector and the disruptions allowed: what preemption reads of a PodDisruptionBudget."""
    status = pdb.get("status") or {}
    return {
        "metadata": _pick(pdb.get("metadata"), ("name", "namespace")),
        "spec": {"selector": (pdb.get("spec") or {}).get("selector")},
        "status": {
            "disruptionsAllowed": status.get("disruptionsAllowed", 0),
            "disruptedPods": status.get("disruptedPods") or {},
        },
    }


def slim_node(node: Obj) -> Obj:
    """The fields of a node ksched reads: heartbeats and condition updates compare equal."""
    status = node.get("status") or {}
    return {
        "metadata": _pick(node.get("metadata"), _NODE_META),
        "spec": _pick(node.get("spec"), ("unschedulable", "taints")),
        "status": {
            "allocatable": status.get("allocatable") or {},
            # Prometheus series name nodes by instance address as often as by name.
            "addresses": status.get("addresses") or [],
            # ImageLocality reads the names and sizes of the node's images.
            "images": [_pick(i, ("names", "sizeBytes")) for i in status.get("images") or []],
        },
    }


_VOLUME_ANNOTATIONS = (BETA_STORAGE_CLASS, SELECTED_NODE, BIND_COMPLETED, BOUND_BY_CONTROLLER)


def _volume_meta(obj: Obj) -> Obj:
    m = obj.get("metadata") or {}
    out = _pick(m, ("name", "namespace", "uid", "labels", "deletionTimestamp"))
    annotations = {k: v for k, v in (m.get("annotations") or {}).items() if k in _VOLUME_ANNOTATIONS}
    if annotations:
        out["annotations"] = annotations
    return out


def slim_volume(pv: Obj) -> Obj:
    """What VolumeBinding and VolumeZone read of a PersistentVolume."""
    return {
        "metadata": _volume_meta(pv),
        "spec": _pick(
            pv.get("spec"),
            (
                "capacity",
                "accessModes",
                "storageClassName",
                "volumeMode",
                "volumeAttributesClassName",
                "claimRef",
                "nodeAffinity",
                "csi",
            ),
        ),
        "status": _pick(pv.get("status"), ("phase",)),
    }


def slim_claim(claim: Obj) -> Obj:
    """What VolumeBinding and VolumeZone read of a PersistentVolumeClaim."""
    return {
        "metadata": _volume_meta(claim),
        "spec": _pick(
            claim.get("spec"),
            (
                "accessModes",
                "resources",
                "selector",
                "storageClassName",
                "volumeMode",
                "volumeName",
                "volumeAttributesClassName",
            ),
        ),
        "status": _pick(claim.get("status"), ("phase",)),
    }


def slim_storage_class(cls: Obj) -> Obj:
    """Provisioner, binding mode and allowed topologies of a StorageClass."""
    return {
        "metadata": _pick(cls.get("metadata"), ("name",)),
        **_pick(cls, ("provisioner", "volumeBindingMode", "allowedTopologies")),
    }


def slim_csi_node(csi_node: Obj) -> Obj:
    """The drivers of a CSINode (NodeVolumeLimits reads their allocatable counts)."""
    return {
        "metadata": _pick(csi_node.get("metadata"), ("name",)),
        "spec": _pick(csi_node.get("spec"), ("drivers",)),
    }
