"""The side-by-side's summary row: medians over rounds, and ksched's ratio to the null binder."""

from __future__ import annotations

from typing import Any

import pytest

from ksched.bench.sidebyside.report import null_ratios, render_fill_curve, render_summary
from ksched.bench.sidebyside.run import _schedulers
from ksched.bench.sidebyside.workloads import fill_pods
from ksched.errors import KschedError


def phase(
    scheduler: str, round_: int, writes: float, drain: float, p99: float | None, over: int = 0
) -> dict[str, Any]:
    return {
        "scheduler": scheduler,
        "workload": "bare",
        "round": round_,
        "error": None,
        "pods_per_s": drain,
        "writes_pods_per_s": writes,
        "cpu_ms_per_pod": 0.5,
        "peak_rss_mib": 100.0,
        "p50_ms": 10.0,
        "p99_ms": p99,
        "overcommitted_nodes": over,
    }


def doc(*phases: dict[str, Any], rounds: int) -> dict[str, Any]:
    return {"schedulers": ["null-binder", "ksched"], "rounds": rounds, "phases": list(phases)}


def test_each_figure_is_the_median_of_the_rounds_and_the_ratio_pairs_each_round() -> None:
    d = doc(
        phase("null-binder", 0, 500, 500, 40),
        phase("ksched", 0, 450, 800, 30),
        phase("ksched", 1, 520, 820, 34, over=1),
        phase("null-binder", 1, 520, 520, None),
        phase("null-binder", 2, 600, 600, 50),
        phase("ksched", 2, 600, 900, 38),
        rounds=3,
    )
    assert null_ratios(d, "bare") == [0.9, 1.0, 1.0]
    (row,) = [r for r in render_summary(d).splitlines() if r.startswith("| bare pods")]
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[1:4] == ["520 / 820", "520 / 520", "1.00 (0.90, 1.00, 1.00)"]
    # A round without a figure (no steady phase) is left out of that figure's median.
    assert cells[7] == "45 / 34"
    # Over-committed nodes: the worst round, not a median.
    assert cells[8] == "0 / 1"
    assert "median of 3 rounds" in render_summary(d)


def test_one_round_reads_as_before() -> None:
    d = doc(phase("null-binder", 0, 500, 500, 40), phase("ksched", 0, 475, 800, 30), rounds=1)
    (row,) = [r for r in render_summary(d).splitlines() if r.startswith("| bare pods")]
    assert [c.strip() for c in row.split("|")[1:-1]][1:4] == ["500 / 800", "500 / 475", "0.95"]
    assert "median" not in render_summary(d)


def test_p50_and_p99_are_those_of_every_rounds_steady_pods_together() -> None:
    # Round 0's slow pods are 3 of its 100; round 1 has none. The median of the rounds' p99s
    # would read 25 ms (45 and 5), a latency no pod had; of all 200 pods 1.5 % took 45 ms.
    slow = [(i * 0.04, 45.0 if i < 3 else 5.0) for i in range(100)]
    fast = [(i * 0.04, 5.0) for i in range(100)]
    d = doc(
        phase("null-binder", 0, 500, 500, 6) | {"steady_pods": 100, "steady_latencies": fast},
        phase("ksched", 0, 500, 800, 45) | {"steady_pods": 100, "steady_latencies": slow},
        phase("ksched", 1, 500, 800, 5) | {"steady_pods": 100, "steady_latencies": fast},
        phase("null-binder", 1, 500, 500, 6) | {"steady_pods": 100, "steady_latencies": fast},
        rounds=2,
    )
    (row,) = [r for r in render_summary(d).splitlines() if r.startswith("| bare pods")]
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[6:8] == ["5 / 5", "5 / 45"]
    assert "p99 create→bind ms (null-binder / ksched, 2 rounds' steady pods)" in render_summary(d)


def test_replicas_run_each_ksched_once_per_count_under_its_own_label() -> None:
    kscheds, labels, replicas = _schedulers(["null-binder", "ksched"], ["old=/opt/old/bin/ksched"], [1, 3])
    assert labels == ["null-binder", "ksched", "ksched-x3", "old", "old-x3"]
    assert replicas == {"ksched": 1, "ksched-x3": 3, "old": 1, "old-x3": 3}
    assert kscheds["old-x3"] == kscheds["old"] == ["/opt/old/bin/ksched"]
    _, labels, _ = _schedulers(["ksched"], [], [2])
    assert labels == ["ksched-x2"]
    with pytest.raises(KschedError, match="--replicas"):
        _schedulers(["ksched"], [], [0])


def test_the_fill_curve_gives_each_steps_conflicts_against_its_binds() -> None:
    steps = [
        {"fill": 0.5, "pods": 100, "bound": 100, "handoffs": 0, "conflicts": 0, "pods_per_s": 400.0},
        {"fill": 0.95, "pods": 50, "bound": 40, "handoffs": 3, "conflicts": 1, "pods_per_s": 200.0},
    ]
    fill = phase("ksched-x3", 0, 300.0, 300.0, None) | {
        "workload": "fill",
        "fill_steps": steps,
        "pending_that_fit": 0,
    }
    table = render_fill_curve(doc(phase("ksched", 0, 300.0, 300.0, None), fill, rounds=1))
    assert "| scheduler | to 50% of the cpu | to 95% of the cpu | left pending that fit |" in table
    assert "| ksched-x3 | 100/100; 0 + 0 = 0.0% | 40/50; 3 + 1 = 10.0% | 0 |" in table
    # The null binder, which skips the fill, reads "-" in the summary, not "error".
    summary = render_summary(doc(fill, rounds=1) | {"schedulers": ["null-binder", "ksched-x3"]})
    assert "| - / 300 |" in summary
    assert render_fill_curve(doc(phase("ksched", 0, 300.0, 300.0, None), rounds=1)) == ""


def test_fill_pods_request_at_least_the_cpu_asked_in_the_sizes_turn() -> None:
    sizes = ((250, 512), (1000, 2048))
    pods, millis = fill_pods("ns", "ksched", 3, 1500, sizes)
    # From the 4th size on: 1000, 250, 1000 -> 2250 >= 1500.
    assert [p["metadata"]["name"] for p in pods] == ["f-3", "f-4", "f-5"]
    assert [p["spec"]["containers"][0]["resources"]["requests"]["cpu"] for p in pods] == [
        "1000m",
        "250m",
        "1000m",
    ]
    assert millis == 2250
