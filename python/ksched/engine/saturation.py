"""Graceful saturation: a pod every node rejects on a ``leastLoaded`` metric's threshold.

A pod that every node passing the other filters rejects on a threshold of a metric
whose ``onSaturation`` is ``leastLoaded`` is placed again in the same batch with that
threshold at the value the least-loaded node over it reads at the pod's turn, banded, so
that node and those within a hundredth of its value are the ones that pass
(:func:`relax_saturated`, :func:`relax_thresholds`, :func:`relaxed_load`); the metric's
missing policy still applies. Each such pod's placement says so (``Placement.saturation``,
:func:`note_saturation`), and so does a pod left pending by a threshold.

Owns the fix-point over the batch's reruns and the thresholds it relaxes
(``Batch.relaxed``); the engine call itself is :mod:`ksched.engine.scheduler`'s.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from ksched import _core
from ksched.config import MetricConfig
from ksched.core_types import MetricLoad, Outcome
from ksched.engine.batch import Batch
from ksched.engine.load import allocatable, lines_on_nodes, shares
from ksched.engine.placements import LEAST_LOADED, Saturation
from ksched.engine.snapshot import Snapshot, node_thresholds

# ``MetricLoad``'s ``exempt``: only the pod's own thresholds apply (a relaxed pod's), not the
# nodes'; the metric's missing policy still does.
POD_THRESHOLDS = _core.METRIC_POD_THRESHOLDS
# A relaxed threshold lets through the nodes within this share of the least-loaded value (on a
# grid of such steps, so that pods whose least-loaded values are alike share one threshold):
# the other scores choose among nodes that close, and a rerun's prediction is not undone by
# another pod moving a node's value by a hair.
BAND = 0.01
_LOG_BAND = math.log1p(BAND)
MAX_LOG = math.log(np.finfo(np.float64).max)


def relax_saturated(
    run: Callable[[float | None], tuple[Outcome, list[str]]],
    relax: Callable[[Outcome], list[int]],
    deadline_s: float | None,
) -> tuple[Outcome, list[str]]:
    """Run the engine (``run``) on the batch until ``relax`` (:func:`relax_thresholds`) finds
    no threshold left to relax after a run. The runs share the decision deadline
    (``deadline_s``, from the first): once it has passed, the last run's outcome stands, but
    for the pods whose thresholds were still being relaxed (the rows ``relax`` returned): they
    were not decided in time, and are retried (without metrics) as a pod the engine's deadline
    cut, not left pending by a threshold that was to let them through."""
    started = time.perf_counter()
    left = deadline_s
    while True:
        out, victim_keys = run(left)
        rows = relax(out)
        if deadline_s is not None:
            left = deadline_s - (time.perf_counter() - started)
        if not rows:
            return out, victim_keys
        if left is not None and left <= 0:
            # Not preempting for them either: a pod retried is not one that nominates.
            nodes, nominated = np.array(out["nodes"], copy=True), np.array(out["nominated"], copy=True)
            nodes[rows], nominated[rows] = _core.NOT_ATTEMPTED, -1
            return {**out, "nodes": nodes, "nominated": nominated}, victim_keys


def relax_thresholds(
    batch: Batch, metrics: Sequence[MetricConfig], snapshot: Snapshot, out: Outcome
) -> list[int]:
    """After an engine run (``out``) on the batch, relax the threshold of each pod it left
    unplaced although a threshold of a ``leastLoaded`` metric, still on for that pod, rejected
    some node: the pod runs again (``Batch.relaxed``), at its place in the batch, so the pods
    before it are placed as before, with that threshold at the value the least-loaded node
    over it will read at the pod's turn, as the metric filter reads it (the pod's estimate
    added), moved out to the next step of a grid ``BAND`` apart in ratio (:func:`banded`):
    that node passes, and so do those within a hundredth of its value, and the more loaded ones
    do not. Returns the rows whose thresholds moved (none: no run is due).

    What a node reads at a pod's turn depends on the pods placed before it in the batch, whose
    estimates the engine adds as it places them. It is predicted from this run: the pods this
    run placed before it where they went, each pod relaxed now where its own threshold lets it
    go. So a herd of pods saturating the nodes is placed in a few runs, not one run per pod,
    as when each run only let every pod through to the next node. Only the nodes this run
    refused the pod by the threshold of one of its ``leastLoaded`` metrics alone count (the
    engine names them, ``Outcome.threshold_nodes``; the other filters passed there): a node too
    small for the pod, or tainted, is not one to set it at. A relaxed pod still left was refused
    by the other filters on every node of its band, so the next band is set among the nodes its
    threshold refused, which read more: its threshold rises. Where the node it was set at
    was itself refused by the threshold again (the prediction was off), and the pods before it
    went where predicted, or it is the first pod left two runs in a row, its threshold lets it
    through to the band past that one; where they went elsewhere, it is predicted again from
    where they went. Once no node is left, its threshold is off. So at least every other run
    places the first pod left, relaxes it for the first time, or moves it on, and this ends
    whether or not the engine places the pods before it alike (for a pod relaxed on two metrics
    this is argued per metric, one's nodes hiding the other's; not proven)."""
    hits = batch.threshold_hits(out)
    todo: dict[int, dict[int, str]] = {}
    for slot, sides in hits.items():
        kept = {
            m: side
            for m, side in sides.items()
            if metrics[m].on_saturation == LEAST_LOADED and (slot, m) not in batch.off
        }
        if kept:
            todo[slot] = kept
    inputs = batch.inputs
    if not todo or inputs is None or inputs.load is None:
        batch.first_left = None
        return []  # a threshold hit takes load inputs: nothing left to relax
    load = inputs.load
    width = len(metrics)
    nodes = np.asarray(out["nodes"], dtype=np.int64)
    # Each metric's values as the filter reads them at the row walked, and the estimate
    # resource's allocatable of each node (None: the metric's estimate adds nothing).
    values = inputs.values.reshape(snapshot.count, width)
    reading = [np.where(np.isfinite(values[:, k]), values[:, k], np.nan) for k in range(width)]
    capacity = [
        allocatable(snapshot, m.estimate.resource) if m.estimate is not None else None for m in metrics
    ]
    # Where each row goes: as this run placed it, a relaxed pod where its threshold lets it go.
    placed = nodes.copy()
    relaxed_rows: list[int] = []
    # The rows after the last pod relaxed read nothing this walk predicts.
    last = max(j for j, row in enumerate(batch.rows) if row.slot in todo)
    lines: dict[tuple[int, float, float], tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]] = {}
    for j, row in enumerate(batch.rows):
        pod_todo = todo.get(row.slot, {})
        if pod_todo:
            # Relaxed on the side that first rejected the nodes (a metric with both lines keeps
            # that one relaxed; its other line still applies).
            sides = {m: batch.relaxed.get(row.slot, {}).get(m, hit) for m, hit in pod_todo.items()}
            room = batch.threshold_room(out, j, sides, snapshot.count)
            for m in pod_todo:
                key, at = (row.slot, m), j * width + m
                relaxed = batch.relaxed.setdefault(row.slot, {})
                side = sides[m]
                if m not in relaxed:
                    relaxed[m] = side
                    batch.passed_over[key] = 0
                elif (
                    (not relaxed_rows and batch.first_left == row.slot)
                    or batch.prefixes.get(key) == hash(nodes[:j].tobytes())
                ) and room[batch.targets[key]]:
                    # The first pod left two runs in a row, or the pods before it went where
                    # predicted, and the node its threshold was set at still passed the other
                    # filters: the threshold itself still held the pod off its band. (Where
                    # another filter refused that node, it is out of ``room``, and the band is
                    # set among the others.)
                    batch.passed_over[key] += 1
                line = (m, float(load["pod_above"][at]), float(load["pod_below"][at]))
                if line not in lines:
                    lines[line] = lines_on_nodes(snapshot, metrics[m].name, line[1], line[2])
                seen = reading[m]
                own = _pod_shares(load, metrics[m], snapshot, at, width)
                if own is not None:
                    seen = seen + own
                node = _relax(batch, key, seen, lines[line], side, room)
                if node is not None:
                    batch.targets[key] = node
                batch.prefixes[key] = hash(placed[:j].tobytes())
                placed[j] = -1 if node is None else node
        if row.slot in todo:
            if not relaxed_rows:
                batch.first_left = row.slot
            relaxed_rows.append(j)
        if j == last:
            break
        node = int(placed[j])
        if node < 0:
            continue
        for k in range(width):
            alloc = capacity[k]
            if alloc is not None and alloc[node] > 0:
                reading[k][node] += float(load["amounts"][j * width + k]) / alloc[node]
    return relaxed_rows


def _relax(
    batch: Batch,
    key: tuple[int, int],
    seen: npt.NDArray[np.float64],
    lines: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]],
    side: str,
    room: npt.NDArray[np.bool_],
) -> int | None:
    """Set the relaxed threshold of pod and metric ``key`` at the least-loaded of the values
    ``seen`` (each node's, as the metric filter would read it with the pod) past its ``lines``
    (``above``, ``below``) on ``side`` and ``passed_over`` bands of them (:func:`banded`),
    banded, or turn it off where none is left; returns the node that reads that value (None:
    off). Only the nodes in ``room`` count (:meth:`Batch.threshold_room`: the other filters
    passed there in the last run), so the threshold is not set at a node the pod could not
    take anyway."""
    over = seen > lines[0] if side == "above" else seen < lines[1]
    passed_over = batch.passed_over[key]
    if passed_over:
        # Past as many bands (of every node over the line) as it was let through and could
        # not take a node of although that node passed the other filters.
        distinct = np.unique(seen[over])
        if side != "above":
            distinct = distinct[::-1]
        at = 0
        for _ in range(passed_over):
            if at >= len(distinct):
                break
            band = banded(float(distinct[at]), side)
            at += int(np.count_nonzero(distinct[at:] <= band if side == "above" else distinct[at:] >= band))
        if at < len(distinct):
            over &= seen >= distinct[at] if side == "above" else seen <= distinct[at]
        else:
            over[:] = False
    over &= room
    candidates = seen[over]
    if not len(candidates):
        batch.off.add(key)
        batch.limits.pop(key, None)
        return None
    # The least loaded, without sorting them all (most runs relax a pod only once).
    limit = float(candidates.min() if side == "above" else candidates.max())
    batch.limits[key] = banded(limit, side)
    return int(np.flatnonzero(over & (seen == limit))[0])


def banded(limit: float, side: str) -> float:
    """``limit`` moved out (up for ``above``, down for ``below``) to the next step of a grid
    ``BAND`` apart in ratio; a value that is not positive stays as it is."""
    if not (limit > 0 and math.isfinite(limit)):
        return limit
    step = math.log(limit) / _LOG_BAND
    if math.ceil(step) * _LOG_BAND > MAX_LOG:
        return limit  # the next step is past the largest float
    if side == "above":
        return max(limit, math.exp(_LOG_BAND * math.ceil(step)))
    return min(limit, math.exp(_LOG_BAND * math.floor(step)))


def relaxed_load(load: MetricLoad | None, batch: Batch) -> MetricLoad | None:
    """``load`` with each relaxed pod's threshold of each relaxed metric (``Batch.relaxed``)
    at its relaxed value (:func:`relax_thresholds`; the node's own thresholds no longer apply
    to the pod), or off. The missing policy still applies. A pod is relaxed only after a
    threshold rejected a node for it, which takes metric values and load inputs."""
    if not batch.relaxed or load is None:
        return load
    m = len(load["incoming"])
    exempt, above, below = load["exempt"].copy(), load["pod_above"].copy(), load["pod_below"].copy()
    for j, row in enumerate(batch.rows):
        for k, side in batch.relaxed.get(row.slot, {}).items():
            at = j * m + k
            exempt[at] = POD_THRESHOLDS
            (above if side == "above" else below)[at] = batch.limits.get((row.slot, k), math.nan)
    return {**load, "exempt": exempt, "pod_above": above, "pod_below": below}


def _pod_shares(
    load: MetricLoad, metric: MetricConfig, snapshot: Snapshot, at: int, m: int
) -> npt.NDArray[np.float64] | None:
    """What pod and metric ``at`` adds on each node as the metric filter counts it: its load
    estimate (deviations included) over each node's allocatable; None where the metric counts
    no estimate for the pod."""
    if not load["incoming"][at % m] or metric.estimate is None:
        return None
    return shares(snapshot, metric.estimate.resource, float(load["amounts"][at]))


def note_saturation(
    snapshot: Snapshot,
    batch: Batch,
    out: Outcome,
    metrics: Sequence[MetricConfig],
    values: npt.NDArray[np.float64] | None,
) -> None:
    """Give each saturated pod's placement its ``saturation``: a pod placed with thresholds off
    names those metrics, with its node's value and the threshold; a pod left pending names
    every metric whose threshold rejected a node in the last run or was off for it."""
    hits = batch.threshold_hits(out)
    load = batch.inputs.load if batch.inputs is not None else None
    for slot in sorted(hits.keys() | batch.relaxed.keys()):
        placement = batch.results[slot]
        if placement is None or not placement.attempted:
            continue  # retried: not decided, by a threshold or otherwise
        relaxed = batch.relaxed.get(slot, {})
        if placement.node is not None:
            node = snapshot.index[placement.node]
            req = placement.requirements
            priority = req.priority if req is not None else 0
            row = batch.row_of(slot)
            saturation = tuple(
                _over_threshold(
                    snapshot,
                    metrics[m],
                    side,
                    priority,
                    node,
                    None if values is None else float(values[node, m]),
                    _pod_share(load, metrics, snapshot, row, m, node),
                )
                for m, side in sorted(relaxed.items())
            )
        else:
            seen = {**hits.get(slot, {}), **relaxed}
            saturation = tuple(Saturation(metrics[m].name, metrics[m].on_saturation) for m in sorted(seen))
        if saturation:
            batch.results[slot] = replace(placement, saturation=saturation)


def _pod_share(
    load: MetricLoad | None,
    metrics: Sequence[MetricConfig],
    snapshot: Snapshot,
    row: int | None,
    k: int,
    node: int,
) -> float | None:
    """What the pod in batch ``row`` adds to metric ``k`` on ``node`` (:func:`_pod_shares`)."""
    if load is None or row is None:
        return None
    own = _pod_shares(load, metrics[k], snapshot, row * len(metrics) + k, len(metrics))
    return None if own is None else round(float(own[node]), 3)


def _over_threshold(
    snapshot: Snapshot,
    metric: MetricConfig,
    side: str,
    priority: int,
    node: int,
    value: float | None,
    pod_share: float | None,
) -> Saturation:
    """A pod of ``priority`` placed on ``node`` over ``metric``'s threshold on ``side``: the
    node's own threshold where it has one (its annotation wins), else the pod's band's.
    ``value`` is the node's value of the metric (NaN or None: none); ``pod_share`` what the
    pod's estimate adds there."""
    own = node_thresholds(snapshot, metric.name)[0 if side == "above" else 1][node]
    above, below = metric.thresholds(priority)
    limit = float(own) if not math.isnan(own) else above if side == "above" else below
    return Saturation(
        metric.name,
        metric.on_saturation,
        None if value is None or math.isnan(value) else value,
        f"{side} {limit:g}" if limit is not None else side,
        pod_share,
    )
