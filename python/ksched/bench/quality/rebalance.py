"""The quality benchmark's rebalance figures: what moving pods off hot nodes achieved, and cost.

Owns how a run with evictions is judged (:func:`judge_rebalance`). A node is hot once it has
been over the threshold for the run's ``hotSamples`` samples in a row (the rebalancer
configuration's, :data:`HOT_SAMPLES` by default), as the rebalancer calls a node hot (one noisy sample over the line is not a hot node, for any setup). Figures: the
seconds from the first hot sample until no node of the pool is hot any more (None while one
still is at the end),
the evictions within the judged window (its last sample; the audit log runs on until the pool
is torn down, and a later move can neither cool nor heat a judged minute, so it is counted
apart) and how many hot nodes ended cool per eviction, the evictions whose replacement
landed on a node that was hot or became hot within :data:`PINGPONG_WINDOW_S` (ping-pong), the
PodDisruptionBudgets seen below their desired healthy pods after an eviction of one of their
pods, and the replacements left pending. Pure functions of what the harness recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ksched.config.rebalance import RebalanceConfig

# A replacement that lands on a node hot now or within this long went back into the fire.
PINGPONG_WINDOW_S = 300.0
# Consecutive samples over the threshold that make a node hot where the run names no
# rebalancer configuration: the rebalancer's default hotSamples (rebalance.hotSamples), so a
# setup is judged by the line the policy draws.
HOT_SAMPLES = RebalanceConfig.hot_samples
# How many of its last samples results.json keeps of a node still hot at the end.
END_SAMPLES = 8


@dataclass(frozen=True)
class Eviction:
    """A pod evicted through the Eviction API (the API server answered 2xx)."""

    at: float
    pod: str
    # The node it ran on when last seen (None: never seen bound).
    node: str | None
    workload: str


@dataclass(frozen=True)
class PodRecord:
    """A pod of the scenario as last seen: its workload (the controller that owns it, else its
    ``app`` label), its node (None: unbound), when it was created and bound."""

    name: str
    workload: str
    node: str | None
    created: float
    bound: float | None


@dataclass(frozen=True)
class BudgetSample:
    """One sample of a PodDisruptionBudget's status (the budget is named after its workload)."""

    at: float
    workload: str
    current_healthy: int
    desired_healthy: int


@dataclass
class RebalanceFigures:
    seconds_to_cool: float | None = None
    evictions: int = 0
    # Evictions after the last sample, which the figures above do not judge.
    evictions_after_window: int = 0
    nodes_cooled: int = 0
    evictions_per_node_cooled: float | None = None
    pingpong: int = 0
    pdb_violations: int = 0
    pending_after_eviction: int = 0
    # Each eviction (seconds from the first sample, pod, its node, its replacement's node or
    # None, ping-pong), for results.json.
    moves: list[tuple[float, str, str | None, str | None, bool]] = field(default_factory=list)
    # The nodes still hot at the last sample, with their last :data:`END_SAMPLES` values, for
    # results.json (why ``seconds_to_cool`` is None).
    hot_at_end: dict[str, list[float]] = field(default_factory=dict)


def hot_nodes(
    values: Sequence[dict[str, float]], nodes: Sequence[str], threshold: float, samples: int = HOT_SAMPLES
) -> list[set[str]]:
    """At each sample, the nodes over ``threshold`` at it and the ``samples`` - 1 samples
    before it (a node with no sample counts as idle)."""
    runs = dict.fromkeys(nodes, 0)
    out = []
    for sample in values:
        for n in nodes:
            runs[n] = runs[n] + 1 if sample.get(n, 0.0) > threshold else 0
        out.append({n for n in nodes if runs[n] >= samples})
    return out


def seconds_to_cool(times: Sequence[float], hot_sets: Sequence[set[str]]) -> float | None:
    """Seconds from the first sample with a hot node (``hot_sets``: :func:`hot_nodes` at each of
    ``times``) to the first sample after the last one with a hot node; 0.0 if no node was ever
    hot, None if one is hot at the last sample."""
    hot = [bool(h) for h in hot_sets]
    if not any(hot):
        return 0.0
    if hot[-1]:
        return None
    first = hot.index(True)
    last = len(hot) - 1 - hot[::-1].index(True)
    return round(times[last + 1] - times[first], 1)


def replacements(
    evictions: Sequence[Eviction], pods: Sequence[PodRecord], initial: set[str]
) -> list[PodRecord | None]:
    """Each eviction's replacement, in eviction order: the first pod of the same workload that
    the harness did not create and that was created at or after the eviction (the API server
    stamps creation to the second), each pod replacing one eviction at most."""
    taken: set[str] = set()
    by_created = sorted((p for p in pods if p.name not in initial), key=lambda p: (p.created, p.name))
    out: list[PodRecord | None] = []
    for e in sorted(evictions, key=lambda e: e.at):
        found = next(
            (
                p
                for p in by_created
                if p.workload == e.workload and p.name not in taken and p.created >= int(e.at)
            ),
            None,
        )
        if found is not None:
            taken.add(found.name)
        out.append(found)
    return out


def judge_rebalance(
    times: Sequence[float],
    values: Sequence[dict[str, float]],
    nodes: Sequence[str],
    threshold: float,
    evictions: Sequence[Eviction],
    pods: Sequence[PodRecord],
    initial: set[str],
    budgets: Sequence[BudgetSample],
    hot_samples: int = HOT_SAMPLES,
) -> RebalanceFigures:
    """The rebalance figures of one pool (``nodes``) from its utilisation samples (``times``,
    ``values[t][node]``), the evictions in its namespace, every pod seen there (``initial``:
    the names the harness created) and the budget samples; a node is hot after ``hot_samples``
    samples over the line in a row."""
    hot = hot_nodes(values, nodes, threshold, hot_samples)
    figures = RebalanceFigures(seconds_to_cool=seconds_to_cool(times, hot))
    # Budgets and pending replacements are judged over every eviction: safety has no window.
    judged = [e for e in evictions if not times or e.at <= times[-1]]
    figures.evictions_after_window = len(evictions) - len(judged)
    figures.evictions = len(judged)
    ever_hot: set[str] = set().union(*hot)
    figures.nodes_cooled = len(ever_hot - (hot[-1] if hot else set()))
    figures.hot_at_end = {
        n: [round(v.get(n, 0.0), 3) for v in values[-END_SAMPLES:]] for n in sorted(hot[-1] if hot else ())
    }
    if figures.nodes_cooled:
        figures.evictions_per_node_cooled = round(figures.evictions / figures.nodes_cooled, 2)
    step = times[1] - times[0] if len(times) > 1 else 0.0
    ordered = sorted(judged, key=lambda e: e.at)
    for e, replacement in zip(ordered, replacements(ordered, pods, initial), strict=True):
        target = replacement.node if replacement is not None else None
        pingpong = False
        if replacement is not None and target is not None:
            landed = replacement.bound if replacement.bound is not None else replacement.created
            window = [
                h for t, h in zip(times, hot, strict=True) if landed - step <= t <= landed + PINGPONG_WINDOW_S
            ]
            pingpong = any(target in h for h in window)
        figures.pingpong += pingpong
        start = times[0] if times else e.at
        figures.moves.append((round(e.at - start, 1), e.pod, e.node, target, pingpong))
    first_eviction: dict[str, float] = {}
    for e in evictions:
        first_eviction[e.workload] = min(e.at, first_eviction.get(e.workload, e.at))
    figures.pdb_violations = len(
        {
            b.workload
            for b in budgets
            if b.workload in first_eviction
            and b.at >= first_eviction[b.workload]
            and b.current_healthy < b.desired_healthy
        }
    )
    if evictions:
        figures.pending_after_eviction = sum(1 for p in pods if p.name not in initial and p.node is None)
    return figures
