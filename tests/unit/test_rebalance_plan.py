"""The rebalance planner (``ksched.engine.rebalance.plan``) on small clusters: which pod
leaves a hot node and where the engine proves its replacement lands; the pods it never
moves; the limits of one look; and that moves, reservations and resources are counted so
no target is overfilled or made hot."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from ksched.config import Config, EstimateConfig, MetricConfig
from ksched.config.rebalance import RebalanceConfig, RebalanceMetric
from ksched.engine import Engine
from ksched.engine.rebalance import (
    BUDGET_SPENT,
    Budget,
    HotNode,
    Plan,
    SteeringView,
    plan,
)
from ksched.engine.snapshot import build_snapshot
from tests.conftest import node, pod

Obj = dict[str, Any]

NOW = 1_800_000_000.0
LONG_AGO = "2020-01-01T00:00:00Z"
# A pod started a minute before NOW.
A_MINUTE_AGO = "2027-01-15T07:59:00Z"
NODES = ("n0", "n1", "n2", "n3")
# One web pod per zone, at most one apart.
ZONE_SPREAD = [
    {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
]


def usage_metric(**fields: Any) -> MetricConfig:
    """``u``: a node's cpu usage over allocatable, filtered above 0.8, estimated by cpu."""
    defaults: dict[str, Any] = {"above": 0.8, "estimate": EstimateConfig(resource="cpu")}
    return MetricConfig(name="u", source="prometheus", query="u", **{**defaults, **fields})


def rebalance(**fields: Any) -> RebalanceConfig:
    """Hot over 0.8; a target must stay below 0.6."""
    defaults: dict[str, Any] = {"metrics": (RebalanceMetric("u", high=0.8, low=0.6),), "max_per_node": 5}
    return RebalanceConfig(**{**defaults, **fields})


def workload_pod(
    name: str,
    node_name: str,
    cpu: str = "1",
    memory: str = "128Mi",
    kind: str = "ReplicaSet",
    owner: str = "web",
    started: str = LONG_AGO,
    **spec: Any,
) -> Obj:
    """A running pod of controller ``kind``/``owner`` (4 cpu nodes: 1 cpu is 0.25 of ``u``)."""
    p = pod(name, cpu=cpu, memory=memory, node_name=node_name, **spec)
    p["metadata"].update(
        uid=f"uid-{name}",
        labels={"app": owner, "pod-template-hash": "abc123"},
        ownerReferences=[
            {"apiVersion": "apps/v1", "kind": kind, "name": owner, "uid": f"uid-{owner}", "controller": True}
        ],
    )
    p["status"] = {"phase": "Running", "startTime": started}
    return p


def run_plan(
    values: list[float],
    pods: list[Obj],
    config: RebalanceConfig | None = None,
    metric: MetricConfig | None = None,
    nodes: list[Obj] | None = None,
    budget: Budget | None = None,
    reserved: tuple[Obj, ...] = (),
    measured: Callable[[str, MetricConfig], float | None] = lambda key, m: None,
    bystanders: tuple[Obj, ...] = (),
    steering: SteeringView | None = None,
    caution: list[float] | None = None,
) -> Plan:
    """Plan on nodes n0..n3 (4 cpu, 8Gi each unless given) with ``u`` at ``values``; every
    node over the line is hot. ``bystanders``: bound pods the planner is not shown;
    ``steering``: the steering marks (None: steering off); ``caution``: the part of each
    value that is the load estimate's deviations."""
    config = config or rebalance()
    metric = metric or usage_metric()
    nodes = nodes or [node(n) for n in NODES]
    snapshot = build_snapshot(nodes, [*pods, *bystanders])
    matrix = np.array(values, dtype=np.float64).reshape(-1, 1)
    [line] = config.thresholds((metric,))
    hot = [HotNode(n, "u", v, line.high, 3) for n, v in zip(NODES, values, strict=False) if line.hot(v)]
    return plan(
        Engine(Config(metrics=(metric,))),
        config,
        snapshot,
        pods,
        [metric],
        matrix,
        hot,
        measured,
        NOW,
        budget or Budget(evictions=5),
        reserved,
        steering,
        None if caution is None else np.array(caution, dtype=np.float64).reshape(-1, 1),
    )


def moved(p: Plan) -> list[tuple[str, str, str]]:
    return [(m.pod, m.source, m.target) for m in p.moves]


def reasons(p: Plan) -> dict[str, str]:
    return {s.pod: s.reason for s in p.skipped}


def test_the_hot_nodes_largest_pod_moves_to_the_coolest_node() -> None:
    pods = [workload_pod("small", "n0", cpu="200m"), workload_pod("big", "n0", cpu="1")]
    p = run_plan([0.9, 0.5, 0.3, 0.55], pods)
    assert moved(p) == [("default/big", "n0", "n2")]
    [m] = p.moves
    assert (m.metric, m.uid, m.namespace) == ("u", "uid-big", "default")
    assert (m.workload, m.owner_uid, m.template_hash) == ("ReplicaSet/default/web", "uid-web", "abc123")
    assert m.usage == pytest.approx(0.25)
    assert (m.source_before, m.source_after) == pytest.approx((0.9, 0.65))
    assert (m.target_before, m.target_after) == pytest.approx((0.3, 0.55))
    # n0 is no longer hot after the move: the small pod stays, and is not reported as skipped.
    assert p.skipped == ()
    replacement = m.replacement
    assert replacement["status"] == {"nominatedNodeName": "n2"}
    assert "nodeName" not in replacement["spec"]
    assert "uid" not in replacement["metadata"]
    assert replacement["metadata"]["name"] != "big"
    terms = replacement["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n0"]}]}
    ]


def test_a_replacement_goes_to_the_node_expected_coolest_and_stays_under_the_line_with_caution() -> None:
    # n2 reads 0.30 of which 0.05 is caution (unmeasured pods' deviations): scored by the mean
    # (``scoreByMean``), expected at 0.25, cooler than n1's 0.28, so the big pod's replacement
    # goes there, as a pod placed by the scheduling loop would; scored with its caution
    # (``scoreByMean: pod``) it reads 0.30, and n1 takes it. With 0.40 of caution n2 reads
    # 0.65 with no room under the target line 0.6 for the 0.25 the pod takes: the proof's
    # filter reads the caution.
    pods = [workload_pod("small", "n0", cpu="200m"), workload_pod("big", "n0", cpu="1")]
    by_mean = usage_metric(estimate=EstimateConfig(resource="cpu", score_by_mean=True))
    pod_by_mean = usage_metric(estimate=EstimateConfig(resource="cpu", score_pod_by_mean=True))
    assert moved(run_plan([0.9, 0.28, 0.30, 0.55], pods)) == [("default/big", "n0", "n1")]
    cool = run_plan([0.9, 0.28, 0.30, 0.55], pods, metric=by_mean, caution=[0.0, 0.0, 0.05, 0.0])
    assert moved(cool) == [("default/big", "n0", "n2")]
    kept = run_plan([0.9, 0.28, 0.30, 0.55], pods, metric=pod_by_mean, caution=[0.0, 0.0, 0.05, 0.0])
    assert moved(kept) == [("default/big", "n0", "n1")]
    held = run_plan([0.9, 0.28, 0.65, 0.55], pods, metric=by_mean, caution=[0.0, 0.0, 0.40, 0.0])
    assert moved(held) == [("default/big", "n0", "n1")]


def test_the_source_is_excluded_in_every_node_selector_term() -> None:
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [zone]}, {"matchExpressions": [zone]}]
            }
        }
    }
    nodes = [node(n, labels={"zone": "a"}) for n in NODES]
    p = run_plan([0.9, 0.5, 0.3, 0.55], [workload_pod("big", "n0", affinity=affinity)], nodes=nodes)
    [m] = p.moves
    terms = m.replacement["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    avoid = {"key": "metadata.name", "operator": "NotIn", "values": ["n0"]}
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [zone], "matchFields": [avoid]}] * 2


def test_nothing_moves_when_no_node_stays_below_low() -> None:
    p = run_plan([0.9, 0.5, 0.45, 0.5], [workload_pod("big", "n0")])
    assert p.moves == ()
    assert reasons(p) == {
        # The engine's own verdict: n0 (the source) is out, n1..n3 would end over low.
        "default/big": "no feasible node for its replacement: 0/4 nodes are available: 4 node(s) had u above 0.6."
    }


class CountingEngine(Engine):
    """An engine that counts the proofs it is asked for, and whether any wants an explanation."""

    calls = 0
    explained = 0

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        self.explained += kwargs.get("explain") is not None
        return super().schedule(*args, **kwargs)


def test_a_look_with_no_cool_node_pays_one_engine_call() -> None:
    """At 5,000 nodes a proof costs about 2 ms, and one that explains every node's verdict 25 ms:
    once the engine found no node under the judged metrics' lines for a victim's load, a look
    skips every candidate moving as much or more with the engine's reason, until a move
    changes the values."""
    engine = CountingEngine(Config(metrics=(usage_metric(),)))
    pods = [workload_pod(f"p{i}", "n0", cpu="500m", owner=f"w{i}") for i in range(6)]
    snapshot = build_snapshot([node(n) for n in NODES], pods)
    values = np.array([[0.95], [0.7], [0.7], [0.7]])
    hot = [HotNode("n0", "u", 0.95, 0.8, 3)]
    p = plan(
        engine, rebalance(), snapshot, pods, [usage_metric()], values, hot, lambda k, m: None, NOW, Budget(5)
    )
    assert p.moves == () and len(p.skipped) == 6
    assert {s.reason for s in p.skipped} == {
        "no feasible node for its replacement: 0/4 nodes are available: 4 node(s) had u above 0.6."
    }
    assert (engine.calls, engine.explained) == (1, 0)
    # Where a node could take it, one proof, and no explanation.
    values[1, 0] = 0.3
    p = plan(
        engine, rebalance(), snapshot, pods, [usage_metric()], values, hot, lambda k, m: None, NOW, Budget(1)
    )
    assert moved(p) == [("default/p0", "n0", "n1")]
    assert (engine.calls, engine.explained) == (2, 0)


def test_a_node_threshold_annotation_stricter_than_low_holds_a_move_off_it() -> None:
    """n3 would end at 0.55 with the victim, under low 0.6, but its own threshold (0.35) is
    stricter: a move, like any pod, is held to the node's line there, and goes to n2."""
    nodes = [
        node(n, annotations={"threshold.ksched.io/u-above": "0.35"} if n == "n3" else None) for n in NODES
    ]
    p = run_plan([0.9, 0.5, 0.3, 0.3], [workload_pod("big", "n0")], nodes=nodes)
    assert moved(p) == [("default/big", "n0", "n2")]


def test_a_target_stays_cool_on_every_judged_metric() -> None:
    """``m`` (memory) is judged too: n1 would stay below low on ``u`` but not on ``m``, n2 on
    ``m`` but not on ``u``; no node is cool on both."""
    u = usage_metric()
    m = MetricConfig(
        name="m",
        source="prometheus",
        query="m",
        above=0.8,
        estimate=EstimateConfig(resource="memory"),
    )
    config = rebalance(
        metrics=(RebalanceMetric("u", high=0.8, low=0.6), RebalanceMetric("m", high=0.8, low=0.6))
    )
    pods = [workload_pod("big", "n0", memory="2Gi")]
    values = np.array([[0.9, 0.5], [0.1, 0.5], [0.5, 0.1], [0.5, 0.5]])
    hot = [HotNode("n0", "u", 0.9, 0.8, 3)]
    engine = Engine(Config(metrics=(u, m)))
    snapshot = build_snapshot([node(n) for n in NODES], pods)
    p = plan(engine, config, snapshot, pods, [u, m], values, hot, lambda k, m: None, NOW, Budget(5))
    assert reasons(p) == {
        "default/big": "no feasible node for its replacement: 0/4 nodes are available: "
        "1 node(s) had m above 0.6, 3 node(s) had u above 0.6."
    }
    values[3] = [0.3, 0.3]
    p = plan(engine, config, snapshot, pods, [u, m], values, hot, lambda k, m: None, NOW, Budget(5))
    assert moved(p) == [("default/big", "n0", "n3")]


def test_a_below_metric_moves_to_a_node_that_stays_above_low() -> None:
    """A ``filter.below`` metric (higher is better, e.g. free capacity): hot under its line; a
    move raises the source's value and lowers the target's."""
    free = usage_metric(above=None, below=0.2, prefer="higher")
    config = rebalance(metrics=(RebalanceMetric("u", high=0.2, low=0.4),))
    pods = [workload_pod("big", "n0", owner="a"), workload_pod("next", "n0", owner="b")]
    p = run_plan([0.1, 0.5, 0.9, 0.6], pods, config=config, metric=free)
    # n0 ends at 0.35, over its line: one move is enough. n1 would end at 0.25 and n3 at 0.35,
    # under low; n2 at 0.65 stays above it.
    assert moved(p) == [("default/big", "n0", "n2")]
    [m] = p.moves
    assert (m.source_before, m.source_after) == pytest.approx((0.1, 0.35))
    assert (m.target_before, m.target_after) == pytest.approx((0.9, 0.65))


def test_a_below_metric_never_moves_to_a_node_that_would_drop_under_low() -> None:
    free = usage_metric(above=None, below=0.2, prefer="higher")
    config = rebalance(metrics=(RebalanceMetric("u", high=0.2, low=0.4),))
    p = run_plan([0.1, 0.5, 0.55, 0.6], [workload_pod("big", "n0")], config=config, metric=free)
    assert p.moves == ()
    assert reasons(p) == {
        "default/big": "no feasible node for its replacement: 0/4 nodes are available: 4 node(s) had u below 0.4."
    }


def test_measured_usage_replaces_the_estimate() -> None:
    pods = [workload_pod("requests-much", "n0", cpu="1"), workload_pod("uses-much", "n0", cpu="100m")]
    measured = {"default/uses-much": 1200.0}
    p = run_plan([0.9, 0.2, 0.2, 0.2], pods, measured=lambda key, m: measured.get(key))
    [m] = p.moves
    assert m.pod == "default/uses-much"
    assert m.usage == pytest.approx(0.3)


def test_the_budget_caps_the_moves() -> None:
    pods = [workload_pod("a", "n0", owner="a"), workload_pod("b", "n1", owner="b")]
    p = run_plan([0.95, 0.9, 0.1, 0.1], pods, budget=Budget(evictions=1))
    assert moved(p) == [("default/a", "n0", "n2")]
    assert reasons(p) == {"default/b": BUDGET_SPENT}


@pytest.mark.parametrize(
    ("name", "config", "budget", "owners", "reason"),
    [
        ("per node", rebalance(max_per_node=1), Budget(5), ("a", "b"), "limit maxPerNode reached"),
        (
            "per node, counting this cycle's evictions",
            rebalance(max_per_node=2),
            Budget(5, per_node={"n0": 1}),
            ("a", "b"),
            "limit maxPerNode reached",
        ),
        (
            "per namespace",
            rebalance(max_per_namespace=1),
            Budget(5),
            ("a", "b"),
            "limit maxPerNamespace reached",
        ),
        (
            "per workload",
            rebalance(max_per_workload=1),
            Budget(5),
            ("a", "a"),
            "limit maxPerWorkload reached",
        ),
    ],
)
def test_limits_per_node_namespace_and_workload(
    name: str, config: RebalanceConfig, budget: Budget, owners: tuple[str, str], reason: str
) -> None:
    # n0 at 1.3 stays hot after one pod of 0.25 leaves.
    pods = [
        workload_pod("first", "n0", cpu="1", owner=owners[0]),
        workload_pod("second", "n0", cpu="900m", owner=owners[1]),
    ]
    p = run_plan([1.3, 0.1, 0.1, 0.1], pods, config=config, budget=budget)
    assert [m.pod for m in p.moves] == ["default/first"], name
    assert reasons(p) == {"default/second": reason}, name


def test_a_source_gives_pods_until_it_is_no_longer_hot() -> None:
    pods = [workload_pod(f"p{i}", "n0", cpu="1", owner=f"w{i}") for i in range(4)]
    p = run_plan([1.2, 0.1, 0.1, 0.1], pods, config=rebalance(max_per_namespace=5))
    # 1.2 - 0.25 = 0.95, - 0.25 = 0.7: two moves, then n0 is cool.
    assert len(p.moves) == 2
    assert p.moves[-1].source_after == pytest.approx(0.7)


def test_two_moves_never_overfill_a_target_by_the_metric() -> None:
    pods = [workload_pod("a", "n0", owner="a"), workload_pod("b", "n1", owner="b")]
    p = run_plan([0.95, 0.9, 0.3, 0.33], pods)
    # The first move takes n2 to 0.55; a second would take it to 0.8, over low.
    assert moved(p) == [("default/a", "n0", "n2"), ("default/b", "n1", "n3")]
    assert p.moves[1].target_after == pytest.approx(0.58)


def test_two_moves_never_overfill_a_target_by_resources() -> None:
    """The first replacement holds its memory on n2 as a nominated pod does."""
    pods = [
        workload_pod("a", "n0", cpu="500m", memory="6Gi", owner="a"),
        workload_pod("b", "n1", cpu="500m", memory="6Gi", owner="b"),
    ]
    p = run_plan([0.9, 0.85, 0.1, 0.4], pods)
    assert moved(p) == [("default/a", "n0", "n2"), ("default/b", "n1", "n3")]


def test_a_reserved_replacement_holds_its_load_on_its_node() -> None:
    reserved = workload_pod("earlier", "n2", owner="other")
    del reserved["spec"]["nodeName"]
    reserved["status"] = {"nominatedNodeName": "n2"}
    p = run_plan([0.9, 0.5, 0.3, 0.33], [workload_pod("big", "n0")], reserved=(reserved,))
    # n2 with the reserved pod is at 0.55; the move would take it to 0.8.
    assert moved(p) == [("default/big", "n0", "n3")]


def test_a_reserved_replacement_holds_what_its_move_was_proved_with() -> None:
    """The first move is proved with its pod's measured 1.2 cpu (0.3 of n2); a later look
    holds that on n2, not the 0.1 cpu its requests would estimate."""
    uses_much = workload_pod("uses-much", "n0", cpu="100m", owner="a")
    first = run_plan([0.9, 0.5, 0.2, 0.5], [uses_much], measured=lambda key, m: 1200.0)
    [m] = first.moves
    assert (m.target, m.target_after) == ("n2", pytest.approx(0.5))
    p = run_plan([0.9, 0.5, 0.2, 0.3], [workload_pod("big", "n0", owner="b")], reserved=(m.replacement,))
    # n2 holds 0.5 with the reservation, and would be at 0.75 after this move: n3 (0.55).
    assert moved(p) == [("default/big", "n0", "n3")]


def test_a_target_the_policy_would_call_hot_is_never_chosen() -> None:
    """Scores prefer n1 (the metric weighs nothing; n2 and n3 are full of other pods), but
    n1 would be over the line after the move; high = low = filter.above here."""
    metric = usage_metric(weight=0.0)
    bystanders = tuple(workload_pod(f"busy-{n}", n, cpu="2500m", owner="busy") for n in ("n2", "n3"))
    p = run_plan(
        [0.9, 0.79, 0.5, 0.5],
        [workload_pod("big", "n0")],
        config=RebalanceConfig(max_per_node=5),
        metric=metric,
        bystanders=bystanders,
    )
    [m] = p.moves
    assert m.target in ("n2", "n3")
    assert m.target_after == pytest.approx(0.75)


def test_a_cool_target_without_cpu_room_is_not_chosen() -> None:
    bystanders = (workload_pod("busy", "n2", cpu="3500m", owner="busy"),)
    p = run_plan([0.9, 0.5, 0.1, 0.2], [workload_pod("big", "n0")], bystanders=bystanders)
    assert moved(p) == [("default/big", "n0", "n3")]


def test_the_victim_does_not_count_for_its_replacements_topology_spread() -> None:
    """One web pod per zone, maxSkew 1. n3 (zone c) is the only node that stays cool, but
    once the victim leaves zone a, a second pod in zone c is a skew of 2: the proof must see
    the zones as they will be (else the replacement cannot go where it was proved to, and
    the scheduler sends it back to n0, the hot node)."""
    zones = {"n0": "a", "n1": "b", "n2": "c", "n3": "c"}
    nodes = [node(n, labels={"topology.kubernetes.io/zone": z}) for n, z in zones.items()]
    spread = ZONE_SPREAD
    victim = workload_pod("web-a", "n0", topologySpreadConstraints=spread)
    others = (workload_pod("web-b", "n1"), workload_pod("web-c", "n2"))
    p = run_plan([0.9, 0.5, 0.5, 0.1], [victim], nodes=nodes, bystanders=others)
    assert p.moves == ()
    assert "didn't match pod topology spread constraints" in reasons(p)["default/web-a"]


def test_earlier_victims_of_the_plan_do_not_count_either() -> None:
    """Zone a holds two web pods of n0; the first move takes one to zone b (n1). Without
    both victims gone from zone a, the second replacement could go to zone c (n2) and leave
    a at 0, c at 2."""
    zones = {"n0": "a", "n1": "b", "n2": "c", "n3": "a"}
    nodes = [node(n, labels={"topology.kubernetes.io/zone": z}) for n, z in zones.items()]
    spread = ZONE_SPREAD
    pods = [workload_pod(f"web-{i}", "n0", owner="web", topologySpreadConstraints=spread) for i in range(2)]
    others = (workload_pod("web-b", "n1"), workload_pod("web-c", "n2"))
    config = rebalance(max_per_workload=2)
    p = run_plan([1.3, 0.1, 0.1, 0.9], pods, config=config, nodes=nodes, bystanders=others)
    # The first replacement goes to b (n1; a keeps web-1). The second would leave a at 0 with
    # b at 2 and c at 1: wherever it goes, a skew of 2.
    assert moved(p) == [("default/web-0", "n0", "n1")]
    assert "didn't match pod topology spread constraints" in reasons(p)["default/web-1"]


def test_the_snapshot_is_left_as_it_was() -> None:
    """The live snapshot is the scheduler's: the victims a proof marks terminating are put back."""
    pods = [workload_pod(f"p{i}", "n0", owner=f"w{i}") for i in range(3)]
    snapshot = build_snapshot([node(n) for n in NODES], pods)
    before = snapshot.pods.terminating.copy()
    values = np.array([[1.3], [0.1], [0.1], [0.1]])
    p = plan(
        Engine(Config(metrics=(usage_metric(),))),
        rebalance(max_per_namespace=5),
        snapshot,
        pods,
        [usage_metric()],
        values,
        [HotNode("n0", "u", 1.3, 0.8, 3)],
        lambda k, m: None,
        NOW,
        Budget(5),
    )
    assert len(p.moves) == 2
    assert (snapshot.pods.terminating == before).all()
    assert values.tolist() == [[1.3], [0.1], [0.1], [0.1]], "the caller's values are not changed"


def test_no_feasible_node_says_what_the_engine_said() -> None:
    bystanders = tuple(workload_pod(f"busy-{n}", n, cpu="3500m", owner="busy") for n in ("n1", "n2", "n3"))
    p = run_plan([0.9, 0.1, 0.1, 0.1], [workload_pod("big", "n0")], bystanders=bystanders)
    assert p.moves == ()
    assert reasons(p)["default/big"].startswith(
        "no feasible node for its replacement: 0/4 nodes are available"
    )


def test_as_json() -> None:
    p = run_plan([0.9, 0.5, 0.3, 0.55], [workload_pod("big", "n0")])
    out = p.as_json()
    assert out["hot"] == [{"node": "n0", "metric": "u", "value": 0.9, "high": 0.8, "samples": 3}]
    assert out["moves"][0]["pod"] == "default/big"
    assert out["moves"][0]["target"] == "n2"
    assert out["skipped"] == []


def test_a_node_threshold_annotation_never_lets_a_target_end_over_low() -> None:
    """n2's own threshold (0.95) would let the engine place there, and its scores prefer it
    (the metric weighs nothing; n3 is fuller), but the move would leave it at 0.75: the
    replacement goes to n3, which stays below low."""
    nodes = [
        node(n, annotations={"threshold.ksched.io/u-above": "0.95"} if n == "n2" else None) for n in NODES
    ]
    bystanders = (workload_pod("busy", "n3", cpu="2", owner="busy"),)
    p = run_plan(
        [0.9, 0.7, 0.5, 0.3],
        [workload_pod("big", "n0")],
        nodes=nodes,
        metric=usage_metric(weight=0.0),
        bystanders=bystanders,
    )
    [m] = p.moves
    assert (m.target, m.target_after) == ("n3", pytest.approx(0.55))
