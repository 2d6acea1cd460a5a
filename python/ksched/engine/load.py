"""The load arithmetic shared by placing, moving and the dry run: a pod's share of a node,
and how much of a pod's load a metric's sample shows.

Owns three rules, each written once in Python (the engine's ``rust/core/src/schedule/load.rs``
and ``state.rs`` apply the first and the last to the pod being placed and the batch's
placements):

- **Share.** A pod using ``amount`` of a resource (engine units: millicores for cpu) moves a
  metric by ``amount / allocatable`` of that resource on its node, signed by the metric's
  ``load_sign`` (up for a metric filtered ``above``, down for free capacity). A node with
  no allocatable of the resource takes no share.
- **Window.** A sample evaluated at ``sampled_at`` over a window ``W`` (a
  ``rate(...[W])``) shows an event at ``t`` in proportion to the part of its window after
  ``t``. So of a pod that arrived at ``t`` it misses, and of a pod that left at ``t`` it still
  shows, :func:`before_event` ``= clip(1 - (sampled_at - t) / W, 0, 1)``; with ``W = 0``, all
  of it while ``t >= sampled_at``, else nothing.
- **Lines.** A metric filters a pod on a node by the node's own threshold annotation where it
  has one, else by the pod's (its priority band's): :func:`lines_on_nodes`.

Pure numpy over a :class:`~ksched.engine.snapshot.Snapshot`; reads no clock.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ksched.engine.snapshot import Snapshot, node_thresholds


def allocatable(snapshot: Snapshot, resource: str) -> npt.NDArray[np.float64] | None:
    """Each node's allocatable of ``resource`` (engine units, by snapshot row); None where no
    node in the snapshot has the resource."""
    c = snapshot.resources.get(resource)
    if c is None:
        return None
    r = len(snapshot.resources)
    return snapshot.arrays["allocatable"].reshape(-1, r)[:, c].astype(np.float64)


def shares(snapshot: Snapshot, resource: str, amount: float, missing: float = 0.0) -> npt.NDArray[np.float64]:
    """A pod using ``amount`` of ``resource``: its share of each node (``missing`` where the
    node has none of the resource)."""
    alloc = allocatable(snapshot, resource)
    if alloc is None:
        return np.full(snapshot.count, missing, dtype=np.float64)
    out = np.full(snapshot.count, missing, dtype=np.float64)
    np.divide(float(amount), alloc, out=out, where=alloc > 0)
    return out


def pod_shares(
    snapshot: Snapshot,
    resource: str,
    rows: npt.NDArray[np.intp],
    amounts: npt.NDArray[np.float64],
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float64]]:
    """Pods on snapshot ``rows`` (-1: a node not in the snapshot) using ``amounts``: which of
    them take a share (their node is known and has the resource), and those shares."""
    alloc = allocatable(snapshot, resource)
    if alloc is None:
        return np.zeros(len(rows), dtype=bool), np.zeros(0, dtype=np.float64)
    on = alloc[np.maximum(rows, 0)] if len(rows) else np.zeros(0, dtype=np.float64)
    counted = (rows >= 0) & (on > 0)
    return counted, np.asarray(amounts, dtype=np.float64)[counted] / on[counted]


def node_share(snapshot: Snapshot, node: str, resource: str, amount: float) -> float | None:
    """One pod's share of ``node`` (None: the node is not in the snapshot, or has none of
    the resource)."""
    row = snapshot.index.get(node)
    alloc = allocatable(snapshot, resource)
    if row is None or alloc is None or not alloc[row] > 0:
        return None
    return float(amount) / float(alloc[row])


def before_event(
    event_at: npt.ArrayLike, sampled_at: float | npt.NDArray[np.float64], window_s: float
) -> npt.NDArray[np.float64]:
    """The part of a sample's window (taken at ``sampled_at`` over ``window_s``; per event
    where an array) that lies before each event: of a pod bound then, what the sample misses;
    of a pod gone then, what it still shows."""
    at = np.asarray(event_at, dtype=np.float64)
    if window_s > 0:
        out: npt.NDArray[np.float64] = np.clip(1.0 - (sampled_at - at) / window_s, 0.0, 1.0)
        return out
    return np.where(at >= sampled_at, 1.0, 0.0)


def lines_on_nodes(
    snapshot: Snapshot, metric: str, pod_above: float, pod_below: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The ``above`` and ``below`` lines metric ``metric`` filters a pod with on each node
    (NaN: none): the node's own threshold where it has one, else the pod's."""
    own_above, own_below = node_thresholds(snapshot, metric)
    return (
        np.where(np.isnan(own_above), pod_above, own_above),
        np.where(np.isnan(own_below), pod_below, own_below),
    )
