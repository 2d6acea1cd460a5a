"""Helpers for tests that run ksched against the local control plane: API access,
pod factories, and ksched itself as a subprocess (as it runs in production)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
import yaml

from ksched.bench import invariants
from ksched.cluster import local
from ksched.cluster.build import bin_dir
from ksched.loop.client import ApiUnavailableError, Kube, service_account_kubeconfig

Obj = dict[str, Any]
# Short leases keep the failover test quick: 4 s lease, 3 s renew deadline, 1 s retry.
FAST_LEASE = {"leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "1s"}


def unavailable(why: str) -> None:
    """Skip a test whose local component cannot be had, or fail it under KSCHED_REQUIRE_CLUSTER=1 (CI)."""
    if os.environ.get("KSCHED_REQUIRE_CLUSTER") == "1":
        pytest.fail(f"KSCHED_REQUIRE_CLUSTER=1 but the local control plane is unavailable: {why}")
    pytest.skip(f"local control plane unavailable: {why}")


# An HTTP 403 in a log: the number alone, not inside another (a port such as 40373) nor after
# a point (a log line's time, 02:54:38.403, or a duration, 0.403 s).
_FORBIDDEN = re.compile(r"(?<![.\d])\b403\b|Forbidden")


def refused(log: str) -> bool:
    """Whether a ksched log shows a request the API server refused for want of rights."""
    return _FORBIDDEN.search(log) is not None


@contextlib.contextmanager
def own_cluster(directory: Path) -> Iterator[None]:
    """Point ``KSCHED_CLUSTER_DIR`` at ``directory`` (a module's cluster of its own, beside the
    session's), and afterwards take that cluster down and point it back."""
    saved = os.environ.get("KSCHED_CLUSTER_DIR")
    os.environ["KSCHED_CLUSTER_DIR"] = str(directory)
    try:
        yield
    finally:
        local.down()
        if saved is None:
            os.environ.pop("KSCHED_CLUSTER_DIR", None)
        else:
            os.environ["KSCHED_CLUSTER_DIR"] = saved


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def cli(*args: str) -> str:
    """``ksched ARGS`` as a user runs it; its standard output (it must succeed)."""
    command = [sys.executable, "-m", "ksched.commands.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def make_pod(name: str, namespace: str, cpu: str = "250m", memory: str = "256Mi", **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name.rsplit("-", 1)[0]}},
        "spec": {
            "schedulerName": "ksched",
            "containers": [
                {"name": "app", "image": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ],
            **spec,
        },
    }


def create(kube: Kube, objs: list[Obj], tolerate_outage: bool = False) -> None:
    def post(obj: Obj) -> None:
        if obj["kind"] == "Node":
            path = "/api/v1/nodes"
        elif obj["kind"] == "Namespace":
            path = "/api/v1/namespaces"
        else:
            path = f"/api/v1/namespaces/{obj['metadata']['namespace']}/{obj['kind'].lower()}s"
        try:
            r = kube.request("POST", path, body=obj)
        except ApiUnavailableError:
            if tolerate_outage:
                return
            raise
        assert tolerate_outage or r.status in (200, 201, 409), r.data[:300]

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(post, objs))


class Namespaces(Protocol):
    """The ``namespace`` fixture: ``ns = namespace("run-bulk")`` creates the namespace
    (with ``labels`` when given; an existing one is kept) and returns its name; the
    pods in every namespace a test made are deleted when the test ends, however it ends."""

    def __call__(self, name: str, labels: dict[str, str] | None = None) -> str: ...


def pods_in(kube: Kube, namespace: str | None = None) -> list[Obj]:
    path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
    items: list[Obj] = kube.request("GET", path).json()["items"]
    return items


def delete_pods(kube: Kube, namespace: str) -> None:
    kube.request("DELETE", f"/api/v1/namespaces/{namespace}/pods", query={"gracePeriodSeconds": 0})
    wait_for(lambda: not pods_in(kube, namespace), 60)


def scheduled_events(kube: Kube, namespace: str) -> list[Obj]:
    events = kube.request("GET", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events").json()["items"]
    return [e for e in events if e.get("reason") == "Scheduled"]


def events_for(kube: Kube, namespace: str, name: str, reason: str) -> list[Obj]:
    """The pod's events with this reason, oldest first."""
    events = kube.request("GET", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events").json()["items"]
    mine = [e for e in events if e.get("reason") == reason and e["regarding"]["name"] == name]
    return sorted(mine, key=lambda e: e.get("eventTime") or e["metadata"]["creationTimestamp"])


def assert_no_node_overcommitted(kube: Kube) -> None:
    """No node's bound pods request more of any resource (or are more pods) than it allocates,
    and none is bound to a node that does not exist: :mod:`ksched.bench.invariants`."""
    nodes = kube.request("GET", "/api/v1/nodes").json()["items"]
    pods = pods_in(kube)
    assert not invariants.unknown_nodes(nodes, pods), "pods bound to nodes that do not exist"
    over = invariants.overcommitted(nodes, pods)
    assert not over, f"over-committed: {'; '.join(map(str, over))}"


@dataclass
class Ksched:
    proc: subprocess.Popen[bytes]
    port: int
    identity: str
    log: Path
    # "https" for a ksched started with secure serving (its certificate is not verified).
    scheme: str = "http"

    def get(self, path: str, token: str | None = None) -> tuple[int, str]:
        """Status and body of a GET of ``path``, with ``token`` as the bearer token if given."""
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        request = urllib.request.Request(f"{self.scheme}://127.0.0.1:{self.port}{path}", headers=headers)
        context = None
        if self.scheme == "https":  # the certificate ksched generated at start: not verifiable
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        try:
            with urllib.request.urlopen(request, timeout=2, context=context) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as err:
            return int(err.code), err.read().decode()
        except OSError:
            return 0, ""

    def leads(self) -> bool:
        return "this replica leads" in self.get("/readyz")[1]

    def metric(self, name: str) -> float:
        total = 0.0
        for line in self.get("/metrics")[1].splitlines():
            if line.startswith(name) and not line.startswith("#"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


@contextlib.contextmanager
def ksched(
    cluster: local.ClusterState,
    tmp_path: Path,
    identity: str,
    lease: dict[str, Any],
    kubeconfig: str | None = None,
    secure: bool = False,
    **config: Any,
) -> Iterator[Ksched]:
    """``ksched run`` with ``config``, over plain HTTP without authentication unless ``secure``."""
    cfg = {
        "apiVersion": "ksched.io/v1alpha1",
        "kind": "KschedConfiguration",
        "leaderElection": {
            "resourceName": "ksched-" + tmp_path.name[:40].lower().replace("_", "-").strip("-"),
            **lease,
        },
        **config,
    }
    path = tmp_path / f"{identity}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    port = local.free_port()
    log = tmp_path / f"{identity}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "ksched.commands.cli", "run", "--config", str(path)),
                *(
                    "--kubeconfig",
                    kubeconfig or cluster.kubeconfig,
                    "--address",
                    f"127.0.0.1:{port}",
                    "--identity",
                    identity,
                ),
                # Plain HTTP, no authentication: the tests read /metrics without credentials.
                *(() if secure else ("--insecure-serving",)),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    k = Ksched(proc, port, identity, log, "https" if secure else "http")
    try:
        assert wait_for(lambda: k.get("/healthz")[0] == 200 or proc.poll() is not None, 30), k.output()
        assert proc.poll() is None, k.output()
        yield k
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def webhook_configuration(name: str, port: int, label: str = "ksched.io/route") -> Obj:
    """A MutatingWebhookConfiguration sending pod creations in namespaces labelled
    ``label=true`` to ksched's webhook on loopback (failurePolicy Ignore)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "route.ksched.io",
                "clientConfig": {"url": f"https://127.0.0.1:{port}/mutate"},
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {label: "true"}},
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 3,
            }
        ],
    }


def kubectl(
    cluster: local.ClusterState, *args: str, input_: str | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [str(bin_dir() / "kubectl"), "--kubeconfig", cluster.kubeconfig, *args]
    return subprocess.run(cmd, input=input_, capture_output=True, text=True, check=False)


def as_token(
    cluster: local.ClusterState, token: str, path: str, headers: dict[str, str] | None = None
) -> int:
    """The HTTP status of a GET of ``path`` with a bearer token."""
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


RBAC_KINDS = {
    "ServiceAccount": "serviceaccount",
    "ClusterRole": "clusterrole",
    "ClusterRoleBinding": "clusterrolebinding",
    "Role": "role",
    "RoleBinding": "rolebinding",
}


def _rbac_volume(kube: Kube, storage_class: str, volume: str) -> None:
    """A WaitForFirstConsumer class without a provisioner and one volume of it, any node."""
    for path, obj in (
        (
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": storage_class},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            },
        ),
        (
            "/api/v1/persistentvolumes",
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": volume},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": storage_class,
                    "hostPath": {"path": f"/tmp/{volume}"},
                },
            },
        ),
    ):
        r = kube.request("POST", path, body=obj)
        assert r.status in (200, 201, 409), r.data[:300]


def assert_service_account_schedules_and_nothing_more(
    cluster: local.ClusterState,
    kube: Kube,
    tmp_path: Path,
    namespace: Namespaces,
    rbac: list[Obj],
    lease: dict[str, Any],
) -> None:
    """Apply ``rbac`` (namespaced objects already in their namespace), then check with a token
    of its ServiceAccount that reading Secrets and impersonating are refused and that ksched,
    electing itself through ``lease``, binds a pod and writes PodScheduled=False on one that
    fits nowhere without a single 403, and binds the volume of a pod with a
    WaitForFirstConsumer claim. The objects are deleted afterwards."""
    (account,) = [d for d in rbac if d["kind"] == "ServiceAccount"]
    name = account["metadata"]["name"]
    try:
        token, kubeconfig = apply_service_account(cluster, kube, tmp_path, rbac)

        # Outside the role: reading Secrets, and acting as someone else.
        assert as_token(cluster, token, "/api/v1/namespaces/default/secrets") == 403
        assert as_token(cluster, token, "/api/v1/nodes", {"Impersonate-User": "system:admin"}) == 403

        work = namespace(f"{name}-rbac-work")
        # A pod whose claim ksched binds: the volume verbs (claimRef update, claim reads).
        volume_class, volume = f"{name}-rbac-local", f"{name}-rbac-volume"
        _rbac_volume(kube, volume_class, volume)
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "rbac-data", "namespace": work},
            "spec": {
                "storageClassName": volume_class,
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        with_claim = make_pod(
            "rbac-volume",
            work,
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "rbac-data"}}],
        )
        with ksched(cluster, tmp_path, "as-service-account", lease, kubeconfig=str(kubeconfig)) as k:
            assert wait_for(k.leads, 30), k.output()
            create(kube, [claim])
            create(kube, [make_pod("rbac-0", work), make_pod("rbac-big", work, cpu="500"), with_claim])
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
            assert wait_for(
                lambda: [
                    p
                    for p in pods_in(kube, work)
                    if p["metadata"]["name"] == "rbac-volume" and p["spec"].get("nodeName")
                ],
                60,
            ), k.output()
            bound = kube.request("GET", f"/api/v1/namespaces/{work}/persistentvolumeclaims/rbac-data").json()
            assert bound["spec"].get("volumeName") == volume, (
                "the claim was bound with the service account's rights"
            )
            assert not refused(k.output()), k.output()
    finally:
        kube.request("DELETE", f"/apis/storage.k8s.io/v1/storageclasses/{name}-rbac-local")
        kube.request("DELETE", f"/api/v1/persistentvolumes/{name}-rbac-volume")
        delete_rbac(cluster, rbac)


def apply_service_account(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, rbac: list[Obj]
) -> tuple[str, Path]:
    """Apply ``rbac`` (one ServiceAccount and its roles); a token of the account and a
    kubeconfig that uses it."""
    (account,) = [d for d in rbac if d["kind"] == "ServiceAccount"]
    ns, name = account["metadata"]["namespace"], account["metadata"]["name"]
    for doc in rbac:
        applied = kubectl(cluster, "apply", "-f", "-", input_=json.dumps(doc))
        assert applied.returncode == 0, applied.stderr
    kubeconfig = tmp_path / f"{name}-sa.kubeconfig"
    token = service_account_kubeconfig(kube, Path(cluster.kubeconfig), (ns, name), 3600, kubeconfig)
    return token, kubeconfig


def delete_rbac(cluster: local.ClusterState, rbac: list[Obj]) -> None:
    """Delete what :func:`apply_service_account` applied."""
    (account,) = [d for d in rbac if d["kind"] == "ServiceAccount"]
    for doc in reversed(rbac):
        kind, obj = RBAC_KINDS[doc["kind"]], doc["metadata"]["name"]
        where = doc["metadata"].get("namespace", account["metadata"]["namespace"])
        kubectl(cluster, "delete", kind, obj, "-n", where, "--ignore-not-found")
