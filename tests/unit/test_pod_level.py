"""Gangs, preemption, default spreading and their configuration, through ``Engine.schedule``
(the path ``run``, ``simulate`` and ``explain`` share). Inter-pod affinity and
topology spread themselves are checked against the real kube-scheduler in
``tests/integration/test_differential.py``."""

from __future__ import annotations

from typing import Any

import pytest

from ksched.config import Config, ProfileConfig, parse_config
from ksched.engine import Engine, GangStatus
from ksched.engine.gangs import POD_GROUP_LABEL
from ksched.engine.snapshot import build_snapshot
from ksched.errors import ConfigError
from tests.conftest import node, pod

Obj = dict[str, Any]


def member(name: str, group: str, cpu: str = "1") -> Obj:
    p = pod(name, cpu=cpu)
    p["metadata"]["labels"] = {POD_GROUP_LABEL: group}
    return p


def test_competing_gangs_one_whole_the_other_none() -> None:
    snapshot = build_snapshot([node("n0", cpu="2"), node("n1", cpu="2")], [])
    # Interleaved; room for four members, each gang needs three.
    pods = [member(f"{g}-{i}", g) for i in range(3) for g in ("a", "b")]
    groups = {"default/a": GangStatus(3), "default/b": GangStatus(3)}
    out = {p.pod: p for p in Engine(Config()).schedule(snapshot, pods, groups=groups).placements}
    assert all(out[f"default/a-{i}"].node for i in range(3))
    assert not any(out[f"default/b-{i}"].node for i in range(3))
    assert "minMember 3" in (out["default/b-0"].message or "")


def test_gang_counts_members_already_bound_and_needs_its_pod_group() -> None:
    snapshot = build_snapshot([node("n0", cpu="1")], [])
    pods = [member("a-0", "a")]
    engine = Engine(Config())
    assert (
        engine.schedule(snapshot, pods, groups={"default/a": GangStatus(3, bound=2)}).placements[0].node
        == "n0"
    )
    assert (
        engine.schedule(snapshot, pods, groups={"default/a": GangStatus(3, bound=1)}).placements[0].node
        is None
    )
    missing = engine.schedule(snapshot, pods, groups={}).placements[0]
    assert missing.node is None and missing.message == 'pod group "default/a" not found'
    # Cut short by the decision deadline: retried (not attempted), not reported as short.
    late = engine.schedule(
        snapshot, pods, groups={"default/a": GangStatus(3, bound=1)}, deadline_s=0
    ).placements[0]
    assert not late.attempted and late.message is None


def _priority(p: Obj, value: int, start: str | None = None) -> Obj:
    p["spec"]["priority"] = value
    if start:
        p["status"] = {"startTime": start}
    return p


def test_preemption_picks_the_node_with_the_least_important_victims() -> None:
    nodes = [node("n0", cpu="2"), node("n1", cpu="2")]
    existing = [
        _priority(pod("low", cpu="2", node_name="n0"), 1),
        _priority(pod("mid", cpu="2", node_name="n1"), 50),
    ]
    snapshot = build_snapshot(nodes, existing)
    urgent = _priority(pod("urgent", cpu="1"), 100)
    polite = _priority(pod("polite", cpu="1", preemptionPolicy="Never"), 100)
    out = {p.pod: p for p in Engine(Config()).schedule(snapshot, [urgent, polite]).placements}
    assert out["default/urgent"].nominated_node == "n0"
    assert out["default/urgent"].victims == ("default/low",)
    assert out["default/urgent"].as_json()["victims"] == ["default/low"]
    # A nominating preemption adds nothing to upstream's FailedScheduling text (its
    # PostFilter succeeded); the nomination is the pod's status.nominatedNodeName.
    assert out["default/urgent"].message == "0/2 nodes are available: 2 Insufficient cpu."
    assert out["default/polite"].nominated_node is None and out["default/polite"].victims == ()
    assert out["default/polite"].message == (
        "0/2 nodes are available: 2 Insufficient cpu. no new claims to deallocate, "
        "preemption: not eligible due to preemptionPolicy=Never."
    )
    # Disabled in the profile: nobody preempts.
    config = Config(profiles=(ProfileConfig(preemption=False),))
    assert Engine(config).schedule(snapshot, [urgent]).placements[0].nominated_node is None


def test_nominated_pod_holds_its_room_for_lower_priorities_only() -> None:
    snapshot = build_snapshot([node("n0", cpu="2")], [])
    nominated = _priority(pod("nominee", cpu="2"), 100)
    nominated["status"] = {"nominatedNodeName": "n0"}
    engine = Engine(Config())
    low = _priority(pod("low", cpu="1"), 10)
    assert engine.schedule(snapshot, [low], nominated=[nominated]).placements[0].node is None
    high = _priority(pod("high", cpu="1"), 1000)
    assert engine.schedule(snapshot, [high], nominated=[nominated]).placements[0].node == "n0"


def test_preemption_dry_run_counts_nominated_pods_of_higher_priority() -> None:
    """Upstream's dry run filters with nominated pods too: evicting the 2-cpu pod
    on n0 frees room the 3-cpu nominee holds for pods below it, so a pod below
    the nominee does not preempt there; one above it does."""
    snapshot = build_snapshot([node("n0", cpu="4")], [_priority(pod("low", cpu="2", node_name="n0"), 1)])
    nominee = _priority(pod("nominee", cpu="3"), 500)
    nominee["status"] = {"nominatedNodeName": "n0"}
    engine = Engine(Config())
    below = engine.schedule(snapshot, [_priority(pod("below", cpu="2"), 100)], nominated=[nominee])
    assert below.placements[0].nominated_node is None and below.placements[0].node is None
    above = engine.schedule(snapshot, [_priority(pod("above", cpu="2"), 1000)], nominated=[nominee])
    assert above.placements[0].node == "n0", "2 cpu free: it fits without evicting"
    above = engine.schedule(snapshot, [_priority(pod("above", cpu="3"), 1000)], nominated=[nominee])
    assert above.placements[0].nominated_node == "n0"
    assert above.placements[0].victims == ("default/low",)


def test_nominated_pods_count_for_affinity_and_spread() -> None:
    """Upstream adds nominated pods of equal or higher priority to every filter: a
    web pod nominated to n0 repels an anti-affine pod and counts in its spreading;
    a pod whose required affinity only that nominee satisfies is placed nowhere
    (the filters also run without it, as it may never land)."""
    snapshot = build_snapshot([node("n0"), node("n1")], [])
    nominee = _priority(pod("nominee"), 100)
    nominee["metadata"]["labels"] = {"app": "web"}
    nominee["status"] = {"nominatedNodeName": "n0"}
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}

    def placed(name: str, priority: int, spec: dict[str, Any], labels: dict[str, str]) -> str | None:
        p = _priority(pod(name), priority)
        p["metadata"]["labels"] = labels
        p["spec"].update(spec)
        result = Engine(Config()).schedule(snapshot, [p], nominated=[nominee])
        return result.placements[0].node

    anti = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}
    assert placed("anti", 10, anti, {"app": "db"}) == "n1"
    assert placed("anti-high", 1000, anti, {"app": "db"}) in ("n0", "n1")
    affine = {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}
    assert placed("affine", 10, affine, {"app": "db"}) is None
    spread = {
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}},
            }
        ]
    }
    assert placed("spread", 10, spread, {"app": "web"}) == "n1"


def test_default_spreading_follows_the_pods_service() -> None:
    nodes = [
        node("n0", labels={"topology.kubernetes.io/zone": "a"}),
        node("n1", labels={"topology.kubernetes.io/zone": "b"}),
    ]
    web = pod("web-0", node_name="n0")
    web["metadata"]["labels"] = {"app": "web"}
    snapshot = build_snapshot(nodes, [web])
    pending = pod("web-1")
    pending["metadata"]["labels"] = {"app": "web"}

    def spread_scores() -> dict[str, float]:
        ex = Engine(Config()).schedule(snapshot, [pending], explain="default/web-1").explanation
        assert ex is not None
        return {n.node: n.scores["PodTopologySpread"]["normalized"] for n in ex.nodes}

    assert spread_scores() == {"n0": 0.0, "n1": 0.0}, "no Service, no owner: no default constraints"
    snapshot.spread_selectors.update(
        "v1",
        "Service",
        {"metadata": {"name": "web", "namespace": "default"}, "spec": {"selector": {"app": "web"}}},
    )
    scores = spread_scores()
    assert scores["n1"] > scores["n0"], scores
    assert spread_scores() == scores, "the same pod again: the same constraints"
    snapshot.spread_selectors.update(
        "v1",
        "Service",
        {"metadata": {"name": "web", "namespace": "default"}, "spec": {"selector": {"app": "db"}}},
    )
    assert spread_scores() == {"n0": 0.0, "n1": 0.0}, "its Service selects others now: no default constraints"


def test_pod_topology_spread_and_preemption_config() -> None:
    def profile(**kw: Any) -> dict[str, Any]:
        return {
            "apiVersion": "ksched.io/v1alpha1",
            "kind": "KschedConfiguration",
            "profiles": [{"schedulerName": "ksched", **kw}],
        }

    listed = parse_config(
        profile(
            pluginConfig=[
                {
                    "name": "PodTopologySpread",
                    "args": {
                        "defaultingType": "List",
                        "defaultConstraints": [
                            {"topologyKey": "rack", "maxSkew": 2, "whenUnsatisfiable": "ScheduleAnyway"}
                        ],
                    },
                }
            ],
            plugins={"multiPoint": {"disabled": [{"name": "DefaultPreemption"}]}},
        )
    ).profiles[0]
    assert listed.spread_defaults == (("rack", 2, False),) and not listed.spread_system_defaulted
    assert not listed.preemption
    with pytest.raises(ConfigError, match=r"pluginConfig\[0\]\.args\.defaultingType"):
        parse_config(
            profile(pluginConfig=[{"name": "PodTopologySpread", "args": {"defaultingType": "Sometimes"}}])
        )
    with pytest.raises(ConfigError, match=r"hardPodAffinityWeight"):
        parse_config(
            profile(pluginConfig=[{"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 101}}])
        )


def test_pod_level_example_simulates_as_documented(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from ksched.commands.cli import main

    assert main(["simulate", "examples/cluster-pod-level.yaml", "-o", "json"]) == 1  # some pods stay pending
    out = {p["pod"]: p for p in json.loads(capsys.readouterr().out)["placements"]}
    assert out["default/urgent"]["nominatedNode"] == "node-b1"
    assert out["default/urgent"]["victims"] == ["default/batch-0"]
    # The nomination holds node-b1, so zone spreading (maxSkew 1) lets one web replica in.
    assert sum(1 for i in range(3) if out[f"default/web-{i}"]["node"]) == 1
    assert not any(out[f"default/worker-{i}"]["node"] for i in range(3)), "the gang waits whole"


def test_local_cluster_installs_the_pod_group_crd_deploy_ships() -> None:
    from pathlib import Path

    packaged = Path("python/ksched/cluster/podgroup-crd.yaml").read_text()
    assert packaged == Path("deploy/podgroup-crd.yaml").read_text()
    assert "name: podgroups.scheduling.x-k8s.io" in packaged and "name: v1alpha1" in packaged


def test_rust_time_is_the_engine_call_alone_summed_over_gang_reruns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow engine call counts as Rust time once per run; slow input building
    (the pod table, rebuilt for each run) counts as Python time, never as Rust."""
    import time

    from ksched import _core
    from ksched.engine.podtable import PodTable

    pause_s = 0.1
    calls: list[float] = []
    real_schedule, real_table = _core.schedule, PodTable.engine_table

    tables: list[float] = []

    def slept() -> float:
        """A pause, as long as it really took (a loaded machine oversleeps)."""
        at = time.perf_counter()
        time.sleep(pause_s)
        return time.perf_counter() - at

    def slow_schedule(*args: Any, **kwargs: Any) -> Any:
        calls.append(slept())
        return real_schedule(*args, **kwargs)

    def slow_table(self: PodTable, *args: Any, **kwargs: Any) -> Any:
        tables.append(slept())
        return real_table(self, *args, **kwargs)

    monkeypatch.setattr(_core, "schedule", slow_schedule)
    monkeypatch.setattr(PodTable, "engine_table", slow_table)
    snapshot = build_snapshot([node("n0", cpu="2"), node("n1", cpu="2")], [])
    # Gang b cannot reach minMember: the batch runs again without it.
    pods = [member(f"{g}-{i}", g) for i in range(3) for g in ("a", "b")]
    groups = {"default/a": GangStatus(3), "default/b": GangStatus(3)}
    started = time.perf_counter()
    result = Engine(Config()).schedule(snapshot, pods, groups=groups)
    wall_s = time.perf_counter() - started
    assert len(calls) == 2, "one run, and one re-run without the short gang"
    assert sum(calls) <= result.rust_seconds < sum(calls) + pause_s, (
        "each engine call once, no input building"
    )
    assert len(tables) == len(calls)
    assert sum(tables) <= result.python_seconds < sum(tables) + pause_s, (
        "the pod table of each run is Python time"
    )
    assert result.rust_seconds + result.python_seconds <= wall_s
    assert wall_s - (result.rust_seconds + result.python_seconds) < pause_s, "nothing of schedule() uncounted"


def test_the_preferred_spread_workloads_pods_spread_over_zones_within_one_call() -> None:
    """``ksched bench --workload preferred-spread`` (scheduler_perf's
    PreferredTopologySpreading): ScheduleAnyway zone spreading scores rather than
    filters. With 40 nodes in one zone and 10 in each of two others, 30 such pods in
    one call (selected through ranked nodes from the second pod on) go 10 to each
    zone, each on a node of its own; least-allocated alone would put about two
    thirds of them in the big zone."""
    from collections import Counter

    from ksched.bench.engine import perf_nodes, perf_pod

    nodes = perf_nodes(60)
    for i, n in enumerate(nodes):
        n["metadata"]["labels"]["topology.kubernetes.io/zone"] = "big" if i < 40 else f"small-{i % 2}"
    zone = {n["metadata"]["name"]: n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in nodes}
    pods = [perf_pod("preferred-spread", f"pod-{i}", "sched-1", True) for i in range(30)]
    assert pods[0]["spec"]["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "ScheduleAnyway"
    for seed in range(3):
        placements = Engine(Config(), seed=seed).schedule(build_snapshot(nodes, []), pods).placements
        chosen = [p.node for p in placements]
        assert None not in chosen
        assert Counter(zone[n] for n in chosen if n) == {"big": 10, "small-0": 10, "small-1": 10}
        assert len(set(chosen)) == 30


def test_existing_pods_terms_kept_between_engine_calls_follow_namespace_labels_and_new_terms() -> None:
    """The compiled terms of bound pods are kept between engine calls (``_compiled_terms``);
    a namespace relabelled in place (as the cluster state does) and a pending pod with terms
    of its own still change the verdict."""
    guard = pod("db-0", namespace="team-a", node_name="n0")
    guard["metadata"]["labels"] = {"app": "db"}
    guard["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "web"}},
                    "namespaceSelector": {"matchLabels": {"env": "prod"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    snapshot = build_snapshot([node("n0")], [guard])
    snapshot.namespaces.update({"team-a": {}, "shop": {"env": "dev"}})
    engine = Engine(Config())

    def web(i: int, **spec: Any) -> Obj:
        p = pod(f"web-{i}", namespace="shop", **spec)
        p["metadata"]["labels"] = {"app": "web"}
        return p

    assert engine.schedule(snapshot, [web(0)]).placements[0].node == "n0"
    assert engine.schedule(snapshot, [web(1)]).placements[0].node == "n0"  # the kept terms
    snapshot.namespaces["shop"]["env"] = "prod"
    assert engine.schedule(snapshot, [web(2)]).placements[0].node is None
    snapshot.namespaces["shop"]["env"] = "dev"
    assert engine.schedule(snapshot, [web(3)]).placements[0].node == "n0"
    # A pending pod's own term set joins the compiled ones: it keeps away from app=db.
    own = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "db"}},
                    "namespaces": ["team-a"],
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    assert engine.schedule(snapshot, [web(4, affinity=own)]).placements[0].node is None
    assert engine.schedule(snapshot, [web(5)]).placements[0].node == "n0"
