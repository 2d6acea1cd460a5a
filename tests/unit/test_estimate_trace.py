"""The quality bench's trace of one pod's estimate: which pods it asks about, which one it
keeps (one that came to count at its measured usage), its true usage beside it, and how the
report tells it."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest

from ksched.bench.quality.estimates import CANDIDATES, Point, candidates, trace
from ksched.bench.quality.figures import QualityFigures, QualityResults
from ksched.bench.quality.report import table
from ksched.cluster.load import BASE, RAMP_SECONDS, REFERENCE_CPU
from tests.conftest import pod


def ramping_pod(
    name: str, ramp_s: float = 120.0, scheduler: str = "ksched", app: str | None = None
) -> dict[str, Any]:
    p = pod(name, cpu="500m", memory=None, scheduler=scheduler)
    p["metadata"]["annotations"] = {BASE: repr(1.5), RAMP_SECONDS: repr(ramp_s)}
    p["metadata"]["labels"] = {"app": app or name}
    return p


def test_the_candidates_are_kscheds_pods_of_other_workloads_ramping_over_one_to_two_minutes() -> None:
    pods = [
        ramping_pod("short", 30.0),
        ramping_pod("theirs", 90.0, scheduler="default-scheduler"),
        ramping_pod("long", 170.0),
        ramping_pod("web-0", 90.0, app="web"),
        ramping_pod("web-1", 90.0, app="web"),
        ramping_pod("mid", 60.0),
        ramping_pod("flat", 0.0),
        ramping_pod("api", 120.0),
    ]
    assert candidates(pods, "ksched") == ["default/web-0", "default/mid", "default/api"][:CANDIDATES]
    assert candidates(pods[:3], "ksched") == ["default/short", "default/long"], "the first created, else"


def polled(*points: Point) -> list[tuple[str, Point]]:
    return [("cpu", p) for p in points]


def test_the_pod_that_settled_with_the_most_points() -> None:
    points = {
        "default/settled": polled(
            (5.0, 750.0, "prior", None), (10.0, 750.0, "ramping", 100.0), (15.0, 700.0, "measured", 700.0)
        ),
        "default/still": polled(*((float(a), 750.0, "ramping", 100.0) for a in range(5, 50, 5))),
        "default/short": polled((5.0, 750.0, "measured", 700.0)),
    }
    pods = [ramping_pod(n) for n in ("settled", "still", "short")]
    got = trace(points, pods)
    assert got is not None
    assert got.pod == "default/settled", "still never counted at its measured usage"
    assert got.settled_at_s == 15.0 and len(got.points) == 3
    assert (got.request, got.base, got.ramp_s) == (500.0, 1.5, 120.0)
    assert got.truth(60.0) == pytest.approx(375.0), "half way up its 2-minute ramp to 750m"
    assert got.truth(600.0) == pytest.approx(750.0)
    assert trace({"default/still": points["default/still"]}, pods) is None
    late = {"default/settled": polled((60.0, 750.0, "ramping", 100.0), (65.0, 700.0, "measured", 700.0))}
    assert trace(late, pods) is None, "first seen a minute after its bind: not from placement"


def test_the_report_tells_the_trace_and_results_json_keeps_it() -> None:
    points = {"default/web": polled((10.0, 750.0, "ramping", 100.0), (15.0, 300.0, "measured", 300.0))}
    traced = QualityFigures("ksched", "slow-start", 96, estimate=trace(points, [ramping_pod("web")]))
    results = QualityResults({}, [QualityFigures("kube-scheduler", "slow-start", 96), traced])
    text = table(results)
    assert "one pod's estimate, slow-start / ksched: default/web (cpu): requests 500" in text
    assert "     10 s: counted     750 (ramping), measured     100, true      62" in text
    run = json.loads(json.dumps(asdict(traced)))
    assert run["estimate"]["points"] == [[10.0, 750.0, "ramping", 100.0], [15.0, 300.0, "measured", 300.0]]


def test_a_best_effort_pods_true_usage_multiplies_its_reference_cpu() -> None:
    """The load simulation multiplies a pod without a CPU request by its reference CPU (else
    10m), so its trace's true usage is not zero."""
    points = {"default/be": polled((5.0, 100.0, "configured", None), (30.0, 650.0, "measured", 650.0))}
    be = pod("be", cpu=None, memory=None)
    be["metadata"]["annotations"] = {BASE: repr(1.3), REFERENCE_CPU: "500m"}
    got = trace(points, [be])
    assert got is not None and got.request == 500.0
    assert got.described()[0].startswith("default/be (cpu): reference CPU 500, uses 1.3x")
    assert got.truth(30.0) == pytest.approx(650.0)
    del be["metadata"]["annotations"][REFERENCE_CPU]
    got = trace(points, [be])
    assert got is not None and got.truth(30.0) == pytest.approx(13.0), "1.3 x the simulation's 10m"
