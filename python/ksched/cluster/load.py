"""The local control plane's load simulation: real usage, scraped by real components.

Owns the usage profile a pod carries as annotations (:class:`UsageProfile`,
:func:`usage_annotations`), the KWOK documents that turn those annotations into usage (a
``ClusterResourceUsage`` whose CEL expressions evaluate the profile) and serve
kubelet-style resource metrics for every node (a ``Metric``), the Prometheus scrape job
and recording rules over those endpoints; metrics-server, which serves ``metrics.k8s.io``
from them, is :mod:`ksched.cluster.metrics_server`. :mod:`ksched.cluster.kwok`,
:mod:`ksched.cluster.prometheus` and :mod:`ksched.cluster.local` take these pieces when
``up`` is asked for the simulation.
Promises: a pod's usage is a deterministic function of its annotations, its requests and
the seconds since it started (and, where it names a burst epoch, the clock), and
:meth:`UsageProfile.multiple` computes the same function in Python. Never names an address other than loopback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ksched.errors import KschedError

ANNOTATION_PREFIX = "load.ksched.io/"
BASE = ANNOTATION_PREFIX + "base"
RAMP_SECONDS = ANNOTATION_PREFIX + "ramp-seconds"
BURST_EVERY_SECONDS = ANNOTATION_PREFIX + "burst-every-seconds"
BURST_FOR_SECONDS = ANNOTATION_PREFIX + "burst-for-seconds"
BURST_TO = ANNOTATION_PREFIX + "burst-to"
# A Unix second: bursts are timed by the clock's seconds since it, not by the seconds since
# the pod started, so every pod with the same period and epoch bursts at the same moments.
BURST_EPOCH = ANNOTATION_PREFIX + "burst-epoch"
NOISE = ANNOTATION_PREFIX + "noise"
SEED = ANNOTATION_PREFIX + "seed"
REFERENCE_CPU = ANNOTATION_PREFIX + "reference-cpu"
REFERENCE_MEMORY = ANNOTATION_PREFIX + "reference-memory"
# What a container that requests nothing uses when its pod names no reference: a
# BestEffort pod is never free, and a constant keeps it visible without dominating.
BEST_EFFORT_CPU = "10m"
BEST_EFFORT_MEMORY = "32Mi"
# What a node uses besides its pods (kubelet, container runtime, system daemons), as an
# idle real node does: metrics-server drops a node whose CPU or memory reads zero, so
# without it a node with no pods would be missing from metrics.k8s.io.
NODE_SYSTEM_CPU_CORES = 0.05
NODE_SYSTEM_MEMORY_BYTES = 256 * 2**20
# Noise holds for this many seconds (the default scrape interval), then draws again.
NOISE_BUCKET_S = 15
# The noise draw: a Lehmer modulus (the Mersenne prime 2^31 - 1) keeps every product of
# two residues below 2^62, inside CEL's int64, which errors on overflow where Python would not.
_MODULUS = 2_147_483_647
_BUCKET_MIX = 2_654_435_761
_SEED_MIX = 40_503
_ROUND_ADD = 12_345

# metrics-server reads a node's resource metrics from this path when the node names it:
# KWOK serves every node on one address, one path per node.
RESOURCE_METRICS_PATH_ANNOTATION = "metrics.k8s.io/resource-metrics-path"
SCRAPE_JOB = "kwok-nodes"
# Rates span this many scrapes, as kube-prometheus's rate(...[1m]) spans four at 15 s.
RATE_SCRAPES = 4
# metrics-server refuses a resolution under 10 s.
MIN_METRIC_RESOLUTION_S = 10.0


class LoadSimulationError(KschedError):
    """A usage profile or a load-simulation setting is invalid."""


@dataclass(frozen=True)
class LoadSimulation:
    """Settings of the load simulation: how often Prometheus scrapes every node's endpoint
    (and evaluates the recording rules), and metrics-server's resolution."""

    scrape_interval_s: float = 15.0
    metric_resolution_s: float = 15.0

    def __post_init__(self) -> None:
        if self.scrape_interval_s < 0.1:
            raise LoadSimulationError(
                f"the scrape interval must be at least 0.1 s, not {self.scrape_interval_s}"
            )
        if self.metric_resolution_s < MIN_METRIC_RESOLUTION_S:
            raise LoadSimulationError(
                f"metrics-server's resolution must be at least {MIN_METRIC_RESOLUTION_S:.0f} s, "
                f"not {self.metric_resolution_s}"
            )

    @property
    def rate_window_s(self) -> float:
        return RATE_SCRAPES * self.scrape_interval_s


@dataclass(frozen=True)
class UsageProfile:
    """How much a pod uses, as a multiple of its requests, over the seconds since it started.

    The multiple climbs linearly from 0 to ``base`` over ``ramp_s``; in the last
    ``burst_for_s`` seconds of every ``burst_every_s`` (of the pod's life, or of the clock's
    seconds since the Unix second ``burst_epoch_s`` where that is set, so that such pods burst
    together whenever they started) it is ``burst_to`` instead; then it is scaled by
    ``1 + noise * (2u - 1)``, ``u`` in [0, 1) drawn from ``seed`` and the current
    :data:`NOISE_BUCKET_S`-second bucket. A container that requests no CPU (memory) is
    multiplied against ``reference_cpu`` (``reference_memory``) instead, by default
    :data:`BEST_EFFORT_CPU` (:data:`BEST_EFFORT_MEMORY`).

    Example: ``UsageProfile(base=0.7, ramp_s=60, burst_every_s=120, burst_for_s=20, burst_to=2.0)``.
    """

    base: float = 1.0
    ramp_s: float = 0.0
    burst_every_s: int = 0
    burst_for_s: int = 0
    burst_to: float = 1.0
    burst_epoch_s: int | None = None
    noise: float = 0.0
    seed: int = 0
    reference_cpu: str | None = None
    reference_memory: str | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.base < 0 or self.burst_to < 0 or self.ramp_s < 0:
            problems.append("base, burst_to and ramp_s must not be negative")
        if not 0 <= self.noise < 1:
            problems.append(f"noise must be in [0, 1), not {self.noise}")
        if self.burst_every_s < 0 or not 0 <= self.burst_for_s <= self.burst_every_s:
            problems.append("bursts need 0 <= burst_for_s <= burst_every_s")
        if self.burst_epoch_s is not None and self.burst_epoch_s < 0:
            problems.append(f"burst_epoch_s must not be negative, not {self.burst_epoch_s}")
        if not 0 <= self.seed < _MODULUS:
            problems.append(f"seed must be in [0, {_MODULUS}), not {self.seed}")
        if problems:
            raise LoadSimulationError("invalid usage profile: " + "; ".join(problems))

    def multiple(self, seconds: float, unix_s: float | None = None) -> float:
        """The multiple of the request used ``seconds`` after the pod started, at ``unix_s``
        on the clock (read only where ``burst_epoch_s`` is set, and then required): what KWOK
        evaluates."""
        if self.burst_epoch_s is not None and unix_s is None:
            raise LoadSimulationError("a profile timed by the clock needs the clock's unix_s")
        ramp = seconds / self.ramp_s if self.ramp_s > 0 and seconds < self.ramp_s else 1.0
        timed_by = (
            seconds if self.burst_epoch_s is None or unix_s is None else int(unix_s) - self.burst_epoch_s
        )
        level = self.burst_to if _in_burst(self, int(timed_by)) else self.base * ramp
        return level * (1.0 + self.noise * (2.0 * _draw(self.seed, int(seconds) // NOISE_BUCKET_S) - 1.0))


def _in_burst(profile: UsageProfile, seconds: int) -> bool:
    every, lasting = profile.burst_every_s, profile.burst_for_s
    return every > 0 and lasting > 0 and seconds % every >= every - lasting


def _draw(seed: int, bucket: int) -> float:
    """A number in [0, 1) from the seed and the bucket: two squarings modulo a prime."""
    x = (bucket * _BUCKET_MIX + seed * _SEED_MIX) % _MODULUS
    x = (x * x + _ROUND_ADD) % _MODULUS
    x = (x * x + seed) % _MODULUS
    return x / _MODULUS


def usage_annotations(profile: UsageProfile) -> dict[str, str]:
    """The pod annotations that give a pod ``profile`` in the load simulation."""
    annotations = {
        BASE: repr(float(profile.base)),
        RAMP_SECONDS: repr(float(profile.ramp_s)),
        BURST_EVERY_SECONDS: str(profile.burst_every_s),
        BURST_FOR_SECONDS: str(profile.burst_for_s),
        BURST_TO: repr(float(profile.burst_to)),
        NOISE: repr(float(profile.noise)),
        SEED: str(profile.seed),
    }
    if profile.burst_epoch_s is not None:
        annotations[BURST_EPOCH] = str(profile.burst_epoch_s)
    if profile.reference_cpu is not None:
        annotations[REFERENCE_CPU] = profile.reference_cpu
    if profile.reference_memory is not None:
        annotations[REFERENCE_MEMORY] = profile.reference_memory
    return annotations


# --- KWOK: usage from the annotations, and the kubelet's resource metrics per node ---

_ANNOTATIONS = "pod.metadata.annotations"
# Seconds since the pod started (KWOK sets startTime when the pod runs).
_SECONDS = "(UnixSecond(Now()) - UnixSecond(pod.status.startTime))"


def _number(key: str, default: float) -> str:
    return f'("{key}" in {_ANNOTATIONS} ? double({_ANNOTATIONS}["{key}"]) : {float(default)!r})'


def _integer(key: str) -> str:
    return f'("{key}" in {_ANNOTATIONS} ? int({_ANNOTATIONS}["{key}"]) : 0)'


def _multiple_expression() -> str:
    """:meth:`UsageProfile.multiple` in CEL, reading the profile from the pod's annotations."""
    ramp_s = _number(RAMP_SECONDS, 0.0)
    ramp = f"({ramp_s} > 0.0 && {_SECONDS} < {ramp_s} ? {_SECONDS} / {ramp_s} : 1.0)"
    every, lasting, whole = _integer(BURST_EVERY_SECONDS), _integer(BURST_FOR_SECONDS), f"int({_SECONDS})"
    since_epoch = f"int(UnixSecond(Now())) - {_integer(BURST_EPOCH)}"
    timed_by = f'("{BURST_EPOCH}" in {_ANNOTATIONS} ? {since_epoch} : {whole})'
    in_burst = f"({every} > 0 && {lasting} > 0 && {timed_by} % {every} >= {every} - {lasting})"
    level = f"({in_burst} ? {_number(BURST_TO, 1.0)} : {_number(BASE, 1.0)} * {ramp})"
    seed = _integer(SEED)
    x = f"(({whole} / {NOISE_BUCKET_S}) * {_BUCKET_MIX} + {seed} * {_SEED_MIX}) % {_MODULUS}"
    x = f"(({x}) * ({x}) + {_ROUND_ADD}) % {_MODULUS}"
    x = f"(({x}) * ({x}) + {seed}) % {_MODULUS}"
    noise = f"(1.0 + {_number(NOISE, 0.0)} * (2.0 * double({x}) / {float(_MODULUS)!r} - 1.0))"
    return f'("{BASE}" in {_ANNOTATIONS} ? {level} * {noise} : 1.0)'


def _usage_expression(resource: str, reference_key: str, best_effort: str) -> str:
    requests = "container.resources.requests"
    reference = (
        f'("{resource}" in {requests} ? {requests}["{resource}"]'
        f' : ("{reference_key}" in {_ANNOTATIONS} ? Quantity({_ANNOTATIONS}["{reference_key}"])'
        f' : Quantity("{best_effort}")))'
    )
    return f"{reference} * {_multiple_expression()}"


def resource_metrics_path(node: str) -> str:
    """Where KWOK serves ``node``'s kubelet-style resource metrics."""
    return f"/metrics/nodes/{node}/metrics/resource"


_POD_LABELS = [
    {"name": "namespace", "value": "pod.metadata.namespace"},
    {"name": "pod", "value": "pod.metadata.name"},
]
_CONTAINER_LABELS = [{"name": "container", "value": "container.name"}, *_POD_LABELS]


def _metric(
    name: str, kind: str, dimension: str, value: str, help_: str, labels: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "kind": kind,
        "dimension": dimension,
        "value": value,
        "help": help_,
        "labels": labels or [],
    }


def kwok_documents() -> list[dict[str, Any]]:
    """The ClusterResourceUsage and the Metric for KWOK's ``--config``.

    The Metric serves the series a kubelet's ``/metrics/resource`` serves (what metrics-server
    reads), a node's being its pods' plus :data:`NODE_SYSTEM_CPU_CORES` and
    :data:`NODE_SYSTEM_MEMORY_BYTES`, and the node's allocatable CPU and memory as
    kube-state-metrics names them, so that Prometheus divides usage by allocatable without
    another exporter."""
    return [_usage_document(), _metric_document()]


def _usage_document() -> dict[str, Any]:
    """The ClusterResourceUsage, whose CEL expressions evaluate each pod's usage profile."""
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterResourceUsage",
        "metadata": {"name": "ksched-usage-profile"},
        "spec": {
            "usages": [
                {
                    "usage": {
                        "cpu": {"expression": _usage_expression("cpu", REFERENCE_CPU, BEST_EFFORT_CPU)},
                        "memory": {
                            "expression": _usage_expression("memory", REFERENCE_MEMORY, BEST_EFFORT_MEMORY)
                        },
                    }
                }
            ]
        },
    }


def _metric_document() -> dict[str, Any]:
    """The Metric: kubelet-style resource metrics of every node, its pods and containers."""
    allocatable = [
        _metric(
            "kube_node_status_allocatable",
            "gauge",
            "node",
            f'node.status.allocatable["{resource}"]',
            "The allocatable of a node for a resource.",
            [{"name": "resource", "value": f'"{resource}"'}, {"name": "unit", "value": f'"{unit}"'}],
        )
        for resource, unit in (("cpu", "core"), ("memory", "byte"))
    ]
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Metric",
        "metadata": {"name": "ksched-resource-metrics"},
        "spec": {
            "path": resource_metrics_path("{nodeName}"),
            "metrics": [
                _metric("scrape_error", "gauge", "node", "0", "1 if reading the node's metrics failed."),
                _metric(
                    "node_cpu_usage_seconds_total",
                    "counter",
                    "node",
                    f'node.CumulativeUsage("cpu") + {NODE_SYSTEM_CPU_CORES!r} * node.SinceSecond()',
                    "Cumulative CPU time consumed by the node in core-seconds.",
                ),
                _metric(
                    "node_memory_working_set_bytes",
                    "gauge",
                    "node",
                    f'node.Usage("memory") + {float(NODE_SYSTEM_MEMORY_BYTES)!r}',
                    "Current working set of the node in bytes.",
                ),
                _metric(
                    "pod_cpu_usage_seconds_total",
                    "counter",
                    "pod",
                    'pod.CumulativeUsage("cpu")',
                    "Cumulative CPU time consumed by the pod in core-seconds.",
                    _POD_LABELS,
                ),
                _metric(
                    "pod_memory_working_set_bytes",
                    "gauge",
                    "pod",
                    'pod.Usage("memory")',
                    "Current working set of the pod in bytes.",
                    _POD_LABELS,
                ),
                _metric(
                    "container_start_time_seconds",
                    "gauge",
                    "container",
                    "UnixSecond(pod.status.startTime)",
                    "Start time of the container since the Unix epoch in seconds.",
                    _CONTAINER_LABELS,
                ),
                _metric(
                    "container_cpu_usage_seconds_total",
                    "counter",
                    "container",
                    'pod.CumulativeUsage("cpu", container.name)',
                    "Cumulative CPU time consumed by the container in core-seconds.",
                    _CONTAINER_LABELS,
                ),
                _metric(
                    "container_memory_working_set_bytes",
                    "gauge",
                    "container",
                    'pod.Usage("memory", container.name)',
                    "Current working set of the container in bytes.",
                    _CONTAINER_LABELS,
                ),
                *allocatable,
            ],
        },
    }


def kwok_node_args(port: int) -> list[str]:
    """KWOK serves on loopback only, and its nodes advertise that address and port as their
    kubelet's (metrics-server connects to it)."""
    return ["--node-ip=127.0.0.1", f"--node-port={port}", f"--server-address=127.0.0.1:{port}"]


# --- Prometheus ---


def go_duration(seconds: float) -> str:
    """``seconds`` as a Go duration in whole milliseconds (Prometheus's and metrics-server's flags)."""
    return f"{round(seconds * 1000)}ms"


def prometheus_scrape_config(kwok_address: str, simulation: LoadSimulation) -> dict[str, Any]:
    """A scrape job over every node KWOK manages, found through KWOK's own HTTP service
    discovery (nodes added later are scraped too), each target labelled with its node."""
    path = resource_metrics_path("([^/]+)")
    interval = go_duration(simulation.scrape_interval_s)
    return {
        "job_name": SCRAPE_JOB,
        "scrape_interval": interval,
        "scrape_timeout": interval,
        "http_sd_configs": [
            {"url": f"http://{kwok_address}/discovery/prometheus", "refresh_interval": interval}
        ],
        "relabel_configs": [
            {"source_labels": ["__metrics_path__"], "regex": path, "action": "keep"},
            {
                "source_labels": ["__metrics_path__"],
                "regex": path,
                "target_label": "node",
                "replacement": "$1",
            },
            {"source_labels": ["node"], "target_label": "instance"},
            {"regex": "metrics_name", "action": "labeldrop"},
        ],
    }


def recording_rules(simulation: LoadSimulation) -> dict[str, Any]:
    """Recording rules shaped like kube-prometheus's node rules: per node, CPU cores used
    (a rate over :data:`RATE_SCRAPES` scrapes), memory working set, allocatable, and their
    ratios; and the same ratios over the cluster."""
    job = f'job="{SCRAPE_JOB}"'
    window = go_duration(simulation.rate_window_s)
    rules = [
        (
            "node:node_cpu_usage_cores:rate",
            f"sum by (node) (rate(node_cpu_usage_seconds_total{{{job}}}[{window}]))",
        ),
        (
            "node:node_cpu_allocatable_cores:sum",
            f'sum by (node) (kube_node_status_allocatable{{{job},resource="cpu"}})',
        ),
        (
            "node:node_cpu_utilisation:ratio",
            "node:node_cpu_usage_cores:rate / node:node_cpu_allocatable_cores:sum",
        ),
        ("node:node_memory_working_set_bytes:sum", f"sum by (node) (node_memory_working_set_bytes{{{job}}})"),
        (
            "node:node_memory_allocatable_bytes:sum",
            f'sum by (node) (kube_node_status_allocatable{{{job},resource="memory"}})',
        ),
        (
            "node:node_memory_utilisation:ratio",
            "node:node_memory_working_set_bytes:sum / node:node_memory_allocatable_bytes:sum",
        ),
        (
            "cluster:node_cpu_utilisation:ratio",
            "sum(node:node_cpu_usage_cores:rate) / sum(node:node_cpu_allocatable_cores:sum)",
        ),
        (
            "cluster:node_memory_utilisation:ratio",
            "sum(node:node_memory_working_set_bytes:sum) / sum(node:node_memory_allocatable_bytes:sum)",
        ),
    ]
    return {
        "groups": [
            {
                "name": "ksched-load-simulation",
                "interval": go_duration(simulation.scrape_interval_s),
                "rules": [{"record": record, "expr": expr} for record, expr in rules],
            }
        ]
    }


def yaml_documents(documents: list[dict[str, Any]]) -> str:
    """Documents for a multi-document YAML file (JSON is YAML)."""
    return "\n---\n".join(json.dumps(d, indent=1) for d in documents)
