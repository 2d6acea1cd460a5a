"""The side-by-side's summary row: medians over rounds, and ksched's ratio to the null binder."""

from __future__ import annotations

from typing import Any

from ksched.commands.sidebyside import null_ratios, render_summary


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
