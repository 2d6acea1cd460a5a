"""The soak's state and its hands on the cluster: API requests retried through outages,
the set-up (control plane, replicas, webhook, pools), and the pods, gangs and
Deployments that arrive."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ksched.bench.chaos.audit import audit_policy
from ksched.bench.chaos.figures import (
    EVICTING_CONTROLLERS,
    FAULT_KINDS,
    LEASE_NS,
    NS,
    POOL_LABEL,
    POOL_TAINT,
    REPLICAS,
    ROUTED_NS,
    SHARDED_FAULT_KINDS,
    ChaosError,
    ChaosFigures,
    Fault,
    now,
    replica_names,
)
from ksched.bench.chaos.replicas import Exporter, Replica
from ksched.cluster import local
from ksched.engine.gangs import POD_GROUP_API, POD_GROUP_LABEL
from ksched.loop.client import ApiUnavailableError, Kube, load_configuration, service_account_kubeconfig
from ksched.loop.events import events_path
from ksched.objects import Obj


class Soak:
    """One soak's cluster, replicas, arrivals and findings, shared by its threads."""

    def __init__(
        self,
        nodes: int,
        minutes: float,
        rate: float,
        seed: int,
        log: Callable[[str], None],
        replicas: int = 0,
    ) -> None:
        """``replicas``: that many sharded replicas, every one binding (0: two leader-elected)."""
        self.nodes = nodes
        self.sharded = replicas > 0
        self.identities = replica_names(replicas) if self.sharded else REPLICAS
        self.fault_kinds = SHARDED_FAULT_KINDS if self.sharded else FAULT_KINDS
        self.minutes = minutes
        self.rate = rate
        self.seed = seed
        self.rng = random.Random(seed)
        self.log = log
        self.figures = ChaosFigures(seed, nodes, minutes, rate)
        self.figures.sharded, self.figures.replicas = self.sharded, len(self.identities)
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
        # When pods stopped arriving and faults stopped starting (set by the run).
        self.soak_start = 0.0
        self.soak_end = 0.0

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
        t = now()
        status = self.request("POST", path, body=obj)
        if status in (200, 201, 409):
            if kind == "Pod" and track:
                with self.lock:
                    self.created_at[(md["namespace"], md["name"])] = t
            return True
        return False

    # -- set-up

    def setup(self, directory: Path, exporter: Exporter) -> local.ClusterState:
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
        for identity in self.identities:
            kubeconfig = self._replica_credentials(state, directory, identity)
            assert state.prometheus is not None
            replica = Replica(identity, directory, kubeconfig, state.prometheus, self.sharded)
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

    def pod_name(self, prefix: str) -> str:
        with self.lock:
            self.counter += 1
            return f"{prefix}-{self.counter}"

    def pod(self, name: str, ns: str = NS, cpu: str = "200m", memory: str = "256Mi", **spec: Any) -> Obj:
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
        pod = self.pod(
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
            name = self.pod_name("bare")
            if self.create(self.pod(name, cpu=cpu, memory=mem)):
                with self.lock:
                    self.bare_pods.append((NS, name))
        elif roll < 0.60:
            name = self.pod_name("affinity")
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
            pod = self.pod(name, cpu=cpu, memory=mem, **spec)
            pod["metadata"]["labels"]["group"] = group
            self.create(pod)
        elif roll < 0.72:
            name = self.pod_name("routed")
            self.create(self.pod(name, ROUTED_NS, cpu=cpu, memory=mem))
        elif roll < 0.80:
            self.gang(rng, delete_group_after=None)
        elif roll < 0.84:
            self.create(self._pool_pod(self.pod_name("preemptor"), "chaos-high", "2"))
        else:
            self.scale_deployment(rng)

    def gang(self, rng: random.Random, delete_group_after: float | None) -> None:
        size = rng.randrange(3, 7)
        group = self.pod_name("gang")
        pg = {
            "apiVersion": POD_GROUP_API,
            "kind": "PodGroup",
            "metadata": {"name": group, "namespace": NS},
            "spec": {"minMember": size, "scheduleTimeoutSeconds": 30},
        }
        if not self.create(pg):
            return
        for i in range(size):
            pod = self.pod(f"{group}-m{i}", cpu="250m", memory="256Mi")
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
            template = self.pod(name, cpu="100m", memory="128Mi")
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

    def pods(self) -> list[Obj]:
        items: list[Obj] = []
        for ns in (NS, ROUTED_NS):
            items += self.get_json(f"/api/v1/namespaces/{ns}/pods")["items"]
        return items

    def events(self, reason: str) -> list[Obj]:
        items: list[Obj] = []
        for ns in (NS, ROUTED_NS):
            items += [e for e in self.get_json(events_path(ns))["items"] if e.get("reason") == reason]
        return items
