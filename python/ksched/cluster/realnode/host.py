"""Host preparation for the real nodes: the runtime packages (:func:`install_packages`), the
checks that refuse a host early (:func:`check_host`), the host as it was before
(:func:`host_before`), the bridges, forwarding and isolation chain (:func:`prepare_host`), and
each kubelet's cgroup root (:func:`make_cgroup_root`).

Also lists what teardown compares against: the links, the KUBE-* chains and the cgroup
hierarchies. Never undoes anything itself; :mod:`~ksched.cluster.realnode.teardown` does.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from pathlib import Path

from ksched.cluster.processes import ClusterError, apt_install
from ksched.cluster.realnode.nodes import BRIDGE_PREFIX, POD_NETWORK, SERVICE_NETWORK, HostChanges, RealNode

# Debian's packages: containerd 1.6 (with ctr), runc, the CNI plugins, iptables and conntrack
# (kube-proxy's iptables mode).
PACKAGES = ("containerd", "runc", "containernetworking-plugins", "iptables", "conntrack")
COMMANDS = ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "iptables", "ip")
CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
ISOLATE_CHAIN = "KSCHED-ISOLATE"
# Host paths that a kubelet, containerd and the CNI plugins write outside any folder they
# are given; teardown removes what this cluster put there.
HOST_NETNS_DIR = Path("/run/netns")
HOST_CNI_DIR = Path("/var/lib/cni")
HOST_CONTAINER_LOGS = Path("/var/log/containers")
HOST_SHIM_DIR = Path("/run/containerd")


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
    stale = [link for link in links() if link.startswith(BRIDGE_PREFIX)]
    if stale:
        raise ClusterError(
            f"bridges {', '.join(stale)} exist: another cluster with real nodes runs, or one was not "
            "taken down; run `ksched cluster down` (or `ip link delete` them)"
        )


def links() -> list[str]:
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
        kube_chains_before=tuple(sorted(kube_chains())),
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


def kube_chains() -> set[str]:
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


def cgroup_hierarchies() -> list[Path]:
    root = Path("/sys/fs/cgroup")
    if (root / "cgroup.controllers").exists():
        return [root]
    # cgroup v1 controllers, and in hybrid mode the v2 hierarchy beside them ("unified").
    return [p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and (p / "cgroup.procs").exists()]


def make_cgroup_root(node: RealNode) -> None:
    """The kubelet's cgroup root must exist in every hierarchy; a v1 cpuset child starts empty."""
    for hierarchy in cgroup_hierarchies():
        folder = hierarchy / node.cgroup_root.lstrip("/")
        folder.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (folder / name).exists() and not (folder / name).read_text().strip():
                (folder / name).write_text((hierarchy / name).read_text())
