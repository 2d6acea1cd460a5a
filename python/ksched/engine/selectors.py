"""Node and label selectors as upstream reads them.

Owns the requirement lists of node selector terms (``matchExpressions`` and
``matchFields``), label selectors (``matchLabels`` become ``In`` with one
value), their validation with upstream's operators and limits, label
selector matching, and NodeAffinity's PreFilter (the node names
``matchFields metadata.name`` restricts a pod to).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ksched import _core
from ksched.config.names import is_label_value
from ksched.errors import MalformedObjectError
from ksched.objects import Obj

# A pod whose selectors or label sets exceed this is rejected as malformed
# rather than slowing every node's filter (the API server caps labels far below this).
MAX_SELECTOR_ITEMS = 1000
NODE_SELECTOR_OPERATORS = tuple(_core.SELECTOR_OPERATORS)
LABEL_SELECTOR_OPERATORS = tuple(_core.POD_SELECTOR_OPERATORS)


_INT64 = re.compile(r"^[+-]?\d+$")


def parse_int64(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, 64)``, or None."""
    if not _INT64.match(text):
        return None
    v = int(text)
    return v if -(2**63) <= v < 2**63 else None


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]
    is_field: bool = False


Term = tuple[Requirement, ...]

# A requirement no node meets: no node has a label with the empty key.
NO_NODE = Requirement("", "Exists", ())


def invalid_label_value(term: Term) -> str | None:
    """The first In/NotIn label value of ``term`` that upstream's ``labels.NewRequirement`` rejects."""
    for r in term:
        if not r.is_field and r.operator in ("In", "NotIn"):
            for v in r.values:
                if not is_label_value(v):
                    return v
    return None


def required_term(term: Term) -> Term:
    """A required node selector term as upstream's LazyErrorNodeSelector reads it: a
    term whose label requirements do not parse (an invalid In/NotIn value, which
    the API server rejects in new pods but pods stored before it did keep)
    matches no node; its field requirements still restrict NodeAffinity's
    PreFilter, which reads the raw terms."""
    if invalid_label_value(term) is None:
        return term
    return (NO_NODE, *(r for r in term if r.is_field))


def requirement_list(
    pod: str, field: str, raw: Any, *, fields: bool, operators: tuple[str, ...] = NODE_SELECTOR_OPERATORS
) -> Term:
    """Node selector requirements (``operators`` narrows them to a label selector's)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise MalformedObjectError(pod, field, "must be a list of requirements")
    if len(raw) > MAX_SELECTOR_ITEMS:
        raise MalformedObjectError(pod, field, f"has {len(raw)} requirements (at most {MAX_SELECTOR_ITEMS})")
    out = []
    for i, r in enumerate(raw):
        f = f"{field}[{i}]"
        if not isinstance(r, dict) or not isinstance(r.get("key"), str):
            raise MalformedObjectError(pod, f, "must be a mapping with a string key")
        op = r.get("operator")
        if op not in operators:
            raise MalformedObjectError(
                pod, f"{f}.operator", f"unknown operator {op!r} (allowed: {', '.join(operators)})"
            )
        values = r.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise MalformedObjectError(pod, f"{f}.values", "must be a list of strings")
        if len(values) > MAX_SELECTOR_ITEMS:
            raise MalformedObjectError(
                pod, f"{f}.values", f"has {len(values)} values (at most {MAX_SELECTOR_ITEMS})"
            )
        if fields:
            if r["key"] != "metadata.name":
                raise MalformedObjectError(
                    pod, f"{f}.key", f"unsupported field {r['key']!r} (allowed: metadata.name)"
                )
            if op not in ("In", "NotIn") or len(values) != 1:
                raise MalformedObjectError(
                    pod, f, "a metadata.name field selector takes In or NotIn with one value"
                )
        elif op in ("In", "NotIn") and not values:
            raise MalformedObjectError(pod, f"{f}.values", f"operator {op} needs at least one value")
        elif op in ("Exists", "DoesNotExist") and values:
            raise MalformedObjectError(pod, f"{f}.values", f"operator {op} takes no values")
        elif op in ("Gt", "Lt") and (len(values) != 1 or parse_int64(values[0]) is None):
            raise MalformedObjectError(pod, f"{f}.values", f"operator {op} takes exactly one integer value")
        out.append(Requirement(r["key"], op, tuple(values), is_field=fields))
    return tuple(out)


def node_selector_term(pod: str, field: str, raw: Any) -> Term:
    if not isinstance(raw, dict):
        raise MalformedObjectError(pod, field, "must be a node selector term")
    return requirement_list(pod, f"{field}.matchExpressions", raw.get("matchExpressions"), fields=False) + (
        requirement_list(pod, f"{field}.matchFields", raw.get("matchFields"), fields=True)
    )


def prefilter_node_names(required: Iterable[Term] | None) -> set[str] | None:
    """NodeAffinity's PreFilter: the node names that `matchFields metadata.name In`
    restricts every term to, or None when some term does not restrict (all nodes)."""
    if required is None:
        return None
    names: set[str] = set()
    terms = list(required)
    if not terms:
        return None
    for term in terms:
        term_names: set[str] | None = None
        for r in term:
            if r.is_field and r.operator == "In":
                s = set(r.values)
                term_names = s if term_names is None else term_names & s
        if term_names is None:
            return None
        names |= term_names
    return names


def added_affinity(raw: Obj | None) -> tuple[tuple[Term, ...] | None, tuple[tuple[int, Term], ...]]:
    """NodeAffinityArgs ``addedAffinity`` (validated with the configuration) as
    required terms (None: none) and weighted preferred terms."""
    if raw is None:
        return None, ()
    field = "addedAffinity"
    required_raw = raw.get("requiredDuringSchedulingIgnoredDuringExecution")
    required = (
        None
        if required_raw is None
        else tuple(
            node_selector_term(field, f"{field}.required[{i}]", t)
            for i, t in enumerate(required_raw["nodeSelectorTerms"])
        )
    )
    preferred = tuple(
        (int(p["weight"]), node_selector_term(field, f"{field}.preferred[{i}]", p["preference"]))
        for i, p in enumerate(raw.get("preferredDuringSchedulingIgnoredDuringExecution") or [])
    )
    return required, preferred


# -- pod-level constraints (InterPodAffinity, PodTopologySpread) ---------------


# A label selector's requirements (matchLabels become In with one value); None is a nil selector.
LabelSelector = tuple[Requirement, ...]


def label_selector(pod: str, field: str, raw: Any) -> LabelSelector | None:
    """metav1.LabelSelector: None for nil, () for empty (matches everything)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise MalformedObjectError(pod, field, "must be a label selector")
    out: list[Requirement] = []
    match_labels = raw.get("matchLabels") or {}
    if not isinstance(match_labels, dict) or not all(isinstance(v, str) for v in match_labels.values()):
        raise MalformedObjectError(pod, f"{field}.matchLabels", "must be a mapping of label to string value")
    out.extend(Requirement(str(k), "In", (v,)) for k, v in sorted(match_labels.items()))
    out.extend(
        requirement_list(
            pod,
            f"{field}.matchExpressions",
            raw.get("matchExpressions"),
            fields=False,
            operators=LABEL_SELECTOR_OPERATORS,
        )
    )
    return tuple(out)


def selector_matches(selector: LabelSelector | None, labels: dict[str, str]) -> bool:
    if selector is None:
        return False
    for r in selector:
        v = labels.get(r.key)
        if r.operator == "In":
            ok = v is not None and v in r.values
        elif r.operator == "NotIn":
            ok = v is None or v not in r.values
        elif r.operator == "Exists":
            ok = v is not None
        else:
            ok = v is None
        if not ok:
            return False
    return True
