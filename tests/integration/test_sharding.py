"""``sharding``: three ``ksched run`` replicas that all bind, each onto the nodes it owns,
against the real local control plane. Judged by what the API server holds: nodeNames, the
Scheduled events' reporting instance, the Leases."""

from __future__ import annotations

import collections
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from ksched.cluster import local
from ksched.loop.client import Kube
from ksched.loop.shards import SHARD_LABEL, owner
from tests.integration.helpers import (
    FAST_LEASE,
    Ksched,
    Namespaces,
    assert_no_node_overcommitted,
    create,
    ksched,
    make_pod,
    pods_in,
    scheduled_events,
    wait_for,
)

pytestmark = pytest.mark.cluster

# Whole seconds, as a Lease stores them; renewDeadline + retryPeriod < leaseDuration.
SHARD_LEASE = {"enabled": True, "leaseDuration": "4s", "renewDeadline": "2s", "retryPeriod": "1s"}
IDENTITIES = ("shard-a", "shard-b", "shard-c")


def sharding(k: Ksched) -> dict[str, Any]:
    code, body = k.get("/status")
    return json.loads(body)["sharding"] if code == 200 else {}


def all_active(replicas: list[Ksched], members: int) -> bool:
    views = [sharding(k) for k in replicas]
    return all(v.get("active") and len(v.get("members", ())) == members for v in views)


def bound_by(kube: Kube, ns: str) -> dict[str, tuple[str, str]]:
    """Pod name -> (node, the replica whose Scheduled event says it bound it)."""
    nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods_in(kube, ns)}
    return {
        e["regarding"]["name"]: (nodes.get(e["regarding"]["name"]), e["reportingInstance"])
        for e in scheduled_events(kube, ns)
    }


def test_three_replicas_bind_at_once_each_onto_its_own_nodes_and_survivors_take_a_killed_ones(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("shards")
    node_names = {n["metadata"]["name"] for n in kube.request("GET", "/api/v1/nodes").json()["items"]}
    with contextlib.ExitStack() as stack:
        replicas = [
            stack.enter_context(ksched(cluster, tmp_path, i, FAST_LEASE, sharding=SHARD_LEASE))
            for i in IDENTITIES
        ]
        assert wait_for(lambda: all_active(replicas, 3), 40, 0.5), "\n".join(k.output() for k in replicas)
        # The live replicas split the nodes: each owns some, none owns one twice.
        owned = [sharding(k)["ownedNodes"] for k in replicas]
        assert sum(owned) == len(node_names) and min(owned) > 0, owned
        leases = kube.request(
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
            query={"labelSelector": SHARD_LABEL},
        ).json()["items"]
        assert {lease["spec"]["holderIdentity"] for lease in leases} >= set(IDENTITIES)

        # Every replica binds at once, each pod onto a node of the replica that bound it.
        pods = [make_pod(f"first-{i}", ns, "100m", "64Mi") for i in range(300)]
        # One pod that only one node takes: placed across replicas if its owner is another's.
        only = sorted(n for n in node_names if n.startswith("kwok-node-"))[7]
        pods.append(make_pod("pinned-0", ns, "100m", "64Mi", nodeSelector={"kubernetes.io/hostname": only}))
        create(kube, pods)
        assert wait_for(lambda: len(bound_by(kube, ns)) >= 301, 90, 0.5), "\n".join(
            k.output() for k in replicas
        )
        got = bound_by(kube, ns)
        per_node_owner = {name: owner(IDENTITIES, node) for name, (node, _) in got.items()}
        assert all(got[name][1] == per_node_owner[name] for name in got), (
            "a replica bound onto another's node"
        )
        by_replica = collections.Counter(instance for _, instance in got.values())
        assert set(by_replica) == set(IDENTITIES), by_replica
        assert got["pinned-0"][0] == only
        assert_no_node_overcommitted(kube)
        handed = sum(k.metric("ksched_shard_handoffs_total") for k in replicas)
        print(f"\nbound by replica: {dict(by_replica)}; hand-offs: {handed:.0f}")

        # SIGKILL one: the others keep binding, and take its nodes once its Lease runs out.
        victim, survivors = replicas[0], replicas[1:]
        victim.proc.kill()
        killed = time.monotonic()
        create(kube, [make_pod(f"second-{i}", ns, "100m", "64Mi") for i in range(150)])
        assert wait_for(lambda: all_active(survivors, 2), 20, 0.25), "\n".join(k.output() for k in survivors)
        reowned = time.monotonic() - killed
        assert wait_for(lambda: len(bound_by(kube, ns)) >= 451, 60, 0.5), "\n".join(
            k.output() for k in survivors
        )
        print(f"killed {victim.identity}: its nodes re-owned {reowned:.1f} s later (lease 4 s)")
        # Unrenewed for a lease duration, read at retry-period steps.
        assert reowned <= 4 + 2 * 1.0 + 1.0
        assert sum(sharding(k)["ownedNodes"] for k in survivors) == len(node_names)
        got = bound_by(kube, ns)
        second = {name: v for name, v in got.items() if name.startswith("second-")}
        assert {instance for _, instance in second.values()} <= set(IDENTITIES[1:])
        per_pod = collections.Counter(e["regarding"]["name"] for e in scheduled_events(kube, ns))
        assert set(per_pod.values()) == {1}, "no pod bound twice"
        assert_no_node_overcommitted(kube)

        # Each survivor said, on its own Lease, that it counts the victim gone.
        def shards_changed() -> list[tuple[str, str, str]]:
            return [
                (e["reportingInstance"], e["regarding"]["kind"], e["note"])
                for e in kube.request("GET", "/apis/events.k8s.io/v1/namespaces/kube-system/events").json()[
                    "items"
                ]
                if e.get("reason") == "KschedShardsChanged"
            ]

        survivors_now = ", ".join(sorted(IDENTITIES[1:]))

        def said_gone() -> set[str]:
            return {
                who
                for who, kind, note in shards_changed()
                if kind == "Lease" and note.startswith(f"live replicas: {survivors_now} (2)")
            }

        # Posted in the background once a survivor's view changed: it may land after the binds.
        wait_for(lambda: said_gone() >= {k.identity for k in survivors}, 10)
        views = shards_changed()
        for k in survivors:
            assert any(
                who == k.identity
                and kind == "Lease"
                and note.startswith(f"live replicas: {survivors_now} (2)")
                for who, kind, note in views
            ), views


def test_three_replicas_binding_at_once_fill_nodes_to_the_last_pod_and_never_past_it(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    """12 nodes of 4 CPU take exactly 480 pods of 100m: 500 are created at once. Every replica
    binds its own share; once its own nodes are full, the pods it owns are handed to the
    replicas whose nodes still have room."""
    ns = namespace("shards-fill")
    fill = local.fake_nodes(12, 3, first=900, shapes=[("fill-4", "4", "16Gi")])["items"]
    for n in fill:
        n["metadata"]["labels"]["ksched.io/test-fill"] = "true"
    names = [n["metadata"]["name"] for n in fill]
    create(kube, fill)
    try:
        with contextlib.ExitStack() as stack:
            replicas = [
                stack.enter_context(ksched(cluster, tmp_path, i, FAST_LEASE, sharding=SHARD_LEASE))
                for i in IDENTITIES
            ]
            assert wait_for(lambda: all_active(replicas, 3), 40, 0.5), "\n".join(k.output() for k in replicas)
            selector = {"ksched.io/test-fill": "true"}
            create(
                kube, [make_pod(f"fill-{i}", ns, "100m", "64Mi", nodeSelector=selector) for i in range(500)]
            )
            assert wait_for(lambda: len(bound_by(kube, ns)) >= 480, 120, 0.5), "\n".join(
                k.output() for k in replicas
            )
            time.sleep(3)  # any bind past the room would have landed by now
            pods = pods_in(kube, ns)
            on = collections.Counter(p["spec"].get("nodeName") for p in pods)
            assert on[None] == 20 and all(on[n] == 40 for n in names), on
            got = bound_by(kube, ns)
            assert len(got) == 480 and all(
                instance == owner(IDENTITIES, node) for node, instance in got.values()
            )
            per_pod = collections.Counter(e["regarding"]["name"] for e in scheduled_events(kube, ns))
            assert set(per_pod.values()) == {1}, "no pod bound twice"
            assert_no_node_overcommitted(kube)
            handed = sum(k.metric("ksched_shard_handoffs_total") for k in replicas)
            print(
                f"\n480 of 500 pods bound on 12 full nodes by {dict(collections.Counter(i for _, i in got.values()))}; hand-offs {handed:.0f}"
            )
    finally:
        for name in names:
            kube.request("DELETE", f"/api/v1/nodes/{name}")
