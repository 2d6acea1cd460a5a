"""What the pod-level plugins (InterPodAffinity, PodTopologySpread) read of a pod.

Owns pod affinity and anti-affinity terms (namespaces, namespaceSelector,
matchLabelKeys and mismatchLabelKeys merged as the API server does) and
topology spread constraints with their policies, validated with upstream's
rules; every problem is a :class:`MalformedObjectError` naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ksched.engine.selectors import LabelSelector, Requirement, label_selector
from ksched.errors import MalformedObjectError
from ksched.objects import INT32_MAX, Obj, meta, name, namespace, pod_key, spec

WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")


INCLUSION_POLICIES = ("Honor", "Ignore")
# A label selector's requirements (matchLabels become In with one value); None is a nil selector.


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


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the pod-level plugins read of any pod, bound or pending."""

    namespace: str
    labels: tuple[tuple[str, str], ...]
    affinity: PodAffinityTerms | None
    terminating: bool = False
    # The claims of its ``persistentVolumeClaim`` volumes (VolumeRestrictions: ReadWriteOncePod users).
    claims: tuple[str, ...] = ()


@dataclass(frozen=True)
class PodClaim:
    """A claim a pod's volume refers to: ``namespace/name``, and whether it is a generic ephemeral volume's."""

    key: str
    ephemeral: bool = False

    @property
    def name(self) -> str:
        return self.key.split("/", 1)[1]


def pod_claims(pod: Obj) -> tuple[PodClaim, ...]:
    """The claims of a pod's ``persistentVolumeClaim`` and ``ephemeral`` volumes, once each, in order."""
    ns, pod_name = namespace(pod), name(pod)
    out: dict[str, PodClaim] = {}
    for v in spec(pod).get("volumes") or ():
        if not isinstance(v, dict):
            continue
        pvc = v.get("persistentVolumeClaim")
        if isinstance(pvc, dict) and pvc.get("claimName"):
            claim = PodClaim(f"{ns}/{pvc['claimName']}")
        elif v.get("ephemeral") is not None:
            claim = PodClaim(f"{ns}/{pod_name}-{v.get('name', '')}", ephemeral=True)
        else:
            continue
        out.setdefault(claim.key, claim)
    return tuple(out.values())


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
    labels = meta(pod).get("labels") or {}
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
    labels = meta(pod).get("labels") or {}
    out = []
    for i, c in enumerate(raw):
        field = f"spec.topologySpreadConstraints[{i}]"
        if not isinstance(c, dict):
            raise MalformedObjectError(key, field, "must be a mapping")
        skew = c.get("maxSkew")
        if not isinstance(skew, int) or isinstance(skew, bool) or not 1 <= skew <= INT32_MAX:
            raise MalformedObjectError(key, f"{field}.maxSkew", f"{skew!r} is not a 32-bit integer >= 1")
        topology_key = c.get("topologyKey")
        if not isinstance(topology_key, str) or not topology_key:
            raise MalformedObjectError(key, f"{field}.topologyKey", "must be a non-empty label key")
        when = c.get("whenUnsatisfiable")
        if when not in WHEN_UNSATISFIABLE:
            raise MalformedObjectError(
                key, f"{field}.whenUnsatisfiable", f"{when!r} (allowed: {', '.join(WHEN_UNSATISFIABLE)})"
            )
        min_domains = c.get("minDomains")
        if min_domains is not None and (
            not isinstance(min_domains, int)
            or isinstance(min_domains, bool)
            or not 1 <= min_domains <= INT32_MAX
        ):
            raise MalformedObjectError(
                key, f"{field}.minDomains", f"{min_domains!r} is not a 32-bit integer >= 1"
            )
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


def pod_info(pod: Obj, key: str | None = None, claims: tuple[PodClaim, ...] | None = None) -> PodInfo:
    """What the pod-level plugins read of ``pod``; ``claims`` are its :func:`pod_claims` when the caller has them."""
    key = key or pod_key(pod)
    m = pod.get("metadata") or {}
    if not isinstance(m, dict):
        raise MalformedObjectError(key, "metadata", "must be a mapping")
    labels = m.get("labels") or {}
    if not isinstance(labels, dict):
        raise MalformedObjectError(key, "metadata.labels", "must be a mapping")
    return PodInfo(
        namespace=str(m.get("namespace") or "default"),
        labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())) if labels else (),
        affinity=pod_affinity_terms(pod, key),
        terminating=m.get("deletionTimestamp") is not None,
        claims=tuple(c.key for c in (pod_claims(pod) if claims is None else claims) if not c.ephemeral),
    )


# -- gangs (scheduler-plugins coscheduling) -------------------------------------

# Pods labelled with it belong to the PodGroup it names, in their own namespace.
