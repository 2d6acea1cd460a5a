"""``--existing-pods``' table: the drain against the null binder's, and every violation listed."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ksched.bench.sidebyside.existing_report import render_existing
from ksched.bench.sidebyside.options import ExistingFigures


def _doc(*figures: ExistingFigures) -> dict[str, Any]:
    return {
        "machine": "2 cores",
        "nodes": 100,
        "existing_pods": 3000,
        "fill": {"seconds": 5.0, "pods_per_s": 600.0, "most_on_a_node": 100},
        "drain_pods": 500,
        "churn_pods": 500,
        "churn_rate": 100.0,
        "steady_pods": 100,
        "rate": 50.0,
        "cpu_hog": 1,
        "peak_rss_mib": {"kube-apiserver": 500.0, "etcd": 100.0},
        "figures": [asdict(f) for f in figures],
    }


def test_drain_is_given_against_the_null_binder() -> None:
    null = ExistingFigures("null-binder", drain_pods_per_s=400.0)
    synced = "informers synced 3.0 s after the process started: 100 nodes, 3000 pods (pods listed in ...)"
    ksched = ExistingFigures(
        "ksched", drain_pods_per_s=380.0, relist_loop_pause_s=0.25, startup_profile=[synced]
    )
    table = render_existing(_doc(null, ksched))
    row = next(line for line in table.splitlines() if line.startswith("| ksched |"))
    assert "| 380 | 0.95 |" in row and "| 0.25 |" in row
    assert "CPU hog on 1 core(s)" in table and "kube-apiserver 500" in table
    assert "VIOLATED" not in table
    # ksched's start-up profile follows the table; the null binder logs none.
    assert table.splitlines()[-2:] == ["(a) start-up, from ksched's log:", f"- ksched: {synced}"]


def test_violations_and_errors_are_listed_under_the_table() -> None:
    lost = ExistingFigures("kube-scheduler", violations=["churn: 2 pod(s) lost (first: a/b, a/c)"])
    failed = ExistingFigures("ksched", error="ksched exited with 1:\ntraceback")
    table = render_existing(_doc(lost, failed))
    assert "- kube-scheduler: churn: 2 pod(s) lost (first: a/b, a/c)" in table
    assert "| ksched | error: ksched exited with 1: |" in table
    assert "| 1 |" in next(line for line in table.splitlines() if line.startswith("| kube-scheduler |"))
