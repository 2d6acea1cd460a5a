"""``ksched run`` with pod-level constraints: inter-pod affinity, topology spread and gangs.

Pods are created at once, so most land in one batch: what is asserted is the
in-batch accounting (pods placed earlier in a batch count for later ones) and
the all-or-nothing placement of gangs, judged from what the API server says.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ksched.cluster import local
from ksched.engine.gangs import POD_GROUP_API, POD_GROUP_LABEL
from ksched.loop.client import Kube
from tests.integration.helpers import (
    Namespaces,
    Obj,
    create,
    events_for,
    ksched,
    make_pod,
    pods_in,
    wait_for,
)

pytestmark = pytest.mark.cluster

ZONE = "topology.kubernetes.io/zone"
GANG_TAINT = {"key": "ksched-test", "value": "gang", "effect": "NoSchedule"}


def _bound(kube: Kube, ns: str) -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods_in(kube, ns) if p["spec"].get("nodeName")
    }


def test_anti_affinity_and_spread_hold_within_one_batch(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("podlevel-spread")
    nodes = {n["metadata"]["name"]: n for n in kube.request("GET", "/api/v1/nodes").json()["items"]}
    zone_of = {
        name: n["metadata"]["labels"][ZONE] for name, n in nodes.items() if ZONE in n["metadata"]["labels"]
    }
    term = {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}
    pods = []
    for i in range(9):
        p = make_pod(f"spread-{i}", ns, "100m", "64Mi")
        p["spec"]["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
        p["spec"]["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": ZONE,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "spread"}},
            }
        ]
        pods.append(p)
    follower = make_pod("follower-0", ns, "100m", "64Mi")
    follower["spec"]["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    with ksched(cluster, tmp_path, "podlevel", {"leaderElect": False}) as k:
        assert wait_for(lambda: k.get("/readyz")[0] == 200, 30), k.output()
        create(kube, pods)
        assert wait_for(lambda: len(_bound(kube, ns)) == 9, 60), k.output()
        bound = _bound(kube, ns)
        assert len(set(bound.values())) == 9, f"anti-affinity: one pod per node, got {bound}"
        per_zone = collections.Counter(zone_of[n] for n in bound.values())
        assert max(per_zone.values()) - min(per_zone.values()) <= 1, f"maxSkew 1 across zones: {per_zone}"
        assert len(per_zone) == len(set(zone_of.values()))
        create(kube, [follower])
        assert wait_for(lambda: "follower-0" in _bound(kube, ns), 30), k.output()
        assert _bound(kube, ns)["follower-0"] in set(bound.values()), "affinity: next to a spread pod"


@pytest.fixture
def gang_nodes(kube: Kube) -> Iterator[list[str]]:
    """Two 4-cpu nodes only gang pods tolerate: room for four 1500m members."""
    names = ["gang-node-0", "gang-node-1"]
    nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": n, "labels": {"kubernetes.io/hostname": n, "ksched-test": "gang"}},
            "spec": {"taints": [GANG_TAINT]},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
        }
        for n in names
    ]
    create(kube, nodes)
    yield names
    for n in names:
        kube.request("DELETE", f"/api/v1/nodes/{n}")


def _gang(ns: str, group: str, members: int) -> list[Obj]:
    out = []
    for i in range(members):
        p = make_pod(f"{group}-{i}", ns, "1500m", "1Gi")
        p["metadata"]["labels"][POD_GROUP_LABEL] = group
        p["spec"]["nodeSelector"] = {"ksched-test": "gang"}
        p["spec"]["tolerations"] = [{**GANG_TAINT, "operator": "Equal"}]
        out.append(p)
    return out


def _pod_group(ns: str, name: str, min_member: int) -> Obj:
    return {
        "apiVersion": POD_GROUP_API,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minMember": min_member, "scheduleTimeoutSeconds": 60},
    }


def _create_groups(kube: Kube, groups: list[Obj]) -> None:
    for g in groups:
        r = kube.request(
            "POST", f"/apis/{POD_GROUP_API}/namespaces/{g['metadata']['namespace']}/podgroups", body=g
        )
        assert r.status in (200, 201), r.data[:300]


def test_competing_gangs_one_placed_whole_the_other_not_at_all(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, gang_nodes: list[str], namespace: Namespaces
) -> None:
    ns = namespace("podlevel-gangs")
    _create_groups(kube, [_pod_group(ns, "alpha", 3), _pod_group(ns, "beta", 3)])
    # Interleaved, as two jobs submitted together would be: room for four members, each gang needs three.
    pods = [p for pair in zip(_gang(ns, "alpha", 3), _gang(ns, "beta", 3), strict=True) for p in pair]
    try:
        with ksched(cluster, tmp_path, "gangs", {"leaderElect": False}) as k:
            assert wait_for(lambda: k.get("/readyz")[0] == 200, 30), k.output()
            create(kube, pods)
            assert wait_for(lambda: len(_bound(kube, ns)) >= 3, 30), k.output()
            wait_for(
                lambda: (
                    events_for(kube, ns, "beta-0", "FailedScheduling")
                    or events_for(kube, ns, "alpha-0", "FailedScheduling")
                ),
                10,
            )
            bound = _bound(kube, ns)
            per_gang = collections.Counter(name.split("-")[0] for name in bound)
            assert sorted(per_gang.values()) == [3], f"one gang whole, none of the other: {bound}"
            loser = ({"alpha", "beta"} - set(per_gang)).pop()
            events = wait_for(lambda: events_for(kube, ns, f"{loser}-0", "FailedScheduling"), 10)
            assert events and "minMember 3" in events[-1]["note"], events
            # Lowering the loser's minMember to 1 lets its one member that fits go.
            r = kube.request(
                "PATCH",
                f"/apis/{POD_GROUP_API}/namespaces/{ns}/podgroups/{loser}",
                body={"spec": {"minMember": 1}},
                content_type="application/merge-patch+json",
            )
            assert r.status == 200, r.data[:300]
            assert wait_for(lambda: len(_bound(kube, ns)) == 4, 30), k.output()
    finally:
        for g in ("alpha", "beta"):
            kube.request("DELETE", f"/apis/{POD_GROUP_API}/namespaces/{ns}/podgroups/{g}")


def test_gang_without_its_pod_group_waits(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("podlevel-nogroup")
    pods = _gang(ns, "orphan", 2)
    with ksched(cluster, tmp_path, "nogroup", {"leaderElect": False}) as k:
        assert wait_for(lambda: k.get("/readyz")[0] == 200, 30), k.output()
        create(kube, pods)
        events = wait_for(lambda: events_for(kube, ns, "orphan-0", "FailedScheduling"), 20)
        assert events and 'pod group "podlevel-nogroup/orphan" not found' in events[-1]["note"], k.output()
        assert not _bound(kube, ns)


PodMaker = Callable[[str, str, str, str | None], Obj]


@contextmanager
def _priority_nodes(
    kube: Kube, ns: str, tag: str, nodes: list[str], classes: dict[str, int]
) -> Iterator[PodMaker]:
    """Priority classes and fake nodes tainted ``ksched-test=<tag>`` for one preemption test,
    removed afterwards. Yields a pod builder: bound to a node, or pending with a selector
    for these nodes (every pod tolerates the taint and terminates at once)."""
    for klass, value in classes.items():
        kube.request(
            "POST",
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            body={
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": klass},
                "value": value,
            },
        )
    create(
        kube,
        [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": node,
                    # KWOK runs the node's pods, and finishes deleting evicted ones.
                    "annotations": {local.FAKE_NODE_ANNOTATION: "fake"},
                    "labels": {"kubernetes.io/hostname": node, "ksched-test": tag},
                },
                "spec": {"taints": [{"key": "ksched-test", "value": tag, "effect": "NoSchedule"}]},
                "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
            }
            for node in nodes
        ],
    )
    toleration = [{"key": "ksched-test", "operator": "Equal", "value": tag, "effect": "NoSchedule"}]

    def pod(name: str, cpu: str, klass: str, node: str | None) -> Obj:
        p = make_pod(name, ns, cpu, "256Mi")
        p["spec"].update(priorityClassName=klass, tolerations=toleration, terminationGracePeriodSeconds=0)
        if node:
            p["spec"]["nodeName"] = node
        else:
            p["spec"]["nodeSelector"] = {"ksched-test": tag}
        return p

    try:
        assert wait_for(lambda: all(_node_ready(kube, n) for n in nodes), 30)
        yield pod
    finally:
        for node in nodes:
            kube.request("DELETE", f"/api/v1/nodes/{node}")
        for klass in classes:
            kube.request("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{klass}")


def test_preemption_evicts_a_lower_priority_pod_and_the_preemptor_binds_there(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("podlevel-preempt")
    node = "preempt-node-0"
    classes = {"ksched-test-low": 10, "ksched-test-high": 1000}
    with _priority_nodes(kube, ns, "preempt", [node], classes) as pod:
        create(kube, [pod("low-0", "1500m", "ksched-test-low", node)])
        wait_for(lambda: _running(kube, ns, "low-0"), 20)
        create(kube, [pod("low-1", "1500m", "ksched-test-low", node)])
        assert wait_for(lambda: _running(kube, ns, "low-0") and _running(kube, ns, "low-1"), 30)
        with ksched(cluster, tmp_path, "preempt", {"leaderElect": False}) as k:
            assert wait_for(lambda: k.get("/readyz")[0] == 200, 30), k.output()
            create(kube, [pod("urgent-0", "2000m", "ksched-test-high", None)])
            # One victim is enough; of two equal victims the one that started later goes.
            assert wait_for(lambda: _bound(kube, ns).get("urgent-0") == node, 60), k.output()
            left = {p["metadata"]["name"] for p in pods_in(kube, ns)}
            assert left == {"low-0", "urgent-0"}, left
            preempted = wait_for(lambda: events_for(kube, ns, "low-1", "Preempted"), 10)
            assert preempted and preempted[-1]["note"].endswith(f"on node {node}"), preempted
            # Counted once the Preempted event's POST has returned: just after the event shows.
            assert wait_for(lambda: k.metric("ksched_preemption_victims_total") == 1, 10), k.output()


HOLD = "ksched.io/test-hold"


def test_a_preemptor_waits_for_its_victims_and_then_takes_its_nominated_node(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    """Upstream's evaluateNominatedNode: once its victims are gone, the preemptor goes to
    the node it was nominated to although another node has become emptier meanwhile."""
    ns = namespace("podlevel-nominated")
    a, b = "nominated-node-a", "nominated-node-b"
    classes = {"ksched-test-nom-low": 10, "ksched-test-nom-high": 1000}

    def get(name: str) -> Obj:
        r = kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        return r.json() if r.ok else {}

    low, high = classes
    # Node a: 1 cpu that stays and a 2-cpu victim held in deletion by a finalizer;
    # node b: 3 cpu of the preemptor's own priority (not evictable). The 2-cpu
    # preemptor fits neither, so it evicts the victim and is nominated to a.
    with _priority_nodes(kube, ns, "nominated", [a, b], classes) as pod:
        victim = pod("low-0", "2", low, a)
        victim["metadata"]["finalizers"] = [HOLD]
        try:
            create(kube, [pod("keep-0", "1", high, a), victim, pod("mid-0", "3", high, b)])
            assert wait_for(lambda: all(_running(kube, ns, n) for n in ("keep-0", "low-0", "mid-0")), 30)
            with ksched(cluster, tmp_path, "nominated", {"leaderElect": False}) as k:
                assert wait_for(lambda: k.get("/readyz")[0] == 200, 30), k.output()
                create(kube, [pod("urgent-0", "2", high, None)])
                nominated = wait_for(
                    lambda: (get("urgent-0").get("status") or {}).get("nominatedNodeName"), 30
                )
                assert nominated == a, k.output()
                deleting = wait_for(
                    lambda: get("low-0")["metadata"].get("deletionTimestamp") and get("low-0"), 20
                )
                assert deleting, k.output()
                target = [c for c in deleting["status"]["conditions"] if c["type"] == "DisruptionTarget"]
                assert [(c["status"], c["reason"]) for c in target] == [("True", "PreemptionByScheduler")]
                # While its victim terminates the preemptor waits on its nominated node.
                time.sleep(2)
                assert not get("urgent-0")["spec"].get("nodeName")
                assert get("urgent-0")["status"]["nominatedNodeName"] == a
            # ksched is stopped while the victim goes and node b empties: when it starts
            # again, b is the emptier node, yet the nominated node a is tried first and fits.
            kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/mid-0", query={"gracePeriodSeconds": 0})
            kube.request(
                "PATCH",
                f"/api/v1/namespaces/{ns}/pods/low-0",
                body={"metadata": {"finalizers": None}},
                content_type="application/merge-patch+json",
            )
            assert wait_for(lambda: not get("low-0") and not get("mid-0"), 30)
            with ksched(cluster, tmp_path, "nominated-again", {"leaderElect": False}) as k:
                assert wait_for(lambda: _bound(kube, ns).get("urgent-0"), 30), k.output()
                assert _bound(kube, ns)["urgent-0"] == a, "its nominated node, not the emptier one"
        finally:
            kube.request(
                "PATCH",
                f"/api/v1/namespaces/{ns}/pods/low-0",
                body={"metadata": {"finalizers": None}},
                content_type="application/merge-patch+json",
            )


def _node_ready(kube: Kube, name: str) -> bool:
    n = kube.request("GET", f"/api/v1/nodes/{name}").json()
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions") or []
    )


def _running(kube: Kube, ns: str, name: str) -> bool:
    p = kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}").json()
    return bool((p.get("status") or {}).get("phase") == "Running" and p["status"].get("startTime"))
