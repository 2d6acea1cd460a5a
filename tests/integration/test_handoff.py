"""Hand-off on the local control plane: a pod ksched cannot place goes to the real kube-scheduler."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ksched.cluster import local
from ksched.kubeclient import Kube
from tests.integration.helpers import (
    create,
    delete_pods,
    ensure_namespace,
    events_for,
    ksched,
    make_pod,
    wait_for,
)

pytestmark = pytest.mark.cluster

AFTER_S = 3.0


def test_bare_pod_ksched_cannot_place_is_recreated_for_default_scheduler(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path
) -> None:
    ns = "handoff"
    ensure_namespace(kube, ns)
    # Only nodes with a price annotation qualify for ksched, and none has one:
    # ksched cannot place the pod, while default-scheduler (no metrics) can.
    price = {
        "name": "price",
        "source": "annotation",
        "annotation": "ksched.io/no-such-price",
        "missing": "exclude",
    }
    stuck = make_pod("stuck-0", ns)
    stuck["metadata"]["labels"]["team"] = "a"
    kept = make_pod("kept-0", ns)
    kept["metadata"]["annotations"] = {"ksched.io/handoff": "false"}
    config = {"metrics": [price], "handoff": {"enabled": True, "after": f"{AFTER_S:g}s"}}
    try:
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
            assert k.metric('ksched_fallback_total{reason="handed_off"}') == 1
            opted_out = kube.request("GET", f"/api/v1/namespaces/{ns}/pods/kept-0").json()
            assert opted_out["spec"]["schedulerName"] == "ksched" and not opted_out["spec"].get("nodeName")
    finally:
        delete_pods(kube, ns)
