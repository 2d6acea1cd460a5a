"""`ksched bench --fuzz`, short: odd pod specs through the real API server, `ksched run` and its
webhook, and `simulate`; malformed AdmissionReviews at the webhook; odd KWOK nodes created
while ksched runs (and through simulate). The full run (10,000 specs) is the documented
command; this one checks the same outcomes on fewer. The offline kinds' small runs are in
tests/unit/test_fuzz_kinds.py."""

from __future__ import annotations

import pytest

from ksched.bench.fuzz.nodes import LIVE_PODS
from ksched.bench.fuzz.report import FuzzReport
from ksched.bench.fuzz.run import run_fuzz
from ksched.bench.fuzz.webhook import malformed_requests
from ksched.cluster import local
from ksched.commands.cli import main

pytestmark = pytest.mark.cluster

SPECS = 2500
LIVE = 600
NODES = 120


def test_fuzz_finds_no_defect(cluster: local.ClusterState) -> None:
    kinds = f"pods={SPECS},nodes={NODES}"
    report: FuzzReport = run_fuzz(SPECS, seed=7, live=LIVE, state=cluster, cli=main, kinds=kinds)
    print(report.render())
    # Nothing raised, hung or died: the loop stayed up, every accepted pod has an outcome,
    # the webhook never answered 5xx or nothing, simulate never escaped with a traceback.
    assert report.defect_count == 0, report.render()
    assert report.ksched_alive and report.ksched_tracebacks == 0
    # The specs reached every path: some accepted and some refused by the API server, some
    # accepted pods bound and some reported unschedulable, simulate's every exit code but 2's
    # neighbours, the webhook both answering and refusing.
    assert report.live_specs == LIVE and report.accepted + report.rejected == LIVE
    assert report.accepted > 0 and report.rejected > 0
    assert report.outcomes["bound"] > 0 and report.outcomes["pending with FailedScheduling"] > 0
    assert sum(report.outcomes.values()) == report.accepted
    assert report.routed_by_webhook > 0
    assert report.simulate_calls == SPECS and set(report.simulate_exit) <= {0, 1, 2}
    assert report.simulate_exit[1] > 0 and report.simulate_exit[0] > 0
    assert report.simulate_batches > 0 and set(report.simulate_batch_exit) <= {0, 1, 2}
    assert report.webhook_requests == len(malformed_requests()) + 50
    statuses = set(report.webhook_status)
    assert 200 in statuses and 400 in statuses and all(0 < s < 500 for s in statuses)
    # The odd nodes: some the API server took as KWOK nodes while ksched ran, some it refused;
    # every fuzz pod was bound meanwhile (to an odd node only where it fits: no defect); each
    # odd node also went through simulate among good nodes.
    nodes = report.results["nodes"]
    assert nodes["live accepted by the API server"] > 0 and nodes["live refused by the API server"] > 0
    assert nodes["live pod bound to a good node"] + nodes["live pod bound to an odd node"] == LIVE_PODS
    assert sum(n for r, n in nodes.items() if r.startswith("simulate exit")) == NODES
