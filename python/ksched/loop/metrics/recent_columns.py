"""One recently bound pod as :class:`~ksched.loop.metrics.recent_pods.RecentPods` holds it, and
the numpy columns a cycle reads them all as (:class:`RecentColumns`, brought up to date from
the pods that changed since: :class:`ColumnsCache`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import compress
from typing import Any

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
        self,
        pods: Mapping[str, RecentPod],
        index: Mapping[str, int],
        left: list[int],
        replaced: list[tuple[int, str]],
        came: list[str],
    ) -> RecentColumns:
        """These columns less the rows ``left``, with the rows ``replaced`` (row, key of
        ``pods``) set to those pods in place, and with the pods ``came`` (keys of ``pods``)
        after them: what :meth:`of` makes of ``pods`` where they hold the pods of these columns
        less those that left, in their order, and then those that came. The pairs are numbered
        again as :meth:`of` numbers them, by first occurrence."""
        keep = np.ones(len(self.keys), dtype=np.bool_)
        keep[left] = False
        # Where each kept row goes, and so each replaced one.
        at = (np.cumsum(keep) - 1)[[row for row, _ in replaced]]
        r = len(replaced)
        new = RecentColumns.of(
            {k: pods[k] for k in [*(k for _, k in replaced), *came]}, index, self.amounts.shape[1]
        )

        def joined(old: npt.NDArray[Any], fresh: npt.NDArray[Any]) -> npt.NDArray[Any]:
            kept = old[keep]
            kept[at] = fresh[:r]
            return np.concatenate([kept, fresh[r:]])

        def listed(old: list[Any], fresh: list[Any]) -> list[Any]:
            kept = list(compress(old, keep))
            for j, position in enumerate(at.tolist()):
                kept[position] = fresh[j]
            return kept + fresh[r:]

        pairs: list[list[tuple[int, str | None]]] = []
        pair_index = np.zeros((int(keep.sum()) + len(came), self.amounts.shape[1]), dtype=np.intp)
        for i, known in enumerate(self.pairs):
            number = {pair: j for j, pair in enumerate(known)}
            each = [number.setdefault(pair, len(number)) for pair in new.pairs[i]]
            ids = joined(self.pair_index[:, i], np.asarray(each, dtype=np.intp)[new.pair_index[:, i]])
            # Numbered again by first occurrence, without the pairs no pod has any longer.
            used, first = np.unique(ids, return_index=True)
            order = used[np.argsort(first, kind="stable")]
            renumber = np.zeros(len(number), dtype=np.intp)
            renumber[order] = np.arange(len(order))
            pair_index[:, i] = renumber[ids]
            every = list(number)
            pairs.append([every[j] for j in order])
        return RecentColumns(
            listed(self.keys, new.keys),
            listed(self.uids, new.uids),
            joined(self.bound_at, new.bound_at),
            joined(self.by_ksched, new.by_ksched),
            joined(self.rows, new.rows),
            joined(self.amounts, new.amounts),
            joined(self.kinds, new.kinds),
            listed(self.workloads, new.workloads),
            joined(self.limits, new.limits),
            listed(self.revisions, new.revisions),
            pairs,
            pair_index,
        )


class ColumnsCache:
    """The recent pods as :class:`RecentColumns`, brought up to date at a read from the pods
    that changed since the last, as a dict orders its keys: the rows of the pods that left
    (:meth:`left`) are dropped, those of the pods set again in place (:meth:`set`) are
    replaced where they stand, and those that came (:meth:`set`, a key not held, or held and
    left since) are added after the rest. So a cycle in a herd, which binds a few pods and
    lets a few go, costs their rows, not every recent pod's; the columns are built whole where
    the node rows changed, or where more than half of the pods did."""

    def __init__(self, metrics: int) -> None:
        self._metrics = metrics
        self._columns: RecentColumns | None = None
        self._index: Mapping[str, int] | None = None
        # Each key's row in the columns; the keys set since they were built, in the order they
        # came; and those that left since.
        self._rows: dict[str, int] = {}
        self._set: dict[str, None] = {}
        self._left: set[str] = set()

    def set(self, key: str) -> None:
        """The pod ``key`` came (last in the pods' order) or was set again in place."""
        self._set.setdefault(key, None)

    def left(self, key: str) -> None:
        """The pod ``key`` left (were it to come back, it comes last)."""
        self._set.pop(key, None)
        self._left.add(key)

    def of(self, pods: Mapping[str, RecentPod], index: Mapping[str, int]) -> RecentColumns:
        """The columns of ``pods``, which must hold the pods last read less those that left
        since, in their order, then those that came, in the order they did: a dict's order of
        its keys, as :class:`~ksched.loop.metrics.recent_pods.RecentPods` keeps them."""
        columns = self._columns
        changed = len(self._set) + len(self._left)
        if columns is not None and index is self._index and not changed:
            return columns
        if columns is None or index is not self._index or 2 * changed > len(columns.keys):
            columns = RecentColumns.of(pods, index, self._metrics)
        else:
            rows, gone = self._rows, self._left
            left = [rows[key] for key in gone if key in rows]
            replaced = [(rows[key], key) for key in self._set if key in rows and key not in gone]
            came = [key for key in self._set if key not in rows or key in gone]
            columns = columns.updated(pods, index, left, replaced, came)
        self._columns, self._index = columns, index
        self._rows = dict(zip(columns.keys, range(len(columns.keys)), strict=True))
        self._set.clear()
        self._left.clear()
        return columns
