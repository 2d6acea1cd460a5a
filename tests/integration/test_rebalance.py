"""The rebalancer on the local control plane with the load simulation: Deployments whose
pods KWOK runs at the usage their profiles say, Prometheus recording each node's CPU
utilisation, and ksched judging nodes hot by that metric.

Each test has its own group of four nodes (the others are cordoned while it runs, so
neither a placement nor a proof can use them, and a node an earlier test left busy is out
of the way) and lays it out the same way, so that exactly one move cools the hot node:

- HOT (4 CPUs): ``steady-hot`` at half its 1 CPU, and ``shift``, whose usage steps from
  half of its 1 CPU to 3 CPUs :data:`SHIFT_S` seconds after it starts: (3.5 + system) / 4,
  about 0.89, over the 0.7 line;
- TARGET (8 CPUs): ``steady-target`` at half its 1 CPU; with ``shift``'s 3 CPUs it would be
  at about 0.44, the only node below 0.7 after the move;
- BUSY (8 CPUs): ``busy`` using its 4 CPUs (about 0.51; 0.88 with ``shift``);
- SMALL (4 CPUs): ``steady-small`` at half its 1 CPU (about 0.14; 0.89 with ``shift``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ksched.cluster import load, local
from ksched.cluster.build import BuildError, missing_binaries
from ksched.cluster.load import LoadSimulation, UsageProfile
from ksched.loop.client import Kube, load_configuration
from tests.integration.helpers import (
    FAST_LEASE,
    Ksched,
    Obj,
    create,
    ksched,
    make_pod,
    pods_in,
    refused,
    unavailable,
    wait_for,
)

pytestmark = pytest.mark.cluster

SCRAPE_S = 1.0
# local.fake_nodes cycles 4, 8, 8 and 4 CPUs: every group of four has the same shape.
GROUP = 4
TESTS = 5
HIGH = 0.7
SHIFT_S = 8
# The usage step of scenario (e), load-shift: from half the request to three times it.
SHIFT = UsageProfile(base=0.5, burst_every_s=10**6, burst_for_s=10**6 - SHIFT_S, burst_to=3.0)
STEADY = UsageProfile(base=0.5)
FULL = UsageProfile(base=1.0)
INTERVAL_S = 2
# Long enough for a node judged hot to be moved from several times over, were it to be.
SETTLE_S = 4 * INTERVAL_S
# From the shift to the eviction: the rate's window, the hot samples, a look, and margin.
EVICTION_TIMEOUT_S = SHIFT_S + 40
CPU_METRIC = {
    "name": "cpu",
    "source": "prometheus",
    "query": "node:node_cpu_utilisation:ratio",
    "nodeLabel": "node",
    "prefer": "lower",
    "normalization": {"range": [0, 1]},
    "filter": {"above": HIGH},
    "maxAge": "5s",
    "refresh": {"min": "1s", "max": "1s"},
    "estimate": {
        "resource": "cpu",
        "window": "6s",
        "podQuery": "sum by (namespace, pod) (irate(pod_cpu_usage_seconds_total[5s]))",
    },
}
REBALANCE = {
    "enabled": True,
    "interval": f"{INTERVAL_S}s",
    "hotSamples": 2,
    "minPodAge": "0s",
    "reservationTimeout": "30s",
}


@dataclass(frozen=True)
class Cluster:
    state: local.ClusterState
    kube: Kube


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One node group per test, the workload controllers, and the load simulation scraped every second."""
    if shutil.which("go") is None and missing_binaries(with_helm=False, with_metrics_server=True):
        unavailable("Go is not installed and no cached binaries exist")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KSCHED_CLUSTER_DIR", str(tmp_path_factory.mktemp("rebalance")))
        try:
            state = local.up(
                nodes=GROUP * TESTS,
                zones=1,
                with_controllers=True,
                load_simulation=LoadSimulation(scrape_interval_s=SCRAPE_S, metric_resolution_s=10),
            )
        except (BuildError, local.ClusterError) as err:
            unavailable(str(err))
            raise
        try:
            yield Cluster(state, Kube(load_configuration(state.kubeconfig, 8)))
        finally:
            local.down()


@dataclass(frozen=True)
class Layout:
    """One test's namespace and nodes, laid out as the module says."""

    namespace: str
    hot: str
    target: str
    busy: str
    small: str

    @property
    def nodes(self) -> tuple[str, ...]:
        return (self.hot, self.target, self.busy, self.small)


def deployment(name: str, ns: str, cpu: str, profile: UsageProfile) -> Obj:
    template = make_pod(name, ns, cpu=cpu, memory="256Mi")
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": load.usage_annotations(profile)},
                "spec": template["spec"],
            },
        },
    }


def cordon(kube: Kube, open_nodes: tuple[str, ...]) -> None:
    """Mark every node but ``open_nodes`` unschedulable (and those schedulable)."""
    for node in kube.request("GET", "/api/v1/nodes").json()["items"]:
        name = node["metadata"]["name"]
        closed = name not in open_nodes
        if bool(node["spec"].get("unschedulable")) != closed:
            r = kube.request(
                "PATCH",
                f"/api/v1/nodes/{name}",
                body={"spec": {"unschedulable": closed}},
                content_type="application/merge-patch+json",
            )
            assert r.ok, r.data[:300]


def bound(kube: Kube, ns: str) -> dict[str, Obj]:
    """The namespace's running pods bound to a node, by uid."""
    return {
        p["metadata"]["uid"]: p
        for p in pods_in(kube, ns)
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    }


def app(pod: Obj) -> str:
    return str(pod["metadata"]["labels"]["app"])


def placements(pods: dict[str, Obj]) -> dict[str, tuple[str, str]]:
    """uid: (workload, node)."""
    return {uid: (app(p), p["spec"]["nodeName"]) for uid, p in pods.items()}


def utilisation(cluster: Cluster) -> dict[str, float]:
    promql = urllib.parse.urlencode({"query": "node:node_cpu_utilisation:ratio"})
    with urllib.request.urlopen(f"{cluster.state.prometheus}/api/v1/query?{promql}", timeout=5) as r:
        result = json.loads(r.read())["data"]["result"]
    return {s["metric"]["node"]: float(s["value"][1]) for s in result}


def events(kube: Kube, reason: str, kind: str, name: str) -> list[Obj]:
    """Every namespace's events with this reason about the object ``kind``/``name``."""
    items: list[Obj] = kube.request("GET", "/apis/events.k8s.io/v1/events").json()["items"]
    return [
        e
        for e in items
        if e.get("reason") == reason and e["regarding"].get("kind") == kind and e["regarding"]["name"] == name
    ]


@pytest.fixture
def layout(simulated: Cluster, request: pytest.FixtureRequest) -> Iterator[Callable[[int, str], Layout]]:
    """``layout(group, ns)``: the namespace with its Deployments placed on node group
    ``group`` (the other nodes cordoned), while a ksched the test started schedules them.
    Afterwards the Deployments and their pods are deleted and every node is uncordoned."""
    kube = simulated.kube
    made: list[str] = []

    def place(ns: str, node: str, workloads: list[Obj]) -> None:
        cordon(kube, (node,))
        for d in workloads:
            r = kube.request("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body=d)
            assert r.ok, r.data[:300]
        names = {d["metadata"]["name"] for d in workloads}
        assert wait_for(
            lambda: {app(p) for p in bound(kube, ns).values() if p["spec"]["nodeName"] == node} >= names, 30
        ), (node, pods_in(kube, ns))

    def make(group: int, ns: str) -> Layout:
        lay = Layout(ns, *(f"kwok-node-{group * GROUP + i:05d}" for i in range(GROUP)))
        create(kube, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}])
        made.append(ns)
        # One node open at a time, so each Deployment's pod lands where the layout says;
        # the hot node last, so that the shift comes after the others are placed.
        place(ns, lay.target, [deployment("steady-target", ns, "1", STEADY)])
        place(ns, lay.busy, [deployment("busy", ns, "4", FULL)])
        place(ns, lay.small, [deployment("steady-small", ns, "1", STEADY)])
        place(ns, lay.hot, [deployment("steady-hot", ns, "1", STEADY), deployment("shift", ns, "1", SHIFT)])
        cordon(kube, lay.nodes)
        return lay

    yield make
    for ns in made:
        for collection in (
            "apis/apps/v1/namespaces/{}/deployments",
            "apis/policy/v1/namespaces/{}/poddisruptionbudgets",
        ):
            kube.request("DELETE", "/" + collection.format(ns))
        kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods", query={"gracePeriodSeconds": 0})
    wait_for(lambda: not any(pods_in(kube, ns) for ns in made), 30)
    cordon(kube, tuple(n["metadata"]["name"] for n in kube.request("GET", "/api/v1/nodes").json()["items"]))


def config(cluster: Cluster, **rebalance: Any) -> dict[str, Any]:
    return {
        "metrics": [CPU_METRIC],
        "prometheus": {"url": cluster.state.prometheus, "timeout": "1s"},
        "rebalance": {**REBALANCE, **rebalance},
    }


def leader(
    cluster: Cluster, tmp_path: Path, identity: str, **cfg: Any
) -> contextlib.AbstractContextManager[Ksched]:
    return ksched(cluster.state, tmp_path, identity, {"leaderElect": True, **FAST_LEASE}, **cfg)


def wait_hot(cluster: Cluster, node: str) -> None:
    """Until Prometheus records ``node`` over the line."""
    assert wait_for(lambda: utilisation(cluster).get(node, 0) > HIGH, EVICTION_TIMEOUT_S), utilisation(
        cluster
    )


def assert_moved_shift_to_target(
    cluster: Cluster, k: Ksched, lay: Layout, pods_before: dict[str, Obj]
) -> None:
    """``shift`` evicted once and re-created on the target; no other pod moved; the
    eviction's events on the pod and on the hot node. ``pods_before``: the bound pods read
    before the rebalancer could move one, since by the time this runs ``shift`` may be gone."""
    kube, ns = cluster.kube, lay.namespace
    before = placements(pods_before)
    (shift_uid,) = [uid for uid, (workload, _) in before.items() if workload == "shift"]
    shift_name = pods_before[shift_uid]["metadata"]["name"]
    moved = wait_for(lambda: events(kube, "Rebalanced", "Pod", shift_name), EVICTION_TIMEOUT_S)
    assert moved, (utilisation(cluster), k.output())
    note = moved[0].get("note", "")
    assert lay.target in note and "cpu" in note, note

    def replacement() -> list[tuple[str, str]]:
        now = placements(bound(kube, ns))
        return [now[uid] for uid in now.keys() - before.keys()]

    assert wait_for(replacement, 30), (pods_in(kube, ns), k.output())
    time.sleep(SETTLE_S)
    after = placements(bound(kube, ns))
    assert before.keys() - after.keys() == {shift_uid}, "exactly one pod evicted"
    assert [after[uid] for uid in after.keys() - before.keys()] == [("shift", lay.target)], after
    assert {uid: after[uid] for uid in before.keys() & after.keys()} == {
        uid: v for uid, v in before.items() if uid != shift_uid
    }, "no other pod moved"
    assert events(kube, "Rebalanced", "Node", lay.hot), k.output()
    assert k.metric("ksched_rebalance_evictions_total") == 1, k.output()
    assert k.metric('ksched_rebalance_replacements_total{outcome="on_target"}') == 1, k.output()


def assert_dry_run_proposes(cluster: Cluster, config_path: Path, lay: Layout) -> None:
    """``ksched rebalance --dry-run`` proposes moving ``shift`` from the hot node to the
    target, and evicts nothing; its table is printed (``pytest -s``) for the docs."""
    command = [
        *(sys.executable, "-m", "ksched.commands.cli", "rebalance", "--dry-run"),
        *("--config", str(config_path), "--kubeconfig", cluster.state.kubeconfig),
    ]
    dry = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120, check=False)
    assert dry.returncode == 0, dry.stderr
    proposal = json.loads(dry.stdout)
    assert [h["node"] for h in proposal["hot"]] == [lay.hot], proposal
    assert [
        (m["workload"].split("/")[2].rsplit("-", 1)[0], m["source"], m["target"]) for m in proposal["moves"]
    ] == [("shift", lay.hot, lay.target)], proposal
    table = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert table.returncode == 0, table.stderr
    assert f" -> {lay.target}" in table.stdout, table.stdout
    print(table.stdout)


def test_a_node_made_hot_by_shifting_load_is_cooled_by_one_move_to_the_reserved_node(
    simulated: Cluster, layout: Callable[[int, str], Layout], tmp_path: Path
) -> None:
    with leader(simulated, tmp_path, "rebalancer", **config(simulated)) as k:
        assert wait_for(k.leads, 30), k.output()
        lay = layout(0, "rebalance-cool")
        assert_moved_shift_to_target(simulated, k, lay, bound(simulated.kube, lay.namespace))
        # The move cooled the hot node and heated no other one.
        assert wait_for(lambda: max(utilisation(simulated).get(n, 1.0) for n in lay.nodes) < HIGH, 20), (
            utilisation(simulated)
        )


def test_a_budget_that_allows_no_disruption_blocks_the_move(
    simulated: Cluster, layout: Callable[[int, str], Layout], tmp_path: Path
) -> None:
    kube, ns = simulated.kube, "rebalance-budget"
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "shift", "namespace": ns},
        # Every pod on the hot node: with ``shift`` refused, ``steady-hot`` would be next.
        "spec": {
            "maxUnavailable": 0,
            "selector": {
                "matchExpressions": [{"key": "app", "operator": "In", "values": ["shift", "steady-hot"]}]
            },
        },
    }
    with leader(simulated, tmp_path, "rebalancer", **config(simulated)) as k:
        assert wait_for(k.leads, 30), k.output()
        create(kube, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}])
        r = kube.request("POST", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", body=budget)
        assert r.ok, r.data[:300]
        lay = layout(1, ns)
        before = placements(bound(kube, ns))
        shift = next(p["metadata"]["name"] for p in bound(kube, ns).values() if app(p) == "shift")
        blocked = wait_for(lambda: events(kube, "RebalanceBlocked", "Pod", shift), EVICTION_TIMEOUT_S)
        assert blocked, (utilisation(simulated), k.output())
        assert "disruption budget" in blocked[0].get("note", ""), blocked[0]
        time.sleep(SETTLE_S)
        assert placements(bound(kube, ns)) == before, "no pod evicted"
        assert not events(kube, "Rebalanced", "Pod", shift) and not events(
            kube, "Rebalanced", "Node", lay.hot
        )
        assert k.metric("ksched_rebalance_evictions_total") == 0, k.output()
        assert k.metric("ksched_rebalance_blocked_total") >= 1, k.output()


def test_a_stale_metric_triggers_nothing_until_it_is_fresh_again(
    simulated: Cluster, layout: Callable[[int, str], Layout], tmp_path: Path
) -> None:
    # Ten hot samples in a row (a refresh a second): more than Prometheus gives before it is
    # hung. A rebalancer that counted its looks at the last cached (and then stale) value would
    # get there.
    cfg = config(simulated, hotSamples=10)
    with leader(simulated, tmp_path, "rebalancer", **cfg) as k:
        assert wait_for(k.leads, 30), k.output()
        lay = layout(2, "rebalance-stale")
        pods_before = bound(simulated.kube, lay.namespace)
        before = placements(pods_before)
        try:
            wait_hot(simulated, lay.hot)
            local.signal_component("prometheus", signal.SIGSTOP)
            assert wait_for(lambda: "degraded (cpu" in k.get("/readyz")[1], 20), k.get("/readyz")
            time.sleep(5 * INTERVAL_S)
            assert k.metric("ksched_rebalance_hot_nodes") == 0, k.output()
            assert placements(bound(simulated.kube, lay.namespace)) == before, "nothing evicted"
            assert not events(simulated.kube, "Rebalanced", "Node", lay.hot), k.output()
            assert k.metric("ksched_rebalance_evictions_total") == 0, k.output()
        finally:
            local.signal_component("prometheus", signal.SIGCONT)
        # Fresh again, the node is still hot: the same rebalancer now moves the pod.
        assert_moved_shift_to_target(simulated, k, lay, pods_before)


def test_a_follower_and_a_shadow_evict_nothing_while_a_leader_does(
    simulated: Cluster, layout: Callable[[int, str], Layout], tmp_path: Path
) -> None:
    # The leader schedules with the rebalancer off; a follower (the same lease) and a shadow
    # have it on. Once the leader is gone the follower leads, and it moves the pod.
    off = config(simulated, enabled=False)
    with contextlib.ExitStack() as replicas, contextlib.ExitStack() as first:
        scheduler = first.enter_context(leader(simulated, tmp_path, "leader", **off))
        assert wait_for(scheduler.leads, 30), scheduler.output()
        follower = replicas.enter_context(leader(simulated, tmp_path, "follower", **config(simulated)))
        shadow = replicas.enter_context(
            ksched(
                simulated.state,
                tmp_path,
                "shadow",
                {"leaderElect": False},
                shadow={"enabled": True},
                **config(simulated),
            )
        )
        lay = layout(3, "rebalance-replicas")
        pods_before = bound(simulated.kube, lay.namespace)
        before = placements(pods_before)
        wait_hot(simulated, lay.hot)
        # Both judge the node hot, and the shadow records the move it would have made.
        assert wait_for(lambda: follower.metric("ksched_rebalance_hot_nodes") >= 1, 30), follower.output()
        assert wait_for(lambda: shadow.metric("ksched_rebalance_shadow_moves_total") >= 1, 30), (
            shadow.output()
        )
        time.sleep(SETTLE_S)
        assert not follower.leads()
        assert placements(bound(simulated.kube, lay.namespace)) == before, "nothing evicted"
        assert not events(simulated.kube, "Rebalanced", "Node", lay.hot)
        for k in (follower, shadow):
            assert k.metric("ksched_rebalance_evictions_total") == 0, k.output()
            assert not refused(k.output())
        # The dry run, through the kubeconfig, proposes the move the rebalancer will make.
        assert_dry_run_proposes(simulated, tmp_path / "follower.yaml", lay)
        first.close()
        assert wait_for(follower.leads, 30), follower.output()
        assert_moved_shift_to_target(simulated, follower, lay, pods_before)
        assert shadow.metric("ksched_rebalance_evictions_total") == 0, shadow.output()


# CPU_METRIC's window and maxAge: a pod bound longer ago is no recent one (the learned estimate's
# warm-up set below both).
HORIZON_S = 11


def test_a_new_ksched_learns_a_workload_from_replicas_bound_before_it_started(
    simulated: Cluster, tmp_path: Path
) -> None:
    """A Deployment's replicas placed by one ksched, which then stops; once they are bound longer
    ago than the recent window, a second ksched starts. It never saw them bound, yet it learns
    what they use of their request from the pod usage query (they run at twice it), so a herd of
    that Deployment would count at its own figure rather than at the prior."""
    kube, ns = simulated.kube, "learn-settled"
    nodes = tuple(f"kwok-node-{4 * GROUP + i:05d}" for i in range(GROUP))
    create(kube, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}])
    metric = {**CPU_METRIC, "estimate": {**CPU_METRIC["estimate"], "learn": True, "warmup": "2s"}}
    cfg = {"metrics": [metric], "prometheus": {"url": simulated.state.prometheus, "timeout": "1s"}}
    workload = f"{ns}/Deployment/web"
    try:
        cordon(kube, nodes)
        (tmp_path / "first").mkdir()
        with leader(simulated, tmp_path / "first", "first", **cfg) as first:
            assert wait_for(first.leads, 30), first.output()
            web = deployment("web", ns, "500m", UsageProfile(base=2.0))
            web["spec"]["replicas"] = 3
            r = kube.request("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body=web)
            assert r.ok, r.data[:300]
            assert wait_for(lambda: len(bound(kube, ns)) == 3, 30), (pods_in(kube, ns), first.output())
        time.sleep(HORIZON_S + 2)
        (tmp_path / "second").mkdir()
        with leader(simulated, tmp_path / "second", "second", **cfg) as second:
            assert wait_for(second.leads, 30), second.output()
            triggers = iter(range(100))

            def learned() -> dict[str, Any] | None:
                # A pod to place: a scheduling cycle reads the pod usage query.
                create(kube, [make_pod(f"trigger-{next(triggers)}", ns, "100m", "64Mi")])
                status = json.loads(second.get("/status")[1] or "{}")
                cpu = ((status.get("metrics") or {}).get("learned") or {}).get("cpu") or {}
                return next((w for w in cpu.get("workloads", []) if w["workload"] == workload), None)

            taught = wait_for(learned, 40, 2.0)
            assert taught, second.output()
            assert taught["ratioPods"] == 3, taught
            assert 1.5 < taught["ratio"] < 2.5, taught
    finally:
        kube.request("DELETE", f"/apis/apps/v1/namespaces/{ns}/deployments")
        kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods", query={"gracePeriodSeconds": 0})
        wait_for(lambda: not pods_in(kube, ns), 30)
        cordon(
            kube, tuple(n["metadata"]["name"] for n in kube.request("GET", "/api/v1/nodes").json()["items"])
        )
