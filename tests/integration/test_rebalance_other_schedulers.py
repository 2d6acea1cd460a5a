"""Rebalancing default-scheduler's pods on the local control plane (``rebalance.otherSchedulers``
with steering): kube-scheduler, not ksched, places the replacement, so ksched evicts only once
the hot source carries its ``PreferNoSchedule`` mark.

Four open nodes (4, 8, 8 and 4 CPUs), the load simulation scraped every second. A ReplicaSet
of two default-scheduler pods, each using 1.7 of its 1 CPU request, is placed on the first
4-CPU node while it is the only node open: (3.4 + system) / 4, over the 0.7 line. The other
nodes are then opened, and ksched starts with steering and the rebalancer.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from ksched.cluster import load, local
from ksched.cluster.build import BuildError, missing_binaries
from ksched.cluster.load import LoadSimulation, UsageProfile
from ksched.loop.client import Kube, load_configuration
from tests.integration.helpers import (
    FAST_LEASE,
    Obj,
    create,
    ksched,
    make_pod,
    pods_in,
    unavailable,
    wait_for,
)
from tests.integration.test_rebalance import (
    CPU_METRIC,
    HIGH,
    REBALANCE,
    SCRAPE_S,
    Cluster,
    bound,
    cordon,
    events,
    utilisation,
)

pytestmark = pytest.mark.cluster

NODES = tuple(f"kwok-node-{i:05d}" for i in range(4))
SOURCE = NODES[0]
MARK = "ksched.io/hot"
NAMESPACE = "rebalance-others"
# Each pod uses 1.7 times its 1 CPU request from the start: two make a 4-CPU node hot.
HEAVY = UsageProfile(base=1.7)
EVICTION_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[local.ClusterState, Kube]]:
    """The control plane with kube-scheduler, the workload controllers and the load simulation."""
    if shutil.which("go") is None and missing_binaries(with_helm=False, with_metrics_server=True):
        unavailable("Go is not installed and no cached binaries exist")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KSCHED_CLUSTER_DIR", str(tmp_path_factory.mktemp("rebalance-others")))
        try:
            state = local.up(
                nodes=len(NODES),
                zones=1,
                with_scheduler=True,
                with_controllers=True,
                load_simulation=LoadSimulation(scrape_interval_s=SCRAPE_S, metric_resolution_s=10),
            )
        except (BuildError, local.ClusterError) as err:
            unavailable(str(err))
            raise
        try:
            yield state, Kube(load_configuration(state.kubeconfig, 8))
        finally:
            local.down()


def replica_set(name: str) -> Obj:
    """Two default-scheduler pods of ``HEAVY`` usage (no schedulerName: kube-scheduler's)."""
    template = make_pod(name, NAMESPACE, cpu="1", memory="256Mi")
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": load.usage_annotations(HEAVY)},
                "spec": {k: v for k, v in template["spec"].items() if k != "schedulerName"},
            },
        },
    }


def marked(kube: Kube) -> set[str]:
    return {
        n["metadata"]["name"]
        for n in kube.request("GET", "/api/v1/nodes").json()["items"]
        if any(
            t.get("key") == MARK and t.get("effect") == "PreferNoSchedule"
            for t in n["spec"].get("taints") or []
        )
    }


def test_a_default_scheduler_pod_leaves_a_marked_hot_node_and_kube_scheduler_places_its_replacement_elsewhere(
    control_plane: tuple[local.ClusterState, Kube], tmp_path: Path
) -> None:
    state, api = control_plane
    create(api, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}])
    cordon(api, (SOURCE,))
    r = api.request("POST", f"/apis/apps/v1/namespaces/{NAMESPACE}/replicasets", body=replica_set("heavy"))
    assert r.ok, r.data[:300]
    assert wait_for(lambda: len(bound(api, NAMESPACE)) == 2, 30), pods_in(api, NAMESPACE)
    before = bound(api, NAMESPACE)
    assert {p["spec"]["nodeName"] for p in before.values()} == {SOURCE}
    assert all(p["spec"].get("schedulerName") == "default-scheduler" for p in before.values())
    cordon(api, NODES)
    cluster = Cluster(state, api)
    assert wait_for(lambda: utilisation(cluster).get(SOURCE, 0.0) > HIGH, 30), utilisation(cluster)

    config = {
        "metrics": [CPU_METRIC],
        "prometheus": {"url": state.prometheus, "timeout": "1s"},
        "steering": {"enabled": True, "interval": "1s"},
        "rebalance": {**REBALANCE, "otherSchedulers": {"schedulerNames": ["default-scheduler"]}},
    }
    with ksched(state, tmp_path, "rebalancer", {"leaderElect": True, **FAST_LEASE}, **config) as k:
        assert wait_for(lambda: SOURCE in marked(api), 30), (marked(api), k.output())
        moved = wait_for(
            lambda: [
                e for p in before.values() for e in events(api, "Rebalanced", "Pod", p["metadata"]["name"])
            ],
            EVICTION_TIMEOUT_S,
        )
        assert moved, (utilisation(cluster), k.output())

        def replacement() -> list[Obj]:
            return [p for uid, p in bound(api, NAMESPACE).items() if uid not in before]

        new = wait_for(replacement, 30)
        assert new, (pods_in(api, NAMESPACE), k.output())
        [pod] = new
        print(
            f"\nother schedulers: evicted from {SOURCE} (marked), the ReplicaSet's replacement "
            f"bound by kube-scheduler on {pod['spec']['nodeName']}; note: {moved[0].get('note')}"
        )
        assert pod["spec"]["nodeName"] != SOURCE
        assert pod["spec"].get("schedulerName") == "default-scheduler"
        assert len(set(before) - set(bound(api, NAMESPACE))) == 1, "exactly one pod evicted"
        assert k.metric("ksched_rebalance_evictions_total") == 1, k.output()
        assert wait_for(
            lambda: (
                k.metric('ksched_rebalance_replacements_total{outcome="on_target"}')
                + k.metric('ksched_rebalance_replacements_total{outcome="elsewhere"}')
                == 1
            ),
            10,
        ), k.output()
        assert k.metric('ksched_rebalance_replacements_total{outcome="on_source"}') == 0, k.output()
        status = json.loads(k.get("/status")[1])
        assert status["rebalance"]["otherSchedulers"]["schedulerNames"] == ["default-scheduler"], status
