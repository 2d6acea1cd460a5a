"""A plain pure-Python reference of the engine, written for clarity, not speed.

It is the oracle the property tests compare ``ksched._core`` against on
random clusters, and the baseline ``ksched bench`` reports the speed-up
over. It reads the same parsed pod requirements (``ksched.engine.requirements``) but
re-implements every filter, score, normalization and the in-batch
accounting from upstream's definitions with dicts and loops. It ships in
the package (not only in tests/) because ``ksched bench`` runs it.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any

from ksched.config import Config, MetricConfig, ProfileConfig
from ksched.config.steering import DEFAULT_MARK_KEYS, is_mark
from ksched.engine.messages import (
    AFFINITY_CONFLICT,
    fit_error,
    post_filter,
    prefilter_error,
    with_post_filter,
)
from ksched.engine.pods import host_ports, pod_requests
from ksched.engine.quantity import canonical, parse_quantity
from ksched.engine.requirements import PodRequirements, requirements
from ksched.engine.selectors import Requirement, Term, parse_int64, prefilter_node_names
from ksched.errors import MalformedObjectError
from ksched.objects import Obj, is_terminal, meta, name, spec, stable_key

MASK = (1 << 64) - 1
NATIVE = ("cpu", "memory", "ephemeral-storage")


def splitmix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def tie_key(seed: int, pod: str, node: str) -> int:
    return splitmix64((seed ^ splitmix64(stable_key(pod) ^ splitmix64(stable_key(node)))) & MASK)


def go_div(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


@dataclass
class RefNode:
    name: str
    labels: dict[str, str]
    taints: list[dict[str, str]]
    unschedulable: bool
    allocatable: dict[str, int]
    allowed_pods: int
    requested: dict[str, int] = field(default_factory=dict)
    nonzero: list[int] = field(default_factory=lambda: [0, 0])
    pods: int = 0
    ports: list[tuple[str, str, int]] = field(default_factory=list)


@dataclass
class RefResult:
    pod: str
    node: str | None
    score: float | None
    message: str | None
    reasons: dict[str, list[str]]
    totals: dict[str, float]


def make_nodes(
    nodes: list[Obj], existing: list[Obj], own_marks: tuple[str, ...] = DEFAULT_MARK_KEYS
) -> dict[str, RefNode]:
    """The reference's nodes; ksched's own steering marks (under ``own_marks``) left out."""
    out: dict[str, RefNode] = {}
    for n in nodes:
        status = n.get("status") or {}
        alloc = {
            str(r): canonical(str(r), parse_quantity(q)) for r, q in (status.get("allocatable") or {}).items()
        }
        taints = [
            {
                "key": str(t.get("key") or ""),
                "value": str(t.get("value") or ""),
                "effect": str(t.get("effect") or ""),
            }
            for t in spec(n).get("taints") or []
            if t.get("effect") in ("NoSchedule", "PreferNoSchedule", "NoExecute")
            and not is_mark(t, own_marks)
        ]
        out[name(n)] = RefNode(
            name(n),
            {str(k): str(v) for k, v in (meta(n).get("labels") or {}).items()},
            taints,
            bool(spec(n).get("unschedulable")),
            {k: v for k, v in alloc.items() if k != "pods"},
            alloc.get("pods", 0),
        )
    for p in existing:
        node = out.get(str(spec(p).get("nodeName") or ""))
        if node is None or is_terminal(p):
            continue
        node.pods += 1
        try:
            reqs = pod_requests(p)
            ports = host_ports(p)
        except MalformedObjectError:
            continue
        for r, v in reqs.requests.items():
            node.requested[r] = node.requested.get(r, 0) + v
        node.nonzero[0] += reqs.nonzero_cpu
        node.nonzero[1] += reqs.nonzero_memory
        node.ports.extend((hp.protocol, hp.ip, hp.port) for hp in ports)
    return out


def tolerated(tolerations: Any, key: str, value: str, effect: str) -> bool:
    for t in tolerations:
        if t.effect and t.effect != effect:
            continue
        if t.key and t.key != key:
            continue
        if t.operator == "Exists" or (t.operator == "Equal" and t.value == value):
            return True
    return False


def requirement_matches(r: Requirement, node: RefNode) -> bool:
    if r.is_field:
        return (node.name in r.values) == (r.operator == "In")
    has = r.key in node.labels
    v = node.labels.get(r.key, "")
    if r.operator == "In":
        return has and v in r.values
    if r.operator == "NotIn":
        return not has or v not in r.values
    if r.operator == "Exists":
        return has
    if r.operator == "DoesNotExist":
        return not has
    lv = parse_int64(v) if has else None
    if lv is None:
        return False
    return lv > int(r.values[0]) if r.operator == "Gt" else lv < int(r.values[0])


def term_matches(term: Term, node: RefNode) -> bool:
    return bool(term) and all(requirement_matches(r, node) for r in term)


def filter_node(
    req: PodRequirements,
    node: RefNode,
    profile: ProfileConfig,
    metrics: tuple[MetricConfig, ...],
    values: dict[str, float],
    prefilter: set[str] | None,
) -> list[str]:
    """Reasons of the first failing plugin, or [] when the node fits."""
    c = req.constraints
    if prefilter is not None and node.name not in prefilter:
        return ["node(s) didn't satisfy plugin(s) [NodeAffinity]"]
    if (
        "NodeUnschedulable" in profile.filters
        and node.unschedulable
        and not tolerated(c.tolerations, "node.kubernetes.io/unschedulable", "", "NoSchedule")
    ):
        return ["node(s) were unschedulable"]
    if "NodeName" in profile.filters and c.node_name and c.node_name != node.name:
        return ["node(s) didn't match the requested node name"]
    if "TaintToleration" in profile.filters:
        for t in node.taints:
            if t["effect"] in ("NoSchedule", "NoExecute") and not tolerated(
                c.tolerations, t["key"], t["value"], t["effect"]
            ):
                return ["node(s) had untolerated taint(s)"]
    if "NodeAffinity" in profile.filters:
        if c.node_selector and not term_matches(c.node_selector, node):
            return ["node(s) didn't match Pod's node affinity/selector"]
        if c.required is not None and not any(term_matches(t, node) for t in c.required):
            return ["node(s) didn't match Pod's node affinity/selector"]
    if "NodePorts" in profile.filters:
        for hp in req.host_ports:
            for proto, ip, port in node.ports:
                if (
                    proto == hp.protocol
                    and port == hp.port
                    and (ip == "0.0.0.0" or hp.ip == "0.0.0.0" or ip == hp.ip)
                ):
                    return ["node(s) didn't have free ports for the requested pod ports"]
    if "NodeResourcesFit" in profile.filters:
        reasons = []
        if node.pods + 1 > node.allowed_pods:
            reasons.append("Too many pods")
        for r, want in req.requests.items():
            free = node.allocatable.get(r, 0) - node.requested.get(r, 0)
            if (want > 0 if r in NATIVE else want != 0) and want > free:
                reasons.append(f"Insufficient {r}")
        if reasons:
            return reasons
    for m in metrics:
        v = values.get(m.name, math.nan)
        if math.isnan(v):
            if m.missing == "exclude":
                return [f"node(s) had no value for {m.name}"]
            continue
        if m.above is not None and v > m.above:
            return [f"node(s) had {m.name} above {m.above:g}"]
        if m.below is not None and v < m.below:
            return [f"node(s) had {m.name} below {m.below:g}"]
    return []


def fit_score(req: PodRequirements, node: RefNode, profile: ProfileConfig) -> int:
    total = weights = 0
    for r, w in profile.fit_resources:
        pod = {"cpu": req.nonzero_cpu, "memory": req.nonzero_memory}.get(r, req.requests.get(r, 0))
        if r not in NATIVE and pod == 0:
            continue
        cap = node.allocatable.get(r, 0)
        if cap == 0:
            continue
        used = {"cpu": node.nonzero[0], "memory": node.nonzero[1]}.get(r, node.requested.get(r, 0)) + pod
        if profile.fit_strategy == "LeastAllocated":
            s = 0 if used > cap else (cap - used) * 100 // cap
        elif profile.fit_strategy == "MostAllocated":
            s = min(used, cap) * 100 // cap
        else:
            util = 100 if used > cap else used * 100 // cap
            s = broken_linear(profile.shape, util)
            if s <= 0:
                continue
        total += s * w
        weights += w
    if weights == 0:
        return 0
    if profile.fit_strategy == "RequestedToCapacityRatio":
        # Go's math.Round: half away from zero (all values here are non-negative).
        return math.floor(total / weights + 0.5)
    return total // weights


def broken_linear(shape: tuple[tuple[int, int], ...], p: int) -> int:
    pts = [(u, s * 10) for u, s in shape]
    for i, (u, s) in enumerate(pts):
        if p <= u:
            if i == 0:
                return s
            u0, s0 = pts[i - 1]
            return s0 + go_div((s - s0) * (p - u0), u - u0)
    return pts[-1][1]


def balanced_score(req: PodRequirements, node: RefNode, profile: ProfileConfig) -> int:
    with_pod, without = [], []
    for r in profile.balanced_resources:
        pod = req.requests.get(r, 0)
        if r not in NATIVE and pod == 0:
            continue
        cap = node.allocatable.get(r, 0)
        if cap == 0:
            continue
        used = node.requested.get(r, 0)
        with_pod.append(min((used + pod) / cap, 1.0))
        without.append(min(used / cap, 1.0))

    def balance(fr: list[float]) -> int:
        if len(fr) < 2:
            std = 0.0
        elif len(fr) == 2:
            std = abs((fr[0] - fr[1]) / 2)
        else:
            mean = sum(fr) / len(fr)
            std = math.sqrt(sum((f - mean) ** 2 for f in fr) / len(fr))
        return int((1 - std) * 100)

    return 50 + go_div(50 + balance(with_pod) - balance(without), 2)


def metric_score(m: MetricConfig, v: float, lo: float, hi: float) -> float:
    if math.isnan(v):
        return 50.0 if m.missing == "neutral" else 0.0
    if m.range:
        a, b = m.range
        if m.prefer == "lower":
            f = (b - v) / (b - a)
        elif m.prefer == "higher":
            f = (v - a) / (b - a)
        else:
            assert m.target is not None
            f = 1 - abs(v - m.target) / max(m.target - a, b - m.target, sys.float_info.min)
    else:
        if hi - lo <= 0:
            return 100.0
        f = (hi - badness(m, v)) / (hi - lo)
    return min(max(f, 0.0), 1.0) * 100


def badness(m: MetricConfig, v: float) -> float:
    if m.prefer == "lower":
        return v
    if m.prefer == "higher":
        return -v
    assert m.target is not None
    return abs(v - m.target)


def normalize(raw: int, top: int, reverse: bool) -> int:
    if top == 0:
        return 100 if reverse else 0
    s = 100 * raw // top
    return 100 - s if reverse else s


def schedule(
    nodes: list[Obj],
    existing: list[Obj],
    pending: list[Obj],
    config: Config,
    metric_values: dict[str, dict[str, float]] | None = None,
    seed: int = 0,
) -> list[RefResult]:
    """Schedule ``pending`` in queue order on the given cluster, one pod at a time."""
    profile = config.profiles[0]
    metrics = config.metrics
    table = make_nodes(nodes, existing, config.steering.own_marks)
    values = metric_values or {}
    parsed: list[tuple[int, PodRequirements | MalformedObjectError]] = []
    for i, p in enumerate(pending):
        try:
            parsed.append((i, requirements(p)))
        except MalformedObjectError as err:
            parsed.append((i, err))
    parsed.sort(key=lambda t: (-(t[1].priority if isinstance(t[1], PodRequirements) else 0), t[0]))
    results = []
    for _, req in parsed:
        if isinstance(req, MalformedObjectError):
            results.append(RefResult(req.obj, None, None, f"invalid pod: {req.field}: {req.problem}", {}, {}))
            continue
        prefilter = prefilter_node_names(req.constraints.required)
        if prefilter is not None and not prefilter:
            results.append(
                RefResult(req.key, None, None, prefilter_error(len(table), AFFINITY_CONFLICT), {}, {})
            )
            continue
        reasons = {
            n.name: filter_node(req, n, profile, metrics, values.get(n.name, {}), prefilter)
            for n in table.values()
        }
        feasible = [n for n in table.values() if not reasons[n.name]]
        if not feasible:
            counts: dict[str, int] = {}
            for rs in reasons.values():
                for r in rs:
                    counts[r] = counts.get(r, 0) + 1
            # No preemption here (the property tests turn it off): DynamicResources' PostFilter only.
            message = with_post_filter(fit_error(len(table), counts.items()), post_filter(None))
            results.append(RefResult(req.key, None, None, message, reasons, {}))
            continue
        c = req.constraints
        taint_raw = {
            n.name: sum(
                1
                for t in n.taints
                if t["effect"] == "PreferNoSchedule"
                and not tolerated(
                    [x for x in c.tolerations if x.effect in ("", "PreferNoSchedule")],
                    t["key"],
                    t["value"],
                    "PreferNoSchedule",
                )
            )
            for n in feasible
        }
        aff_raw = {n.name: sum(w for w, t in c.preferred if term_matches(t, n)) for n in feasible}
        taint_top, aff_top = max(taint_raw.values()), max(aff_raw.values())
        bounds = {}
        for m in metrics:
            bs = [badness(m, values.get(n.name, {}).get(m.name, math.nan)) for n in feasible]
            bs = [b for b in bs if not math.isnan(b)]
            bounds[m.name] = (min(bs), max(bs)) if bs else (math.inf, -math.inf)
        uses_balanced = profile.weights.get("NodeResourcesBalancedAllocation", 0) and any(
            req.requests.get(r, 0) for r in profile.balanced_resources
        )
        totals = {}
        for n in feasible:
            total = profile.weights.get("TaintToleration", 0) * normalize(taint_raw[n.name], taint_top, True)
            total += profile.weights.get("NodeAffinity", 0) * normalize(aff_raw[n.name], aff_top, False)
            total += profile.weights.get("NodeResourcesFit", 0) * fit_score(req, n, profile)
            total += (
                (profile.weights.get("NodeResourcesBalancedAllocation", 0) * balanced_score(req, n, profile))
                if uses_balanced
                else 0
            )
            t = float(total)
            for m in metrics:
                t += m.weight * metric_score(m, values.get(n.name, {}).get(m.name, math.nan), *bounds[m.name])
            totals[n.name] = t
        best = max(feasible, key=lambda n: (totals[n.name], tie_key(seed, req.key, n.name)))
        best.pods += 1
        for r, v in req.requests.items():
            best.requested[r] = best.requested.get(r, 0) + v
        best.nonzero[0] += req.nonzero_cpu
        best.nonzero[1] += req.nonzero_memory
        best.ports.extend((hp.protocol, hp.ip, hp.port) for hp in req.host_ports)
        results.append(RefResult(req.key, best.name, totals[best.name], None, reasons, totals))
    return results
