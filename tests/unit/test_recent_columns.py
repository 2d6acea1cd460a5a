"""The recent pods' columns, brought up to date from the pods that changed
(:class:`ksched.loop.metrics.recent_columns.ColumnsCache`), are the columns built whole from
the pods, whatever came, left, changed or aged out in between, and whatever the node rows."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ksched.config import EstimateConfig, MetricConfig
from ksched.engine.pods import pod_requests
from ksched.engine.snapshot import Snapshot, build_snapshot
from ksched.loop.metrics.recent_columns import RecentColumns
from ksched.loop.metrics.recent_pods import RecentPods
from tests.conftest import node, pod

T0 = 1_800_000_000.0
QUERY = "node:node_cpu_utilisation:ratio"
# Two estimating metrics, so that each keeps its own pairs of (kind, workload).
METRICS = (
    MetricConfig(
        name="cpu",
        source="prometheus",
        query=QUERY,
        estimate=EstimateConfig(resource="cpu", learn=True, pod_query="pod_cpu"),
    ),
    MetricConfig(name="memory", source="prometheus", query=QUERY, estimate=EstimateConfig(resource="memory")),
)
KEYS = [f"default/p{i}" for i in range(30)]
WORKLOADS = ("web", "batch", "api", None)


class Clock:
    now = T0

    def __call__(self) -> float:
        return self.now


def made(name: str, workload: str | None, cpu: str | None) -> dict[str, Any]:
    p = pod(name, cpu=cpu, memory="64Mi" if cpu else None)
    if workload is not None:
        p["metadata"]["ownerReferences"] = [
            {"kind": "ReplicaSet", "name": workload, "controller": True, "uid": f"rs-{workload}"}
        ]
    return p


def snapshot(nodes: int) -> Snapshot:
    return build_snapshot([node(f"n{i}", cpu="4") for i in range(nodes)], [])


def same(got: RecentColumns, want: RecentColumns) -> None:
    for field in RecentColumns.__dataclass_fields__:
        a, b = getattr(got, field), getattr(want, field)
        if isinstance(b, np.ndarray):
            assert a.dtype == b.dtype and a.shape == b.shape, field
            assert np.array_equal(a, b), field
        else:
            assert a == b, field


track = st.tuples(
    st.just("track"),
    st.sampled_from(KEYS),
    st.integers(0, 4),
    st.sampled_from(WORKLOADS),
    st.sampled_from(("100m", "1", None)),
)
operations = st.lists(
    st.one_of(
        track,
        st.tuples(
            st.just("change"),
            st.sampled_from(KEYS),
            st.sampled_from(WORKLOADS),
            st.sampled_from(("200m", "2")),
        ),
        st.tuples(st.just("drop"), st.sampled_from(KEYS)),
        st.tuples(st.just("wait"), st.floats(0.0, 200.0)),
        st.tuples(st.just("read"), st.integers(2, 5)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(track, min_size=10, max_size=30), operations)
def test_columns_brought_up_to_date_are_the_columns_built_whole(
    first: list[tuple[Any, ...]], ops: list[tuple[Any, ...]]
) -> None:
    clock = Clock()
    recent = RecentPods(METRICS, clock)
    snapshots = {n: snapshot(n) for n in range(2, 6)}
    current = snapshots[3]
    uid = 0
    for op in first + ops:
        if op[0] == "track":
            _, key, n, workload, cpu = op
            uid += 1
            p = made(key.split("/")[1], workload, cpu)
            recent.track(key, f"uid-{uid}", f"n{n}", clock.now - 1, True, p, pod_requests(p))
        elif op[0] == "change" and op[1] in recent.pods:
            _, key, workload, cpu = op
            p = made(key.split("/")[1], workload, cpu)
            recent.changed(key, p, pod_requests(p))
        elif op[0] == "drop":
            recent.drop(op[1])
        elif op[0] == "wait":
            clock.now += op[1]  # pods past the horizon leave at the next track
        elif op[0] == "read":
            current = snapshots[op[1]]
        got = recent.columns(current)
        same(got, RecentColumns.of(recent.pods, current.index, len(METRICS)))
        assert recent.columns(current) is got, "read again unchanged: the same columns"


def test_a_herds_cycle_adds_its_pods_to_the_columns_and_drops_those_that_left() -> None:
    clock = Clock()
    recent = RecentPods(METRICS, clock)
    snap = snapshot(4)
    for i in range(8):
        p = made(f"p{i}", "web", "100m")
        recent.track(f"default/p{i}", f"uid-{i}", f"n{i % 4}", T0, True, p, pod_requests(p))
    before = recent.columns(snap)
    recent.drop("default/p2")
    p = made("p8", "api", "1")
    recent.track("default/p8", "uid-8", "n1", T0, True, p, pod_requests(p))
    after = recent.columns(snap)
    assert after.keys == [k for k in before.keys if k != "default/p2"] + ["default/p8"]
    web, api = before.pairs[0][0], after.pairs[0][1]
    assert (web[1], api[1]) == ("default/ReplicaSet/web", "default/ReplicaSet/api")
    assert after.pairs[0] == [web, api]
    assert after.pair_index[:, 0].tolist() == [0] * 7 + [1]
    assert after.pairs[1] == [(web[0], None)], "the memory estimate learns nothing: no workload"
    assert after.rows.tolist() == [0, 1, 3, 0, 1, 2, 3, 1]


def test_a_pod_tracked_again_on_the_same_sample_is_read_anew_not_passed_over_as_settled() -> None:
    """A cycle passes over the pods an earlier cycle found settled on the same pod sample; a pod
    that left in between (its series with it) and came back is read anew: ramping again."""
    clock = Clock()
    recent = RecentPods(METRICS[:1], clock)
    snap = snapshot(2)
    p = made("p0", "web", "1")
    recent.track("default/p0", "uid-0", "n0", T0, True, p, pod_requests(p))

    def cycle(at: float) -> str:
        clock.now = at + 1
        # Level with noise: each scrape reads another value.
        used = 500.0 + (at - T0) % 20
        recent.add_to(snap, METRICS[0], at, np.zeros(2), measured={"default/p0": used}, measured_at=at)
        [counted] = recent.counted_as("default/p0") or []
        return str(counted["source"])

    sources = [cycle(T0 + 15 * k) for k in range(1, 6)]
    assert sources[-1] == "measured", f"level for three samples and more: settled ({sources})"
    assert cycle(T0 + 75) == "measured", "the same sample read again: still settled"
    recent.drop("default/p0")
    recent.track("default/p0", "uid-0", "n0", T0, True, p, pod_requests(p))
    assert cycle(T0 + 75) == "ramping", "its series went with it: one sample cannot say it is level"
