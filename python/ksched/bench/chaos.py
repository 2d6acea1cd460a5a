"""``ksched bench --chaos``: a soak of two leader-elected ksched replicas under overlapping faults.

A local control plane of its own (etcd, kube-apiserver with an audit log of
bindings and Lease writes, kube-controller-manager's workload controllers,
kube-scheduler for pods the webhook leaves to it, KWOK nodes, a real
Prometheus scraping an in-process exporter) runs two ``ksched run`` replicas
with leader election and the mutating webhook. Pods arrive at a steady rate
(bare, Deployment-owned, gangs, affinity, preemptors on a tainted pool, pods
routed by the webhook; every pod scored by a live Prometheus metric) while
faults are injected on a schedule drawn from the seed, overlapping: leader
SIGKILL, leader SIGSTOP past its lease then SIGCONT, kube-apiserver and etcd
restarts, Prometheus stopped / hung / restarted, etcd compaction with an API
server restart (watches answered 410, relists), nodes deleted / added /
cordoned / tainted NoExecute, pods deleted while their bind is in flight,
PodGroups deleted mid-gang.

At the end the invariants are read from the API server's own state and its
audit log: every pod bound or pending with a FailedScheduling event; no node
over-committed; no bind by a replica that did not hold the Lease when the API
server received it; no gang partly bound; no preemption victim whose preemptor
is neither bound nor nominated; both replicas running.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ksched.bench import invariants
from ksched.cluster import local
from ksched.cluster.gauges import GaugeServer
from ksched.engine.gangs import POD_GROUP_API, POD_GROUP_LABEL
from ksched.errors import KschedError
from ksched.loop.client import ApiUnavailableError, Kube, load_configuration, service_account_kubeconfig
from ksched.objects import Obj

NS = "chaos"  # pods that name ksched (bare, affinity, gangs, preemptors)
ROUTED_NS = "chaos-routed"  # pods without a scheduler name, routed by the webhook
LEASE_NAME = "ksched-chaos"
LEASE_NS = "kube-system"
LEASE = {"leaseDuration": "6s", "renewDeadline": "4s", "retryPeriod": "1s"}
LEASE_S = 6.0
REPLICAS = ("chaos-a", "chaos-b")
POOL_LABEL = "chaos.ksched.io/pool"
# Controllers that delete bound pods: NoExecute taints evict, pods on deleted nodes are collected;
# and the names their requests carry (the taint manager uses the node controller's client). The
# taint manager finds a node's pods through an index of pods by node that it does not add itself
# (the node lifecycle or DaemonSet controller does); the DaemonSet controller, idle here, adds it.
EVICTING_CONTROLLERS = (
    "taint-eviction-controller",
    "pod-garbage-collector-controller",
    "daemonset-controller",
)
EVICTING_CLIENTS = ("node-controller", "pod-garbage-collector")
POOL_TAINT = {"key": "chaos.ksched.io/preempt", "value": "true", "effect": "NoSchedule"}
CHAOS_TAINT = {"key": "chaos.ksched.io/evict", "value": "true", "effect": "NoExecute"}
METRIC_QUERY = "node_chaos_utilization"
# A pod still pending this long after the faults ended, with no FailedScheduling event, is lost.
SETTLE_S = 120.0
FAULT_KINDS = (
    "leader-kill",
    "leader-freeze",
    "apiserver-restart",
    "etcd-restart",
    "prometheus-stop",
    "prometheus-hang",
    "watch-expiry",
    "nodes-delete-add",
    "nodes-cordon",
    "nodes-taint",
    "pods-delete-inflight",
    "podgroup-delete",
)


class ChaosError(KschedError):
    """The soak could not be set up or run."""


@dataclass
class Fault:
    kind: str
    start: float  # wall-clock seconds
    end: float = 0.0
    detail: str = ""


@dataclass
class ChaosFigures:
    seed: int
    nodes: int
    minutes: float
    rate: float
    duration_s: float = 0.0
    pods_created: int = 0
    pods_bound: int = 0
    pods_pending_with_reason: int = 0
    pods_lost: int = 0
    pods_deleted_by_soak: int = 0
    pods_gone_by: dict[str, int] = field(default_factory=dict)  # who deleted the pods gone at the end
    overcommitted_nodes: int = 0
    constraint_violations: int = 0  # nodeSelector, node affinity, anti-affinity, spread
    binds_by_ksched: int = 0
    binds_by_kube_scheduler: int = 0
    binds_by_non_leader: int = 0
    longest_without_leader_s: float = 0.0
    leader_changes: int = 0
    p99_bind_during_faults_s: float | None = None
    p99_bind_outside_faults_s: float | None = None
    bind_samples_during_faults: int = 0
    bind_samples_outside_faults: int = 0
    gangs_partly_bound: int = 0
    victims_without_preemptor: int = 0
    victims: int = 0
    replicas_running: int = 0
    replica_restarts: int = 0
    replica_exits: int = 0  # exits the soak did not cause (each one a violation)
    pending_reasons: dict[str, int] = field(default_factory=dict)  # "kind: message" -> pods
    watch_relists: int = 0  # relists after 410 Gone, from the replicas' logs
    terms_lost: int = 0  # "lost the lease" in the replicas' logs
    faults: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def ok(self) -> bool:
        return not self.violations

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _now() -> float:
    return time.time()


def _ts(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _p99(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


# --- the exporter Prometheus scrapes ---------------------------------------------------------


class _Exporter(GaugeServer):
    """Per-node utilization gauges that drift with time, for the real Prometheus to scrape."""

    def __init__(self, seed: int) -> None:
        self.nodes: list[str] = []
        self.seed = seed
        super().__init__(self._render)

    def _render(self) -> bytes:
        tick = int(time.time() // 10)
        return (
            f"# TYPE {METRIC_QUERY} gauge\n"
            + "".join(
                f'{METRIC_QUERY}{{node="{n}"}} {random.Random(f"{self.seed}/{n}/{tick}").random():.3f}\n'
                for n in list(self.nodes)
            )
        ).encode()


# --- the two replicas ------------------------------------------------------------------------


class Replica:
    """One ``ksched run`` process with its own identity, credentials and webhook."""

    def __init__(self, identity: str, directory: Path, kubeconfig: Path, prometheus: str) -> None:
        self.identity = identity
        self.directory = directory
        self.kubeconfig = kubeconfig
        self.port = local.free_port()
        self.webhook_port = local.free_port()
        self.log = directory / f"{identity}.log"
        self.restarts = 0
        # Exits the soak did not cause (a crash, an error exit): how each ended, from its log.
        self.exits: list[str] = []
        self.frozen = False
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        config = {
            "apiVersion": "ksched.io/v1alpha1",
            "kind": "KschedConfiguration",
            "leaderElection": {
                "leaderElect": True,
                "resourceName": LEASE_NAME,
                "resourceNamespace": LEASE_NS,
                **LEASE,
            },
            "metrics": [
                {
                    "name": "utilization",
                    "source": "prometheus",
                    "query": METRIC_QUERY,
                    "nodeLabel": "node",
                    "prefer": "lower",
                    "missing": "neutral",
                    "weight": 5,
                    "maxAge": "30s",
                    "refresh": {"min": "1s", "max": "2s"},
                }
            ],
            "prometheus": {"url": prometheus, "timeout": "2s"},
            "webhook": {
                "enabled": True,
                "address": f"127.0.0.1:{self.webhook_port}",
                "hosts": ["127.0.0.1"],
                "configurationName": f"ksched-{identity}",
            },
        }
        self.config = directory / f"{identity}.json"
        self.config.write_text(json.dumps(config))

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "ksched.commands.cli",
                    "run",
                    "--config",
                    str(self.config),
                    "--kubeconfig",
                    str(self.kubeconfig),
                    "--address",
                    f"127.0.0.1:{self.port}",
                    "--identity",
                    self.identity,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,
            )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: int) -> None:
        if self.running():
            assert self.proc is not None
            self.proc.send_signal(signum)

    def kill_and_restart(self, down_s: float) -> None:
        with self.lock:
            if self.proc is not None:
                if self.frozen:
                    self.proc.send_signal(signal.SIGCONT)
                    self.frozen = False
                self.proc.kill()
                self.proc.wait()
            time.sleep(down_s)
            self.start()
            self.restarts += 1

    def restart_if_exited(self) -> None:
        """A replica that exited on its own is recorded (exit code, last log lines) and
        restarted, as the kubelet would restart its container. A replica being killed or
        frozen by a fault (its lock held) is left to that fault: the arrivals do not wait."""
        if not self.lock.acquire(blocking=False):
            return
        try:
            if self.proc is None or self.proc.poll() is None:
                return
            code = self.proc.returncode
            last = [line for line in self.tail(4000).splitlines() if line.strip()][-3:]
            self.exits.append(
                f"{self.identity} exited on its own with code {code}: {' | '.join(last)[-600:]}"
            )
            self.start()
            self.restarts += 1
        finally:
            self.lock.release()

    def freeze(self, seconds: float) -> None:
        with self.lock:
            if not self.running():
                return
            self.signal(signal.SIGSTOP)
            self.frozen = True
            time.sleep(seconds)
            self.signal(signal.SIGCONT)
            self.frozen = False

    def healthy(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.frozen:
            self.proc.send_signal(signal.SIGCONT)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def tail(self, chars: int | None = 3000) -> str:
        try:
            text = self.log.read_text(errors="replace")
            return text if chars is None else text[-chars:]
        except OSError:
            return ""


# --- the audit policy and what it records ----------------------------------------------------


def audit_policy() -> dict[str, Any]:
    """Bindings (who, when) and the soak's Lease writes (with the Lease as written); nothing else."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived", "ResponseStarted"],
        "rules": [
            {
                "level": "Metadata",
                "verbs": ["create"],
                "resources": [{"group": "", "resources": ["pods/binding"]}],
            },
            {
                # RequestResponse: a pod made from generateName (a Deployment's) has its name
                # only in the response.
                "level": "RequestResponse",
                "verbs": ["create"],
                "namespaces": [NS, ROUTED_NS],
                "resources": [{"group": "", "resources": ["pods"]}],
            },
            {
                # Who removed each pod that is gone at the end: the soak, a preemption, a controller.
                "level": "Metadata",
                "verbs": ["delete", "create"],
                "namespaces": [NS, ROUTED_NS],
                "resources": [{"group": "", "resources": ["pods", "pods/eviction"]}],
            },
            {
                "level": "RequestResponse",
                "verbs": ["create", "update", "patch"],
                "namespaces": [LEASE_NS],
                "resources": [
                    {"group": "coordination.k8s.io", "resources": ["leases"], "resourceNames": [LEASE_NAME]}
                ],
            },
            {"level": "None"},
        ],
    }


@dataclass
class LeaseWrite:
    at: float  # when the API server completed it
    holder: str
    duration_s: float


@dataclass
class BindRecord:
    at: float  # when the API server received it
    user: str
    namespace: str
    name: str
    code: int


@dataclass
class AuditRecords:
    """What the soak reads back from kube-apiserver's audit log."""

    leases: list[LeaseWrite] = field(default_factory=list)
    binds: list[BindRecord] = field(default_factory=list)
    creates: list[BindRecord] = field(default_factory=list)
    deletes: list[BindRecord] = field(default_factory=list)  # successful pod deletes and evictions


def _deleter_kind(user: str) -> str:
    """A readable name for who sent a pod's delete: a ksched replica (preemption), a
    controller, or the soak itself (the cluster's admin user)."""
    if user.startswith("controller:"):
        return user.split(":", 1)[1]
    prefix = f"system:serviceaccount:{LEASE_NS}:"
    if user.startswith(prefix) and user[len(prefix) :] in REPLICAS:
        return "ksched preemption"
    if user.startswith("system:serviceaccount:kube-system:"):
        return user.rsplit(":", 1)[1]
    if user.startswith("system:"):
        return user
    return "the soak"


def first_deleters(deletes: list[BindRecord]) -> dict[tuple[str, str], str]:
    """Who deleted each pod: the user of its first successful delete. A graceful delete is
    finished by a second one from KWOK (the kubelet's part), which is no one's decision."""
    out: dict[tuple[str, str], str] = {}
    for d in sorted(deletes, key=lambda d: d.at):
        out.setdefault((d.namespace, d.name), d.user)
    return out


def read_audit(path: Path) -> AuditRecords:
    """The Lease writes, binding requests, pod creations and pod deletions the audit log recorded."""
    records = AuditRecords()
    leases, binds, creates, deletes = records.leases, records.binds, records.creates, records.deletes
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return records
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut by a restart
        if event.get("stage") != "ResponseComplete":
            continue
        ref = event.get("objectRef") or {}
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        user = (event.get("user") or {}).get("username", "")
        # A create's name may be in its response only (generateName).
        name = (event.get("responseObject") or {}).get("metadata", {}).get("name") or ref.get("name", "")
        received = _ts(event["requestReceivedTimestamp"])
        if ref.get("resource") == "leases":
            if code not in (200, 201):
                continue
            lease_spec = (event.get("responseObject") or {}).get("spec") or {}
            leases.append(
                LeaseWrite(
                    _ts(event["stageTimestamp"]),
                    lease_spec.get("holderIdentity") or "",
                    float(lease_spec.get("leaseDurationSeconds") or 0),
                )
            )
        elif ref.get("resource") == "pods" and (
            (event.get("verb") == "delete" and not ref.get("subresource"))
            or ref.get("subresource") == "eviction"
        ):
            if code in (200, 201, 202):
                agent = event.get("userAgent") or ""
                if agent.startswith("kube-controller-manager/"):
                    # It runs with the admin's kubeconfig; its user agent names the controller.
                    user = "controller:" + agent.rsplit("/", 1)[1]
                deletes.append(
                    BindRecord(received, user, ref.get("namespace", ""), ref.get("name", ""), code)
                )
        elif ref.get("resource") == "pods" and not ref.get("subresource"):
            if code == 201:
                creates.append(BindRecord(received, user, ref.get("namespace", ""), name, code))
        elif ref.get("subresource") == "binding":
            binds.append(BindRecord(received, user, ref.get("namespace", ""), ref.get("name", ""), code))
    leases.sort(key=lambda w: w.at)
    binds.sort(key=lambda b: b.at)
    deletes.sort(key=lambda b: b.at)
    return records


def holder_at(leases: list[LeaseWrite], t: float) -> str | None:
    """Who held the Lease at ``t``: the holder of the last write before it, while that
    write's duration lasts (a renewal extends it; a release clears it)."""
    last: LeaseWrite | None = None
    for w in leases:
        if w.at > t:
            break
        last = w
    if last is None or not last.holder or t > last.at + last.duration_s:
        return None
    return last.holder


def leaderless_gaps(leases: list[LeaseWrite], start: float, end: float) -> float:
    """The longest stretch in [start, end] with no successful write by a holder (acquire or renew)."""
    times = [start] + [w.at for w in leases if w.holder and start <= w.at <= end] + [end]
    return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


# --- the soak --------------------------------------------------------------------------------


class Soak:
    def __init__(
        self, nodes: int, minutes: float, rate: float, seed: int, log: Callable[[str], None]
    ) -> None:
        self.nodes = nodes
        self.minutes = minutes
        self.rate = rate
        self.seed = seed
        self.rng = random.Random(seed)
        self.log = log
        self.figures = ChaosFigures(seed, nodes, minutes, rate)
        self.faults: list[Fault] = []
        self.faults_lock = threading.Lock()
        self.created_at: dict[tuple[str, str], float] = {}
        self.deleted: set[tuple[str, str]] = set()
        self.gang_pods: set[tuple[str, str]] = set()
        self.bare_pods: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.node_names: list[str] = []
        self.next_node = nodes
        self.replicas: list[Replica] = []
        self.kube: Kube | None = None
        self.counter = 0
        self.node_lock = threading.Lock()  # node faults pick from the same list
        self.control_lock = threading.Lock()  # one control-plane fault at a time

    # -- API helpers

    @property
    def api(self) -> Kube:
        assert self.kube is not None
        return self.kube

    def request(self, method: str, path: str, tries: int = 30, **kw: Any) -> int:
        """A request retried through outages (unreachable, 5xx, 429); returns the final status."""
        status = 0
        for _ in range(tries):
            try:
                r = self.api.request(method, path, **kw)
            except ApiUnavailableError:
                status = 0
            else:
                status = r.status
                if status < 500 and status != 429:
                    return status
            if self.stop.is_set() and method != "GET":
                return status
            time.sleep(1.0)
        return status

    def get_json(self, path: str) -> Obj:
        for _ in range(60):
            try:
                r = self.api.request("GET", path, timeout=120)
            except ApiUnavailableError:
                time.sleep(1.0)
                continue
            if r.ok:
                result: Obj = r.json()
                return result
            time.sleep(1.0)
        raise ChaosError(f"GET {path} kept failing")

    def create(self, obj: Obj, track: bool = True) -> bool:
        kind = obj["kind"]
        md = obj["metadata"]
        if kind == "Pod":
            path = f"/api/v1/namespaces/{md['namespace']}/pods"
        elif kind == "PodGroup":
            path = f"/apis/{POD_GROUP_API}/namespaces/{md['namespace']}/podgroups"
        elif kind == "Deployment":
            path = f"/apis/apps/v1/namespaces/{md['namespace']}/deployments"
        else:
            raise ChaosError(f"cannot create {kind}")
        t = _now()
        status = self.request("POST", path, body=obj)
        if status in (200, 201, 409):
            if kind == "Pod" and track:
                with self.lock:
                    self.created_at[(md["namespace"], md["name"])] = t
            return True
        return False

    # -- set-up

    def setup(self, directory: Path, exporter: _Exporter) -> local.ClusterState:
        self.log(f"starting the control plane with {self.nodes} KWOK nodes")
        state = local.up(
            nodes=self.nodes,
            zones=3,
            with_scheduler=True,
            with_controllers=True,
            extra_controllers=EVICTING_CONTROLLERS,
            prometheus_targets=exporter.address,
            audit_policy=audit_policy(),
        )
        self.kube = Kube(load_configuration(state.kubeconfig, 64))
        self.node_names = [f"kwok-node-{i:05d}" for i in range(self.nodes)]
        exporter.nodes = list(self.node_names)
        for ns, labels in ((NS, {}), (ROUTED_NS, {"ksched.io/route": "true"})):
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}
            self.request("POST", "/api/v1/namespaces", body=body)
        for name, value in (("chaos-low", 100), ("chaos-high", 1000)):
            priority: Obj = {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
            self.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body=priority)
        # The preemption pool: a few nodes only preemptors and their victims tolerate.
        pool = max(2, self.nodes // 50)
        self.pool = self.node_names[:pool]
        self.node_names = self.node_names[pool:]
        for name in self.pool:
            patch = {"metadata": {"labels": {POOL_LABEL: "preempt"}}, "spec": {"taints": [POOL_TAINT]}}
            self.request(
                "PATCH",
                f"/api/v1/nodes/{name}",
                body=patch,
                content_type="application/strategic-merge-patch+json",
            )
        for identity in REPLICAS:
            kubeconfig = self._replica_credentials(state, directory, identity)
            assert state.prometheus is not None
            replica = Replica(identity, directory, kubeconfig, state.prometheus)
            self._webhook_configuration(replica)
            self.replicas.append(replica)
        for r in self.replicas:
            r.start()
        deadline = time.monotonic() + 90
        while not all(r.healthy() for r in self.replicas):
            if time.monotonic() > deadline or not all(r.running() for r in self.replicas):
                raise ChaosError(
                    "the replicas did not start:\n"
                    + "\n".join(f"{r.identity}: {r.tail()}" for r in self.replicas)
                )
            time.sleep(0.5)
        # Fill the preemption pool with low-priority pods, so that preemptors must evict.
        for i, node in enumerate(self.pool):
            for j in range(3):
                self.create(self._pool_pod(f"victim-{i}-{j}", "chaos-low", "1", node))
        return state

    def _replica_credentials(self, state: local.ClusterState, directory: Path, identity: str) -> Path:
        """A ServiceAccount bound to cluster-admin per replica, so the audit log tells them apart."""
        sa = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": identity, "namespace": LEASE_NS},
        }
        self.request("POST", f"/api/v1/namespaces/{LEASE_NS}/serviceaccounts", body=sa)
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{identity}-admin"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": identity, "namespace": LEASE_NS}],
        }
        self.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", body=binding)
        path = directory / f"{identity}.kubeconfig"
        service_account_kubeconfig(self.api, Path(state.kubeconfig), (LEASE_NS, identity), 86400, path)
        return path

    def _webhook_configuration(self, replica: Replica) -> None:
        body = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": f"ksched-{replica.identity}"},
            "webhooks": [
                {
                    "name": "route.ksched.io",
                    "clientConfig": {"url": f"https://127.0.0.1:{replica.webhook_port}/mutate"},
                    "rules": [
                        {
                            "operations": ["CREATE"],
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["pods"],
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {"ksched.io/route": "true"}},
                    "failurePolicy": "Ignore",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 3,
                }
            ],
        }
        self.request("POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", body=body)

    # -- pods

    def _name(self, prefix: str) -> str:
        with self.lock:
            self.counter += 1
            return f"{prefix}-{self.counter}"

    def _pod(self, name: str, ns: str = NS, cpu: str = "200m", memory: str = "256Mi", **spec: Any) -> Obj:
        pod_spec: Obj = {
            "containers": [
                {"name": "app", "image": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ],
            "terminationGracePeriodSeconds": 0,
            **spec,
        }
        if ns == NS:
            pod_spec["schedulerName"] = "ksched"
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": name.rsplit("-", 1)[0]}},
            "spec": pod_spec,
        }

    def _pool_pod(self, name: str, priority: str, cpu: str, node: str | None = None) -> Obj:
        pod = self._pod(
            name,
            cpu=cpu,
            memory="1Gi",
            priorityClassName=priority,
            tolerations=[{**POOL_TAINT, "operator": "Equal"}],
            nodeSelector={POOL_LABEL: "preempt", **({"kubernetes.io/hostname": node} if node else {})},
        )
        return pod

    def arrival(self, rng: random.Random) -> None:
        """One arrival: a pod (or a gang) of a kind drawn from ``rng``."""
        roll = rng.random()
        cpu = f"{rng.choice((100, 200, 300, 500))}m"
        mem = f"{rng.choice((128, 256, 512))}Mi"
        if roll < 0.45:
            name = self._name("bare")
            if self.create(self._pod(name, cpu=cpu, memory=mem)):
                with self.lock:
                    self.bare_pods.append((NS, name))
        elif roll < 0.60:
            name = self._name("affinity")
            group = f"spread{rng.randrange(20)}"
            spec: Obj = {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "topology.kubernetes.io/zone",
                                            "operator": "In",
                                            "values": [f"{local.REGION}a", f"{local.REGION}b"],
                                        }
                                    ]
                                }
                            ]
                        }
                    },
                    "podAntiAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 50,
                                "podAffinityTerm": {
                                    "labelSelector": {"matchLabels": {"group": group}},
                                    "topologyKey": "kubernetes.io/hostname",
                                },
                            }
                        ]
                    },
                }
            }
            pod = self._pod(name, cpu=cpu, memory=mem, **spec)
            pod["metadata"]["labels"]["group"] = group
            self.create(pod)
        elif roll < 0.72:
            name = self._name("routed")
            self.create(self._pod(name, ROUTED_NS, cpu=cpu, memory=mem))
        elif roll < 0.80:
            self.gang(rng, delete_group_after=None)
        elif roll < 0.84:
            self.create(self._pool_pod(self._name("preemptor"), "chaos-high", "2"))
        else:
            self.scale_deployment(rng)

    def gang(self, rng: random.Random, delete_group_after: float | None) -> None:
        size = rng.randrange(3, 7)
        group = self._name("gang")
        pg = {
            "apiVersion": POD_GROUP_API,
            "kind": "PodGroup",
            "metadata": {"name": group, "namespace": NS},
            "spec": {"minMember": size, "scheduleTimeoutSeconds": 30},
        }
        if not self.create(pg):
            return
        for i in range(size):
            pod = self._pod(f"{group}-m{i}", cpu="250m", memory="256Mi")
            pod["metadata"]["labels"][POD_GROUP_LABEL] = group
            with self.lock:
                self.gang_pods.add((NS, f"{group}-m{i}"))
            self.create(pod)
            if delete_group_after is not None and i == size // 2:
                time.sleep(delete_group_after)
                self.request("DELETE", f"/apis/{POD_GROUP_API}/namespaces/{NS}/podgroups/{group}")

    def setup_deployments(self, count: int) -> None:
        self.deployments = [f"web{i}" for i in range(count)]
        for name in self.deployments:
            template = self._pod(name, cpu="100m", memory="128Mi")
            template["metadata"] = {"labels": {"app": name}}
            self.create(
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": name, "namespace": NS},
                    "spec": {
                        "replicas": 2,
                        "selector": {"matchLabels": {"app": name}},
                        "template": template,
                    },
                }
            )
        self.replica_counts = dict.fromkeys(self.deployments, 2)

    def scale_deployment(self, rng: random.Random) -> None:
        name = rng.choice(self.deployments)
        with self.lock:
            self.replica_counts[name] = max(0, self.replica_counts[name] + rng.choice((1, 1, 2, -1)))
            replicas = self.replica_counts[name]
        self.request(
            "PATCH",
            f"/apis/apps/v1/namespaces/{NS}/deployments/{name}/scale",
            body={"spec": {"replicas": replicas}},
            content_type="application/merge-patch+json",
        )

    # -- faults

    def fault(self, kind: str, rng: random.Random) -> None:
        record = Fault(kind, _now())
        with self.faults_lock:
            self.faults.append(record)
        try:
            record.detail = self._inject(kind, rng)
        except Exception as err:  # a fault that could not be injected is reported, not fatal
            record.detail = f"not injected: {err}"
        record.end = _now()
        self.log(f"fault {kind}: {record.detail} ({record.end - record.start:.1f} s)")

    def leader(self) -> Replica | None:
        try:
            r = self.api.request(
                "GET", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{LEASE_NAME}"
            )
        except ApiUnavailableError:
            return None
        if not r.ok:
            return None
        holder = (r.json().get("spec") or {}).get("holderIdentity")
        return next((x for x in self.replicas if x.identity == holder), None)

    def _inject(self, kind: str, rng: random.Random) -> str:
        if kind == "leader-kill":
            leader = self.leader()
            if leader is None:
                return "no leader to kill"
            leader.kill_and_restart(rng.uniform(1, 5))
            return f"killed {leader.identity}, restarted"
        if kind == "leader-freeze":
            leader = self.leader()
            if leader is None:
                return "no leader to freeze"
            seconds = LEASE_S + rng.uniform(2, 6)
            leader.freeze(seconds)
            return f"froze {leader.identity} for {seconds:.1f} s"
        if kind in ("apiserver-restart", "etcd-restart", "watch-expiry"):
            with self.control_lock:
                if kind == "watch-expiry":
                    revision = local.etcd_compact()
                    # Wait until the watchers have moved past nothing: a restart makes every
                    # watch resume from a resourceVersion the compacted store no longer has.
                    local.restart("kube-apiserver")
                    return f"etcd compacted at revision {revision}, kube-apiserver restarted"
                component = "kube-apiserver" if kind == "apiserver-restart" else "etcd"
                local.restart(component, down_s=rng.uniform(0, 3))
                return f"{component} restarted"
        if kind == "prometheus-stop":
            down = rng.uniform(5, 15)
            local.restart("prometheus", down_s=down)
            return f"Prometheus stopped {down:.1f} s and restarted"
        if kind == "prometheus-hang":
            hang = rng.uniform(5, 15)
            local.signal_component("prometheus", signal.SIGSTOP)
            time.sleep(hang)
            local.signal_component("prometheus", signal.SIGCONT)
            return f"Prometheus hung {hang:.1f} s"
        if kind == "nodes-delete-add":
            count = max(1, len(self.node_names) // 100)
            with self.node_lock:
                victims = rng.sample(self.node_names, count)
                for name in victims:
                    self.node_names.remove(name)
            for name in victims:
                self.request("DELETE", f"/api/v1/nodes/{name}")
            time.sleep(rng.uniform(2, 8))
            with self.node_lock:
                first = self.next_node
                self.next_node += count
            nodes = local.fake_nodes(count, 3, first)["items"]
            for node in nodes:
                self.request("POST", "/api/v1/nodes", body=node)
            with self.node_lock:
                self.node_names.extend(n["metadata"]["name"] for n in nodes)
            return f"deleted {count} nodes, added {count}"
        if kind in ("nodes-cordon", "nodes-taint"):
            count = max(1, len(self.node_names) // 50)
            with self.node_lock:
                chosen = rng.sample(self.node_names, count)
                for name in chosen:
                    self.node_names.remove(name)
            if kind == "nodes-cordon":
                on: Obj = {"spec": {"unschedulable": True}}
                off: Obj = {"spec": {"unschedulable": None}}
            else:
                on, off = {"spec": {"taints": [CHAOS_TAINT]}}, {"spec": {"taints": None}}
            for name in chosen:
                self.request(
                    "PATCH", f"/api/v1/nodes/{name}", body=on, content_type="application/merge-patch+json"
                )
            time.sleep(rng.uniform(5, 20))
            for name in chosen:
                self.request(
                    "PATCH", f"/api/v1/nodes/{name}", body=off, content_type="application/merge-patch+json"
                )
            with self.node_lock:
                self.node_names.extend(chosen)
            return f"{kind.split('-')[1]}ed {count} nodes, then undone"
        if kind == "pods-delete-inflight":
            count = rng.randrange(5, 20)
            for _ in range(count):
                name = self._name("doomed")
                with self.lock:
                    self.deleted.add((NS, name))
                if self.create(self._pod(name), track=False):
                    time.sleep(rng.uniform(0, 0.3))
                    self.request(
                        "DELETE", f"/api/v1/namespaces/{NS}/pods/{name}", query={"gracePeriodSeconds": 0}
                    )
            return f"{count} pods deleted within 0.3 s of their creation"
        if kind == "podgroup-delete":
            self.gang(rng, delete_group_after=rng.uniform(0, 1))
            return "a gang's PodGroup deleted while its pods were arriving"
        raise ChaosError(f"unknown fault {kind}")

    def schedule(self, seconds: float) -> list[tuple[float, str]]:
        """Fault start times (seconds from the start) drawn from the seed: every kind at least
        once, then more at random, a few seconds apart so that they overlap."""
        rng = random.Random(self.seed * 7919 + 1)
        kinds = list(FAULT_KINDS)
        rng.shuffle(kinds)
        window = max(10.0, seconds - 10.0)
        extra = max(0, int(window / 12) - len(kinds))
        kinds += [rng.choice(FAULT_KINDS) for _ in range(extra)]
        step = window / len(kinds)
        return [(5.0 + i * step + rng.uniform(0, step / 2), kind) for i, kind in enumerate(kinds)]

    # -- the run

    def run(self) -> ChaosFigures:
        started = time.monotonic()
        exporter = _Exporter(self.seed)
        exporter.start()
        directory = Path(tempfile.mkdtemp(prefix="ksched-chaos-"))
        previous = os.environ.get("KSCHED_CLUSTER_DIR")
        os.environ["KSCHED_CLUSTER_DIR"] = str(directory / "cluster")
        finished = False  # an exception keeps the logs too: that is when they are wanted
        try:
            state = self.setup(directory, exporter)
            self.setup_deployments(10)
            self.soak(exporter)
            self.settle()
            self.check(state)
            finished = True
        finally:
            self.stop.set()
            for r in self.replicas:
                r.stop()
            keep = not (finished and self.figures.ok())
            if keep:
                with contextlib.suppress(OSError):
                    shutil.copy(directory / "cluster" / "audit.log", directory / "audit.log")
            local.down()
            exporter.stop()
            if previous is None:
                os.environ.pop("KSCHED_CLUSTER_DIR", None)
            else:
                os.environ["KSCHED_CLUSTER_DIR"] = previous
            if not keep:
                shutil.rmtree(directory, ignore_errors=True)
            else:
                self.log(f"logs kept in {directory}")
        self.figures.duration_s = round(time.monotonic() - started, 1)
        return self.figures

    def soak(self, exporter: _Exporter) -> None:
        seconds = self.minutes * 60.0
        self.soak_start = _now()
        self.log(f"soaking {seconds:.0f} s at {self.rate:g} pods/s, seed {self.seed}")
        plan = self.schedule(seconds)
        threads: list[threading.Thread] = []
        arrivals = random.Random(self.seed)
        workers: list[threading.Thread] = []
        sem = threading.Semaphore(16)

        def arrive(rng: random.Random) -> None:
            try:
                self.arrival(rng)
            finally:
                sem.release()

        begin = time.monotonic()
        next_fault = 0
        n = 0
        while True:
            elapsed = time.monotonic() - begin
            if elapsed >= seconds:
                break
            while next_fault < len(plan) and plan[next_fault][0] <= elapsed:
                _, kind = plan[next_fault]
                fault_rng = random.Random(f"{self.seed}/{next_fault}")
                t = threading.Thread(target=self.fault, args=(kind, fault_rng), daemon=True)
                t.start()
                threads.append(t)
                next_fault += 1
            target = begin + n / self.rate
            delay = target - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            sem.acquire()
            rng = random.Random(arrivals.random())
            w = threading.Thread(target=arrive, args=(rng,), daemon=True)
            w.start()
            workers.append(w)
            n += 1
            if n % max(1, int(self.rate)) == 0:  # about once a second
                for r in self.replicas:
                    r.restart_if_exited()
            with self.node_lock:
                exporter.nodes = list(self.node_names)
        self.log("arrivals over; waiting for the faults in progress")
        for t in threads:
            t.join(120)
        for w in workers:
            w.join(60)
        self.soak_end = _now()
        for r in self.replicas:
            r.restart_if_exited()
        for r in self.replicas:
            for e in r.exits:
                self.log(e)

    def _pods(self) -> list[Obj]:
        items: list[Obj] = []
        for ns in (NS, ROUTED_NS):
            items += self.get_json(f"/api/v1/namespaces/{ns}/pods")["items"]
        return items

    def _events(self, reason: str) -> list[Obj]:
        items: list[Obj] = []
        for ns in (NS, ROUTED_NS):
            items += [
                e
                for e in self.get_json(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")["items"]
                if e.get("reason") == reason
            ]
        return items

    def _current_failures(self) -> dict[str, Obj]:
        """Each pod's latest FailedScheduling event (by uid), where it was last observed after
        the faults ended: an older one may be about a fault long gone (a cordon, a restart),
        and a pod the loop then dropped would pass as explained. The loop retries
        unschedulable pods at least every 30 s, so a pod still pending is told again."""
        latest: dict[str, tuple[float, Obj]] = {}
        for e in self._events("FailedScheduling"):
            seen = (e.get("series") or {}).get("lastObservedTime") or e.get("eventTime")
            at = _ts(seen or e["metadata"]["creationTimestamp"])
            uid = e["regarding"].get("uid")
            if uid and at >= self.soak_end and at >= latest.get(uid, (0.0, e))[0]:
                latest[uid] = (at, e)
        return {uid: e for uid, (_, e) in latest.items()}

    def _unaccounted(self) -> list[Obj]:
        """Pods neither bound nor pending with a current FailedScheduling event of their own."""
        return invariants.unaccounted(self._pods(), self._current_failures())

    def settle(self) -> None:
        self.log("faults over; waiting for every pod to be bound or reported unschedulable")
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline:
            if not self._unaccounted():
                return
            time.sleep(3)

    def check(self, state: local.ClusterState) -> None:
        f = self.figures
        pods = self._pods()
        uids = {p["metadata"]["uid"]: p for p in pods}
        failed = self._current_failures()
        bound = [p for p in pods if p["spec"].get("nodeName")]
        pending = [
            p for p in pods if not p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
        ]
        lost = invariants.unaccounted(pods, failed)
        f.pods_bound = len(bound)
        f.pods_pending_with_reason = len(pending) - len(lost)
        f.pods_lost = len(lost)
        reasons: collections.Counter[str] = collections.Counter()
        for p in pending:
            event = failed.get(p["metadata"]["uid"])
            if event is not None:
                kind = p["metadata"]["name"].split("-", 1)[0]
                reasons[f"{kind}: {(event.get('note') or '')[:160]}"] += 1
        f.pending_reasons = dict(reasons.most_common(8))
        audit = read_audit(local.audit_log_path(state))
        leases, binds, creates = audit.leases, audit.binds, audit.creates
        f.pods_created = len(creates)
        with self.lock:
            f.pods_deleted_by_soak = len(self.deleted)
        # Every created pod is still there or was deleted by a request the audit log holds:
        # one gone with no such request is lost too.
        present = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods}
        deleter = first_deleters(audit.deletes)
        gone = {(c.namespace, c.name) for c in creates if c.name} - present
        vanished = invariants.vanished(
            ((c.namespace, c.name) for c in creates if c.name), pods, deleter.keys()
        )
        f.pods_gone_by = dict(
            collections.Counter(_deleter_kind(deleter[k]) for k in gone if k in deleter).most_common()
        )
        f.pods_lost += len(vanished)
        f.violations += [f"lost: {ns}/{name} gone with no delete request" for ns, name in vanished[:10]]
        for p in lost[:10]:
            md = p["metadata"]
            f.violations.append(
                f"lost: {md['namespace']}/{md['name']} pending with no FailedScheduling event since the faults ended"
            )
        if len(lost) > 10:
            f.violations.append(f"lost: {len(lost) - 10} more")

        # Over-commitment per node and resource, and the placement constraints (pods on a node a
        # fault deleted are left out).
        all_nodes, all_pods = self.get_json("/api/v1/nodes")["items"], self.get_json("/api/v1/pods")["items"]
        over = invariants.overcommitted(all_nodes, all_pods)
        f.overcommitted_nodes = len(over)
        f.violations += [f"over-committed: {o}" for o in over[:10]]
        broken = invariants.constraint_violations(all_nodes, all_pods)
        f.constraint_violations = len(broken)
        f.violations += [f"constraint broken: {v}" for v in broken[:10]]

        # Binds against the Lease history, from the audit log.
        users = {f"system:serviceaccount:{LEASE_NS}:{r}": r for r in REPLICAS}
        mine = [b for b in binds if b.user in users and b.code == 201]
        f.binds_by_ksched = len(mine)
        f.binds_by_kube_scheduler = sum(1 for b in binds if b.user not in users and b.code == 201)
        wrong = [b for b in mine if holder_at(leases, b.at) != users[b.user]]
        f.binds_by_non_leader = len(wrong)
        for b in wrong[:10]:
            f.violations.append(
                f"bind by a non-leader: {users[b.user]} bound {b.namespace}/{b.name} at "
                f"{dt.datetime.fromtimestamp(b.at, dt.UTC).isoformat()} while {holder_at(leases, b.at)} held the lease"
            )
        f.longest_without_leader_s = round(leaderless_gaps(leases, self.soak_start, self.soak_end), 1)
        holders = [w.holder for w in leases if w.holder]
        f.leader_changes = sum(1 for a, b in itertools.pairwise(holders) if a != b)

        # Create -> bind latency, in and out of fault windows.
        first_bind: dict[tuple[str, str], float] = {}
        for b in binds:
            if b.code == 201:
                first_bind.setdefault((b.namespace, b.name), b.at)
        created = {(c.namespace, c.name): c.at for c in creates}
        windows = [(x.start, x.end or self.soak_end) for x in self.faults]
        during: list[float] = []
        outside: list[float] = []
        for key, t0 in created.items():
            t1 = first_bind.get(key)
            if t1 is None:
                continue
            overlapping = any(a <= t1 and t0 <= b for a, b in windows)
            (during if overlapping else outside).append(max(0.0, t1 - t0))
        f.p99_bind_during_faults_s = _round(_p99(during))
        f.p99_bind_outside_faults_s = _round(_p99(outside))
        f.bind_samples_during_faults = len(during)
        f.bind_samples_outside_faults = len(outside)

        # Gangs: bound whole or not at all.
        groups = self.get_json(f"/apis/{POD_GROUP_API}/namespaces/{NS}/podgroups")["items"]
        # Members the taint manager or pod GC removed after they were bound count as bound:
        # a gang they leave short was whole when ksched bound it.
        removed_by_others = collections.Counter(
            name.rsplit("-m", 1)[0]
            for ns, name in gone
            if name.startswith("gang-") and _deleter_kind(deleter.get((ns, name), "")) in EVICTING_CLIENTS
        )
        for g in groups:
            name = g["metadata"]["name"]
            members = [p for p in pods if (p["metadata"].get("labels") or {}).get(POD_GROUP_LABEL) == name]
            on = sum(1 for p in members if p["spec"].get("nodeName")) + removed_by_others[name]
            if 0 < on < int(g["spec"].get("minMember", 1)):
                f.gangs_partly_bound += 1
                f.violations.append(f"gang {name}: {on} of {g['spec']['minMember']} bound")

        # Preemption victims name a preemptor that is bound or nominated.
        for e in self._events("Preempted"):
            f.victims += 1
            note = e.get("note") or ""
            uid = note.split("Preempted by pod ", 1)[-1].split(" ", 1)[0]
            preemptor = uids.get(uid)
            if preemptor is None or not (
                preemptor["spec"].get("nodeName") or preemptor["status"].get("nominatedNodeName")
            ):
                f.victims_without_preemptor += 1
                f.violations.append(
                    f"victim {e['regarding']['name']}: preemptor {uid} neither bound nor nominated"
                )

        f.replicas_running = sum(1 for r in self.replicas if r.running() and r.healthy())
        f.replica_restarts = sum(r.restarts for r in self.replicas)
        exits = [e for r in self.replicas for e in r.exits]
        f.replica_exits = len(exits)
        # ksched exits only when told to: an exit the soak did not cause is a defect.
        f.violations += exits[:10]
        logs = "".join(r.tail(None) for r in self.replicas)
        f.watch_relists = logs.count("expired, relisting")
        f.terms_lost = logs.count("lost the lease")
        if f.replicas_running != len(self.replicas):
            f.violations.append(
                f"only {f.replicas_running} of {len(self.replicas)} replicas running at the end"
            )
        f.faults = dict(
            collections.Counter(x.kind for x in self.faults if not x.detail.startswith("not injected"))
        )


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def run_chaos(
    nodes: int, minutes: float, rate: float, seed: int, log: Callable[[str], None] | None = None
) -> ChaosFigures:
    if nodes < 20:
        raise ChaosError("--nodes: the soak needs at least 20 nodes")
    if minutes <= 0 or rate <= 0:
        raise ChaosError("--minutes and --rate must be positive")
    return Soak(nodes, minutes, rate, seed, log or (lambda _: None)).run()


def render(f: ChaosFigures) -> str:
    def opt(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f} s"

    rows = [
        ("pods created", f"{f.pods_created}"),
        ("pods bound", f"{f.pods_bound}"),
        ("pending with a reason", f"{f.pods_pending_with_reason}"),
        ("pods lost (must be 0)", f"{f.pods_lost}"),
        ("deleted by the soak", f"{f.pods_deleted_by_soak}"),
        ("gone at the end, by", ", ".join(f"{k} {v}" for k, v in f.pods_gone_by.items()) or "-"),
        ("over-committed nodes", f"{f.overcommitted_nodes}"),
        ("constraints broken", f"{f.constraint_violations}"),
        ("binds by ksched", f"{f.binds_by_ksched}"),
        ("binds by kube-scheduler", f"{f.binds_by_kube_scheduler} (pods the webhook left to it)"),
        ("binds by a non-leader", f"{f.binds_by_non_leader}"),
        ("longest without a leader", f"{f.longest_without_leader_s:.1f} s"),
        ("leader changes", f"{f.leader_changes}"),
        (
            "p99 create->bind, faults",
            f"{opt(f.p99_bind_during_faults_s)} ({f.bind_samples_during_faults} pods)",
        ),
        (
            "p99 create->bind, quiet",
            f"{opt(f.p99_bind_outside_faults_s)} ({f.bind_samples_outside_faults} pods)",
        ),
        ("gangs partly bound", f"{f.gangs_partly_bound}"),
        ("victims w/o preemptor", f"{f.victims_without_preemptor} of {f.victims} victims"),
        (
            "replicas running",
            f"{f.replicas_running} ({f.replica_restarts} restarts, {f.replica_exits} exits the soak did not cause)",
        ),
        ("terms lost", f"{f.terms_lost} (a leader's renewals failing past the renew deadline)"),
        ("watch relists (410)", f"{f.watch_relists}"),
        ("faults injected", ", ".join(f"{k} {v}" for k, v in sorted(f.faults.items()))),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [
        f"ksched bench --chaos: {f.nodes} nodes, {f.minutes:g} min at {f.rate:g} pods/s, seed {f.seed}, "
        f"{f.duration_s:.0f} s in all"
    ]
    lines += [f"  {k.ljust(width)}  {v}" for k, v in rows]
    if f.pending_reasons:
        lines.append("  pending at the end, by kind and FailedScheduling message:")
        lines += [f"    {n:5d}  {reason}" for reason, n in f.pending_reasons.items()]
    lines.append("  invariants      " + ("all hold" if f.ok() else "VIOLATED:"))
    lines += [f"    {v}" for v in f.violations]
    return "\n".join(lines)
