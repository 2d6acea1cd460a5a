"""Hand-off on the local control plane: a pod ksched cannot place goes to the real kube-scheduler."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from ksched.cluster import local
from ksched.loop.client import Kube
from tests.conftest import annotation_metric
from tests.integration.helpers import (
    Namespaces,
    create,
    events_for,
    ksched,
    make_pod,
    wait_for,
    webhook_configuration,
)

pytestmark = pytest.mark.cluster

AFTER_S = 3.0


def test_bare_pod_ksched_cannot_place_is_recreated_for_default_scheduler(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("handoff")
    # Only nodes with a price annotation qualify for ksched, and none has one:
    # ksched cannot place the pod, while default-scheduler (no metrics) can.
    price = annotation_metric("ksched.io/no-such-price")
    stuck = make_pod("stuck-0", ns)
    stuck["metadata"]["labels"]["team"] = "a"
    kept = make_pod("kept-0", ns)
    kept["metadata"]["annotations"] = {"ksched.io/handoff": "false"}
    config = {"metrics": [price], "handoff": {"enabled": True, "after": f"{AFTER_S:g}s"}}
    with ksched(cluster, tmp_path, "handoff", {"leaderElect": False}, **config) as k:
        created = time.monotonic()
        create(kube, [stuck, kept])
        assert wait_for(lambda: events_for(kube, ns, "stuck-0", "FailedScheduling"), 20), k.output()

        def recreated() -> dict[str, object] | None:
            r = kube.request("GET", f"/api/v1/namespaces/{ns}/pods/stuck-0")
            p = r.json() if r.ok else None
            return (
                p
                if p and p["spec"]["schedulerName"] == "default-scheduler" and p["spec"].get("nodeName")
                else None
            )

        pod = wait_for(recreated, 30)
        assert pod, k.output()
        print(
            f"\nhanded off and bound by kube-scheduler {time.monotonic() - created:.1f} s after creation (after {AFTER_S:g}s)"
        )
        # Labels kept (the API server adds the node's topology labels on binding).
        assert stuck["metadata"]["labels"].items() <= pod["metadata"]["labels"].items()
        assert pod["metadata"]["annotations"]["ksched.io/handed-off"] == "true"
        # Counted once the re-create's POST has returned, not when the new pod shows.
        assert wait_for(lambda: k.metric('ksched_fallback_total{reason="handed_off"}') == 1, 10)
        opted_out = kube.request("GET", f"/api/v1/namespaces/{ns}/pods/kept-0").json()
        assert opted_out["spec"]["schedulerName"] == "ksched" and not opted_out["spec"].get("nodeName")


def test_controller_owned_pod_is_evicted_and_its_replacement_left_to_default_scheduler(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns, mwc = namespace("handoff-owned", labels={"ksched.io/route": "true"}), "ksched-test-handoff"
    port = local.free_port()
    mwc_path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{mwc}"
    r = kube.request(
        "POST",
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        body=webhook_configuration(mwc, port),
    )
    assert r.ok, r.data
    template = make_pod("owned", ns)
    del template["spec"]["schedulerName"]  # the webhook routes it
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "owned", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "owned"}},
            "template": {"metadata": {"labels": {"app": "owned"}}, "spec": template["spec"]},
        },
    }
    price = annotation_metric("ksched.io/no-such-price")
    webhook = {
        "enabled": True,
        "address": f"127.0.0.1:{port}",
        "hosts": ["127.0.0.1"],
        "configurationName": mwc,
    }
    config = {"metrics": [price], "handoff": {"enabled": True, "after": f"{AFTER_S:g}s"}, "webhook": webhook}

    def pods() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = kube.request("GET", f"/api/v1/namespaces/{ns}/pods").json()["items"]
        return items

    try:
        with ksched(cluster, tmp_path, "owned", {"leaderElect": False}, **config) as k:
            assert wait_for(
                lambda: kube.request("GET", mwc_path).json()["webhooks"][0]["clientConfig"].get("caBundle"),
                20,
            )
            time.sleep(2)  # the API server picks up the new caBundle
            r = kube.request("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body=deployment)
            assert r.ok, r.data
            first = wait_for(lambda: [p for p in pods() if p["spec"]["schedulerName"] == "ksched"], 30)
            assert first, (k.output(), pods())
            owner = first[0]["metadata"]["ownerReferences"][0]["uid"]
            replacement = wait_for(
                lambda: [
                    p
                    for p in pods()
                    if p["spec"]["schedulerName"] == "default-scheduler" and p["spec"].get("nodeName")
                ],
                40,
            )
            assert replacement, (k.output(), pods())
            assert replacement[0]["metadata"]["ownerReferences"][0]["uid"] == owner, "the same ReplicaSet"
            # Counted once the eviction's POST has returned, not when the eviction lands.
            assert wait_for(lambda: k.metric('ksched_fallback_total{reason="handed_off"}') == 1, 10)
    finally:
        kube.request("DELETE", mwc_path)
        kube.request("DELETE", f"/apis/apps/v1/namespaces/{ns}/deployments/owned")
