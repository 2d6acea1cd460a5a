"""Hot nodes for the rebalancer (``ksched.loop.rebalancing.hot.HotTracker``): hysteresis over fresh
samples, a repeated sample counted once, a count that starts again when a node cools or
has no value, and a stale metric that never makes a node hot; and the metric store's
``latest`` sample that feeds it, only while fresh."""

from __future__ import annotations

import doctest
from dataclasses import dataclass

import pytest

from ksched.config import MetricConfig
from ksched.config.rebalance import RebalanceThreshold
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.metrics.samples import Sample, SourceError
from ksched.loop.mirror.slim import slim_node
from ksched.loop.rebalancing import hot as hot_module
from ksched.loop.rebalancing.hot import HotTracker
from tests.conftest import node

T0 = 1_800_000_000.0
CPU = RebalanceThreshold("cpu", "above", 0.8, 0.6)
FREE = RebalanceThreshold("free", "below", 0.2, 0.4)


def hot_nodes(tracker: HotTracker) -> list[tuple[str, str, float, int]]:
    return [(h.node, h.metric, h.value, h.samples) for h in tracker.hot()]


@pytest.mark.parametrize(
    ("name", "samples", "want"),
    [
        ("two samples over the line are not enough", [(1, {"a": 0.9}), (2, {"a": 0.95})], []),
        (
            "three in a row make it hot, with the last value",
            [(1, {"a": 0.9}), (2, {"a": 0.95}), (3, {"a": 0.85})],
            [("a", "cpu", 0.85, 3)],
        ),
        (
            "the same sample seen again is not new",
            [(1, {"a": 0.9}), (2, {"a": 0.9}), (2, {"a": 0.9}), (2, {"a": 0.9})],
            [],
        ),
        (
            "an older sample is not new either",
            [(1, {"a": 0.9}), (3, {"a": 0.9}), (2, {"a": 0.9})],
            [],
        ),
        (
            "a sample under the line starts the count again",
            [(1, {"a": 0.9}), (2, {"a": 0.9}), (3, {"a": 0.7}), (4, {"a": 0.9}), (5, {"a": 0.9})],
            [],
        ),
        (
            "the line itself is not over it",
            [(1, {"a": 0.8}), (2, {"a": 0.8}), (3, {"a": 0.8})],
            [],
        ),
        (
            "a node missing from a sample starts again",
            [
                (1, {"a": 0.9, "b": 0.9}),
                (2, {"b": 0.9}),
                (3, {"a": 0.9, "b": 0.9}),
                (4, {"a": 0.9, "b": 0.9}),
            ],
            [("b", "cpu", 0.9, 4)],
        ),
        (
            "a value that is not a number starts again",
            [(1, {"a": 0.9}), (2, {"a": float("nan")}), (3, {"a": 0.9}), (4, {"a": 0.9})],
            [],
        ),
    ],
)
def test_hysteresis(name: str, samples: list[tuple[float, dict[str, float]]], want: list[object]) -> None:
    tracker = HotTracker([CPU], samples_needed=3)
    for at, values in samples:
        tracker.observe("cpu", T0 + at, values)
    assert hot_nodes(tracker) == want, name


def test_a_below_metric_is_hot_under_its_line() -> None:
    tracker = HotTracker([FREE], samples_needed=2)
    for at in (1, 2):
        tracker.observe("free", T0 + at, {"a": 0.1, "b": 0.5})
    assert hot_nodes(tracker) == [("a", "free", 0.1, 2)]


def test_metrics_count_apart_and_an_unjudged_metric_is_ignored() -> None:
    tracker = HotTracker([CPU, FREE], samples_needed=2)
    for at in (1, 2):
        tracker.observe("cpu", T0 + at, {"a": 0.9})
        tracker.observe("free", T0 + at, {"a": 0.1, "b": 0.1})
        tracker.observe("price", T0 + at, {"a": 99.0})
    # The same sample time on another metric is that metric's own fresh sample.
    assert hot_nodes(tracker) == [("a", "cpu", 0.9, 2), ("a", "free", 0.1, 2), ("b", "free", 0.1, 2)]


def test_a_stale_metric_is_forgotten_and_counts_from_zero() -> None:
    tracker = HotTracker([CPU], samples_needed=2)
    tracker.observe("cpu", T0 + 1, {"a": 0.9})
    tracker.observe("cpu", T0 + 2, {"a": 0.9})
    assert hot_nodes(tracker) == [("a", "cpu", 0.9, 2)]
    tracker.forget("cpu")
    assert tracker.hot() == []
    # The sample it held is not new when the metric comes back: only new ones count.
    tracker.observe("cpu", T0 + 2, {"a": 0.9})
    tracker.observe("cpu", T0 + 3, {"a": 0.9})
    assert tracker.hot() == []
    tracker.observe("cpu", T0 + 4, {"a": 0.9})
    assert hot_nodes(tracker) == [("a", "cpu", 0.9, 2)]


def test_the_docstring_example() -> None:
    assert doctest.testmod(hot_module).failed == 0


@dataclass
class Clock:
    now: float = T0

    def __call__(self) -> float:
        return self.now


class Source:
    """A Prometheus stand-in: answers with ``values`` sampled at ``at``, or fails."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {"a": 0.9}
        self.at = T0
        self.down = False

    def query(self, metric: MetricConfig, resolve: object) -> Sample:
        if self.down:
            raise SourceError("cpu: query failed: connection refused")
        return Sample(dict(self.values), self.at)


def test_latest_is_the_fresh_raw_sample_of_a_live_metric() -> None:
    cpu = MetricConfig(name="cpu", source="prometheus", query="q", max_age_s=60)
    price = MetricConfig(name="price", source="annotation", annotation="ksched.io/price")
    source, clock = Source(), Clock()
    nodes = [slim_node(node("a"))]
    store = MetricStore([cpu, price], source, None, lambda: nodes, clock=clock)  # type: ignore[arg-type]
    assert store.latest("cpu") is None
    store.refresh(cpu)
    sample = store.latest("cpu")
    assert sample is not None and (sample.values, sample.sampled_at) == ({"a": 0.9}, T0)
    assert store.latest("price") is None
    clock.now = T0 + 61
    assert store.latest("cpu") is None, "older than maxAge"
    source.at, clock.now = T0 + 70, T0 + 71
    store.refresh(cpu)
    assert store.latest("cpu") is not None
    source.down = True
    store.refresh(cpu)
    assert store.latest("cpu") is None, "its source's last refresh failed"
