"""What the engine decides about a batch: a :class:`Placement` per pending pod, the
batch's :class:`BatchResult` with its Rust and Python time, and, for ``explain``,
the per-node breakdown read from the engine's explanation arrays.

These are the engine's answers as the loop and the commands read them; how a
batch is compiled and placed is :mod:`ksched.engine.scheduler`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ksched.config import MetricConfig
from ksched.core_types import ExplanationArrays
from ksched.engine.messages import ReasonNames
from ksched.engine.requirements import PodRequirements
from ksched.engine.snapshot import Snapshot
from ksched.engine.storage import ClaimBinding


@dataclass(frozen=True)
class Placement:
    """The engine's verdict on one pending pod."""

    pod: str
    node: str | None
    score: float | None
    message: str | None
    feasible_nodes: int = 0
    attempted: bool = True
    # The parsed pod, so committing the placement needs no second parse.
    requirements: PodRequirements | None = field(default=None, compare=False, repr=False)
    # Preemption (DefaultPreemption): the node nominated for the pod and the pods to evict there.
    nominated_node: str | None = None
    victims: tuple[str, ...] = ()
    # VolumeBinding: the pod's unbound claims and the volume each binds (None: provisioned on ``node``).
    volumes: tuple[ClaimBinding, ...] = ()
    # Not placed: the plugins that rejected some node (upstream's UnschedulablePlugins), whose
    # registered events retry the pod; None where no filter verdict explains the failure.
    rejected_by: frozenset[str] | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "node": self.node,
            "score": self.score,
            "message": self.message,
            "nominatedNode": self.nominated_node,
            "victims": list(self.victims),
            "volumes": [{"claim": b.claim, "volume": b.volume} for b in self.volumes],
        }


@dataclass
class NodeExplanation:
    node: str
    feasible: bool
    plugin: str | None
    reasons: list[str]
    scores: dict[str, dict[str, float]]
    total: float | None
    chosen: bool


@dataclass
class Explanation:
    pod: str
    placement: Placement
    nodes: list[NodeExplanation]
    weights: dict[str, float]


@dataclass
class BatchResult:
    placements: list[Placement]
    explanation: Explanation | None = None
    # Time inside the Rust engine (``_core.schedule``), summed over the batch's gang re-runs.
    rust_seconds: float = 0.0
    # The rest of ``Engine.schedule``, in Python: parsing the pods, compiling the
    # engine's inputs for each run (classes, pod table, preemption victims) and
    # reading its results into placements.
    python_seconds: float = 0.0


def explanation(
    ex: ExplanationArrays,
    snapshot: Snapshot,
    names: ReasonNames,
    metrics: Sequence[MetricConfig],
    placement: Placement | None,
) -> Explanation:
    """The per-node breakdown of the engine's explanation arrays for the pod placed as ``placement``."""
    assert placement is not None
    plugins = [
        p if not p.startswith("metric:") else f"Metric/{metrics[int(p.split(':')[1])].name}"
        for p in ex["plugins"]
    ]
    n = snapshot.count
    raw = np.asarray(ex["raw"]).reshape(len(plugins), n)
    normalized = np.asarray(ex["normalized"]).reshape(len(plugins), n)
    weights = {p: float(w) for p, w in zip(plugins, ex["weights"], strict=True)}
    rows = []
    offsets, codes = ex["reason_offsets"], ex["reason_codes"]
    for i, node in enumerate(snapshot.node_names):
        node_codes = [int(c) for c in codes[int(offsets[i]) : int(offsets[i + 1])]]
        total = float(ex["totals"][i])
        feasible = not node_codes
        scores = {}
        if feasible:
            for k, p in enumerate(plugins):
                scores[p] = {
                    "raw": float(raw[k, i]),
                    "normalized": float(normalized[k, i]),
                    "weighted": float(normalized[k, i]) * weights[p],
                }
        rows.append(
            NodeExplanation(
                node=node,
                feasible=feasible,
                plugin=names.plugin(node_codes[0]) if node_codes else None,
                reasons=[names.reason(c) for c in node_codes],
                scores=scores,
                total=total if feasible else None,
                chosen=placement.node == node,
            )
        )
    return Explanation(placement.pod, placement, rows, weights)
