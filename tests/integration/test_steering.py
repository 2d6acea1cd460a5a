"""Steering on the local control plane: ksched marks hot nodes, and kube-scheduler (the
``cluster`` fixture's, default profile) places default-scheduler pods elsewhere.

Eight nodes are open (the others cordoned while the file runs), filled unevenly by requests
(50-70 % of CPU and memory). The nodes a metric calls hot are the emptiest and largest, so
every other score of kube-scheduler's (NodeResourcesFit's least allocated, balanced
allocation, a Deployment's default spreading) draws pods to them: the mark has to outweigh
all of that. The metric is a node annotation (``example.com/heat``, filter above 0.8).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ksched.cluster import local
from ksched.loop.client import Kube
from tests.integration.helpers import FAST_LEASE, Ksched, Namespaces, Obj, create, ksched, pods_in, wait_for

pytestmark = pytest.mark.cluster

KEY = "ksched.io/hot"
WARM = "ksched.io/warm"
HEAT = "example.com/heat"
MERGE = "application/merge-patch+json"
OPEN = [f"kwok-node-{i:05d}" for i in range(8)]  # 4, 8, 8, 4, 4, 8, 8, 4 CPUs; zones a, b, c
# The share of each open node's CPU and memory that requests fill: the hot pair (8 CPUs each)
# the emptiest.
FILL = dict(zip(OPEN, (0.65, 0.5, 0.5, 0.7, 0.6, 0.7, 0.65, 0.6), strict=True))
HOT = ("kwok-node-00001", "kwok-node-00002")
REPLICAS = 24
CONFIG: dict[str, Any] = {
    "metrics": [
        {
            "name": "heat",
            "source": "annotation",
            "annotation": HEAT,
            "prefer": "lower",
            "filter": {"above": 0.8},
        }
    ],
    "steering": {"enabled": True, "interval": "1s", "hold": "2s", "margin": 0.1, "maxShare": 0.25},
}


def patch_node(kube: Kube, node: str, body: Obj) -> None:
    r = kube.request("PATCH", f"/api/v1/nodes/{node}", body=body, content_type=MERGE)
    assert r.ok, r.data[:300]


def heat(kube: Kube, values: dict[str, float]) -> None:
    for node in OPEN:
        patch_node(kube, node, {"metadata": {"annotations": {HEAT: str(values.get(node, 0.3))}}})


def marked(kube: Kube, key: str = KEY) -> set[str]:
    """The nodes that carry the mark under ``key`` (the hot one unless told)."""
    return {
        n["metadata"]["name"]
        for n in kube.request("GET", "/api/v1/nodes").json()["items"]
        if any(
            t.get("key") == key and t.get("effect") == "PreferNoSchedule"
            for t in n["spec"].get("taints") or []
        )
    }


def node_events(kube: Kube, reason: str) -> set[str]:
    items: list[Obj] = kube.request("GET", "/apis/events.k8s.io/v1/namespaces/default/events").json()["items"]
    return {
        e["regarding"]["name"]
        for e in items
        if e.get("reason") == reason and e["regarding"]["kind"] == "Node"
    }


@pytest.fixture(scope="module")
def nodes(cluster: local.ClusterState, kube: Kube) -> Iterator[None]:
    """The eight open nodes (the rest cordoned); afterwards every node is uncordoned, and the
    heat annotations and any mark left are removed."""
    everything = [n["metadata"]["name"] for n in kube.request("GET", "/api/v1/nodes").json()["items"]]
    for node in everything:
        patch_node(kube, node, {"spec": {"unschedulable": node not in OPEN or None}})
    yield
    for node in everything:
        obj = kube.request("GET", f"/api/v1/nodes/{node}").json()
        taints = [t for t in obj["spec"].get("taints") or [] if t.get("key") not in (KEY, WARM)]
        patch_node(
            kube,
            node,
            {
                "metadata": {"annotations": {HEAT: None}},
                "spec": {"unschedulable": None, "taints": taints or None},
            },
        )


@pytest.fixture(scope="module")
def filled(nodes: None, kube: Kube) -> Iterator[str]:
    """The open nodes filled by requests (pods bound by name), in their own namespace."""
    ns = "steering-fill"
    create(kube, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}])
    pods = []
    for node in OPEN:
        alloc = kube.request("GET", f"/api/v1/nodes/{node}").json()["status"]["allocatable"]
        cpu = int(alloc["cpu"]) * 1000 * FILL[node]
        memory = int(alloc["memory"].removesuffix("Gi")) * 1024 * FILL[node]
        requests = {"cpu": f"{cpu:.0f}m", "memory": f"{memory:.0f}Mi"}
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"fill-{node}", "namespace": ns},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "c", "image": "fill", "resources": {"requests": requests}}],
                },
            }
        )
    create(kube, pods)
    yield ns
    kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods", query={"gracePeriodSeconds": 0})


@contextlib.contextmanager
def deployment(kube: Kube, ns: str, name: str) -> Iterator[list[str]]:
    """``REPLICAS`` pods for default-scheduler (a Deployment: its default spreading counts);
    yields the nodes they were bound to, once all are."""
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "app",
                            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                        }
                    ]
                },
            },
        },
    }
    path = f"/apis/apps/v1/namespaces/{ns}/deployments"
    assert kube.request("POST", path, body=body).status == 201
    try:

        def placed() -> list[str] | None:
            on = [
                p["spec"].get("nodeName")
                for p in pods_in(kube, ns)
                if p["metadata"]["labels"].get("app") == name
            ]
            return on if len(on) == REPLICAS and all(on) else None

        on = wait_for(placed, 90)
        assert on, f"not all {REPLICAS} pods of {name} were bound"
        yield on
    finally:
        kube.request("DELETE", f"{path}/{name}", query={"propagationPolicy": "Background"})
        kube.request(
            "DELETE",
            f"/api/v1/namespaces/{ns}/pods",
            query={"labelSelector": f"app={name}", "gracePeriodSeconds": 0},
        )
        wait_for(lambda: not [p for p in pods_in(kube, ns) if p["metadata"]["labels"].get("app") == name], 60)


def start(
    cluster: local.ClusterState, tmp_path: Path, identity: str
) -> contextlib.AbstractContextManager[Ksched]:
    lease = {"leaderElect": True, **FAST_LEASE}
    return ksched(cluster, tmp_path, identity, lease, **CONFIG)


def test_marked_nodes_take_no_default_scheduler_pod_while_others_have_room(
    cluster: local.ClusterState, kube: Kube, filled: str, namespace: Namespaces, tmp_path: Path
) -> None:
    ns = namespace("steering-pods")
    heat(kube, {HOT[0]: 0.9, HOT[1]: 0.95})
    with deployment(kube, ns, "before") as on:
        unmarked_figure = sum(n in HOT for n in on)
    with start(cluster, tmp_path, "steer-a") as k:
        assert wait_for(lambda: marked(kube) == set(HOT), 30), (marked(kube), k.output())
        assert wait_for(lambda: set(HOT) <= node_events(kube, "KschedMarkedHot"), 10)
        status = k.get("/status")[1]
        assert '"taintKey":"ksched.io/hot"' in status.replace(" ", "") and HOT[1] in status
        assert k.metric("ksched_steering_marked_nodes") == 2
        assert marked(kube, WARM) == set(HOT), "a hot node carries the lighter mark too"
        with deployment(kube, ns, "after") as on:
            figure = sum(n in HOT for n in on)
        print(
            f"\nsteering: {figure} of {REPLICAS} default-scheduler pods on the 2 marked nodes "
            f"(of 8 open, filled 50-70 %; the marked ones the emptiest); {unmarked_figure} of "
            f"{REPLICAS} on the same nodes unmarked"
        )
        assert figure == 0
        k.proc.send_signal(signal.SIGTERM)
        assert k.proc.wait(30) == 0, k.output()
    assert marked(kube) == set() and marked(kube, WARM) == set(), "SIGTERM leaves no mark"
    assert set(HOT) <= node_events(kube, "KschedUnmarked")


def test_a_killed_leader_leaves_its_marks_and_the_next_removes_them_once_cool(
    cluster: local.ClusterState, kube: Kube, filled: str, tmp_path: Path
) -> None:
    heat(kube, {HOT[0]: 0.9, HOT[1]: 0.95})
    with start(cluster, tmp_path, "steer-b") as k:
        assert wait_for(lambda: marked(kube) == set(HOT), 30), k.output()
        k.proc.send_signal(signal.SIGKILL)
        k.proc.wait(10)
    assert marked(kube) == set(HOT), "SIGKILL removes nothing"
    heat(kube, {})
    with start(cluster, tmp_path, "steer-c") as k:
        assert wait_for(k.leads, 30), k.output()
        assert wait_for(lambda: marked(kube) == set() and marked(kube, WARM) == set(), 30), k.output()


def test_the_cap_marks_only_the_hottest(
    cluster: local.ClusterState, kube: Kube, filled: str, tmp_path: Path
) -> None:
    """Four hot nodes of eight, maxShare 0.25: the two hottest are marked, the others listed
    as capped, and given the lighter mark (warmShare 0.75: six of eight), so that
    kube-scheduler still takes them after the cool nodes and before the two hottest."""
    values = {OPEN[0]: 0.85, OPEN[3]: 0.99, OPEN[5]: 0.9, OPEN[6]: 0.97}
    heat(kube, values)
    with start(cluster, tmp_path, "steer-d") as k:
        assert wait_for(lambda: marked(kube) == {OPEN[3], OPEN[6]}, 30), (marked(kube), k.output())
        # A look sets what /status and the gauges show after its last node's write has returned.
        assert wait_for(lambda: all(n in k.get("/status")[1] for n in (OPEN[0], OPEN[5])), 10), k.output()
        assert marked(kube) == {OPEN[3], OPEN[6]}
        assert wait_for(lambda: marked(kube, WARM) == {OPEN[0], OPEN[3], OPEN[5], OPEN[6]}, 10), k.output()
        assert wait_for(lambda: k.metric("ksched_steering_warm_nodes") == 2, 10), k.output()
    assert marked(kube) == set() and marked(kube, WARM) == set()
