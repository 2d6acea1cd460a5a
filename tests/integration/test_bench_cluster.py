"""``ksched bench --cluster`` at a small size: the side-by-side runs to the end on its own control plane.

It asserts what must hold whatever the machine: every pod is bound by kube-scheduler and ksched with
no node over-committed and no constraint broken, the null binder binds every pod, and the JSON,
table and chart are written. Timings are printed (the table), never asserted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ksched.bench.sidebyside.options import DEFAULT_WORKLOADS, FILL_STEPS
from ksched.bench.sidebyside.phase import percentile
from ksched.cluster.build import missing_binaries
from tests.integration.helpers import unavailable

pytestmark = pytest.mark.cluster

NODES = 50
PODS = 100
STEADY = 40


def side_by_side(tmp_path: Path, *args: str) -> tuple[Path, dict[str, Any]]:
    """``ksched bench --cluster`` with ``args`` on a control plane of its own, beside the session's
    (a separate state directory): its output directory and results."""
    if shutil.which("go") is None and missing_binaries(with_helm=False):
        unavailable("Go is not installed and no cached binaries exist")
    out = tmp_path / "out"
    env = {**os.environ, "KSCHED_CLUSTER_DIR": str(tmp_path / "cluster")}
    command = [sys.executable, "-m", "ksched.commands.cli", "bench", "--cluster"]
    command += ["--nodes", str(NODES), "--pods", str(PODS), *args, "--out", str(out)]
    proc = subprocess.run(
        command,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    print(proc.stdout[-6000:])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out, json.loads((out / "results.json").read_text())


def test_side_by_side_binds_every_pod_without_overcommit(tmp_path: Path) -> None:
    out, doc = side_by_side(tmp_path, "--steady-pods", str(STEADY), "--rate", "40")
    phases = {(p["scheduler"], p["workload"]): p for p in doc["phases"]}
    assert set(phases) == {
        (s, w) for s in ("null-binder", "kube-scheduler", "ksched") for w in DEFAULT_WORKLOADS
    }
    for (scheduler, workload), p in phases.items():
        assert p["error"] is None, (scheduler, workload, p["error"])
        assert (p["bound"], p["steady_bound"]) == (PODS, STEADY), (scheduler, workload)
        assert len(p["bind_times"]) == PODS and p["p99_ms"] is not None
        # Each steady pod's latency, in the order sent: those the phase's p99 was taken from
        # (recorded to 0.01 ms, the p99 to 0.1 ms).
        sent_at = [t for t, _ in p["steady_latencies"]]
        assert len(sent_at) == STEADY and sent_at == sorted(sent_at), (scheduler, workload)
        recorded = [ms for _, ms in p["steady_latencies"]]
        assert abs(percentile(recorded, 0.99) - p["p99_ms"]) <= 0.06, (scheduler, workload)
        assert p["peak_rss_mib"] > 0, (scheduler, workload)
        # Read from the API server's metrics: how many watchers it closed for falling behind.
        assert isinstance(p["watchers_closed"], int), (scheduler, workload)
        # Every scheduler posts a Scheduled event per bound pod; the drain's writes end at or after its binds.
        assert p["scheduled_events"] == PODS, (scheduler, workload, p["scheduled_events"])
        assert p["writes_seconds"] >= p["drain_seconds"] > 0, (scheduler, workload)
        if scheduler != "null-binder":
            # The null binder binds round-robin: it may over-commit or break a constraint.
            assert p["overcommitted_nodes"] == 0 and p["constraint_violations"] == 0, (scheduler, workload, p)
            assert p["cpu_ms_per_pod"] > 0, (scheduler, workload)
            assert p["control_plane_cpu_ms_per_pod"] > 0, (scheduler, workload)
    # ksched scheduled the metrics workload with both Prometheus metrics live, not degraded.
    assert "2 live metric(s) fresh" in phases[("ksched", "metrics")]["metrics_status"]
    table = (out / "table.md").read_text()
    assert all(f"| {w} | ksched |" in table for w in DEFAULT_WORKLOADS)
    assert (out / "bound-over-time.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob("cluster/state.json")), "the control plane was torn down"


def test_rounds_alternate_the_order_and_the_summary_takes_medians(tmp_path: Path) -> None:
    out, doc = side_by_side(
        tmp_path,
        "--steady-pods",
        "0",
        "--rounds",
        "2",
        "--workloads",
        "bare",
        "--schedulers",
        "null-binder,ksched",
        "--node-lease-seconds",
        "600",
    )
    # KWOK keeps the nodes' Leases as asked (the default, a day, keeps their renewals out of the drains).
    assert doc["node_lease_seconds"] == 600
    assert "node Leases of 600 s" in (out / "table.md").read_text()
    # Every pod of both rounds bound (a round's own namespace: the first round's pods and
    # events do not count in the second's), the second round in the reverse order.
    assert [(p["round"], p["scheduler"], p["bound"]) for p in doc["phases"]] == [
        (0, "null-binder", PODS),
        (0, "ksched", PODS),
        (1, "ksched", PODS),
        (1, "null-binder", PODS),
    ]
    ratios = [
        next(p for p in doc["phases"] if p["round"] == r and p["scheduler"] == "ksched")["writes_pods_per_s"]
        / next(p for p in doc["phases"] if p["round"] == r and p["scheduler"] == "null-binder")[
            "writes_pods_per_s"
        ]
        for r in (0, 1)
    ]
    summary = (out / "table.md").read_text()
    assert f"| {sum(ratios) / 2:.2f} ({ratios[0]:.2f}, {ratios[1]:.2f}) |" in summary
    assert "median of 2 rounds" in summary


def test_three_sharded_replicas_fill_the_cluster_to_95_percent_without_overcommit(tmp_path: Path) -> None:
    """The fill workload with three sharded replicas (alone: a single ksched's fill would
    double the test's minutes): the pods bound step by step, none over a node's capacity,
    none left pending that fits a node, and the replicas' hand-offs and refused binds
    counted per step."""
    out, doc = side_by_side(
        tmp_path,
        "--steady-pods",
        "0",
        "--workloads",
        "fill",
        "--schedulers",
        "null-binder,ksched",
        "--replicas",
        "3",
    )
    # The null binder skips the fill: it binds round-robin, with no regard to room.
    assert [p["scheduler"] for p in doc["phases"]] == ["ksched-x3"]
    (sharded,) = doc["phases"]
    assert sharded["error"] is None, sharded["error"]
    assert [step["fill"] for step in sharded["fill_steps"]] == list(FILL_STEPS)
    # Only near full may a pod find no node with room (fragments): most are bound.
    assert sharded["bound"] >= 0.9 * sharded["pods"], (
        sharded["bound"],
        sharded["pods"],
        sharded["fill_steps"],
    )
    assert sharded["overcommitted_nodes"] == 0 and sharded["pending_that_fit"] == 0, sharded
    assert sharded["replicas"] == 3 and len(sharded["cpu_ms_per_pod_by_replica"]) == 3
    assert sum(step["handoffs"] for step in sharded["fill_steps"]) == sharded["handoffs"]
    assert "| ksched-x3 | " in (out / "table.md").read_text().split("Fill: ")[1]
