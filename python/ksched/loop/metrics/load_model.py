"""The load model: a node's values as placing, moving and the dry run read them.

Owns how the engine's metric values are built, once for every caller:

- **Placing** (the scheduling cycle, shadow mode: :meth:`LoadModel.scheduling`): each
  metric's fresh sample (:class:`~ksched.loop.metrics.metric_sources.MetricStore`), plus what the
  sample cannot show yet of recently bound pods (:mod:`ksched.loop.metrics.recent_pods`, learned
  calibration and measured usage included), plus the load held for rebalancing moves'
  replacements not yet matched and for landed replacements still growing back
  (:class:`HeldLoad`: the rebalancer's reservations, :mod:`ksched.loop.rebalancing.reservations`).
- **Observed** (:meth:`LoadModel.observed`): each fresh sample alone, as placement outcomes
  judge whether a node went hot.
- **Moving** (the rebalancer's look, and ``ksched rebalance --dry-run`` through the same
  call: :meth:`LoadModel.rebalancing`): the same values for the judged metrics whose sample
  is fresh, less what each evicted pod's source still shows of it (:class:`Departure`), plus
  the settling replacements. The planner counts the unmatched reservations itself, as the
  room and load its replacements hold (:func:`ksched.engine.rebalance.plan`).

The arithmetic (a pod's share of a node, the fade over a sample's window) is
:mod:`ksched.engine.load`'s. Runs on the thread that owns the cluster state; writes nothing
to the API server.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ksched.config import MetricConfig
from ksched.config.rebalance import RebalanceThreshold
from ksched.engine.estimate import pod_estimates
from ksched.engine.load import before_event
from ksched.engine.snapshot import Snapshot
from ksched.errors import MalformedObjectError
from ksched.loop.metrics.metric_sources import Matrix, MetricStore
from ksched.loop.metrics.recent_pods import RecentPods
from ksched.loop.metrics.samples import Sample
from ksched.loop.metrics.settled import SETTLED_EVERY_S
from ksched.objects import Obj

# While nothing builds the values (no pod waits, no look runs), a learned estimate still takes
# each new sample of the pods it counts this often (a pod query refreshes every few seconds at
# best): it learns only when the values are built, and a workload measured while the queue was
# empty (a Deployment before its scale-up) would otherwise teach nothing until the first pod
# after the lull was placed on what was learned before it. As often as a pass through the
# settled pods may run, so that every idle build makes one.
LEARN_EVERY_S = SETTLED_EVERY_S

# A pod's measured usage of a metric's estimate resource (engine units; None: unknown).
Measured = Callable[[str, MetricConfig], "float | None"]


class HeldLoad(Protocol):
    """The load rebalancing holds on nodes (:class:`ksched.loop.rebalancing.reservations.Reservations`);
    ``values`` is node x metric, columns ``metrics``."""

    def add_to(
        self, values: npt.NDArray[np.float64], snapshot: Snapshot, metrics: Sequence[MetricConfig]
    ) -> None:
        """Add the load of the moves' replacements not yet matched, on their targets."""

    def add_settling(
        self,
        values: npt.NDArray[np.float64],
        snapshot: Snapshot,
        metrics: Sequence[MetricConfig],
        measured: Measured,
    ) -> None:
        """Add what landed replacements do not use yet of the load they were moved with."""


@dataclass
class Departure:
    """An evicted pod whose load the metric still shows on its source."""

    key: str
    uid: str
    source: str
    metric: str
    # The pod's share of ``metric`` on the source.
    usage: float
    # When the pod was first seen gone from the cluster state (None: still there).
    gone_at: float | None = None


@dataclass(frozen=True)
class Judged:
    """What a rebalancing look judges and proves moves with."""

    # The judged metrics with a fresh sample, as the engine is given them (a learned
    # estimate's calibration included).
    metrics: tuple[MetricConfig, ...]
    # Node x ``metrics``: the values with the load model applied.
    values: npt.NDArray[np.float64]
    measured: Measured
    # Node x ``metrics``: the part of ``values`` that is the estimate's caution
    # (:attr:`~ksched.loop.metrics.metric_sources.Matrix.caution`; None: none), which a proof's
    # filter and scores read as in placing.
    caution: npt.NDArray[np.float64] | None = None


class LoadModel:
    """The values of one state: ``recent`` holds the pods bound recently, whose load a
    sample cannot show yet (the cluster state's, :class:`~ksched.loop.metrics.recent_pods.RecentPods`);
    ``present(key, uid)`` says whether a pod is still counted in the cluster state (an
    evicted pod is gone once it is not)."""

    def __init__(
        self,
        metrics: MetricStore,
        recent: RecentPods,
        held: HeldLoad | None = None,
        present: Callable[[str, str], bool] = lambda _key, _uid: False,
    ) -> None:
        self.metrics = metrics
        self.recent = recent
        self.held = held
        self.present = present
        self.departed: list[Departure] = []

    def estimate_of(self, key: str, pending: Obj | None) -> dict[str, Any]:
        """How the pod ``key`` counts, for ``/status?pod=``: a pending one (``pending``: its
        object) as it would count if placed now, with what the estimate learned; a recent one
        as the last cycle counted it (measured, ramping, or its estimate and where that came
        from); else nothing (bound before the metrics' windows, whose samples show it, or
        unknown)."""
        if pending is not None:
            return {"pod": key, "state": "pending", "estimates": self._pending(pending)}
        counted = self.recent.counted_as(key)
        if counted is None:
            return {"pod": key, "state": "not counted", "estimates": []}
        state = "recent" if counted else "bound, counted from the next cycle"
        return {"pod": key, "state": state, "estimates": counted}

    def _pending(self, pod: Obj) -> list[dict[str, Any]]:
        calibrations = self.metrics.calibrations
        metrics = [
            m
            if m.estimate is None or m.name not in calibrations
            else replace(m, estimate=replace(m.estimate, calibration=calibrations[m.name]))
            for m in self.metrics.metrics
        ]
        try:
            choices = pod_estimates(pod, metrics)
        except MalformedObjectError as err:
            return [{"metric": None, "problem": str(err)}]
        return [
            {
                "metric": name,
                "resource": resource,
                "counts": float(c.amount),
                "expected": float(c.expected),
                "source": c.source,
                "workload": c.workload,
                "figure": c.figure,
                "pods": c.pods,
                "problem": c.problem,
            }
            for name, resource, c in choices
        ]

    def observed(self, snapshot: Snapshot) -> Matrix:
        """What the metrics read on ``snapshot``, nothing estimated: whether a node went hot
        (:mod:`ksched.loop.scheduling.outcomes`) is the metric's verdict, not the estimate's,
        whose unmeasured pods and deviations read a node hotter than it may turn out."""
        return self.metrics.matrix(snapshot)

    def scheduling(self, snapshot: Snapshot, *, reserved: bool = True) -> Matrix:
        """The engine's values for placing pods on ``snapshot`` (``reserved``: with the load
        reservations hold; shadow mode holds none)."""
        matrix = self.metrics.matrix(snapshot, partial(self.recent.add_to, snapshot))
        if reserved and self.held is not None:
            self.held.add_to(matrix.values, snapshot, matrix.metrics)
            self.held.add_settling(matrix.values, snapshot, matrix.metrics, self.metrics.measured)
        return matrix

    def keep_learning(self, snapshot: Callable[[], Snapshot]) -> bool:
        """Where a metric learns from the pods it measures and no caller (a cycle, a look, a
        shadow comparison, over the same recent pods) has built the values for
        :data:`LEARN_EVERY_S`, build them once on ``snapshot()`` and throw them away, so the
        learned estimate takes the samples that came in meanwhile. Returns whether it built."""
        # A wall clock set back since (a negative time since) waits no longer than a build.
        if not self.recent.learns or 0 <= self.recent.clock() - self.recent.taught_at < LEARN_EVERY_S:
            return False
        self.scheduling(snapshot(), reserved=False)
        # Also where no learning metric had a fresh sample to learn from (nothing was
        # taught): the next try waits as long, not an idle loop's half second.
        self.recent.taught_at = self.recent.clock()
        return True

    def rebalancing(self, snapshot: Snapshot, lines: Mapping[str, RebalanceThreshold], now: float) -> Judged:
        """The values a look judges and proves with, for the metrics ``lines`` judge."""
        matrix = self.metrics.matrix(snapshot, partial(self.recent.add_to, snapshot))
        fresh = [
            (k, m)
            for k, m in enumerate(matrix.metrics)
            if m.name in lines and self.metrics.latest(m.name) is not None
        ]
        metrics = tuple(m for _, m in fresh)
        values = np.array(matrix.values[:, [k for k, _ in fresh]], dtype=np.float64)
        self._take_departed(snapshot, metrics, lines, values, now)
        usage = {m.name: self.metrics.pod_usage(m) for m in metrics}

        def measured(key: str, metric: MetricConfig) -> float | None:
            return (usage.get(metric.name) or {}).get(key)

        if self.held is not None:
            # Replacements that landed still grow back to what they were moved with: their
            # nodes are not cool enough for another move meanwhile.
            self.held.add_settling(values, snapshot, metrics, measured)
        caution = None if matrix.caution is None else matrix.caution[:, [k for k, _ in fresh]]
        return Judged(metrics, values, measured, caution)

    def _take_departed(
        self,
        snapshot: Snapshot,
        metrics: Sequence[MetricConfig],
        lines: Mapping[str, RebalanceThreshold],
        values: npt.NDArray[np.float64],
        now: float,
    ) -> None:
        """Take off each evicted pod's source what the metric's sample still shows of its load:
        all of it in a sample taken before the pod left, then the part of the sample's window
        that still covers the pod's time there (:func:`~ksched.engine.load.before_event`, as
        the estimate adds a new pod), none once the window is past it. Taking off more than
        the sample shows made a former source look cooler than idle, and the next look moved
        pods back onto it."""
        columns = {m.name: k for k, m in enumerate(metrics)}
        by_name = {m.name: m for m in self.metrics.metrics}
        kept = []
        # What each node's cell gives back, summed over its departed pods before it is applied,
        # and each metric's sample they were judged against.
        taken: dict[tuple[int, int], float] = defaultdict(float)
        samples: dict[str, Sample] = {}
        for d in self.departed:
            if d.gone_at is None and not self.present(d.key, d.uid):
                d.gone_at = now
            metric = by_name[d.metric]
            if d.gone_at is not None and now - d.gone_at > metric.window_s() + metric.max_age_s:
                continue
            kept.append(d)
            column = columns.get(d.metric)
            row = snapshot.index.get(d.source)
            sample = self.metrics.latest(d.metric)
            if column is not None and row is not None and sample is not None:
                samples[d.metric] = sample
                shown = (
                    1.0
                    if d.gone_at is None
                    else float(before_event(d.gone_at, sample.sampled_at, metric.window_s()))
                )
                taken[row, column] += d.usage * shown
        for (row, column), amount in taken.items():
            name = metrics[column].name
            if lines[name].direction == "above":
                # The pods' load raised the node's value: give back at most what its sample
                # measured. A pod's usage was read over its own window, and pods that left
                # together can add up to more than the node shows; a source read below zero
                # drew the next look's moves back onto it.
                measured = samples[name].values.get(snapshot.node_names[row], 0.0)
                values[row, column] -= min(amount, max(measured, 0.0))
            else:
                # It lowered a "below" metric (free capacity, say), which it gives back.
                values[row, column] += amount
        self.departed = kept
