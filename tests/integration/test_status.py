"""``ksched status`` against a running (scheduling) ksched on the local control plane."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksched.cluster import local
from ksched.loop.client import Kube
from tests.integration.helpers import Namespaces, cli, create, ksched, make_pod, wait_for

pytestmark = pytest.mark.cluster


def test_status_shows_the_leader_the_queues_and_the_pod_that_fits_nowhere(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("status")
    lease = {"leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "1s"}
    with ksched(cluster, tmp_path, "status-0", lease) as k:
        assert wait_for(k.leads, 30), k.output()
        create(kube, [make_pod("fits-0", ns), make_pod("huge-0", ns, "1000", "1Gi")])

        def status(*extra: str) -> str:
            return cli("status", "--address", f"http://127.0.0.1:{k.port}", *extra)

        def settled() -> str:
            text = status()
            return text if "unschedulable 1" in text and "; 1 pods bound" in text else ""

        text = wait_for(settled, 30)
        print(f"\n{text}")
        assert text, status()
        lines = text.splitlines()
        assert lines[0] == f"ksched at http://127.0.0.1:{k.port}: scheduling (identity status-0)"
        assert "leader:    status-0 (this replica)" in lines
        failure = next(line for line in lines if f"{ns}/huge-0" in line)
        assert "Unschedulable" in failure and "Insufficient cpu" in failure
        asked = status("--pod", f"{ns}/huge-0")
        assert f"pod {ns}/huge-0: pending; no metric has a load estimate" in asked.splitlines(), asked
