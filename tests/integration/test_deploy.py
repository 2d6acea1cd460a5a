"""deploy/ on the local control plane: the manifests apply, and the ClusterRole is enough (and no more)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ksched.cluster import local
from ksched.loop.client import Kube
from tests.integration.helpers import (
    FAST_LEASE,
    Namespaces,
    assert_service_account_schedules_and_nothing_more,
    kubectl,
)

pytestmark = pytest.mark.cluster

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_manifests_apply_with_server_side_dry_run(
    cluster: local.ClusterState, kube: Kube, namespace: Namespaces
) -> None:
    # A dry-run namespace does not exist for the dry-run objects inside it: create it for real.
    namespace("ksched-system")
    out = kubectl(cluster, "apply", "--dry-run=server", "-k", str(DEPLOY))
    assert out.returncode == 0, out.stderr
    for kind in (
        "serviceaccount/ksched",
        "clusterrole.rbac.authorization.k8s.io/ksched",
        "deployment.apps/ksched",
    ):
        assert kind in out.stdout
    for component in ("handoff", "rebalance", "steering"):
        out = kubectl(cluster, "kustomize", str(DEPLOY / component))
        assert out.returncode == 0 and f"ksched-{component}" in out.stdout, out.stderr


def test_the_service_account_can_schedule_and_nothing_more(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    rbac = [d for d in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()) if d]
    ns = namespace("ksched-system")
    for doc in rbac:
        if doc["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
            doc["metadata"]["namespace"] = ns
    lease = {"leaderElect": True, "resourceName": "ksched", "resourceNamespace": ns, **FAST_LEASE}
    assert_service_account_schedules_and_nothing_more(cluster, kube, tmp_path, namespace, rbac, lease)
