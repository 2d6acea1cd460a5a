"""``ksched explain NS/POD`` against the live local control plane.

The live form must print exactly what the offline form prints for the same
objects dumped with ``kubectl get -o yaml`` and the same metric values: one
code path, two ways of reading the cluster.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ksched.cluster import local
from ksched.loop.client import Kube
from tests.integration.exporter import NODE_VALUES, utilization_metric
from tests.integration.helpers import Namespaces, create, kubectl, make_pod, wait_for

pytestmark = pytest.mark.cluster

# What the offline form reads from a file, as a user would dump it.
KINDS = "nodes,namespaces,pods,poddisruptionbudgets,services,replicationcontrollers,replicasets,statefulsets"


def explain(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ksched.commands.cli", "explain", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_live_explain_prints_what_offline_explain_prints_for_the_same_objects(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("explain-live")
    # No ksched runs here: both pods stay pending.
    create(kube, [make_pod("waiting-0", ns, "500m", "256Mi"), make_pod("huge-0", ns, "1000", "1Gi")])
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "ksched.io/v1alpha1",
                "kind": "KschedConfiguration",
                "metrics": [utilization_metric()],
                "prometheus": {"url": cluster.prometheus},
            }
        )
    )
    pods = (f"{ns}/waiting-0", f"{ns}/huge-0")
    live_args = ("--config", str(config), "--kubeconfig", cluster.kubeconfig)
    # Until Prometheus has scraped the exporter, the metric is left out (and says so).
    live = wait_for(lambda: (r := explain(*pods, *live_args)).stderr == "" and r, 30, 1.0)
    assert live, explain(*pods, *live_args).stderr

    dumped = kubectl(cluster, "get", KINDS, "--all-namespaces", "-o", "yaml")
    assert dumped.returncode == 0, dumped.stderr
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(dumped.stdout)
    metrics_file = tmp_path / "metrics.yaml"
    metrics_file.write_text(yaml.safe_dump({n: {"utilization": v} for n, v in NODE_VALUES.items()}))
    offline = explain(str(cluster_file), *pods, "--config", str(config), "--metrics", str(metrics_file))
    print(f"\n{live.stdout}")

    assert live.stdout == offline.stdout, f"live:\n{live.stdout}\noffline:\n{offline.stdout}"
    assert live.returncode == offline.returncode == 1, "huge-0 fits nowhere"
    waiting, huge = live.stdout.split("\n\n")
    # The live metric decided: the lowest utilization wins, nodes without a value are excluded.
    assert waiting.startswith(f"pod {ns}/waiting-0: placed on kwok-node-00000 ")
    assert "filtered by Metric/utilization: node(s) had no value for utilization" in waiting
    assert huge.startswith(f"pod {ns}/huge-0: unschedulable: 0/")
