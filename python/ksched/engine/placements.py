"""What the engine decides about a batch: a :class:`Placement` per pending pod, the
batch's :class:`BatchResult` with its Rust and Python time, and, for ``explain``,
the per-node breakdown read from the engine's explanation arrays; and placed pods
committed to a snapshot (:func:`commit_placements`), as the binds' watch events would.

These are the engine's answers as the loop and the commands read them; how a
batch is compiled and placed is :mod:`ksched.engine.scheduler`'s.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ksched.config import MetricConfig
from ksched.config.metrics import ON_SATURATION
from ksched.core_types import ExplanationArrays
from ksched.engine.messages import ReasonNames
from ksched.engine.pod_level import PodInfo
from ksched.engine.pods import HostPort
from ksched.engine.podtable import Evictable
from ksched.engine.requirements import PodRequirements
from ksched.engine.snapshot import Snapshot, add_usage
from ksched.engine.storage import ClaimBinding

# ``MetricConfig.on_saturation``: the pod waits, or goes to the least-loaded node.
PENDING, LEAST_LOADED = ON_SATURATION


@dataclass(frozen=True)
class Saturation:
    """A metric whose threshold rejected every node that passed the other filters for a pod.

    ``policy`` is the metric's ``onSaturation``. Where the pod was placed anyway
    (``leastLoaded``), ``value`` is the chosen node's value of the metric when the
    batch started (None: the node has none) and ``threshold`` the one it is held to
    (``above 0.9``); for a pod left pending both are None. ``pod_share`` is what the pod's own
    load estimate adds to the node's value as the filter counts it (its estimate, deviations
    included, over the node's allocatable); None where the metric counts no estimate for the
    pod. A node that reads cool can be over the line with a large pod nothing was learned of."""

    metric: str
    policy: str
    value: float | None = None
    threshold: str | None = None
    pod_share: float | None = None

    def note(self, node: str) -> str:
        """The ``PlacedOverThreshold`` event's note for a pod placed on ``node``."""
        value = "no value" if self.value is None else f"{self.value:g}"
        adds = "" if self.pod_share is None else f" and this pod's load estimate adds {self.pod_share:.3g}"
        return (
            f"placed on {node} over the {self.metric} threshold: {self.metric} there was {value} "
            f"before this batch{adds}, threshold {self.threshold}; every node that passed the "
            f"other filters was over it (onSaturation: {self.policy})"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "policy": self.policy,
            "value": self.value,
            "threshold": self.threshold,
            "podShare": self.pod_share,
        }


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
    # The metrics whose thresholds every node that passed the other filters was over: placed
    # anyway (``node`` set, onSaturation leastLoaded) or left pending.
    saturation: tuple[Saturation, ...] = ()

    def over_threshold(self) -> list[str]:
        """The ``PlacedOverThreshold`` notes of a pod placed over thresholds (none otherwise)."""
        if self.node is None:
            return []
        return [s.note(self.node) for s in self.saturation]

    def as_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "node": self.node,
            "score": self.score,
            "message": self.message,
            "nominatedNode": self.nominated_node,
            "victims": list(self.victims),
            "volumes": [{"claim": b.claim, "volume": b.volume} for b in self.volumes],
            "saturation": [s.as_json() for s in self.saturation],
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


def commit_placements(snapshot: Snapshot, placements: Sequence[Placement]) -> Snapshot:
    """Count placed pods on their nodes, as the watch confirming the binds would (the pods are not modified)."""
    index = snapshot.index
    now = time.time()
    bound: list[tuple[str, int, PodInfo, Evictable]] = []
    usage: list[tuple[int, PodRequirements, tuple[HostPort, ...]]] = []
    for p in placements:
        if p.node is None:
            continue
        if p.volumes:
            snapshot.storage.assume(p.volumes, p.node)
        req = p.requirements
        if req is not None:
            node = index[p.node]
            evictable = Evictable(req.priority, now, req, req.host_ports)
            bound.append((p.pod, node, req.info, evictable))
            usage.append((node, req, req.host_ports))
    snapshot.pods.add_many(bound)
    return add_usage(snapshot, usage)
