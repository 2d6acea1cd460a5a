"""``ksched bench --quality``: placement quality under real load, side by side.

One local control plane with the load simulation on (:mod:`ksched.cluster.load`: KWOK gives
each pod the usage its profile says, Prometheus scrapes every node and records
``node:node_cpu_utilisation:ratio``). For each scenario (:mod:`.scenarios`) each scheduler in
turn places the same pods in a namespace of its own: kube-scheduler (requests only), ksched
with a load-aware configuration, ksched with no metric. The utilisation Prometheus recorded
from the first create to the end of the observation is judged by :mod:`.figures`. Between
runs the namespace is cleared and the harness waits until the rate window has forgotten it.
Never asserts a timing; a pod lost or a node over-committed is a violation, and exits 1.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ksched.bench.invariants import lost, overcommitted
from ksched.bench.pods import CREATE_WORKERS, clear_pods, create_pods, start_ksched_run
from ksched.bench.quality.figures import DEFAULT_THRESHOLD, QualityFigures, QualityResults, Series, judge
from ksched.bench.quality.scenarios import DEFAULT_SCHEDULER, SCENARIOS, scenario
from ksched.cluster import local
from ksched.cluster.load import LoadSimulation
from ksched.cluster.processes import terminate
from ksched.errors import KschedError
from ksched.loop.client import Kube, load_configuration
from ksched.objects import Obj

KUBE_SCHEDULER = "kube-scheduler"
KSCHED = "ksched"
KSCHED_NO_METRICS = "ksched-no-metrics"
SCHEDULERS = (KUBE_SCHEDULER, KSCHED, KSCHED_NO_METRICS)
UTILISATION = "node:node_cpu_utilisation:ratio"
# The shipped load-aware configuration, in a checkout (a wheel has no examples/: pass --ksched-config).
EXAMPLE_CONFIG = Path(__file__).resolve().parents[4] / "examples" / "load-aware.yaml"
SETTLE_TIMEOUT_S = 300.0
PODS_PER_NODE = 6


@dataclass
class QualityOptions:
    nodes: int = 1000
    # Default: six a node, 3 cores requested on the average 6-core node, so that what the
    # pods really use (about their requests on average, heavy-tailed) makes some nodes hot.
    pods: int | None = None
    scenarios: tuple[str, ...] = SCENARIOS
    schedulers: tuple[str, ...] = SCHEDULERS
    seed: int = 1
    rate: float = 50.0
    observe_s: float = 180.0
    scrape_interval_s: float = 15.0
    threshold: float = DEFAULT_THRESHOLD
    ksched_config: Path | None = None
    # More ksched runs, each under its label with its own configuration (say today's beside a
    # candidate's); they run after the named schedulers.
    configs: dict[str, Path] = field(default_factory=dict)
    out: Path | None = None

    @property
    def pod_count(self) -> int:
        return self.pods if self.pods is not None else PODS_PER_NODE * self.nodes


def _load_aware_config(path: Path, prometheus: str) -> Obj:
    if not path.exists():
        raise KschedError(f"no ksched configuration at {path}: pass --ksched-config")
    config: Obj = yaml.safe_load(path.read_text())
    config["prometheus"] = {**(config.get("prometheus") or {}), "url": prometheus}
    return config


def _utilisation(prometheus: str, start: float, end: float, step: float) -> Series:
    query = urllib.parse.urlencode({"query": UTILISATION, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{query}", timeout=30) as r:
        body = json.loads(r.read())
    if body.get("status") != "success":
        raise KschedError(f"Prometheus answered {body.get('error') or body}")
    times = [start + i * step for i in range(int((end - start) // step) + 1)]
    values: list[dict[str, float]] = [{} for _ in times]
    for result in body["data"]["result"]:
        node = result["metric"].get("node", "")
        for ts, v in result["values"]:
            i = round((float(ts) - start) / step)
            if 0 <= i < len(values) and math.isfinite(float(v)):
                values[i][node] = float(v)
    return Series(times, values, step)


def _create(kube: Kube, pods: list[Obj], rate: float | None) -> dict[str, str]:
    if rate is None:
        return create_pods(kube, pods)
    created: dict[str, str] = {}
    begin = time.monotonic()
    batch = max(1, min(CREATE_WORKERS, int(rate)))
    for i in range(0, len(pods), batch):
        delay = begin + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        created |= create_pods(kube, pods[i : i + batch])
    return created


def _settle(kube: Kube, namespace: str) -> tuple[list[Obj], float]:
    """Until every pod is bound or reported unschedulable; the pods, and when that was."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        pods = kube.request("GET", f"/api/v1/namespaces/{namespace}/pods").json()["items"]
        waiting = [p for p in pods if not p["spec"].get("nodeName") and not _reported(p)]
        if not waiting or time.monotonic() > deadline:
            return pods, time.time()
        time.sleep(0.5)


def _reported(pod: Obj) -> bool:
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _one(
    kube: Kube,
    state: local.ClusterState,
    opts: QualityOptions,
    name: str,
    label: str,
    workdir: Path,
    results: QualityResults,
    log: Callable[[str], None],
) -> None:
    prometheus = f"http://127.0.0.1:{state.ports['prometheus']}"
    namespace = f"q-{name}-{label}"
    asks = DEFAULT_SCHEDULER if label == KUBE_SCHEDULER else KSCHED
    s = scenario(name, opts.pod_count, namespace, asks, opts.seed, opts.rate)
    proc = None
    if label != KUBE_SCHEDULER:
        config: Obj = {"apiVersion": "ksched.io/v1alpha1", "kind": "KschedConfiguration"}
        if label == KSCHED:
            config = _load_aware_config(opts.ksched_config or EXAMPLE_CONFIG, prometheus)
        elif label in opts.configs:
            config = _load_aware_config(opts.configs[label], prometheus)
        path = workdir / f"{label}.yaml"
        path.write_text(yaml.safe_dump(config))
        proc, _ = start_ksched_run(state.kubeconfig, workdir / f"{label}-{name}.log", path)
    try:
        r = kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
        if not r.ok:
            raise KschedError(f"creating namespace {namespace}: HTTP {r.status}: {r.data[:200]!r}")
        start = time.time()
        created = _create(kube, s.pods, s.rate)
        pods, settled = _settle(kube, namespace)
        figures = QualityFigures(label, name, len(s.pods))
        bound = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}
        figures.pending = len(pods) - len(bound)
        figures.pods_per_s = round(len(bound) / max(settled - start, 1e-9), 1)
        end = start + max(opts.observe_s, settled - start)
        if end > time.time():
            time.sleep(end - time.time())
        # The last recording-rule evaluation covering ``end`` lands up to one interval later.
        time.sleep(opts.scrape_interval_s)
        series = _utilisation(prometheus, start, end, opts.scrape_interval_s)
        nodes = kube.request("GET", "/api/v1/nodes").json()["items"]
        judge(figures, series, [n["metadata"]["name"] for n in nodes], bound, opts.threshold)
        everywhere = kube.request("GET", "/api/v1/pods").json()["items"]
        results.violations += [
            f"{name}/{label}: over-committed {o}" for o in overcommitted(nodes, everywhere)
        ]
        results.violations += [f"{name}/{label}: lost {p}" for p in lost(created, pods)]
        results.violations += [
            f"{name}/{label}: {p['metadata']['name']} neither bound nor reported unschedulable"
            for p in pods
            if not p["spec"].get("nodeName") and not _reported(p)
        ]
        results.figures.append(figures)
        log(
            f"{name} / {label}: {figures.hotspot_node_minutes} hot node-minutes, p95 {figures.p95_utilisation}, "
            f"cv {figures.cv}, {figures.pods_on_hot_nodes} pods on hot nodes, {figures.pending} pending, "
            f"{figures.pods_per_s} pods/s"
        )
    finally:
        if proc is not None:
            terminate(proc, 30)
        clear_pods(kube, namespace)
    # Until the rate window no longer holds this run's usage: the next scheduler starts cool.
    time.sleep(LoadSimulation(opts.scrape_interval_s).rate_window_s + 2 * opts.scrape_interval_s)


def run_quality(opts: QualityOptions, log: Callable[[str], None]) -> QualityResults:
    unknown = (set(opts.scenarios) - set(SCENARIOS)) | (set(opts.schedulers) - set(SCHEDULERS))
    unknown |= set(opts.configs) & set(SCHEDULERS)
    if unknown:
        raise KschedError(
            f"unknown: {', '.join(sorted(unknown))} (scenarios {SCENARIOS}, schedulers {SCHEDULERS})"
        )
    results = QualityResults({k: str(v) for k, v in vars(opts).items()})
    workdir = Path(tempfile.mkdtemp(prefix="ksched-quality-"))
    log(
        f"local control plane: {opts.nodes} KWOK nodes, load simulation (scrapes every {opts.scrape_interval_s:g} s)"
    )
    state = local.up(
        nodes=opts.nodes,
        zones=3,
        with_scheduler=KUBE_SCHEDULER in opts.schedulers,
        load_simulation=LoadSimulation(opts.scrape_interval_s, max(15.0, opts.scrape_interval_s)),
    )
    try:
        kube = Kube(load_configuration(state.kubeconfig, CREATE_WORKERS + 4))
        for name in opts.scenarios:
            for label in (*opts.schedulers, *opts.configs):
                _one(kube, state, opts, name, label, workdir, results, log)
    finally:
        log(local.down())
    if opts.out is not None:
        from ksched.bench.quality.report import write

        write(results, opts.out)
    return results
