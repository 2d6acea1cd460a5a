"""What each real node is: its name, bridge, pod subnet, folders and ports
(:class:`RealNode`, made by :func:`plan`), what the nodes changed on the host
(:class:`HostChanges`), and both as the state file records them (:func:`to_state`,
:func:`from_state`), so that ``down`` undoes a cluster from the state file alone.

Data only: changes nothing on the host and starts no process (:func:`plan` only asks for
free ports).
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ksched.cluster.processes import ClusterError, free_port

# Apart from KWOK's pod addresses (10.244.0.0/16), which real pods must never share.
POD_NETWORK = ipaddress.IPv4Network("10.246.0.0/16")
SERVICE_NETWORK = "10.96.0.0/16"
MAX_REAL_NODES = 8
BRIDGE_PREFIX = "kschedbr"
NODE_LABEL = "ksched.io/real-node"
# The containerd namespace the CRI plugin (so the kubelet) uses.
CRI_NAMESPACE = "k8s.io"


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


def to_state(nodes: list[RealNode], changes: HostChanges) -> dict[str, Any]:
    return {"nodes": [asdict(n) for n in nodes], "host": asdict(changes)}


def from_state(saved: dict[str, Any]) -> tuple[list[RealNode], HostChanges]:
    host = dict(saved.get("host") or {})
    for key in ("netns_before", "kube_chains_before"):
        host[key] = tuple(host.get(key) or ())
    return [RealNode(**n) for n in saved.get("nodes") or []], HostChanges(**host)
