"""The mutating webhook on the local control plane: the real API server calls ksched."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path
from typing import Any

import pytest
import yaml

from ksched.cluster import local
from ksched.loop.client import Kube
from tests.integration.helpers import (
    FAST_LEASE,
    Namespaces,
    apply_service_account,
    create,
    delete_rbac,
    ksched,
    make_pod,
    pods_in,
    refused,
    wait_for,
    webhook_configuration,
)

pytestmark = pytest.mark.cluster

MWC = "ksched-test-webhook"
MWC_PATH = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{MWC}"
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


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


def test_two_replicas_share_one_certificate_so_the_api_server_trusts_both(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    # Two replicas with self-generated certificates, as deploy/ runs them (its ServiceAccount,
    # Role and names); before, each wrote its own CA into the caBundle and the API server
    # trusted the last writer only. One webhook per replica (a namespace each) shows which
    # replica answered: both must route.
    ns = namespace("ksched-system")
    rbac = [d for d in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()) if d]
    for doc in rbac:
        if doc["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
            doc["metadata"]["namespace"] = ns
    (secret,) = [
        name
        for d in rbac
        for r in d.get("rules", [])
        if "secrets" in r.get("resources", [])
        for name in r.get("resourceNames", [])
    ]
    secret_path = f"/api/v1/namespaces/{ns}/secrets/{secret}"
    name = "ksched"  # the configuration the ClusterRole may write
    path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}"
    ports = [local.free_port(), local.free_port()]
    labels = [f"ksched.io/replica-{i}" for i in range(2)]
    routed = [namespace(f"webhook-replica-{i}", labels={label: "true"}) for i, label in enumerate(labels)]
    config = webhook_configuration(name, ports[0], labels[0])
    config["webhooks"] = [
        {**webhook_configuration(name, port, label)["webhooks"][0], "name": f"replica-{i}.ksched.io"}
        for i, (port, label) in enumerate(zip(ports, labels, strict=True))
    ]
    kube.request("DELETE", secret_path)
    r = kube.request(
        "POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", body=config
    )
    assert r.ok, r.data
    lease = {"leaderElect": True, "resourceName": "ksched", "resourceNamespace": ns, **FAST_LEASE}

    def webhook(port: int) -> dict[str, Any]:
        return {
            "enabled": True,
            "address": f"127.0.0.1:{port}",
            "hosts": ["127.0.0.1"],
            "configurationName": name,
        }

    try:
        _, kubeconfig = apply_service_account(cluster, kube, tmp_path, rbac)
        with (
            ksched(cluster, tmp_path, "replica-0", lease, str(kubeconfig), webhook=webhook(ports[0])) as a,
            ksched(cluster, tmp_path, "replica-1", lease, str(kubeconfig), webhook=webhook(ports[1])) as b,
        ):
            output = lambda: a.output() + b.output()  # noqa: E731
            # The API server picks up a new caBundle within a second or two.
            admitted = lambda: [admitted_scheduler(kube, n) for n in routed]  # noqa: E731
            assert wait_for(lambda: admitted() == ["ksched", "ksched"], 30), (admitted(), output())
            shared = kube.request("GET", secret_path).json()["data"]
            bundles = {w["clientConfig"]["caBundle"] for w in kube.request("GET", path).json()["webhooks"]}
            assert bundles == {shared["ca.crt"]}
            served = {ssl.get_server_certificate(("127.0.0.1", port)) for port in ports}
            assert {pem_body(pem) for pem in served} == {
                pem_body(base64.b64decode(shared["tls.crt"]).decode())
            }
            assert not refused(output()), output()
    finally:
        kube.request("DELETE", path)
        kube.request("DELETE", secret_path)
        delete_rbac(cluster, rbac)


def pem_body(pem: str) -> str:
    """A PEM certificate without its armour and line breaks (ssl and cryptography wrap alike,
    but compare the encoded certificate itself)."""
    return "".join(line for line in pem.strip().splitlines() if not line.startswith("-----"))
