"""The pooled setups that turn on steering, the rebalancer for kube-scheduler's pods and the
shadow; mixed-replicasets' ownership; and the shadow estimate check's arithmetic."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import yaml

from ksched.bench.quality.figures import QualityFigures, QualityResults, ShadowOutcomes
from ksched.bench.quality.gap import gap_rows, gaps
from ksched.bench.quality.marks import MarkFigures
from ksched.bench.quality.observe import ksched_config
from ksched.bench.quality.pooled import POOL_LABEL, Round, _scenario
from ksched.bench.quality.run import EXAMPLE_CONFIG, EXAMPLE_REBALANCE_CONFIG, QualityOptions, _config_of
from ksched.bench.quality.scenarios import (
    CONTROLLED,
    DEFAULT_SCHEDULER,
    EXPECTED_CPU,
    KUBE_SCHEDULER,
    ORACLE,
    controllers,
)
from ksched.bench.quality.setups import (
    KSCHED_STEER,
    KSCHED_STEER_REBALANCE,
    ORACLE_STEER,
    SHADOW,
    pool_config,
)
from ksched.bench.quality.shadow_estimate import check, shadow_rows
from ksched.config import parse_config

PROMETHEUS = "http://127.0.0.1:9090"
POOL = {POOL_LABEL: "2"}


def _config(label: str, namespace: str = "q-x-ksched-steer-rebalance", observe_s: float = 180.0) -> object:
    path = _config_of(QualityOptions(pools=True), label)
    doc = pool_config(ksched_config(path, PROMETHEUS, label), label, POOL, namespace, observe_s)
    return parse_config(doc)


def test_the_steering_setups_mark_only_their_own_pool() -> None:
    for label in (KSCHED_STEER, KSCHED_STEER_REBALANCE):
        steering = _config(label).steering  # type: ignore[attr-defined]
        assert steering.enabled, label
        assert steering.selects({POOL_LABEL: "2"}) and not steering.selects({POOL_LABEL: "1"}), label
    assert _config_of(QualityOptions(pools=True), KSCHED_STEER) == EXAMPLE_CONFIG
    assert _config_of(QualityOptions(pools=True), KSCHED_STEER_REBALANCE) == EXAMPLE_REBALANCE_CONFIG


def test_a_configuration_of_its_own_that_steers_marks_only_its_own_pool(tmp_path: Path) -> None:
    # ``--quality-config candidate=FILE`` with steering on: a mark on another setup's node
    # would steer that setup's kube-scheduler pods.
    doc = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    doc["steering"] = {"enabled": True, "maxShare": 0.5}
    path = tmp_path / "candidate.yaml"
    path.write_text(yaml.safe_dump(doc))
    config = parse_config(
        pool_config(ksched_config(path, PROMETHEUS, "candidate"), "candidate", POOL, "q", 180.0)
    )
    steering = config.steering
    assert steering.enabled and steering.max_share == 0.5
    assert steering.selects(POOL) and not steering.selects({POOL_LABEL: "1"})
    r = Round((("mixed-schedulers", "candidate"),), 16, 96, 1, 8.0, 180.0, 15.0, 0.8, {"candidate": path})
    assert r.steers("candidate"), "its marks' timeline is judged"
    shadow = Round((("requests-lie", SHADOW),), 16, 96, 1, 8.0, 180.0, 15.0, 0.8, {SHADOW: path})
    assert not shadow.steers(SHADOW), "shadow mode never marks"
    plain = Round(
        (("mixed-schedulers", "ksched"),), 16, 96, 1, 8.0, 180.0, 15.0, 0.8, {"ksched": EXAMPLE_CONFIG}
    )
    assert not plain.steers("ksched") and plain.steers(KSCHED_STEER)
    unchanged = parse_config(
        pool_config(ksched_config(EXAMPLE_CONFIG, PROMETHEUS, "ksched"), "ksched", POOL, "q", 180.0)
    )
    assert not unchanged.steering.enabled


def test_oracle_steer_steers_with_every_pods_true_usage_kube_schedulers_too() -> None:
    steering = _config(ORACLE_STEER).steering  # type: ignore[attr-defined]
    assert steering.enabled and steering.selects(POOL) and not steering.selects({POOL_LABEL: "1"})
    assert _config_of(QualityOptions(pools=True), ORACLE_STEER) == EXAMPLE_CONFIG
    r = Round((("mixed-schedulers", ORACLE_STEER),), 16, 96, 1, 8.0, 180.0, 15.0, 0.8, {})
    _, s = _scenario(r, 0, "mixed-schedulers", ORACLE_STEER)
    asks = collections.Counter(p["spec"]["schedulerName"] for p in s.pods)
    assert asks == {ORACLE_STEER: 48, DEFAULT_SCHEDULER: 48}
    assert all(EXPECTED_CPU in p["metadata"]["annotations"] for p in s.pods)
    _, plain = _scenario(r, 0, "mixed-schedulers", KSCHED_STEER)
    assert not any(EXPECTED_CPU in p["metadata"]["annotations"] for p in plain.pods)


def test_each_setup_is_measured_to_the_oracle_of_its_own_means() -> None:
    results = QualityResults({})
    for label, hot in (
        (KUBE_SCHEDULER, 20.0),
        ("ksched", 10.0),
        (ORACLE, 10.0),
        (KSCHED_STEER, 5.0),
        (ORACLE_STEER, 0.0),
    ):
        f = QualityFigures(label, "mixed-schedulers", 10)
        f.hotspot_node_minutes = hot
        results.figures.append(f)
    found = gaps(results)["mixed-schedulers"]
    assert set(found) == {"ksched", KSCHED_STEER}, "the oracles are references, not rows"
    assert found["ksched"].gap_closed == 1.0  # at the placing oracle's 10
    assert found[KSCHED_STEER].gap_closed == 0.75  # 15 of the 20 to steering's oracle
    no_steering_oracle = QualityResults({}, [f for f in results.figures if f.scheduler != ORACLE_STEER])
    assert (
        gaps(no_steering_oracle)["mixed-schedulers"][KSCHED_STEER].not_judged
        == "no oracle-steer in this round"
    )
    # A configuration of its own whose marks were judged is a steering setup too.
    candidate = QualityFigures("steer-2s", "mixed-schedulers", 10)
    candidate.hotspot_node_minutes = 10.0
    candidate.marks = MarkFigures()
    with_candidate = QualityResults({}, [*results.figures, candidate])
    assert gaps(with_candidate)["mixed-schedulers"]["steer-2s"].gap_closed == 0.5  # 10 of 20
    only_steering = QualityResults({}, [f for f in results.figures if f.scheduler != ORACLE])
    assert gap_rows(only_steering)[1:] == [
        ("mixed-schedulers", "ksched", "10.0", "50%", "-", "0.00", "no oracle in this round"),
        ("mixed-schedulers", KSCHED_STEER, "5.0", "25%", "-", "0.00", "75%"),
    ], "one oracle ran: the table is shown, each row against its own"


def test_steer_rebalance_moves_default_schedulers_pods_of_its_own_namespace_only() -> None:
    config = _config(KSCHED_STEER_REBALANCE, namespace="q-mixed-replicasets-ksched-steer-rebalance")
    assert config.rebalance.enabled  # type: ignore[attr-defined]
    other = config.rebalance.other_schedulers  # type: ignore[attr-defined]
    assert other.opted_in(DEFAULT_SCHEDULER, "q-mixed-replicasets-ksched-steer-rebalance")
    assert not other.opted_in(DEFAULT_SCHEDULER, "q-mixed-replicasets-kube-scheduler")
    assert not _config(KSCHED_STEER).rebalance.enabled  # type: ignore[attr-defined]


def test_the_shadow_compares_its_namespace_over_the_observation_window() -> None:
    config = _config(SHADOW, namespace="q-requests-lie-shadow", observe_s=180.0)
    assert config.shadow.enabled and config.shadow.namespaces == ("q-requests-lie-shadow",)  # type: ignore[attr-defined]
    # The load-aware estimate's window is 90 s: the horizon, window plus margin, is the 180 s window.
    assert config.outcomes.margin_s == 90.0  # type: ignore[attr-defined]
    assert not config.steering.enabled  # type: ignore[attr-defined]


def test_mixed_replicasets_gives_half_of_each_setups_workloads_to_kube_scheduler_all_owned() -> None:
    r = Round((("mixed-replicasets", "ksched"),), 16, 96, 1, 8.0, 180.0, 15.0, 0.8, {})
    namespace, s = _scenario(r, 3, "mixed-replicasets", "ksched")
    assert "mixed-replicasets" in CONTROLLED and s.controlled
    asks = collections.Counter(p["spec"]["schedulerName"] for p in s.pods)
    assert asks == {"ksched": 48, DEFAULT_SCHEDULER: 48}
    owners = controllers(s.pods)
    sets = [o for o in owners if o["kind"] == "ReplicaSet"]
    assert sum(o["spec"]["replicas"] for o in sets) == len(s.pods), "every pod is owned"
    # A replacement asks the scheduler its workload's pods asked, on the entry's pool.
    by_scheduler = collections.Counter(o["spec"]["template"]["spec"]["schedulerName"] for o in sets)
    assert by_scheduler == {"ksched": 16, DEFAULT_SCHEDULER: 16}
    assert all(o["spec"]["template"]["spec"]["nodeSelector"] == {POOL_LABEL: "3"} for o in sets)
    budgeted = {o["metadata"]["name"] for o in owners if o["kind"] == "PodDisruptionBudget"}
    scheduler_of = {o["metadata"]["name"]: o["spec"]["template"]["spec"]["schedulerName"] for o in sets}
    assert collections.Counter(scheduler_of[b] for b in budgeted) == {"ksched": 8, DEFAULT_SCHEDULER: 8}
    assert all(p["metadata"]["namespace"] == namespace for p in s.pods)


def _outcomes(avoided: float, theirs: float = 10.0) -> ShadowOutcomes:
    return ShadowOutcomes(96, 96, theirs, theirs - avoided, 0, avoided)


@pytest.mark.parametrize(
    ("scenario", "shadow_pool", "ksched_pool", "avoided", "error", "within", "why"),
    [
        ("requests-lie", 12.0, 2.0, 8.0, -0.2, True, ""),
        ("requests-lie", 12.0, 2.0, 14.0, 0.4, False, ""),
        ("requests-lie", 3.0, 5.0, 1.0, 1.5, False, ""),
        ("requests-lie", 2.5, 2.0, 1.0, None, None, "measured difference under 1"),
        ("mixed-schedulers", 12.0, 2.0, 8.0, None, None, "holds kube-scheduler's pods too"),
        ("requests-lie", 12.0, None, 8.0, None, None, "no ksched pool"),
    ],
    ids=["within", "over", "ksched pool hotter", "too small", "mixed", "no ksched"],
)
def test_the_shadow_estimate_against_the_measured_difference(
    scenario: str,
    shadow_pool: float,
    ksched_pool: float | None,
    avoided: float,
    error: float | None,
    within: bool | None,
    why: str,
) -> None:
    c = check(scenario, shadow_pool, _outcomes(avoided), ksched_pool)
    assert (c.relative_error, c.within) == (error, within)
    assert why in c.not_judged


def test_the_shadow_table_puts_the_estimate_beside_the_measured_difference() -> None:
    results = QualityResults({})
    results.figures += [
        QualityFigures(SHADOW, "requests-lie", 96, hotspot_node_minutes=12.0, shadow=_outcomes(8.0)),
        QualityFigures("ksched", "requests-lie", 96, hotspot_node_minutes=2.0),
    ]
    header, row = shadow_rows(results)
    assert dict(zip(header, row, strict=True)) == {
        "scenario": "requests-lie",
        "shadow pool hot node-min": "12.0",
        "shadow's own count": "10.0 (96/96 judged)",
        "ksched pool hot node-min": "2.0",
        "measured avoided": "10.0",
        "estimated avoided": "8.0",
        "relative error": "-20%",
        "within ±30%": "yes",
    }
