"""What a pod asks of a node, read from its spec with upstream's rules.

Owns the effective request (containers summed, init containers as a
maximum, restartable sidecars added, pod-level requests, overhead), the
non-zero defaults used for scoring, host ports, tolerations and node
affinity. Every problem is a :class:`MalformedObjectError` naming the pod
and the field, so one bad pod never stops the others.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import orjson

from ksched import _core
from ksched.engine.gangs import pod_group_of
from ksched.engine.pod_level import (
    PodClaim,
    PodInfo,
    SpreadConstraint,
    pod_claims,
    pod_info,
    spread_constraints,
)
from ksched.engine.quantity import NANO, Nano, canonical_nano, parse_nano
from ksched.engine.selectors import (
    MAX_SELECTOR_ITEMS,
    Requirement,
    Term,
    invalid_label_value,
    node_selector_term,
    required_term,
)
from ksched.errors import MalformedObjectError, QuantityError
from ksched.objects import INT32_MAX, INT32_MIN, INT64_MAX, Obj, pod_key, spec

# Upstream schedutil.DefaultMilliCPURequest / DefaultMemoryRequest: what a
# container without a request counts as when scoring (never when filtering).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
# Only these (and every ``hugepages-<size>``) are honoured in pod-level
# `spec.resources` (upstream IsSupportedPodLevelResource).
POD_LEVEL_RESOURCES = ("cpu", "memory")
HUGEPAGES_PREFIX = "hugepages-"


def is_supported_pod_level_resource(resource: str) -> bool:
    return resource in POD_LEVEL_RESOURCES or resource.startswith(HUGEPAGES_PREFIX)


TOLERATION_OPERATORS = tuple(_core.TOLERATION_OPERATORS)
TAINT_EFFECTS = tuple(e for e in _core.EFFECTS if e)
PROTOCOLS = tuple(_core.PROTOCOLS)


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str


@dataclass(frozen=True)
class NodeConstraints:
    """The node-level constraints of a pod: equal values share one engine class."""

    node_name: str
    tolerations: tuple[Toleration, ...]
    node_selector: Term | None
    required: tuple[Term, ...] | None
    preferred: tuple[tuple[int, Term], ...]

    def __hash__(self) -> int:
        # Hashed once (the fields are immutable): it keys every batch's class table.
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(
                (self.node_name, self.tolerations, self.node_selector, self.required, self.preferred)
            )
            object.__setattr__(self, "_hash", cached)
        return cached


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
    # ImageLocality: normalized image names of the init containers, containers
    # and image volumes, and the number of init containers plus containers.
    images: tuple[str, ...] = ()
    containers: int = 0
    # The PersistentVolumeClaims its volumes use.
    claims: tuple[PodClaim, ...] = ()
    # Which parse this is (see requirements): the pods of one shape share it, and with it
    # every field but ``key``. -1: made by hand, shared with nothing.
    shape_id: int = field(default=-1, compare=False, repr=False)


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
    total.update(pod_level)
    _add(total, overhead)
    return total


_NONZERO_DEFAULTS: dict[str, Nano] = {
    "cpu": DEFAULT_MILLI_CPU_REQUEST * (NANO // 1000),
    "memory": DEFAULT_MEMORY_REQUEST * NANO,
}


def _with_nonzero_defaults(reqs: dict[str, Nano]) -> dict[str, Nano]:
    """Upstream ``NonMissingContainerRequests``: a missing cpu or memory request counts as 100m / 200Mi."""
    return {**_NONZERO_DEFAULTS, **reqs}


def resize_infeasible(pod: Obj) -> bool:
    """Upstream ``IsPodResizeInfeasible``: the PodResizePending condition says Infeasible."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "PodResizePending":
            return c.get("reason") == "Infeasible"
    return False


def _effective(
    spec_requests: dict[str, Nano], actuated: dict[str, Nano], allocated: dict[str, Nano], infeasible: bool
) -> dict[str, Nano]:
    """Upstream ``determineEffectiveRequests``: what a running pod holds while a
    resize is pending: the larger of the spec, the actuated and the allocated
    requests, per resource; the spec does not count when the resize is infeasible."""
    out = {} if infeasible else dict(spec_requests)
    for other in (actuated, allocated):
        _max(out, other)
    return out


def pod_requests(pod: Obj, key: str | None = None) -> PodRequests:
    """Parse the pod's requests once and total them with and without the non-zero defaults.

    A running pod's containers (and sidecars) count with their in-place resize
    state as upstream's resource helpers read ``status.containerStatuses``
    (``allocatedResources``, ``resources``) in v1.36."""
    key = key or pod_key(pod)
    s = spec(pod)
    status = pod.get("status") or {}
    infeasible = resize_infeasible(pod)
    statuses: dict[str, Obj] = {}
    for list_field in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(list_field) or []:
            if isinstance(cs, dict) and isinstance(cs.get("name"), str):
                statuses[cs["name"]] = cs

    def container_requests(c: Obj, field: str, with_status: bool) -> dict[str, Nano]:
        resources = c.get("resources") or {}
        if not isinstance(resources, dict):
            raise MalformedObjectError(key, f"{field}.resources", "must be a mapping")
        requests = _resource_list(key, f"{field}.resources.requests", resources.get("requests"))
        cs = statuses.get(str(c.get("name"))) if with_status else None
        if cs is None or not isinstance(cs.get("resources"), dict):
            return requests
        name = c.get("name")
        actuated = _resource_list(
            key, f"status.containerStatuses[{name}].resources.requests", cs["resources"].get("requests")
        )
        allocated = _resource_list(
            key, f"status.containerStatuses[{name}].allocatedResources", cs.get("allocatedResources")
        )
        return _effective(requests, actuated, allocated, infeasible)

    containers = [
        container_requests(c, f"spec.containers[{i}]", True)
        for i, c in enumerate(_containers(key, s, "containers"))
    ]
    init_containers = [
        (
            c.get("restartPolicy") == "Always",
            container_requests(c, f"spec.initContainers[{i}]", c.get("restartPolicy") == "Always"),
        )
        for i, c in enumerate(_containers(key, s, "initContainers"))
    ]
    pod_level_raw = s.get("resources")
    pod_level_spec = (
        _resource_list(key, "spec.resources.requests", pod_level_raw.get("requests"))
        if isinstance(pod_level_raw, dict)
        else {}
    )
    pod_level = {r: q for r, q in pod_level_spec.items() if is_supported_pod_level_resource(r)}
    pod_status_resources = status.get("resources")
    if pod_level and isinstance(pod_status_resources, dict):
        effective = _effective(
            pod_level,
            _resource_list(key, "status.resources.requests", pod_status_resources.get("requests")),
            _resource_list(key, "status.allocatedResources", status.get("allocatedResources")),
            infeasible,
        )
        pod_level = {r: effective.get(r, 0) for r in pod_level}
    overhead = _resource_list(key, "spec.overhead", s.get("overhead"))
    requests = {}
    for r, q in _total(containers, init_containers, pod_level, overhead).items():
        v = canonical_nano(r, q)
        if v < 0:
            raise MalformedObjectError(key, f"requests.{r}", "must not be negative")
        _within_int64(key, r, v)
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
    nonzero_cpu = canonical_nano("cpu", nonzero.get("cpu", 0))
    nonzero_memory = canonical_nano("memory", nonzero.get("memory", 0))
    _within_int64(key, "cpu", nonzero_cpu)
    _within_int64(key, "memory", nonzero_memory)
    return PodRequests(requests, nonzero_cpu, nonzero_memory)


def _within_int64(key: str, resource: str, v: int) -> None:
    """The engine counts in 64-bit integers (upstream's ``MilliValue``/``Value`` are int64 too,
    and wrap past it): a larger request is refused, not wrapped."""
    if v > INT64_MAX:
        unit = "millicores" if resource == "cpu" else "units"
        raise MalformedObjectError(
            key, f"requests.{resource}", f"{v} {unit} is over the largest count, 2^63-1"
        )


def host_ports(pod: Obj, key: str | None = None) -> tuple[HostPort, ...]:
    """Host ports of the pod's sidecars and containers (upstream ``GetHostPorts``)."""
    key = key or pod_key(pod)
    s = spec(pod)
    out = []
    # Sidecars (restartable init containers) run as long as the pod: their ports count.
    containers = [
        (f"spec.initContainers[{i}]", c)
        for i, c in enumerate(_containers(key, s, "initContainers"))
        if c.get("restartPolicy") == "Always"
    ] + [(f"spec.containers[{i}]", c) for i, c in enumerate(_containers(key, s, "containers"))]
    for container_field, c in containers:
        ports = c.get("ports") or []
        if not isinstance(ports, list):
            raise MalformedObjectError(key, f"{container_field}.ports", "must be a list")
        for j, p in enumerate(ports):
            field = f"{container_field}.ports[{j}]"
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


def normalized_image_name(image: str) -> str:
    """Upstream ``normalizedImageName``: an image without a tag is ``:latest``."""
    return image if image.rfind(":") > image.rfind("/") else image + ":latest"


def container_images(pod: Obj, key: str | None = None) -> tuple[tuple[str, ...], int]:
    """The normalized images ImageLocality scores (init containers, containers,
    image volumes, one entry each) and the count of init containers plus containers."""
    key = key or pod_key(pod)
    s = spec(pod)
    containers = _containers(key, s, "initContainers") + _containers(key, s, "containers")
    images = [normalized_image_name(str(c.get("image") or "")) for c in containers]
    volumes = s.get("volumes") or []
    if not isinstance(volumes, list):
        raise MalformedObjectError(key, "spec.volumes", "must be a list")
    for v in volumes:
        reference = (v.get("image") or {}).get("reference") if isinstance(v, dict) else None
        if isinstance(reference, str):
            images.append(normalized_image_name(reference))
    return tuple(images), len(containers)


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
    affinity_raw = s.get("affinity") or {}
    if not isinstance(affinity_raw, dict):
        raise MalformedObjectError(key, "spec.affinity", "must be a mapping")
    affinity = affinity_raw.get("nodeAffinity") or {}
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
        required = tuple(
            required_term(node_selector_term(key, f"{field}[{i}]", t)) for i, t in enumerate(terms)
        )
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
        term = node_selector_term(key, f"{field}.preference", p.get("preference"))
        bad = invalid_label_value(term)
        if weight and bad is not None:
            # Upstream's PreScore fails the pod's scheduling cycle with the parse error.
            raise MalformedObjectError(
                key,
                f"{field}.preference",
                f"{bad!r} is not a valid label value (In and NotIn values must be)",
            )
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
    if not isinstance(p, int) or isinstance(p, bool) or not INT32_MIN <= p <= INT32_MAX:
        raise MalformedObjectError(pod_key(pod), "spec.priority", f"{p!r} is not a 32-bit integer")
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


# Parses memoised by the JSON of what they read (see _spec_memo_key); cleared when full.
MEMO_SIZE = 4096


@dataclass(frozen=True)
class _SpecParts:
    """What :func:`requirements` reads of the spec alone (the memoised part)."""

    requests: PodRequests
    images: tuple[str, ...]
    containers: int
    priority: int
    host_ports: tuple[HostPort, ...]
    constraints: NodeConstraints


_spec_memo: dict[bytes, _SpecParts] = {}
_counted_memo: dict[bytes, tuple[PodRequests, tuple[HostPort, ...]]] = {}


def _resize_free(pod: Obj) -> bool:
    """The pod's status holds nothing its requests read (no in-place resize state):
    they follow from the spec alone."""
    status = pod.get("status")
    if status is None:
        return True
    return isinstance(status, dict) and not (
        status.get("containerStatuses") or status.get("initContainerStatuses") or status.get("resources")
    )


# JSON up to this long is its own memo key; a longer one is keyed by a 16-byte digest.
MEMO_KEY_BYTES = 512


_dumps = orjson.dumps


def _memo_key(value: Any) -> bytes | None:
    """The JSON of ``value``: equal bytes, equal parse (objects are decoded JSON); None when
    it has none. Past MEMO_KEY_BYTES a digest (``#``, which no JSON starts with, and 16 bytes),
    so a table of huge specs holds at most MEMO_SIZE * MEMO_KEY_BYTES of keys."""
    try:
        raw = _dumps(value)
    except TypeError:
        return None
    if len(raw) <= MEMO_KEY_BYTES:
        return raw
    return b"#" + hashlib.blake2b(raw, digest_size=16).digest()


def _remember(memo: dict[bytes, Any], key: bytes, value: Any) -> None:
    if len(memo) >= MEMO_SIZE:
        memo.clear()
    memo[key] = value


def counted_requests(pod: Obj, key: str | None = None) -> tuple[PodRequests, tuple[HostPort, ...]]:
    """:func:`pod_requests` and :func:`host_ports`, parsed once per distinct container
    spec (a Deployment's pods share one), as bound pods on every node repeat them."""
    s = pod.get("spec")
    memo_key = None
    if isinstance(s, dict) and _resize_free(pod):
        memo_key = _memo_key(
            (s.get("containers"), s.get("initContainers"), s.get("overhead"), s.get("resources"))
        )
        if memo_key is not None:
            hit = _counted_memo.get(memo_key)
            if hit is not None:
                return hit
    key = key or pod_key(pod)
    counted = (pod_requests(pod, key), host_ports(pod, key))
    if memo_key is not None:
        _remember(_counted_memo, memo_key, counted)
    return counted


# Equal NodeConstraints as one object, so a batch's class lookups find them by identity.
_constraints: dict[NodeConstraints, NodeConstraints] = {}


def _interned(constraints: NodeConstraints) -> NodeConstraints:
    found = _constraints.get(constraints)
    if found is None:
        if len(_constraints) >= MEMO_SIZE:
            _constraints.clear()
        found = _constraints[constraints] = constraints
    return found


def _spec_parts(pod: Obj, key: str) -> _SpecParts:
    """The spec's parse, memoised by the spec's JSON: pending pods of one workload share it.
    A spec that fails to parse raises each time (nothing is remembered)."""
    s = pod.get("spec")
    memo_key = _memo_key(s) if isinstance(s, dict) and _resize_free(pod) else None
    if memo_key is not None:
        hit = _spec_memo.get(memo_key)
        if hit is not None:
            return hit
    # In the order the fields were always checked, so the first problem named is the same.
    reqs = pod_requests(pod, key)
    images, containers = container_images(pod, key)
    parts = _SpecParts(
        reqs, images, containers, priority(pod), host_ports(pod, key), _interned(node_constraints(pod, key))
    )
    if memo_key is not None:
        _remember(_spec_memo, memo_key, parts)
    return parts


# Whole parses by the JSON of everything they read but the pod's name (see _shape_key).
_pod_memo: dict[bytes, PodRequirements] = {}
_shape_ids = itertools.count()


def _shape_key(pod: Obj, m: Any) -> bytes | None:
    """A digest of everything :func:`requirements` reads of ``pod`` (``m``: its metadata)
    except its name: the spec, namespace, labels, whether it is being deleted, its
    nominated node. None where the parse reads more (in-place resize state, generic
    ephemeral volumes, whose claims are named after the pod) or the pod is not decoded JSON.
    (:func:`_memo_key` of that, inline: it runs for every pending pod.)"""
    s = pod.get("spec")
    status = pod.get("status")
    if not isinstance(m, dict) or not isinstance(s, dict) or (status is not None and not _resize_free(pod)):
        return None
    volumes = s.get("volumes")
    if volumes and (
        not isinstance(volumes, list)
        or any(not isinstance(v, dict) or v.get("ephemeral") is not None for v in volumes)
    ):
        return None
    try:
        raw = _dumps(
            (
                s,
                m.get("namespace"),
                m.get("labels"),
                m.get("deletionTimestamp") is not None,
                status.get("nominatedNodeName") if status else None,
            )
        )
    except TypeError:
        return None
    if len(raw) <= MEMO_KEY_BYTES:
        return raw
    return b"#" + hashlib.blake2b(raw, digest_size=16).digest()


# Objects made once per pod are made as a copy of a template's attribute dict with the
# fields that differ set: a frozen dataclass's __init__ checks a setattr per field.
_new = object.__new__
_set = object.__setattr__


def requirements(pod: Obj) -> PodRequirements:
    """Everything the engine needs of one pending pod. Parsed once per shape (the
    pods of one workload differ only in name): a pod that fails to parse raises each time."""
    m = pod.get("metadata")
    known = m if isinstance(m, dict) else {}
    key = f"{known.get('namespace') or 'default'}/{known.get('name', '')}"  # pod_key
    shape = _shape_key(pod, m)
    if shape is not None:
        hit = _pod_memo.get(shape)
        if hit is not None:
            # The other fields (and shape_id) are shared: the engine's per-shape work is done once.
            if hit.key == key:
                return hit
            # A copy of the parse with the pod's own name (see _new).
            values = hit.__dict__.copy()
            values["key"] = key
            renamed: PodRequirements = _new(PodRequirements)
            _set(renamed, "__dict__", values)
            return renamed
    req = _parse(pod, key)
    if shape is not None:
        _remember(_pod_memo, shape, req)
    return req


def _parse(pod: Obj, key: str) -> PodRequirements:
    parts = _spec_parts(pod, key)
    reqs = parts.requests
    claims = pod_claims(pod)
    return PodRequirements(
        key=key,
        priority=parts.priority,
        requests=reqs.requests,
        nonzero_cpu=reqs.nonzero_cpu,
        nonzero_memory=reqs.nonzero_memory,
        host_ports=parts.host_ports,
        constraints=parts.constraints,
        info=pod_info(pod, key, claims),
        spread=spread_constraints(pod, key),
        group=pod_group_of(pod),
        may_preempt=preemption_policy(pod) != "Never",
        nominated_node=str((pod.get("status") or {}).get("nominatedNodeName") or ""),
        images=parts.images,
        containers=parts.containers,
        claims=claims,
        shape_id=next(_shape_ids),
    )
