"""What a side-by-side run is asked for (:class:`Options`), what it records per scheduler,
workload and round (:class:`Phase`), and the names and limits its parts share."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

NULL = "null-binder"
KUBE_SCHEDULER = "kube-scheduler"
KSCHED = "ksched"
SCHEDULER_NAMES = {NULL: "null-binder", KUBE_SCHEDULER: "default-scheduler"}
# What --workloads runs unless told, and every workload it takes.
DEFAULT_WORKLOADS = ("bare", "replicaset", "anti-affinity", "spread", "metrics")
WORKLOADS = (*DEFAULT_WORKLOADS, "fill")
WORKLOAD_TITLES = {
    "bare": "bare pods, cpu/memory requests",
    "replicaset": "pods owned by a ReplicaSet behind a Service",
    "anti-affinity": "required pod anti-affinity (hostname)",
    "spread": "zone topology spread (maxSkew 1, DoNotSchedule)",
    "metrics": "bare pods under two live Prometheus metrics",
    "fill": "the cluster filled to 95 % of its cpu in steps (sharded replicas' conflicts by fill)",
}
# The fill workload's steps: the cluster's allocatable cpu requested after each, and the
# requests its pods draw from in turn (cpu millicores, memory MiB): a node fills unevenly.
FILL_STEPS = (0.5, 0.8, 0.9, 0.95)
FILL_SIZES = ((250, 512), (500, 1024), (1000, 2048), (250, 512), (2000, 4096), (500, 1024))
# A fill step gives up this long after its last bind: near full, some pods fit nowhere.
FILL_STALL_S = 15.0
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
KUBE_SCHEDULER_QPS = 5000.0
READY_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 20.0
# Before each drain and each steady phase: the control plane and the scheduler quiet (under this
# many cores together for a second), or this long waited.
QUIET_CORES = 0.25
SETTLE_MAX_S = 30.0
# KWOK's node Lease duration here: renewed every quarter of it. A kubelet's 40 s renews 5,000
# Leases about 480 times a second, which took 1.40 of the 2-core development machine's cores on
# an idle cluster (API server, etcd, KWOK; 0.91-2.02 in 5-second windows), taken from every
# scheduler's drains and moving with the renewals' timing by more than the schedulers differ.
# Nothing here reads them (no node lifecycle controller runs; scheduler_perf has no Leases at
# all): a day keeps them out of the drains. --node-lease-seconds 40 puts them back.
BENCH_NODE_LEASE_S = 86400
NODE_LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
TERMINATED_WATCHERS = "apiserver_terminated_watchers_total{"
# The exporter's two gauges, per node; the values move every few seconds (live metrics).
UTILIZATION = "ksched_bench_node_utilization"
POWER = "ksched_bench_node_power_watts"
METRIC_PERIOD_S = 5
# Sharded replicas' counters (summed over their /metrics): hand-offs and binds refused as bound.
HANDOFFS = "ksched_shard_handoffs_total"
CONFLICTS = 'ksched_binding_errors_total{reason="conflict"'


@dataclass
class Phase:
    """One scheduler's figures for one workload."""

    scheduler: str
    workload: str
    pods: int
    # Which of ``--rounds`` (from 0).
    round: int = 0
    bound: int = 0
    drain_seconds: float = 0.0
    pods_per_s: float = 0.0
    # To the last write of the drain, bind or Scheduled event: the work the null binder does per pod.
    scheduled_events: int = 0
    writes_seconds: float = 0.0
    writes_pods_per_s: float = 0.0
    cpu_ms_per_pod: float = 0.0
    # Scheduler processes (ksched's sharded replicas), and each one's CPU over the drain per pod bound.
    replicas: int = 1
    cpu_ms_per_pod_by_replica: list[float] = field(default_factory=list)
    # Sharded replicas over the drain: pods handed to another replica, and binds the API server
    # refused as already bound (two replicas that each took the pod for theirs).
    handoffs: int = 0
    bind_conflicts: int = 0
    # The control plane's processes (API server, etcd, KWOK, ...) over the same drain: the work
    # the scheduler's writes and watches cost them, on the cores the scheduler shares.
    control_plane_cpu_ms_per_pod: float = 0.0
    # The same by process (kube-apiserver, etcd, kwok, prometheus).
    control_plane_by_process: dict[str, float] = field(default_factory=dict)
    peak_rss_mib: float = 0.0
    steady_pods: int = 0
    steady_bound: int = 0
    steady_rate: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    # Each steady pod as [seconds from the first create, create→bind ms], in the order sent: where
    # in the phase the slow ones fell. Unbound pods are left out.
    steady_latencies: list[tuple[float, float]] = field(default_factory=list)
    overcommitted_nodes: int = 0
    constraint_violations: int = 0
    # Watchers the API server closed for falling behind (``apiserver_terminated_watchers_total``), from
    # the backlog's creation to the drain's end: the paused scheduler's, or any other. A closed watcher
    # watches again and is sent the events it missed, at the drain's cost; None if not read.
    watchers_closed: int | None = None
    # ksched on the metrics workload: its /readyz line for metrics after the phases ("2 live metric(s) fresh").
    metrics_status: str | None = None
    # Seconds from the resumption to each bind of the backlog, sorted (the chart).
    bind_times: list[float] = field(default_factory=list)
    # The fill workload, step by step: {"fill": share of the cpu requested after it, "pods",
    # "bound", "handoffs", "conflicts", "pods_per_s"}; and its pods left pending although
    # they fit a node at the end (each a scheduler's defect).
    fill_steps: list[dict[str, float]] = field(default_factory=list)
    pending_that_fit: int = 0
    error: str | None = None


@dataclass
class Options:
    nodes: int
    pods: int
    workloads: list[str]
    schedulers: list[str]
    kscheds: dict[str, list[str]]
    rate: float
    steady_pods: int
    stall_s: float
    out: Path
    zones: int = 3
    rounds: int = 1
    node_lease_s: int = BENCH_NODE_LEASE_S
    # Processes spinning on a core each for the phases: a control plane busy with other work.
    cpu_hog: int = 0
    # Sharded replicas per ksched label (absent: 1, one process without leader election).
    replicas: dict[str, int] = field(default_factory=dict)


# The most pods a KWOK node holds (its allocatable pods; the kubelet's default, and Kubernetes'
# tested limit per node): the fill of --existing-pods never goes past it.
NODE_PODS = 110


@dataclass
class ExistingOptions:
    """``--existing-pods``: a cluster filled with bound pods, then each scheduler started, made to
    relist, and timed on a drain, a rolling update and steady arrivals."""

    nodes: int
    existing_pods: int
    schedulers: list[str]
    kscheds: dict[str, list[str]]
    drain_pods: int
    churn_pods: int
    churn_rate: float
    steady_pods: int
    rate: float
    stall_s: float
    out: Path
    cpu_hog: int = 0
    zones: int = 3
    seed: int = 1
    node_lease_s: int = BENCH_NODE_LEASE_S
    # Pods created at ``rate`` right after the forced relist, whose create→bind shows the pause.
    relist_pods: int = 200
    # Sharded replicas per ksched label (absent: 1).
    replicas: dict[str, int] = field(default_factory=dict)


@dataclass
class ExistingFigures:
    """One scheduler's figures on the filled cluster, phase by phase (a)-(e)."""

    scheduler: str
    # (a) start-up: process start to ready (its /readyz, or the null binder's ready file).
    startup_s: float = 0.0
    startup_peak_rss_mib: float = 0.0
    # ksched's own start-up log lines: where its pod list's time went, when it was ready.
    startup_profile: list[str] = field(default_factory=list)
    # (d) the forced relist: etcd compacted and the API server restarted.
    relist_rss_before_mib: float = 0.0
    relist_rss_after_mib: float = 0.0
    # ksched's own ksched_loop_longest_pause_seconds after the relist (None for the others).
    relist_loop_pause_s: float | None = None
    relist_bound: int = 0
    relist_max_ms: float | None = None
    relist_p99_ms: float | None = None
    # (b) the backlog drain.
    drain_bound: int = 0
    drain_seconds: float = 0.0
    drain_pods_per_s: float = 0.0
    drain_cpu_ms_per_pod: float = 0.0
    # Scheduler processes (ksched's sharded replicas), and each one's drain CPU per pod bound.
    replicas: int = 1
    drain_cpu_ms_per_pod_by_replica: list[float] = field(default_factory=list)
    # Sharded replicas over the drain: hand-offs, and binds refused as already bound.
    drain_handoffs: int = 0
    drain_bind_conflicts: int = 0
    # (c) the rolling update: old pods deleted and new ones created at ``churn_rate``.
    churn_bound: int = 0
    # The rate the steps were sent at: under ``churn_rate`` when the API server could not keep up.
    churn_rate_sent: float = 0.0
    churn_p50_ms: float | None = None
    churn_p99_ms: float | None = None
    # (e) steady arrivals at ``rate``: latency, CPU per scheduled pod, and the memory it then holds.
    steady_bound: int = 0
    steady_p50_ms: float | None = None
    steady_p99_ms: float | None = None
    steady_cpu_ms_per_pod: float = 0.0
    steady_rss_mib: float = 0.0
    rss_kib_per_cluster_pod: float = 0.0
    peak_rss_mib: float = 0.0
    # Per phase, what the census found wrong (lost pods, unbound pods, over-committed nodes).
    violations: list[str] = field(default_factory=list)
    error: str | None = None
