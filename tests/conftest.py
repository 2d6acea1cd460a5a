"""Shared fixtures: small Kubernetes objects for table-driven tests."""

from __future__ import annotations

from typing import Any

from ksched.config import EstimateConfig, MetricConfig

Obj = dict[str, Any]


def annotation_metric(annotation: str, **extra: Any) -> Obj:
    """A metric named price read from a node annotation; a node without it is excluded."""
    return {"name": "price", "source": "annotation", "annotation": annotation, "missing": "exclude", **extra}


def node(
    name: str,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    taints: list[Obj] | None = None,
    unschedulable: bool = False,
    extra: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            "annotations": annotations or {},
        },
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {
            "allocatable": {
                "cpu": cpu,
                "memory": memory,
                "pods": pods,
                "ephemeral-storage": "100Gi",
                **(extra or {}),
            }
        },
    }


def pod(
    name: str,
    cpu: str | None = "100m",
    memory: str | None = "128Mi",
    namespace: str = "default",
    scheduler: str = "ksched",
    node_name: str | None = None,
    **spec: Any,
) -> Obj:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    body: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": requests}}],
            **spec,
        },
    }
    if node_name:
        body["spec"]["nodeName"] = node_name
    return body


def failed_scheduling(fit: str, preemption: str) -> str:
    """Upstream v1.36's FailedScheduling text for a pod without claims that fits nowhere:
    the FitError, then the PostFilter reasons of the default profile (DynamicResources'
    then DefaultPreemption's, joined by ", ")."""
    return f"{fit} no new claims to deallocate, preemption: {preemption}"


def not_helpful(total: int) -> str:
    """DefaultPreemption's FitError when no node's failure is one eviction resolves."""
    return f"0/{total} nodes are available: {total} Preemption is not helpful for scheduling."


def no_victims(total: int) -> str:
    """DefaultPreemption's FitError when no node runs a pod of lower priority to evict."""
    return f"0/{total} nodes are available: {total} No preemption victims found for incoming pod."


def estimated_metric(window_s: float = 0.0, **fields: Any) -> MetricConfig:
    """A Prometheus metric named ``cpu`` with a load estimate of CPU over ``window_s``."""
    return MetricConfig(
        **{"name": "cpu", "source": "prometheus", "query": "q", **fields},
        estimate=EstimateConfig(resource="cpu", window_s=window_s),
    )
