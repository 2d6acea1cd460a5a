"""``ksched run``'s endpoint served as kube-scheduler serves port 10259, on the local control
plane: HTTPS, the probes to anyone, /metrics and /status only to whom the real API server
authorizes (TokenReview, SubjectAccessReview), a bad token 401; ``ksched status`` reads it
with the admin's kubeconfig."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ksched.cluster import local
from ksched.loop.client import Kube
from tests.integration.helpers import Namespaces, ksched, kubectl, wait_for

pytestmark = pytest.mark.cluster

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
LEASE = {"leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "1s"}
# The denial cache holds a refusal 10 s; the grant must be seen well within this.
GRANT_SEEN_S = 30.0


def metrics_reader_role() -> dict[str, object]:
    """The ClusterRole deploy/rbac.yaml gives Prometheus and operators."""
    (role,) = [
        d
        for d in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text())
        if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "ksched-metrics-reader"
    ]
    return role  # type: ignore[no-any-return]


def token_of(kube: Kube, ns: str, name: str) -> str:
    """A token of a new ServiceAccount ``ns/name``, from the TokenRequest API."""
    r = kube.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", body={"metadata": {"name": name}})
    assert r.ok, r.data[:300]
    r = kube.request(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/{name}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    assert r.ok, r.data[:300]
    return str(r.json()["status"]["token"])


def status_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ksched.commands.cli", "status", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_metrics_need_a_user_the_api_server_authorizes(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("secure-serving")
    account = "metrics-probe"
    binding = f"ksched-metrics-reader-{ns}"
    with ksched(cluster, tmp_path, "secure-0", LEASE, secure=True) as k:
        # The probes answer anyone, over HTTPS.
        assert wait_for(lambda: k.get("/readyz")[0] == 200, 30), k.output()
        assert k.get("/healthz") == (200, "ok") and k.get("/livez") == (200, "ok")

        # Anyone else is anonymous, and the API server does not let anonymous read /metrics.
        code, body = k.get("/metrics")
        assert code == 403, (code, body)
        assert json.loads(body)["message"] == 'forbidden: User "system:anonymous" cannot get path "/metrics"'

        # A ServiceAccount the API server knows, with no role: authenticated, not authorized.
        token = token_of(kube, ns, account)
        code, body = k.get("/metrics", token)
        assert code == 403, (code, body)
        user = f"system:serviceaccount:{ns}:{account}"
        assert f'User "{user}" cannot get path "/metrics"' in json.loads(body)["message"]

        # A token the API server does not know.
        assert k.get("/metrics", token + "x")[0] == 401
        assert k.get("/metrics", "not-a-token")[0] == 401

        # Bound to ksched-metrics-reader: answered once the 10 s denial cache lets go.
        try:
            applied = kubectl(cluster, "apply", "-f", "-", input_=json.dumps(metrics_reader_role()))
            assert applied.returncode == 0, applied.stderr
            made = kubectl(
                cluster,
                *("create", "clusterrolebinding", binding, "--clusterrole=ksched-metrics-reader"),
                f"--serviceaccount={ns}:{account}",
            )
            assert made.returncode == 0, made.stderr
            assert wait_for(lambda: k.get("/metrics", token)[0] == 200, GRANT_SEEN_S, 1.0), k.get(
                "/metrics", token
            )
            code, body = k.get("/metrics", token)
            assert "ksched_schedule_attempts_total" in body
            assert k.get("/status", token)[0] == 200
            # The role names the three paths and nothing else.
            assert k.get("/debug", token)[0] == 403
        finally:
            kubectl(cluster, "delete", "clusterrolebinding", binding, "--ignore-not-found")

        # `ksched status` over HTTPS with the admin's kubeconfig (a token of system:masters).
        out = status_cli("--kubeconfig", cluster.kubeconfig, "--address", f"127.0.0.1:{k.port}")
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"ksched at 127.0.0.1:{k.port}: "), out.stdout
        print(f"\n{out.stdout}")

        # Plain HTTP to the HTTPS port: a clear error naming --insecure-serving's form of the address.
        out = status_cli("--address", f"http://127.0.0.1:{k.port}")
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr

        # A non-loopback address without a CA to verify ksched by: refused before connecting.
        out = status_cli("--kubeconfig", cluster.kubeconfig, "--address", f"10.0.0.1:{k.port}")
        assert out.returncode == 2, out
        assert "--certificate-authority" in out.stderr and "--insecure-skip-tls-verify" in out.stderr
        assert out.stderr.count("\n") == 1, out.stderr


def test_the_local_api_server_publishes_no_client_ca(kube: Kube) -> None:
    """The local control plane runs kube-apiserver without --client-ca-file (its admin
    authenticates with a token), so there is no client CA for ksched to trust client
    certificates by: the client-certificate path is covered by the unit tests only."""
    r = kube.request("GET", "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication")
    data = (r.json() or {}).get("data") or {} if r.ok else {}
    assert "client-ca-file" not in data, (
        "the API server publishes a client CA now: test client certificates here"
    )
