"""The pod watch in protobuf, against the real API server: each event's projection is the one
its JSON gives, for pods that use every field the projection keeps.

Two watches of one namespace from one resourceVersion see the same events in the same order;
one is asked for JSON, the other for protobuf. ``decode_pod_frame`` of each frame must equal
``decode_pod_event`` of the matching line (type, resourceVersion, projection with its keys in
the same order at every level) and ``slim_pod`` of the parsed JSON object."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import orjson

from ksched.loop.client import Kube
from ksched.loop.mirror.informer import FRAME_HEADER, Informer
from ksched.loop.mirror.slim import (
    decode_pod_event,
    decode_pod_frame,
    decode_pod_list,
    decode_pod_list_proto,
    slim_pod,
)
from ksched.loop.protobuf import MAGIC, PROTOBUF
from ksched.objects import Obj
from tests.integration.helpers import Namespaces, create, wait_for

WATCH_S = 8


def _owner(kube: Kube, ns: str) -> str:
    """The uid of an object to own the full pod (the garbage collector runs here, and deletes a
    pod whose owner does not exist)."""
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner", "namespace": ns}}
    r = kube.request("POST", f"/api/v1/namespaces/{ns}/configmaps", body=body)
    assert r.status == 201, r.data[:300]
    return str(r.json()["metadata"]["uid"])


def _pods(ns: str, owner: str) -> list[Obj]:
    selector = {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "Exists"}]}
    full: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "full",
            "namespace": ns,
            "labels": {"app": "web", "tier": "front"},
            "annotations": {"ksched.io/opt-out": "false", "other.io/note": "x" * 300},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "owner",
                    "uid": owner,
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": {
            "schedulerName": "nobody",
            "priorityClassName": "watch-protobuf-high",
            "runtimeClassName": "watch-protobuf",
            "nodeSelector": {"disk": "ssd"},
            "initContainers": [
                {
                    "name": "sidecar",
                    "image": "sidecar:1",
                    "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "50m"}},
                },
                {"name": "init", "image": "init:1"},
            ],
            "containers": [
                {
                    "name": "app",
                    "image": "app:2",
                    "ports": [
                        {"containerPort": 8080, "hostPort": 80, "protocol": "TCP", "name": "http"},
                        {"containerPort": 53, "protocol": "UDP", "hostIP": "127.0.0.1", "hostPort": 53},
                    ],
                    "resources": {
                        "requests": {"cpu": "250m", "memory": "256Mi", "example.com/gpu": "1"},
                        "limits": {"memory": "512Mi", "example.com/gpu": "1"},
                        "claims": [{"name": "accel", "request": "one"}],
                    },
                },
                {"name": "bare", "image": "bare:1"},
            ],
            "resourceClaims": [
                {"name": "accel", "resourceClaimTemplateName": "accel-template"},
                {"name": "shared", "resourceClaimName": "shared-claim"},
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}
                                ]
                            },
                        ]
                    },
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 5,
                            "preference": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                        },
                        {"weight": 1, "preference": {}},
                    ],
                },
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": selector,
                            "topologyKey": "topology.kubernetes.io/zone",
                            "namespaces": [ns, "other"],
                            "matchLabelKeys": ["pod-template-hash"],
                        }
                    ]
                },
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                "labelSelector": {"matchLabels": {"app": "web"}},
                                "namespaceSelector": {},
                                "topologyKey": "kubernetes.io/hostname",
                                "mismatchLabelKeys": ["tier"],
                            },
                        }
                    ]
                },
            },
            "tolerations": [
                {"operator": "Exists"},
                {"key": "gone", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0},
                {"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"},
            ],
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": selector,
                    "minDomains": 3,
                    "nodeAffinityPolicy": "Honor",
                    "nodeTaintsPolicy": "Ignore",
                    "matchLabelKeys": ["pod-template-hash"],
                },
                {
                    "maxSkew": 2,
                    "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "ScheduleAnyway",
                },
            ],
            "schedulingGates": [{"name": "example.com/wait"}],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-0", "readOnly": True}},
                {"name": "cache", "persistentVolumeClaim": {"claimName": "cache-0"}},
                {"name": "model", "image": {"reference": "models:1", "pullPolicy": "IfNotPresent"}},
                {
                    "name": "scratch",
                    "ephemeral": {
                        "volumeClaimTemplate": {
                            "spec": {
                                "accessModes": ["ReadWriteOnce"],
                                "resources": {"requests": {"storage": "1Gi"}},
                            }
                        }
                    },
                },
                {"name": "tmp", "emptyDir": {}},
            ],
        },
    }
    pod_level: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pod-level", "namespace": ns},
        "spec": {
            "schedulerName": "nobody",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}},
            "containers": [{"name": "app", "image": "app:1"}],
        },
    }
    bound: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bound", "namespace": ns, "labels": {"app": "db"}},
        "spec": {
            "schedulerName": "nobody",
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "db", "image": "db:1", "resources": {"requests": {"cpu": "100m"}}}],
        },
    }
    return [full, pod_level, bound]


def _classes(kube: Kube) -> None:
    """The PriorityClass and RuntimeClass (with overhead) the full pod names: admission fills
    in its priority, preemptionPolicy and overhead from them."""
    for path, obj in [
        (
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "watch-protobuf-high"},
                "value": 1000,
                "preemptionPolicy": "Never",
            },
        ),
        (
            "/apis/node.k8s.io/v1/runtimeclasses",
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": "watch-protobuf"},
                "handler": "runc",
                "overhead": {"podFixed": {"cpu": "10m", "memory": "16Mi"}},
            },
        ),
    ]:
        r = kube.request("POST", path, body=obj)
        assert r.status in (201, 409), r.data[:300]


def _lines(kube: Kube, path: str, version: str) -> Iterator[bytes]:
    response = kube.stream(path, {"watch": True, "resourceVersion": version, "timeoutSeconds": WATCH_S}, 30)
    assert response.status == 200
    assert (response.headers.get("Content-Type") or "").startswith("application/json")
    yield from (line for line in response.read().split(b"\n") if line.strip())


def _frames(kube: Kube, path: str, version: str) -> Iterator[bytes]:
    query = {"watch": True, "resourceVersion": version, "timeoutSeconds": WATCH_S}
    response = kube.stream(path, query, 30, content_type=PROTOBUF)
    assert response.status == 200
    assert (response.headers.get("Content-Type") or "").startswith(PROTOBUF)
    body = response.read()
    start = 0
    while start < len(body):
        end = start + FRAME_HEADER + int.from_bytes(body[start : start + FRAME_HEADER], "big")
        assert end <= len(body), "a frame cut short"
        yield body[start + FRAME_HEADER : end]
        start = end


def _mutate(kube: Kube, ns: str, node: str) -> None:
    """Status written as a scheduler and a kubelet write it, one pod bound (KWOK then runs it),
    one deleted."""
    pods = f"/api/v1/namespaces/{ns}/pods"
    status: Obj = {
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/20 nodes are available",
                },
                {"type": "example.com/Other", "status": "True"},
            ],
            "nominatedNodeName": node,
        }
    }
    r = kube.request("PATCH", f"{pods}/full/status", body=status, content_type="application/merge-patch+json")
    assert r.ok, r.data[:300]
    resized: Obj = {
        "status": {
            "phase": "Running",
            "startTime": "2026-11-26T10:00:00Z",
            "containerStatuses": [
                {
                    "name": "app",
                    "ready": True,
                    "restartCount": 0,
                    "image": "app:1",
                    "imageID": "",
                    "allocatedResources": {"cpu": "1", "memory": "1Gi"},
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
        }
    }
    r = kube.request(
        "PATCH", f"{pods}/pod-level/status", body=resized, content_type="application/merge-patch+json"
    )
    assert r.ok, r.data[:300]
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "bound"},
        "target": {"kind": "Node", "name": node},
    }
    r = kube.request("POST", f"{pods}/bound/binding", body=binding)
    assert r.status == 201, r.data[:300]
    wait_for(
        lambda: (kube.request("GET", f"{pods}/bound").json().get("status") or {}).get("phase") == "Running",
        30,
    )
    assert kube.request("DELETE", f"{pods}/pod-level").ok


def test_protobuf_watch_events_read_as_their_json(kube: Kube, namespace: Namespaces) -> None:
    ns = namespace("watch-protobuf")
    _classes(kube)
    path = f"/api/v1/namespaces/{ns}/pods"
    version = kube.request("GET", path).json()["metadata"]["resourceVersion"]
    node = kube.request("GET", "/api/v1/nodes", query={"limit": 1}).json()["items"][0]["metadata"]["name"]
    started = time.monotonic()
    create(kube, _pods(ns, _owner(kube, ns)))
    _mutate(kube, ns, node)
    time.sleep(max(0.0, 2 - (time.monotonic() - started)))
    # Both watches replay from ``version``: the same events, in the same order.
    lines, frames = list(_lines(kube, path, version)), list(_frames(kube, path, version))
    assert len(lines) == len(frames) >= 8, (len(lines), len(frames))
    seen: dict[str, set[str]] = {}
    for line, frame in zip(lines, frames, strict=True):
        from_json, from_protobuf = decode_pod_event(line), decode_pod_frame(frame)
        assert from_protobuf == from_json
        kind, _, projection, _ = from_protobuf
        # Key order too, at every level (memo keys are the projection's JSON).
        assert orjson.dumps(projection) == orjson.dumps(from_json[2])
        assert projection == slim_pod(orjson.loads(line)["object"])
        seen.setdefault(kind, set()).add(projection["metadata"]["name"])
    # What the events carried: every kept field of the full pod, a bind, KWOK's status, a delete.
    assert seen["ADDED"] == {"full", "pod-level", "bound"} and "pod-level" in seen["DELETED"]
    full = [decode_pod_frame(f)[2] for f in frames if decode_pod_frame(f)[2]["metadata"]["name"] == "full"][
        -1
    ]
    spec = full["spec"]
    assert spec["priority"] == 1000 and spec["preemptionPolicy"] == "Never"
    assert spec["overhead"] == {"cpu": "10m", "memory": "16Mi"}
    assert [v["name"] for v in spec["volumes"]] == ["data", "cache", "model", "scratch"]
    assert full["status"]["nominatedNodeName"] == node
    assert [c["type"] for c in full["status"]["conditions"]] == ["PodScheduled"]
    assert full["metadata"]["annotations"] == {"ksched.io/opt-out": "false"}


def test_the_pod_informer_watching_protobuf_keeps_what_a_json_one_keeps(
    kube: Kube, namespace: Namespaces
) -> None:
    ns = namespace("watch-informers")
    _classes(kube)
    path = f"/api/v1/namespaces/{ns}/pods"
    calls: dict[str, list[Any]] = {"json": [], "protobuf": []}

    def informer(label: str, frames: bool) -> Informer:
        return Informer(
            kube,
            path,
            slim_pod,
            lambda kind, obj, old: calls[label].append((kind, obj, old)),
            name=label,
            decode=decode_pod_event,
            decode_frame=decode_pod_frame if frames else None,
        )

    informers = [informer("json", False), informer("protobuf", True)]
    for inf in informers:
        inf.start()
    try:
        for inf in informers:
            assert inf.synced.wait(30)
        node = kube.request("GET", "/api/v1/nodes", query={"limit": 1}).json()["items"][0]["metadata"]["name"]
        create(kube, _pods(ns, _owner(kube, ns)))
        _mutate(kube, ns, node)
        wait_for(lambda: len(calls["protobuf"]) >= len(calls["json"]) >= 6, 30)
        wait_for(lambda: informers[0].store == informers[1].store, 30)
        wait_for(lambda: calls["json"] == calls["protobuf"], 30)
    finally:
        for inf in informers:
            inf.stop()
    assert informers[1].decode_frame is not None, "the protobuf informer fell back to JSON"
    assert set(informers[1].store) == {f"{ns}/full", f"{ns}/bound"}
    assert informers[1].store[f"{ns}/bound"]["spec"]["nodeName"] == node


def _listed(kube: Kube, ns: str) -> tuple[str, str, str]:
    """The full pods in ``ns``, one of them bound, another deleted: the namespace, its pods'
    path and the node."""
    _classes(kube)
    node = kube.request("GET", "/api/v1/nodes", query={"limit": 1}).json()["items"][0]["metadata"]["name"]
    create(kube, _pods(ns, _owner(kube, ns)))
    _mutate(kube, ns, node)
    return ns, f"/api/v1/namespaces/{ns}/pods", node


def test_protobuf_list_pages_read_as_their_json(kube: Kube, namespace: Namespaces) -> None:
    """A pod list asked for as protobuf (as kube-scheduler lists) reads into the projections,
    continue tokens and resourceVersion its JSON gives, page by page."""
    _, path, node = _listed(kube, namespace("list-protobuf"))
    pages: dict[str, list[Any]] = {"json": [], "protobuf": []}
    for label, answer, decode in (
        ("json", None, decode_pod_list),
        ("protobuf", PROTOBUF, decode_pod_list_proto),
    ):
        cont = None
        while True:
            r = kube.request("GET", path, query={"limit": 1, "continue": cont}, answer=answer)
            assert r.ok, r.data[:300]
            assert r.data.startswith(MAGIC) == (answer is not None)
            items, cont, version = decode(r.data)
            pages[label].append((items, version))
            if not cont:
                break
    assert len(pages["json"]) == len(pages["protobuf"]) >= 2
    for (json_items, _), (proto_items, _) in zip(pages["json"], pages["protobuf"], strict=True):
        assert proto_items == json_items and orjson.dumps(proto_items) == orjson.dumps(json_items)
    assert pages["protobuf"][-1][1] is not None
    names = {p["metadata"]["name"] for items, _ in pages["protobuf"] for p in items}
    assert names == {"full", "bound"}
    full = next(p for items, _ in pages["protobuf"] for p in items if p["metadata"]["name"] == "full")
    assert full["spec"]["overhead"] == {"cpu": "10m", "memory": "16Mi"}
    assert full["status"]["nominatedNodeName"] == node


def test_the_pod_informer_listing_protobuf_keeps_what_a_json_one_keeps(
    kube: Kube, namespace: Namespaces
) -> None:
    ns, path, _ = _listed(kube, namespace("list-informers"))
    stores = []
    for frames in (False, True):
        inf = Informer(
            kube,
            path,
            slim_pod,
            lambda kind, obj, old: None,
            name="protobuf" if frames else "json",
            decode_list=decode_pod_list,
            decode_list_frame=decode_pod_list_proto if frames else None,
        )
        inf._relist()
        assert inf.decode_list_frame is (decode_pod_list_proto if frames else None), "fell back to JSON"
        stores.append(inf.store)
    assert stores[0] == stores[1] and set(stores[1]) == {f"{ns}/full", f"{ns}/bound"}


def test_a_streamed_list_keeps_what_a_paged_one_keeps_and_watches_on(
    kube: Kube, namespace: Namespaces
) -> None:
    """The pod informer lists as kube-scheduler's do (a watch whose initial events are every
    pod, ended by a bookmark): read as protobuf, as JSON by the Rust decoder and as JSON by
    ``slim_pod``, its store is the paged list's, and the same watch then brings a pod made
    after the list."""
    ns, path, _ = _listed(kube, namespace("list-streamed"))
    paged = Informer(kube, path, slim_pod, lambda kind, obj, old: None, name="paged")
    paged._relist()
    calls: dict[str, list[tuple[str, str]]] = {"protobuf": [], "json": [], "slim": []}

    def informer(label: str) -> Informer:
        return Informer(
            kube,
            path,
            slim_pod,
            lambda kind, obj, old: calls[label].append((kind, obj["metadata"]["name"])),
            name=label,
            decode=decode_pod_event if label != "slim" else None,
            decode_frame=decode_pod_frame if label == "protobuf" else None,
            stream_list=True,
        )

    informers = [informer(label) for label in calls]
    for inf in informers:
        inf.start()
    try:
        for inf in informers:
            assert inf.synced.wait(30), f"{inf.name}: the streamed list never ended"
            assert not inf._page_next, f"{inf.name}: the API server refused to stream the list"
            assert inf.store == paged.store, inf.name
            timing = inf.last_list
            assert timing is not None and timing.streamed and timing.pages == len(paged.store) == 2
            assert inf.resource_version is not None and int(inf.resource_version) >= int(
                paged.resource_version or 0
            )
        for label, made in calls.items():
            assert sorted(made) == [("ADDED", "bound"), ("ADDED", "full")], label
        later = copy_without_owner(_pods(ns, "none")[0], "later")
        create(kube, [later])
        wait_for(lambda: all(("ADDED", "later") in calls[label] for label in calls), 30)
    finally:
        for inf in informers:
            inf.stop()
    assert informers[0].decode_frame is not None, "the protobuf informer fell back to JSON"
    assert all(inf.relists == 1 for inf in informers), "a streamed list was read more than once"


def copy_without_owner(pod: Obj, name: str) -> Obj:
    """``pod`` renamed, without the owner the namespace's first pods had."""
    meta = {k: v for k, v in pod["metadata"].items() if k != "ownerReferences"}
    return {**pod, "metadata": {**meta, "name": name}}
