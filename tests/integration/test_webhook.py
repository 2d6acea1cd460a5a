"""The mutating webhook on the local control plane: the real API server calls ksched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ksched.cluster import local
from ksched.loop.client import Kube
from tests.integration.helpers import (
    Namespaces,
    create,
    ksched,
    make_pod,
    pods_in,
    wait_for,
    webhook_configuration,
)

pytestmark = pytest.mark.cluster

MWC = "ksched-test-webhook"
MWC_PATH = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{MWC}"


def plain_pod(name: str, ns: str) -> dict[str, Any]:
    """A pod that names no scheduler (so it would go to default-scheduler)."""
    pod = make_pod(name, ns)
    del pod["spec"]["schedulerName"]
    return pod


def admitted_scheduler(kube: Kube, ns: str) -> str | None:
    """What admission makes of a plain pod, without creating it (dry run)."""
    r = kube.request(
        "POST", f"/api/v1/namespaces/{ns}/pods", query={"dryRun": "All"}, body=plain_pod("probe", ns)
    )
    return r.json()["spec"].get("schedulerName") if r.ok else None


def test_opted_in_pods_go_to_ksched_only_while_it_runs(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    routed = namespace("webhook-routed", labels={"ksched.io/route": "true"})
    other = namespace("webhook-other")
    port = local.free_port()
    config = webhook_configuration(MWC, port)
    r = kube.request(
        "POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", body=config
    )
    assert r.ok, r.data
    webhook = {
        "enabled": True,
        "address": f"127.0.0.1:{port}",
        "hosts": ["127.0.0.1"],
        "configurationName": MWC,
    }
    try:
        with ksched(cluster, tmp_path, "webhook", {"leaderElect": False}, webhook=webhook) as k:
            assert wait_for(
                lambda: kube.request("GET", MWC_PATH).json()["webhooks"][0]["clientConfig"].get("caBundle"),
                20,
            )
            # The API server picks up the new caBundle within a second or two.
            assert wait_for(lambda: admitted_scheduler(kube, routed) == "ksched", 20), k.output()
            create(kube, [plain_pod("routed-0", routed), plain_pod("other-0", other)])
            pod = wait_for(lambda: [p for p in pods_in(kube, routed) if p["spec"].get("nodeName")], 30)
            assert pod and pod[0]["spec"]["schedulerName"] == "ksched", k.output()
            assert pod[0]["metadata"]["annotations"]["ksched.io/routed-by"] == "webhook"
            assert pods_in(kube, other)[0]["spec"]["schedulerName"] == "default-scheduler", "not opted in"
        # ksched is gone: failurePolicy Ignore admits new pods unchanged, and kube-scheduler binds them.
        create(kube, [plain_pod("after-0", routed)])
        after = wait_for(
            lambda: [
                p
                for p in pods_in(kube, routed)
                if p["metadata"]["name"] == "after-0" and p["spec"].get("nodeName")
            ],
            30,
        )
        assert after and after[0]["spec"]["schedulerName"] == "default-scheduler"
    finally:
        kube.request("DELETE", MWC_PATH)
