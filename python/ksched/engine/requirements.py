"""A pending pod's whole parse (:class:`PodRequirements`), done once per shape.

Owns what the engine needs of one pending pod, assembled from the readers of
:mod:`~ksched.engine.pods` and :mod:`~ksched.engine.pod_level`, and the memos that
keep it cheap: the pods of one workload differ only in name, so
:func:`requirements` parses a shape once and gives each pod a copy with its own
name; the spec's parse, and a bound pod's counted requests and host ports
(:func:`counted_requests`), are remembered by the JSON of what they read. Every
memo is cleared when full, and a pod that fails to parse raises each time.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Any

import orjson

from ksched.engine.gangs import pod_group_of
from ksched.engine.pod_level import (
    PodClaim,
    PodInfo,
    SpreadConstraint,
    pod_claims,
    pod_info,
    spread_constraints,
)
from ksched.engine.pods import (
    HostPort,
    NodeConstraints,
    PodRequests,
    container_images,
    host_ports,
    node_constraints,
    pod_requests,
    preemption_policy,
    priority,
)
from ksched.objects import Obj, pod_key


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
