"""One recently bound pod as :class:`~ksched.loop.metrics.recent_pods.RecentPods` holds it, and
the numpy columns a cycle reads them all as (:class:`RecentColumns`, rebuilt only when the set
changed)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class RecentPod:
    uid: str
    node: str
    bound_at: float
    # Bound by ksched (the only pods a legacy estimate counts).
    by_ksched: bool
    # The configured guess per estimating metric (``RecentPods.metrics``), in the engine's
    # unit, and what each guess was made from (:func:`ksched.engine.estimate.guess`).
    amounts: tuple[int, ...]
    kinds: tuple[int, ...]
    # Per estimating metric, the pod's workload (what it learns under) and its limit (0: none).
    workloads: tuple[str | None, ...]
    limits: tuple[int, ...]
    # The revision of its workload's template it was made from
    # (:func:`ksched.engine.estimate.revision_of`).
    revision: str | None = None


def margins_by_workload(
    nodes: int, rows: npt.NDArray[np.intp], workloads: npt.NDArray[np.intp], margins: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """Per node (``nodes`` rows), the variance the prior's ``margins`` of its pods (on ``rows``,
    of ``workloads``) stand for: summed within a workload on a node, squared, and summed across
    its workloads."""
    stride = int(workloads.max(initial=0)) + 1
    unique, inverse = np.unique(rows.astype(np.int64) * stride + workloads, return_inverse=True)
    per_workload = np.zeros(len(unique))
    np.add.at(per_workload, inverse, margins)
    variance = np.zeros(nodes)
    np.add.at(variance, unique // stride, per_workload * per_workload)
    return variance


@dataclass(frozen=True)
class RecentColumns:
    keys: list[str]
    uids: list[str]
    bound_at: npt.NDArray[np.float64]
    by_ksched: npt.NDArray[np.bool_]
    # Snapshot row of each pod's node (-1: not in the table).
    rows: npt.NDArray[np.intp]
    amounts: npt.NDArray[np.int64]
    kinds: npt.NDArray[np.int8]
    workloads: list[tuple[str | None, ...]]
    limits: npt.NDArray[np.int64]
    revisions: list[str | None]
    # Per metric, the distinct (kind, workload) of the pods, and each pod's among them: a
    # cycle looks up the terms of each once.
    pairs: list[list[tuple[int, str | None]]]
    pair_index: npt.NDArray[np.intp]

    @staticmethod
    def of(pods: Mapping[str, RecentPod], index: Mapping[str, int], metrics: int) -> RecentColumns:
        n = len(pods)
        values = pods.values()
        pairs: list[list[tuple[int, str | None]]] = []
        pair_index = np.zeros((n, metrics), dtype=np.intp)
        for i in range(metrics):
            seen: dict[tuple[int, str | None], int] = {}
            for j, p in enumerate(values):
                pair_index[j, i] = seen.setdefault((p.kinds[i], p.workloads[i]), len(seen))
            pairs.append(list(seen))
        return RecentColumns(
            list(pods),
            [p.uid for p in values],
            np.fromiter((p.bound_at for p in values), dtype=np.float64, count=n),
            np.fromiter((p.by_ksched for p in values), dtype=np.bool_, count=n),
            np.fromiter((index.get(p.node, -1) for p in values), dtype=np.intp, count=n),
            np.array([p.amounts for p in values], dtype=np.int64).reshape(n, metrics),
            np.array([p.kinds for p in values], dtype=np.int8).reshape(n, metrics),
            [p.workloads for p in values],
            np.array([p.limits for p in values], dtype=np.int64).reshape(n, metrics),
            [p.revision for p in values],
            pairs,
            pair_index,
        )
