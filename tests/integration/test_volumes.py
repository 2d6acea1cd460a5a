"""``ksched run`` with PersistentVolumeClaims, against kube-controller-manager's PV binder.

Each test makes its own StorageClass and PersistentVolumes (cluster-scoped,
named after the test and deleted afterwards) and asserts what a user sees:
where the pods landed, whether their claims are Bound, and to which volume.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ksched.cluster import local
from ksched.engine.storage import SELECTED_NODE
from ksched.loop.client import Kube
from tests.integration.helpers import Namespaces, Obj, events_for, ksched, make_pod, pods_in, wait_for

pytestmark = pytest.mark.cluster

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"


def _post(kube: Kube, path: str, obj: Obj) -> Obj:
    r = kube.request("POST", path, body=obj)
    assert r.ok, r.data[:300]
    created: Obj = r.json()
    return created


@pytest.fixture
def storage(kube: Kube) -> Iterator[Callable[[Obj], Obj]]:
    """Create a StorageClass or PersistentVolume; all are deleted when the test ends."""
    made: list[str] = []

    def make(obj: Obj) -> Obj:
        path = (
            "/apis/storage.k8s.io/v1/storageclasses"
            if obj["kind"] == "StorageClass"
            else "/api/v1/persistentvolumes"
        )
        made.append(f"{path}/{obj['metadata']['name']}")
        return _post(kube, path, obj)

    yield make
    for path in reversed(made):
        kube.request("DELETE", path)


def _storage_class(name: str, provisioner: str = "kubernetes.io/no-provisioner", **extra: Any) -> Obj:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer",
        **extra,
    }


def _volume(name: str, cls: str, affinity: list[Obj] | None = None, **extra: Any) -> Obj:
    spec: Obj = {
        "capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": cls,
        "persistentVolumeReclaimPolicy": "Retain",
        "hostPath": {"path": f"/tmp/{name}"},
        **extra,
    }
    if affinity is not None:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": affinity}]}}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec}


def _claim(name: str, ns: str, cls: str, **extra: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "storageClassName": cls,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            **extra,
        },
    }


def _claims(kube: Kube, ns: str) -> dict[str, Obj]:
    items = kube.request("GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims").json()["items"]
    return {c["metadata"]["name"]: c for c in items}


def _nodes_by_zone(kube: Kube) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for n in kube.request("GET", "/api/v1/nodes").json()["items"]:
        labels = n["metadata"].get("labels") or {}
        if ZONE in labels and labels.get("type") == "kwok":
            out.setdefault(labels[ZONE], []).append(n["metadata"]["name"])
    return {z: sorted(names) for z, names in sorted(out.items())}


def _pod_with_claim(name: str, ns: str, claim: str) -> Obj:
    return make_pod(
        name, ns, "100m", "64Mi", volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    )


def test_statefulset_replicas_land_where_their_local_volumes_are(
    cluster: local.ClusterState,
    kube: Kube,
    tmp_path: Path,
    namespace: Namespaces,
    storage: Callable[[Obj], Obj],
) -> None:
    ns = namespace("volumes-sts")
    cls = "ksched-test-local-sts"
    storage(_storage_class(cls))
    # One local volume on the last node of each zone: nothing else would put the replicas there.
    hosts = [names[-1] for names in _nodes_by_zone(kube).values()]
    assert len(hosts) == 3
    for i, host in enumerate(hosts):
        storage(_volume(f"ksched-test-sts-{i}", cls, [{"key": HOSTNAME, "operator": "In", "values": [host]}]))
    template = make_pod("web", ns, "100m", "64Mi")
    template["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "replicas": 3,
            "podManagementPolicy": "Parallel",
            "serviceName": "web",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": template["spec"]},
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": _claim("data", ns, cls)["spec"],
                }
            ],
        },
    }
    with ksched(cluster, tmp_path, "volumes-sts", {"leaderElect": False}) as k:
        assert wait_for(lambda: k.get("/readyz")[0] == 200, 30), k.output()
        _post(kube, f"/apis/apps/v1/namespaces/{ns}/statefulsets", sts)

        def placed() -> dict[str, str]:
            return {
                p["metadata"]["name"]: p["spec"]["nodeName"]
                for p in pods_in(kube, ns)
                if p["spec"].get("nodeName")
            }

        assert wait_for(lambda: len(placed()) == 3, 90), k.output()
        # The bind waits for each claim's volumeName (upstream's checkBindings); the PV controller
        # writes the claim's phase in a later update.
        wait_for(lambda: all(c["status"].get("phase") == "Bound" for c in _claims(kube, ns).values()), 10)
        claims = _claims(kube, ns)
        volumes = {
            v["metadata"]["name"]: v for v in kube.request("GET", "/api/v1/persistentvolumes").json()["items"]
        }
        placement = placed()
        for pod_name, node in sorted(placement.items()):
            claim = claims[f"data-{pod_name}"]
            assert claim["status"]["phase"] == "Bound", claim
            pv = volumes[claim["spec"]["volumeName"]]
            pinned = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0][
                "values"
            ]
            assert pinned == [node], f"{pod_name} on {node}, its volume {pv['metadata']['name']} on {pinned}"
        assert sorted(placement.values()) == sorted(hosts), "one replica per zone, where the volumes are"
        print(
            "StatefulSet placement:",
            {p: (n, claims[f"data-{p}"]["spec"]["volumeName"]) for p, n in sorted(placement.items())},
        )


def test_bound_zonal_volume_keeps_its_pod_in_the_zone(
    cluster: local.ClusterState,
    kube: Kube,
    tmp_path: Path,
    namespace: Namespaces,
    storage: Callable[[Obj], Obj],
) -> None:
    ns = namespace("volumes-zone")
    zones = list(_nodes_by_zone(kube))
    zone = zones[1]
    claim = _post(
        kube,
        f"/api/v1/namespaces/{ns}/persistentvolumeclaims",
        _claim("zonal", ns, "", volumeName="ksched-test-zonal"),
    )
    pv = _volume(
        "ksched-test-zonal", "", claimRef={"namespace": ns, "name": "zonal", "uid": claim["metadata"]["uid"]}
    )
    pv["metadata"]["labels"] = {ZONE: zone}
    storage(pv)
    assert wait_for(lambda: _claims(kube, ns)["zonal"]["status"].get("phase") == "Bound", 30)
    with ksched(cluster, tmp_path, "volumes-zone", {"leaderElect": False}) as k:
        assert wait_for(lambda: k.get("/readyz")[0] == 200, 30), k.output()
        _post(kube, f"/api/v1/namespaces/{ns}/pods", _pod_with_claim("app-0", ns, "zonal"))
        node = wait_for(lambda: next((p["spec"].get("nodeName") for p in pods_in(kube, ns)), None), 30)
        assert node, k.output()
        assert node in _nodes_by_zone(kube)[zone], f"{node} is outside the volume's zone {zone}"


def test_dynamic_provisioning_selects_the_node_and_binds_once_provisioned(
    cluster: local.ClusterState,
    kube: Kube,
    tmp_path: Path,
    namespace: Namespaces,
    storage: Callable[[Obj], Obj],
) -> None:
    ns = namespace("volumes-provision")
    zone = list(_nodes_by_zone(kube))[2]
    cls = "ksched-test-provisioned"
    storage(
        _storage_class(
            cls,
            provisioner="example.com/ksched-test",
            allowedTopologies=[{"matchLabelExpressions": [{"key": ZONE, "values": [zone]}]}],
        )
    )
    claim = _post(kube, f"/api/v1/namespaces/{ns}/persistentvolumeclaims", _claim("fresh", ns, cls))
    with ksched(cluster, tmp_path, "volumes-provision", {"leaderElect": False}) as k:
        assert wait_for(lambda: k.get("/readyz")[0] == 200, 30), k.output()
        _post(kube, f"/api/v1/namespaces/{ns}/pods", _pod_with_claim("app-0", ns, "fresh"))
        selected = wait_for(
            lambda: (_claims(kube, ns)["fresh"]["metadata"].get("annotations") or {}).get(SELECTED_NODE), 30
        )
        assert selected in _nodes_by_zone(kube)[zone], (selected, k.output())
        assert not any(p["spec"].get("nodeName") for p in pods_in(kube, ns)), "bound before its volume exists"
        # The external provisioner's part: a volume on the selected node, pre-bound to the claim.
        storage(
            _volume(
                "ksched-test-provisioned",
                cls,
                [{"key": HOSTNAME, "operator": "In", "values": [selected]}],
                claimRef={"namespace": ns, "name": "fresh", "uid": claim["metadata"]["uid"]},
            )
        )
        node = wait_for(lambda: next((p["spec"].get("nodeName") for p in pods_in(kube, ns)), None), 60)
        assert node == selected, k.output()
        assert _claims(kube, ns)["fresh"]["spec"].get("volumeName") == "ksched-test-provisioned"


def test_read_write_once_pod_claim_in_use_gets_upstreams_message(
    cluster: local.ClusterState,
    kube: Kube,
    tmp_path: Path,
    namespace: Namespaces,
    storage: Callable[[Obj], Obj],
) -> None:
    ns = namespace("volumes-rwop")
    claim = _claim("solo", ns, "", volumeName="ksched-test-rwop", accessModes=["ReadWriteOncePod"])
    created = _post(kube, f"/api/v1/namespaces/{ns}/persistentvolumeclaims", claim)
    storage(
        _volume(
            "ksched-test-rwop",
            "",
            accessModes=["ReadWriteOncePod"],
            claimRef={"namespace": ns, "name": "solo", "uid": created["metadata"]["uid"]},
        )
    )
    assert wait_for(lambda: _claims(kube, ns)["solo"]["status"].get("phase") == "Bound", 30)
    with ksched(cluster, tmp_path, "volumes-rwop", {"leaderElect": False}) as k:
        assert wait_for(lambda: k.get("/readyz")[0] == 200, 30), k.output()
        _post(kube, f"/api/v1/namespaces/{ns}/pods", _pod_with_claim("first-0", ns, "solo"))
        assert wait_for(lambda: any(p["spec"].get("nodeName") for p in pods_in(kube, ns)), 30), k.output()
        _post(kube, f"/api/v1/namespaces/{ns}/pods", _pod_with_claim("second-0", ns, "solo"))
        events = wait_for(lambda: events_for(kube, ns, "second-0", "FailedScheduling"), 30)
        assert events, k.output()
        kwok = sum(len(names) for names in _nodes_by_zone(kube).values())
        note = events[-1]["note"]
        assert note.startswith("0/"), note
        assert (
            f"{kwok} node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
            "already in-use by another pod" in note
        ), note
