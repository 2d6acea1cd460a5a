"""What must hold in a cluster, whoever scheduled it: the one checker of the harnesses and tests.

Three questions, each a function over the Nodes and Pods as the API server lists them:

* :func:`overcommitted`: does some node's bound pods request more of any resource than the
  node's allocatable? Every resource a pod requests is checked (cpu, memory,
  ephemeral-storage, hugepages, extended resources) plus the pod count, with the engine's
  own quantity parsing and request totals (:func:`ksched.engine.pods.pod_requests`: init
  containers, sidecars, pod-level resources, overhead, in-place resizes), so a harness and
  the engine never disagree on what fits. A resource the node does not list offers
  nothing, as in the engine.
* :func:`constraint_violations`: does a bound pod break a constraint it was placed under?
  ``nodeSelector`` and required node affinity against its node's labels (the latter with
  the reference implementation's term matching), required pod anti-affinity over
  ``kubernetes.io/hostname``, and ``DoNotSchedule`` topology spread skew. Taints are left
  out: a node tainted after its pods were bound is not a scheduling error.
* :func:`unaccounted` and :func:`vanished`: is every pod accounted for? A pending pod must
  have been reported unschedulable (a ``FailedScheduling`` event the caller has read); a
  created pod that is gone must have been deleted by a request the caller knows of.

Pods that ended (``Succeeded``, ``Failed``) hold nothing; a pod being deleted still does,
until it is gone. It never talks to the API server: callers list, this module judges.
"""

from __future__ import annotations

import collections
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from ksched.engine.pods import pod_requests
from ksched.engine.quantity import canonical, parse_quantity
from ksched.engine.reference import RefNode, term_matches
from ksched.engine.selectors import label_selector, node_selector_term, selector_matches
from ksched.objects import Obj, controller_of, pod_key

HOSTNAME = "kubernetes.io/hostname"
PODS = "pods"  # the allocatable entry that caps a node's pod count
TERMINATED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Overcommit:
    """A node whose bound pods request more than it offers, in these resources."""

    node: str
    resources: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.node}: {', '.join(self.resources)}"


@dataclass(frozen=True)
class ConstraintViolation:
    """A placement that breaks a constraint: ``excess`` counts pods over it (the skew over
    ``maxSkew`` for a spread constraint), so summing excesses weighs violations."""

    kind: str  # "nodeSelector", "node affinity", "pod anti-affinity" or "topology spread"
    subject: str  # the pod (namespace/name), or for spread the constraint's namespace and key
    excess: int

    def __str__(self) -> str:
        return f"{self.kind}: {self.subject} (+{self.excess})"


def _name(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def _labels(obj: Obj) -> dict[str, str]:
    return dict(obj["metadata"].get("labels") or {})


def _holding(pods: Iterable[Obj]) -> list[Obj]:
    """The pods that hold resources on a node: bound and not ended."""
    return [
        p
        for p in pods
        if (p.get("spec") or {}).get("nodeName") and (p.get("status") or {}).get("phase") not in TERMINATED
    ]


def allocatable(node: Obj) -> dict[str, int]:
    """The node's allocatable in the engine's units (millicores, bytes, counts), ``pods`` included."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return {str(r): canonical(str(r), parse_quantity(q)) for r, q in alloc.items()}


def requested(pods: Iterable[Obj]) -> dict[str, collections.Counter[str]]:
    """Per node name, what its holding pods request in the engine's units, and their count as ``pods``."""
    used: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for p in _holding(pods):
        counts = used[p["spec"]["nodeName"]]
        counts[PODS] += 1
        counts.update(pod_requests(p).requests)
    return dict(used)


def overcommitted(nodes: Iterable[Obj], pods: Iterable[Obj]) -> list[Overcommit]:
    """The nodes, by name, where some resource is requested beyond allocatable.

    Pods bound to a node that is not in ``nodes`` are left out (a deleted node's pods are
    removed by pod GC); :func:`unknown_nodes` names those nodes."""
    by_name = {_name(n): n for n in nodes}
    out = []
    for node, counts in sorted(requested(pods).items()):
        if node not in by_name:
            continue
        offered = allocatable(by_name[node])
        over = tuple(sorted(r for r, v in counts.items() if v > offered.get(r, 0)))
        if over:
            out.append(Overcommit(node, over))
    return out


def pending_that_fit(nodes: Iterable[Obj], pods: Collection[Obj]) -> list[str]:
    """The pending pods (``namespace/name``) whose requests, pod count included, fit what some
    schedulable node has left: for bare pods (no selector, affinity or toleration is
    read), each one a scheduler left pending with room for it."""
    listed = [n for n in nodes if not (n.get("spec") or {}).get("unschedulable")]
    used = requested(pods)
    free = []
    for n in listed:
        offered, taken = allocatable(n), used.get(_name(n), collections.Counter())
        free.append({r: v - taken.get(r, 0) for r, v in offered.items()})
    out = []
    for p in pods:
        if (p.get("spec") or {}).get("nodeName") or (p.get("metadata") or {}).get("deletionTimestamp"):
            continue
        wants = collections.Counter(pod_requests(p).requests)
        wants[PODS] += 1
        if any(all(v <= room.get(r, 0) for r, v in wants.items()) for room in free):
            out.append(pod_key(p))
    return out


def unknown_nodes(nodes: Iterable[Obj], pods: Iterable[Obj]) -> list[str]:
    """Node names that holding pods are bound to but ``nodes`` does not hold, sorted."""
    known = {_name(n) for n in nodes}
    return sorted({p["spec"]["nodeName"] for p in _holding(pods)} - known)


def constraint_violations(nodes: Iterable[Obj], pods: Iterable[Obj]) -> list[ConstraintViolation]:
    """Bound pods that break their ``nodeSelector``, required node affinity or required hostname
    anti-affinity, and ``DoNotSchedule`` spread constraints whose skew exceeds ``maxSkew``."""
    by_name = {_name(n): n for n in nodes}
    bound = [p for p in _holding(pods) if p["spec"]["nodeName"] in by_name]
    out = _node_selector(bound, by_name) + _node_affinity(bound, by_name) + _anti_affinity(bound)
    return out + _spread(bound, by_name)


def _node_selector(bound: list[Obj], nodes: Mapping[str, Obj]) -> list[ConstraintViolation]:
    out = []
    for p in bound:
        labels = _labels(nodes[p["spec"]["nodeName"]])
        wanted = p["spec"].get("nodeSelector") or {}
        if any(labels.get(k) != v for k, v in wanted.items()):
            out.append(ConstraintViolation("nodeSelector", pod_key(p), 1))
    return out


def _node_affinity(bound: list[Obj], nodes: Mapping[str, Obj]) -> list[ConstraintViolation]:
    """Pods on a node that none of their required node selector terms matches, judged by the
    reference implementation's term matching."""
    out = []
    for p in bound:
        required = ((p["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        if not required:
            continue
        key = pod_key(p)
        node = nodes[p["spec"]["nodeName"]]
        ref = RefNode(_name(node), _labels(node), [], False, {}, 0)
        terms = [
            node_selector_term(key, f"nodeAffinity.required.nodeSelectorTerms[{i}]", t)
            for i, t in enumerate(required.get("nodeSelectorTerms") or [])
        ]
        if not any(term_matches(t, ref) for t in terms):
            out.append(ConstraintViolation("node affinity", key, 1))
    return out


def _anti_affinity(bound: list[Obj]) -> list[ConstraintViolation]:
    """Pods that share a node with a pod of their namespace that their required hostname
    anti-affinity selects."""
    per_node: dict[str, list[Obj]] = collections.defaultdict(list)
    for p in bound:
        per_node[p["spec"]["nodeName"]].append(p)
    out = []
    for p in bound:
        terms = ((p["spec"].get("affinity") or {}).get("podAntiAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or []
        key = pod_key(p)
        for i, term in enumerate(terms):
            if term.get("topologyKey") != HOSTNAME:
                continue
            selector = label_selector(
                key, f"podAntiAffinity.required[{i}].labelSelector", term.get("labelSelector")
            )
            if any(
                q is not p
                and q["metadata"].get("namespace") == p["metadata"].get("namespace")
                and selector_matches(selector, _labels(q))
                for q in per_node[p["spec"]["nodeName"]]
            ):
                out.append(ConstraintViolation("pod anti-affinity", key, 1))
                break
    return out


def _spread(bound: list[Obj], nodes: Mapping[str, Obj]) -> list[ConstraintViolation]:
    """Each distinct DoNotSchedule constraint (namespace, key, selector, maxSkew) once: its
    matching pods counted per domain over every node that has the key."""
    constraints: dict[tuple[str, str, str, int], tuple[str, object]] = {}
    for p in bound:
        namespace = str(p["metadata"].get("namespace", ""))
        for c in p["spec"].get("topologySpreadConstraints") or []:
            if c.get("whenUnsatisfiable") != "DoNotSchedule":
                continue
            ident = (
                namespace,
                str(c.get("topologyKey")),
                repr(c.get("labelSelector")),
                int(c.get("maxSkew", 1)),
            )
            constraints.setdefault(ident, (pod_key(p), c.get("labelSelector")))
    out = []
    for (namespace, key, _, max_skew), (pod, raw) in constraints.items():
        selector = label_selector(pod, "topologySpreadConstraints.labelSelector", raw)
        counts = {_labels(n)[key]: 0 for n in nodes.values() if key in _labels(n)}
        for q in bound:
            domain = _labels(nodes[q["spec"]["nodeName"]]).get(key)
            if (
                domain is not None
                and q["metadata"].get("namespace") == namespace
                and selector_matches(selector, _labels(q))
            ):
                counts[domain] += 1
        skew = max(counts.values(), default=0) - min(counts.values(), default=0)
        if skew > max_skew:
            out.append(ConstraintViolation("topology spread", f"{namespace} over {key}", skew - max_skew))
    return out


def unaccounted(pods: Iterable[Obj], reported: Collection[str]) -> list[Obj]:
    """Pods neither bound, nor being deleted, nor reported unschedulable: ``reported`` holds
    the UIDs of the pods with a ``FailedScheduling`` event the caller counts as current."""
    return [
        p
        for p in pods
        if not (p.get("spec") or {}).get("nodeName")
        and not p["metadata"].get("deletionTimestamp")
        and p["metadata"]["uid"] not in reported
    ]


def vanished(
    created: Iterable[tuple[str, str]], present: Iterable[Obj], deleted: Collection[tuple[str, str]]
) -> list[tuple[str, str]]:
    """Created pods (namespace, name) that are gone with no known delete request, sorted."""
    here = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in present}
    return sorted(set(created) - here - set(deleted))


def lost(created: Mapping[str, str], present: Iterable[Obj]) -> list[str]:
    """Created pods, given as UID by name, whose UID ``present`` no longer holds, sorted by name.

    By UID, not name: a pod deleted and re-created under its name is still lost."""
    here = {p["metadata"]["uid"] for p in present}
    return sorted(name for name, uid in created.items() if uid not in here)


def unowned(pods: Iterable[Obj]) -> list[str]:
    """The names of ``pods`` that no controller owns (no ``ownerReferences`` entry with
    ``controller: true``), sorted: in a scenario whose pods ReplicaSets own, a pod no
    controller owned by the end was nobody's to whatever learns per workload or moves pods."""
    return sorted(_name(p) for p in pods if controller_of(p) is None)
