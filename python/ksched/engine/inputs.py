"""The Python objects of one batch compiled into ``_core.schedule``'s inputs.

Owns the constraint classes of a batch (pods with equal node-level
constraints share a class), the metric specs and the profile, each built as
the TypedDict of :mod:`ksched.core_types` the binding reads. Integer codes
(operators, effects) come from ``_core``'s own tables; nothing here calls the
engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import numpy.typing as npt

from ksched import _core
from ksched.config import MetricConfig, ProfileConfig
from ksched.core_types import ClassTable, MetricSpec, Missing, Prefer, Profile, Strategy
from ksched.engine.pods import NodeConstraints
from ksched.engine.selectors import Term
from ksched.engine.snapshot import Snapshot


def i64(values: Sequence[int]) -> npt.NDArray[np.int64]:
    return np.asarray(values, dtype=np.int64)


def _i32(values: Sequence[int]) -> npt.NDArray[np.int32]:
    return np.asarray(values, dtype=np.int32)


def _u8(values: Sequence[int]) -> npt.NDArray[np.uint8]:
    return np.asarray(values, dtype=np.uint8)


@dataclass
class _Terms:
    """Node selector terms and their requirements, shared by all classes of a batch."""

    offsets: list[int] = field(default_factory=lambda: [0])
    weights: list[int] = field(default_factory=list)
    keys: list[int] = field(default_factory=list)
    is_field: list[int] = field(default_factory=list)
    operators: list[int] = field(default_factory=list)
    value_offsets: list[int] = field(default_factory=lambda: [0])
    values: list[int] = field(default_factory=list)
    int_values: list[int] = field(default_factory=list)


@dataclass
class ClassColumns:
    """Constraint classes of one batch, built as flat columns (``ClassTable``)."""

    snapshot: Snapshot
    ids: dict[NodeConstraints, int] = field(default_factory=dict)
    node_names: list[int] = field(default_factory=list)
    tol_offsets: list[int] = field(default_factory=lambda: [0])
    tol_keys: list[int] = field(default_factory=list)
    tol_operators: list[int] = field(default_factory=list)
    tol_values: list[int] = field(default_factory=list)
    tol_effects: list[int] = field(default_factory=list)
    node_selector_term: list[int] = field(default_factory=list)
    has_required: list[int] = field(default_factory=list)
    required_offsets: list[int] = field(default_factory=lambda: [0])
    required_terms: list[int] = field(default_factory=list)
    preferred_offsets: list[int] = field(default_factory=lambda: [0])
    preferred_terms: list[int] = field(default_factory=list)
    has_prefilter: list[int] = field(default_factory=list)
    prefilter_offsets: list[int] = field(default_factory=lambda: [0])
    prefilter_nodes: list[int] = field(default_factory=list)
    terms: _Terms = field(default_factory=_Terms)
    # The profile's addedAffinity required terms, and their term ids.
    enforced: tuple[Term, ...] = ()
    enforced_terms: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.enforced_terms = [self._term(term) for term in self.enforced]

    def _term(self, term: Term, weight: int = 0) -> int:
        t, s = self.terms, self.snapshot.strings
        for r in term:
            t.keys.append(-1 if r.is_field else s(r.key))
            t.is_field.append(int(r.is_field))
            t.operators.append(_core.SELECTOR_OPERATORS[r.operator])
            t.values.extend(s(v) for v in r.values)
            t.value_offsets.append(len(t.values))
            t.int_values.append(int(r.values[0]) if r.operator in ("Gt", "Lt") else 0)
        t.weights.append(weight)
        t.offsets.append(len(t.keys))
        return len(t.weights) - 1

    def term(self, term: Term) -> int:
        """Add a required term outside any class (volume node affinity, provisioning topology)."""
        return self._term(term)

    def class_of(self, k: NodeConstraints, prefilter: set[str] | None) -> int:
        existing = self.ids.get(k)
        if existing is not None:
            return existing
        s = self.snapshot.strings
        self.node_names.append(s(k.node_name) if k.node_name else -1)
        for t in k.tolerations:
            self.tol_keys.append(s(t.key) if t.key else -1)
            self.tol_operators.append(_core.TOLERATION_OPERATORS[t.operator])
            self.tol_values.append(s(t.value))
            self.tol_effects.append(_core.EFFECTS[t.effect])
        self.tol_offsets.append(len(self.tol_keys))
        self.node_selector_term.append(self._term(k.node_selector) if k.node_selector else -1)
        self.has_required.append(int(k.required is not None))
        self.required_terms.extend(self._term(term) for term in k.required or ())
        self.required_offsets.append(len(self.required_terms))
        self.preferred_terms.extend(self._term(term, weight) for weight, term in k.preferred)
        self.preferred_offsets.append(len(self.preferred_terms))
        self.has_prefilter.append(int(prefilter is not None))
        if prefilter is not None:
            index = self.snapshot.index
            self.prefilter_nodes.extend(sorted(index[n] for n in prefilter if n in index))
        self.prefilter_offsets.append(len(self.prefilter_nodes))
        self.ids[k] = len(self.ids)
        return self.ids[k]

    def table(self) -> ClassTable:
        t = self.terms
        return {
            "count": len(self.ids),
            "class_node_names": _i32(self.node_names),
            "tol_offsets": i64(self.tol_offsets),
            "tol_keys": _i32(self.tol_keys),
            "tol_operators": _u8(self.tol_operators),
            "tol_values": _i32(self.tol_values),
            "tol_effects": _u8(self.tol_effects),
            "node_selector_term": i64(self.node_selector_term),
            "has_required": _u8(self.has_required),
            "required_offsets": i64(self.required_offsets),
            "required_terms": i64(self.required_terms),
            "preferred_offsets": i64(self.preferred_offsets),
            "preferred_terms": i64(self.preferred_terms),
            "has_prefilter": _u8(self.has_prefilter),
            "prefilter_offsets": i64(self.prefilter_offsets),
            "prefilter_nodes": i64(self.prefilter_nodes),
            "enforced_terms": i64(self.enforced_terms),
            "term_offsets": i64(t.offsets),
            "term_weights": i64(t.weights),
            "req_keys": _i32(t.keys),
            "req_is_field": _u8(t.is_field),
            "req_operators": _u8(t.operators),
            "req_value_offsets": i64(t.value_offsets),
            "req_values": _i32(t.values),
            "req_int_values": i64(t.int_values),
        }


def metric_specs(metrics: Sequence[MetricConfig], snapshot: Snapshot) -> list[MetricSpec]:
    """The engine's view of each metric: scoring direction, thresholds, missing policy, herd estimate."""
    return [
        {
            "prefer": cast(Prefer, m.prefer),
            "target": m.target,
            "range": m.range,
            "above": m.above,
            "below": m.below,
            "missing": cast(Missing, m.missing),
            "weight": m.weight,
            "herd": None if m.herd_resource is None else (snapshot.resources(m.herd_resource), m.herd_factor),
        }
        for m in metrics
    ]


def is_extended_resource(name: str) -> bool:
    """Upstream ``IsExtendedResourceName``: a qualified name outside ``kubernetes.io``."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def engine_profile(p: ProfileConfig, snapshot: Snapshot) -> Profile:
    """The profile with plugins by registry name and resources by the snapshot's columns."""
    res = snapshot.resources
    ignored = set(p.fit_ignored_resources)
    groups = set(p.fit_ignored_groups)
    return {
        "filters": list(p.filters),
        "weights": dict(p.weights),
        "hard_pod_affinity_weight": p.hard_pod_affinity_weight,
        "ignore_preferred_terms_of_existing_pods": p.ignore_preferred_terms_of_existing_pods,
        "fit_strategy": cast(Strategy, p.fit_strategy),
        "shape": list(p.shape),
        "fit_resources": [(res(name), w) for name, w in p.fit_resources],
        "fit_ignored": [
            c
            for c, name in enumerate(res.names)
            if is_extended_resource(name) and (name in ignored or name.partition("/")[0] in groups)
        ],
        "balanced_resources": [res(name) for name in p.balanced_resources],
        "preemption": p.preemption,
    }
