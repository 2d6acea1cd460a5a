"""Property tests: the Rust engine agrees with the pure-Python reference on random clusters."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ksched.config import Config, MetricConfig, ProfileConfig
from ksched.engine import Engine, reference
from ksched.engine.snapshot import build_snapshot
from tests.conftest import node, pod

ZONES = ["z1", "z2", "z3"]
TAINTS = [
    {"key": "gpu", "value": "true", "effect": "NoSchedule"},
    {"key": "spot", "value": "", "effect": "PreferNoSchedule"},
    {"key": "maint", "value": "x", "effect": "NoExecute"},
]
TOLERATIONS = [
    {"key": "gpu", "operator": "Exists"},
    {"key": "spot", "operator": "Exists", "effect": "PreferNoSchedule"},
    {"key": "maint", "value": "x", "effect": "NoExecute"},
    {"operator": "Exists"},
]
METRICS = (
    MetricConfig(name="load", source="prometheus", query="load", prefer="lower", above=0.8, weight=3.0),
    MetricConfig(
        name="price",
        source="annotation",
        annotation="ksched.io/price",
        prefer="target",
        target=0.5,
        missing="worst",
        weight=1.0,
    ),
)


@st.composite
def clusters(draw: Any) -> tuple[list[Any], list[Any], list[Any], dict[str, dict[str, float]], Config]:
    n = draw(st.integers(1, 8))
    nodes = []
    values: dict[str, dict[str, float]] = {}
    for i in range(n):
        name = f"n{i}"
        nodes.append(
            node(
                name,
                cpu=draw(st.sampled_from(["500m", "1", "2", "4"])),
                memory=draw(st.sampled_from(["512Mi", "1Gi", "4Gi"])),
                pods=draw(st.sampled_from(["2", "5", "110"])),
                labels={"zone": draw(st.sampled_from(ZONES)), "cores": str(draw(st.integers(1, 64)))},
                taints=draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique_by=lambda t: t["key"])),
                unschedulable=draw(st.booleans()) and draw(st.booleans()),
                extra={"nvidia.com/gpu": "2"} if draw(st.booleans()) else None,
            )
        )
        values[name] = {
            "load": draw(st.one_of(st.just(math.nan), st.floats(0, 1))),
            "price": draw(st.one_of(st.just(math.nan), st.floats(0, 2))),
        }
    existing = [
        pod(
            f"e{i}",
            cpu=draw(st.sampled_from(["100m", "300m"])),
            memory="128Mi",
            node_name=f"n{draw(st.integers(0, n - 1))}",
        )
        for i in range(draw(st.integers(0, 4)))
    ]
    pending = []
    for i in range(draw(st.integers(1, 8))):
        spec: dict[str, Any] = {}
        if draw(st.booleans()):
            spec["tolerations"] = draw(st.lists(st.sampled_from(TOLERATIONS), max_size=2))
        choice = draw(st.integers(0, 4))
        if choice == 1:
            spec["nodeSelector"] = {"zone": draw(st.sampled_from(ZONES))}
        elif choice == 2:
            op = draw(st.sampled_from(["In", "NotIn", "Gt", "Lt", "Exists", "DoesNotExist"]))
            values_ = {
                "In": ["z1", "z2"],
                "NotIn": ["z1"],
                "Gt": ["16"],
                "Lt": ["32"],
                "Exists": [],
                "DoesNotExist": [],
            }[op]
            key = "cores" if op in ("Gt", "Lt") else "zone"
            spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": key, "operator": op, "values": values_}]}
                        ]
                    }
                }
            }
        elif choice == 3:
            spec["affinity"] = {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": draw(st.integers(1, 100)),
                            "preference": {
                                "matchExpressions": [
                                    {
                                        "key": "zone",
                                        "operator": "In",
                                        "values": [draw(st.sampled_from(ZONES))],
                                    }
                                ]
                            },
                        }
                    ]
                }
            }
        if draw(st.booleans()):
            spec["priority"] = draw(st.integers(0, 3))
        p = pod(
            f"p{i}",
            cpu=draw(st.sampled_from(["100m", "500m", "1", None])),
            memory=draw(st.sampled_from(["64Mi", "1Gi", None])),
            **spec,
        )
        if draw(st.integers(0, 5)) == 0:
            p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
        if draw(st.integers(0, 5)) == 0:
            p["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        pending.append(p)
    strategy = draw(st.sampled_from(["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"]))
    # The reference covers filters and scores; preemption has its own tests.
    profile = ProfileConfig(fit_strategy=strategy, shape=((0, 0), (50, 7), (100, 10)), preemption=False)
    metrics = METRICS if draw(st.booleans()) else ()
    return nodes, existing, pending, values, Config(profiles=(profile,), metrics=metrics)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.integers(0, 2**32))
def test_engine_matches_reference(cluster: Any, seed: int) -> None:
    nodes, existing, pending, values, config = cluster
    snapshot = build_snapshot(nodes, existing)
    matrix = np.array([[values[n][m.name] for m in config.metrics] for n in snapshot.node_names]).reshape(
        len(nodes), len(config.metrics)
    )
    got = Engine(config, seed=seed).schedule(snapshot, pending, matrix).placements
    want = reference.schedule(nodes, existing, pending, config, values, seed)
    assert [p.pod for p in got] == [r.pod for r in want], "queue order"
    for g, w in zip(got, want, strict=True):
        assert g.node == w.node, f"{g.pod}: engine {g.node} ({g.message}) vs reference {w.node} ({w.message})"
        assert g.message == w.message
        if w.score is not None:
            assert g.score is not None and math.isclose(g.score, w.score, rel_tol=1e-9, abs_tol=1e-6)
