"""deploy/helm/ksched: it lints, renders the kustomize base's objects, its values reach the
objects and the configuration, and its rendering applies (server-side dry run) on the local
control plane with a ServiceAccount that can schedule and do nothing more."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ksched.cluster import local
from ksched.cluster.build import BuildError, bin_dir, ensure_built, helm_binary
from ksched.config import Config, parse_config
from ksched.loop.client import Kube
from tests.integration.helpers import (
    FAST_LEASE,
    RBAC_KINDS,
    Namespaces,
    Obj,
    apply_service_account,
    assert_service_account_schedules_and_nothing_more,
    create,
    delete_rbac,
    ksched,
    kubectl,
    make_pod,
    pods_in,
    refused,
    unavailable,
    wait_for,
)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CHART = DEPLOY / "helm" / "ksched"
# The kustomize base's namespace: rendering the chart into it gives the base's objects.
BASE_NAMESPACE = "ksched-system"
# Labels the chart adds to tell releases apart; the base has one ksched per cluster.
RELEASE_LABEL = "app.kubernetes.io/instance"


@pytest.fixture(scope="module")
def helm() -> Path:
    """helm, built from its Go module when missing (with the control plane's kubectl)."""
    try:
        ensure_built()
    except BuildError as err:
        unavailable(str(err))
    return helm_binary()


def helm_run(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, check=False)


def template(helm: Path, *args: str, release: str = "ksched", namespace: str = BASE_NAMESPACE) -> str:
    out = helm_run(helm, "template", release, str(CHART), "--namespace", namespace, *args)
    assert out.returncode == 0, out.stderr
    return out.stdout


def render(helm: Path, *args: str, release: str = "ksched", namespace: str = BASE_NAMESPACE) -> list[Obj]:
    return [d for d in yaml.safe_load_all(template(helm, *args, release=release, namespace=namespace)) if d]


def kustomize(path: Path) -> list[Obj]:
    out = subprocess.run(
        [str(bin_dir() / "kubectl"), "kustomize", str(path)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_name(objs: list[Obj]) -> dict[tuple[str, str], Obj]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def without_key(value: Any, key: str) -> Any:
    if isinstance(value, dict):
        return {k: without_key(v, key) for k, v in value.items() if k != key}
    if isinstance(value, list):
        return [without_key(v, key) for v in value]
    return value


def comparable(obj: Obj) -> Obj:
    """An object as both renderings must agree on it: labels, and the annotation that rolls
    the pods on a configuration change, are the chart's own; the configuration is compared
    as data, not as text."""
    obj = copy.deepcopy(obj)
    obj["metadata"] = {k: v for k, v in obj["metadata"].items() if k in ("name", "namespace")}
    if obj["kind"] == "ConfigMap":
        obj["data"] = {k: yaml.safe_load(v) for k, v in obj["data"].items()}
    if obj["kind"] == "Deployment":
        obj["spec"]["template"]["metadata"].pop("annotations", None)
    return without_key(obj, RELEASE_LABEL)  # type: ignore[no-any-return]


def assert_same_objects(chart: list[Obj], base: list[Obj]) -> None:
    got, want = by_name(chart), by_name(base)
    assert sorted(got) == sorted(want)
    for key, obj in want.items():
        assert comparable(got[key]) == comparable(obj), key
        labels = got[key]["metadata"].get("labels") or {}
        assert (obj["metadata"].get("labels") or {}).items() <= labels.items(), key


def configuration(objs: list[Obj]) -> dict[str, Any]:
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap"]
    doc: dict[str, Any] = yaml.safe_load(cm["data"]["config.yaml"])
    return doc


def parsed(objs: list[Obj]) -> Config:
    return parse_config(configuration(objs))


def one(objs: list[Obj], kind: str, name: str) -> Obj:
    return by_name(objs)[(kind, name)]


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["--set", "handoff.enabled=true"],
        ["--set", "shadow.enabled=true"],
        ["--set", "webhook.enabled=false", "--set", "namespace.create=true"],
        ["--set", "rebalance.enabled=true"],
        ["--set", "sharding.enabled=true"],
    ],
    ids=["default", "handoff", "shadow", "no-webhook", "rebalance", "sharding"],
)
def test_chart_lints(helm: Path, values: list[str]) -> None:
    out = helm_run(helm, "lint", "--strict", str(CHART), *values)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout


def test_default_rendering_is_the_kustomize_base(helm: Path) -> None:
    base = kustomize(DEPLOY)
    namespaces = [o for o in base if o["kind"] == "Namespace"]
    assert [o["metadata"]["name"] for o in namespaces] == [BASE_NAMESPACE]
    # helm creates the release namespace (--create-namespace); the chart renders it on request.
    assert_same_objects(render(helm, "--include-crds"), [o for o in base if o["kind"] != "Namespace"])
    assert_same_objects(render(helm, "--include-crds", "--set", "namespace.create=true"), base)


def test_handoff_adds_the_handoff_component(helm: Path) -> None:
    default = render(helm)
    handoff = render(helm, "--set", "handoff.enabled=true", "--set", "handoff.after=90s")
    added = [o for o in handoff if (o["kind"], o["metadata"]["name"]) not in by_name(default)]
    assert_same_objects(added, kustomize(DEPLOY / "handoff"))
    cfg = parsed(handoff)
    assert cfg.handoff.enabled and cfg.handoff.after_s == 90


def test_sharding_adds_the_sharding_component(helm: Path) -> None:
    default = render(helm)
    sharded = render(helm, "--set", "sharding.enabled=true", "--set", "sharding.leaseDuration=12s")
    added = [o for o in sharded if (o["kind"], o["metadata"]["name"]) not in by_name(default)]
    assert_same_objects(added, kustomize(DEPLOY / "sharding"))
    assert "sharding" not in configuration(default)
    cfg = parsed(sharded).sharding
    assert cfg.enabled and cfg.lease_duration_s == 12
    out = helm_run(helm, "template", "ksched", str(CHART), "--set", "configuration.sharding.enabled=true")
    assert out.returncode != 0
    assert "enable sharding with sharding.enabled, not configuration.sharding" in out.stderr


# A configuration the rebalancer accepts: a metric with a hot line and an estimate.
REBALANCED_METRIC = {
    "name": "cpu",
    "source": "prometheus",
    "query": "node:node_cpu_utilisation:ratio",
    "filter": {"above": 0.8},
    "estimate": {"resource": "cpu"},
}


def test_rebalancing_adds_the_rebalance_component(helm: Path, tmp_path: Path) -> None:
    values = {
        "configuration": {"metrics": [REBALANCED_METRIC], "prometheus": {"url": "http://prometheus:9090"}},
        "rebalance": {"enabled": True, "interval": "10s", "minPodAge": "2m"},
    }
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    default = render(helm, "-f", str(path), "--set", "rebalance.enabled=false")
    rebalance = render(helm, "-f", str(path))
    added = [o for o in rebalance if (o["kind"], o["metadata"]["name"]) not in by_name(default)]
    assert_same_objects(added, kustomize(DEPLOY / "rebalance"))
    assert "rebalance" not in configuration(default)
    cfg = parsed(rebalance).rebalance
    assert cfg.enabled and (cfg.interval_s, cfg.min_pod_age_s) == (10, 120)
    # In shadow mode the rebalancer only records what it would do: it may evict nothing.
    shadow = render(helm, "-f", str(path), "--set", "shadow.enabled=true")
    assert not [o for o in shadow if o["metadata"]["name"].endswith("-rebalance")]
    assert parsed(shadow).rebalance.enabled and parsed(shadow).shadow.enabled


def test_rebalancing_is_enabled_by_its_value_which_grants_the_eviction(helm: Path) -> None:
    out = helm_run(helm, "template", "ksched", str(CHART), "--set", "configuration.rebalance.enabled=true")
    assert out.returncode != 0
    assert "enable rebalancing with rebalance.enabled, not configuration.rebalance" in out.stderr


def test_values_reach_the_objects_and_the_configuration(helm: Path, tmp_path: Path) -> None:
    selector = {"matchExpressions": [{"key": "team", "operator": "In", "values": ["web", "batch"]}]}
    resources = {"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}
    values = {
        "replicas": 3,
        "image": {"repository": "internal/ksched", "tag": "0.2.0"},
        "resources": resources,
        "configuration": {
            "profiles": [{"schedulerName": "ksched"}, {"schedulerName": "ksched-cheap"}],
            "metrics": [
                {"name": "cpu", "source": "prometheus", "query": "node_load1", "nodeLabel": "node"},
            ],
            "prometheus": {"url": "http://prometheus.monitoring:9090"},
            "leaderElection": {"leaseDuration": "30s"},
        },
        "webhook": {"namespaceSelector": selector},
    }
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    objs = render(helm, "-f", str(path), release="edge", namespace="sched")
    name = "edge-ksched"

    cfg = parsed(objs)
    assert [p.scheduler_name for p in cfg.profiles] == ["ksched", "ksched-cheap"]
    assert [m.name for m in cfg.metrics] == ["cpu"]
    assert cfg.prometheus.url == "http://prometheus.monitoring:9090"
    assert (cfg.leader_election.resource_name, cfg.leader_election.resource_namespace) == (name, "sched")
    assert cfg.leader_election.lease_duration_s == 30 and cfg.leader_election.leader_elect
    assert cfg.webhook.enabled and cfg.webhook.configuration_name == name
    assert cfg.webhook.hosts == (f"{name}.sched.svc", f"{name}.sched.svc.cluster.local")

    deployment = one(objs, "Deployment", name)
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 3
    assert pod["containers"][0]["image"] == "internal/ksched:0.2.0"
    assert pod["containers"][0]["resources"] == resources
    assert pod["serviceAccountName"] == name
    assert pod["volumes"][0]["configMap"]["name"] == f"{name}-config"
    assert one(objs, "ConfigMap", f"{name}-config")["metadata"]["namespace"] == "sched"

    webhook = one(objs, "MutatingWebhookConfiguration", name)["webhooks"][0]
    assert webhook["namespaceSelector"] == selector
    service = webhook["clientConfig"]["service"]
    assert (service["name"], service["namespace"]) == (name, "sched")
    rules = one(objs, "ClusterRole", name)["rules"]
    assert [r["resourceNames"] for r in rules if "resourceNames" in r] == [[name]]
    assert one(objs, "Role", f"{name}-leader-election")["rules"][1]["resourceNames"] == [name]
    for binding in ("ClusterRoleBinding", "RoleBinding"):
        subjects = one(objs, binding, name if binding == "ClusterRoleBinding" else f"{name}-leader-election")
        assert subjects["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "sched"}]


def test_a_configuration_change_rolls_the_pods(helm: Path) -> None:
    def checksum(*args: str) -> str:
        objs = render(helm, *args)
        annotations = one(objs, "Deployment", "ksched")["spec"]["template"]["metadata"]["annotations"]
        return str(annotations["ksched.io/config-checksum"])

    assert checksum() == checksum("--set", "replicas=4")
    assert checksum() != checksum("--set", "configuration.batch.maxSize=256")


@pytest.mark.parametrize(
    "values", [["--set", "webhook.enabled=false"], ["--set", "shadow.enabled=true"]], ids=["off", "shadow"]
)
def test_without_the_webhook_nothing_routes_pods_to_ksched(helm: Path, values: list[str]) -> None:
    objs = render(helm, *values)
    assert not [o for o in objs if o["kind"] == "MutatingWebhookConfiguration"]
    assert "webhook" not in configuration(objs)
    assert not parsed(objs).webhook.enabled
    rules = one(objs, "ClusterRole", "ksched")["rules"]
    assert not [r for r in rules if "admissionregistration.k8s.io" in r["apiGroups"]]


def test_shadow_mode_is_a_configuration_key_only_when_enabled(helm: Path) -> None:
    assert "shadow" not in configuration(render(helm))
    shadow = render(helm, "--set", "shadow.enabled=true", "--set", "shadow.namespaces={web}")
    assert configuration(shadow)["shadow"] == {"enabled": True, "namespaces": ["web"]}
    cfg = parsed(shadow)
    assert cfg.shadow.enabled and cfg.shadow.namespaces == ("web",)


def test_shadow_mode_refuses_handoff(helm: Path) -> None:
    out = helm_run(
        helm,
        "template",
        "ksched",
        str(CHART),
        "--set",
        "shadow.enabled=true",
        "--set",
        "handoff.enabled=true",
    )
    assert out.returncode != 0
    assert "handoff.enabled and shadow.enabled exclude each other" in out.stderr


@pytest.mark.cluster
def test_rendering_applies_with_server_side_dry_run(
    cluster: local.ClusterState, kube: Kube, namespace: Namespaces, helm: Path
) -> None:
    # A dry-run namespace does not exist for the dry-run objects inside it: create it for real.
    ns = namespace("ksched-helm")
    rendering = template(helm, "--include-crds", "--set", "handoff.enabled=true", namespace=ns)
    out = kubectl(cluster, "apply", "--dry-run=server", "-f", "-", input_=rendering)
    assert out.returncode == 0, out.stderr
    applied = out.stdout.splitlines()
    objs = [d for d in yaml.safe_load_all(rendering) if d]
    assert len(applied) == len(objs), out.stdout
    for obj in objs:
        group = obj["apiVersion"].rpartition("/")[0]
        resource = obj["kind"].lower() + (f".{group}" if group else "")
        assert any(line.startswith(f"{resource}/{obj['metadata']['name']} ") for line in applied), (
            resource,
            out.stdout,
        )
    assert all(line.endswith("(server dry run)") for line in applied), out.stdout


@pytest.mark.cluster
def test_the_charts_service_account_can_schedule_and_nothing_more(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces, helm: Path
) -> None:
    ns = namespace("ksched-helm-rbac")
    objs = render(helm, release="rbac", namespace=ns)
    rbac = [o for o in objs if o["kind"] in RBAC_KINDS]
    # The Lease the chart's configuration names is the one its Role lets ksched update.
    lease = {**configuration(objs)["leaderElection"], **FAST_LEASE}
    assert_service_account_schedules_and_nothing_more(cluster, kube, tmp_path, namespace, rbac, lease)


@pytest.mark.cluster
def test_only_a_release_that_rebalances_or_hands_off_may_evict(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces, helm: Path
) -> None:
    # The Eviction verb comes with the feature that uses it, never with the base role.
    work = namespace("ksched-helm-evict-work")
    for release, values, may in (
        ("plain", [], "no"),
        ("rebalance", ["--set", "rebalance.enabled=true"], "yes"),
        ("handoff", ["--set", "handoff.enabled=true"], "yes"),
        ("shadow-rebalance", ["--set", "rebalance.enabled=true", "--set", "shadow.enabled=true"], "no"),
    ):
        ns = namespace(f"ksched-helm-evict-{release}")
        rbac = [o for o in render(helm, *values, release=release, namespace=ns) if o["kind"] in RBAC_KINDS]
        (account,) = [o for o in rbac if o["kind"] == "ServiceAccount"]
        who = f"system:serviceaccount:{ns}:{account['metadata']['name']}"
        try:
            apply_service_account(cluster, kube, tmp_path, rbac)
            evict = ("create", "pods", "--subresource", "eviction")
            out = kubectl(cluster, "auth", "can-i", *evict, "--as", who, "-n", work)
            assert out.stdout.strip() == may, (release, out.stdout, out.stderr)
        finally:
            delete_rbac(cluster, rbac)


@pytest.mark.cluster
def test_the_webhooks_account_may_read_and_replace_its_own_secret_and_no_other(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces, helm: Path
) -> None:
    # The replicas share the webhook's certificate through one Secret in the release namespace:
    # get and update that one, create (which cannot name it); no other Secret, nowhere else,
    # and nothing at all without the webhook.
    for release, values, may in (
        ("secret", [], "yes"),
        ("secret-off", ["--set", "webhook.enabled=false"], "no"),
    ):
        ns = namespace(f"ksched-helm-{release}")
        rbac = [o for o in render(helm, *values, release=release, namespace=ns) if o["kind"] in RBAC_KINDS]
        (account,) = [o for o in rbac if o["kind"] == "ServiceAccount"]
        who = f"system:serviceaccount:{ns}:{account['metadata']['name']}"
        own = f"secrets/{account['metadata']['name']}-webhook-tls"
        asks = [
            ("get", own, ns, may),
            ("update", own, ns, may),
            ("create", "secrets", ns, may),
            ("get", "secrets/other", ns, "no"),
            ("update", "secrets/other", ns, "no"),
            ("list", "secrets", ns, "no"),
            ("watch", "secrets", ns, "no"),
            ("patch", own, ns, "no"),
            ("delete", own, ns, "no"),
            ("get", own, "default", "no"),
            ("create", "secrets", "default", "no"),
        ]
        try:
            apply_service_account(cluster, kube, tmp_path, rbac)
            for verb, resource, where, want in asks:
                out = kubectl(cluster, "auth", "can-i", verb, resource, "--as", who, "-n", where)
                assert out.stdout.strip() == want, (release, verb, resource, where, out.stdout, out.stderr)
        finally:
            delete_rbac(cluster, rbac)


# What a shadow never does, as ``kubectl auth can-i`` asks it, in the namespace of the pods it
# watches: bind, post events, write a pod's status, evict or delete pods, write volumes or claims.
SHADOW_NEVER = (
    ("create", "pods", "binding"),
    ("create", "events.events.k8s.io", ""),
    ("patch", "pods", "status"),
    ("create", "pods", "eviction"),
    ("delete", "pods", ""),
    ("update", "persistentvolumes", ""),
    ("patch", "persistentvolumeclaims", ""),
)


@pytest.mark.cluster
def test_the_shadow_charts_service_account_compares_and_can_write_nothing(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces, helm: Path
) -> None:
    # An operator trying ksched on production traffic installs it in shadow mode: its account
    # must be unable to touch a pod, and still able to do the shadow's work.
    ns = namespace("ksched-helm-shadow")
    objs = render(helm, "--set", "shadow.enabled=true", release="shadow", namespace=ns)
    rbac = [o for o in objs if o["kind"] in RBAC_KINDS]
    # Its role and binding, and secure serving's: the reviews (system:auth-delegator), the
    # client CA's ConfigMap in kube-system, and ksched-metrics-reader (bound to no one).
    assert sorted(o["kind"] for o in rbac) == [
        *("ClusterRole", "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding"),
        *("RoleBinding", "ServiceAccount"),
    ]
    (account,) = [o for o in rbac if o["kind"] == "ServiceAccount"]
    who = f"system:serviceaccount:{ns}:{account['metadata']['name']}"
    work = namespace("ksched-helm-shadow-work")
    try:
        _, kubeconfig = apply_service_account(cluster, kube, tmp_path, rbac)
        never = [
            (verb, resource, ("--subresource", sub) if sub else (), work)
            for verb, resource, sub in SHADOW_NEVER
        ]
        # Nor take the release's Lease (the leader-election Role's rights), in its namespace.
        lease = f"leases.coordination.k8s.io/{account['metadata']['name']}"
        never += [("create", "leases.coordination.k8s.io", (), ns), ("update", lease, (), ns)]
        for verb, resource, sub, where in never:
            out = kubectl(cluster, "auth", "can-i", verb, resource, *sub, "--as", who, "-n", where)
            assert out.stdout.strip() == "no", (verb, resource, sub, where, out.stdout, out.stderr)
        # The reads it does need are granted (a check that can fail, unlike "no" above alone).
        out = kubectl(cluster, "auth", "can-i", "watch", "pods", "--as", who, "-A")
        assert out.stdout.strip() == "yes", out.stdout + out.stderr

        config = configuration(objs)
        with ksched(
            cluster,
            tmp_path,
            "shadow-sa",
            {},
            kubeconfig=str(kubeconfig),
            **{"shadow": {**config["shadow"], "namespaces": [work]}},
        ) as k:
            assert wait_for(lambda: k.get("/readyz")[0] == 200, 30), k.output()
            pod = make_pod("compared", work)
            pod["spec"]["schedulerName"] = "default-scheduler"
            create(kube, [pod])
            assert wait_for(lambda: all(p["spec"].get("nodeName") for p in pods_in(kube, work)), 60)
            report = lambda: json.loads(k.get("/shadow")[1])  # noqa: E731
            assert wait_for(lambda: report()["total"] == 1, 30), k.output()
            assert not refused(k.output()), k.output()
    finally:
        delete_rbac(cluster, rbac)
