"""Pods with ResourceClaims (DRA) on the local control plane: ksched never places them.

The webhook leaves them with default-scheduler; one created with ``schedulerName:
ksched`` is handed to default-scheduler at once (hand-off enabled), or else gets one
FailedScheduling event that says why and stays pending."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from ksched.cluster import local
from ksched.engine.messages import RESOURCE_CLAIMS_UNSUPPORTED
from ksched.loop.client import Kube
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

MWC = "ksched-test-claims"
MWC_PATH = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{MWC}"
# The claim need not exist for the API server to admit the pod; ksched never looks it up.
CLAIMS = [{"name": "gpu", "resourceClaimName": "gpu-claim"}]


def claiming(name: str, ns: str, **extra: Any) -> dict[str, Any]:
    return make_pod(name, ns, resourceClaims=CLAIMS, **extra)


def get(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    r = kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    return r.json() if r.ok else None


def admitted_scheduler(kube: Kube, ns: str, pod: dict[str, Any]) -> str | None:
    """What admission makes of a pod that names no scheduler, without creating it."""
    del pod["spec"]["schedulerName"]
    r = kube.request("POST", f"/api/v1/namespaces/{ns}/pods", query={"dryRun": "All"}, body=pod)
    assert r.ok, r.data[:300]
    spec: dict[str, Any] = r.json()["spec"]
    assert spec.get("resourceClaims") == pod["spec"].get("resourceClaims"), "the API server kept the claims"
    return spec.get("schedulerName")


def test_webhook_leaves_claims_alone_and_hand_off_gives_them_to_default_scheduler(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("claims-handoff", labels={"ksched.io/route": "true"})
    port = local.free_port()
    r = kube.request(
        "POST",
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        body=webhook_configuration(MWC, port),
    )
    assert r.ok, r.data
    webhook = {
        "enabled": True,
        "address": f"127.0.0.1:{port}",
        "hosts": ["127.0.0.1"],
        "configurationName": MWC,
    }
    # after: far beyond the test, so only the immediate hand-off can act.
    config = {"handoff": {"enabled": True, "after": "600s"}, "webhook": webhook}
    try:
        with ksched(cluster, tmp_path, "claims-handoff", {"leaderElect": False}, **config) as k:
            # The webhook is live (a plain pod is routed), yet a pod with claims is not.
            assert wait_for(lambda: admitted_scheduler(kube, ns, make_pod("probe", ns)) == "ksched", 30), (
                k.output()
            )
            assert admitted_scheduler(kube, ns, claiming("probe", ns)) == "default-scheduler"

            created = time.monotonic()
            create(kube, [claiming("dra-0", ns)])

            def handed_off() -> dict[str, Any] | None:
                p = get(kube, ns, "dra-0")
                return p if p and p["spec"]["schedulerName"] == "default-scheduler" else None

            pod = wait_for(handed_off, 20)
            assert pod, k.output()
            print(f"\nhanded off {time.monotonic() - created:.1f} s after creation")
            assert pod["metadata"]["annotations"]["ksched.io/handed-off"] == "true"
            assert pod["spec"]["resourceClaims"] == CLAIMS
            assert not events_for(kube, ns, "dra-0", "FailedScheduling"), "handed off, not reported"
            # Counted once the re-create's POST has returned, not when the new pod shows.
            assert wait_for(lambda: k.metric('ksched_fallback_total{reason="handed_off"}') == 1, 10)
    finally:
        kube.request("DELETE", MWC_PATH)


def test_without_hand_off_a_pod_with_claims_gets_one_event_and_stays_pending(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("claims-parked")
    with ksched(cluster, tmp_path, "claims-parked", {"leaderElect": False}) as k:
        create(kube, [claiming("dra-0", ns), make_pod("plain-0", ns)])
        events = wait_for(lambda: events_for(kube, ns, "dra-0", "FailedScheduling"), 20)
        assert events, k.output()
        assert events[0]["note"] == RESOURCE_CLAIMS_UNSUPPORTED
        plain = wait_for(lambda: (get(kube, ns, "plain-0") or {}).get("spec", {}).get("nodeName"), 20)
        assert plain, "the pod without claims is placed as usual"
        # Another pod bound (a cluster event that retries unschedulable pods) and time
        # passing do not retry it: still one event, still pending, parked.
        time.sleep(3)
        assert len(events_for(kube, ns, "dra-0", "FailedScheduling")) == 1
        pod = get(kube, ns, "dra-0")
        assert pod and not pod["spec"].get("nodeName") and pod["spec"]["schedulerName"] == "ksched"
        condition = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
        assert (condition["status"], condition["message"]) == ("False", RESOURCE_CLAIMS_UNSUPPORTED)
        assert k.metric('ksched_pending_pods{queue="parked"}') == 1
