"""What a pod asks of a node, read from its spec with upstream's rules.

Owns the effective request (containers summed, init containers as a
maximum, restartable sidecars added, pod-level requests, overhead), the
non-zero defaults used for scoring, host ports, container images,
tolerations, node affinity, priority and preemption policy. Every problem is a
:class:`MalformedObjectError` naming the pod and the field, so one bad pod never
stops the others. A pending pod's whole parse, assembled from these and memoised
per shape, is :mod:`~ksched.engine.requirements`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from ksched import _core
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
