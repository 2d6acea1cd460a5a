"""VolumeBinding and VolumeZone through the engine: each case a small cluster of
nodes, volumes, claims and classes, and the placement or upstream's message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ksched.commands.cli import main
from ksched.config import Config, parse_config
from ksched.engine import Engine
from ksched.engine.placements import Placement, commit_placements
from ksched.engine.snapshot import build_snapshot
from ksched.engine.storage import SELECTED_NODE, ClaimBinding, Storage
from ksched.engine.volumes import node_volume_limits
from ksched.errors import ConfigError
from tests.conftest import failed_scheduling, no_victims, node, not_helpful, pod

Obj = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"


def storage_class(
    name: str,
    mode: str = "WaitForFirstConsumer",
    provisioner: str = "kubernetes.io/no-provisioner",
    **extra: Any,
) -> Obj:
    return {"metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": mode, **extra}


def local_pv(name: str, host: str, size: str = "10Gi", cls: str = "local", **labels: str) -> Obj:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": cls,
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}
                            ]
                        }
                    ]
                }
            },
        },
        "status": {"phase": "Available"},
    }


def claim(name: str, cls: str = "local", size: str = "5Gi", volume: str = "", **annotations: str) -> Obj:
    c: Obj = {
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {
            "storageClassName": cls,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
        },
        "status": {"phase": "Pending"},
    }
    if volume:
        c["spec"]["volumeName"] = volume
        c["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"
        c["status"]["phase"] = "Bound"
    return c


def with_claims(name: str, *claims: str) -> Obj:
    return pod(name, volumes=[{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims])


NODES = [node(n, labels={ZONE: z}) for n, z in (("a", "z1"), ("b", "z2"), ("c", "z3"))]


def schedule(objects: list[Obj], pending: list[Obj], existing: list[Obj] | None = None) -> list[Placement]:
    snap = build_snapshot(NODES, existing or [])
    storage = Storage()
    for o in objects:
        kind = (
            "StorageClass"
            if "provisioner" in o
            else "PersistentVolumeClaim"
            if o["metadata"].get("namespace")
            else "PersistentVolume"
        )
        storage.update(kind, o, deleted=False)
    snap.storage = storage
    return Engine(Config()).schedule(snap, pending).placements


LOCAL = storage_class("local")
# VolumeBinding's Filter failure is UnschedulableAndUnresolvable: preemption does not help.
NO_VOLUME = failed_scheduling(
    "0/3 nodes are available: 3 node(s) didn't find available persistent volumes to bind.", not_helpful(3)
)
CASES: list[tuple[str, list[Obj], list[Obj], list[str | None], list[str | None]]] = [
    (
        "missing claim: PreFilter, with the claim's name",
        [],
        [with_claims("p", "data")],
        [None],
        ['0/3 nodes are available: persistentvolumeclaim "data" not found. not found'],
    ),
    (
        "unbound Immediate claim",
        [storage_class("fast", mode="Immediate"), claim("data", cls="fast")],
        [with_claims("p", "data")],
        [None],
        ["0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found"],
    ),
    (
        "bound claim: the volume's node",
        [LOCAL, local_pv("pv-b", "b"), claim("data", volume="pv-b")],
        [with_claims("p", "data")],
        ["b"],
        [None],
    ),
    (
        "WaitForFirstConsumer: the node of the only available volume",
        [LOCAL, local_pv("pv-c", "c"), claim("data")],
        [with_claims("p", "data")],
        ["c"],
        [None],
    ),
    (
        "no volume large enough, no provisioner",
        [LOCAL, local_pv("pv-a", "a", size="1Gi"), claim("data")],
        [with_claims("p", "data")],
        [None],
        [NO_VOLUME],
    ),
    (
        "two pods never get the same volume",
        [LOCAL, local_pv("pv-a", "a"), claim("d1"), claim("d2")],
        [with_claims("p1", "d1"), with_claims("p2", "d2")],
        ["a", None],
        [None, NO_VOLUME],
    ),
    (
        "provisioning where allowedTopologies admit the node",
        [
            storage_class(
                "zonal",
                provisioner="csi.example.com",
                allowedTopologies=[{"matchLabelExpressions": [{"key": ZONE, "values": ["z2"]}]}],
            ),
            claim("data", cls="zonal"),
        ],
        [with_claims("p", "data")],
        ["b"],
        [None],
    ),
    (
        "bound zonal volume: VolumeZone keeps the pod in its zone",
        [
            storage_class("std", mode="Immediate", provisioner="csi.example.com"),
            {
                "metadata": {"name": "pv-z3", "labels": {ZONE: "z3"}},
                "spec": {"capacity": {"storage": "10Gi"}, "storageClassName": "std"},
                "status": {"phase": "Bound"},
            },
            claim("data", cls="std", volume="pv-z3"),
        ],
        [with_claims("p", "data")],
        ["c"],
        [None],
    ),
    (
        "bound claim to a missing volume: VolumeZone's PreFilter names it",
        [LOCAL, claim("data", volume="gone")],
        [with_claims("p", "data")],
        [None],
        ['0/3 nodes are available: persistentvolume "gone" not found. not found'],
    ),
]


@pytest.mark.parametrize(
    ("name", "objects", "pending", "want_nodes", "want_messages"), CASES, ids=[c[0] for c in CASES]
)
def test_volume_filters(
    name: str,
    objects: list[Obj],
    pending: list[Obj],
    want_nodes: list[str | None],
    want_messages: list[str | None],
) -> None:
    got = schedule(objects, pending)
    assert [p.node for p in got] == want_nodes
    assert [p.message for p in got] == want_messages


def test_bindings_name_the_volume_or_provisioning() -> None:
    provisioning = storage_class("zonal", provisioner="csi.example.com")
    got = schedule(
        [
            LOCAL,
            provisioning,
            local_pv("pv-small", "a", size="5Gi"),
            local_pv("pv-big", "a", size="50Gi"),
            claim("d"),
            claim("z", cls="zonal"),
        ],
        [with_claims("p", "d", "z")],
    )
    assert got[0].node == "a"
    assert set(got[0].volumes) == {ClaimBinding("default/d", "pv-small"), ClaimBinding("default/z", None)}


def test_selected_node_claim_goes_to_that_node() -> None:
    provisioning = storage_class("zonal", provisioner="csi.example.com")
    got = schedule([provisioning, claim("z", cls="zonal", **{SELECTED_NODE: "c"})], [with_claims("p", "z")])
    assert got[0].node == "c"


def test_assumed_volume_is_not_offered_again() -> None:
    """A volume chosen in one batch is taken in the next, before the watch shows its claimRef."""
    snap = build_snapshot(NODES, [])
    for kind, o in (("StorageClass", LOCAL), ("PersistentVolume", local_pv("pv-a", "a"))):
        snap.storage.update(kind, o, deleted=False)
    for c in ("d1", "d2"):
        snap.storage.update("PersistentVolumeClaim", claim(c), deleted=False)
    engine = Engine(Config())
    first = engine.schedule(snap, [with_claims("p1", "d1")]).placements
    assert first[0].volumes == (ClaimBinding("default/d1", "pv-a"),)
    commit_placements(snap, first)
    second = engine.schedule(snap, [with_claims("p2", "d2")]).placements
    assert second[0].node is None


def test_explain_reads_volumes_from_the_cluster_file_and_shows_their_verdicts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    items = [
        *NODES,
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", **LOCAL},
        {"apiVersion": "v1", "kind": "PersistentVolume", **local_pv("pv-b", "b")},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", **claim("data")},
        with_claims("p", "data"),
    ]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    assert main(["explain", str(path), "default/p", "-o", "json"]) == 0
    [ex] = json.loads(capsys.readouterr().out)
    assert ex["node"] == "b"
    filters = {n["node"]: n["filter"] for n in ex["nodes"] if not n["feasible"]}
    want = {
        "plugin": "VolumeBinding",
        "reasons": ["node(s) didn't find available persistent volumes to bind"],
    }
    assert filters == {"a": want, "c": want}


def test_bind_timeout_is_volume_binding_args() -> None:
    def config(args: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "ksched.io/v1alpha1",
            "kind": "KschedConfiguration",
            "profiles": [
                {"schedulerName": "ksched", "pluginConfig": [{"name": "VolumeBinding", "args": args}]}
            ],
        }

    assert parse_config(config({})).profiles[0].volume_bind_timeout_s == 600
    assert parse_config(config({"bindTimeoutSeconds": 30})).profiles[0].volume_bind_timeout_s == 30
    with pytest.raises(ConfigError, match=r"pluginConfig\[0\]\.args\.bindTimeoutSeconds"):
        parse_config(config({"bindTimeoutSeconds": -1}))
    with pytest.raises(ConfigError, match=r"pluginConfig\[0\]\.args"):
        parse_config(config({"shape": []}))


# A conflict eviction could resolve, but no pod of lower priority runs anywhere.
RWOP_CONFLICT = failed_scheduling(
    "0/3 nodes are available: 3 node(s) unavailable due to PersistentVolumeClaim "
    "with ReadWriteOncePod access mode already in-use by another pod.",
    no_victims(3),
)


def rwop_claim(name: str) -> Obj:
    c = claim(name, cls="std", volume=f"pv-{name}")
    c["spec"]["accessModes"] = ["ReadWriteOncePod"]
    return c


def test_read_write_once_pod_claim_in_use_by_a_bound_pod() -> None:
    objects = [storage_class("std", mode="Immediate", provisioner="csi.example.com"), rwop_claim("solo")]
    objects.append({"metadata": {"name": "pv-solo"}, "spec": {"capacity": {"storage": "10Gi"}}})
    holder = {
        **with_claims("holder", "solo"),
        "spec": {**with_claims("holder", "solo")["spec"], "nodeName": "a"},
    }
    got = schedule(objects, [with_claims("p", "solo")], existing=[holder])
    assert (got[0].node, got[0].message) == (None, RWOP_CONFLICT)
    free = schedule(objects, [with_claims("p", "solo")])
    assert free[0].node is not None


def test_read_write_once_pod_claim_serves_one_pod_of_a_batch() -> None:
    objects = [storage_class("std", mode="Immediate", provisioner="csi.example.com"), rwop_claim("solo")]
    objects.append({"metadata": {"name": "pv-solo"}, "spec": {"capacity": {"storage": "10Gi"}}})
    got = schedule(objects, [with_claims("p1", "solo"), with_claims("p2", "solo")])
    assert got[0].node is not None
    assert (got[1].node, got[1].message) == (None, RWOP_CONFLICT)


def csi_volume(name: str, handle: str) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "csi": {"driver": "csi.example.com", "volumeHandle": handle},
        },
    }


def csi_node(name: str, count: int) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {"drivers": [{"name": "csi.example.com", "nodeID": name, "allocatable": {"count": count}}]},
    }


def test_node_volume_limits_count_the_volumes_attached_there() -> None:
    snap = build_snapshot(NODES, [])
    holder = pod(
        "holder", node_name="a", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "old"}}]
    )
    snap = build_snapshot(NODES, [holder])
    std = storage_class("std", mode="Immediate", provisioner="csi.example.com")
    for kind, o in (
        ("StorageClass", std),
        ("PersistentVolume", csi_volume("pv-old", "h1")),
        ("PersistentVolume", csi_volume("pv-new", "h2")),
        ("PersistentVolumeClaim", claim("old", cls="std", volume="pv-old")),
        ("PersistentVolumeClaim", claim("new", cls="std", volume="pv-new")),
        *(("CSINode", csi_node(n, 1)) for n in ("a", "b", "c")),
    ):
        snap.storage.update(kind, o, deleted=False)
    pinned, sharing = with_claims("p", "new"), with_claims("q", "old")
    for p in (pinned, sharing):
        p["spec"]["nodeSelector"] = {ZONE: "z1"}
    got = Engine(Config()).schedule(snap, [pinned, sharing]).placements
    assert got[0].message == failed_scheduling(
        "0/3 nodes are available: 1 node(s) exceed max volume count, "
        "2 node(s) didn't match Pod's node affinity/selector.",
        "0/3 nodes are available: 1 No preemption victims found for incoming pod, "
        "2 Preemption is not helpful for scheduling.",
    )
    assert got[1].node == "a", "a volume already attached there counts once"


def test_malformed_storage_objects_in_a_cluster_file_reject_nodes_not_the_run() -> None:
    # simulate and explain read unvalidated cluster files: a wrongly typed field
    # admits no node (or counts nothing) instead of raising.
    odd_claim = claim("data", cls="zonal")
    odd_claim["spec"]["resources"] = "5Gi"
    odd_pv = local_pv("pv-odd", "a", cls="zonal")
    odd_pv["spec"]["nodeAffinity"] = "a"
    zonal = storage_class(
        "zonal",
        provisioner="csi.example.com",
        allowedTopologies=[{"matchLabelExpressions": [{"key": ZONE, "values": "z1"}]}],
    )
    got = schedule([zonal, odd_pv, odd_claim], [with_claims("p", "data")])
    assert got[0].node is None
    assert got[0].message == NO_VOLUME
    storage = Storage()
    storage.update(
        "CSINode",
        {"metadata": {"name": "a"}, "spec": {"drivers": [{"name": "d", "allocatable": [1]}]}},
        deleted=False,
    )
    assert node_volume_limits(storage, "a") == []
