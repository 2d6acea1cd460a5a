"""The control plane's own components, as ``ksched cluster up`` starts them: etcd,
kube-apiserver (RBAC, token-file admin, service-account keys, relaxed in-flight limits), the
admin kubeconfig, the PodGroup CRD, and optionally kube-scheduler and kube-controller-manager.

Owns each component's command line and the wait until it answers. Starts processes only
through the :class:`~ksched.cluster.processes.Launcher` it is given, which records them, so
:mod:`~ksched.cluster.local` stops and restarts them; never decides which components run
(``up`` does).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

from ksched.cluster import metrics_server
from ksched.cluster.processes import ClusterError, ClusterState, Launcher, free_port, http_ok, kubectl

# kube-apiserver's log level (``--v``) where set: a diagnosis's, never a test's.
APISERVER_VERBOSITY_ENV = "KSCHED_APISERVER_VERBOSITY"
# kube-controller-manager's controllers that real pods need: their ServiceAccount, the CA
# they trust the API server by, and the EndpointSlices kube-proxy routes Services with.
REAL_POD_CONTROLLERS = (
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
    "endpointslice-controller",
)
PODGROUP_CRD = Path(__file__).with_name("podgroup-crd.yaml")
# kube-controller-manager's client rate (requests a second, and its burst), and how many
# ReplicaSets it syncs at once. Upstream's 20 a second (burst 30) and 5 syncs made it adopt
# the quality benchmark's pods, created before their ReplicaSets, at about 13 a second: a
# 1,000-node round's 6,000 pods took 7.5 minutes, longer than the round judges, so most pods
# were still nobody's when ksched learned per workload or the rebalancer looked for pods to
# move, and a herd's scale-up queued behind other pools' adoptions. The local API server
# takes binds at several hundred a second; the controllers are not what a round measures.
CONTROLLER_MANAGER_QPS = 500
CONTROLLER_MANAGER_BURST = 1000
CONTROLLER_MANAGER_RS_SYNCS = 20


def write_credentials(launcher: Launcher) -> Path:
    """The service-account signing key (returned) and the API server's token file."""
    state, directory = launcher.state, launcher.dir
    sa_key = directory / "sa.key"
    proc = subprocess.run(
        ["openssl", "genrsa", "-out", str(sa_key), "2048"], capture_output=True, check=False
    )
    if proc.returncode != 0:
        raise ClusterError(f"generating the service-account key failed: {proc.stderr.decode()}")
    # A second identity with no role bindings, to show authorization is real.
    (directory / "tokens.csv").write_text(
        f'{state.token},admin,admin-uid,"system:masters"\n{state.unprivileged_token},nobody,nobody-uid\n'
    )
    return sa_key


def start_etcd(launcher: Launcher) -> None:
    ports, directory = launcher.state.ports, launcher.dir
    launcher.start(
        "etcd",
        "etcd",
        [
            "--name=default",
            f"--data-dir={directory / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{ports['etcd']}",
            f"--advertise-client-urls=http://127.0.0.1:{ports['etcd']}",
            f"--listen-peer-urls=http://127.0.0.1:{ports['etcd-peer']}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{ports['etcd-peer']}",
            f"--initial-cluster=default=http://127.0.0.1:{ports['etcd-peer']}",
            "--unsafe-no-fsync",
            "--log-level=warn",
            "--quota-backend-bytes=8589934592",
        ],
    )
    launcher.wait("etcd", lambda: http_ok(f"http://127.0.0.1:{ports['etcd']}/health"))


def audit_log_path(state: ClusterState) -> Path:
    """Where kube-apiserver writes its audit log when ``up`` was given a policy."""
    return Path(state.directory) / "audit.log"


def _audit_args(state: ClusterState, audit_policy: dict[str, Any] | None) -> list[str]:
    if audit_policy is None:
        return []
    policy = Path(state.directory) / "audit-policy.json"
    policy.write_text(json.dumps(audit_policy))
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={audit_log_path(state)}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
        # One file for the whole run: rotated at 100 MB (the default), the events
        # before would sit in a backup the soak's reading never opens.
        "--audit-log-maxsize=0",
    ]


def start_apiserver(
    launcher: Launcher,
    sa_key: Path,
    audit_policy: dict[str, Any] | None,
    certs: metrics_server.Certificates | None,
    with_real_nodes: bool,
) -> None:
    """kube-apiserver on the address ``up`` chose for it (loopback, or the first real node's
    bridge), waited for until /readyz answers."""
    state, directory = launcher.state, launcher.dir
    ports = state.ports
    address = urllib.parse.urlsplit(state.apiserver).hostname
    # No kube-controller-manager runs here, so nothing would remove the not-ready
    # taint that TaintNodesByCondition puts on new nodes: KWOK keeps them Ready instead.
    launcher.start(
        "kube-apiserver",
        "kube-apiserver",
        [
            f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
            f"--bind-address={address}",
            f"--advertise-address={address}",
            f"--secure-port={ports['apiserver']}",
            f"--cert-dir={directory / 'certs'}",
            "--authorization-mode=RBAC",
            f"--token-auth-file={directory / 'tokens.csv'}",
            f"--service-account-key-file={sa_key}",
            f"--service-account-signing-key-file={sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--api-audiences=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.96.0.0/16",
            # Real pods get their ServiceAccount's token; fake ones need no ServiceAccount.
            "--disable-admission-plugins="
            + ("TaintNodesByCondition" if with_real_nodes else "ServiceAccount,TaintNodesByCondition"),
            # `kubectl logs` and `exec` reach a real kubelet at its bridge address.
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--max-requests-inflight=0",
            "--max-mutating-requests-inflight=0",
            "--enable-priority-and-fairness=false",
            # Deleting a namespace's thousands of pods (benchmarks, tests) in parallel.
            "--delete-collection-workers=16",
            "--watch-cache=true",
            "--profiling=false",
            # A diagnosis's log level (1 logs each watcher it closes for falling behind, and whose).
            *([f"--v={level}"] if (level := os.environ.get(APISERVER_VERBOSITY_ENV)) else []),
            *_audit_args(state, audit_policy),
            *(metrics_server.apiserver_args(certs) if certs else []),
        ],
    )
    launcher.wait("kube-apiserver /readyz", lambda: http_ok(f"{state.apiserver}/readyz", state.token))


def write_kubeconfig(launcher: Launcher) -> None:
    """The admin's kubeconfig, waited for until kubectl reads the default namespace with it."""
    state, directory = launcher.state, launcher.dir
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "ksched-local",
        "clusters": [
            {
                "name": "ksched-local",
                # kube-apiserver writes its self-signed serving cert followed by the CA that signed it.
                "cluster": {
                    "server": state.apiserver,
                    "certificate-authority": str(directory / "certs" / "apiserver.crt"),
                },
            }
        ],
        "users": [{"name": "admin", "user": {"token": state.token}}],
        "contexts": [
            {
                "name": "ksched-local",
                "context": {"cluster": "ksched-local", "user": "admin", "namespace": "default"},
            }
        ],
    }
    Path(state.kubeconfig).write_text(json.dumps(kubeconfig, indent=2))
    launcher.wait(
        "the default namespace",
        lambda: kubectl(state, launcher.bin, "get", "namespace", "default").returncode == 0,
    )


def install_podgroup_crd(launcher: Launcher) -> None:
    """Apply the PodGroup CRD and wait until it is established."""
    state, bin_dir = launcher.state, launcher.bin
    applied = kubectl(state, bin_dir, "apply", "-f", str(PODGROUP_CRD))
    if applied.returncode != 0:
        raise ClusterError(f"installing the PodGroup CRD failed: {applied.stderr.decode()[-2000:]}")
    launcher.wait(
        "the PodGroup CRD",
        lambda: (
            kubectl(
                state,
                bin_dir,
                "wait",
                "--for=condition=established",
                "--timeout=5s",
                "crd/podgroups.scheduling.x-k8s.io",
            ).returncode
            == 0
        ),
    )


def kube_scheduler_args(
    state: ClusterState, qps: float, percentage: int, name: str = "kube-scheduler"
) -> tuple[list[str], int]:
    """kube-scheduler's arguments for this cluster (its configuration file written as ``NAME.yaml``)
    and the port of its /healthz and /readyz: client QPS ``qps`` (burst twice that), no leader
    election, ``percentageOfNodesToScore`` ``percentage`` (0 = upstream's adaptive default)."""
    config = Path(state.directory) / f"{name}.yaml"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": state.kubeconfig, "qps": qps, "burst": int(qps * 2)},
                "leaderElection": {"leaderElect": False},
                "percentageOfNodesToScore": percentage,
            }
        )
    )
    port = free_port()
    state.ports[name] = port
    args = [
        f"--config={config}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--authentication-kubeconfig={state.kubeconfig}",
        f"--authorization-kubeconfig={state.kubeconfig}",
    ]
    return args, port


def start_kube_scheduler(launcher: Launcher, qps: float, percentage: int) -> None:
    args, port = kube_scheduler_args(launcher.state, qps, percentage)
    launcher.start("kube-scheduler", "kube-scheduler", args)
    launcher.wait("kube-scheduler /healthz", lambda: http_ok(f"https://127.0.0.1:{port}/healthz"))


def start_controller_manager(
    launcher: Launcher, extra_controllers: tuple[str, ...], with_real_nodes: bool
) -> None:
    """The workload controllers only (Deployments, ReplicaSets, StatefulSets, garbage
    collection, namespaces, PodDisruptionBudgets) and the PersistentVolume binder, which
    completes the claims a scheduler binds: no node lifecycle, so KWOK nodes stay untainted.
    With real nodes, also :data:`REAL_POD_CONTROLLERS`; then ``extra_controllers``."""
    state, directory = launcher.state, launcher.dir
    port = free_port()
    state.ports["kube-controller-manager"] = port
    launcher.start(
        "kube-controller-manager",
        "kube-controller-manager",
        [
            f"--kubeconfig={state.kubeconfig}",
            f"--authentication-kubeconfig={state.kubeconfig}",
            f"--authorization-kubeconfig={state.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--leader-elect=false",
            "--use-service-account-credentials=false",
            f"--kube-api-qps={CONTROLLER_MANAGER_QPS}",
            f"--kube-api-burst={CONTROLLER_MANAGER_BURST}",
            f"--concurrent-replicaset-syncs={CONTROLLER_MANAGER_RS_SYNCS}",
            "--controllers="
            + ",".join(
                (
                    "deployment-controller",
                    "replicaset-controller",
                    "statefulset-controller",
                    "garbage-collector-controller",
                    "namespace-controller",
                    "disruption-controller",
                    "persistentvolume-binder-controller",
                    *(REAL_POD_CONTROLLERS if with_real_nodes else ()),
                    *extra_controllers,
                )
            ),
            # Claims are resynced every second (upstream: 15 s) so tests wait less.
            "--pvclaimbinder-sync-period=1s",
            # Published to every namespace as kube-root-ca.crt, which pods trust the API server by.
            f"--root-ca-file={directory / 'certs' / 'apiserver.crt'}",
        ],
    )
    launcher.wait("kube-controller-manager /healthz", lambda: http_ok(f"https://127.0.0.1:{port}/healthz"))
