"""The local control plane is real: nodes, scheduling, RBAC, Prometheus, clean teardown."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest

from ksched.cluster import local
from ksched.cluster.build import bin_dir
from tests.integration.conftest import CLUSTER_NODES
from tests.integration.exporter import NODE_VALUES

pytestmark = pytest.mark.cluster


def kubectl(
    state: local.ClusterState, *args: str, input_: Any = None, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [str(bin_dir() / "kubectl"), "--kubeconfig", state.kubeconfig, *args]
    if token is not None:
        cmd[3:3] = ["--token", token]
    return subprocess.run(
        cmd, input=None if input_ is None else json.dumps(input_), capture_output=True, text=True, check=False
    )


def wait_for(predicate: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    return predicate()


def pod(name: str, scheduler: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}],
        },
    }


def test_all_nodes_ready(cluster: local.ClusterState) -> None:
    nodes = json.loads(kubectl(cluster, "get", "nodes", "-o", "json").stdout)["items"]
    ready = [
        n
        for n in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
    ]
    assert len(ready) == CLUSTER_NODES
    assert {n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in nodes} == {
        "local-1a",
        "local-1b",
        "local-1c",
    }


def test_real_kube_scheduler_binds_and_kwok_runs_the_pod(cluster: local.ClusterState) -> None:
    assert (
        kubectl(cluster, "create", "-f", "-", input_=pod("by-default", "default-scheduler")).returncode == 0
    )

    def running() -> dict[str, Any] | None:
        p = json.loads(kubectl(cluster, "get", "pod", "by-default", "-o", "json").stdout)
        return p if p["spec"].get("nodeName") and p["status"].get("phase") == "Running" else None

    p = wait_for(running)
    assert p is not None, "default-scheduler bound the pod and KWOK made it Running"
    assert p["spec"]["nodeName"].startswith("kwok-node-")


def test_ksched_pod_stays_pending_without_ksched(cluster: local.ClusterState) -> None:
    assert kubectl(cluster, "create", "-f", "-", input_=pod("for-ksched", "ksched")).returncode == 0
    time.sleep(3)
    p = json.loads(kubectl(cluster, "get", "pod", "for-ksched", "-o", "json").stdout)
    kubectl(cluster, "delete", "pod", "for-ksched", "--wait=false")  # later tests run ksched
    assert p["status"]["phase"] == "Pending"
    assert not p["spec"].get("nodeName")


def test_rbac_is_enforced(cluster: local.ClusterState) -> None:
    denied = kubectl(cluster, "get", "pods", token=cluster.unprivileged_token)
    assert denied.returncode != 0
    assert "Forbidden" in denied.stderr and "nobody" in denied.stderr
    assert kubectl(cluster, "auth", "can-i", "create", "pods/binding").stdout.strip() == "yes"


def test_prometheus_scrapes_the_exporter(cluster: local.ClusterState) -> None:
    from prometheus_api_client import PrometheusConnect

    prom = PrometheusConnect(url=cluster.prometheus, disable_ssl=True)

    def query() -> dict[str, float]:
        return {r["metric"]["node"]: float(r["value"][1]) for r in prom.custom_query("node_test_utilization")}

    assert wait_for(lambda: query() == NODE_VALUES, timeout=30), f"Prometheus returned {query()}"


def test_second_up_is_refused(cluster: local.ClusterState) -> None:
    with pytest.raises(local.ClusterError, match="already running"):
        local.up(nodes=1)
