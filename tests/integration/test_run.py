"""``ksched run`` against the real local control plane.

Each test starts ksched as a subprocess (as it runs in production), creates
pods through the API and judges only what the API server says afterwards:
nodeNames, Events, the Lease.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import threading
import time
from pathlib import Path

import pytest

from ksched.cluster import local
from ksched.config import load_config
from ksched.engine.cluster_file import load_cluster
from ksched.engine.simulation import run_simulation
from ksched.loop.client import MERGE_PATCH, Kube
from ksched.objects import object_key
from tests.integration.helpers import (
    FAST_LEASE,
    Namespaces,
    Obj,
    assert_no_node_overcommitted,
    create,
    events_for,
    ksched,
    make_pod,
    pods_in,
    scheduled_events,
    wait_for,
)

pytestmark = pytest.mark.cluster


def test_2000_pods_on_200_nodes_all_bound_without_overcommit(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("run-bulk")
    existing = len(kube.request("GET", "/api/v1/nodes").json()["items"])
    extra = [
        n for n in local.fake_nodes(200, 3)["items"] if n["metadata"]["name"] >= f"kwok-node-{existing:05d}"
    ]
    create(kube, extra)
    # About 80 % of the 200 nodes' cpu in all: everything fits, nodes fill unevenly.
    sizes = [("100m", "128Mi"), ("250m", "256Mi"), ("500m", "512Mi"), ("1", "1Gi")]
    pods = [make_pod(f"bulk-{i}", ns, *sizes[i % len(sizes)]) for i in range(2000)]
    try:
        with ksched(cluster, tmp_path, "bulk", {"leaderElect": False}) as k:
            assert wait_for(lambda: k.get("/readyz")[0] == 200, 30), k.output()
            # Ready means ready to schedule: the node table is built, not only the informers synced.
            assert "[+]node table ok: built" in k.get("/readyz")[1]
            started = time.monotonic()
            create(kube, pods)
            unbound = lambda: [p for p in pods_in(kube, ns) if not p["spec"].get("nodeName")]  # noqa: E731
            assert wait_for(lambda: len(pods_in(kube, ns)) == 2000 and not unbound(), 180, 1.0), k.output()
            print(f"\n2000 pods on 200 nodes bound {time.monotonic() - started:.1f} s after the first create")
            assert_no_node_overcommitted(kube)
            bound = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods_in(kube, ns)}
            uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods_in(kube, ns)}

            def one_event_each() -> bool:
                return len(scheduled_events(kube, ns)) >= 2000

            wait_for(one_event_each, 30, 1.0)
            events = scheduled_events(kube, ns)
            per_pod = collections.Counter(e["regarding"]["name"] for e in events)
            assert set(per_pod) == set(bound) and set(per_pod.values()) == {1}, "one Scheduled event per pod"
            for e in events:
                name = e["regarding"]["name"]
                assert e["note"] == f"Successfully assigned {ns}/{name} to {bound[name]}"
                assert e["reportingController"] == "ksched" and e["type"] == "Normal"
                # Every field ksched writes (as protobuf), as the API server stored it.
                assert e["action"] == "Binding" and e["reportingInstance"]
                assert e["regarding"] == {
                    "kind": "Pod",
                    "namespace": ns,
                    "name": name,
                    "uid": uids[name],
                    "apiVersion": "v1",
                }
                assert e["metadata"]["name"].startswith(f"{name}.")
                when = dt.datetime.strptime(e["eventTime"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
                assert abs(when.timestamp() - time.time()) < 600, e["eventTime"]
    finally:
        for n in extra:
            kube.request("DELETE", f"/api/v1/nodes/{n['metadata']['name']}")


def test_unschedulable_pod_gets_upstream_message_and_binds_when_a_node_fits(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("run-unsched")
    big = {"cpu": "48", "memory": "1Gi"}
    mine = make_pod("big", ns, **big)
    theirs = make_pod("big-upstream", ns, **big)
    theirs["spec"]["schedulerName"] = "default-scheduler"
    node = local.fake_nodes(1, 1)["items"][0]
    node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = "kwok-big-node"
    node["metadata"]["labels"]["ksched-test"] = "big"
    node["status"]["allocatable"]["cpu"] = node["status"]["capacity"]["cpu"] = "64"
    # Keep kube-scheduler's copy off the big node so only ksched's pod is tested there.
    theirs["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "ksched-test", "operator": "DoesNotExist"}]}
                ]
            }
        }
    }
    try:
        with ksched(cluster, tmp_path, "unsched", {"leaderElect": False}) as k:
            create(kube, [mine, theirs])
            total = len(kube.request("GET", "/api/v1/nodes").json()["items"])
            ours = wait_for(lambda: events_for(kube, ns, "big", "FailedScheduling"), 30)
            assert ours, k.output()
            # 48 cpu is more than any node's allocatable: no eviction helps (upstream Unresolvable).
            assert ours[0]["note"] == (
                f"0/{total} nodes are available: {total} Insufficient cpu. no new claims to deallocate, "
                f"preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling."
            )
            upstream = wait_for(lambda: events_for(kube, ns, "big-upstream", "FailedScheduling"), 30)
            # The same text as kube-scheduler's, PostFilter part (DynamicResources, DefaultPreemption) included.
            notes = [e["note"] for e in upstream]
            assert ours[0]["note"] in notes, notes
            # The event and the PodScheduled condition are written independently (as kube-scheduler
            # writes them): the condition may land just after the event.
            conditions = wait_for(
                lambda: (
                    kube.request("GET", f"/api/v1/namespaces/{ns}/pods/big")
                    .json()["status"]
                    .get("conditions")
                ),
                30,
            )
            cond = conditions[0]
            assert (cond["type"], cond["status"], cond["reason"]) == (
                "PodScheduled",
                "False",
                "Unschedulable",
            )
            assert cond["message"] == ours[0]["note"]

            added = time.monotonic()
            create(kube, [node])
            bound = wait_for(
                lambda: (
                    kube.request("GET", f"/api/v1/namespaces/{ns}/pods/big").json()["spec"].get("nodeName")
                ),
                15,
            )
            waited = time.monotonic() - added
            assert bound == "kwok-big-node", k.output()
            assert waited <= 10.0, f"bound {waited:.1f} s after the node was added"
    finally:
        kube.request("DELETE", "/api/v1/nodes/kwok-big-node")


def test_a_pod_resized_in_place_holds_its_new_requests(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("run-resize")
    node = local.fake_nodes(1, 1)["items"][0]
    node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = "kwok-resize-node"
    node["metadata"]["labels"]["ksched-test"] = "resize"
    node["status"]["allocatable"]["cpu"] = node["status"]["capacity"]["cpu"] = "4"
    # Only this test's pods (which tolerate it) go there.
    node["spec"] = {"taints": [{"key": "ksched-test", "value": "resize", "effect": "NoSchedule"}]}
    here = {
        "nodeSelector": {"ksched-test": "resize"},
        "tolerations": [
            {"key": "ksched-test", "operator": "Equal", "value": "resize", "effect": "NoSchedule"}
        ],
    }
    pods = f"/api/v1/namespaces/{ns}/pods"

    def node_of(name: str) -> str | None:
        return kube.request("GET", f"{pods}/{name}").json()["spec"].get("nodeName")  # type: ignore[no-any-return]

    try:
        create(kube, [node])
        with ksched(cluster, tmp_path, "resize", {"leaderElect": False}) as k:
            create(kube, [make_pod("grows", ns, "1", **here)])
            assert wait_for(lambda: node_of("grows"), 30) == "kwok-resize-node", k.output()
            running = lambda: kube.request("GET", f"{pods}/grows").json()["status"].get("phase") == "Running"  # noqa: E731
            assert wait_for(running, 30), "KWOK did not run the pod"

            def report(cpu: str) -> None:
                """The container's resources as a kubelet that resizes in place reports them."""
                resources = {"cpu": cpu, "memory": "256Mi"}
                status = {
                    "status": {
                        "containerStatuses": [
                            {
                                "name": "app",
                                "allocatedResources": resources,
                                "resources": {"requests": resources},
                            }
                        ]
                    }
                }
                r = kube.request("PATCH", f"{pods}/grows/status", body=status, content_type=MERGE_PATCH)
                assert r.ok, r.data[:300]

            report("1")
            # Resized in place from 1 to 3 cpu, then reported once the kubelet has allocated it.
            resize = {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "3"}}}]}}
            r = kube.request("PATCH", f"{pods}/grows/resize", body=resize, content_type=MERGE_PATCH)
            assert r.ok, r.data[:300]
            report("3")
            # 3 of the node's 4 cpu are taken: 2 more do not fit, 1 does.
            create(kube, [make_pod("two", ns, "2", **here)])
            refused = wait_for(lambda: events_for(kube, ns, "two", "FailedScheduling"), 30)
            assert refused, f"bound to {node_of('two')}: the node counted the pod's old request\n{k.output()}"
            assert "Insufficient cpu" in refused[0]["note"]
            create(kube, [make_pod("one", ns, "1", **here)])
            assert wait_for(lambda: node_of("one"), 30) == "kwok-resize-node", k.output()
            assert node_of("two") is None
    finally:
        kube.request("DELETE", "/api/v1/nodes/kwok-resize-node")


def test_pod_deleted_while_pending_causes_no_error_loop(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("run-deleted")
    with ksched(cluster, tmp_path, "deleted", {"leaderElect": False}) as k:
        create(kube, [make_pod("never-fits", ns, cpu="1000")])
        assert wait_for(lambda: events_for(kube, ns, "never-fits", "FailedScheduling"), 30), k.output()
        # Also a pod deleted at once, racing its own scheduling and bind.
        create(kube, [make_pod("short-lived", ns)])
        kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/short-lived", query={"gracePeriodSeconds": 0})
        kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/never-fits", query={"gracePeriodSeconds": 0})
        assert wait_for(lambda: k.metric("ksched_pending_pods") == 0, 10), "queue emptied"
        # An attempt taken from the queue before the deletions is no longer pending, yet may
        # end (and be counted) after the queue emptied: wait until a second passes without one.
        counts = [k.metric("ksched_schedule_attempts_total")]

        def settled() -> bool:
            time.sleep(1.0)
            counts.append(k.metric("ksched_schedule_attempts_total"))
            return counts[-1] == counts[-2]

        assert wait_for(settled, 10), f"attempts still counted: {counts}"
        attempts = counts[-1]
        time.sleep(3)
        assert k.metric("ksched_schedule_attempts_total") == attempts, "no attempts after deletion"
        assert k.metric('ksched_binding_errors_total{reason="error"}') == 0
        assert k.proc.poll() is None


def test_apiserver_restart_mid_run(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("run-restart")
    first = [make_pod(f"before-{i}", ns, "100m", "64Mi") for i in range(300)]
    second = [make_pod(f"after-{i}", ns, "100m", "64Mi") for i in range(300)]
    with ksched(cluster, tmp_path, "restart", {}) as k:
        assert wait_for(k.leads, 30), k.output()
        creator = threading.Thread(target=create, args=(kube, first, True))
        creator.start()
        wait_for(lambda: any(p["spec"].get("nodeName") for p in pods_in(kube, ns)), 30)
        local.restart("kube-apiserver")
        creator.join()
        create(kube, first + second)  # whatever the outage refused is created now (409 for the rest)
        everything = {p["metadata"]["name"] for p in first + second}

        def all_bound() -> bool:
            pods = pods_in(kube, ns)
            return {p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")} == everything

        assert wait_for(all_bound, 120, 1.0), k.output()
        assert k.proc.poll() is None, "ksched kept running through the restart"
        assert_no_node_overcommitted(kube)


def test_two_replicas_one_binds_and_the_other_takes_over(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("run-ha")
    lease_s = 4.0
    with ksched(cluster, tmp_path, "replica-a", FAST_LEASE) as a:
        assert wait_for(a.leads, 30), a.output()
        with ksched(cluster, tmp_path, "replica-b", FAST_LEASE) as b:
            assert wait_for(lambda: b.get("/readyz")[0] == 200, 30), b.output()
            assert not b.leads()
            create(kube, [make_pod(f"first-{i}", ns, "100m", "64Mi") for i in range(200)])
            assert wait_for(lambda: len(scheduled_events(kube, ns)) >= 200, 60, 0.5), a.output()
            assert {e["reportingInstance"] for e in scheduled_events(kube, ns)} == {"replica-a"}

            a.proc.kill()  # no chance to release the lease
            killed = time.monotonic()
            create(kube, [make_pod(f"second-{i}", ns, "100m", "64Mi") for i in range(200)])
            assert wait_for(b.leads, 3 * lease_s), b.output()
            takeover = time.monotonic() - killed
            print(
                f"\nfollower took over {takeover:.1f} s after the leader was killed (lease {lease_s:.0f} s)"
            )
            # The follower must see the lease unrenewed for a full duration, observed at retry-period steps.
            assert takeover <= lease_s + 2 * 1.0
            assert wait_for(lambda: len(scheduled_events(kube, ns)) >= 400, 60, 0.5), b.output()
            events = scheduled_events(kube, ns)
            per_pod = collections.Counter(e["regarding"]["name"] for e in events)
            assert len(per_pod) == 400 and set(per_pod.values()) == {1}, "no pod bound twice"
            assert {
                e["reportingInstance"] for e in events if e["regarding"]["name"].startswith("second")
            } == {"replica-b"}


def test_quiet_snapshot_placements_equal_simulate(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("run-quiet")
    zones = sorted(
        {
            n["metadata"]["labels"]["topology.kubernetes.io/zone"]
            for n in kube.request("GET", "/api/v1/nodes").json()["items"]
        }
    )
    pods = []
    for i in range(150):
        spec: Obj = {}
        if i % 3 == 1:
            spec["nodeSelector"] = {"topology.kubernetes.io/zone": zones[i % len(zones)]}
        if i % 5 == 2:
            spec["priorityClassName"] = "ksched-test-high"
        pods.append(
            make_pod(f"quiet-{i:03d}", ns, ["100m", "300m", "700m"][i % 3], ["64Mi", "300Mi"][i % 2], **spec)
        )
    high = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "ksched-test-high"},
    }
    r = kube.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body={**high, "value": 100})
    assert r.status in (201, 409), r.data
    create(kube, pods)
    nodes = kube.request("GET", "/api/v1/nodes").json()["items"]
    # As `kubectl get nodes,pods -A -o json` prints them: items carry their kind.
    items = [{"kind": "Node", **n} for n in nodes] + [{"kind": "Pod", **p} for p in pods_in(kube)]
    dump = {"apiVersion": "v1", "kind": "List", "items": items}
    cluster_file = tmp_path / "cluster.json"
    cluster_file.write_text(json.dumps(dump))
    config = load_config(None)
    results, _ = run_simulation(load_cluster(str(cluster_file), {"ksched"}), config, None, 0)
    want = {p.pod: p.node for r in results for p in r.placements}
    assert len(want) == 150

    with ksched(
        cluster, tmp_path, "quiet", {"leaderElect": False}, batch={"maxSize": 1000, "maxWait": "1s"}
    ) as k:

        def placements() -> dict[str, str] | None:
            got = {object_key(p): p["spec"].get("nodeName") for p in pods_in(kube, ns)}
            return got if all(got.values()) else None

        got = wait_for(placements, 60, 0.5)
        assert got, k.output()
    assert got == want
