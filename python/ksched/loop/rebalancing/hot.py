"""Which nodes the rebalancer calls hot: hysteresis over fresh metric samples.

Owns, per judged metric and node, the count of consecutive fresh samples over the metric's
hot line (:class:`~ksched.config.rebalance.RebalanceThreshold`). A sample counts once: one
evaluated no later than the last counted is not new (the metric store hands out the same
cached sample until the next refresh). A node's count starts again when a sample shows it on
the cool side of the line, or has no value for it. A stale or degraded metric is forgotten
(:meth:`HotTracker.forget`): its counts start again from zero, so a stale but high value
never makes a node hot. A node is hot once its count reaches ``samples_needed``.

Reads no source and no clock: the live rebalancer feeds it each fresh sample
(:meth:`ksched.loop.metrics.metric_sources.MetricStore.latest`) and asks :meth:`HotTracker.hot`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from ksched.config.rebalance import RebalanceThreshold
from ksched.engine.rebalance import HotNode
from ksched.loop.metrics.samples import Sample


class HotTracker:
    """Consecutive fresh samples over the hot line, per metric and node.

    >>> tracker = HotTracker([RebalanceThreshold("u", "above", 0.8, 0.6)], samples_needed=2)
    >>> tracker.observe("u", 10.0, {"n0": 0.9, "n1": 0.5})
    >>> tracker.observe("u", 20.0, {"n0": 0.95, "n1": 0.5})
    >>> [(h.node, h.value, h.samples) for h in tracker.hot()]
    [('n0', 0.95, 2)]
    """

    def __init__(self, thresholds: Sequence[RebalanceThreshold], samples_needed: int) -> None:
        self.lines = {t.metric: t for t in thresholds}
        self.samples_needed = samples_needed
        # Per metric: node -> (consecutive samples over the line, the last value).
        self._over: dict[str, dict[str, tuple[int, float]]] = {m: {} for m in self.lines}
        # Per metric: when the last counted sample was evaluated.
        self._last: dict[str, float] = {}

    def observe(self, metric: str, sampled_at: float, values: Mapping[str, float]) -> None:
        """One sample of ``metric`` (node -> value); ignored where it is not new or the
        metric is not judged."""
        line = self.lines.get(metric)
        last = self._last.get(metric)
        if line is None or (last is not None and sampled_at <= last):
            return
        self._last[metric] = sampled_at
        before = self._over[metric]
        self._over[metric] = {
            node: (before.get(node, (0, value))[0] + 1, value)
            for node, value in values.items()
            if math.isfinite(value) and line.hot(value)
        }

    def feed(self, latest: Callable[[str], Sample | None]) -> None:
        """Observe each judged metric's fresh sample (``latest``: the metric store's, None where
        stale or degraded), and forget a metric that has none."""
        for name in self.lines:
            sample = latest(name)
            if sample is None:
                self.forget(name)
            else:
                self.observe(name, sample.sampled_at, sample.values)

    def forget(self, metric: str) -> None:
        """The metric is stale or degraded: every node's count starts again."""
        if metric in self._over:
            self._over[metric] = {}

    def hot(self) -> list[HotNode]:
        """The nodes over a line for at least ``samples_needed`` samples in a row, by node then
        metric (a node hot on two metrics appears twice)."""
        out = [
            HotNode(node, metric, value, self.lines[metric].high, count)
            for metric, over in self._over.items()
            for node, (count, value) in over.items()
            if count >= self.samples_needed
        ]
        return sorted(out, key=lambda h: (h.node, h.metric))
