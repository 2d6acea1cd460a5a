"""The engine's integer output for a batch read into placements.

Owns turning each row's verdict into its :class:`~ksched.engine.placements.Placement`:
a node (with the volumes it binds), a nomination with the pods to evict, not
attempted (the decision deadline cut it), or upstream's FailedScheduling message,
built from the counted reasons (:mod:`ksched.engine.messages`) with
DefaultPreemption's PostFilter message; and, for ``explain``, the per-node breakdown.
It reads the last run's output only: which runs there were is the caller's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ksched import _core
from ksched.config import MetricConfig
from ksched.core_types import Outcome
from ksched.engine.batch import Batch
from ksched.engine.messages import (
    NOT_ELIGIBLE_NEVER,
    NOT_ELIGIBLE_TERMINATING,
    POSTFILTER,
    fit_error,
    post_filter,
    with_post_filter,
)
from ksched.engine.placements import Explanation, Placement, explanation
from ksched.engine.snapshot import Snapshot

# What every placed pod's Placement shares: each is a copy of its fields with the pod's set
# (see read_verdicts; no __init__, which checks a setattr per field, per placed pod).
_PLACED = Placement("", None, None, None)


def read_verdicts(snapshot: Snapshot, batch: Batch, out: Outcome, victim_keys: Sequence[str]) -> None:
    """Each row's placement from the engine's output: a node, a nomination with the
    pods to evict, not attempted (the decision deadline), or upstream's FitError text."""
    total = snapshot.count
    chosen, offsets, codes, counts = (
        out["nodes"],
        out["reason_offsets"],
        out["reason_codes"],
        out["reason_counts"],
    )

    def fit_error_of(j: int) -> str:
        lo, hi = int(offsets[j]), int(offsets[j + 1])
        return fit_error(total, [(batch.names.reason(int(codes[k])), int(counts[k])) for k in range(lo, hi)])

    def rejected_by(j: int) -> frozenset[str]:
        return frozenset(batch.names.plugin(int(c)) for c in codes[int(offsets[j]) : int(offsets[j + 1])])

    # DefaultPreemption's verdict per pod that fits nowhere (none: preemption disabled).
    verdicts: dict[int, tuple[int, int]] = {
        int(row): (int(out["postfilter_verdicts"][k]), k) for k, row in enumerate(out["postfilter_pods"])
    }

    def preemption_of(j: int, may_preempt: bool) -> str | None:
        """DefaultPreemption's PostFilter message: None where it does not run, "" where
        it nominated a node (upstream: Success, no message)."""
        if j not in verdicts:
            return None
        verdict, k = verdicts[j]
        if not may_preempt or verdict == POSTFILTER["never"]:
            return NOT_ELIGIBLE_NEVER
        if verdict == POSTFILTER["nominated"]:
            return ""
        if verdict == POSTFILTER["terminating"]:
            return NOT_ELIGIBLE_TERMINATING
        lo, hi = int(out["postfilter_offsets"][k]), int(out["postfilter_offsets"][k + 1])
        pcodes, pcounts = out["postfilter_codes"], out["postfilter_counts"]
        return fit_error(
            total, [(batch.names.reason(int(pcodes[i])), int(pcounts[i])) for i in range(lo, hi)]
        )

    def failed(j: int, may_preempt: bool) -> str:
        """Upstream's FailedScheduling message: the FitError and its PostFilter message."""
        return with_post_filter(fit_error_of(j), post_filter(preemption_of(j, may_preempt)))

    # As Python ints and floats once, not one numpy scalar per pod.
    nodes, nominees, scores, feasible, volume_offsets = (
        chosen.tolist(),
        out["nominated"].tolist(),
        out["scores"].tolist(),
        out["feasible"].tolist(),
        out["volume_offsets"].tolist(),
    )
    results, node_names, claims = batch.results, snapshot.node_names, batch.volumes
    placed, new_placement, set_attributes = _PLACED.__dict__, object.__new__, object.__setattr__
    for j, row in enumerate(batch.rows):
        req = row.req
        node = nodes[j]
        nominee = nominees[j]
        if nominee >= 0:
            lo, hi = int(out["victim_offsets"][j]), int(out["victim_offsets"][j + 1])
            victims = tuple(victim_keys[int(v)] for v in out["victims"][lo:hi])
            # The nomination and victims are the Placement's; the message is upstream's
            # (no PostFilter text for a nominating preemption).
            batch.results[row.slot] = Placement(
                req.key,
                None,
                None,
                failed(j, req.may_preempt),
                requirements=req,
                nominated_node=snapshot.node_names[nominee],
                victims=victims,
                rejected_by=rejected_by(j),
            )
        elif node >= 0:
            score = scores[j]
            # _PLACED's fields with the pod's own (one dict copy, no __init__).
            values = placed.copy()
            values["pod"] = req.key
            values["node"] = node_names[node]
            values["score"] = None if math.isnan(score) else score  # NaN: its nominated node, taken unscored
            values["feasible_nodes"] = feasible[j]
            values["requirements"] = req
            if claims is not None:
                lo, hi = volume_offsets[j], volume_offsets[j + 1]
                if hi > lo:
                    values["volumes"] = claims.bindings(j, [int(v) for v in out["volumes"][lo:hi]])
            result = new_placement(Placement)
            set_attributes(result, "__dict__", values)
            results[row.slot] = result
        elif node == _core.NOT_ATTEMPTED:
            batch.results[row.slot] = Placement(req.key, None, None, None, attempted=False)
        else:
            batch.results[row.slot] = Placement(
                req.key, None, None, failed(j, req.may_preempt), rejected_by=rejected_by(j)
            )


def explanation_of(
    snapshot: Snapshot, batch: Batch, out: Outcome, metrics: Sequence[MetricConfig]
) -> Explanation | None:
    """The per-node breakdown of the pod ``explain`` named, when the engine's last run attempted it."""
    if out["explanation"] is None or batch.explain_slot is None or batch.explain_row() is None:
        return None
    return explanation(out["explanation"], snapshot, batch.names, metrics, batch.results[batch.explain_slot])
