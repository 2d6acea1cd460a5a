"""The quality benchmark's newer scenarios have the properties they claim, the oracle's pods
(and only its) carry their true usage, and a setup is placed between kube-scheduler and the
oracle by plain arithmetic."""

from __future__ import annotations

import collections
import random
import statistics
from dataclasses import replace

import pytest

from ksched.bench.quality.figures import QualityFigures, QualityResults
from ksched.bench.quality.gap import MIN_GAP_NODE_MINUTES, gap, gap_rows, gaps
from ksched.bench.quality.pooled import pools
from ksched.bench.quality.report import table
from ksched.bench.quality.run import EXAMPLE_CONFIG, SETUPS, QualityOptions, _config_of
from ksched.bench.quality.scenarios import (
    ARRIVAL_SPAN_S,
    DEFAULT_SCHEDULER,
    EXPECTED_CPU,
    HERD_MULTIPLE,
    MIXED,
    REQUEST_CPU_RANGE_M,
    SCENARIOS,
    SHAPES,
    WORKLOAD_REPLICAS,
    Scenario,
    controllers,
    scenario,
    shapes_of,
    time_bursts_from,
)
from ksched.bench.quality.trace import TRACE_QUANTILES, trace_multiple
from ksched.cluster.kwok import fake_nodes
from ksched.cluster.load import (
    BASE,
    BURST_EPOCH,
    BURST_EVERY_SECONDS,
    BURST_FOR_SECONDS,
    BURST_TO,
    RAMP_SECONDS,
    REFERENCE_CPU,
)
from ksched.engine.quantity import parse_quantity
from ksched.objects import Obj

NEW = ("diverse-deployments", "herd", "slow-start", "synchronized-bursts", "diverse-best-effort")


def _cpu(pod: Obj) -> float:
    return float(parse_quantity(pod["spec"]["containers"][0]["resources"]["requests"]["cpu"]))


def _app(pod: Obj) -> str:
    return str(pod["metadata"]["labels"]["app"])


def _by_workload(s: Scenario) -> dict[str, list[Obj]]:
    out: dict[str, list[Obj]] = collections.defaultdict(list)
    for p in s.pods:
        out[_app(p)].append(p)
    return out


@pytest.mark.parametrize("name", NEW)
def test_a_scenario_is_the_same_for_a_seed_and_another_for_another(name: str) -> None:
    a = scenario(name, 300, "ns", "ksched", seed=7, rate=10)
    assert a == scenario(name, 300, "ns", "ksched", seed=7, rate=10)
    assert a != scenario(name, 300, "ns", "ksched", seed=8, rate=10)
    assert a.controlled, "owned by ReplicaSets, so the estimate can learn per workload"


@pytest.mark.parametrize("name", NEW)
def test_a_workloads_replicas_share_their_requests_and_usage(name: str) -> None:
    s = scenario(name, 300, "ns", "ksched", seed=3, rate=10)
    workloads = _by_workload(s)
    assert len(workloads) > 1
    for members in workloads.values():
        assert len({repr(p["spec"]) for p in members}) == 1, "one template per workload"
        assert len({repr(p["metadata"]["annotations"]) for p in members}) == 1
    # What a ReplicaSet makes from its template is what the harness made.
    for rs in (o for o in controllers(s.pods) if o["kind"] == "ReplicaSet"):
        first = workloads[rs["metadata"]["name"]][0]
        assert rs["spec"]["template"]["metadata"]["annotations"] == first["metadata"]["annotations"]


def test_diverse_deployments_vary_requests_arrive_over_minutes_on_mixed_shapes() -> None:
    s = scenario("diverse-deployments", 600, "ns", "ksched", seed=1, rate=10)
    cpus = [_cpu(p) for p in s.pods]
    assert 0.1 <= min(cpus) < 0.2 and 1.5 < max(cpus) <= 2.0, (min(cpus), max(cpus))
    assert len(set(cpus)) > 50, "requests vary by workload"
    assert s.arrivals is not None
    times = [a.at_s for a in s.arrivals]
    assert times == sorted(times) and 0 <= times[0] < 15 and ARRIVAL_SPAN_S - 15 < times[-1] <= ARRIVAL_SPAN_S
    # Every pod arrives exactly once, each group one workload's replicas, all together.
    covered = [i for a in s.arrivals for i in range(a.first, a.first + a.count)]
    assert covered == list(range(len(s.pods))) and len(s.pods) == 600
    for a in s.arrivals:
        assert len({_app(p) for p in s.pods[a.first : a.first + a.count]}) == 1
    assert len(_by_workload(s)) == len(s.arrivals)
    ramps = [float(p["metadata"]["annotations"][RAMP_SECONDS]) for p in s.pods]
    assert 0.3 < sum(r > 0 for r in ramps) / len(ramps) < 0.7, "about half the workloads ramp"
    assert shapes_of("diverse-deployments") == "mixed"


def test_diverse_best_effort_makes_a_quarter_of_the_workloads_request_nothing_yet_use_cpu() -> None:
    s = scenario("diverse-best-effort", 600, "ns", "ksched", seed=2, rate=10)
    oracle = scenario("diverse-best-effort", 600, "ns", "oracle", seed=2, rate=10, oracle=True)
    assert s.arrivals is not None and len(s.arrivals) > 10 and shapes_of("diverse-best-effort") == "mixed"
    low, high = REQUEST_CPU_RANGE_M
    for mine, known in zip(s.pods, oracle.pods, strict=True):
        annotations = mine["metadata"]["annotations"]
        resources = mine["spec"]["containers"][0]["resources"]
        if resources:
            assert REFERENCE_CPU not in annotations
            continue
        # It uses its multiple of what it would have asked for, and the oracle knows it.
        reference = float(parse_quantity(annotations[REFERENCE_CPU]))
        assert low / 1000 <= reference <= high / 1000
        level = float(annotations[BASE]) * reference
        assert known["metadata"]["annotations"][EXPECTED_CPU] == f"{round(level * 1000)}m"
    workloads = _by_workload(s)
    without = [w for w, members in workloads.items() if not members[0]["spec"]["containers"][0]["resources"]]
    assert 0.15 < len(without) / len(workloads) < 0.35, "about a quarter of the workloads"


@pytest.mark.parametrize(
    ("name", "owned"), [("mixed-schedulers-diverse", False), ("mixed-replicasets-diverse", True)]
)
def test_the_diverse_mixed_scenarios_give_every_other_workload_to_kube_scheduler(
    name: str, owned: bool
) -> None:
    s = scenario(name, 600, "ns", "ksched", seed=1, rate=10)
    assert s.controlled is owned and shapes_of(name) == "mixed"
    assert s.arrivals is not None and len(s.arrivals) > 10
    for i, a in enumerate(s.arrivals):
        asks = {p["spec"]["schedulerName"] for p in s.pods[a.first : a.first + a.count]}
        assert asks == {DEFAULT_SCHEDULER if i % 2 else "ksched"}, "a workload has one scheduler"
    assert len({_cpu(p) for p in s.pods}) > 20, "diverse-deployments' varied requests"
    assert name in MIXED


def test_mixed_shapes_span_2_to_16_cores_and_several_ratios_in_identical_pools() -> None:
    nodes = fake_nodes(200, 3, shapes=SHAPES["mixed"])["items"]
    cores = {float(parse_quantity(n["status"]["allocatable"]["cpu"])) for n in nodes}
    assert min(cores) == 2 and max(cores) == 16
    ratios = {
        float(
            parse_quantity(n["status"]["allocatable"]["memory"])
            / parse_quantity(n["status"]["allocatable"]["cpu"])
        )
        / 2**30
        for n in nodes
    }
    assert len(ratios) >= 3, ratios
    shape = {n["metadata"]["name"]: repr(n["status"]["allocatable"]) for n in nodes}
    dealt = pools(nodes, 3, 64)
    counts = [collections.Counter(shape[n] for n in p) for p in dealt]
    assert all(c == counts[0] for c in counts) and len(counts[0]) == len(SHAPES["mixed"])
    # The default stays the local cluster's four shapes.
    assert fake_nodes(8, 3) == fake_nodes(8, 3, shapes=SHAPES["standard"])


def test_slow_start_ramps_every_workload_over_30_s_to_3_minutes() -> None:
    s = scenario("slow-start", 300, "ns", "ksched", seed=2, rate=10)
    ramps = [float(p["metadata"]["annotations"][RAMP_SECONDS]) for p in s.pods]
    assert min(ramps) >= 30 and max(ramps) <= 180 and max(ramps) - min(ramps) > 100
    assert all(len(m) == WORKLOAD_REPLICAS for m in _by_workload(s).values())


def test_synchronized_bursts_burst_half_the_workloads_at_once_to_twice_their_usage() -> None:
    s = scenario("synchronized-bursts", 600, "ns", "ksched", seed=2, rate=10)
    workloads = _by_workload(s)
    bursting = [
        m[0]["metadata"]["annotations"]
        for m in workloads.values()
        if BURST_EPOCH in m[0]["metadata"]["annotations"]
    ]
    assert 0.35 < len(bursting) / len(workloads) < 0.65, len(bursting)
    for a in bursting:
        # Every burster shares the clock's period and length, so all burst together.
        assert (a[BURST_EVERY_SECONDS], a[BURST_FOR_SECONDS], a[BURST_EPOCH]) == ("150", "60", "0")
        assert float(a[BURST_TO]) == pytest.approx(2 * float(a[BASE]), abs=0.001)
    steady = [
        m[0]["metadata"]["annotations"]
        for m in workloads.values()
        if BURST_EPOCH not in m[0]["metadata"]["annotations"]
    ]
    assert all(a[BURST_EVERY_SECONDS] == "0" for a in steady)
    # The oracle expects a burster at its peak.
    oracle = scenario("synchronized-bursts", 600, "ns", "oracle", seed=2, rate=10, oracle=True)
    peaks = {
        p["metadata"]["annotations"][EXPECTED_CPU]
        for p in oracle.pods
        if BURST_EPOCH in p["metadata"]["annotations"]
    }
    assert peaks == {
        f"{round(float(p['metadata']['annotations'][BURST_TO]) * 500)}m"
        for p in oracle.pods
        if BURST_EPOCH in p["metadata"]["annotations"]
    }


def test_a_runs_first_create_times_the_bursts_of_every_pool_alike() -> None:
    pools = [scenario("synchronized-bursts", 60, "ns", asks, seed=1, rate=10).pods for asks in ("a", "b")]
    for pods in pools:
        time_bursts_from(pods, 1_800_000_123.7)
    epochs = {p["metadata"]["annotations"].get(BURST_EPOCH) for pods in pools for p in pods}
    assert epochs == {"1800000123", None}, "bursters carry the round's start, the others nothing"


def test_the_other_scenarios_pods_are_timed_by_their_own_start() -> None:
    for name in SCENARIOS:
        if name != "synchronized-bursts":
            pods = scenario(name, 60, "ns", "ksched", seed=1, rate=10).pods
            assert not any(BURST_EPOCH in p["metadata"]["annotations"] for p in pods), name


def test_herd_scales_one_workload_at_twice_its_request_onto_a_half_busy_pool() -> None:
    s = scenario("herd", 1488, "ns", "ksched", seed=1, rate=10)
    assert s.scale_up == ("herd", WORKLOAD_REPLICAS + 372)
    herd = _by_workload(s)["herd"]
    assert len(herd) == WORKLOAD_REPLICAS and s.pods[:WORKLOAD_REPLICAS] == herd, (
        "its first replicas come first"
    )
    assert {p["metadata"]["annotations"][BASE] for p in herd} == {repr(HERD_MULTIPLE)}
    background = [p for p in s.pods if _app(p) != "herd"]
    # Half the pool's CPU requested (6 pods of 500m on the 6-core average node) and about as much used.
    assert len(background) == 1488
    used = statistics.fmean(float(p["metadata"]["annotations"][BASE]) for p in background)
    assert 0.7 < used < 1.05, used
    replica_set = next(
        o for o in controllers(s.pods) if o["kind"] == "ReplicaSet" and o["metadata"]["name"] == "herd"
    )
    assert replica_set["spec"]["replicas"] == WORKLOAD_REPLICAS


def test_trace_draws_match_the_published_quantiles() -> None:
    rng = random.Random(11)
    draws = sorted(trace_multiple(rng) for _ in range(40_000))
    for p, want in TRACE_QUANTILES[1:-1]:
        got = draws[int(p * len(draws))]
        assert abs(got - want) <= 0.05 * want, (p, got, want)
    above = sum(d > 1.0 for d in draws) / len(draws)
    assert abs(above - 0.34) < 0.01, above


@pytest.mark.parametrize(
    ("name", "index", "want"),
    [
        # requests-lie: its base times 500m.
        ("requests-lie", 0, None),
        # best-effort: its base times the 500m reference.
        ("best-effort", 0, None),
        # load-shift: the first workload grows to 3x 500m two minutes in, within the run.
        ("load-shift", 0, None),
        ("diverse-deployments", 5, None),
        ("herd", 0, "1000m"),
    ],
)
def test_the_oracles_pods_carry_their_true_usage_and_no_one_elses_do(
    name: str, index: int, want: str | None
) -> None:
    oracle = scenario(name, 60, "ns", "oracle", seed=4, rate=10, oracle=True)
    other = scenario(name, 60, "ns", "ksched", seed=4, rate=10)
    assert not any(EXPECTED_CPU in p["metadata"]["annotations"] for p in other.pods)
    assert all(EXPECTED_CPU in p["metadata"]["annotations"] for p in oracle.pods)
    pod = oracle.pods[index]
    annotations = pod["metadata"]["annotations"]
    if want is None:
        grows = (
            float(annotations.get("load.ksched.io/burst-to", "1"))
            if int(annotations["load.ksched.io/burst-every-seconds"])
            else None
        )
        level = grows if grows is not None else float(annotations[BASE])
        requested = 0.5 if name == "best-effort" else _cpu(pod)
        want = f"{round(level * requested * 1000)}m"
    assert annotations[EXPECTED_CPU] == want
    # Apart from the annotation, the oracle's pods are everyone else's.
    for p in oracle.pods:
        del p["metadata"]["annotations"][EXPECTED_CPU]
    assert [p["metadata"]["annotations"] for p in oracle.pods] == [
        p["metadata"]["annotations"] for p in other.pods
    ]


@pytest.mark.parametrize("name", ["synchronized-bursts", "load-shift"])
def test_the_steady_oracle_knows_each_pods_steady_usage_but_not_its_bursts(name: str) -> None:
    oracle = scenario(name, 120, "ns", "oracle", seed=4, rate=10, oracle=True)
    steady = scenario(name, 120, "ns", "oracle-steady", seed=4, rate=10, oracle=True, foresees=False)
    bursting = 0
    for full, known in zip(oracle.pods, steady.pods, strict=True):
        annotations = known["metadata"]["annotations"]
        want = f"{round(float(annotations[BASE]) * _cpu(known) * 1000)}m"
        assert annotations[EXPECTED_CPU] == want, "its steady multiple of its request"
        if int(annotations[BURST_EVERY_SECONDS]):
            bursting += 1
            assert full["metadata"]["annotations"][EXPECTED_CPU] != want, "the oracle foresees it"
    assert bursting > 0
    assert "oracle-steady" in SETUPS and _config_of(QualityOptions(), "oracle-steady") == EXAMPLE_CONFIG


def test_load_shifts_growing_workloads_are_expected_at_their_grown_usage() -> None:
    s = scenario("load-shift", 300, "ns", "oracle", seed=1, rate=10, oracle=True)
    expected = {p["metadata"]["annotations"][EXPECTED_CPU] for p in s.pods}
    assert expected == {"250m", "1500m"}, "half the request, or three times it once grown"


def test_the_oracle_is_a_setup_that_runs_kscheds_configuration() -> None:
    assert "oracle" in SETUPS and "ksched-no-metrics" in SETUPS
    opts = QualityOptions()
    assert _config_of(opts, "oracle") == _config_of(opts, "ksched") == EXAMPLE_CONFIG
    assert _config_of(opts, "ksched-no-metrics") is None
    assert set(opts.scenarios) < set(SCENARIOS), "the new scenarios run when asked"


@pytest.mark.parametrize(
    ("ks", "setup", "oracle", "ratio", "closed"),
    [
        (20.0, 5.0, 0.0, 0.25, 0.75),
        (20.0, 20.0, 4.0, 1.0, 0.0),
        (10.0, 2.0, 2.0, 0.2, 1.0),
        # Worse than kube-scheduler: a negative share.
        (10.0, 15.0, 0.0, 1.5, -0.5),
        # Better than the oracle: over 1.
        (10.0, 0.0, 2.0, 0.0, 1.25),
    ],
)
def test_the_share_of_the_gap_closed(
    ks: float, setup: float, oracle: float, ratio: float, closed: float
) -> None:
    g = gap(ks, setup, oracle)
    assert (g.of_kube_scheduler, g.gap_closed, g.not_judged) == (ratio, closed, "")


def test_a_gap_too_small_or_missing_is_not_judged() -> None:
    small = gap(3.0, 2.5, 3.0 - MIN_GAP_NODE_MINUTES / 2)
    assert small.gap_closed is None and "too small" in small.not_judged
    assert gap(0.0, 0.0, 0.0).of_kube_scheduler is None
    assert gap(5.0, 1.0, None).not_judged == "no oracle in this round"


def test_a_pool_whose_load_ends_past_the_line_is_read_by_its_excess() -> None:
    """herd on a pool whose load ends past the line: ksched, holding every node just over it,
    runs more hot node-minutes than kube-scheduler, which heaped the overflow on a few nodes far
    over; the gap table puts the excess beside them and says where the pool ended."""
    results = QualityResults({})
    for label, hot, excess, load in (
        ("kube-scheduler", 21.5, 3.76, 0.805),
        ("ksched", 25.5, 1.01, 0.807),
        ("oracle", 22.75, 0.85, 0.806),
    ):
        f = QualityFigures(label, "herd", 10)
        f.hotspot_node_minutes, f.excess_node_minutes, f.end_load, f.line = hot, excess, load, 0.8
        results.figures.append(f)
    found = gaps(results)["herd"]["ksched"]
    assert (found.of_kube_scheduler, found.excess_of_kube_scheduler) == (1.186, 0.269)
    assert found.load_past_line and found.end_load == 0.807
    assert gap_rows(results)[1][3:6] == ("119%", "27%", "0.81 (past the line)")
    under = QualityResults({}, [replace(f, end_load=0.62) for f in results.figures])
    assert gap_rows(under)[1][5] == "0.62", "under the line: no mark"
    no_excess = QualityResults({}, [replace(f, excess_node_minutes=0.0) for f in results.figures])
    assert gaps(no_excess)["herd"]["ksched"].excess_of_kube_scheduler is None


def test_the_table_and_json_put_each_setup_between_kube_scheduler_and_the_oracle() -> None:
    results = QualityResults({})
    for scen, figures in (
        ("herd", (("kube-scheduler", 40.0), ("ksched", 10.0), ("oracle", 0.0))),
        ("slow-start", (("kube-scheduler", 0.5), ("ksched", 0.0), ("oracle", 0.0))),
    ):
        for label, hot in figures:
            f = QualityFigures(label, scen, 10)
            f.hotspot_node_minutes = hot
            results.figures.append(f)
    found = gaps(results)
    assert set(found) == {"herd", "slow-start"} and set(found["herd"]) == {"ksched"}
    assert found["herd"]["ksched"].gap_closed == 0.75
    rows = gap_rows(results)
    assert rows[1] == ("herd", "ksched", "10.0", "25%", "-", "0.00", "75%")
    assert "too small to judge" in rows[2][-1]
    text = table(results)
    assert "gap closed" in text and "75%" in text
    assert gap_rows(QualityResults({}, results.figures[:2])) == [], "no oracle ran: no gap table"
