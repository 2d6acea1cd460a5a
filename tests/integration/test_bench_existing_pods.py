"""``ksched bench --cluster --existing-pods`` at a small size, on a busy control plane.

100 nodes already running 3,000 pods, a drain of 500, a rolling update of 500 at 100 pods/s, with
one core spinning (``--cpu-hog 1``): every phase of every scheduler ends with each pod the bench
created accounted for by UID and bound, and no node over-committed. Timings are printed (the
table), never asserted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ksched.cluster.build import missing_binaries
from tests.integration.helpers import unavailable

pytestmark = pytest.mark.cluster

NODES, EXISTING, DRAIN, CHURN, STEADY = 100, 3000, 500, 500, 100


def test_every_pod_is_accounted_for_on_a_filled_busy_cluster(tmp_path: Path) -> None:
    if shutil.which("go") is None and missing_binaries(with_helm=False):
        unavailable("Go is not installed and no cached binaries exist")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "ksched.commands.cli", "bench", "--cluster", "--json"]
    command += ["--nodes", str(NODES), "--existing-pods", str(EXISTING), "--pods", str(DRAIN)]
    command += ["--churn-pods", str(CHURN), "--churn-rate", "100", "--steady-pods", str(STEADY)]
    command += ["--cpu-hog", "1", "--out", str(out)]
    proc = subprocess.run(
        command,
        env={**os.environ, "KSCHED_CLUSTER_DIR": str(tmp_path / "cluster")},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    print(proc.stderr[-4000:])
    table = out / "table.md"
    print(table.read_text() if table.exists() else proc.stdout[-4000:])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    doc = json.loads((out / "results.json").read_text())
    assert doc["fill"]["kinds"]["daemonset"] == NODES and sum(doc["fill"]["kinds"].values()) == EXISTING
    assert [f["scheduler"] for f in doc["figures"]] == ["null-binder", "kube-scheduler", "ksched"]
    for f in doc["figures"]:
        who = f["scheduler"]
        # The census after each phase: no pod lost or left unbound, no node over-committed.
        assert f["error"] is None and f["violations"] == [], (who, f["error"], f["violations"])
        assert (f["drain_bound"], f["churn_bound"], f["steady_bound"]) == (DRAIN, CHURN, STEADY), who
        assert f["relist_bound"] == doc["relist_pods"], who
