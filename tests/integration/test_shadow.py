"""Shadow mode beside the real kube-scheduler on the local control plane.

default-scheduler binds a mixed workload; a ksched started with ``--shadow``
runs beside it. ksched must write nothing (every binding and event comes
from default-scheduler) and its report must account for every pod bound:
one decision each, split into same node, other node and pending.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ksched.cluster import local
from ksched.loop.client import Kube
from tests.conftest import annotation_metric
from tests.integration.helpers import Namespaces, Obj, cli, create, ksched, make_pod, pods_in, wait_for

pytestmark = pytest.mark.cluster

PRICE = "ksched.io/shadow-price"
# Three nodes with a price (the cheapest first); the cluster's other nodes have none,
# and ksched's profile excludes a node without a price (missing: exclude).
PRICED = {"kwok-shadow-0": "0.1", "kwok-shadow-1": "0.5", "kwok-shadow-2": "0.9"}


def _priced_nodes() -> list[Obj]:
    nodes = local.fake_nodes(len(PRICED), 1)["items"]
    for node, (name, price) in zip(nodes, PRICED.items(), strict=True):
        node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = name
        node["metadata"]["labels"]["ksched-shadow"] = "priced"
        node["metadata"]["annotations"][PRICE] = price
    return nodes


def _required(key: str, value: str) -> dict[str, object]:
    term = {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def _ready(kube: Kube, names: list[str]) -> bool:
    nodes = {n["metadata"]["name"]: n for n in kube.request("GET", "/api/v1/nodes").json()["items"]}
    for name in names:
        node = nodes.get(name)
        if node is None or node["spec"].get("taints"):
            return False
        conditions = {c["type"]: c["status"] for c in node["status"].get("conditions") or []}
        if conditions.get("Ready") != "True":
            return False
    return True


def test_shadow_ksched_binds_nothing_and_accounts_for_every_pod_default_scheduler_binds(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("shadow")
    workload = [
        # Only one node allowed, and it has a price: ksched agrees.
        make_pod(
            "pinned-0", ns, "100m", "64Mi", affinity=_required("kubernetes.io/hostname", "kwok-shadow-1")
        ),
        # Any priced node: ksched prefers the cheapest, default-scheduler spreads.
        *(
            make_pod(f"priced-{i}", ns, "100m", "64Mi", affinity=_required("ksched-shadow", "priced"))
            for i in range(4)
        ),
        # Anywhere: default-scheduler may pick a node ksched excludes for its missing price.
        *(make_pod(f"anywhere-{i}", ns, "100m", "64Mi") for i in range(2)),
        # Only an unpriced node: ksched would leave it pending.
        make_pod(
            "unpriced-0", ns, "100m", "64Mi", affinity=_required("kubernetes.io/hostname", "kwok-node-00000")
        ),
    ]
    for pod in workload:
        pod["spec"]["schedulerName"] = "default-scheduler"
    log = tmp_path / "shadow.jsonl"
    config = {
        "metrics": [annotation_metric(PRICE, prefer="lower", weight=5)],
        "shadow": {"enabled": True, "namespaces": [ns], "log": str(log)},
    }
    nodes = _priced_nodes()
    try:
        create(kube, nodes)
        assert wait_for(lambda: _ready(kube, list(PRICED)), 30), "the priced nodes never became Ready"
        with ksched(cluster, tmp_path, "shadow", {}, **config) as k:
            assert wait_for(lambda: k.get("/readyz")[0] == 200, 30), k.output()
            create(kube, workload)
            bound = lambda: {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods_in(kube, ns)}  # noqa: E731
            assert wait_for(lambda: len(bound()) == len(workload) and all(bound().values()), 60), bound()
            placed = bound()
            decided = lambda: json.loads(k.get("/shadow")[1])  # noqa: E731
            assert wait_for(lambda: decided()["total"] >= len(placed), 30), k.output()
            report = decided()
            address = f"http://127.0.0.1:{k.port}"
            text = cli("shadow", "report", "--address", address)
            status = cli("status", "--address", address)
            metric_total = k.metric("ksched_shadow_decisions_total")
            leader_gauge = [
                float(line.split()[1])
                for line in k.get("/metrics")[1].splitlines()
                if line.startswith("ksched_leader ")
            ]
            events = kube.request("GET", f"/apis/events.k8s.io/v1/namespaces/{ns}/events").json()["items"]
        print(f"\n{text}\n\n{status}")

        # One decision per pod default-scheduler bound, at the node it bound the pod to.
        decisions = {d["pod"]: d for d in report["recent"]}
        assert report["total"] == len(placed) == len(decisions)
        assert {f"{ns}/{name}": node for name, node in placed.items()} == {
            p: d["node"] for p, d in decisions.items()
        }
        assert sum(report["counts"].values()) == report["total"]
        assert metric_total == report["total"]
        assert leader_gauge == [0.0], "a shadow never counts as a leader"
        assert "leader:    leader election off (shadow mode binds nothing)" in status
        assert f"shadow:    {report['total']} pods compared" in status
        assert all(d["scheduler"] == "default-scheduler" for d in decisions.values())
        assert decisions[f"{ns}/pinned-0"]["outcome"] == "same"
        stuck = decisions[f"{ns}/unpriced-0"]
        assert (stuck["outcome"], stuck["reason"]) == ("pending", "Metric/price"), stuck
        assert "node(s) had no value for price" in stuck["detail"]
        for d in decisions.values():
            if d["outcome"] == "other" and d["node"] in PRICED:
                # Both priced: ksched scored both and would rather have its own.
                assert d["gap"] is not None and d["gap"] >= 0 and d["reason"], d
            if d["outcome"] == "other" and d["node"] not in PRICED:
                assert d["ksched_node"] in PRICED and d["reason"] == "Metric/price", d
        assert f"{report['total']} pods compared: {report['counts']['same']} same node" in text
        # The JSON lines log holds the same decisions.
        logged = [json.loads(line) for line in log.read_text().splitlines()]
        assert sorted(d["pod"] for d in logged) == sorted(decisions)

        # ksched wrote nothing: every Scheduled event is default-scheduler's, none is ksched's.
        scheduled = [e for e in events if e.get("reason") == "Scheduled"]
        assert {e["regarding"]["name"] for e in scheduled} == set(placed)
        assert {e.get("reportingController") for e in scheduled} == {"default-scheduler"}
        assert not [e for e in events if e.get("reportingController") == "ksched"]
    finally:
        for node in nodes:
            kube.request("DELETE", f"/api/v1/nodes/{node['metadata']['name']}")
