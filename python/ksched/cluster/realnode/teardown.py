"""Taking the real nodes down: :func:`teardown` stops every container and shim, removes
the KUBE-* chains the kubelets and kube-proxy added, the isolation chain, the pods' network
namespaces, the bridges, the cgroup roots and the mounts, restores forwarding, and removes
what the runtime left in host folders; all from the state file's record alone (a half-made
host too). Leaves alone whatever was there before ``up``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

from ksched.cluster import build
from ksched.cluster.realnode.host import (
    HOST_CNI_DIR,
    HOST_CONTAINER_LOGS,
    HOST_NETNS_DIR,
    HOST_SHIM_DIR,
    IPTABLES,
    ISOLATE_CHAIN,
    TABLES,
    cgroup_hierarchies,
    kube_chains,
    links,
)
from ksched.cluster.realnode.nodes import BRIDGE_PREFIX, CRI_NAMESPACE, POD_NETWORK, HostChanges, RealNode


def _remove_kube_chains(before: set[str]) -> None:
    """Remove the KUBE-* chains that were not there before, and every rule that jumps to one."""
    new = kube_chains() - before
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


def _remove_cgroup(node: RealNode) -> None:
    for hierarchy in cgroup_hierarchies():
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
    left += [link for link in links() if link.startswith(BRIDGE_PREFIX)]
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
