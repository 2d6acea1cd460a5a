"""Real nodes beside the KWOK ones: ``ksched cluster up --real-nodes N``.

Owns, for each real node ``i``: a Linux bridge ``kschedbr<i>`` with the gateway of its pod
subnet ``10.246.<i>.0/24`` (the node's InternalIP, where its kubelet listens), its own
containerd (root, state, runc root and CNI configuration under the cluster's state
directory, its sockets under a short ``/run/ksched-<digest>``), and a kubelet (its root, pod logs and cgroup root its own); one kube-proxy for
the host; the pause image the sandboxes run (:data:`PAUSE_IMAGE`, a static binary built from
``pause/``, imported into each containerd); loading a local image into every real node
(:func:`load_image`); and :func:`teardown`, which removes all of it, on the machine and on
its network configuration, from the state file alone.

Network boundary: pods get addresses on the bridges this creates; the API server listens on
the first bridge's gateway (so pods reach it through the ``kubernetes`` Service); a
``KSCHED-ISOLATE`` chain drops anything a pod sends that is not for the pod network, the
service range or this host, and nothing is masqueraded out. Pods get a resolv.conf with no
name server. Nothing listens on or sends to the machine's own interface.

Needs root and Debian's containerd, runc and CNI plugins, which :func:`install_packages`
installs with apt-get when missing. Tested on cgroup v1 with the v2 hierarchy beside it; on a
v2-only host the kubelet's cgroup root needs its controllers delegated.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import tarfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ksched.cluster import build
from ksched.cluster.processes import (
    ClusterError,
    ClusterState,
    Launcher,
    apt_install,
    free_port,
    http_ok,
    kubectl,
)

# Debian's packages: containerd 1.6 (with ctr), runc, the CNI plugins, iptables and conntrack
# (kube-proxy's iptables mode).
PACKAGES = ("containerd", "runc", "containernetworking-plugins", "iptables", "conntrack")
COMMANDS = ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "iptables", "ip")
CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
# Apart from KWOK's pod addresses (10.244.0.0/16), which real pods must never share.
POD_NETWORK = ipaddress.IPv4Network("10.246.0.0/16")
SERVICE_NETWORK = "10.96.0.0/16"
MAX_REAL_NODES = 8
BRIDGE_PREFIX = "kschedbr"
ISOLATE_CHAIN = "KSCHED-ISOLATE"
NODE_LABEL = "ksched.io/real-node"
PAUSE_IMAGE = "localhost/ksched-pause:1"
# The containerd namespace the CRI plugin (so the kubelet) uses.
CRI_NAMESPACE = "k8s.io"
# Host paths that a kubelet, containerd and the CNI plugins write outside any folder they
# are given; teardown removes what this cluster put there.
HOST_NETNS_DIR = Path("/run/netns")
HOST_CNI_DIR = Path("/var/lib/cni")
HOST_CONTAINER_LOGS = Path("/var/log/containers")
HOST_SHIM_DIR = Path("/run/containerd")


@dataclass(frozen=True)
class RealNode:
    """One real node's names, addresses, ports and folders."""

    index: int
    name: str
    bridge: str
    subnet: str
    gateway: str
    directory: str
    kubelet_port: int
    healthz_port: int

    @property
    def runtime_dir(self) -> str:
        """containerd's sockets, short whatever the state directory (a unix socket's path has
        at most 104 bytes): ``/run/ksched-<digest of the node's directory>``."""
        return f"/run/ksched-{hashlib.sha256(self.directory.encode()).hexdigest()[:12]}"

    @property
    def socket(self) -> str:
        return f"{self.runtime_dir}/containerd.sock"

    @property
    def cgroup_root(self) -> str:
        return f"/ksched-{os.path.basename(os.path.dirname(self.directory))}-{self.index}"


@dataclass
class HostChanges:
    """What the real nodes changed outside the state directory, to undo it exactly."""

    ip_forward: str = "0"
    netns_before: tuple[str, ...] = ()
    cni_dir_existed: bool = True
    container_logs_existed: bool = True
    shim_dir_existed: bool = True
    netns_dir_existed: bool = True
    # iptables chains named KUBE-* before `up` (a real kubelet of the host's own): left alone.
    kube_chains_before: tuple[str, ...] = ()


def plan(count: int, cluster_dir: Path) -> list[RealNode]:
    if not 0 < count <= MAX_REAL_NODES:
        raise ClusterError(f"--real-nodes must be between 1 and {MAX_REAL_NODES}, not {count}")
    nodes = []
    for i in range(count):
        subnet = ipaddress.ip_network(f"10.246.{i}.0/24")
        nodes.append(
            RealNode(
                index=i,
                name=f"real-node-{i}",
                bridge=f"{BRIDGE_PREFIX}{i}",
                subnet=str(subnet),
                gateway=str(subnet.network_address + 1),
                directory=str(cluster_dir / f"real-node-{i}"),
                kubelet_port=free_port(),
                healthz_port=free_port(),
            )
        )
    return nodes


def api_address(nodes: list[RealNode]) -> str:
    """Where the API server listens and what it advertises: the first bridge's gateway, the
    address its ``kubernetes`` Service sends pods to."""
    return nodes[0].gateway


# --- host preparation -------------------------------------------------------------------


def cni_bin_dir() -> str:
    for folder in CNI_BIN_DIRS:
        if all(os.access(os.path.join(folder, p), os.X_OK) for p in CNI_PLUGINS):
            return folder
    raise ClusterError(f"the CNI plugins {', '.join(CNI_PLUGINS)} are not in {' or '.join(CNI_BIN_DIRS)}")


def _missing_commands() -> list[str]:
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    try:
        cni_bin_dir()
    except ClusterError:
        missing.append("CNI plugins")
    return missing


def install_packages() -> None:
    """apt-get install the runtime packages that are missing (root only)."""
    missing = _missing_commands()
    if not missing:
        return
    by_hand = f"apt-get install {' '.join(PACKAGES)}"
    failed = apt_install(PACKAGES, "the real nodes' runtime")
    if failed is not None:
        raise ClusterError(f"real nodes need {', '.join(missing)}: `{by_hand}` as root failed: {failed}")
    still = _missing_commands()
    if still:
        raise ClusterError(f"{', '.join(still)} still missing after `{by_hand}`")


def _sh(cmd: list[str], what: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise ClusterError(f"{what} failed: {' '.join(cmd)}: {(proc.stderr or proc.stdout).strip()}")
    return proc


def check_host() -> None:
    """Refuse early, saying why, where real nodes cannot run."""
    if os.geteuid() != 0:
        raise ClusterError("real nodes need root (containerd, bridges, iptables, cgroups)")
    install_packages()
    stale = [link for link in _links() if link.startswith(BRIDGE_PREFIX)]
    if stale:
        raise ClusterError(
            f"bridges {', '.join(stale)} exist: another cluster with real nodes runs, or one was not "
            "taken down; run `ksched cluster down` (or `ip link delete` them)"
        )


def _links() -> list[str]:
    proc = _sh(["ip", "-o", "link", "show"], "listing links", check=False)
    return [line.split(":")[1].strip().split("@")[0] for line in proc.stdout.splitlines() if ":" in line]


def host_before() -> HostChanges:
    """The host as it is before any change, saved first so that a teardown after a failed
    start restores exactly this."""
    return HostChanges(
        ip_forward=Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(),
        netns_before=tuple(sorted(os.listdir(HOST_NETNS_DIR))) if HOST_NETNS_DIR.is_dir() else (),
        cni_dir_existed=HOST_CNI_DIR.exists(),
        container_logs_existed=HOST_CONTAINER_LOGS.exists(),
        shim_dir_existed=HOST_SHIM_DIR.exists(),
        netns_dir_existed=HOST_NETNS_DIR.exists(),
        kube_chains_before=tuple(sorted(_kube_chains())),
    )


def prepare_host(nodes: list[RealNode]) -> None:
    """Bridges with their gateways, forwarding between them, and the isolation chain."""
    for node in nodes:
        _sh(["ip", "link", "add", node.bridge, "type", "bridge"], f"creating bridge {node.bridge}")
        prefix = ipaddress.ip_network(node.subnet).prefixlen
        _sh(["ip", "addr", "add", f"{node.gateway}/{prefix}", "dev", node.bridge], "addressing the bridge")
        _sh(["ip", "link", "set", node.bridge, "up"], "bringing the bridge up")
    # Pods on one node reach pods on another through the host.
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
    _sh(["iptables", "-N", ISOLATE_CHAIN], "creating the isolation chain")
    for rule in (
        ["-d", str(POD_NETWORK), "-j", "RETURN"],
        ["-d", SERVICE_NETWORK, "-j", "RETURN"],
        ["-j", "DROP"],
    ):
        _sh(["iptables", "-A", ISOLATE_CHAIN, *rule], "filling the isolation chain")
    _sh(
        ["iptables", "-I", "FORWARD", "1", "-s", str(POD_NETWORK), "-j", ISOLATE_CHAIN],
        "hooking the isolation chain",
    )


IPTABLES = ("iptables", "ip6tables")
TABLES = ("filter", "nat", "mangle")


def _kube_chains() -> set[str]:
    """Every KUBE-* chain, as ``binary/table/chain`` (the kubelet's and kube-proxy's)."""
    found = set()
    for binary in IPTABLES:
        if shutil.which(binary) is None:
            continue
        for table in TABLES:
            out = subprocess.run([binary, "-t", table, "-S"], capture_output=True, text=True, check=False)
            for line in out.stdout.splitlines():
                if line.startswith("-N KUBE-"):
                    found.add(f"{binary}/{table}/{line.split()[1]}")
    return found


def _remove_kube_chains(before: set[str]) -> None:
    """Remove the KUBE-* chains that were not there before, and every rule that jumps to one."""
    new = _kube_chains() - before
    for binary in IPTABLES:
        for table in TABLES:
            chains = {c.split("/")[2] for c in new if c.startswith(f"{binary}/{table}/")}
            if not chains:
                continue
            out = subprocess.run([binary, "-t", table, "-S"], capture_output=True, text=True, check=False)
            for line in out.stdout.splitlines():
                words = line.split()
                if words[:1] == ["-A"] and "-j" in words and words[words.index("-j") + 1] in chains:
                    subprocess.run([binary, "-t", table, "-D", *words[1:]], capture_output=True, check=False)
            for chain in chains:
                subprocess.run([binary, "-t", table, "-F", chain], capture_output=True, check=False)
            for chain in chains:
                subprocess.run([binary, "-t", table, "-X", chain], capture_output=True, check=False)


def _cgroup_hierarchies() -> list[Path]:
    root = Path("/sys/fs/cgroup")
    if (root / "cgroup.controllers").exists():
        return [root]
    # cgroup v1 controllers, and in hybrid mode the v2 hierarchy beside them ("unified").
    return [p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and (p / "cgroup.procs").exists()]


def _make_cgroup_root(node: RealNode) -> None:
    """The kubelet's cgroup root must exist in every hierarchy; a v1 cpuset child starts empty."""
    for hierarchy in _cgroup_hierarchies():
        folder = hierarchy / node.cgroup_root.lstrip("/")
        folder.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (folder / name).exists() and not (folder / name).read_text().strip():
                (folder / name).write_text((hierarchy / name).read_text())


def _remove_cgroup(node: RealNode) -> None:
    for hierarchy in _cgroup_hierarchies():
        top = hierarchy / node.cgroup_root.lstrip("/")
        if not top.is_dir():
            continue
        for folder in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            _kill_cgroup(folder)
            with contextlib.suppress(OSError):
                folder.rmdir()
        _kill_cgroup(top)
        with contextlib.suppress(OSError):
            top.rmdir()


def _kill_cgroup(folder: Path) -> None:
    for name in ("cgroup.procs", "tasks"):
        with contextlib.suppress(OSError, ValueError):
            for pid in (folder / name).read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)


# --- the pause image ----------------------------------------------------------------------

PAUSE_SOURCE = Path(__file__).with_name("pause")


def pause_binary() -> Path:
    digest = hashlib.sha256()
    for name in ("go.mod", "main.go"):
        digest.update((PAUSE_SOURCE / name).read_bytes())
    return build.bin_dir() / f"pause-{digest.hexdigest()[:12]}"


def ensure_pause() -> Path:
    binary = pause_binary()
    if binary.is_file():
        return binary
    work = build.bin_dir().parent / "src" / "pause"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(PAUSE_SOURCE, work)
    build._run(
        ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(binary), "."], work, "building pause"
    )
    return binary


def _blob(layout: tarfile.TarFile, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    layout.addfile(info, io.BytesIO(data))
    return {"digest": f"sha256:{digest}", "size": len(data)}


def pause_archive(binary: Path, into: Path) -> Path:
    """An OCI image layout (a tar that ``ctr images import`` reads) holding ``/pause`` alone."""
    layer_bytes = io.BytesIO()
    with tarfile.open(fileobj=layer_bytes, mode="w") as layer:
        info = layer.gettarinfo(str(binary), arcname="pause")
        info.mode, info.uid, info.gid, info.uname, info.gname, info.mtime = 0o755, 0, 0, "", "", 0
        with binary.open("rb") as f:
            layer.addfile(info, f)
    layer_data = layer_bytes.getvalue()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    out = into / "pause-image.tar"
    with tarfile.open(out, "w") as layout:
        layer_desc = _blob(layout, layer_data)
        config = {
            "architecture": arch,
            "os": "linux",
            "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
            "rootfs": {"type": "layers", "diff_ids": [layer_desc["digest"]]},
        }
        config_desc = _blob(layout, json.dumps(config).encode())
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config_desc},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer_desc}],
        }
        manifest_desc = _blob(layout, json.dumps(manifest).encode())
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    **manifest_desc,
                    "annotations": {
                        "io.containerd.image.name": PAUSE_IMAGE,
                        "org.opencontainers.image.ref.name": PAUSE_IMAGE.rsplit(":", 1)[1],
                    },
                }
            ],
        }
        for name, data in (
            ("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
            ("index.json", json.dumps(index).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            layout.addfile(info, io.BytesIO(data))
    return out


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


# --- containerd, kubelet, kube-proxy ----------------------------------------------------------


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
    _make_cgroup_root(node)
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


# --- teardown ---------------------------------------------------------------------------------


def stop_containers(node: RealNode) -> None:
    """Kill and delete every container of this node's runc root, then its shims."""
    root = f"{node.directory}/containerd/runc/{CRI_NAMESPACE}"
    listed = subprocess.run(
        ["runc", "--root", root, "list", "-q"], capture_output=True, text=True, check=False
    )
    for container in listed.stdout.split():
        subprocess.run(["runc", "--root", root, "kill", container, "KILL"], capture_output=True, check=False)
        subprocess.run(
            ["runc", "--root", root, "delete", "--force", container], capture_output=True, check=False
        )
    for pid in _pids_with(f"-address {node.socket}"):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _pids_with(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                found.append(int(entry.name))
    return found


def unmount_under(folder: str) -> None:
    """Unmount, deepest first, everything mounted under ``folder`` (the kubelet's volumes,
    containerd's rootfs and shm mounts)."""
    prefix = folder.rstrip("/") + "/"
    for _ in range(3):
        mounts = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefix):
                mounts.append(point)
        if not mounts:
            return
        for point in sorted(set(mounts), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def teardown(nodes: list[RealNode], changes: HostChanges, state_directory: str) -> list[str]:
    """Undo everything the real nodes did; returns what it could not undo (empty when clean)."""
    left: list[str] = []
    for node in nodes:
        stop_containers(node)
    # kube-proxy's own cleanup removes its chains and rules.
    proxy = build.bin_dir() / "kube-proxy"
    if proxy.is_file():
        subprocess.run([str(proxy), "--cleanup"], capture_output=True, check=False, timeout=60)
    # The kubelet's own chains (KUBE-FIREWALL, the canaries), which nothing else removes.
    _remove_kube_chains(set(changes.kube_chains_before))
    with contextlib.suppress(subprocess.SubprocessError):
        subprocess.run(
            ["iptables", "-D", "FORWARD", "-s", str(POD_NETWORK), "-j", ISOLATE_CHAIN],
            capture_output=True,
            check=False,
        )
        subprocess.run(["iptables", "-F", ISOLATE_CHAIN], capture_output=True, check=False)
        subprocess.run(["iptables", "-X", ISOLATE_CHAIN], capture_output=True, check=False)
    if HOST_NETNS_DIR.is_dir():
        for name in sorted(set(os.listdir(HOST_NETNS_DIR)) - set(changes.netns_before)):
            if name.startswith("cni-"):
                subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
    for node in nodes:
        subprocess.run(["ip", "link", "delete", node.bridge], capture_output=True, check=False)
        _remove_cgroup(node)
        shutil.rmtree(node.runtime_dir, ignore_errors=True)
    # Every node's folder is under the state directory: the kubelets' volumes, containerd's mounts.
    unmount_under(state_directory)
    Path("/proc/sys/net/ipv4/ip_forward").write_text(changes.ip_forward)
    _remove_host_leftovers(changes, state_directory)
    left += [link for link in _links() if link.startswith(BRIDGE_PREFIX)]
    return left


def _remove_host_leftovers(changes: HostChanges, state_directory: str) -> None:
    if HOST_CONTAINER_LOGS.is_dir():
        for link in HOST_CONTAINER_LOGS.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(state_directory):
                    link.unlink()
        if not changes.container_logs_existed:
            with contextlib.suppress(OSError):
                HOST_CONTAINER_LOGS.rmdir()
    if HOST_CNI_DIR.is_dir():
        for entry in HOST_CNI_DIR.rglob("*"):
            if entry.is_file() and "ksched-real-node-" in entry.name:
                entry.unlink()
        if not changes.cni_dir_existed:
            shutil.rmtree(HOST_CNI_DIR, ignore_errors=True)
    if HOST_NETNS_DIR.is_dir() and not changes.netns_dir_existed:
        with contextlib.suppress(OSError):
            HOST_NETNS_DIR.rmdir()
    if HOST_SHIM_DIR.is_dir() and not changes.shim_dir_existed:
        unmount_under(str(HOST_SHIM_DIR))
        shutil.rmtree(HOST_SHIM_DIR, ignore_errors=True)


def to_state(nodes: list[RealNode], changes: HostChanges) -> dict[str, Any]:
    return {"nodes": [asdict(n) for n in nodes], "host": asdict(changes)}


def from_state(saved: dict[str, Any]) -> tuple[list[RealNode], HostChanges]:
    host = dict(saved.get("host") or {})
    for key in ("netns_before", "kube_chains_before"):
        host[key] = tuple(host.get(key) or ())
    return [RealNode(**n) for n in saved.get("nodes") or []], HostChanges(**host)
