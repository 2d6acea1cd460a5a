"""Fake nodes: the KWOK controller and the Node objects it keeps Ready.

Owns the nodes' shapes (realistic instance types, the well-known labels, zones of
one region), and starting KWOK for the nodes that carry :data:`FAKE_NODE_ANNOTATION`,
renewing their Leases as a kubelet does (and, for the load simulation, serving their
usage: :mod:`ksched.cluster.load`), then creating the nodes and waiting until every one
is Ready.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ksched.cluster import load
from ksched.cluster.build import Pins, kwok_stages
from ksched.cluster.processes import READY_TIMEOUT_S, ClusterError, ClusterState, Launcher, free_port, kubectl

FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
# The kubelet's node Lease duration (renewed every quarter of it): at 5,000 nodes, 500 writes a second.
NODE_LEASE_S = 40
# Realistic shapes for fake nodes: (instance type, cpu, memory).
INSTANCE_TYPES = (
    ("m5.xlarge", "4", "16Gi"),
    ("m5.2xlarge", "8", "32Gi"),
    ("c5.2xlarge", "8", "16Gi"),
    ("r5.xlarge", "4", "32Gi"),
)
# Shapes from 2 to 16 cores and 2 to 8 GiB a core (compute-, general- and memory-optimised),
# for a cluster whose nodes differ as much as a real fleet's (``ksched bench --quality``'s
# diverse-deployments): a pod's request is a large share of a small node and a small one of a
# large node.
MIXED_INSTANCE_TYPES = (
    ("c5.large", "2", "4Gi"),
    ("m5.large", "2", "8Gi"),
    ("r5.large", "2", "16Gi"),
    ("m5.xlarge", "4", "16Gi"),
    ("c5.2xlarge", "8", "16Gi"),
    ("r5.2xlarge", "8", "64Gi"),
    ("c5.4xlarge", "16", "32Gi"),
    ("m5.4xlarge", "16", "64Gi"),
)
# (instance type, cpu, memory) of each node in turn.
Shapes = tuple[tuple[str, str, str], ...]
REGION = "local-1"


def fake_nodes(count: int, zones: int, first: int = 0, shapes: Shapes = INSTANCE_TYPES) -> dict[str, Any]:
    """Node objects KWOK manages: realistic allocatable and well-known labels
    (named ``kwok-node-NNNNN`` from ``first``), cycling through ``shapes``."""
    items = []
    for i in range(first, first + count):
        itype, cpu, mem = shapes[i % len(shapes)]
        name = f"kwok-node-{i:05d}"
        items.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {
                        FAKE_NODE_ANNOTATION: "fake",
                        "node.alpha.kubernetes.io/ttl": "0",
                        load.RESOURCE_METRICS_PATH_ANNOTATION: load.resource_metrics_path(name),
                    },
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/arch": "amd64",
                        "kubernetes.io/os": "linux",
                        "node.kubernetes.io/instance-type": itype,
                        "topology.kubernetes.io/region": REGION,
                        "topology.kubernetes.io/zone": f"{REGION}{chr(ord('a') + i % max(zones, 1))}",
                        "type": "kwok",
                    },
                },
                "status": {
                    "allocatable": {"cpu": cpu, "memory": mem, "pods": "110", "ephemeral-storage": "100Gi"},
                    "capacity": {"cpu": cpu, "memory": mem, "pods": "110", "ephemeral-storage": "100Gi"},
                },
            }
        )
    return {"apiVersion": "v1", "kind": "List", "items": items}


def start_nodes(
    launcher: Launcher,
    nodes: int,
    zones: int,
    node_lease_s: int,
    simulate_load: bool,
    shapes: Shapes = INSTANCE_TYPES,
) -> None:
    """Start KWOK, create ``nodes`` fake nodes of ``shapes`` over ``zones`` zones and wait
    until they are Ready.

    With ``simulate_load`` KWOK also evaluates the pods' usage profiles and serves every
    node's resource metrics on loopback, at the address the nodes advertise (``ports["kwok"]``)."""
    state, bin_dir = launcher.state, launcher.bin
    kwok_config = launcher.dir / "kwok-stages.yaml"
    kwok_config.write_text(
        "\n---\n".join(
            [kwok_stages(Pins()), *([load.yaml_documents(load.kwok_documents())] if simulate_load else [])]
        )
    )
    port = state.ports["kwok"] = free_port()
    launcher.start(
        "kwok",
        "kwok",
        [
            f"--kubeconfig={state.kubeconfig}",
            f"--config={kwok_config}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=fake",
            "--cidr=10.244.0.0/16",
            f"--node-lease-duration-seconds={node_lease_s}",
            *(
                load.kwok_node_args(port)
                if simulate_load
                else ["--node-ip=10.244.0.1", f"--server-address=127.0.0.1:{port}"]
            ),
        ],
    )
    if nodes:
        created = kubectl(
            state,
            bin_dir,
            "create",
            "-f",
            "-",
            "-o",
            "name",
            input_=json.dumps(fake_nodes(nodes, zones, shapes=shapes)).encode(),
        )
        if created.returncode != 0:
            raise ClusterError(f"creating {nodes} fake nodes failed: {created.stderr.decode()[-2000:]}")
    state.nodes = nodes
    launcher.wait(
        f"{nodes} Ready nodes",
        lambda: _ready_nodes(state, bin_dir) >= nodes,
        timeout=max(READY_TIMEOUT_S, nodes * 0.1),
    )


def _ready_nodes(state: ClusterState, bin_dir: Path) -> int:
    out = kubectl(state, bin_dir, "get", "nodes", "-o", "json")
    if out.returncode != 0:
        return -1
    count = 0
    for n in json.loads(out.stdout).get("items", []):
        for c in (n.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready" and c.get("status") == "True":
                count += 1
    return count
