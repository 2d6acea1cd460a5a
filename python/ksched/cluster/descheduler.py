"""The descheduler (``sigs.k8s.io/descheduler``) against the local cluster.

Owns the DeschedulerPolicy that ``ksched bench --quality`` compares ksched's rebalancer
with (:func:`low_node_utilization_policy`: LowNodeUtilization on the nodes' actual usage
from metrics-server, restricted to one pool of nodes and one namespace) and starting the
pinned binary (:mod:`ksched.cluster.build`) as a process of its own beside the control
plane (:func:`start`). It is not a component of the cluster state: whoever starts it
stops it, as ``ksched run`` in a benchmark is.

LowNodeUtilization's thresholds are percentages of a node's allocatable: a node over
``targetThresholds`` is over-utilised, one under ``thresholds`` under-utilised, and pods are
evicted from the first only while some node is in the second, until the over-utilised node
drops under ``targetThresholds`` or the under-utilised nodes' room up to ``thresholds`` is
spent.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ksched.cluster.build import Pins, descheduler_binary, ensure_built
from ksched.cluster.processes import free_port

POLICY_API_VERSION = "descheduler/v1alpha2"
# Namespaces carry their own name as this label (the API server sets it).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
LOG_VERBOSITY = "3"
# Its log, in the directory it is started with.
LOG = "descheduler.log"
# Its metrics collector asks metrics.k8s.io for each node's usage one request at a time,
# every 5 s: at client-go's default 5 requests a second a pool of 100 nodes took 20 s a
# round, so each node's (smoothed) usage moved a fourth as often as the collector means it to.
CLIENT_QPS = 50
CLIENT_BURST = 100


@dataclass(frozen=True)
class DeschedulerSetup:
    """What the descheduler is asked to balance, and how often."""

    # The nodes it looks at, as a label selector (``key=value``).
    node_selector: str
    # The one namespace whose pods it may evict.
    namespace: str
    # Utilisation (0..1) over which a node is over-utilised, and under which it is under-utilised.
    high: float
    low: float
    interval_s: float


def _percent(share: float) -> float:
    return round(share * 100, 2)


def low_node_utilization_policy(setup: DeschedulerSetup) -> dict[str, Any]:
    """The DeschedulerPolicy: LowNodeUtilization on CPU by actual usage (metrics-server,
    through the descheduler's metrics collector), ``targetThresholds`` at ``high`` and
    ``thresholds`` at ``low``, on the selected nodes and the one namespace only."""
    return {
        "apiVersion": POLICY_API_VERSION,
        "kind": "DeschedulerPolicy",
        "nodeSelector": setup.node_selector,
        "metricsProviders": [{"source": "KubernetesMetrics"}],
        "profiles": [
            {
                "name": "rebalance",
                "pluginConfig": [
                    {
                        "name": "DefaultEvictor",
                        "args": {
                            "namespaceLabelSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: setup.namespace}}
                        },
                    },
                    {
                        "name": "LowNodeUtilization",
                        "args": {
                            "thresholds": {"cpu": _percent(setup.low)},
                            "targetThresholds": {"cpu": _percent(setup.high)},
                            "metricsUtilization": {"source": "KubernetesMetrics"},
                        },
                    },
                ],
                "plugins": {"balance": {"enabled": ["LowNodeUtilization"]}},
            }
        ],
    }


def arguments(kubeconfig: str, policy: Path, interval_s: float, port: int) -> list[str]:
    """The descheduler's command line: the policy file, a loop every ``interval_s``, a client
    fast enough for its metrics collector, its own metrics and health endpoint on a free
    loopback port, no leader election."""
    return [
        f"--client-connection-kubeconfig={kubeconfig}",
        f"--policy-config-file={policy}",
        f"--descheduling-interval={interval_s:g}s",
        f"--client-connection-qps={CLIENT_QPS}",
        f"--client-connection-burst={CLIENT_BURST}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--leader-elect=false",
        f"--v={LOG_VERBOSITY}",
    ]


def start(kubeconfig: str, setup: DeschedulerSetup, workdir: Path) -> subprocess.Popen[bytes]:
    """Build the pinned descheduler if missing, write its policy under ``workdir`` and start
    it against ``kubeconfig``, logging to :data:`LOG` there."""
    ensure_built(Pins(), with_helm=False, with_descheduler=True)
    workdir.mkdir(parents=True, exist_ok=True)
    policy = workdir / "descheduler-policy.yaml"
    policy.write_text(yaml.safe_dump(low_node_utilization_policy(setup)))
    cmd = [str(descheduler_binary()), *arguments(kubeconfig, policy, setup.interval_s, free_port())]
    with open(workdir / LOG, "wb") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
