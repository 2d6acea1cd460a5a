"""deploy/ on the local control plane: the manifests apply, and the ClusterRole is enough (and no more)."""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from ksched.cluster import local
from ksched.cluster.build import bin_dir
from ksched.loop.client import Kube
from tests.integration.helpers import (
    Namespaces,
    create,
    ksched,
    make_pod,
    pods_in,
    wait_for,
)

pytestmark = pytest.mark.cluster

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def kubectl(cluster: local.ClusterState, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(bin_dir() / "kubectl"), "--kubeconfig", cluster.kubeconfig, *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def as_token(
    cluster: local.ClusterState, token: str, path: str, headers: dict[str, str] | None = None
) -> int:
    ca = Path(cluster.directory) / "certs" / "apiserver.crt"
    request = urllib.request.Request(
        cluster.apiserver + path, headers={"Authorization": f"Bearer {token}", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(
            request, context=ssl.create_default_context(cafile=str(ca)), timeout=10
        ) as r:
            return int(r.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


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
    handoff = kubectl(cluster, "kustomize", str(DEPLOY / "handoff"))
    assert handoff.returncode == 0 and "ksched-handoff" in handoff.stdout, handoff.stderr


def test_the_service_account_can_schedule_and_nothing_more(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    rbac = [d for d in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()) if d]
    ns = namespace("ksched-system")
    try:
        for doc in rbac:
            if doc["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
                doc["metadata"]["namespace"] = ns
            applied = subprocess.run(
                [str(bin_dir() / "kubectl"), "--kubeconfig", cluster.kubeconfig, "apply", "-f", "-"],
                input=json.dumps(doc),
                capture_output=True,
                text=True,
                check=False,
            )
            assert applied.returncode == 0, applied.stderr
        r = kube.request(
            "POST",
            f"/api/v1/namespaces/{ns}/serviceaccounts/ksched/token",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600},
            },
        )
        assert r.ok, r.data
        token = r.json()["status"]["token"]
        config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
        config["users"] = [{"name": "admin", "user": {"token": token}}]
        kubeconfig = tmp_path / "ksched-sa.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(config))

        # Outside the role: reading Secrets, and acting as someone else.
        assert as_token(cluster, token, "/api/v1/namespaces/default/secrets") == 403
        assert as_token(cluster, token, "/api/v1/nodes", {"Impersonate-User": "system:admin"}) == 403

        work = namespace("deploy-rbac")
        lease = {"leaderElect": True, "resourceName": "ksched", "resourceNamespace": ns}
        lease.update({"leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "1s"})
        with ksched(cluster, tmp_path, "as-service-account", lease, kubeconfig=str(kubeconfig)) as k:
            assert wait_for(k.leads, 30), k.output()
            create(kube, [make_pod("rbac-0", work), make_pod("rbac-big", work, cpu="500")])
            assert wait_for(lambda: [p for p in pods_in(kube, work) if p["spec"].get("nodeName")], 30), (
                k.output()
            )
            big = wait_for(
                lambda: [
                    c
                    for p in pods_in(kube, work)
                    if p["metadata"]["name"] == "rbac-big"
                    for c in (p["status"].get("conditions") or [])
                    if c["reason"] == "Unschedulable"
                ],
                30,
            )
            assert big, "the PodScheduled condition was written with the service account's rights"
            assert "403" not in k.output() and "Forbidden" not in k.output(), k.output()
    finally:
        for doc in reversed(rbac):
            kind = {
                "ServiceAccount": "serviceaccount",
                "ClusterRole": "clusterrole",
                "ClusterRoleBinding": "clusterrolebinding",
                "Role": "role",
                "RoleBinding": "rolebinding",
            }[doc["kind"]]
            kubectl(cluster, "delete", kind, doc["metadata"]["name"], "-n", ns, "--ignore-not-found")
