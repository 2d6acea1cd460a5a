"""A learned load estimate: the recently placed pods already measured calibrate the guesses for
the ones that are not yet (their requests times the measured/guessed ratio; BestEffort pods at
the measured BestEffort mean), ``deviations`` adds their spread, and the pod being placed
counts the same way against the metric's threshold."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from ksched.config import Config, EstimateConfig, MetricConfig, parse_config
from ksched.config.estimate import LEARN_MIN_PODS, Calibration
from ksched.engine.estimate import estimate_choice
from ksched.engine.pods import pod_requests
from ksched.engine.scheduler import Engine
from ksched.engine.snapshot import build_snapshot
from ksched.errors import ConfigError
from ksched.loop.metrics.load_model import LEARN_EVERY_S, LoadModel
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.metrics.pod_series import RAMP_SPAN
from ksched.loop.mirror.slim import slim_pod
from ksched.loop.scheduling.cycle import Scheduler
from ksched.loop.scheduling.queue import SchedulingQueue
from ksched.loop.scheduling.shadow import Shadow
from ksched.loop.telemetry import Telemetry
from tests.conftest import node, pod
from tests.unit.test_load_estimate import CONFIG, T0, Clock, PodUsageSource, bound, cluster, rfc3339
from tests.unit.test_load_estimate_engine import one_cpu_nodes, owned_by, place, usage

POD_QUERY = "sum by (namespace, pod) (irate(pod_cpu_usage_seconds_total[1m]))"
NODE_VALUE = 0.1  # what PodUsageSource's sample says of n0 and n1
# The tests' Prometheus samples pods every second, so that each read (two seconds apart) is a
# new sample even where the value did not change.
SCRAPE_S = 1.0


def learned_metric(**estimate: Any) -> MetricConfig:
    return MetricConfig(
        name="cpu",
        source="prometheus",
        query="node:node_cpu_utilisation:ratio",
        estimate=EstimateConfig(
            resource="cpu",
            window_s=90.0,
            pod_query=POD_QUERY,
            **{"learn": True, "scrape_interval_s": SCRAPE_S, **estimate},
        ),
    )


def placing_estimate(**estimate: Any) -> EstimateConfig:
    """A learned estimate with one deviation, as the engine reads it for a pod being placed."""
    return EstimateConfig(resource="cpu", pod_query=POD_QUERY, learn=True, **{"deviations": 1.0, **estimate})


def best_effort(name: str, node_name: str, at: float) -> dict[str, Any]:
    p = pod(name, cpu=None, memory=None, node_name=node_name, scheduler="default-scheduler")
    p["metadata"]["uid"] = f"uid-{name}"
    p["status"] = {
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(at)}]
    }
    return slim_pod(p)


def run(
    m: MetricConfig,
    measured: list[tuple[dict[str, Any], float]],
    unmeasured: list[dict[str, Any]],
    samples: int = RAMP_SPAN + 1,
) -> Any:
    """Measured pods on n0, unmeasured ones on n1 (4 CPUs each), all bound after the node
    sample; the measured pods' usage is sampled ``samples`` times two seconds apart (by default
    enough equal samples to be stable and teach). Returns the store's matrix and the store."""
    clock = Clock(T0)
    state = cluster(m, clock)
    source = PodUsageSource(clock)
    nodes = list(state.nodes.values())
    store = MetricStore([m], source, None, lambda: nodes, clock=clock)  # type: ignore[arg-type]
    for p, _ in measured:
        state.on_pod("ADDED", p, None)
    for p in unmeasured:
        state.on_pod("ADDED", p, None)
    state.sync()
    model = LoadModel(store, state.recent)
    source.pods = {f"default/{p['metadata']['name']}": used for p, used in measured}
    for k in range(samples):
        clock.now = T0 + 2 * k
        store.refresh(m)
        store.refresh_pods(m)
        matrix = model.scheduling(state.snapshot())
    return matrix, store


def measured_pods(ratios: list[float], cpu_milli: int = 100) -> list[tuple[dict[str, Any], float]]:
    return [(bound(f"m{i}", "n0", T0 - 2, cpu=f"{cpu_milli}m"), r * cpu_milli) for i, r in enumerate(ratios)]


def test_unmeasured_pods_count_at_what_the_measured_ones_use_of_their_requests() -> None:
    m = learned_metric()
    matrix, store = run(m, measured_pods([2.0] * LEARN_MIN_PODS), [bound("new", "n1", T0 - 2, cpu="1")])
    n0, n1 = matrix.values[:, 0].tolist()
    assert n0 == pytest.approx(NODE_VALUE + LEARN_MIN_PODS * 0.2 / 4), "the measured pods count as measured"
    assert n1 == pytest.approx(NODE_VALUE + 2.0 / 4), "the 1-CPU pod counts as 2 CPUs: measured pods use 2x"
    calibration = matrix.metrics[0].estimate.calibration
    assert (calibration.ratio, calibration.ratio_pods) == (pytest.approx(2.0), LEARN_MIN_PODS)
    assert store.learned()["cpu"]["ratio"] == pytest.approx(2.0), "/status shows what was learned"


def test_without_enough_measured_pods_or_with_learning_off_the_guess_stands() -> None:
    new = [bound("new", "n1", T0 - 2, cpu="1")]
    few, _ = run(learned_metric(), measured_pods([2.0] * (LEARN_MIN_PODS - 1)), new)
    off, _ = run(learned_metric(learn=False), measured_pods([2.0] * LEARN_MIN_PODS), new)
    assert few.values[1, 0] == pytest.approx(NODE_VALUE + 0.25), f"{LEARN_MIN_PODS - 1} pods teach nothing"
    assert off.metrics[0].estimate.calibration is None
    assert off.values[1, 0] == pytest.approx(NODE_VALUE + 0.25), "without learn the request stands"


def test_best_effort_pods_count_at_the_measured_best_effort_mean() -> None:
    measured = [(best_effort(f"be{i}", "n0", T0 - 2), 500.0) for i in range(LEARN_MIN_PODS)]
    matrix, _ = run(learned_metric(), measured, [best_effort("new", "n1", T0 - 2)])
    assert matrix.values[1, 0] == pytest.approx(NODE_VALUE + 0.5 / 4), "500m measured, not the 100m default"
    assert matrix.metrics[0].estimate.calibration.best_effort == pytest.approx(500.0)


def test_deviations_add_the_combined_spread_of_a_nodes_unmeasured_pods() -> None:
    # Measured at 1x and 3x their requests: mean 2, standard deviation 1.
    ratios = [1.0, 3.0] * (LEARN_MIN_PODS // 2)
    new = [bound("a", "n1", T0 - 2, cpu="1"), bound("b", "n1", T0 - 2, cpu="1")]
    matrix, _ = run(learned_metric(deviations=1.0), measured_pods(ratios), new)
    # Two 1-CPU pods: 2 CPUs expected each, spread 1 CPU each, combined sqrt(2).
    assert matrix.values[1, 0] == pytest.approx(NODE_VALUE + (4.0 + np.sqrt(2.0)) / 4)
    assert matrix.caution is None, "by default the score reads the deviations too"
    by_mean, _ = run(learned_metric(deviations=1.0, score_by_mean=True), measured_pods(ratios), new)
    assert by_mean.values[1, 0] == matrix.values[1, 0]
    # With scoreByMean the spread is caution, which the filter reads and the scores leave out.
    assert by_mean.caution[:, 0].tolist() == [0.0, pytest.approx(np.sqrt(2.0) / 4)]
    # Weighing risk, the spread is caution too: the scores keep it (``scoreByMean: pod``) and
    # the risk term reads it as the node's deviation.
    risky_metric = learned_metric(deviations=1.0, score_pod_by_mean=True, score_risk=16.0)
    risky, _ = run(risky_metric, measured_pods(ratios), new)
    assert risky.values[1, 0] == matrix.values[1, 0]
    assert risky.caution[:, 0].tolist() == [0.0, pytest.approx(np.sqrt(2.0) / 4)]
    plain, _ = run(learned_metric(), measured_pods(ratios), new)
    assert plain.values[1, 0] == pytest.approx(NODE_VALUE + 4.0 / 4), "no deviations: the mean alone"
    assert plain.caution is None, "no deviations: no caution"


def test_before_any_pod_is_measured_the_deviations_count_the_initial_spread() -> None:
    # Nothing measured yet (a fresh cluster): two unmeasured 1-CPU pods on n1 count at their
    # requests, and the deviations at the initial spread, 0.7 of each guess by default.
    new = [bound("a", "n1", T0 - 2, cpu="1"), bound("b", "n1", T0 - 2, cpu="1")]
    matrix, _ = run(learned_metric(deviations=1.0), [], new)
    assert matrix.values[1, 0] == pytest.approx(NODE_VALUE + (2.0 + 0.7 * np.sqrt(2.0)) / 4)
    assert matrix.metrics[0].estimate.calibration.ratio is None, "nothing was learned"
    off, _ = run(learned_metric(deviations=1.0, initial_spread=0.0), [], new)
    assert off.values[1, 0] == pytest.approx(NODE_VALUE + 2.0 / 4), "initialSpread 0: the guesses alone"
    # A BestEffort pod's 100m guess is no surer than a request.
    blind, _ = run(learned_metric(deviations=1.0), [], [best_effort("be", "n1", T0 - 2)])
    assert blind.values[1, 0] == pytest.approx(NODE_VALUE + (0.1 + 0.07) / 4)
    # Once ten pods are measured, their spread replaces the initial one (1x and 3x: sd 1).
    ratios = [1.0, 3.0] * (LEARN_MIN_PODS // 2)
    learned, _ = run(learned_metric(deviations=1.0), measured_pods(ratios), new)
    assert learned.values[1, 0] == pytest.approx(NODE_VALUE + (4.0 + np.sqrt(2.0)) / 4)


@pytest.mark.parametrize(
    ("spread", "placed", "caution"),
    [
        (0.7, None, 105),  # 0.6 + (150m + 0.7 x 150m) of 1 CPU: 0.855, over 0.8
        (0.0, "n0", 0),  # 0.6 + 150m: 0.75
    ],
)
def test_a_pod_being_placed_before_any_pod_is_measured_counts_its_initial_spread(
    spread: float, placed: str | None, caution: int
) -> None:
    estimate = placing_estimate(initial_spread=spread, calibration=Calibration())
    p = pod("p", cpu="150m")
    placements = place(usage(estimate=estimate), one_cpu_nodes(1), [0.6], p)
    assert placements[0].node == placed
    choice = estimate_choice(p, pod_requests(p), estimate)
    assert (choice.amount, choice.source, choice.caution) == (150 + caution, "configured", caution)


def test_scores_rank_nodes_by_the_mean_and_the_filter_holds_them_to_the_caution() -> None:
    # Pods measured at 1x and 3x their requests: mean 2, standard deviation 1. n0 holds ten
    # measured 50m pods: 0.1 + 1 CPU of 4 (0.35). n1 holds two unmeasured 200m pods: 0.1 +
    # 2 x 400m of 4 CPUs at the mean (0.30), plus sqrt(2) x 200m of caution (0.371).
    ratios = [1.0, 3.0] * (LEARN_MIN_PODS // 2)
    new = [bound("a", "n1", T0 - 2, cpu="200m"), bound("b", "n1", T0 - 2, cpu="200m")]
    m = replace(learned_metric(deviations=1.0, score_by_mean=True), above=0.66, weight=5.0)
    matrix, _ = run(m, measured_pods(ratios, cpu_milli=50), new)
    assert matrix.values[:, 0].tolist() == [pytest.approx(0.35), pytest.approx(0.3 + np.sqrt(2) / 20)]
    snapshot = cluster(m, Clock(T0)).snapshot()
    engine = Engine(Config(metrics=matrix.metrics))

    def placed(p: dict[str, Any], caution: Any) -> str | None:
        out = engine.schedule(snapshot, [p], matrix.values, metrics=matrix.metrics, caution=caution)
        return out.placements[0].node

    # A 200m pod (400m expected, 200m of spread): by the mean n1 ranks first (0.30 against
    # 0.35); scored by the cautious figures it ranked below n0, which then ends hotter.
    assert placed(pod("p", cpu="200m"), matrix.caution) == "n1"
    assert placed(pod("p", cpu="200m"), None) == "n0", "without the caution given, the scores read it"
    # A 400m pod counts 1200m against the filter (0.3 of a node): n1 reads 0.671 with it,
    # over the line 0.66, though its mean (0.5) is under it; n0 reads 0.65.
    assert placed(pod("q", cpu="400m"), matrix.caution) == "n0"


def test_a_nodes_caution_widens_the_risk_terms_deviation_and_stays_in_its_score() -> None:
    # Two 1-CPU nodes and a crossing weighing 16; a 100m pod whose workload uses 1x its request
    # with a deviation of 2x: 100m expected, 300m cautious (0.20 of caution). n0 reads 0.50, of
    # which 0.10 is the caution of pods no sample shows yet (``scoreByMean: pod``: its score
    # keeps it).
    # - The line at 0.8, n1 measuring 0.48: with the pod n0's mean is 0.50 with a deviation of
    #   0.22 (0.10 and 0.20 in quadrature), 1.34 deviations short of the line (a 9 % chance of
    #   crossing it: 0.29 on its 0.60); n1's mean 0.58 with 0.20 is 1.1 short (14 %: 0.43 on
    #   0.58). n0 takes the pod. Without the caution given, n0's reading counts as certain
    #   (0.60 with the pod, one deviation short: 16 %, 0.51), and n1 takes it.
    # - The line at 0.95, n1 measuring 0.45: both are two deviations short (about 2 %: 0.07),
    #   and n1 takes the pod, reading 0.55 with it against n0's 0.60 with its caution.
    calibration = Calibration(ratio=1.0, ratio_sd=2.0, ratio_pods=LEARN_MIN_PODS)
    estimate = placing_estimate(calibration=calibration, score_pod_by_mean=True, score_risk=16.0)
    nodes = build_snapshot(one_cpu_nodes(2), [])

    def placed(line: float, values: list[float], caution: list[float] | None) -> str | None:
        metric = usage(estimate=estimate, above=line)
        out = Engine(Config(metrics=(metric,))).schedule(
            nodes,
            [pod("p", cpu="100m")],
            np.array(values).reshape(-1, 1),
            metrics=(metric,),
            caution=None if caution is None else np.array(caution).reshape(-1, 1),
        )
        return out.placements[0].node

    assert placed(0.8, [0.50, 0.48], [0.10, 0.0]) == "n0"
    assert placed(0.8, [0.50, 0.48], None) == "n1"
    assert placed(0.95, [0.50, 0.45], [0.10, 0.0]) == "n1"


def test_a_pod_counts_at_its_mean_in_the_score_only_with_score_by_mean() -> None:
    calibration = Calibration(ratio=1.5, ratio_sd=1.0, ratio_pods=LEARN_MIN_PODS)
    requests = pod_requests(pod("p", cpu="100m"))
    for by_mean, expected in ((False, 250), (True, 150)):
        estimate = placing_estimate(score_by_mean=by_mean, calibration=calibration)
        choice = estimate_choice(pod("p", cpu="100m"), requests, estimate)
        # 100m x 1.5 plus one deviation of 100m x 1.0: the filter's figure either way.
        assert (choice.amount, choice.expected) == (250, expected), by_mean
    metric = {
        "name": "cpu",
        "source": "prometheus",
        "query": "q",
        "estimate": {"resource": "cpu", "scoreByMean": False},
    }
    plain = parse_config({**CONFIG, "metrics": [metric]})
    assert not plain.metrics[0].estimate.score_by_mean, "false needs nothing learned"


@pytest.mark.parametrize(("typical", "placed"), [(1.0, "small"), (None, "large")])
def test_a_pod_of_an_unknown_workload_is_ranked_by_what_it_is_expected_to_use(
    typical: float | None, placed: str
) -> None:
    # Workloads learned so far use 1x their requests on average, 2x at the 90th percentile. A
    # 1-CPU pod of a new Deployment counts 2 CPUs against the filter. Ranked by that, the
    # 8-CPU node reading 0.3 (0.55 with it) would beat the 4-CPU one reading 0.1 (0.6); ranked
    # by what it is expected to use, the 4-CPU node (0.35 against 0.425) takes it, as a pod
    # that knows its usage would be placed. Without a typical figure the quantile is all there is.
    calibration = Calibration(prior_ratio=2.0, prior_ratio_typical=typical)
    estimate = placing_estimate(calibration=calibration)
    nodes = [node("small", cpu="4"), node("large", cpu="8")]
    p = owned_by(pod("p", cpu="1"), "ReplicaSet")
    p["metadata"]["labels"] = {"pod-template-hash": "h1"}
    p["metadata"]["ownerReferences"][0]["name"] = "new-h1"
    (placement,) = place(usage(estimate=estimate), nodes, [0.1, 0.3], p)
    assert placement.node == placed
    # The filter still holds it to 2 CPUs: on a 4-CPU node reading 0.45, it is over 0.8.
    (placement,) = place(usage(estimate=estimate), nodes, [0.45, 0.9], p)
    assert placement.node is None


@pytest.mark.parametrize(
    ("risk", "small", "placed"),
    [
        (0.0, 0.29, "small"),
        (1.0, 0.29, "large"),
        (1.0, 0.1, "small"),
        (1.0, 0.2, "small"),
        (16.0, 0.2, "large"),
    ],
)
def test_a_pod_of_an_unknown_workload_goes_where_its_tail_would_not_cross_the_line(
    risk: float, small: float, placed: str
) -> None:
    # The same 1-CPU pod of a new Deployment: 1 CPU expected, 2 CPUs at the prior's quantile.
    # The 4-CPU node reading 0.29 would read 0.54 with it as expected, the 8-CPU one reading 0.42
    # 0.545: by what it is expected to use, the small node takes it. But at its quantile it takes
    # the small node to 0.79, a deviation short of the line at 0.8 (a 15 % chance of crossing
    # it), and the large one to 0.67, two deviations short (2 %). With scoreRisk the caution
    # counts by that chance, and the large node takes it; a small node far from its line
    # (0.1: 0.6 at the quantile) keeps it. At 0.2 the small node reads 0.45 with the pod, its
    # chance of crossing is 8 % and the large node's 2 %: weighed once, the 0.1 the small node
    # reads cooler wins; weighed 16 times (a crossing costs 16 times the caution), it does not.
    calibration = Calibration(prior_ratio=2.0, prior_ratio_typical=1.0)
    estimate = placing_estimate(calibration=calibration, score_pod_by_mean=True, score_risk=risk)
    nodes = [node("small", cpu="4"), node("large", cpu="8")]
    p = owned_by(pod("p", cpu="1"), "ReplicaSet")
    p["metadata"]["labels"] = {"pod-template-hash": "h1"}
    p["metadata"]["ownerReferences"][0]["name"] = "new-h1"
    (placement,) = place(usage(estimate=estimate), nodes, [small, 0.42], p)
    assert placement.node == placed


@pytest.mark.parametrize(("score", "scored"), [(False, 1500), ("pod", 1000), (True, 1000)])
def test_a_prior_pod_is_held_to_the_quantile_and_scored_at_the_typical_figure(
    score: Any, scored: int
) -> None:
    # The prior: 2x at the quantile, 1x for the typical workload, 0.5x of spread within
    # workloads. A 1-CPU pod of a new Deployment: the filter holds it to 2 CPUs and a deviation;
    # the score counts the typical 1 CPU, with the deviation unless scoreByMean leaves it out.
    calibration = Calibration(prior_ratio=2.0, prior_ratio_sd=0.5, prior_ratio_typical=1.0)
    estimate = placing_estimate(
        calibration=calibration, score_by_mean=score is True, score_pod_by_mean=score == "pod"
    )
    p = owned_by(pod("p", cpu="1"), "ReplicaSet")
    choice = estimate_choice(p, pod_requests(p), estimate)
    assert (choice.source, choice.amount, choice.caution, choice.expected) == ("prior", 2500, 500, scored)


def test_a_pod_that_requests_almost_nothing_does_not_swamp_what_is_learned() -> None:
    # Nine pods use what they request; one requests 1m and uses a whole core.
    measured = measured_pods([1.0] * (LEARN_MIN_PODS - 1), cpu_milli=1000)
    measured.append((bound("tiny", "n0", T0 - 2, cpu="1m"), 1000.0))
    matrix, _ = run(learned_metric(), measured, [bound("new", "n1", T0 - 2, cpu="1")])
    ratio = matrix.metrics[0].estimate.calibration.ratio
    assert ratio == pytest.approx(10_000 / 9_001), "the usage over the requests, summed: not a mean of 1000x"
    assert matrix.values[1, 0] == pytest.approx(NODE_VALUE + ratio / 4)


@pytest.mark.parametrize(
    ("calibration", "deviations", "placed"),
    [
        (None, 0.0, "n0"),  # 0.6 + 100m of 1 CPU: 0.7, under 0.8
        (Calibration(ratio=1.5, ratio_sd=1.0, ratio_pods=LEARN_MIN_PODS), 0.0, "n0"),  # 0.75
        (Calibration(ratio=1.5, ratio_sd=1.0, ratio_pods=LEARN_MIN_PODS), 1.0, None),  # 0.85
    ],
)
def test_the_pod_being_placed_counts_at_its_calibrated_estimate_plus_deviations(
    calibration: Calibration | None, deviations: float, placed: str | None
) -> None:
    estimate = EstimateConfig(
        resource="cpu", pod_query=POD_QUERY, learn=True, deviations=deviations, calibration=calibration
    )
    placements = place(usage(estimate=estimate), one_cpu_nodes(1), [0.6], pod("p", cpu="100m"))
    assert placements[0].node == placed


@pytest.mark.parametrize(
    ("estimate", "error"),
    [
        ({"learn": True}, "estimate.learn: needs podQuery"),
        ({"learn": "yes", "podQuery": POD_QUERY}, "estimate.learn: must be true or false"),
        ({"deviations": -1, "podQuery": POD_QUERY}, "estimate.deviations: must not be negative"),
        ({"deviations": 1, "podQuery": POD_QUERY}, "estimate.deviations: needs learn: true"),
        ({"scoreByMean": True, "podQuery": POD_QUERY}, "estimate.scoreByMean: needs learn: true"),
        ({"scoreByMean": "pod", "podQuery": POD_QUERY}, "estimate.scoreByMean: needs learn: true"),
        (
            {"scoreByMean": "yes", "podQuery": POD_QUERY, "learn": True},
            "estimate.scoreByMean: must be true, false or pod",
        ),
        ({"scoreByMean": 0, "podQuery": POD_QUERY, "learn": True}, "estimate.scoreByMean: must be true"),
        ({"scoreByMean": 1, "podQuery": POD_QUERY, "learn": True}, "estimate.scoreByMean: must be true"),
        ({"deviations": 1, "podQuery": POD_QUERY, "learn": False}, "estimate.deviations: needs learn: true"),
        ({"scoreRisk": True, "podQuery": POD_QUERY}, "estimate.scoreRisk: needs learn: true"),
        (
            {"scoreRisk": "yes", "podQuery": POD_QUERY, "learn": True},
            "estimate.scoreRisk: must be true, false or a weight",
        ),
        (
            {"scoreRisk": -1, "podQuery": POD_QUERY, "learn": True},
            "estimate.scoreRisk: must be true, false or a",
        ),
        (
            {"scoreRisk": float("inf"), "podQuery": POD_QUERY, "learn": True},
            "estimate.scoreRisk: must be true",
        ),
        ({"scoreRisk": 10**400, "podQuery": POD_QUERY, "learn": True}, "estimate.scoreRisk: must be true"),
        ({"scoreRisk": 4, "podQuery": POD_QUERY}, "estimate.scoreRisk: needs learn: true"),
    ],
)
def test_bad_learning_settings_name_the_key(estimate: dict[str, Any], error: str) -> None:
    raw = {
        **CONFIG,
        "prometheus": {"url": "http://prometheus:9090"},
        "metrics": [
            {"name": "cpu", "source": "prometheus", "query": "q", "estimate": {"resource": "cpu", **estimate}}
        ],
    }
    with pytest.raises(ConfigError, match=error):
        parse_config(raw)


@pytest.mark.parametrize(("raw", "weight"), [(True, 1.0), (False, 0.0), (4, 4.0), (0.5, 0.5), (0, 0.0)])
def test_score_risk_is_a_switch_or_a_weight(raw: Any, weight: float) -> None:
    estimate = {"resource": "cpu", "podQuery": POD_QUERY, "learn": True, "scoreRisk": raw}
    raw_config = {
        **CONFIG,
        "prometheus": {"url": "http://prometheus:9090"},
        "metrics": [{"name": "cpu", "source": "prometheus", "query": "q", "estimate": estimate}],
    }
    parsed = parse_config(raw_config).metrics[0].estimate
    assert parsed is not None and parsed.score_risk == weight


@pytest.mark.parametrize(
    ("metric", "error"),
    [
        ({"prefer": "target(0.5)"}, "estimate.scoreRisk: needs a metric that scores worse with load"),
        (
            {"prefer": "lower", "filter": {"below": 0.1}},
            "estimate.scoreRisk: needs a metric that scores worse",
        ),
        ({"prefer": "lower", "filter": {"above": 0.8, "below": 0.1}}, None),
        ({"prefer": "higher", "filter": {"below": 0.1}}, None),
    ],
)
def test_risk_is_weighed_only_where_more_load_scores_worse(metric: dict[str, Any], error: str | None) -> None:
    # The term moves a node's value the way the pod's load does: toward a target it would
    # score better, and on a metric that falls with load, preferred lower, too.
    estimate = {"resource": "cpu", "podQuery": POD_QUERY, "learn": True, "scoreRisk": True}
    raw = {
        **CONFIG,
        "prometheus": {"url": "http://prometheus:9090"},
        "metrics": [{"name": "cpu", "source": "prometheus", "query": "q", "estimate": estimate, **metric}],
    }
    if error is None:
        parsed = parse_config(raw).metrics[0].estimate
        assert parsed is not None and parsed.score_risk
    else:
        with pytest.raises(ConfigError, match=error):
            parse_config(raw)


def test_learning_is_asked_for_and_off_by_default() -> None:
    raw = {
        **CONFIG,
        "prometheus": {"url": "http://prometheus:9090"},
        "metrics": [
            {
                "name": "cpu",
                "source": "prometheus",
                "query": "q",
                "estimate": {"resource": "cpu", "podQuery": POD_QUERY, "learn": True, "deviations": 1},
            },
            {
                "name": "plain",
                "source": "prometheus",
                "query": "q",
                "estimate": {"resource": "cpu", "podQuery": POD_QUERY},
            },
        ],
    }
    learned, plain = parse_config(raw).metrics
    assert learned.estimate is not None and learned.estimate.learns and learned.estimate.deviations == 1.0
    assert plain.estimate is not None and not plain.estimate.learns


@pytest.mark.parametrize("loop", ["scheduler", "shadow", "none"])
def test_while_nothing_builds_the_values_the_estimate_still_learns_from_new_samples(loop: str) -> None:
    """A workload measured while the queue is empty (a Deployment before its scale-up) teaches
    the estimate before the next pod comes: the scheduling loop and the shadow loop, idle,
    build the values every LEARN_EVERY_S. Without those looks nothing would be learned until
    a pod was placed (or, in shadow mode, compared)."""
    m = learned_metric()
    clock = Clock(T0)
    state = cluster(m, clock)
    source = PodUsageSource(clock)
    nodes = list(state.nodes.values())
    store = MetricStore([m], source, None, lambda: nodes, clock=clock)  # type: ignore[arg-type]
    measured = measured_pods([2.0] * LEARN_MIN_PODS)
    for p, _ in measured:
        state.on_pod("ADDED", p, None)
    state.sync()
    config = Config(metrics=(m,))
    scheduler = Scheduler(
        config,
        state,
        SchedulingQueue(clock),
        None,
        Telemetry(),
        lambda: True,
        store,  # type: ignore[arg-type]
    )
    shadow = Shadow(config, state, store, Telemetry())  # type: ignore[arg-type]
    source.pods = {f"default/{p['metadata']['name']}": used for p, used in measured}
    looks = 0
    for k in range(RAMP_SPAN + 1):
        clock.now = T0 + LEARN_EVERY_S * k
        store.refresh(m)
        store.refresh_pods(m)
        if loop != "none":
            looks += (scheduler if loop == "scheduler" else shadow).load.keep_learning(state.snapshot)
    learned = store.learned().get("cpu") or {}
    assert learned.get("ratio") == (pytest.approx(2.0) if loop != "none" else None)
    assert looks == (RAMP_SPAN + 1 if loop != "none" else 0)


def test_values_built_for_a_cycle_leave_nothing_for_the_idle_look_to_learn() -> None:
    """The idle look builds the values only where nothing else has for LEARN_EVERY_S: a cycle,
    a rebalancing look or a comparison on the same recent pods already taught the estimate."""
    m = learned_metric()
    clock = Clock(T0)
    state = cluster(m, clock)
    store = MetricStore([m], PodUsageSource(clock), None, lambda: list(state.nodes.values()), clock=clock)  # type: ignore[arg-type]
    placing, idle = LoadModel(store, state.recent), LoadModel(store, state.recent)
    store.refresh(m)
    placing.scheduling(state.snapshot())
    clock.now = T0 + LEARN_EVERY_S - 1
    assert not idle.keep_learning(state.snapshot)
    clock.now = T0 + LEARN_EVERY_S
    assert idle.keep_learning(state.snapshot)
    assert not idle.keep_learning(state.snapshot)
    clock.now = T0 - 60  # the wall clock set back: the idle look does not wait for it to catch up
    assert idle.keep_learning(state.snapshot)
    # With no fresh sample nothing is taught, and the idle loop still waits before trying again.
    stale = cluster(m, clock)
    store = MetricStore([m], PodUsageSource(clock), None, lambda: list(stale.nodes.values()), clock=clock)  # type: ignore[arg-type]
    waiting = LoadModel(store, stale.recent)
    assert waiting.keep_learning(stale.snapshot)
    assert not waiting.keep_learning(stale.snapshot)
    plain = learned_metric(learn=False)
    unlearning = cluster(plain, clock)
    store = MetricStore(
        [plain], PodUsageSource(clock), None, lambda: list(unlearning.nodes.values()), clock=clock
    )  # type: ignore[arg-type]
    store.refresh(plain)
    assert not LoadModel(store, unlearning.recent).keep_learning(unlearning.snapshot)
