"""The pod informer's Rust decoder of watch events equals ``slim_pod`` of the parsed event.

``ksched._core.decode_pod_event`` reads one watch line straight into the projection the
informer keeps; ``slim_pod(orjson.loads(line)["object"])`` is the definition it must
match, values and key order alike (memo keys are built from the projection's JSON)."""

from __future__ import annotations

import copy
import json
import random
import tracemalloc
from typing import Any

import orjson
import pytest

from ksched._core import POD_PROJECTION, decode_pod_event, decode_pod_list
from ksched.bench.fuzz.mutations import generate
from ksched.loop.mirror.slim import slim_pod
from ksched.objects import DISRUPTION_TARGET, HANDED_OVER, Obj

# A pod as the API server sends it once the kubelet (here KWOK) reported it running.
RUNNING: Obj = {
    "kind": "Pod",
    "apiVersion": "v1",
    "metadata": {
        "name": "web-7",
        "generateName": "web-",
        "namespace": "shop",
        "uid": "6c1f1d2e",
        "resourceVersion": "123456",
        "creationTimestamp": "2026-11-26T11:00:00Z",
        "labels": {"app": "web", "topology.kubernetes.io/zone": "zone-1"},
        "annotations": {"ksched.io/opt-out": "true", "other/huge": "x" * 500, "ksched.io/marker": "1"},
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "0b1c", "controller": True}
        ],
        "managedFields": [
            {
                "manager": "kwok",
                "operation": "Update",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {"f:conditions": {'k:{"type":"Ready"}': {".": {}, "f:status": {}}}}},
                "subresource": "status",
            }
        ],
    },
    "spec": {
        "volumes": [
            {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-7"}},
            {"name": "model", "image": {"reference": "registry.example/model:1"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "empty-image", "image": "", "emptyDir": {}},
            "not-a-volume",
        ],
        "initContainers": [{"name": "init", "image": "busybox", "command": ["true"], "resources": {}}],
        "containers": [
            {
                "name": "app",
                "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                "ports": [{"containerPort": 80, "hostPort": 8080}],
                "volumeMounts": [{"name": "token", "mountPath": "/var/run"}],
                "restartPolicy": "Always",
            },
            7,
        ],
        "nodeName": "kwok-node-00001",
        "schedulerName": "ksched",
        "priority": 1000,
        "preemptionPolicy": "PreemptLowerPriority",
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}},
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
        ],
        "overhead": {"cpu": "10m"},
        "enableServiceLinks": True,
    },
    "status": {
        "phase": "Running",
        "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-26T11:00:05Z"},
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "reason": "r", "message": "m"},
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"},
            {"type": "ksched.io/HandedOver", "status": "True", "reason": "HandedOver", "message": "to b"},
            {"type": 3, "status": "True"},
        ],
        "containerStatuses": [
            {"name": "app", "ready": True, "allocatedResources": {"cpu": "100m"}, "resources": {}},
            {"name": "side", "ready": True, "resources": {}},
        ],
        "initContainerStatuses": [{"name": "init", "resources": {"requests": {"cpu": "1"}}}],
        "resources": {},
        "allocatedResources": {"cpu": "110m"},
        "nominatedNodeName": "",
        "startTime": "2026-11-26T11:00:05Z",
        "podIP": "10.244.1.23",
        "qosClass": "Burstable",
    },
}


# serde_json's nesting limit; the API server's validation keeps pods far shallower.
DECODER_DEPTH = 127


def nesting(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((nesting(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((nesting(v) for v in value), default=0)
    return 0


def decoded(event: Any) -> tuple[Any, Any, Obj, Obj]:
    return decode_pod_event(orjson.dumps(event))


def expected(event: dict[str, Any]) -> tuple[Any, Any, Obj]:
    obj = event.get("object") or {}
    return event.get("type"), (obj.get("metadata") or {}).get("resourceVersion"), slim_pod(obj)


def assert_same(event: dict[str, Any]) -> None:
    kind, version, slim, _ = decoded(event)
    want_kind, want_version, want = expected(event)
    assert (kind, version) == (want_kind, want_version)
    assert slim == want
    assert orjson.dumps(slim) == orjson.dumps(want), "same keys, same order"


@pytest.mark.parametrize("kind", ["ADDED", "MODIFIED", "DELETED"])
def test_a_running_pod_reads_as_its_projection(kind: str) -> None:
    assert_same({"type": kind, "object": RUNNING})


def test_every_fuzzed_pod_reads_as_its_projection() -> None:
    for spec in generate(2000, seed=3):
        line = json.dumps({"type": "ADDED", "object": spec.pod}).encode()
        try:
            event = orjson.loads(line)
            slim_pod(event["object"])
        except orjson.JSONDecodeError:
            # Unreadable as JSON here too (an integer beyond 64 bits): the informer reconnects.
            with pytest.raises(ValueError):
                decode_pod_event(line)
            continue
        except (AttributeError, TypeError):
            continue  # a spec slim_pod itself cannot read (the API server never sends one)
        if nesting(event) > DECODER_DEPTH:
            # Deeper than the decoder reads (the informer parses those lines with orjson).
            with pytest.raises(ValueError, match="recursion limit"):
                decode_pod_event(line)
            continue
        assert_same(event)


def test_fields_missing_null_or_of_another_type_read_as_slim_pod_reads_them() -> None:
    rng = random.Random(5)
    paths = [
        ("metadata",),
        ("metadata", "labels"),
        ("metadata", "annotations"),
        ("spec",),
        ("spec", "containers"),
        ("spec", "initContainers"),
        ("spec", "volumes"),
        ("spec", "nodeName"),
        ("status",),
        ("status", "phase"),
        ("status", "conditions"),
        ("status", "containerStatuses"),
        ("status", "startTime"),
    ]
    replacements: list[Any] = ["<missing>", None, {}, [], "", 0, False]
    for _ in range(400):
        pod = copy.deepcopy(RUNNING)
        for _ in range(rng.randint(1, 3)):
            *parents, leaf = rng.choice(paths)
            holder: Any = pod
            for p in parents:
                holder = holder.get(p) if isinstance(holder, dict) else None
            if not isinstance(holder, dict):
                continue
            value = rng.choice(replacements)
            if value == "<missing>":
                holder.pop(leaf, None)
            else:
                holder[leaf] = copy.deepcopy(value)
        assert_same({"type": "MODIFIED", "object": pod})


def test_a_repeated_key_keeps_its_last_value_as_a_parsed_dict_does() -> None:
    line = (
        b'{"type":"ADDED","object":{"metadata":{"name":"a","name":"b","annotations":'
        b'{"ksched.io/x":"1","ksched.io/y":"2","ksched.io/x":"3"}},"spec":{"nodeName":"n1"},'
        b'"spec":{"nodeName":"n2","nodeName":"n3"}}}'
    )
    _, _, slim, _ = decode_pod_event(line)
    want = slim_pod(orjson.loads(line)["object"])
    assert slim == want and orjson.dumps(slim) == orjson.dumps(want)
    assert slim["metadata"] == {"name": "b", "annotations": {"ksched.io/x": "3", "ksched.io/y": "2"}}


def test_a_bookmark_and_an_error_give_what_the_informer_reads_of_them() -> None:
    kind, version, _, _ = decoded(
        {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "99"}}}
    )
    assert (kind, version) == ("BOOKMARK", "99")
    status = {
        "kind": "Status",
        "status": "Failure",
        "message": "too old resource version",
        "reason": "Expired",
        "code": 410,
    }
    kind, _, _, error = decoded({"type": "ERROR", "object": status})
    assert kind == "ERROR"
    assert error == {"code": 410, "reason": "Expired", "message": "too old resource version"}


@pytest.mark.parametrize("line", [b"", b"{", b'{"type":"ADDED"} x', b"[1, 2]"])
def test_a_line_that_is_no_watch_event_is_a_value_error(line: bytes) -> None:
    with pytest.raises(ValueError):
        decode_pod_event(line)


def test_the_projection_keeps_the_conditions_the_scheduler_reads() -> None:
    # A victim of preemption (upstream podTerminatingByPreemption), the scheduler's own verdict
    # an infeasible resize and a sharded replica's hand-over: what the loop reads of a pod's
    # conditions.
    assert set(POD_PROJECTION["conditions"]) == {
        DISRUPTION_TARGET,
        "PodScheduled",
        "PodResizePending",
        HANDED_OVER,
    }


def replica(i: int) -> Obj:
    """Pod ``i`` of one ReplicaSet, as the API server lists it."""
    pod = copy.deepcopy(RUNNING)
    pod["metadata"].update(name=f"web-{i:05d}", uid=f"uid-{i:08d}", resourceVersion=str(1000 + i))
    pod["spec"]["nodeName"] = f"kwok-node-{i % 50:05d}"
    return pod


def test_a_list_page_reads_as_its_items_projections() -> None:
    items: list[Any] = [replica(i) for i in range(3)]
    body = {
        "kind": "PodList",
        "metadata": {"resourceVersion": "77", "continue": "next"},
        "items": [*items, 7],
    }
    page, cont, version = decode_pod_list(orjson.dumps(body))
    assert (cont, version) == ("next", "77")
    want = [slim_pod(p) for p in items]  # an item that is not an object is left out
    assert page == want and orjson.dumps(page) == orjson.dumps(want)
    assert decode_pod_list(b'{"kind":"PodList","metadata":{"resourceVersion":"5"}}') == ([], None, "5")
    with pytest.raises(ValueError):
        decode_pod_list(b'{"items": [')


def test_pods_of_one_replica_set_share_what_they_have_in_common() -> None:
    a, b = (decoded({"type": "ADDED", "object": replica(i)})[2] for i in (1, 2))
    assert a["metadata"]["labels"] is b["metadata"]["labels"]
    assert a["metadata"]["ownerReferences"] is b["metadata"]["ownerReferences"]
    assert a["metadata"]["namespace"] is b["metadata"]["namespace"]
    assert a["spec"]["containers"][0]["resources"] is b["spec"]["containers"][0]["resources"]
    assert a["spec"]["tolerations"] is b["spec"]["tolerations"]
    # A pod's own name and uid are its own, even read twice.
    again = decoded({"type": "MODIFIED", "object": replica(1)})[2]
    assert again == a and again["metadata"]["name"] is not a["metadata"]["name"]
    # A value that differs is not taken for another.
    other = replica(3)
    other["metadata"]["labels"]["app"] = "api"
    other["spec"]["priority"] = 1000.0  # a float where the others have an int
    c = decoded({"type": "ADDED", "object": other})[2]
    assert c["metadata"]["labels"] == {**a["metadata"]["labels"], "app": "api"}
    assert type(c["spec"]["priority"]) is float and type(a["spec"]["priority"]) is int


def test_the_informer_holds_a_replica_set_s_pods_in_under_half_of_what_parsing_takes() -> None:
    lines = [orjson.dumps({"type": "ADDED", "object": replica(i)}) for i in range(3000)]

    def held(read: Any) -> float:
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        kept = [read(raw) for raw in lines]
        size = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
        tracemalloc.stop()
        return size

    parsed = held(lambda raw: slim_pod(orjson.loads(raw)["object"]))
    shared = held(lambda raw: decode_pod_event(raw)[2])
    assert shared < parsed / 2, (shared, parsed)


def test_the_shared_values_start_afresh_when_the_cache_is_full() -> None:
    # More distinct node names than the cache holds (65,536): every pod still reads as its
    # projection, and values seen again after the cache started afresh are shared again.
    pods = [replica(i) for i in range(2)]
    lines = []
    for i in range(70_000):
        pod = pods[i % 2]
        pod["spec"]["nodeName"] = f"node-{i:06d}"
        lines.append(orjson.dumps({"type": "ADDED", "object": pod}))
    last = None
    for raw in lines:
        last = decode_pod_event(raw)[2]
    assert last == slim_pod(orjson.loads(lines[-1])["object"])
    a, b = (decode_pod_event(raw)[2] for raw in lines[-2:])
    assert a["metadata"]["labels"] is b["metadata"]["labels"]
    assert decode_pod_event(lines[-1])[2]["spec"]["nodeName"] is b["spec"]["nodeName"]
