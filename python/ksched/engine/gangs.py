"""Gangs (scheduler-plugins coscheduling), as the engine reads them.

A pod labelled with ``POD_GROUP_LABEL`` belongs to the PodGroup it names, in
its own namespace, and is placed with at least ``minMember`` of its gang or
not at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from ksched.errors import MalformedObjectError
from ksched.objects import Obj, meta

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
    m = meta(pod)
    labels = m.get("labels") or {}
    name = labels.get(POD_GROUP_LABEL) if isinstance(labels, dict) else None
    if not name:
        return None
    return f"{m.get('namespace') or 'default'}/{name}"


def pod_group(obj: Obj) -> PodGroup:
    m = meta(obj)
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


@dataclass(frozen=True)
class GangStatus:
    """A PodGroup as the engine sees it: its minMember and how many members are bound."""

    min_member: int
    bound: int = 0
