"""Shadow mode's placement outcomes beside the real kube-scheduler on the local control plane.

default-scheduler binds a pod to the node it prefers (a preferred node affinity); a shadow
ksched, scoring by a node annotation whose filter line is 0.8, would rather have chosen the
cooler node. The preferred node then heats over the line. Once the horizon ends the shadow's
report must say that default-scheduler's placement went hot, count its hot node-minutes, and
estimate that ksched's choice (with the pod's usage added) stayed cool: a positive number of
hot node-minutes avoided, the same from ``/shadow``, ``ksched shadow report`` and the
report of its ``shadow.log``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ksched.cluster import local
from ksched.commands.shadow import report_from_log
from ksched.loop.client import MERGE_PATCH, Kube
from tests.integration.helpers import Namespaces, Obj, create, ksched, make_pod, pods_in, wait_for

pytestmark = pytest.mark.cluster

HEAT = "ksched.io/outcomes-heat"
# The node default-scheduler prefers, warm but under the line; and a cool one.
PREFERRED, COOL = "kwok-outcomes-0", "kwok-outcomes-1"
HORIZON_S = 8


def _nodes() -> list[Obj]:
    nodes = local.fake_nodes(2, 1)["items"]
    for node, (name, heat) in zip(nodes, ((PREFERRED, "0.6"), (COOL, "0.2")), strict=True):
        node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = name
        node["metadata"]["labels"]["ksched-outcomes"] = "pair"
        node["metadata"]["annotations"][HEAT] = heat
    return nodes


def _affinity() -> dict[str, object]:
    """Either node of the pair, and PREFERRED if default-scheduler can."""
    pair = {"matchExpressions": [{"key": "ksched-outcomes", "operator": "In", "values": ["pair"]}]}
    preferred = {
        "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [PREFERRED]}]
    }
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [pair]},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": preferred}],
        }
    }


def _ready(kube: Kube) -> bool:
    nodes = {n["metadata"]["name"]: n for n in kube.request("GET", "/api/v1/nodes").json()["items"]}
    for name in (PREFERRED, COOL):
        node = nodes.get(name)
        if node is None or node["spec"].get("taints"):
            return False
        if {c["type"]: c["status"] for c in node["status"].get("conditions") or []}.get("Ready") != "True":
            return False
    return True


def test_shadow_reports_hot_node_minutes_default_scheduler_led_to_and_ksched_would_have_avoided(
    cluster: local.ClusterState, kube: Kube, tmp_path: Path, namespace: Namespaces
) -> None:
    ns = namespace("outcomes")
    web = make_pod("web", ns, "100m", "64Mi", affinity=_affinity())
    web["spec"]["schedulerName"] = "default-scheduler"
    log = tmp_path / "shadow.jsonl"
    config = {
        "metrics": [
            {
                "name": "heat",
                "source": "annotation",
                "annotation": HEAT,
                "filter": {"above": 0.8},
                "prefer": "lower",
                "weight": 10,
                "estimate": {"resource": "cpu"},
            }
        ],
        "shadow": {"enabled": True, "namespaces": [ns], "log": str(log)},
        # An annotation has no window: the horizon is the margin.
        "outcomes": {"margin": f"{HORIZON_S}s", "interval": "1s"},
    }
    nodes = _nodes()
    try:
        create(kube, nodes)
        assert wait_for(lambda: _ready(kube), 30), "the nodes never became Ready"
        with ksched(cluster, tmp_path, "shadow-outcomes", {}, **config) as k:
            assert wait_for(lambda: k.get("/readyz")[0] == 200, 30), k.output()
            create(kube, [web])
            bound = lambda: {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods_in(kube, ns)}  # noqa: E731
            assert wait_for(lambda: bound().get("web"), 30), bound()
            assert bound()["web"] == PREFERRED, "default-scheduler did not take its preferred node"
            shadow = lambda: json.loads(k.get("/shadow")[1])  # noqa: E731
            assert wait_for(lambda: shadow()["total"] == 1, 30), k.output()
            # The preferred node heats over the line after the placement.
            kube.request(
                "PATCH",
                f"/api/v1/nodes/{PREFERRED}",
                body={"metadata": {"annotations": {HEAT: "0.95"}}},
                content_type=MERGE_PATCH,
            )
            assert wait_for(lambda: shadow()["outcomes"]["judged"] == 1, 3 * HORIZON_S + 10), k.output()
            report = shadow()
            text = subprocess.run(
                [
                    *(sys.executable, "-m", "ksched.commands.cli", "shadow", "report"),
                    *("--address", f"http://127.0.0.1:{k.port}"),
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            metrics = k.get("/metrics")[1]
        print(f"\n{text}")

        decision = report["recent"][0]
        assert (decision["node"], decision["outcome"], decision["ksched_node"]) == (PREFERRED, "other", COOL)
        o = report["outcomes"]
        assert o["counts"]["went_hot"] == 1, o
        assert 0 < o["hotNodeMinutes"] <= HORIZON_S / 60 + 1e-6, o
        assert o["kschedCountsEstimated"]["stayed_cool"] == 1, o
        assert o["kschedHotNodeMinutesEstimated"] == 0.0, o
        assert o["hotNodeMinutesAvoidedEstimated"] == pytest.approx(o["hotNodeMinutes"]), o
        assert o["hotNodeMinutesAvoidedEstimated"] > 0, o
        assert (
            f"hot node-minutes avoided (estimated):                 {o['hotNodeMinutesAvoidedEstimated']:.1f}"
            in text
        )
        judged = [
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("ksched_placements_judged_total{")
            and 'scheduler="other"' in line
            and 'outcome="went_hot"' in line
        ]
        assert judged == [1.0], judged
        # The log holds the decision and its verdict: a report from it computes the same.
        assert report_from_log(log, keep=1000)["outcomes"] == o
    finally:
        for node in nodes:
            kube.request("DELETE", f"/api/v1/nodes/{node['metadata']['name']}")
