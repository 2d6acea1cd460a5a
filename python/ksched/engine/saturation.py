"""Graceful saturation: a pod every node rejects on a ``leastLoaded`` metric's threshold.

A pod that every node passing the other filters rejects on a threshold of a metric
whose ``onSaturation`` is ``leastLoaded`` is placed again in the same batch with that
threshold raised to the least-loaded rejected node's value, so that node is the one
that passes (:func:`relax_saturated`, :func:`relaxed_load`); the metric's missing
policy still applies. Each such pod's placement says so (``Placement.saturation``,
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
from ksched.engine.load import lines_on_nodes, shares
from ksched.engine.placements import LEAST_LOADED, Saturation
from ksched.engine.snapshot import Snapshot, node_thresholds

# ``MetricLoad``'s ``exempt``: only the pod's own thresholds apply (a relaxed pod's), not the
# nodes'; the metric's missing policy still does.
POD_THRESHOLDS = _core.METRIC_POD_THRESHOLDS


def relax_saturated(
    batch: Batch,
    metrics: Sequence[MetricConfig],
    run: Callable[[float | None], tuple[Outcome, list[str]]],
    deadline_s: float | None,
) -> tuple[Outcome, list[str]]:
    """Run the engine (``run``) on the batch until it leaves no pod unplaced that a threshold
    of a ``leastLoaded`` metric, still on for that pod, rejected some node on: each such pod
    runs again (``Batch.relaxed``), at its place in the batch, so the pods before it are
    placed as before, with that threshold at the least-loaded rejected node's value
    (:func:`relaxed_load`), so that node passes and the more loaded ones do not. Where the pod
    still cannot go there (another filter rejects it, or the batch's earlier pods loaded it past
    that value), the threshold lets the next node through, and is off once none is left.
    Every run relaxes a threshold further and none back, so this ends. The runs share the
    decision deadline (``deadline_s``, from the first): once it has passed, the last run's
    outcome stands, and the pods it left pending are retried."""
    started = time.perf_counter()
    left = deadline_s
    while True:
        out, victim_keys = run(left)
        more = False
        for slot, hits in batch.threshold_hits(out).items():
            for m, side in hits.items():
                if metrics[m].on_saturation != LEAST_LOADED or (slot, m) in batch.off:
                    continue
                relaxed = batch.relaxed.setdefault(slot, {})
                if m in relaxed:
                    batch.passed_over[slot, m] += 1
                else:
                    relaxed[m] = side
                    batch.passed_over[slot, m] = 0
                more = True
        if deadline_s is not None:
            left = deadline_s - (time.perf_counter() - started)
        if not more or (left is not None and left <= 0):
            return out, victim_keys


def relaxed_load(
    load: MetricLoad | None,
    batch: Batch,
    metrics: Sequence[MetricConfig],
    snapshot: Snapshot,
    values: npt.NDArray[np.float64] | None,
) -> MetricLoad | None:
    """``load`` with each relaxed pod's threshold of each relaxed metric (``Batch.relaxed``)
    at the value of the least-loaded node it rejected, past the ``passed_over`` ones (the
    node's own thresholds no longer apply to the pod there): only that node passes of
    those over the threshold. The missing policy still applies. A pod is relaxed only after
    a threshold rejected a node for it, which takes metric values and load inputs."""
    if not batch.relaxed or load is None or values is None:
        return load
    m = len(metrics)
    exempt, above, below = load["exempt"].copy(), load["pod_above"].copy(), load["pod_below"].copy()
    for j, row in enumerate(batch.rows):
        for k, side in batch.relaxed.get(row.slot, {}).items():
            at = j * m + k
            rejected = batch.rejected.get((row.slot, k))
            if rejected is None:
                rejected = _rejected_values(load, metrics[k], snapshot, values[:, k], at, m, side)
                batch.rejected[row.slot, k] = rejected
            passed_over = batch.passed_over[row.slot, k]
            limit = math.nan
            if passed_over < len(rejected):
                limit = float(rejected[passed_over])
            else:
                batch.off.add((row.slot, k))
            exempt[at] = POD_THRESHOLDS
            (above if side == "above" else below)[at] = limit
    return {**load, "exempt": exempt, "pod_above": above, "pod_below": below}


def _rejected_values(
    load: MetricLoad,
    metric: MetricConfig,
    snapshot: Snapshot,
    column: npt.NDArray[np.float64],
    at: int,
    m: int,
    side: str,
) -> npt.NDArray[np.float64]:
    """The values, as the metric filter sees them for pod and metric ``at`` (the pod's
    estimate added where it counts), of the nodes over its threshold on ``side``, distinct,
    least loaded first."""
    seen = np.array(column, dtype=np.float64)
    own = _pod_shares(load, metric, snapshot, at, m)
    if own is not None:
        seen += own
    above, below = lines_on_nodes(snapshot, metric.name, load["pod_above"][at], load["pod_below"][at])
    if side == "above":
        return np.unique(seen[seen > above])
    return np.unique(seen[seen < below])[::-1]


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
        if placement is None:
            continue
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
