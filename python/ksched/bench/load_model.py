"""``ksched bench --workload load-model``: what the load model costs a scheduling cycle.

In-process, no cluster: the shipped ``examples/load-aware.yaml``'s learned estimate, the
live loop's accounting (:class:`ksched.loop.mirror.state.ClusterState`, whose
:class:`~ksched.loop.metrics.recent_pods.RecentPods` builds each cycle's values), on nodes of
8 cores. Pods come in workloads of three, a batch of binds a cycle (every half second), each
measured from the first pod sample after its bind (a scrape every ``SCRAPE_S``), at a usage
multiple of its workload's with noise, as a herd's scale-up or a steady arrival of Deployments
keeps a scheduler busy. Each cycle's build of the values (:meth:`RecentPods.add_to`, with the
pods' samples) is timed once the recent pods fill the horizon. Prints figures; never asserts
timings.
"""

from __future__ import annotations

import random
import time
import zlib
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ksched.bench.engine import _pod as engine_pod
from ksched.config import load_config
from ksched.config.examples import example_path
from ksched.engine.pods import pod_requests
from ksched.loop.mirror.slim import slim_node
from ksched.loop.mirror.state import ClusterState
from ksched.objects import Obj

CONFIG = "load-aware.yaml"
START = 1_800_000_000.0
CYCLE_S = 0.5
SCRAPE_S = 15.0
REPLICAS = 3
NOISE = 0.1


@dataclass
class LoadModelFigures:
    nodes: int
    binds_per_cycle: int
    cycles: int
    # When the timing began and ended: the recent pods held, and of them measured.
    recent_pods: int
    measured_pods: int
    workloads: int
    ms_mean: float
    ms_p50: float
    ms_p99: float

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


class _Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def _node(i: int) -> Obj:
    return {
        "kind": "Node",
        "metadata": {"name": f"node-{i:05d}", "labels": {"kubernetes.io/hostname": f"node-{i:05d}"}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


def _pod(k: int) -> Obj:
    workload = f"svc-{k // REPLICAS}"
    pod = engine_pod(f"{workload}-{k % REPLICAS}", "500m", "512Mi")
    pod["metadata"]["uid"] = f"uid-{k}"
    pod["metadata"]["ownerReferences"] = [
        {"kind": "ReplicaSet", "name": workload, "uid": f"rs-{workload}", "controller": True}
    ]
    return pod


def run_load_model_bench(nodes: int, binds_per_cycle: int, seed: int) -> LoadModelFigures:
    """Time each cycle's build of the values over ``nodes`` nodes, ``binds_per_cycle`` binds a
    cycle, once as many cycles have run as the horizon holds pods for, for as many again."""
    metric = next(m for m in load_config(example_path(CONFIG)).metrics if m.estimate is not None)
    clock = _Clock()
    state = ClusterState((metric,), clock)
    for i in range(nodes):
        state.on_node("ADDED", slim_node(_node(i)), None)
    state.sync()
    rng = random.Random(seed)
    multiples: list[float] = []
    bound: dict[str, float] = {}
    warm = max(1, int(state.recent.horizon_s / CYCLE_S))
    times: list[float] = []
    k = 0
    for cycle in range(2 * warm):
        clock.now += CYCLE_S
        for _ in range(binds_per_cycle):
            if k % REPLICAS == 0:
                multiples.append(rng.lognormvariate(-0.3, 0.8))
            pod = _pod(k)
            key = f"bench/{pod['metadata']['name']}"
            state.assume(key, f"uid-{k}", f"node-{rng.randrange(nodes):05d}", pod_requests(pod), (), pod=pod)
            bound[key] = clock.now
            k += 1
        state.sync()
        sampled_at = clock.now - clock.now % SCRAPE_S
        measured = _measured(state, bound, multiples, sampled_at)
        column, caution = np.zeros(nodes), np.zeros(nodes)
        snapshot = state.snapshot()
        started = time.perf_counter()
        state.recent.add_to(
            snapshot,
            metric,
            sampled_at,
            column,
            measured=measured,
            measured_at=sampled_at,
            caution=caution,
        )
        if cycle >= warm:
            times.append(time.perf_counter() - started)
    ms = np.array(times) * 1000.0
    return LoadModelFigures(
        nodes=nodes,
        binds_per_cycle=binds_per_cycle,
        cycles=len(times),
        recent_pods=len(state.recent),
        measured_pods=len(measured),
        workloads=len(multiples),
        ms_mean=round(float(ms.mean()), 2),
        ms_p50=round(float(np.percentile(ms, 50)), 2),
        ms_p99=round(float(np.percentile(ms, 99)), 2),
    )


def _measured(
    state: ClusterState, bound: dict[str, float], multiples: list[float], sampled_at: float
) -> dict[str, float]:
    """The pod sample at ``sampled_at``: each recent pod bound a scrape before it, at its
    workload's multiple of its 500m request, with noise of its own for that sample (the same
    sample read again reads the same)."""
    out = {}
    for key in state.recent.pods:
        if sampled_at - bound[key] >= SCRAPE_S:
            workload = int(key.split("-")[1])
            noise = zlib.crc32(f"{key}@{sampled_at}".encode()) / 0xFFFFFFFF
            out[key] = 500.0 * multiples[workload] * (1.0 + NOISE * (2.0 * noise - 1.0))
    return out


def describe(f: LoadModelFigures) -> str:
    return (
        f"ksched bench --workload load-model: {f.nodes} nodes, {f.binds_per_cycle} binds a cycle every "
        f"{CYCLE_S:g} s, pods measured a {SCRAPE_S:g} s scrape after their bind ({CONFIG})\n"
        f"  recent pods     {f.recent_pods} ({f.measured_pods} measured, {f.workloads} workloads of {REPLICAS})\n"
        f"  values a cycle  {f.ms_mean:.2f} ms mean, {f.ms_p50:.2f} ms p50, {f.ms_p99:.2f} ms p99 "
        f"over {f.cycles} cycles"
    )
