"""The Python objects of one batch compiled into ``_core.schedule``'s inputs.

Owns the integer codes the engine reads (operators, metric preferences,
missing-value policies) and the flat columns built from them: the constraint
classes of a batch (pods with equal node-level constraints share a class),
the metric specs and the profile. Nothing here calls the engine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ksched.config import FILTER_PLUGINS, MetricConfig, ProfileConfig
from ksched.engine.pods import NodeConstraints, Term
from ksched.engine.snapshot import EFFECTS, Snapshot

OPERATORS = {"In": 0, "NotIn": 1, "Exists": 2, "DoesNotExist": 3, "Gt": 4, "Lt": 5}
TOLERATION_OPERATORS = {"Equal": 0, "Exists": 1}
PREFER_CODES = {"lower": 0, "higher": 1, "target": 2}
MISSING_CODES = {"neutral": 0, "worst": 1, "exclude": 2}


def _i64(values: Sequence[int]) -> npt.NDArray[np.int64]:
    return np.asarray(values, dtype=np.int64)


@dataclass
class _ClassTable:
    """Constraint classes of one batch, built as flat columns."""

    snapshot: Snapshot
    ids: dict[NodeConstraints, int] = field(default_factory=dict)
    cols: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in [
            "class_node_names",
            "tol_keys",
            "tol_operators",
            "tol_values",
            "tol_effects",
            "node_selector_term",
            "has_required",
            "required_terms",
            "preferred_terms",
            "has_prefilter",
            "prefilter_nodes",
            "term_weights",
            "req_keys",
            "req_is_field",
            "req_operators",
            "req_values",
            "req_int_values",
        ]:
            self.cols[name] = []
        for name in (
            "tol_offsets",
            "required_offsets",
            "preferred_offsets",
            "prefilter_offsets",
            "term_offsets",
            "req_value_offsets",
        ):
            self.cols[name] = [0]

    def _term(self, term: Term, weight: int = 0) -> int:
        c, s = self.cols, self.snapshot.strings
        for r in term:
            c["req_keys"].append(-1 if r.is_field else s(r.key))
            c["req_is_field"].append(int(r.is_field))
            c["req_operators"].append(OPERATORS[r.operator])
            c["req_values"].extend(s(v) for v in r.values)
            c["req_value_offsets"].append(len(c["req_values"]))
            c["req_int_values"].append(int(r.values[0]) if r.operator in ("Gt", "Lt") else 0)
        c["term_weights"].append(weight)
        c["term_offsets"].append(len(c["req_keys"]))
        return len(c["term_weights"]) - 1

    def class_of(self, k: NodeConstraints, prefilter: set[str] | None) -> int:
        existing = self.ids.get(k)
        if existing is not None:
            return existing
        c, s = self.cols, self.snapshot.strings
        c["class_node_names"].append(s(k.node_name) if k.node_name else -1)
        for t in k.tolerations:
            c["tol_keys"].append(s(t.key) if t.key else -1)
            c["tol_operators"].append(TOLERATION_OPERATORS[t.operator])
            c["tol_values"].append(s(t.value))
            c["tol_effects"].append(EFFECTS[t.effect])
        c["tol_offsets"].append(len(c["tol_keys"]))
        c["node_selector_term"].append(self._term(k.node_selector) if k.node_selector else -1)
        c["has_required"].append(int(k.required is not None))
        for term in k.required or ():
            c["required_terms"].append(self._term(term))
        c["required_offsets"].append(len(c["required_terms"]))
        for weight, term in k.preferred:
            c["preferred_terms"].append(self._term(term, weight))
        c["preferred_offsets"].append(len(c["preferred_terms"]))
        c["has_prefilter"].append(int(prefilter is not None))
        if prefilter is not None:
            index = self.snapshot.index
            c["prefilter_nodes"].extend(sorted(index[n] for n in prefilter if n in index))
        c["prefilter_offsets"].append(len(c["prefilter_nodes"]))
        self.ids[k] = len(self.ids)
        return self.ids[k]

    def engine_classes(self) -> dict[str, Any]:
        dtypes = {
            "tol_operators": np.uint8,
            "tol_effects": np.uint8,
            "has_required": np.uint8,
            "has_prefilter": np.uint8,
            "req_is_field": np.uint8,
            "req_operators": np.uint8,
            "class_node_names": np.int32,
            "tol_keys": np.int32,
            "tol_values": np.int32,
            "req_keys": np.int32,
            "req_values": np.int32,
        }
        out: dict[str, Any] = {k: np.asarray(v, dtype=dtypes.get(k, np.int64)) for k, v in self.cols.items()}
        out["count"] = len(self.ids)
        return out


def metric_specs(metrics: Sequence[MetricConfig], snapshot: Snapshot) -> npt.NDArray[np.float64]:
    rows = []
    nan = math.nan
    for m in metrics:
        herd_column = -1 if m.herd_resource is None else snapshot.resources(m.herd_resource)
        lo, hi = m.range if m.range else (nan, nan)
        rows.append(
            [
                PREFER_CODES[m.prefer],
                m.target if m.target is not None else nan,
                lo,
                hi,
                nan if m.above is None else m.above,
                nan if m.below is None else m.below,
                MISSING_CODES[m.missing],
                m.weight,
                herd_column,
                m.herd_factor,
            ]
        )
    return np.asarray(rows, dtype=np.float64).reshape(-1)


def engine_profile(p: ProfileConfig, snapshot: Snapshot) -> dict[str, Any]:
    res = snapshot.resources
    return {
        "taint_toleration_weight": p.weights.get("TaintToleration", 0),
        "node_affinity_weight": p.weights.get("NodeAffinity", 0),
        "fit_weight": p.weights.get("NodeResourcesFit", 0),
        "balanced_weight": p.weights.get("NodeResourcesBalancedAllocation", 0),
        "inter_pod_affinity_weight": p.weights.get("InterPodAffinity", 0),
        "pod_topology_spread_weight": p.weights.get("PodTopologySpread", 0),
        "hard_pod_affinity_weight": p.hard_pod_affinity_weight,
        "preemption": p.preemption,
        "fit_strategy": p.fit_strategy,
        "shape": list(p.shape),
        "fit_resources": [(res(name), w) for name, w in p.fit_resources],
        "balanced_resources": [res(name) for name in p.balanced_resources],
        "filters": [f in p.filters for f in FILTER_PLUGINS],
    }
