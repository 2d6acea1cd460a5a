"""Metric-aware scheduling on the local control plane with the real Prometheus.

The session's Prometheus scrapes ``exporter.py`` every second:
``node_test_utilization`` is 0.25 on kwok-node-00000, 0.75 on -00001 and 0.5
on -00002, and absent elsewhere.
"""

from __future__ import annotations

import collections
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from ksched.cluster import local
from ksched.commands.cli import main
from ksched.loop.client import Kube
from tests.integration.exporter import NODE_VALUES, utilization_metric
from tests.integration.helpers import (
    Namespaces,
    create,
    events_for,
    ksched,
    make_pod,
    pods_in,
    scheduled_events,
    wait_for,
)

pytestmark = pytest.mark.cluster

NO_LEADER = {"leaderElect": False}
# Quick refreshes so outages are noticed within a second or two.
REFRESH = {"min": "500ms", "max": "1s"}


def utilization(**extra: Any) -> dict[str, Any]:
    return utilization_metric(**{"maxAge": "30s", "refresh": REFRESH, **extra})


def bound_nodes(kube: Kube, ns: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods_in(kube, ns)}


def test_pod_goes_to_the_cheapest_node_by_price_annotation(
    cluster: local.ClusterState,
    kube: Kube,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    namespace: Namespaces,
) -> None:
    ns = namespace("metrics-price")
    prices = {"kwok-node-00003": "0.90", "kwok-node-00004": "0.12", "kwok-node-00005": "0.40"}
    assert (
        main(["annotate", "--kubeconfig", cluster.kubeconfig, *(f"{n}={p}" for n, p in prices.items())]) == 0
    )
    listed = dict(line.split() for line in capsys.readouterr().out.splitlines()[1:])
    assert {n: listed[n] for n in prices} == prices and listed["kwok-node-00000"] == "-"
    price = {"name": "price", "source": "annotation", "annotation": "ksched.io/price", "prefer": "lower"}
    try:
        with ksched(
            cluster, tmp_path, "price", NO_LEADER, metrics=[{**price, "missing": "exclude", "weight": 10}]
        ) as k:
            create(kube, [make_pod("cheap-0", ns)])
            assert wait_for(lambda: bound_nodes(kube, ns).get("cheap-0"), 30) == "kwok-node-00004", k.output()
    finally:
        main(["annotate", "--kubeconfig", cluster.kubeconfig, *(f"{n}-" for n in prices)])


def test_pod_goes_to_the_lowest_prometheus_value(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("metrics-prom")
    best = min(NODE_VALUES, key=NODE_VALUES.__getitem__)
    config = {"metrics": [utilization()], "prometheus": {"url": cluster.prometheus}}
    with ksched(cluster, tmp_path, "prom", NO_LEADER, **config) as k:
        assert wait_for(lambda: "fresh" in k.get("/readyz")[1], 30), k.get("/readyz")
        create(kube, [make_pod("lowest-0", ns)])
        assert wait_for(lambda: bound_nodes(kube, ns).get("lowest-0"), 30) == best, k.output()
        # The Scheduled event is written after the bind, not with it.
        (event,) = wait_for(lambda: scheduled_events(kube, ns), 10)
        assert "degraded" not in event["note"]


@pytest.mark.parametrize("herd", [False, True], ids=["without-herd-estimate", "with-herd-estimate"])
def test_identical_pods_do_not_all_chase_the_idle_node(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, herd: bool, namespace: Namespaces
) -> None:
    ns = namespace(f"metrics-herd-{'on' if herd else 'off'}")
    metric = utilization(**({"herdEstimate": {"resource": "cpu", "factor": 1.0}} if herd else {}))
    config = {"metrics": [metric], "prometheus": {"url": cluster.prometheus}}
    pods = [make_pod(f"same-{i}", ns, "100m", "64Mi") for i in range(50)]
    with ksched(cluster, tmp_path, f"herd-{herd}", NO_LEADER, **config) as k:
        assert wait_for(lambda: "fresh" in k.get("/readyz")[1], 30), k.get("/readyz")
        create(kube, pods)
        assert wait_for(lambda: all(bound_nodes(kube, ns).values()) and len(bound_nodes(kube, ns)) == 50, 60)
        spread = collections.Counter(bound_nodes(kube, ns).values())
        print(f"\n50 identical pods, herd estimate {'on' if herd else 'off'}: {dict(sorted(spread.items()))}")
        idle = min(NODE_VALUES, key=NODE_VALUES.__getitem__)
        if herd:
            assert spread[idle] < 50 and len(spread) > 1, spread
        else:
            assert spread[idle] > 25, "without the estimate the idle-looking node takes most"


def test_prometheus_outage_degrades_then_recovers(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("metrics-outage")
    config = {"metrics": [utilization()], "prometheus": {"url": cluster.prometheus, "timeout": "1s"}}
    with ksched(cluster, tmp_path, "outage", NO_LEADER, **config) as k:
        assert wait_for(lambda: "fresh" in k.get("/readyz")[1], 30), k.get("/readyz")
        os.kill(cluster.pids["prometheus"], signal.SIGSTOP)  # a hung Prometheus: queries time out
        stopped = time.monotonic()
        try:
            assert wait_for(lambda: "degraded" in k.get("/readyz")[1], 15), k.get("/readyz")
            create(kube, [make_pod("during-0", ns)])
            assert wait_for(lambda: bound_nodes(kube, ns).get("during-0"), 30), k.output()
            print(
                f"\nfirst degraded bind {time.monotonic() - stopped:.1f} s after Prometheus stopped answering"
            )
            assert wait_for(lambda: scheduled_events(kube, ns), 10)
            (event,) = scheduled_events(kube, ns)
            assert "(degraded: utilization:" in event["note"], event["note"]
            assert k.metric('ksched_degraded{reason="metric_unavailable"}') == 1
            assert "degraded" in k.get("/readyz")[1] and k.get("/readyz")[0] == 200
        finally:
            os.kill(cluster.pids["prometheus"], signal.SIGCONT)
        assert wait_for(lambda: "fresh" in k.get("/readyz")[1], 30), k.get("/readyz")
        create(kube, [make_pod("after-0", ns)])
        best = min(NODE_VALUES, key=NODE_VALUES.__getitem__)
        assert wait_for(lambda: bound_nodes(kube, ns).get("after-0"), 30) == best
        after = wait_for(lambda: events_for(kube, ns, "after-0", "Scheduled"), 10)
        assert after and "degraded" not in after[0]["note"]


@pytest.mark.parametrize(
    ("query", "logged"),
    [
        ("this is not promql(", "utilization: query failed"),
        ('"a string"', "utilization: the query does not return an instant vector"),
        (
            "node_test_utilization / 0 * 0",
            "utilization: 0 series match no node (label 'node'); 3 series have no finite value",
        ),
    ],
    ids=["bad-promql", "string-result", "nan-values"],
)
def test_bad_metric_answers_never_stop_scheduling(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, query: str, logged: str, namespace: Namespaces
) -> None:
    ns = namespace(f"metrics-bad-{len(query)}")
    metric = utilization(query=query, missing="neutral")
    config = {"metrics": [metric], "prometheus": {"url": cluster.prometheus}}
    with ksched(cluster, tmp_path, "bad", NO_LEADER, **config) as k:
        create(kube, [make_pod("still-0", ns)])
        assert wait_for(lambda: bound_nodes(kube, ns).get("still-0"), 30), k.output()
        # A bad answer drops the metric (degraded) rather than making every node "missing".
        assert k.metric('ksched_degraded{reason="metric_unavailable"}') == 1
        assert wait_for(lambda: logged in k.output(), 15), k.output()
        (event,) = wait_for(lambda: events_for(kube, ns, "still-0", "Scheduled"), 10)
        assert "(degraded: utilization:" in event["note"]
