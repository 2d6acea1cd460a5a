"""``ksched bench --workload saturated-herd``: a herd's batch onto nodes that all read over a
``leastLoaded`` metric's threshold.

In-process, no cluster: the shipped ``examples/load-aware.yaml``'s metric (``onSaturation:
leastLoaded``) with a pod counted at its request (nothing is learned in one batch), nodes of 2 to 16 cores each reading 0.81-0.99 of the metric, and one batch of
identical replicas (500m each) that no node can take under the line. Each replica goes to the
node that reads least with it at its turn (:mod:`ksched.engine.saturation`), and the batch runs
again each time a threshold is relaxed: the figures are how many engine runs the batch took,
its time in all and inside Rust, and how many of the replicas placed over the line went to a
node that read within a hundredth of the least with them at their turn (the relaxed
threshold's band), checked against placing them one by one.
``--mixed-requests``: requests of 250m, 500m and 1 core in turn, on nodes reading from 0.1 below
the line, so that some replicas fit under it where others do not; where the scores send those
is not the reruns' to predict, and each move of theirs costs a rerun. Prints figures; never
asserts timings.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from typing import Any

import yaml

from ksched import _core
from ksched.bench.engine import _pod as engine_pod
from ksched.config import parse_config
from ksched.config.examples import example_path
from ksched.engine import Engine
from ksched.engine.saturation import banded
from ksched.engine.simulation import metric_matrix
from ksched.engine.snapshot import build_snapshot
from ksched.errors import KschedError
from ksched.objects import Obj

CONFIG = "load-aware.yaml"
CORES = (2, 4, 8, 16)
REQUESTS_M = (250, 500, 1000)


@dataclass
class SaturationFigures:
    nodes: int
    pods: int
    mixed: bool
    # Engine runs over the batch (the first, and each rerun after a threshold was relaxed).
    runs: int
    seconds: float
    rust_seconds: float
    placed: int
    # Replicas placed over the line, and of them those placed on a node that read within the
    # band of the least (:data:`ksched.engine.saturation.BAND`) with them at their turn.
    saturated: int
    least_loaded: int

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _node(i: int, cores: int) -> Obj:
    name = f"node-{i:05d}"
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": str(cores), "memory": f"{4 * cores}Gi", "pods": "110"}},
    }


def run_saturation_bench(nodes: int, pods: int, seed: int, mixed: bool = False) -> SaturationFigures:
    """Place one batch of ``pods`` replicas on ``nodes`` nodes that all read over the line."""
    doc = yaml.safe_load(example_path(CONFIG).read_text())
    for m in doc["metrics"]:
        m["estimate"] = {"resource": m["estimate"]["resource"]}
    config = parse_config(doc)
    metric = next(m for m in config.metrics if m.on_saturation == "leastLoaded")
    if metric.above is None:
        raise KschedError(f"{CONFIG}: {metric.name} has no threshold above which nodes saturate")
    rng = random.Random(seed)
    cores = [CORES[i % len(CORES)] for i in range(nodes)]
    node_objs = [_node(i, c) for i, c in enumerate(cores)]
    line = float(metric.above)
    low = line - 0.1 if mixed else line + 0.01
    reading = {n["metadata"]["name"]: low + rng.random() * (0.99 - low) for n in node_objs}
    snapshot = build_snapshot(node_objs, [], config.steering.own_marks)
    values = metric_matrix(snapshot, config.metrics, {n: {metric.name: v} for n, v in reading.items()})
    requests = [REQUESTS_M[j % len(REQUESTS_M)] if mixed else 500 for j in range(pods)]
    batch = [engine_pod(f"herd-{j:05d}", f"{m}m", "256Mi") for j, m in enumerate(requests)]
    runs = 0
    schedule = _core.schedule

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal runs
        runs += 1
        return schedule(*args, **kwargs)

    engine = Engine(config, seed=seed)
    _core.schedule = counted
    try:
        started = time.perf_counter()
        result = engine.schedule(snapshot, batch, values, metrics=config.metrics, deadline_s=None)
        seconds = time.perf_counter() - started
    finally:
        _core.schedule = schedule
    # One by one: each replica placed counted on its node (its request over the node's cores);
    # one placed over the line checked against the node that read least with it.
    size = {n["metadata"]["name"]: c for n, c in zip(node_objs, cores, strict=True)}
    placements = {p.pod: p for p in result.placements}
    saturated = least = 0
    for pod, m in zip(batch, requests, strict=True):
        placement = placements.get(f"bench/{pod['metadata']['name']}")
        node = placement.node if placement is not None else None
        if node is None:
            continue
        if placement is not None and placement.saturation:
            saturated += 1
            want = min(reading[n] + m / 1000 / size[n] for n in reading)
            least += reading[node] + m / 1000 / size[node] <= banded(want, "above")
        reading[node] += m / 1000 / size[node]
    placed = sum(1 for p in result.placements if p.node is not None)
    return SaturationFigures(nodes, pods, mixed, runs, seconds, result.rust_seconds, placed, saturated, least)


def describe(f: SaturationFigures) -> str:
    shape = "250m, 500m and 1 core in turn" if f.mixed else "500m each"
    nodes = "from 0.1 below the line" if f.mixed else "all over the line"
    return (
        f"ksched bench --workload saturated-herd: {f.pods} replicas ({shape}) onto {f.nodes} nodes "
        f"{nodes} ({CONFIG})\n"
        f"  engine runs     {f.runs}\n"
        f"  batch           {f.seconds * 1000:.1f} ms ({f.rust_seconds * 1000:.1f} ms in Rust)\n"
        f"  placed          {f.placed}; over the line {f.saturated}, of them {f.least_loaded} on a node "
        "within a hundredth of the least loaded at their turn"
    )
