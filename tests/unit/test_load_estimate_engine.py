"""Load estimate v2 in the engine, through ``ksched.engine``: the incoming pod's estimate
counts against a metric's thresholds, a pod's priority band has its own, pods of exempt
owners and mirror pods pass the metric filter, a node annotation overrides a threshold,
and each placement in a batch adds the pod's own estimate to its node's value."""

from __future__ import annotations

import logging
import random
from typing import Any, get_type_hints

import numpy as np
import pytest

from ksched import _core, core_types
from ksched.config import Band, Config, EstimateConfig, MetricConfig
from ksched.engine import Engine, Placement, commit_placements
from ksched.engine.snapshot import build_snapshot
from tests.conftest import node, pod

Obj = dict[str, Any]


def usage(**fields: Any) -> MetricConfig:
    """A metric ``u`` read from an annotation, above 0.8 filtered, with an estimate of cpu."""
    defaults: dict[str, Any] = {"above": 0.8, "estimate": EstimateConfig(resource="cpu"), "weight": 5.0}
    return MetricConfig(name="u", source="annotation", annotation="ksched.io/u", **{**defaults, **fields})


def place(metric: MetricConfig, nodes: list[Obj], values: list[float], *pods: Obj) -> list[Placement]:
    snapshot = build_snapshot(nodes, [])
    matrix = np.array(values, dtype=np.float64).reshape(-1, 1)
    return Engine(Config(metrics=(metric,))).schedule(snapshot, list(pods), matrix).placements


def one_cpu_nodes(count: int, annotations: dict[int, dict[str, str]] | None = None) -> list[Obj]:
    return [node(f"n{i}", cpu="1", annotations=(annotations or {}).get(i)) for i in range(count)]


def owned_by(p: Obj, kind: str) -> Obj:
    p["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": kind, "name": "owner", "uid": "u-1", "controller": True}
    ]
    return p


def with_priority(p: Obj, priority: int) -> Obj:
    p["spec"]["priority"] = priority
    return p


@pytest.mark.parametrize(
    ("name", "metric", "cpu", "limit", "placed"),
    [
        # 0.7 and 0.75 on nodes of 1 cpu: a pod estimated at 200m takes both over 0.8.
        ("the incoming pod's request counts", usage(), "200m", None, None),
        ("a pod that fits", usage(), "50m", None, "n0"),
        ("its limit counts where above its request", usage(), "50m", "200m", None),
        (
            "the legacy herd estimate does not count it",
            usage(estimate=EstimateConfig(resource="cpu", legacy=True)),
            "200m",
            None,
            "n0",
        ),
        ("no estimate: nothing counted", usage(estimate=None), "200m", None, "n0"),
    ],
)
def test_the_incoming_pod_counts_against_the_threshold(
    name: str, metric: MetricConfig, cpu: str, limit: str | None, placed: str | None
) -> None:
    p = pod("web", cpu=cpu)
    if limit is not None:
        p["spec"]["containers"][0]["resources"]["limits"] = {"cpu": limit}
    [placement] = place(metric, one_cpu_nodes(2), [0.7, 0.75], p)
    assert placement.node == placed, name
    if placed is None:
        assert placement.message is not None
        assert placement.message.startswith("0/2 nodes are available: 2 node(s) had u above 0.8."), name


@pytest.mark.parametrize(
    ("name", "priority", "cpu", "placed"),
    [
        # Nodes at 0.7 and 0.75 of 1 cpu; bands: 1000 and up above 0.95, 0 and up below 0.72.
        ("below every band: the metric's above 0.8", -5, "100m", "n0"),
        ("below every band: over 0.8 everywhere", -5, "200m", None),
        ("band 0: no above, and n0 with the pod stays below 0.72", 0, "10m", "n1"),
        ("band 1000: above 0.95", 2000, "200m", "n0"),
    ],
)
def test_a_priority_band_has_its_own_thresholds(
    name: str, priority: int, cpu: str, placed: str | None
) -> None:
    metric = usage(bands=(Band(min_priority=1000, above=0.95, below=None), Band(0, above=None, below=0.72)))
    [placement] = place(metric, one_cpu_nodes(2), [0.7, 0.75], with_priority(pod("web", cpu=cpu), priority))
    assert placement.node == placed, name


@pytest.mark.parametrize(
    ("name", "make", "placed"),
    [
        ("a DaemonSet's pod is exempt", lambda: owned_by(pod("ds", cpu="500m"), "DaemonSet"), True),
        ("a ReplicaSet's pod is not", lambda: owned_by(pod("rs", cpu="500m"), "ReplicaSet"), False),
        (
            "a mirror pod is exempt",
            lambda: {
                **pod("static", cpu="500m"),
                "metadata": {
                    "name": "static",
                    "namespace": "kube-system",
                    "annotations": {"kubernetes.io/config.mirror": "abc"},
                },
            },
            True,
        ),
    ],
)
def test_exempt_pods_pass_the_metric_filter(name: str, make: Any, placed: bool) -> None:
    [placement] = place(usage(), one_cpu_nodes(2), [0.9, 0.95], make())
    assert (placement.node is not None) == placed, name


def test_an_exempt_kind_is_the_metrics_own() -> None:
    metric = usage(exempt=("Job",))
    [job, ds] = place(
        metric,
        one_cpu_nodes(2),
        [0.9, 0.95],
        owned_by(pod("job", cpu="100m"), "Job"),
        owned_by(pod("ds", cpu="100m"), "DaemonSet"),
    )
    assert job.node is not None
    assert ds.node is None, "exempt lists only Job"


def test_a_node_annotation_overrides_the_threshold_for_every_pod() -> None:
    nodes = one_cpu_nodes(2, {1: {"threshold.ksched.io/u-above": "0.99"}})
    metric = usage(bands=(Band(min_priority=0, above=0.5, below=None),))
    [placement] = place(metric, nodes, [0.7, 0.75], with_priority(pod("web", cpu="200m"), 10))
    assert placement.node == "n1", "the node's 0.99 wins over the band's 0.5"


def test_a_node_annotation_sets_a_lower_threshold() -> None:
    nodes = one_cpu_nodes(2, {0: {"threshold.ksched.io/u-below": "0.5"}})
    [placement] = place(usage(above=None), nodes, [0.3, 0.9], pod("web", cpu="10m"))
    assert placement.node == "n1"
    assert placement.feasible_nodes == 1


def test_a_malformed_override_is_ignored_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    nodes = one_cpu_nodes(2, {0: {"threshold.ksched.io/u-above": "high"}})
    caplog.set_level(logging.WARNING, logger="ksched.engine.snapshot")
    for _ in range(2):
        [placement] = place(usage(), nodes, [0.1, 0.9], pod("web", cpu="100m"))
        assert placement.node == "n0", "the spec's threshold applies on n0"
    warned = [r for r in caplog.records if "threshold.ksched.io/u-above" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in warned]


@pytest.mark.parametrize(
    ("estimate", "second"),
    [
        # Counted at 10m (request x 0.1), the first pod leaves n0 cooler than n1.
        (EstimateConfig(resource="cpu", factor=0.1), "n0"),
        # Counted at its whole request (100m): n0 reads 0.6, n1 0.55.
        (EstimateConfig(resource="cpu", legacy=True), "n1"),
    ],
)
def test_a_placement_in_the_batch_adds_the_pods_own_estimate(estimate: EstimateConfig, second: str) -> None:
    metric = usage(above=None, estimate=estimate, weight=50.0)
    first, then = place(metric, one_cpu_nodes(2), [0.5, 0.55], pod("a", cpu="100m"), pod("b", cpu="100m"))
    assert first.node == "n0"
    assert then.node == second


def test_batches_with_bands_exemptions_and_overrides_place_as_a_fresh_engine() -> None:
    rng = random.Random(7)
    annotations = {
        i: {"threshold.ksched.io/u-above": "0.97"} if i % 4 == 0 else {"threshold.ksched.io/u-below": "0.1"}
        for i in range(0, 30, 3)
    }
    nodes = [node(f"n{i}", cpu=str(2 + i % 3), annotations=annotations.get(i)) for i in range(30)]
    metric = usage(bands=(Band(min_priority=100, above=0.9, below=None),), exempt=("DaemonSet", "Job"))
    config = Config(metrics=(metric,))
    kept, fresh = Engine(config), Engine(config, reuse=False)
    snapshot = build_snapshot(nodes, [])
    values = np.array([[rng.random() * 0.8] for _ in nodes])
    narrowed = 0
    for batch in range(6):
        pending = []
        for i in range(12):
            shape = rng.randrange(3)
            p = with_priority(
                pod(f"b{batch}-{i}", cpu=("100m", "250m", "500m")[shape]), rng.choice((0, 100, 1000))
            )
            if rng.random() < 0.3:
                p["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "1"}
            if rng.random() < 0.2:
                owned_by(p, rng.choice(("DaemonSet", "Job", "ReplicaSet")))
            pending.append(p)
        got = kept.schedule(snapshot, pending, values).placements
        want = fresh.schedule(snapshot, pending, values).placements
        assert [(p.pod, p.node, p.score, p.message) for p in got] == [
            (p.pod, p.node, p.score, p.message) for p in want
        ], batch
        snapshot = commit_placements(snapshot, got)
        values[rng.randrange(len(nodes))] = rng.random()
        # Every node has room for every pod: a node is only ever out over a threshold.
        narrowed += sum(p.feasible_nodes < len(nodes) for p in got)
    assert narrowed > 0, "the thresholds took nodes out"


def test_metric_load_has_exactly_the_typed_keys_and_the_binding_checks_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[dict[str, Any]] = []
    real = _core.schedule

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(_core, "schedule", spy)
    place(usage(), one_cpu_nodes(2), [0.1, 0.2], owned_by(pod("ds"), "DaemonSet"))
    monkeypatch.undo()
    load = calls[0]["metric_load"]
    assert set(load) == set(get_type_hints(core_types.MetricLoad))
    assert load["exempt"].tolist() == [1]
    snapshot = build_snapshot(one_cpu_nodes(2), [])
    engine = Engine(Config(metrics=(usage(),)))
    captured: list[tuple[Any, ...]] = []

    def capture(*args: Any, **kwargs: Any) -> Any:
        captured.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(_core, "schedule", capture)
    engine.schedule(snapshot, [pod("web")], np.array([[0.1], [0.2]]))
    monkeypatch.undo()
    args = captured[0]
    with pytest.raises(KeyError, match=r'metric_load: missing array "node_below"'):
        _core.schedule(*args, metric_load={k: v for k, v in load.items() if k != "node_below"})
    with pytest.raises(KeyError, match=r"metric_load: unexpected arrays \[\"stale\"\]"):
        _core.schedule(*args, metric_load={**load, "stale": np.zeros(1)})
    with pytest.raises(_core.EngineInputError, match="metric load amounts"):
        _core.schedule(*args, metric_load={**load, "amounts": np.zeros(3, dtype=np.int64)})


def test_a_metric_that_falls_with_load_is_lowered_by_the_estimate() -> None:
    """Free capacity (``prefer: higher``, ``filter.below``): a pod takes some of it. On nodes
    of 1 cpu with 0.3 and 0.5 free, a pod of 200m leaves 0.1 and 0.3: only n1 stays over 0.2;
    in a batch, the first pod's share is taken off n1 before the second is placed."""
    free = usage(above=None, below=0.2, prefer="higher")
    [alone] = place(free, one_cpu_nodes(2), [0.3, 0.5], pod("a", cpu="200m"))
    assert alone.node == "n1"
    first, second = place(free, one_cpu_nodes(2), [0.3, 0.5], pod("a", cpu="200m"), pod("b", cpu="200m"))
    assert first.node == "n1"
    assert second.node is None, "n1 is left at 0.3 free, and the second pod would take it to 0.1"
    assert second.message is not None and "2 node(s) had u below 0.2" in second.message


@pytest.mark.parametrize(
    ("prefer", "values", "placed"),
    [
        # 1 and 4 cpus reading 0.40 and 0.42: a pod of 500m leaves them at 0.90 and 0.545.
        ("lower", [0.40, 0.42], "big"),
        # Free capacity, 0.50 and 0.48: the same pod leaves 0.0 and 0.355 free.
        ("higher", [0.50, 0.48], "big"),
    ],
)
def test_a_node_is_scored_by_what_it_would_read_with_the_pod(
    prefer: str, values: list[float], placed: str
) -> None:
    """The score reads what the filter reads: the node's value with the pod's estimate over its
    allocatable. A pod goes where it leaves the node coolest, so at nearly the same reading a
    large node takes it before a small one (NodeResourcesFit scores requests with the pod's, too).
    The legacy estimate does not count the pod being placed: the small node's reading wins."""
    nodes = [node("small", cpu="1"), node("big", cpu="4")]
    for normalization in (None, (0.0, 1.0)):
        metric = usage(above=None, prefer=prefer, range=normalization, weight=50.0)
        [p] = place(metric, nodes, values, pod("p", cpu="500m"))
        assert p.node == placed, normalization
        legacy = usage(
            above=None,
            prefer=prefer,
            range=normalization,
            weight=50.0,
            estimate=EstimateConfig(resource="cpu", legacy=True),
        )
        [p] = place(legacy, nodes, values, pod("p", cpu="500m"))
        assert p.node == "small", normalization
