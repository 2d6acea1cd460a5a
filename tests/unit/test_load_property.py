"""Python's load arithmetic held to the engine's (load.rs, state.rs) on random snapshots.

A probe pod at the end of a batch is filtered by the engine against the values its metric
filter reads: each node's value, plus what the batch's earlier placements added to it
(state.rs), plus the probe's own share (load.rs). The same values are computed in Python:
the earlier placements tracked as recent pods bound after the sample
(:class:`ksched.loop.metrics.recent_pods.RecentPods`, the live loop's accounting) and the probe's
share from :mod:`ksched.engine.load`, the line on each node from its threshold annotation
where it has one (:func:`ksched.engine.load.lines_on_nodes`). Each node the engine's
explanation judges by the metric must have the verdict the Python values give, on both
sides of the filter (``above`` for a busy metric, ``below`` for free capacity)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ksched.config import Config, EstimateConfig, MetricConfig
from ksched.engine import Engine
from ksched.engine.load import lines_on_nodes, shares
from ksched.engine.pods import pod_requests
from ksched.engine.snapshot import build_snapshot
from ksched.loop.metrics.recent_pods import RecentPods
from tests.conftest import node, pod

NOW = 1_800_000_000.0
# The sample is older than every placement of the batch: they all count in full.
SAMPLED_AT = NOW - 30.0
CORES = (1, 2, 4, 8, 16)
# Placements whose value sits this close to the threshold are not judged (float rounding).
MARGIN = 1e-9


@st.composite
def clusters(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(2, 8))
    return {
        "cores": [draw(st.sampled_from(CORES)) for _ in range(n)],
        "values": [draw(st.floats(0.0, 1.0)) for _ in range(n)],
        "pods": [draw(st.integers(1, 40)) * 100 for _ in range(draw(st.integers(0, 6)))],
        "probe": draw(st.integers(1, 40)) * 100,
        "line": draw(st.floats(0.2, 0.95)),
        # Some nodes carry their own threshold annotation, which replaces the pod's line there.
        "own": [draw(st.one_of(st.none(), st.floats(0.1, 0.99))) for _ in range(n)],
        "free": draw(st.booleans()),
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_the_engines_metric_verdicts_are_pythons_arithmetic(c: dict[str, Any]) -> None:
    names = [f"n{i}" for i in range(len(c["cores"]))]
    free = c["free"]
    side = "below" if free else "above"
    nodes = [
        node(
            name,
            cpu=str(cores),
            memory="64Gi",
            annotations={}
            if own is None
            else {f"threshold.ksched.io/u-{side}": f"{1.0 - own if free else own}"},
        )
        for name, cores, own in zip(names, c["cores"], c["own"], strict=True)
    ]
    # Free capacity falls with load and is filtered below a line; busy rises, filtered above.
    metric = MetricConfig(
        name="u",
        source="prometheus",
        query="q",
        above=None if free else c["line"],
        below=(1.0 - c["line"]) if free else None,
        prefer="higher" if free else "lower",
        estimate=EstimateConfig(resource="cpu", window_s=60.0),
    )
    config = Config(metrics=(metric,))
    snapshot = build_snapshot(nodes, [])
    base = np.array([(1.0 - v) if free else v for v in c["values"]], dtype=np.float64)
    values = np.empty(snapshot.count)
    for name, v in zip(names, base, strict=True):
        values[snapshot.index[name]] = v
    batch = [pod(f"p{i}", cpu=f"{m}m") for i, m in enumerate(c["pods"])]
    probe = pod("probe", cpu=f"{c['probe']}m")
    result = Engine(config).schedule(
        snapshot, [*batch, probe], values.reshape(-1, 1), explain="default/probe"
    )
    placed = {p.pod: p.node for p in result.placements}

    recent = RecentPods((metric,), clock=lambda: NOW)
    for p in batch:
        key = f"default/{p['metadata']['name']}"
        if placed.get(key) is not None:
            recent.track(key, key, placed[key], NOW, True, p, pod_requests(p))
    seen = values.copy()
    recent.add_to(snapshot, metric, SAMPLED_AT, seen)
    seen += metric.load_sign * shares(snapshot, "cpu", float(c["probe"]))

    assert result.explanation is not None
    pod_above = np.nan if metric.above is None else metric.above
    pod_below = np.nan if metric.below is None else metric.below
    above, below = lines_on_nodes(snapshot, "u", pod_above, pod_below)
    lines = below if free else above
    judged = at_line = 0
    for n in result.explanation.nodes:
        if n.plugin not in (None, "Metric/u"):
            continue  # another filter decided first (the batch filled its cpu)
        row = snapshot.index[n.node]
        v, line = float(seen[row]), float(lines[row])
        if abs(v - line) < MARGIN:
            at_line += 1
            continue
        passes = v > line if free else v < line
        assert n.feasible == passes, (n.node, v, line, n.reasons)
        judged += 1
    # Every node is judged, unless another filter decided first or it sits on the line.
    assert judged + at_line == sum(1 for n in result.explanation.nodes if n.plugin in (None, "Metric/u"))
