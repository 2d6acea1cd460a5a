"""`ksched bench --quality` at a small size: every pod ends bound or reported, no node is
over-committed, and the figures come from the load the simulation really put on the nodes;
a pooled load-shift round with the rebalancing setups (the descheduler, ksched's rebalancer)
reports what each moved. (Its own small cluster with the load simulation; timings and
quality are never asserted.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ksched.bench.quality.run import REBALANCE_SETUPS, SCHEDULERS, QualityOptions, run_quality
from ksched.cluster import local
from ksched.cluster.build import missing_binaries
from tests.integration.helpers import unavailable

pytestmark = pytest.mark.cluster


def test_a_small_quality_run_accounts_for_every_pod_and_measures_real_load(
    cluster: local.ClusterState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KSCHED_CLUSTER_DIR", str(tmp_path / "cluster"))
    out = tmp_path / "out"
    opts = QualityOptions(
        nodes=8, pods=24, scenarios=("burst",), observe_s=12.0, scrape_interval_s=2.0, seed=3, out=out
    )
    results = run_quality(opts, log=print)

    assert results.violations == []
    assert [(f.scenario, f.scheduler) for f in results.figures] == [("burst", s) for s in SCHEDULERS]
    for f in results.figures:
        # Bound, or reported unschedulable by its scheduler: none is silently pending.
        assert f.pods == 24
        # A burst of pods using 1.2 times their requests shows on the nodes, whoever placed them.
        assert f.max_utilisation > 0.1, f
        assert f.bands, f
    document = json.loads((out / "results.json").read_text())
    assert set(document["scenarios"]["burst"]) == set(SCHEDULERS)
    assert (out / "utilisation.png").stat().st_size > 0


def test_a_small_rebalancing_round_accounts_for_every_pod_and_reports_its_moves(
    cluster: local.ClusterState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("go") is None and missing_binaries(with_helm=False, with_descheduler=True):
        unavailable("Go is not installed and the descheduler is not cached")
    monkeypatch.setenv("KSCHED_CLUSTER_DIR", str(tmp_path / "cluster"))
    out = tmp_path / "out"
    opts = QualityOptions(
        nodes=12,
        pods=12,
        scenarios=("load-shift",),
        schedulers=REBALANCE_SETUPS,
        pools=True,
        observe_s=20.0,
        scrape_interval_s=2.0,
        seed=3,
        out=out,
    )
    results = run_quality(opts, log=print)

    # Every pod (replacements of evicted pods included) ends bound or reported, none is lost
    # but those evicted, and no node is over-committed.
    assert results.violations == []
    assert sorted(f.scheduler for f in results.figures) == sorted(REBALANCE_SETUPS)
    document = json.loads((out / "results.json").read_text())
    for setup in REBALANCE_SETUPS:
        moves = document["scenarios"]["load-shift"][setup]["rebalance"]
        assert {
            "seconds_to_cool",
            "evictions",
            "pingpong",
            "pdb_violations",
            "pending_after_eviction",
        } <= set(moves), setup
