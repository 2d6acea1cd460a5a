"""What a pod asks of a node, read from its spec with upstream's rules.

Owns the effective request (containers summed, init containers as a
maximum, restartable sidecars added, pod-level requests, overhead), the
non-zero defaults used for scoring, host ports, tolerations and node
affinity. Every problem is a :class:`MalformedObjectError` naming the pod
and the field, so one bad pod never stops the others.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from ksched import _core
from ksched.engine.quantity import NANO, Nano, canonical_nano, parse_nano
from ksched.errors import MalformedObjectError, QuantityError
from ksched.objects import Obj, pod_key, spec

# Upstream schedutil.DefaultMilliCPURequest / DefaultMemoryRequest: what a
# container without a request counts as when scoring (never when filtering).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
# Only these are honoured in pod-level `spec.resources` (upstream IsSupportedPodLevelResource).
POD_LEVEL_RESOURCES = ("cpu", "memory")
# A pod whose selectors or label sets exceed this is rejected as malformed
# rather than slowing every node's filter (the API server caps labels far below this).
MAX_SELECTOR_ITEMS = 1000

NODE_SELECTOR_OPERATORS = tuple(_core.SELECTOR_OPERATORS)
TOLERATION_OPERATORS = tuple(_core.TOLERATION_OPERATORS)
TAINT_EFFECTS = tuple(e for e in _core.EFFECTS if e)
PROTOCOLS = tuple(_core.PROTOCOLS)
_INT64 = re.compile(r"^[+-]?\d+$")


def parse_int64(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, 64)``, or None."""
    if not _INT64.match(text):
        return None
    v = int(text)
    return v if -(2**63) <= v < 2**63 else None


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]
    is_field: bool = False


Term = tuple[Requirement, ...]


@dataclass(frozen=True)
class NodeConstraints:
    """The node-level constraints of a pod: equal values share one engine class."""

    node_name: str
    tolerations: tuple[Toleration, ...]
    node_selector: Term | None
    required: tuple[Term, ...] | None
    preferred: tuple[tuple[int, Term], ...]


@dataclass(frozen=True)
class HostPort:
    protocol: str
    ip: str
    port: int


@dataclass(frozen=True)
class PodRequirements:
    key: str
    priority: int
    requests: dict[str, int]
    nonzero_cpu: int
    nonzero_memory: int
    host_ports: tuple[HostPort, ...]
    constraints: NodeConstraints
    info: PodInfo
    spread: tuple[SpreadConstraint, ...] = ()
    # The PodGroup (``namespace/name``) the pod is a member of, if any.
    group: str | None = None
    # preemptionPolicy is not Never, and the node an earlier preemption nominated ("" for none).
    may_preempt: bool = True
    nominated_node: str = ""


def _resource_list(pod: str, field: str, raw: Any) -> dict[str, Nano]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise MalformedObjectError(pod, field, "must be a mapping of resource name to quantity")
    out: dict[str, Nano] = {}
    for resource, q in raw.items():
        try:
            out[str(resource)] = parse_nano(q)
        except QuantityError as err:
            raise MalformedObjectError(pod, f"{field}.{resource}", str(err)) from None
    return out


def _add(into: dict[str, Nano], other: dict[str, Nano]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


def _max(into: dict[str, Nano], other: dict[str, Nano]) -> None:
    for k, v in other.items():
        if k not in into or v > into[k]:
            into[k] = v


def _containers(pod: str, s: Obj, field: str) -> list[Obj]:
    raw = s.get(field) or []
    if not isinstance(raw, list) or not all(isinstance(c, dict) for c in raw):
        raise MalformedObjectError(pod, f"spec.{field}", "must be a list of containers")
    return raw


class CountedRequests(Protocol):
    """What a node counts of a pod placed on it: requests and the non-zero cpu/memory."""

    @property
    def requests(self) -> dict[str, int]: ...
    @property
    def nonzero_cpu(self) -> int: ...
    @property
    def nonzero_memory(self) -> int: ...


@dataclass(frozen=True)
class PodRequests:
    """A pod's effective request in the engine's units (zero entries dropped), and
    the cpu and memory it counts as for scoring (upstream ``NonZeroRequested``)."""

    requests: dict[str, int]
    nonzero_cpu: int
    nonzero_memory: int


def _total(
    containers: list[dict[str, Nano]],
    init_containers: list[tuple[bool, dict[str, Nano]]],
    pod_level: dict[str, Nano],
    overhead: dict[str, Nano],
) -> dict[str, Nano]:
    """Upstream ``resourcehelper.PodRequests`` over already-parsed container requests."""
    total: dict[str, Nano] = {}
    for reqs in containers:
        _add(total, reqs)
    restartable: dict[str, Nano] = {}
    init_max: dict[str, Nano] = {}
    for is_sidecar, reqs in init_containers:
        if is_sidecar:
            _add(total, reqs)
            _add(restartable, reqs)
            step = dict(restartable)
        else:
            step = dict(reqs)
            _add(step, restartable)
        _max(init_max, step)
    _max(total, init_max)
    for r in POD_LEVEL_RESOURCES:
        if r in pod_level:
            total[r] = pod_level[r]
    _add(total, overhead)
    return total


_NONZERO_DEFAULTS: dict[str, Nano] = {
    "cpu": DEFAULT_MILLI_CPU_REQUEST * (NANO // 1000),
    "memory": DEFAULT_MEMORY_REQUEST * NANO,
}


def _with_nonzero_defaults(reqs: dict[str, Nano]) -> dict[str, Nano]:
    """Upstream ``NonMissingContainerRequests``: a missing cpu or memory request counts as 100m / 200Mi."""
    return {**_NONZERO_DEFAULTS, **reqs}


def pod_requests(pod: Obj, key: str | None = None) -> PodRequests:
    """Parse the pod's requests once and total them with and without the non-zero defaults."""
    key = key or pod_key(pod)
    s = spec(pod)

    def container_requests(c: Obj, field: str) -> dict[str, Nano]:
        resources = c.get("resources") or {}
        if not isinstance(resources, dict):
            raise MalformedObjectError(key, f"{field}.resources", "must be a mapping")
        return _resource_list(key, f"{field}.resources.requests", resources.get("requests"))

    containers = [
        container_requests(c, f"spec.containers[{i}]")
        for i, c in enumerate(_containers(key, s, "containers"))
    ]
    init_containers = [
        (c.get("restartPolicy") == "Always", container_requests(c, f"spec.initContainers[{i}]"))
        for i, c in enumerate(_containers(key, s, "initContainers"))
    ]
    pod_level_raw = s.get("resources")
    pod_level = (
        _resource_list(key, "spec.resources.requests", pod_level_raw.get("requests"))
        if isinstance(pod_level_raw, dict)
        else {}
    )
    overhead = _resource_list(key, "spec.overhead", s.get("overhead"))
    requests = {}
    for r, q in _total(containers, init_containers, pod_level, overhead).items():
        v = canonical_nano(r, q)
        if v < 0:
            raise MalformedObjectError(key, f"requests.{r}", "must not be negative")
        if v:
            requests[r] = v
    if init_containers or pod_level:
        nonzero = _total(
            [_with_nonzero_defaults(c) for c in containers],
            [(sidecar, _with_nonzero_defaults(c)) for sidecar, c in init_containers],
            pod_level,
            overhead,
        )
    else:
        # The same total for the common shape (plain containers, maybe overhead), without the copies.
        nonzero = {
            r: sum(c.get(r, default) for c in containers) + overhead.get(r, 0)
            for r, default in _NONZERO_DEFAULTS.items()
        }
    return PodRequests(
        requests,
        canonical_nano("cpu", nonzero.get("cpu", 0)),
        canonical_nano("memory", nonzero.get("memory", 0)),
    )


def host_ports(pod: Obj, key: str | None = None) -> tuple[HostPort, ...]:
    """Host ports of the pod's containers (upstream ``GetHostPorts``)."""
    key = key or pod_key(pod)
    out = []
    for i, c in enumerate(_containers(key, spec(pod), "containers")):
        ports = c.get("ports") or []
        if not isinstance(ports, list):
            raise MalformedObjectError(key, f"spec.containers[{i}].ports", "must be a list")
        for j, p in enumerate(ports):
            field = f"spec.containers[{i}].ports[{j}]"
            if not isinstance(p, dict):
                raise MalformedObjectError(key, field, "must be a mapping")
            hp = p.get("hostPort") or 0
            if not isinstance(hp, int) or isinstance(hp, bool) or not 0 <= hp <= 65535:
                raise MalformedObjectError(key, f"{field}.hostPort", f"{hp!r} is not a port number (1-65535)")
            if hp == 0:
                continue
            protocol = p.get("protocol") or "TCP"
            if protocol not in PROTOCOLS:
                raise MalformedObjectError(
                    key,
                    f"{field}.protocol",
                    f"unknown protocol {protocol!r} (allowed: {', '.join(PROTOCOLS)})",
                )
            out.append(HostPort(protocol, str(p.get("hostIP") or "0.0.0.0"), hp))
    return tuple(out)


def tolerations(pod: Obj, key: str | None = None) -> tuple[Toleration, ...]:
    key = key or pod_key(pod)
    raw = spec(pod).get("tolerations") or []
    if not isinstance(raw, list):
        raise MalformedObjectError(key, "spec.tolerations", "must be a list")
    out = []
    for i, t in enumerate(raw):
        field = f"spec.tolerations[{i}]"
        if not isinstance(t, dict):
            raise MalformedObjectError(key, field, "must be a mapping")
        op = t.get("operator") or "Equal"
        if op not in TOLERATION_OPERATORS:
            raise MalformedObjectError(
                key,
                f"{field}.operator",
                f"unknown operator {op!r} (allowed: {', '.join(TOLERATION_OPERATORS)})",
            )
        effect = t.get("effect") or ""
        if effect and effect not in TAINT_EFFECTS:
            raise MalformedObjectError(
                key, f"{field}.effect", f"unknown effect {effect!r} (allowed: {', '.join(TAINT_EFFECTS)})"
            )
        out.append(Toleration(str(t.get("key") or ""), op, str(t.get("value") or ""), effect))
    return tuple(out)


def _requirements(
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


def _term(pod: str, field: str, raw: Any) -> Term:
    if not isinstance(raw, dict):
        raise MalformedObjectError(pod, field, "must be a node selector term")
    return _requirements(pod, f"{field}.matchExpressions", raw.get("matchExpressions"), fields=False) + (
        _requirements(pod, f"{field}.matchFields", raw.get("matchFields"), fields=True)
    )


def node_constraints(pod: Obj, key: str | None = None) -> NodeConstraints:
    key = key or pod_key(pod)
    s = spec(pod)
    selector = s.get("nodeSelector") or {}
    if not isinstance(selector, dict) or not all(isinstance(v, str) for v in selector.values()):
        raise MalformedObjectError(key, "spec.nodeSelector", "must be a mapping of label to string value")
    if len(selector) > MAX_SELECTOR_ITEMS:
        raise MalformedObjectError(
            key, "spec.nodeSelector", f"has {len(selector)} labels (at most {MAX_SELECTOR_ITEMS})"
        )
    node_selector = tuple(Requirement(k, "In", (v,)) for k, v in sorted(selector.items())) or None
    affinity = (s.get("affinity") or {}).get("nodeAffinity") or {}
    if not isinstance(affinity, dict):
        raise MalformedObjectError(key, "spec.affinity.nodeAffinity", "must be a mapping")
    base = "spec.affinity.nodeAffinity"
    required: tuple[Term, ...] | None = None
    req_raw = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if req_raw is not None:
        terms = req_raw.get("nodeSelectorTerms") if isinstance(req_raw, dict) else None
        if not isinstance(terms, list):
            raise MalformedObjectError(
                key, f"{base}.requiredDuringSchedulingIgnoredDuringExecution", "needs nodeSelectorTerms"
            )
        field = f"{base}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        required = tuple(_term(key, f"{field}[{i}]", t) for i, t in enumerate(terms))
    preferred = []
    pref_raw = affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    if not isinstance(pref_raw, list):
        raise MalformedObjectError(
            key, f"{base}.preferredDuringSchedulingIgnoredDuringExecution", "must be a list"
        )
    for i, p in enumerate(pref_raw):
        field = f"{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        if not isinstance(p, dict):
            raise MalformedObjectError(key, field, "must be a mapping")
        weight = p.get("weight", 0)
        if not isinstance(weight, int) or not 0 <= weight <= 100:
            raise MalformedObjectError(key, f"{field}.weight", f"{weight!r} is not an integer in 0..100")
        term = _term(key, f"{field}.preference", p.get("preference"))
        if weight and term:
            preferred.append((weight, term))
    return NodeConstraints(
        node_name=str(s.get("nodeName") or ""),
        tolerations=tolerations(pod, key),
        node_selector=node_selector,
        required=required,
        preferred=tuple(preferred),
    )


def priority(pod: Obj) -> int:
    p = spec(pod).get("priority")
    if p is None:
        return 0
    if not isinstance(p, int) or isinstance(p, bool):
        raise MalformedObjectError(pod_key(pod), "spec.priority", f"{p!r} is not an integer")
    return p


PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")


def preemption_policy(pod: Obj) -> str:
    p = spec(pod).get("preemptionPolicy") or "PreemptLowerPriority"
    if p not in PREEMPTION_POLICIES:
        raise MalformedObjectError(
            pod_key(pod), "spec.preemptionPolicy", f"{p!r} (allowed: {', '.join(PREEMPTION_POLICIES)})"
        )
    return str(p)


def start_time(pod: Obj) -> float:
    """``status.startTime`` as epoch seconds; a pod not started counts as starting now (upstream GetPodStartTime)."""
    raw = (pod.get("status") or {}).get("startTime")
    if isinstance(raw, str):
        try:
            return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return time.time()


def requirements(pod: Obj) -> PodRequirements:
    """Everything the engine needs of one pending pod."""
    key = pod_key(pod)
    reqs = pod_requests(pod, key)
    return PodRequirements(
        key=key,
        priority=priority(pod),
        requests=reqs.requests,
        nonzero_cpu=reqs.nonzero_cpu,
        nonzero_memory=reqs.nonzero_memory,
        host_ports=host_ports(pod, key),
        constraints=node_constraints(pod, key),
        info=pod_info(pod, key),
        spread=spread_constraints(pod, key),
        group=pod_group_of(pod),
        may_preempt=preemption_policy(pod) != "Never",
        nominated_node=str((pod.get("status") or {}).get("nominatedNodeName") or ""),
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


# -- pod-level constraints (InterPodAffinity, PodTopologySpread) ---------------

LABEL_SELECTOR_OPERATORS = tuple(_core.POD_SELECTOR_OPERATORS)
WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
INCLUSION_POLICIES = ("Honor", "Ignore")
# A label selector's requirements (matchLabels become In with one value); None is a nil selector.
LabelSelector = tuple[Requirement, ...]


@dataclass(frozen=True)
class AffinityTerm:
    """A pod affinity term; ``namespace_selector`` () matches every namespace, None none."""

    selector: LabelSelector | None
    namespaces: tuple[str, ...]
    namespace_selector: LabelSelector | None
    topology_key: str
    weight: int = 0


@dataclass(frozen=True)
class PodAffinityTerms:
    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[AffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[AffinityTerm, ...] = ()

    def lists(self) -> tuple[tuple[AffinityTerm, ...], ...]:
        return (
            self.required_affinity,
            self.required_anti_affinity,
            self.preferred_affinity,
            self.preferred_anti_affinity,
        )


@dataclass(frozen=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    hard: bool
    selector: LabelSelector | None
    min_domains: int = 1
    honor_affinity: bool = True
    honor_taints: bool = False


@dataclass(frozen=True)
class PodInfo:
    """What the pod-level plugins read of any pod, bound or pending."""

    namespace: str
    labels: tuple[tuple[str, str], ...]
    affinity: PodAffinityTerms | None
    terminating: bool = False


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
        _requirements(
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


def _with_label_keys(
    selector: LabelSelector | None, labels: dict[str, str], match: Any, mismatch: Any, pod: str, field: str
) -> LabelSelector | None:
    """Merge matchLabelKeys (In) and mismatchLabelKeys (NotIn) into a non-nil
    selector, as the API server does at admission (repeating it is harmless)."""
    for what, keys in (("matchLabelKeys", match), ("mismatchLabelKeys", mismatch)):
        if keys is not None and (not isinstance(keys, list) or not all(isinstance(k, str) for k in keys)):
            raise MalformedObjectError(pod, f"{field}.{what}", "must be a list of label keys")
    if selector is None:
        return None
    extra = [Requirement(k, "In", (labels[k],)) for k in match or [] if k in labels]
    extra += [Requirement(k, "NotIn", (labels[k],)) for k in mismatch or [] if k in labels]
    return selector + tuple(r for r in extra if r not in selector)


def _affinity_term(pod: str, field: str, raw: Any, labels: dict[str, str], weight: int) -> AffinityTerm:
    if not isinstance(raw, dict):
        raise MalformedObjectError(pod, field, "must be a pod affinity term")
    key = raw.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise MalformedObjectError(pod, f"{field}.topologyKey", "must be a non-empty label key")
    namespaces = raw.get("namespaces") or []
    if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
        raise MalformedObjectError(pod, f"{field}.namespaces", "must be a list of namespace names")
    selector = _with_label_keys(
        label_selector(pod, f"{field}.labelSelector", raw.get("labelSelector")),
        labels,
        raw.get("matchLabelKeys"),
        raw.get("mismatchLabelKeys"),
        pod,
        field,
    )
    return AffinityTerm(
        selector=selector,
        namespaces=tuple(sorted(set(namespaces))),
        namespace_selector=label_selector(pod, f"{field}.namespaceSelector", raw.get("namespaceSelector")),
        topology_key=key,
        weight=weight,
    )


def pod_affinity_terms(pod: Obj, key: str | None = None) -> PodAffinityTerms | None:
    key = key or pod_key(pod)
    affinity = spec(pod).get("affinity") or {}
    if not isinstance(affinity, dict):
        raise MalformedObjectError(key, "spec.affinity", "must be a mapping")
    if not affinity.get("podAffinity") and not affinity.get("podAntiAffinity"):
        return None
    labels = (pod.get("metadata") or {}).get("labels") or {}
    lists: list[tuple[AffinityTerm, ...]] = []
    for kind in ("podAffinity", "podAntiAffinity"):
        base = f"spec.affinity.{kind}"
        raw = affinity.get(kind) or {}
        if not isinstance(raw, dict):
            raise MalformedObjectError(key, base, "must be a mapping")
        required = raw.get("requiredDuringSchedulingIgnoredDuringExecution") or []
        preferred = raw.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        if not isinstance(required, list) or not isinstance(preferred, list):
            raise MalformedObjectError(key, base, "required and preferred terms must be lists")
        req = tuple(
            _affinity_term(key, f"{base}.requiredDuringSchedulingIgnoredDuringExecution[{i}]", t, labels, 0)
            for i, t in enumerate(required)
        )
        pref = []
        for i, p in enumerate(preferred):
            field = f"{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
            if not isinstance(p, dict):
                raise MalformedObjectError(key, field, "must be a mapping")
            weight = p.get("weight", 0)
            if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
                raise MalformedObjectError(key, f"{field}.weight", f"{weight!r} is not an integer in 1..100")
            pref.append(
                _affinity_term(key, f"{field}.podAffinityTerm", p.get("podAffinityTerm"), labels, weight)
            )
        lists.extend([req, tuple(pref)])
    if not any(lists):
        return None
    return PodAffinityTerms(lists[0], lists[2], lists[1], lists[3])


def spread_constraints(pod: Obj, key: str | None = None) -> tuple[SpreadConstraint, ...]:
    key = key or pod_key(pod)
    raw = spec(pod).get("topologySpreadConstraints") or []
    if not raw:
        return ()
    if not isinstance(raw, list):
        raise MalformedObjectError(key, "spec.topologySpreadConstraints", "must be a list")
    labels = (pod.get("metadata") or {}).get("labels") or {}
    out = []
    for i, c in enumerate(raw):
        field = f"spec.topologySpreadConstraints[{i}]"
        if not isinstance(c, dict):
            raise MalformedObjectError(key, field, "must be a mapping")
        skew = c.get("maxSkew")
        if not isinstance(skew, int) or isinstance(skew, bool) or skew < 1:
            raise MalformedObjectError(key, f"{field}.maxSkew", f"{skew!r} is not an integer >= 1")
        topology_key = c.get("topologyKey")
        if not isinstance(topology_key, str) or not topology_key:
            raise MalformedObjectError(key, f"{field}.topologyKey", "must be a non-empty label key")
        when = c.get("whenUnsatisfiable")
        if when not in WHEN_UNSATISFIABLE:
            raise MalformedObjectError(
                key, f"{field}.whenUnsatisfiable", f"{when!r} (allowed: {', '.join(WHEN_UNSATISFIABLE)})"
            )
        min_domains = c.get("minDomains")
        if min_domains is not None and (not isinstance(min_domains, int) or min_domains < 1):
            raise MalformedObjectError(key, f"{field}.minDomains", f"{min_domains!r} is not an integer >= 1")
        policies = []
        for p, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
            v = c.get(p) or default
            if v not in INCLUSION_POLICIES:
                raise MalformedObjectError(
                    key, f"{field}.{p}", f"{v!r} (allowed: {', '.join(INCLUSION_POLICIES)})"
                )
            policies.append(v == "Honor")
        selector = _with_label_keys(
            label_selector(key, f"{field}.labelSelector", c.get("labelSelector")),
            labels,
            c.get("matchLabelKeys"),
            None,
            key,
            field,
        )
        out.append(
            SpreadConstraint(
                max_skew=skew,
                topology_key=topology_key,
                hard=when == "DoNotSchedule",
                selector=selector,
                min_domains=min_domains or 1,
                honor_affinity=policies[0],
                honor_taints=policies[1],
            )
        )
    return tuple(out)


def pod_info(pod: Obj, key: str | None = None) -> PodInfo:
    key = key or pod_key(pod)
    m = pod.get("metadata") or {}
    labels = m.get("labels") or {}
    if not isinstance(labels, dict):
        raise MalformedObjectError(key, "metadata.labels", "must be a mapping")
    return PodInfo(
        namespace=str(m.get("namespace") or "default"),
        labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())) if labels else (),
        affinity=pod_affinity_terms(pod, key),
        terminating=m.get("deletionTimestamp") is not None,
    )


# -- gangs (scheduler-plugins coscheduling) -------------------------------------

# Pods labelled with it belong to the PodGroup it names, in their own namespace.
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
POD_GROUP_API = "scheduling.x-k8s.io/v1alpha1"


@dataclass(frozen=True)
class PodGroup:
    """A scheduler-plugins ``PodGroup``: at least ``min_member`` pods are placed together or none."""

    key: str
    min_member: int
    schedule_timeout_s: int | None = None


def pod_group_of(pod: Obj) -> str | None:
    m = pod.get("metadata") or {}
    labels = m.get("labels") or {}
    name = labels.get(POD_GROUP_LABEL) if isinstance(labels, dict) else None
    if not name:
        return None
    return f"{m.get('namespace') or 'default'}/{name}"


def pod_group(obj: Obj) -> PodGroup:
    m = obj.get("metadata") or {}
    key = f"{m.get('namespace') or 'default'}/{m.get('name', '')}"
    s = obj.get("spec") or {}
    if not isinstance(s, dict):
        raise MalformedObjectError(f"podgroup {key}", "spec", "must be a mapping")
    min_member = s.get("minMember", 0)
    if not isinstance(min_member, int) or isinstance(min_member, bool) or min_member < 0:
        raise MalformedObjectError(
            f"podgroup {key}", "spec.minMember", f"{min_member!r} is not an integer >= 0"
        )
    timeout = s.get("scheduleTimeoutSeconds")
    if timeout is not None and (not isinstance(timeout, int) or timeout < 0):
        raise MalformedObjectError(
            f"podgroup {key}", "spec.scheduleTimeoutSeconds", f"{timeout!r} is not an integer >= 0"
        )
    return PodGroup(key, min_member, timeout)


# -- PodDisruptionBudgets (preemption prefers not to violate them) -------------


@dataclass(frozen=True)
class DisruptionBudget:
    namespace: str
    selector: LabelSelector | None
    disruptions_allowed: int
    disrupted: frozenset[str] = frozenset()

    def covers(self, namespace: str, name: str, labels: dict[str, str]) -> bool:
        """Upstream filterPodsWithPDBViolation: same namespace, a non-empty selector that
        matches, and not already being disrupted (a pod without labels matches none)."""
        return (
            bool(labels)
            and namespace == self.namespace
            and bool(self.selector)
            and name not in self.disrupted
            and selector_matches(self.selector, labels)
        )


def disruption_budget(obj: Obj) -> DisruptionBudget:
    m = obj.get("metadata") or {}
    key = f"pdb {m.get('namespace')}/{m.get('name')}"
    s = obj.get("spec") or {}
    status = obj.get("status") or {}
    allowed = status.get("disruptionsAllowed", 0)
    if not isinstance(allowed, int):
        raise MalformedObjectError(key, "status.disruptionsAllowed", f"{allowed!r} is not an integer")
    return DisruptionBudget(
        namespace=str(m.get("namespace") or "default"),
        selector=label_selector(key, "spec.selector", s.get("selector")),
        disruptions_allowed=allowed,
        disrupted=frozenset(status.get("disruptedPods") or {}),
    )
