"""The quality bench's trace of one pod's estimate: which pod it follows (seen from near its
bind until its usage settled), its true usage beside it, and how the report tells it."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest

from ksched.bench.quality.estimates import FIRST_SEEN_S, TRACE_RANK, Poll, trace
from ksched.bench.quality.figures import QualityFigures, QualityResults
from ksched.bench.quality.report import table
from ksched.cluster.load import BASE, RAMP_SECONDS
from tests.conftest import pod


def ramping_pod(name: str, base: float = 1.5, ramp_s: float = 120.0) -> dict[str, Any]:
    p = pod(name, cpu="500m", memory=None, node_name="n0")
    p["metadata"]["annotations"] = {BASE: repr(base), RAMP_SECONDS: repr(ramp_s)}
    return p


def seen(pods: dict[str, tuple[float, float, float]]) -> list[dict[str, Any]]:
    """One poll's ``rampingPods``: name -> (age, counts, measured)."""
    return [
        {"pod": f"default/{name}", "age": age, "counts": counts, "measured": measured}
        for name, (age, counts, measured) in pods.items()
    ]


def test_the_pod_seen_longest_from_its_bind_until_it_settled() -> None:
    polls: list[Poll] = [
        (5.0, seen({"early": (10.0, 750.0, 100.0), "late": (FIRST_SEEN_S + 5, 750.0, 600.0)})),
        (10.0, seen({"early": (15.0, 750.0, 300.0), "late": (FIRST_SEEN_S + 10, 750.0, 650.0)})),
        (15.0, seen({"early": (20.0, 750.0, 500.0), "short": (5.0, 750.0, 0.0)})),
        (20.0, seen({"stuck": (5.0, 750.0, 0.0)})),
    ]
    pods = [ramping_pod(n) for n in ("early", "late", "short", "stuck")]
    got = trace({"cpu": polls}, pods)
    assert got is not None
    assert got.pod == "default/early", "late was first seen long after its bind, stuck never settled"
    assert got.points == [(10.0, 750.0, 100.0), (15.0, 750.0, 300.0), (20.0, 750.0, 500.0)]
    assert got.settled_by_s == 20.0
    assert (got.request, got.base, got.ramp_s) == (500.0, 1.5, 120.0)
    assert got.truth(60.0) == pytest.approx(375.0), "half way up its 2-minute ramp to 750m"
    assert got.truth(600.0) == pytest.approx(750.0)


def test_a_pod_far_down_the_list_or_missing_from_a_poll_is_not_traced() -> None:
    older = {f"old-{i}": (100.0, 750.0, 100.0) for i in range(TRACE_RANK)}
    polls: list[Poll] = [
        (5.0, seen(older | {"deep": (10.0, 750.0, 100.0)})),
        (10.0, seen(older | {"deep": (15.0, 750.0, 300.0)})),
        (15.0, seen({"gap": (5.0, 750.0, 0.0)})),
        (20.0, seen({})),
        (25.0, seen({"gap": (15.0, 750.0, 300.0)})),
        (30.0, seen({})),
        (35.0, seen(older)),
    ]
    pods = [ramping_pod("deep"), ramping_pod("gap")]
    assert trace({"cpu": polls}, pods) is None, "deep may have been pushed off; gap left and came back"


def test_no_pod_settled_no_trace() -> None:
    polls: list[Poll] = [(5.0, seen({"stuck": (5.0, 750.0, 0.0)}))]
    assert trace({"cpu": polls}, [ramping_pod("stuck")]) is None
    assert trace({}, []) is None


def test_the_report_tells_the_trace_and_results_json_keeps_it() -> None:
    polls: list[Poll] = [
        (5.0, seen({"web": (10.0, 750.0, 100.0)})),
        (10.0, seen({"web": (15.0, 750.0, 300.0)})),
        (15.0, seen({})),
    ]
    traced = QualityFigures("ksched", "slow-start", 96, estimate=trace({"cpu": polls}, [ramping_pod("web")]))
    results = QualityResults({}, [QualityFigures("kube-scheduler", "slow-start", 96), traced])
    text = table(results)
    assert "one pod's estimate, slow-start / ksched: default/web (cpu): requests 500" in text
    assert "     15 s: counted     750, measured     300, true      94" in text
    run = json.loads(json.dumps(asdict(traced)))
    assert run["estimate"]["points"] == [[10.0, 750.0, 100.0], [15.0, 750.0, 300.0]]
