"""The chaos soak, short: two leader-elected replicas under every kind of fault, overlapping.

It runs ``ksched bench --chaos`` as a user would, on a local control plane of its own, and
checks the invariants it reads back from the API server and its audit log. These are
correctness checks; the soak's timings are printed, never asserted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

from ksched.bench.chaos.figures import FAULT_KINDS, SHARDED_FAULT_KINDS
from ksched.cluster.build import missing_binaries
from tests.integration.helpers import unavailable

pytestmark = pytest.mark.cluster


def soak(*args: str) -> dict[str, Any]:
    """``ksched bench --chaos`` with ``args``, short: its figures, once it held every invariant."""
    if shutil.which("go") is None and missing_binaries(with_helm=False):
        unavailable("Go is not installed and no cached binaries exist")
    if shutil.which("prometheus") is None and not os.path.exists("/usr/bin/prometheus"):
        unavailable("Prometheus is not installed")
    cmd = [sys.executable, "-m", "ksched.commands.cli", "bench", "--chaos", *args]
    cmd += ["--nodes", "300", "--minutes", "1.5", "--rate", "8", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420, check=False)
    assert proc.stdout.strip(), proc.stderr[-4000:]
    figures: dict[str, Any] = json.loads(proc.stdout)
    print("\n" + proc.stderr[-3000:] + "\n" + json.dumps(figures, indent=1))
    assert figures["violations"] == [], proc.stderr[-4000:]
    assert proc.returncode == 0
    return figures


def test_short_chaos_soak_loses_no_pod_and_binds_only_as_leader() -> None:
    figures = soak("--seed", "7")
    assert figures["pods_lost"] == 0
    assert figures["overcommitted_nodes"] == 0
    assert figures["constraint_violations"] == 0
    assert figures["binds_by_non_leader"] == 0
    assert figures["gangs_partly_bound"] == 0
    assert figures["victims_without_preemptor"] == 0
    assert figures["replicas_running"] == 2
    assert figures["replica_exits"] == 0, "a replica exited without being told to"
    # The soak did what it says: pods arrived and were bound by ksched, every kind of fault was
    # injected, the leader changed hands, and preemptors evicted their victims.
    assert figures["pods_bound"] >= 0.8 * figures["pods_created"] - figures["pods_deleted_by_soak"]
    assert figures["binds_by_ksched"] > 0
    assert set(figures["faults"]) == set(FAULT_KINDS)
    assert figures["leader_changes"] >= 1
    assert figures["victims"] > 0
    assert figures["watch_relists"] > 0, "the compaction made the replicas relist"


def test_short_chaos_soak_of_three_sharded_replicas_binds_each_pod_once_onto_its_binders_node() -> None:
    """``--replicas 3``: every replica binds, each onto the nodes it owns, while any of them is
    killed or frozen and the control plane restarts under them."""
    figures = soak("--replicas", "3", "--seed", "13")
    assert figures["sharded"] and figures["replicas"] == 3
    assert figures["pods_lost"] == 0
    assert figures["overcommitted_nodes"] == 0
    assert figures["binds_by_non_owner"] == 0
    assert figures["gangs_partly_bound"] == 0
    assert figures["replicas_running"] == 3
    assert figures["replica_exits"] == 0, "a replica exited without being told to"
    assert figures["pods_bound"] >= 0.8 * figures["pods_created"] - figures["pods_deleted_by_soak"]
    assert set(figures["faults"]) == set(SHARDED_FAULT_KINDS)
    # Kills and freezes changed who is live, and the replicas bound in turn.
    assert figures["membership_changes"] >= 1
    assert figures["binds_by_ksched"] > 0
