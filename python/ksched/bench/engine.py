"""``ksched bench`` without a mode flag: in-process throughput of the engine on a synthetic cluster.

Builds a reproducible cluster (zones, instance types, labels, taints, GPU
nodes, existing pods, two metrics) and pending pods with mixed constraints,
then schedules them in batches through :class:`ksched.engine.Engine`, the
code path ``ksched run`` uses. Prints figures; never asserts timings.
"""

from __future__ import annotations

import gc
import random
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ksched.config import Config, MetricConfig
from ksched.engine import Engine, commit_placements
from ksched.engine.snapshot import Snapshot, build_snapshot, remove_usage
from ksched.objects import Obj

INSTANCE_TYPES = (
    ("m5.xlarge", "4", "16Gi"),
    ("m5.2xlarge", "8", "32Gi"),
    ("c5.4xlarge", "16", "32Gi"),
    ("r5.2xlarge", "8", "64Gi"),
)
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d")
BENCH_METRICS = (
    MetricConfig(
        name="cpu_utilization",
        source="prometheus",
        query="node_cpu_utilization",
        prefer="lower",
        above=0.9,
        weight=2.0,
    ),
    MetricConfig(name="price", source="annotation", annotation="ksched.io/price", prefer="lower", weight=1.0),
)
# The reference is O(pods x nodes) in Python; this size takes it a few seconds.
REFERENCE_NODES = 200
REFERENCE_PODS = 100
PROGRESS_AFTER_S = 2.0


def synthetic_nodes(n: int, rng: random.Random) -> list[Obj]:
    nodes = []
    for i in range(n):
        itype, cpu, mem = INSTANCE_TYPES[i % len(INSTANCE_TYPES)]
        name = f"node-{i:05d}"
        alloc = {"cpu": cpu, "memory": mem, "pods": "110", "ephemeral-storage": "100Gi"}
        taints = []
        if i % 20 == 0:
            alloc["nvidia.com/gpu"] = "4"
            taints.append({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})
        elif i % 17 == 0:
            taints.append({"key": "spot", "value": "true", "effect": "PreferNoSchedule"})
        nodes.append(
            {
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "topology.kubernetes.io/zone": ZONES[i % len(ZONES)],
                        "topology.kubernetes.io/region": "us-east-1",
                        "node.kubernetes.io/instance-type": itype,
                        "kubernetes.io/arch": "amd64",
                        "kubernetes.io/os": "linux",
                    },
                    "annotations": {"ksched.io/price": f"{rng.uniform(0.05, 1.5):.3f}"},
                },
                "spec": {"taints": taints},
                "status": {"allocatable": alloc},
            }
        )
    return nodes


def _pod(name: str, cpu: str, mem: str, **spec: Any) -> Obj:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {
            "schedulerName": "ksched",
            "containers": [
                {"name": "app", "image": "app", "resources": {"requests": {"cpu": cpu, "memory": mem}}}
            ],
            **spec,
        },
    }


def synthetic_pending(p: int, rng: random.Random, prefix: str = "pod") -> list[Obj]:
    pods = []
    for i in range(p):
        kind = i % 10
        cpu = rng.choice(("100m", "250m", "500m", "1"))
        mem = rng.choice(("128Mi", "256Mi", "512Mi", "1Gi"))
        spec: dict[str, Any] = {}
        if kind == 1:
            spec["nodeSelector"] = {"topology.kubernetes.io/zone": ZONES[i % len(ZONES)]}
        elif kind == 2:
            spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "node.kubernetes.io/instance-type",
                                        "operator": "In",
                                        "values": ["m5.2xlarge", "r5.2xlarge"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            }
        elif kind == 3:
            spec["affinity"] = {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 50,
                            "preference": {
                                "matchExpressions": [
                                    {
                                        "key": "topology.kubernetes.io/zone",
                                        "operator": "In",
                                        "values": [ZONES[0]],
                                    }
                                ]
                            },
                        }
                    ]
                }
            }
        elif kind == 4:
            spec["tolerations"] = [{"key": "spot", "operator": "Exists", "effect": "PreferNoSchedule"}]
        elif kind == 5 and i % 20 == 5:
            spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
            pod = _pod(f"{prefix}-{i:06d}", cpu, mem, **spec)
            pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
            pods.append(pod)
            continue
        pods.append(_pod(f"{prefix}-{i:06d}", cpu, mem, **spec))
    return pods


def synthetic_existing(e: int, nodes: list[Obj], rng: random.Random) -> list[Obj]:
    out = []
    for i in range(e):
        pod = _pod(f"existing-{i:06d}", rng.choice(("100m", "200m", "500m")), rng.choice(("128Mi", "512Mi")))
        pod["spec"]["nodeName"] = nodes[rng.randrange(len(nodes))]["metadata"]["name"]
        out.append(pod)
    return out


def synthetic_cpu_utilization(n: int, rng: random.Random) -> np.ndarray[Any, np.dtype[np.float64]]:
    return np.array(
        [rng.uniform(0.05, 0.98) if rng.random() > 0.02 else np.nan for _ in range(n)], dtype=np.float64
    )


@dataclass
class _Run:
    snapshot: Snapshot
    placed: int
    seconds: float
    # Of ``seconds``: inside the Rust engine, and in Python around it (see BatchResult);
    # the rest is committing each batch's placements to the node table.
    rust_s: float
    python_s: float
    latencies_s: list[float]
    # Pods attempted (the throughput counts every attempt, placed or not).
    attempted: int

    def percentile_ms(self, q: float) -> float:
        return float(np.percentile(np.array(self.latencies_s) * 1000, q))

    def figures(self) -> dict[str, Any]:
        """The figures both bench kinds print."""
        pods = self.attempted
        return {
            "placed": self.placed,
            "seconds": self.seconds,
            "pods_per_s": pods / self.seconds if self.seconds else float("inf"),
            "batch_p50_ms": self.percentile_ms(50),
            "batch_p99_ms": self.percentile_ms(99),
            "rust_seconds": self.rust_s,
            "python_seconds": self.python_s,
            "rust_share": self.rust_s / self.seconds if self.seconds else 0.0,
            "python_share": self.python_s / self.seconds if self.seconds else 0.0,
            "peak_rss_mib": _peak_rss_mib(),
        }


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _as_run_starts() -> None:
    """What ``ksched run`` does once its node table is built, before it schedules (see
    ``loop.run``): the objects alive now (there the informers' stores and the node table,
    here the nodes, the pods and the node table) are frozen out of the cyclic collector."""
    gc.freeze()


def _place_in_batches(
    engine: Engine,
    snapshot: Snapshot,
    pods: list[Obj],
    batch_size: int,
    matrix: np.ndarray[Any, np.dtype[np.float64]] | None,
    metrics: tuple[()] | None,
    progress: bool,
) -> _Run:
    """Schedule ``pods`` batch by batch, each batch seeing the earlier ones' placements
    (as in ``ksched run``), timing every batch."""
    placed, latencies, rust_s, python_s = 0, [], 0.0, 0.0
    started = time.perf_counter()
    for lo in range(0, len(pods), batch_size):
        t0 = time.perf_counter()
        result = engine.schedule(snapshot, pods[lo : lo + batch_size], matrix, metrics=metrics)
        placed += sum(1 for p in result.placements if p.node is not None)
        snapshot = commit_placements(snapshot, result.placements)
        latencies.append(time.perf_counter() - t0)
        rust_s += result.rust_seconds
        python_s += result.python_seconds
        if progress:
            _progress(min(lo + batch_size, len(pods)), len(pods), started)
    return _Run(snapshot, placed, time.perf_counter() - started, rust_s, python_s, latencies, len(pods))


@dataclass
class RunFigures:
    """The figures both bench kinds print, from :meth:`_Run.figures`."""

    placed: int
    seconds: float
    pods_per_s: float
    batch_p50_ms: float
    batch_p99_ms: float
    rust_seconds: float
    python_seconds: float
    rust_share: float
    python_share: float
    peak_rss_mib: float

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(kw_only=True)
class BenchFigures(RunFigures):
    nodes: int
    pods: int
    existing: int
    reference_speedup: float | None
    reference_workload: str


def _progress(done: int, total: int, started: float) -> None:
    if time.perf_counter() - started < PROGRESS_AFTER_S:
        return
    width = 30
    filled = int(width * done / max(total, 1))
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} pods")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def reference_speedup(seed: int) -> float:
    """Speed-up of the engine over the pure-Python reference on a small workload.

    Both sides are timed from the same objects to the same verdicts: parsing the
    nodes (the reference's node table, the engine's ``build_snapshot``), reading
    the metric values, parsing and placing the pods."""
    from ksched.engine import reference

    rng = random.Random(seed)
    nodes = synthetic_nodes(REFERENCE_NODES, rng)
    pending = synthetic_pending(REFERENCE_PODS, rng)
    config = Config(metrics=BENCH_METRICS)
    util = synthetic_cpu_utilization(len(nodes), rng)
    values = {
        n["metadata"]["name"]: {
            "cpu_utilization": float(util[i]),
            "price": float(n["metadata"]["annotations"]["ksched.io/price"]),
        }
        for i, n in enumerate(nodes)
    }
    started = time.perf_counter()
    reference.schedule(nodes, [], pending, config, values, seed)
    ref_s = time.perf_counter() - started
    engine = Engine(config, seed=seed)
    started = time.perf_counter()
    snapshot = build_snapshot(nodes, [])
    matrix = np.array([[values[n]["cpu_utilization"], values[n]["price"]] for n in snapshot.node_names])
    engine.schedule(snapshot, pending, matrix)
    return ref_s / (time.perf_counter() - started)


def run_bench(
    nodes: int, pods: int, existing: int, seed: int, batch_size: int = 512, with_reference: bool = True
) -> BenchFigures:
    rng = random.Random(seed)
    node_objs = synthetic_nodes(nodes, rng)
    existing_objs = synthetic_existing(existing, node_objs, rng)
    pending = synthetic_pending(pods, rng)
    config = Config(metrics=BENCH_METRICS)
    engine = Engine(config, seed=seed)
    snapshot = build_snapshot(node_objs, existing_objs)
    util = synthetic_cpu_utilization(nodes, rng)
    price = np.array([float(n["metadata"]["annotations"]["ksched.io/price"]) for n in node_objs])
    matrix = np.stack([util, price], axis=1)
    _as_run_starts()
    run = _place_in_batches(engine, snapshot, pending, batch_size, matrix, None, progress=True)
    return BenchFigures(
        nodes=nodes,
        pods=pods,
        existing=existing,
        **run.figures(),
        reference_speedup=reference_speedup(seed) if with_reference else None,
        reference_workload=f"{REFERENCE_NODES} nodes x {REFERENCE_PODS} pods",
    )


# -- pod-level workloads, shaped like kube-scheduler's scheduler_perf ----------
#
# Each mirrors a scheduler_perf test case at 5,000 nodes (nodes of 4 cpu,
# 32Gi, 110 pods; pods of 100m / 500Mi): ``initPods`` are placed first
# (not timed), then ``measurePods`` are timed. The thresholds are the ones
# the ksched issue quotes for kube-scheduler at this size.
POD_LEVEL_WORKLOADS = {
    # SchedulingPodAntiAffinity/5000Nodes_2000Pods
    "anti-affinity": {"init": 1000, "measure": 2000, "threshold": 60.0},
    # SchedulingPreferredPodAffinity/5000Nodes_5000Pods
    "preferred-affinity": {"init": 5000, "measure": 5000, "threshold": 90.0},
    # TopologySpreading/5000Nodes_5000Pods
    "spread": {"init": 5000, "measure": 5000, "threshold": 460.0},
    # PreferredTopologySpreading/5000Nodes_5000Pods: the same pods with ScheduleAnyway,
    # scored rather than filtered, as a ReplicaSet's pods are by default spreading. The
    # issue quotes no threshold; this is the one in v1.36's performance-config.yaml.
    "preferred-spread": {"init": 5000, "measure": 5000, "threshold": 125.0},
}
PREEMPTION = "preemption"
WORKLOADS = ("mixed", *POD_LEVEL_WORKLOADS, PREEMPTION)
PERF_ZONES = ("moon-1", "moon-2", "moon-3")


def perf_nodes(n: int) -> list[Obj]:
    return [
        {
            "kind": "Node",
            "metadata": {
                "name": f"scheduler-perf-{i:05d}",
                "labels": {
                    "kubernetes.io/hostname": f"scheduler-perf-{i:05d}",
                    "topology.kubernetes.io/zone": PERF_ZONES[i % len(PERF_ZONES)],
                },
            },
            "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"}},
        }
        for i in range(n)
    ]


def perf_pod(workload: str, name: str, namespace: str, measured: bool) -> Obj:
    pod = _pod(name, "100m", "500Mi")
    pod["metadata"]["namespace"] = namespace
    term = {"topologyKey": "kubernetes.io/hostname", "namespaces": ["sched-1", "sched-0"]}
    if workload == "anti-affinity":
        pod["metadata"]["labels"] = {"color": "green"}
        pod["spec"]["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"color": "green"}}, **term}
                ]
            }
        }
    elif workload == "preferred-affinity":
        pod["metadata"]["labels"] = {"color": "red"}
        pod["spec"]["affinity"] = {
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 1,
                        "podAffinityTerm": {"labelSelector": {"matchLabels": {"color": "red"}}, **term},
                    }
                ]
            }
        }
    elif workload in ("spread", "preferred-spread") and measured:
        pod["metadata"]["labels"] = {"color": "blue"}
        pod["spec"]["topologySpreadConstraints"] = [
            {
                "maxSkew": 5,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule" if workload == "spread" else "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"color": "blue"}},
            }
        ]
    return pod


@dataclass(kw_only=True)
class PodLevelFigures(RunFigures):
    workload: str
    nodes: int
    init_pods: int
    pods: int
    # scheduler_perf's threshold for kube-scheduler at this size (None: it has none).
    threshold: float | None


def run_pod_level_bench(
    workload: str, nodes: int, seed: int, batch_size: int = 512, scale: float = 1.0
) -> PodLevelFigures:
    """A scheduler_perf-shaped workload: place the init pods, then time the measured ones."""
    spec = POD_LEVEL_WORKLOADS[workload]
    init, measure = int(spec["init"] * scale), int(spec["measure"] * scale)
    engine = Engine(Config(), seed=seed)
    snapshot = build_snapshot(perf_nodes(nodes), [])
    init_pods = [perf_pod(workload, f"init-{i:06d}", "sched-0", False) for i in range(init)]
    snapshot = _place_in_batches(engine, snapshot, init_pods, batch_size, None, (), progress=False).snapshot
    pods = [perf_pod(workload, f"pod-{i:06d}", "sched-1", True) for i in range(measure)]
    _as_run_starts()
    run = _place_in_batches(engine, snapshot, pods, batch_size, None, (), progress=True)
    return PodLevelFigures(
        workload=workload,
        nodes=nodes,
        init_pods=init,
        pods=measure,
        **run.figures(),
        threshold=float(spec["threshold"]),
    )


# -- preemption, shaped like scheduler_perf's PreemptionBasic/5000Nodes ---------
#
# 4 low-priority pods of 900m / 500Mi on every node (20,000 at 5,000 nodes,
# bound from the start), then 5,000 pods of priority 10 and 3 cpu, timed: each
# fits nowhere, preempts (a dry run on the sampled candidate nodes), its
# victims go as their deletion would, and the next batch places it on its
# nominated node. scheduler_perf sets no threshold for this size (its 5000Nodes
# case is disabled upstream).
PREEMPTION_INIT_PER_NODE = 4
PREEMPTION_MEASURE_PER_NODE = 1.0


def preemption_pod(name: str, namespace: str, high: bool) -> Obj:
    """scheduler_perf's pod-low-priority.yaml / pod-high-priority.yaml."""
    pod = _pod(name, "3" if high else "900m", "500Mi")
    pod["metadata"]["namespace"] = namespace
    pod["spec"]["priority"] = 10 if high else 0
    return pod


def _evict(snapshot: Snapshot, keys: Sequence[str]) -> None:
    """The victims' deletion as the watch would report it: no longer counted on their nodes."""
    table = snapshot.pods
    for key in keys:
        row = table.rows.get(key)
        if row is None:
            continue
        remove_usage(snapshot, int(table.node[row]), table.evictable[row].requests)
        table.remove(key)


def run_preemption_bench(nodes: int, seed: int, batch_size: int = 512, scale: float = 1.0) -> PodLevelFigures:
    """PreemptionBasic: every measured pod preempts, then lands where it was nominated."""
    node_objs = perf_nodes(nodes)
    init = [
        {
            **preemption_pod(f"low-{i:06d}", "sched-0", high=False),
            "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"},
        }
        for i in range(nodes * PREEMPTION_INIT_PER_NODE)
    ]
    for i, pod in enumerate(init):
        pod["spec"]["nodeName"] = node_objs[i // PREEMPTION_INIT_PER_NODE]["metadata"]["name"]
    snapshot = build_snapshot(node_objs, init)
    engine = Engine(Config(), seed=seed)
    measure = int(nodes * PREEMPTION_MEASURE_PER_NODE * scale)
    pods = [preemption_pod(f"pod-{i:06d}", "sched-1", high=True) for i in range(measure)]
    placed, latencies, rust_s, python_s = 0, [], 0.0, 0.0
    _as_run_starts()
    started = time.perf_counter()
    waiting: list[Obj] = []
    for lo in range(0, len(pods) + batch_size, batch_size):
        # Pods nominated by the previous batch (their victims gone) go first, as the queue orders them.
        batch = waiting + pods[lo : lo + batch_size]
        if not batch:
            break
        t0 = time.perf_counter()
        result = engine.schedule(snapshot, batch, None, metrics=())
        by_key = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in batch}
        waiting = []
        for placement in result.placements:
            if placement.nominated_node is not None:
                _evict(snapshot, placement.victims)
                pod = by_key[placement.pod]
                waiting.append({**pod, "status": {"nominatedNodeName": placement.nominated_node}})
        placed += sum(1 for p in result.placements if p.node is not None)
        snapshot = commit_placements(snapshot, result.placements)
        latencies.append(time.perf_counter() - t0)
        rust_s += result.rust_seconds
        python_s += result.python_seconds
        _progress(min(lo + batch_size, len(pods)), len(pods), started)
    run = _Run(snapshot, placed, time.perf_counter() - started, rust_s, python_s, latencies, measure)
    return PodLevelFigures(
        workload=PREEMPTION, nodes=nodes, init_pods=len(init), pods=measure, **run.figures(), threshold=None
    )
