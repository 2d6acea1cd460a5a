"""The real nodes' daemons: each node's containerd (its configuration and CNI network,
images imported with :func:`import_archive`), each node's kubelet, and one kube-proxy for the
host; :func:`start` starts them in that order and waits until every node is Ready.

Also what reads them: Prometheus's scrape of each kubelet (:func:`scrape_configs`) and
loading a local image into every node (:func:`load_image`).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ksched.cluster.processes import ClusterError, ClusterState, Launcher, free_port, http_ok, kubectl
from ksched.cluster.realnode.host import cni_bin_dir, make_cgroup_root
from ksched.cluster.realnode.nodes import CRI_NAMESPACE, NODE_LABEL, POD_NETWORK, RealNode
from ksched.cluster.realnode.pause_image import PAUSE_IMAGE, ensure_pause, pause_archive


def ctr(node: RealNode, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ctr", "--address", node.socket, "--namespace", CRI_NAMESPACE, *args],
        capture_output=True,
        text=True,
        check=False,
    )


def import_archive(node: RealNode, archive: Path, name: str) -> None:
    done = ctr(node, "images", "import", "--no-unpack=false", str(archive))
    if done.returncode != 0:
        raise ClusterError(f"importing {name} into {node.name}'s containerd failed: {done.stderr.strip()}")
    listed = ctr(node, "images", "list", "--quiet")
    if name not in listed.stdout.split():
        raise ClusterError(
            f"{node.name}'s containerd imported {archive.name} but lists no {name}: {listed.stdout.strip()}"
        )


def _containerd_config(node: RealNode, cni_bin: str) -> str:
    d = node.directory
    return f"""version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
[grpc]
  address = "{node.socket}"
[ttrpc]
  address = "{node.runtime_dir}/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # runc cannot lower oom_score_adj where the host denies CAP_SYS_RESOURCE (some VMs):
  # every sandbox would fail with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{d}/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{d}/cni"
    max_conf_num = 1
"""


def _cni_config(node: RealNode) -> dict[str, Any]:
    return {
        "cniVersion": "0.4.0",
        "name": f"ksched-{node.name}",
        "plugins": [
            {
                "type": "bridge",
                "bridge": node.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.subnet, "gateway": node.gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": f"{node.directory}/cni-ipam",
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def _link(directory: Path, binary: str, as_name: str) -> Path:
    """A link named ``as_name`` to ``binary``, so each node's process is recorded (and found
    again by ``down``) under its own name."""
    folder = directory / "bin"
    folder.mkdir(exist_ok=True)
    link = folder / as_name
    with contextlib.suppress(FileNotFoundError):
        link.unlink()
    link.symlink_to(binary)
    return link


def start_containerd(launcher: Launcher, node: RealNode, pause_tar: Path) -> None:
    d = Path(node.directory)
    (d / "cni").mkdir(parents=True, exist_ok=True)
    (d / "containerd").mkdir(parents=True, exist_ok=True)
    Path(node.runtime_dir).mkdir(parents=True, exist_ok=True)
    (d / "cni" / "10-ksched.conflist").write_text(json.dumps(_cni_config(node), indent=2))
    config = d / "containerd.toml"
    config.write_text(_containerd_config(node, cni_bin_dir()))
    name = f"containerd-{node.index}"
    containerd = shutil.which("containerd")
    assert containerd is not None
    launcher.start(name, _link(d, containerd, name), ["--config", str(config), "--log-level", "warn"])
    launcher.wait(f"{node.name}'s containerd", lambda: ctr(node, "version").returncode == 0)
    import_archive(node, pause_tar, PAUSE_IMAGE)


def _kubelet_config(node: RealNode) -> dict[str, Any]:
    d = node.directory
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # kubelet v1.36 refuses cgroup v1 unless told otherwise; a VM may have only v1.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "address": node.gateway,
        "port": node.kubelet_port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": node.healthz_port,
        # A test node on a bridge only this host reaches: the API server (logs, exec) and
        # Prometheus (resource metrics) call it without credentials.
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "failSwapOn": False,
        "resolvConf": f"{d}/resolv.conf",
        "podLogsDir": f"{d}/pod-logs",
        "staticPodPath": "",
        "serializeImagePulls": False,
        "imageGCHighThresholdPercent": 100,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "nodeStatusUpdateFrequency": "4s",
        "nodeStatusReportFrequency": "10s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "maxPods": 30,
        "registerWithTaints": [],
        "kubeReserved": {"cpu": "100m", "memory": "256Mi"},
        "enforceNodeAllocatable": ["pods"],
        "protectKernelDefaults": False,
        "localStorageCapacityIsolation": True,
    }


def start_kubelet(launcher: Launcher, node: RealNode, state: ClusterState, bin_dir: Path, zone: str) -> None:
    d = Path(node.directory)
    (d / "pod-logs").mkdir(parents=True, exist_ok=True)
    # No name server: nothing a pod resolves leaves this machine.
    (d / "resolv.conf").write_text("options ndots:1\n")
    (d / "kubelet.json").write_text(json.dumps(_kubelet_config(node), indent=2))
    make_cgroup_root(node)
    labels = {
        NODE_LABEL: "true",
        "topology.kubernetes.io/region": "local-1",
        "topology.kubernetes.io/zone": zone,
        "type": "real",
    }
    name = f"kubelet-{node.index}"
    launcher.start(
        name,
        _link(d, str(bin_dir / "kubelet"), name),
        [
            f"--config={d / 'kubelet.json'}",
            f"--kubeconfig={state.kubeconfig}",
            f"--root-dir={d / 'kubelet'}",
            f"--hostname-override={node.name}",
            f"--node-ip={node.gateway}",
            "--node-labels=" + ",".join(f"{k}={v}" for k, v in labels.items()),
            "--v=1",
        ],
    )
    launcher.wait(
        f"{node.name}'s kubelet /healthz", lambda: http_ok(f"http://127.0.0.1:{node.healthz_port}/healthz")
    )


def start_kube_proxy(launcher: Launcher, nodes: list[RealNode], state: ClusterState, bin_dir: Path) -> None:
    """One kube-proxy (iptables mode) for the host, whose network all real nodes share."""
    directory = Path(state.directory)
    healthz, metrics = free_port(), free_port()
    state.ports["kube-proxy"] = healthz
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": state.kubeconfig},
        "hostnameOverride": nodes[0].name,
        "bindAddress": nodes[0].gateway,
        "healthzBindAddress": f"127.0.0.1:{healthz}",
        "metricsBindAddress": f"127.0.0.1:{metrics}",
        "mode": "iptables",
        "clusterCIDR": str(POD_NETWORK),
        # NodePorts answer on the bridges only, never on the machine's own interface.
        "nodePortAddresses": [str(POD_NETWORK)],
        "iptables": {"masqueradeAll": True, "localhostNodePorts": False, "syncPeriod": "10s"},
        # Leave the host's conntrack table sizes alone.
        "conntrack": {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }
    (directory / "kube-proxy.json").write_text(json.dumps(config, indent=2))
    launcher.start("kube-proxy", "kube-proxy", [f"--config={directory / 'kube-proxy.json'}"])
    launcher.wait("kube-proxy /healthz", lambda: http_ok(f"http://127.0.0.1:{healthz}/healthz"))


def wait_ready(launcher: Launcher, nodes: list[RealNode], state: ClusterState, bin_dir: Path) -> None:
    def ready() -> bool:
        out = kubectl(state, bin_dir, "get", "nodes", "-l", f"{NODE_LABEL}=true", "-o", "json")
        if out.returncode != 0:
            return False
        count = 0
        for item in json.loads(out.stdout).get("items", []):
            conditions = (item.get("status") or {}).get("conditions") or []
            count += any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        return count == len(nodes)

    launcher.wait(f"{len(nodes)} real nodes Ready", ready)


def start(launcher: Launcher, nodes: list[RealNode], state: ClusterState, bin_dir: Path, zones: int) -> None:
    pause_tar = pause_archive(ensure_pause(), Path(state.directory))
    for node in nodes:
        start_containerd(launcher, node, pause_tar)
    for node in nodes:
        zone = f"local-1{chr(ord('a') + node.index % max(zones, 1))}"
        start_kubelet(launcher, node, state, bin_dir, zone)
    start_kube_proxy(launcher, nodes, state, bin_dir)
    wait_ready(launcher, nodes, state, bin_dir)


KUBELET_JOB = "kubelet"


def scrape_configs(nodes: list[RealNode]) -> list[dict[str, Any]]:
    """Prometheus's scrape of each real kubelet's resource metrics (what metrics-server reads:
    ``node_cpu_usage_seconds_total``, ``node_memory_working_set_bytes`` and the pods' and
    containers' own), each labelled with its node; the kubelet's certificate is self-signed."""
    return [
        {
            "job_name": KUBELET_JOB,
            "scheme": "https",
            "metrics_path": "/metrics/resource",
            "tls_config": {"insecure_skip_verify": True},
            "scrape_interval": "2s",
            "static_configs": [
                {"targets": [f"{n.gateway}:{n.kubelet_port}"], "labels": {"node": n.name}} for n in nodes
            ],
        }
    ]


def load_image(nodes: list[RealNode], archive: Path, name: str) -> None:
    """Import an image archive (OCI or docker-archive) into every real node's containerd."""
    for node in nodes:
        import_archive(node, archive, name)
