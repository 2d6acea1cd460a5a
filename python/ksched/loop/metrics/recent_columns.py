"""One recently bound pod as :class:`~ksched.loop.metrics.recent_pods.RecentPods` holds it, and
the numpy columns a cycle reads them all as (:class:`RecentColumns`, brought up to date from
the pods that changed since: :class:`ColumnsCache`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import compress

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
        """The ``pods`` as columns, in their order, their nodes' rows read from ``index``."""
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

    def updated(
        self, pods: Mapping[str, RecentPod], index: Mapping[str, int], left: list[int], came: list[str]
    ) -> RecentColumns:
        """These columns less the rows ``left`` and with the pods ``came`` (keys of ``pods``)
        after them: what :meth:`of` makes of ``pods`` where they hold the pods of these columns
        less those that left, in their order, and then those that came. The pairs are numbered
        again as :meth:`of` numbers them, by first occurrence."""
        keep = np.ones(len(self.keys), dtype=np.bool_)
        keep[left] = False
        new = RecentColumns.of({k: pods[k] for k in came}, index, self.amounts.shape[1])
        pairs: list[list[tuple[int, str | None]]] = []
        pair_index = np.zeros((int(keep.sum()) + len(came), self.amounts.shape[1]), dtype=np.intp)
        for i, known in enumerate(self.pairs):
            number = {pair: j for j, pair in enumerate(known)}
            each = [number.setdefault(pair, len(number)) for pair in new.pairs[i]]
            ids = np.concatenate(
                [self.pair_index[keep, i], np.asarray(each, dtype=np.intp)[new.pair_index[:, i]]]
            )
            # Numbered again by first occurrence, without the pairs no pod has any longer.
            used, first = np.unique(ids, return_index=True)
            order = used[np.argsort(first, kind="stable")]
            renumber = np.zeros(len(number), dtype=np.intp)
            renumber[order] = np.arange(len(order))
            pair_index[:, i] = renumber[ids]
            every = list(number)
            pairs.append([every[j] for j in order])
        return RecentColumns(
            list(compress(self.keys, keep)) + new.keys,
            list(compress(self.uids, keep)) + new.uids,
            np.concatenate([self.bound_at[keep], new.bound_at]),
            np.concatenate([self.by_ksched[keep], new.by_ksched]),
            np.concatenate([self.rows[keep], new.rows]),
            np.concatenate([self.amounts[keep], new.amounts]),
            np.concatenate([self.kinds[keep], new.kinds]),
            list(compress(self.workloads, keep)) + new.workloads,
            np.concatenate([self.limits[keep], new.limits]),
            list(compress(self.revisions, keep)) + new.revisions,
            pairs,
            pair_index,
        )


class ColumnsCache:
    """The recent pods as :class:`RecentColumns`, brought up to date at a read from the pods
    that changed since the last (:meth:`changed`): the rows of those that left are dropped and
    those that came are added after the rest, as a dict holds a key deleted and set again. So a
    cycle in a herd, which binds a few pods and lets a few go, costs their rows, not every
    recent pod's; the columns are built whole where the node rows changed, or where more than
    half of the pods did."""

    def __init__(self, metrics: int) -> None:
        self._metrics = metrics
        self._columns: RecentColumns | None = None
        self._index: Mapping[str, int] | None = None
        # Each key's row in the columns, and the keys that changed since they were built, in the
        # order they last did.
        self._rows: dict[str, int] = {}
        self._changed: dict[str, None] = {}

    def changed(self, key: str) -> None:
        """The pod ``key`` came, left, or was set again (it is then last in the pods' order)."""
        self._changed.pop(key, None)
        self._changed[key] = None

    def of(self, pods: Mapping[str, RecentPod], index: Mapping[str, int]) -> RecentColumns:
        """The columns of ``pods``, which must hold the pods last read less those that changed
        since, in their order, then those that changed and are still there, in the order they
        did: what :class:`~ksched.loop.metrics.recent_pods.RecentPods` keeps."""
        columns = self._columns
        if columns is not None and index is self._index and not self._changed:
            return columns
        if columns is None or index is not self._index or 2 * len(self._changed) > len(columns.keys):
            columns = RecentColumns.of(pods, index, self._metrics)
        else:
            rows = self._rows
            left = [rows[key] for key in self._changed if key in rows]
            came = [key for key in self._changed if key in pods]
            columns = columns.updated(pods, index, left, came)
        self._columns, self._index = columns, index
        self._rows = dict(zip(columns.keys, range(len(columns.keys)), strict=True))
        self._changed.clear()
        return columns
