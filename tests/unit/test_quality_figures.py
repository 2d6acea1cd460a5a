"""The quality benchmark's judgement of node utilisation, and its scenarios' determinism."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from ksched.bench.pods import cpu_seconds
from ksched.bench.quality.figures import (
    MAX_MISSING,
    QualityFigures,
    QualityResults,
    Series,
    ShapeFigures,
    hottest_nodes,
    judge,
    node_cores,
    pool_load,
    replicas_together,
    unjudged,
)
from ksched.bench.quality.observe import Arrivals
from ksched.bench.quality.pooled import count_over_threshold, placed_over_threshold, placing
from ksched.bench.quality.rebalance import RebalanceFigures
from ksched.bench.quality.report import table
from ksched.bench.quality.scenarios import DEFAULT_SCHEDULER, SCENARIOS, scenario
from ksched.cluster.load import BASE, RAMP_SECONDS


@pytest.mark.parametrize(
    ("name", "samples", "bound", "want"),
    [
        pytest.param(
            "one node hot for two of three 30 s samples",
            [{"a": 0.9, "b": 0.1}, {"a": 0.85, "b": 0.2}, {"a": 0.5, "b": 0.2}],
            {"p": "a"},
            {"hotspot_node_minutes": 1.0, "max_utilisation": 0.9, "pods_on_hot_nodes": 0},
            id="hot-then-cool",
        ),
        pytest.param(
            "a node with no sample counts as idle, and pods on the node hot at the end count",
            [{"a": 0.95}, {"a": 0.95}],
            {"p": "a", "q": "a", "r": "b"},
            {"hotspot_node_minutes": 1.0, "pods_on_hot_nodes": 2, "cv": 1.0},
            id="missing-node-idle",
        ),
        pytest.param(
            "evenly loaded nodes: no spread, nothing hot",
            [{"a": 0.4, "b": 0.4}],
            {},
            {"hotspot_node_minutes": 0.0, "cv": 0.0, "p95_utilisation": 0.4},
            id="even",
        ),
    ],
)
def test_judge(
    name: str, samples: list[dict[str, float]], bound: dict[str, str], want: dict[str, float]
) -> None:
    figures = QualityFigures("s", "x", len(bound))
    series = Series([30.0 * i for i in range(len(samples))], samples, 30.0)
    judge(figures, series, ["a", "b"], bound, threshold=0.8)
    got = {k: getattr(figures, k) for k in want}
    assert got == want, name
    assert len(figures.bands) == len(samples)


def test_the_excess_over_the_line_tells_a_pool_just_over_it_from_one_heaped_far_over() -> None:
    """A pool whose load cannot all stay under the line: spread evenly, every node reads a
    little over it; heaped on one node, the others stay under and that node runs far over. The
    hot node-minutes favour the heap; the excess over the line does not."""
    nodes = [f"n{i}" for i in range(4)]
    even = [{n: 0.85 for n in nodes}] * 4
    heaped = [{"n0": 1.4, "n1": 0.8, "n2": 0.8, "n3": 0.4}] * 4
    figures = {}
    for label, samples in (("even", even), ("heaped", heaped)):
        figures[label] = QualityFigures(label, "herd", 0)
        judge(figures[label], Series([15.0 * t for t in range(4)], samples, 15.0), nodes, {}, 0.8)
    # A minute of samples: four nodes 0.05 over, against one node 0.6 over.
    assert (figures["even"].hotspot_node_minutes, figures["heaped"].hotspot_node_minutes) == (4.0, 1.0)
    assert (figures["even"].excess_node_minutes, figures["heaped"].excess_node_minutes) == (0.2, 0.6)
    assert "excess_node_minutes" in figures["even"].summary(), "--json prints it"
    # Both pools ended at 0.85 on average, past the line: no placement keeps them all under.
    assert (figures["even"].end_load, figures["heaped"].end_load, figures["even"].line) == (0.85, 0.85, 0.8)


def test_the_pools_load_weighs_each_node_by_its_cores() -> None:
    """An 8-core node at 0.9 and a 4-core node at 0.6 hold 9.6 of 12 cores' worth: 0.8, not
    the 0.75 of their plain mean; a pool whose nodes state no cores weighs them alike."""
    ends_of = {"big": 0.9, "small": 0.6}
    assert pool_load(ends_of, {"big": 8.0, "small": 4.0, "elsewhere": 16.0}) == pytest.approx(0.8)
    assert pool_load(ends_of, None) == pytest.approx(0.75)
    assert pool_load(ends_of, {}) == pytest.approx(0.75)
    assert pool_load({}, None) == 0.0


def _replica(name: str, owner: str | None, node: str | None) -> dict[str, object]:
    refs = [{"kind": "ReplicaSet", "name": owner, "controller": True}] if owner else []
    return {
        "metadata": {"name": name, "namespace": "ns", "ownerReferences": refs},
        "spec": {"nodeName": node},
    }


def test_replicas_together_counts_the_replicas_that_share_a_node_with_their_own_workload() -> None:
    pods = [
        _replica("a-0", "a", "n1"),
        _replica("a-1", "a", "n1"),  # beside a-0
        _replica("a-2", "a", "n2"),
        _replica("b-0", "b", "n2"),  # beside a-2, another workload's: apart
        _replica("c-0", "c", None),  # pending: not counted
        _replica("bare", None, "n1"),  # no workload: not counted
    ]
    assert replicas_together(pods) == 0.5
    assert replicas_together([]) == 0.0


def test_a_round_whose_scrape_stopped_is_not_judged() -> None:
    """A node without a sample counts as idle, so a round that Prometheus stopped scraping
    would read as a pool with no hot node: it is a violation instead of a figure."""
    nodes = [f"n{i}" for i in range(20)]
    full = {n: 0.9 for n in nodes}
    stopped = QualityFigures("ksched", "mixed-schedulers", 1)
    judge(stopped, Series([0.0, 15.0, 30.0, 45.0], [full, {}, {}, {}], 15.0), nodes, {}, threshold=0.8)
    assert stopped.missing_samples == 0.75
    (why,) = unjudged(stopped)
    assert why.startswith(
        "mixed-schedulers/ksched: Prometheus has no utilisation for 75% of the node samples"
    )
    one_gap = QualityFigures("ksched", "burst", 1)
    samples = [full] * 19 + [{n: 0.9 for n in nodes[1:]}]  # one node missing from one sample
    judge(one_gap, Series([15.0 * i for i in range(20)], samples, 15.0), nodes, {}, threshold=0.8)
    assert one_gap.missing_samples <= MAX_MISSING and unjudged(one_gap) == []


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_scheduler_sees_the_same_pods_with_the_same_usage(name: str) -> None:
    a = scenario(name, 40, "ns-a", "ksched", seed=5, rate=10)
    b = scenario(name, 40, "ns-b", DEFAULT_SCHEDULER, seed=5, rate=10)
    assert [p["metadata"]["annotations"] for p in a.pods] == [p["metadata"]["annotations"] for p in b.pods]
    assert [p["spec"]["containers"] for p in a.pods] == [p["spec"]["containers"] for p in b.pods]
    other_seed = scenario(name, 40, "ns-a", "ksched", seed=6, rate=10)
    if name != "load-shift":
        assert [p["metadata"]["annotations"][BASE] for p in a.pods] != [
            p["metadata"]["annotations"][BASE] for p in other_seed.pods
        ]


def test_mixed_schedulers_leaves_half_the_pods_to_default_scheduler() -> None:
    pods = scenario("mixed-schedulers", 40, "ns", "ksched", seed=1, rate=10).pods
    assert sum(p["spec"]["schedulerName"] == DEFAULT_SCHEDULER for p in pods) == 20
    burst = scenario("burst", 10, "ns", "ksched", seed=1, rate=10)
    assert burst.burst_from == 5, "the second half arrives at once"
    identical = {p["metadata"]["annotations"][BASE] for p in burst.pods[5:]}
    assert identical == {"1.2"}, "the burst is one rollout's identical pods"


def test_the_table_gives_each_setups_p99_create_to_bind() -> None:
    """A cautious estimate that leaves pods waiting shows: each pod's create to bind, to the
    second, and the 99th percentile of them in the table."""

    def made(name: str, created: str, bound: str | None) -> dict[str, object]:
        conditions = (
            [] if bound is None else [{"type": "PodScheduled", "status": "True", "lastTransitionTime": bound}]
        )
        return {
            "metadata": {"name": name, "creationTimestamp": created},
            "status": {"conditions": conditions},
        }

    pods = [made(f"p{i}", "2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z") for i in range(99)]
    pods += [
        made("slow", "2026-01-01T00:00:00Z", "2026-01-01T00:01:41Z"),
        made("pending", "2026-01-01T00:00:00Z", None),
    ]
    arrivals = Arrivals({}, [(0.0, [])])
    figures = QualityFigures("ksched", "herd", len(pods))
    placing(figures, arrivals, pods, now=datetime(2026, 1, 1, 0, 5, tzinfo=UTC).timestamp())  # type: ignore[arg-type]
    assert (figures.p99_bind_s, figures.max_bind_s) == (101.0, 300.0), "the pending pod waits 300 s so far"
    header, row = table(QualityResults({}, figures=[figures])).splitlines()[:2]
    assert header.split()[-7:-2] == ["p99", "bind", "s", "over", "line"] and row.split()[-3:-1] == [
        "101",
        "-",
    ]
    assert figures.bind_waits == {1: 99, 101: 1, 300: 1}, "a few held back, not every pod slow"
    assert "herd / ksched: 1 s: 99, 101 s: 1, 300 s: 1" in table(QualityResults({}, figures=[figures]))


def test_the_rebalance_table_shows_the_evictions_after_the_window_apart() -> None:
    figures = QualityFigures("ksched-rebalance", "synchronized-bursts", 10)
    figures.rebalance = RebalanceFigures(seconds_to_cool=30.0, evictions=4, evictions_after_window=3)
    lines = table(QualityResults({}, figures=[figures])).splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("scenario") and "evictions" in line)
    columns = [c.strip() for c in lines[header].split("  ") if c.strip()]
    row = lines[header + 1].split()
    assert columns[3:5] == ["evictions", "after window"] and row[3:5] == ["4", "3"]


def test_the_table_counts_the_pods_placed_over_a_threshold_once_each() -> None:
    """What ``onSaturation: leastLoaded`` cost shows beside the hot node-minutes: each pod with
    a PlacedOverThreshold event counts once, however many metrics it was placed over."""

    def event(reason: str, pod: str) -> dict[str, object]:
        return {"reason": reason, "regarding": {"kind": "Pod", "namespace": "q", "name": pod}}

    events = [
        event("Scheduled", "a"),
        event("PlacedOverThreshold", "a"),
        event("PlacedOverThreshold", "a"),
        event("PlacedOverThreshold", "b"),
        event("FailedScheduling", "c"),
    ]
    figures = QualityFigures("ksched", "herd", 3)
    figures.over_threshold = placed_over_threshold(events)
    assert figures.over_threshold == 2
    header, row = table(QualityResults({}, figures=[figures])).splitlines()[:2]
    assert header.split()[-4:-2] == ["over", "line"] and row.split()[-2] == "2"
    assert figures.summary()["over_threshold"] == 2


def test_events_that_cannot_be_listed_leave_the_over_line_count_out_not_the_round() -> None:
    class Refusing:
        def request(self, *args: object, **kwargs: object) -> object:
            return SimpleNamespace(ok=False, status=503, data=b"etcd is down")

    said: list[str] = []
    counted = count_over_threshold(Refusing(), "q-ksched", said.append)  # type: ignore[arg-type]
    assert counted is None
    assert said == [
        "q-ksched: pods placed over a threshold not counted: listing events: HTTP 503: b'etcd is down'"
    ]
    kube = QualityFigures("kube-scheduler", "herd", 3)
    lost = QualityFigures("ksched", "herd", 3)
    lost.over_threshold = counted
    rows = table(QualityResults({}, figures=[kube, lost])).splitlines()[1:3]
    assert [r.split()[-2] for r in rows] == ["-", "-"], "not counted reads '-', not 0"


def test_the_table_gives_each_kscheds_cpu_seconds_read_from_its_process() -> None:
    """What the metrics cost shows beside ksched without metrics in the same round: each
    ksched process's CPU seconds, read while it runs; a process that ended reads none."""
    with subprocess.Popen(
        [sys.executable, "-c", "sum(range(3_000_000)); input()"], stdin=subprocess.PIPE
    ) as proc:
        deadline = time.monotonic() + 30
        while (used := cpu_seconds(proc)) is not None and used < 0.01 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.communicate(b"\n")
    assert used is not None and used >= 0.01, "the CPU it spent counting"
    assert cpu_seconds(proc) is None, "ended (and reaped): nothing to read"
    kube, ksched = QualityFigures("kube-scheduler", "herd", 3), QualityFigures("ksched", "herd", 3)
    ksched.cpu_s = 41.6
    header, *rows = table(QualityResults({}, figures=[kube, ksched])).splitlines()[:3]
    assert header.split()[-2:] == ["CPU", "s"]
    assert [r.split()[-1] for r in rows] == ["-", "42"], "kube-scheduler runs no ksched: '-'"
    assert ksched.summary()["cpu_s"] == 41.6


def test_figures_per_node_shape_show_which_shape_took_the_pods_and_ran_hot() -> None:
    def node(name: str, cpu: str) -> dict[str, object]:
        return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": cpu, "memory": "8Gi"}}}

    cores = node_cores(
        [node("a", "2"), node("b", "2000m"), node("c", "8"), node("d", "8"), node("e", "lots")]
    )
    assert cores == {"a": 2.0, "b": 2.0, "c": 8.0, "d": 8.0, "e": 0.0}, "a CPU that does not read: 0"
    # Two minutes at a 15 s step: a runs at 0.9 throughout, b cools from 0.9 to 0.5 for the
    # last minute, the 8-core nodes stay cool.
    values = [{"a": 0.9, "b": 0.9 if t < 4 else 0.5, "c": 0.4, "d": 0.6} for t in range(8)]
    series = Series([15.0 * t for t in range(8)], values, 15.0)
    bound = {f"p{i}": n for i, n in enumerate(["a"] * 3 + ["b"] + ["c"] * 8 + ["d"] * 9)}
    figures = QualityFigures("ksched", "herd", len(bound))
    judge(figures, series, ["a", "b", "c", "d"], bound, 0.8, cores)
    assert figures.shapes == [
        ShapeFigures(
            cores=2.0,
            nodes=2,
            pods_per_node=2.0,
            pods_sd=1.0,
            hotspot_node_minutes=3.0,
            end_mean=0.7,
            end_max=0.9,
        ),
        ShapeFigures(
            cores=8.0,
            nodes=2,
            pods_per_node=8.5,
            pods_sd=0.5,
            hotspot_node_minutes=0.0,
            end_mean=0.5,
            end_max=0.6,
        ),
    ]
    # Where the nodes ended: 0.9, 0.5, 0.4 and 0.6, a mean of 0.6 and a deviation of 0.187.
    assert figures.end_cv == 0.312, "the spread of where the nodes ended, apart from the fill"

    assert figures.hotspot_node_minutes == 3.0, "the shapes' hot node-minutes add up to the pool's"
    lines = table(QualityResults({}, figures=[figures])).splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[:3] == ["scenario", "scheduler", "node"])
    assert [line.split() for line in lines[at + 1 : at + 3]] == [
        ["herd", "ksched", "2", "2", "2.00", "1.00", "3.0", "0.70", "0.90"],
        ["herd", "ksched", "8", "2", "8.50", "0.50", "0.0", "0.50", "0.60"],
    ]
    same = QualityFigures("ksched", "herd", len(bound))
    judge(same, series, ["c", "d"], bound, 0.8, cores)
    assert len(same.shapes) == 1
    assert "node cpu" not in table(QualityResults({}, figures=[same])), "one shape: no table per shape"


def test_the_hottest_nodes_name_the_pods_that_made_them_hot_and_whose_first_replicas_they_were() -> None:
    def pod(name: str, owner: str, node: str, cpu: str, base: str, bound_at: float) -> dict[str, object]:
        p = _replica(name, owner, node)
        p["metadata"]["annotations"] = {BASE: base, RAMP_SECONDS: "90"}  # type: ignore[index]
        p["spec"]["containers"] = [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]  # type: ignore[index]
        return p

    # a runs hot for a minute, b for half a minute, c never.
    values = [{"a": 0.9 if t >= 4 else 0.5, "b": 0.85 if t >= 6 else 0.3, "c": 0.2} for t in range(8)]
    series = Series([1000.0 + 15.0 * t for t in range(8)], values, 15.0)
    pods = [
        pod("w1-0", "w1", "c", "500m", "0.5", 1010.0),
        pod("w1-1", "w1", "a", "2", "2.6", 1020.0),
        pod("w2-0", "w2", "a", "250m", "1.0", 1005.0),
        pod("w2-1", "w2", "b", "1", "1.5", 1030.0),
    ]
    bound_at = {"w1-0": 1010.0, "w1-1": 1020.0, "w2-0": 1005.0, "w2-1": 1030.0}
    hottest = hottest_nodes(series, pods, bound_at, 0.8, {"a": 4.0, "b": 2.0, "c": 8.0}, top=3)
    assert [(h.node, h.hot_minutes) for h in hottest] == [("a", 1.0), ("b", 0.5)], "hottest first, none cool"
    a = hottest[0]
    assert (a.cores, a.end) == (4.0, 0.9)
    assert {p.name: (p.request_m, p.base, p.nth, p.bound_s) for p in a.pods} == {
        "w1-1": (2000, 2.6, 2, 20.0),
        "w2-0": (250, 1.0, 1, 5.0),
    }
    first, *rest = a.described()
    assert first == "a (4 cores): 1 hot min, ended at 0.90"
    assert rest[0].startswith("  w1-1: requests 2000m, uses 2.60x, ramps 90 s, bound at 20 s, replica #2 of ")
    assert hottest_nodes(series, pods, bound_at, 0.95, {"a": 4.0, "b": 2.0, "c": 8.0}) == []
    # A pod whose annotations do not read, and one never seen bound, are still described.
    odd = pod("w3-0", "w3", "b", "1", "lots", 0.0)
    odd["metadata"]["annotations"][RAMP_SECONDS] = "soon"  # type: ignore[index]
    (b,) = hottest_nodes(series, [odd], {}, 0.8, {"b": 2.0})
    assert b.pods[0].base is None and b.pods[0].ramp_s == 0.0 and b.pods[0].nth == 0
    assert b.described()[1] == "  w3-0: requests 1000m, uses -, bound at ?"
