"""``source: metrics-server`` against the real metrics-server of the load simulation: the
source reads what ``kubectl top nodes`` reads, and ``ksched run`` filters by it."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ksched.cluster import load, local
from ksched.cluster.build import BuildError, missing_binaries
from ksched.cluster.load import LoadSimulation, UsageProfile
from ksched.config import MetricConfig
from ksched.loop.client import Kube, load_configuration
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.metrics.metrics_server import MetricsServerSource
from ksched.loop.mirror.slim import slim_node
from ksched.loop.mirror.state import ClusterState
from tests.integration.helpers import create, ksched, make_pod, unavailable, wait_for

pytestmark = pytest.mark.cluster

# Node 0 has 4 CPUs, nodes 1 and 2 have 8, node 3 4 (local.fake_nodes).
FLAT_NODE, IDLE_NODE, BUSY_NODE, EMPTY_NODE = (f"kwok-node-{i:05d}" for i in range(4))
SYSTEM_CPU = load.NODE_SYSTEM_CPU_CORES
TOLERANCE = 0.05
# A flat 1-CPU pod at half its request puts node 0 at (0.5 + system) / 4 = 0.1375.
FLAT_UTILISATION = (0.5 + SYSTEM_CPU) / 4
THRESHOLD = 0.1


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[local.ClusterState, Kube]]:
    """Four nodes with the load simulation on: a pod using half of its 1 CPU on node 0, one
    using its 2 CPUs on node 2, none on nodes 1 and 3."""
    if shutil.which("go") is None and missing_binaries(with_helm=False, with_metrics_server=True):
        unavailable("Go is not installed and no cached binaries exist")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KSCHED_CLUSTER_DIR", str(tmp_path_factory.mktemp("metrics-server-source")))
        try:
            state = local.up(
                nodes=4,
                zones=1,
                load_simulation=LoadSimulation(scrape_interval_s=1.0, metric_resolution_s=10),
            )
        except (BuildError, local.ClusterError) as err:
            unavailable(str(err))
            raise
        try:
            kube = Kube(load_configuration(state.kubeconfig, 4))
            flat = make_pod("flat", "default", cpu="1", memory="1Gi", nodeName=FLAT_NODE)
            flat["metadata"]["annotations"] = load.usage_annotations(UsageProfile(base=0.5))
            create(kube, [flat, make_pod("busy", "default", cpu="2", memory="1Gi", nodeName=BUSY_NODE)])
            yield state, kube
        finally:
            local.down()


def test_the_source_gives_each_nodes_usage_over_its_allocatable(
    simulated: tuple[local.ClusterState, Kube],
) -> None:
    _, kube = simulated
    m = MetricConfig(name="cpu_usage", source="metrics-server", resource="cpu", max_age_s=60)
    nodes = [slim_node(n) for n in kube.request("GET", "/api/v1/nodes").json()["items"]]
    state = ClusterState((m,))
    for n in nodes:
        state.on_node("ADDED", n, None)
    store = MetricStore([m], None, None, lambda: nodes, MetricsServerSource(kube))
    # Each node's usage over its allocatable. A node reads part of a pod's usage until
    # metrics-server's window (two scrapes) starts after the pod did, and the pods do not
    # start in the same second: wait for every node, not only the first.
    want = {FLAT_NODE: FLAT_UTILISATION, BUSY_NODE: (2 + SYSTEM_CPU) / 8, EMPTY_NODE: SYSTEM_CPU / 4}

    def values() -> dict[str, float]:
        store.refresh(m)
        sample = store.cache.get(m.name)
        return {} if sample is None else dict(sample.values)

    def settled() -> bool:
        got = values()
        return all(node in got and abs(got[node] - v) < v * TOLERANCE for node, v in want.items())

    assert wait_for(settled, timeout=90, interval=2), (store.state[m.name], values(), want)
    sample = store.cache[m.name]
    assert set(sample.values) == {FLAT_NODE, IDLE_NODE, BUSY_NODE, EMPTY_NODE}
    # Its timestamp is the scrape's (within the resolution and then some), its window the rate's.
    assert time.time() - sample.sampled_at < 60 and sample.window_s is not None and sample.window_s > 0
    state.sync()
    matrix = store.matrix(state.snapshot())
    assert matrix.degraded == [] and [c.name for c in matrix.metrics] == ["cpu_usage"]


def test_ksched_run_filters_nodes_by_metrics_server_usage(
    simulated: tuple[local.ClusterState, Kube], tmp_path: Path
) -> None:
    cluster, kube = simulated
    metric = {
        "name": "cpu_usage",
        "source": "metrics-server",
        "resource": "cpu",
        "filter": {"above": THRESHOLD},
        "refresh": {"min": "1s", "max": "2s"},
    }
    hot = make_pod("pinned-hot", "default", nodeSelector={"kubernetes.io/hostname": FLAT_NODE})
    cool = make_pod("pinned-cool", "default", nodeSelector={"kubernetes.io/hostname": EMPTY_NODE})
    with ksched(cluster, tmp_path, "ms", {"leaderElect": False}, metrics=[metric]) as k:
        assert wait_for(lambda: "1 live metric(s) fresh" in k.get("/readyz")[1], 90), k.get("/readyz")[1]
        create(kube, [hot, cool])

        def node_of(name: str) -> str | None:
            return (
                kube.request("GET", f"/api/v1/namespaces/default/pods/{name}").json()["spec"].get("nodeName")
            )

        assert wait_for(lambda: node_of("pinned-cool") == EMPTY_NODE, 30), k.output()

        def refused() -> str:
            pod = kube.request("GET", "/api/v1/namespaces/default/pods/pinned-hot").json()
            conditions = (pod.get("status") or {}).get("conditions") or []
            return next((c.get("message", "") for c in conditions if c.get("type") == "PodScheduled"), "")

        assert wait_for(lambda: "cpu_usage" in refused(), 30), (refused(), k.output())
        assert node_of("pinned-hot") is None, "node 0 uses 0.1375 of its CPUs, over the 0.1 threshold"
