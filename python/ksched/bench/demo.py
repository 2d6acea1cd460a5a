"""``ksched demo``: ksched's main job end to end on a local real control plane.

Brings up the local cluster (building it if needed) with fake nodes, starts
``ksched run`` as its own process, creates a sample workload, waits for every
pod to be bound or reported unschedulable, prints where the pods went, the
failures with their reasons and the throughput (first create to last bind),
and tears everything down. ``--compare`` runs the same workload through the
real kube-scheduler on the same cluster afterwards, for a side-by-side, and then
(unless ``load`` is off) what the metrics are for: a short round of the quality
benchmark's ``requests-lie`` and ``burst`` scenarios under the load simulation,
ksched's shipped load-aware configuration beside kube-scheduler, each on a pool of
nodes of its own at the same time (:mod:`ksched.bench.quality.pooled`), judged by
hot node-minutes and p95 utilisation.

Every phase creates its pods in a namespace of its own. Pod names repeat from
phase to phase, and KWOK deletes a terminating pod by namespace and name with no
UID precondition (a real kubelet sends one): when KWOK lags behind a cleared
phase, its delete of the old ``web-7`` removes the next phase's ``web-7`` if that
lives in the same namespace. Each phase also accounts for every pod it created,
by UID, and fails loudly if any disappears instead of printing a throughput.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ksched.bench.invariants import constraint_violations, lost, overcommitted
from ksched.bench.pods import (
    CREATE_WORKERS,
    SETTLE_TIMEOUT_S,
    LostPodsError,
    clear_pods,
    create_pods,
    process_usage,
    start_ksched_run,
)
from ksched.bench.quality.figures import QualityResults
from ksched.bench.quality.observe import forget_deleted_pods
from ksched.bench.quality.pooled import Round, pooled_round
from ksched.bench.quality.run import EXAMPLE_CONFIG, KSCHED
from ksched.bench.quality.scenarios import KUBE_SCHEDULER
from ksched.cluster import local
from ksched.cluster.load import LoadSimulation
from ksched.cluster.processes import terminate
from ksched.errors import KschedError
from ksched.loop.client import Kube, load_configuration
from ksched.loop.events import events_path
from ksched.objects import Obj


@dataclass
class Figures:
    scheduler: str
    pods: int
    bound: int
    seconds: float
    cpu_s: float
    peak_rss_mib: float
    # Every pod bound, and the two that cannot fit reported, before the settle timeout.
    settled: bool
    # What :mod:`ksched.bench.invariants` found wrong in the cluster at the phase's end.
    violations: list[str]

    @property
    def ok(self) -> bool:
        return self.settled and not self.violations

    @property
    def pods_per_s(self) -> float:
        return self.bound / self.seconds if self.seconds else 0.0


def workload(pods: int, namespace: str, scheduler: str, zones: list[str]) -> list[Obj]:
    """A mix like a real namespace: small web replicas, zone-pinned APIs, larger batch
    pods, plus two that cannot fit (a GPU request, an oversized pod)."""
    out = []

    def pod(name: str, cpu: str, memory: str, **spec: Any) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": name.rsplit("-", 1)[0]}},
            "spec": {
                "schedulerName": scheduler,
                "containers": [
                    {"name": "app", "image": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
                ],
                **spec,
            },
        }

    for i in range(pods - 2):
        kind = i % 10
        if kind < 6:
            out.append(pod(f"web-{i}", "100m", "128Mi"))
        elif kind < 9:
            zone = zones[i % len(zones)]
            out.append(pod(f"api-{i}", "250m", "512Mi", nodeSelector={"topology.kubernetes.io/zone": zone}))
        else:
            out.append(pod(f"batch-{i}", "1", "2Gi"))
    gpu = pod("train-0", "1", "1Gi")
    # Extended resources need limits equal to requests.
    gpu["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    gpu["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    out += [gpu, pod("huge-0", "200", "1Gi")]
    return out


def _failures(kube: Kube, namespace: str) -> dict[str, str]:
    events = kube.request("GET", events_path(namespace)).json()["items"]
    return {e["regarding"]["name"]: e["note"] for e in events if e.get("reason") == "FailedScheduling"}


def run_workload(
    kube: Kube, pods: list[Obj], namespace: str, scheduler: str, pid: int, backlog: bool = False
) -> tuple[Figures, list[Obj]]:
    """Create the pods and wait until all are bound or reported. Timed from the first
    create; with ``backlog`` the scheduler is paused (SIGSTOP) while the pods are
    created and timed from when it resumes, so the API server's creation rate is
    left out of the figure."""
    cpu_before, _ = process_usage(pid)
    if backlog:
        os.kill(pid, signal.SIGSTOP)
        try:
            created = create_pods(kube, pods)
        finally:
            os.kill(pid, signal.SIGCONT)
        started = time.monotonic()
    else:
        started = time.monotonic()
        created = create_pods(kube, pods)
    expected_failures = {"train-0", "huge-0"}
    last_bind = started
    bound_count = -1
    settled = False
    deadline = started + SETTLE_TIMEOUT_S
    while not settled and time.monotonic() < deadline:
        items = kube.request("GET", f"/api/v1/namespaces/{namespace}/pods").json()["items"]
        gone = lost(created, items)
        if gone:
            raise LostPodsError(
                f"{len(gone)} of the {len(created)} pods created in namespace {namespace} disappeared while "
                f"{scheduler} was scheduling them (another client deleted them): {', '.join(gone[:10])}"
                + (", ..." if len(gone) > 10 else "")
            )
        bound = sum(1 for p in items if p["spec"].get("nodeName"))
        if bound != bound_count:
            bound_count, last_bind = bound, time.monotonic()
        settled = bound >= len(pods) - len(expected_failures) and expected_failures <= set(
            _failures(kube, namespace)
        )
        if not settled:
            time.sleep(0.2)
    cpu_after, rss = process_usage(pid)
    nodes = kube.request("GET", "/api/v1/nodes").json()["items"]
    everywhere = kube.request("GET", "/api/v1/pods").json()["items"]
    violations = [f"over-committed {o}" for o in overcommitted(nodes, everywhere)]
    violations += [str(v) for v in constraint_violations(nodes, items)]
    figures = Figures(
        scheduler,
        len(pods),
        bound_count,
        last_bind - started,
        cpu_after - cpu_before,
        rss,
        settled,
        violations,
    )
    return figures, items


def summary(items: list[Obj], failures: dict[str, str], nodes: dict[str, Obj]) -> str:
    per_zone: collections.Counter[str] = collections.Counter()
    per_node: collections.Counter[str] = collections.Counter()
    for p in items:
        node = p["spec"].get("nodeName")
        if node:
            per_node[node] += 1
            per_zone[nodes[node]["metadata"]["labels"].get("topology.kubernetes.io/zone", "?")] += 1
    lines = [f"  pods per zone: {', '.join(f'{z} {n}' for z, n in sorted(per_zone.items()))}"]
    counts = sorted(per_node.values())
    if counts:
        lines.append(
            f"  pods per node: {len(per_node)} nodes used, min {counts[0]}, median {counts[len(counts) // 2]}, max {counts[-1]}"
        )
        lines.append("  busiest nodes: " + ", ".join(f"{n} ({c})" for n, c in per_node.most_common(3)))
    unbound = [p["metadata"]["name"] for p in items if not p["spec"].get("nodeName")]
    lines.append(f"  not placed: {len(unbound)}")
    for name in sorted(unbound):
        lines.append(f"    {name}: {failures.get(name, '(no FailedScheduling event yet)')}")
    return "\n".join(lines)


def _print_figures(f: Figures, timed: str = "first create to last bind") -> None:
    for v in f.violations:
        print(f"  INVARIANT VIOLATED: {v}")
    if not f.settled:
        print(
            f"  NOT SETTLED: {f.bound} of {f.pods} pods bound after {SETTLE_TIMEOUT_S:.0f} s "
            f"({f.pods - 2} should bind, 2 should be reported); no throughput for {f.scheduler}"
        )
        return
    print(
        f"  throughput: {f.bound} pods bound in {f.seconds:.2f} s = {f.pods_per_s:,.0f} pods/s "
        f"({timed}); {f.scheduler} used {f.cpu_s:.2f} CPU s, peak RSS {f.peak_rss_mib:.0f} MiB"
    )


class Phases:
    """The demo's phases, each in a namespace of its own (see the module's note on KWOK),
    clearing the previous phase's pods before the next starts so the nodes stay as empty
    for every scheduler."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.previous: str | None = None

    def run(
        self, pods: list[Obj], scheduler: str, pid: int, backlog: bool = False
    ) -> tuple[Figures, list[Obj]]:
        namespace = pods[0]["metadata"]["namespace"]
        self.clear()
        r = self.kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
        if not r.ok:
            raise KschedError(f"creating namespace {namespace}: HTTP {r.status}: {r.data[:200]!r}")
        self.previous = namespace
        return run_workload(self.kube, pods, namespace, scheduler, pid, backlog)

    def clear(self) -> None:
        if self.previous is not None:
            clear_pods(self.kube, self.previous)
            self.previous = None


# The load round: scenarios, nodes a pool, and how it is observed (a short form of
# ``ksched bench --quality``'s defaults).
LOAD_SCENARIOS = ("requests-lie", "burst")
LOAD_POOL_NODES = 40
LOAD_PODS_PER_NODE = 6
# Arrivals over a minute, so that ksched sees the first pods' real usage while the later ones
# arrive (a pod's own rate needs two scrapes; a node's, the rate window and a rule evaluation).
LOAD_RATE = 4.0
LOAD_OBSERVE_S = 75.0
LOAD_SCRAPE_S = 5.0
LOAD_THRESHOLD = 0.8


def load_round(kube: Kube, state: local.ClusterState, workdir: Path) -> QualityResults:
    """Both scenarios with ksched (load-aware) and kube-scheduler, all four at once."""
    results = QualityResults({})
    r = Round(
        entries=tuple((s, label) for s in LOAD_SCENARIOS for label in (KUBE_SCHEDULER, KSCHED)),
        pool_size=LOAD_POOL_NODES,
        pods=LOAD_POOL_NODES * LOAD_PODS_PER_NODE,
        seed=1,
        rate=LOAD_RATE,
        observe_s=LOAD_OBSERVE_S,
        scrape_interval_s=LOAD_SCRAPE_S,
        threshold=LOAD_THRESHOLD,
        configs={KSCHED: EXAMPLE_CONFIG},
    )
    prometheus = f"http://127.0.0.1:{state.ports['prometheus']}"
    pooled_round(kube, state.kubeconfig, prometheus, r, workdir, results, log=lambda line: None)
    return results


def _print_load(results: QualityResults) -> None:
    observed = max((f.bands[-1][0] for f in results.figures if f.bands), default=0.0)
    print(f"  judged over the {observed:.0f} s from the first create (the last arrivals shown twice over)")
    print(
        f"  {'scenario':<14}{'scheduler':<16}{'hot node-min':>13}{'p95 util':>10}{'max util':>10}{'pods on hot':>13}"
    )
    for f in results.figures:
        print(
            f"  {f.scenario:<14}{f.scheduler:<16}{f.hotspot_node_minutes:>13.1f}{f.p95_utilisation:>10.2f}"
            f"{f.max_utilisation:>10.2f}{f.pods_on_hot_nodes:>13}"
        )
    for v in results.violations:
        print(f"  INVARIANT VIOLATED: {v}")


def _hot(results: QualityResults, scenario: str, scheduler: str) -> float:
    return next(
        f.hotspot_node_minutes for f in results.figures if (f.scenario, f.scheduler) == (scenario, scheduler)
    )


def demo(nodes: int, pods: int, compare: bool, load: bool = False) -> int:
    print(f"== local control plane: {nodes} fake nodes (builds it first if needed)")
    t0 = time.monotonic()
    state = local.up(
        nodes=nodes,
        zones=3,
        with_scheduler=compare,
        # The demo's schedulers read Prometheus, not metrics-server: a minute's resolution keeps
        # metrics-server's scrapes of KWOK rare.
        load_simulation=LoadSimulation(LOAD_SCRAPE_S, 60.0) if load else None,
    )
    print(f"  up in {time.monotonic() - t0:.1f} s: {state.apiserver}")
    workdir = Path(tempfile.mkdtemp(prefix="ksched-demo-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        kube = Kube(load_configuration(state.kubeconfig, CREATE_WORKERS + 4))
        node_objs = {n["metadata"]["name"]: n for n in kube.request("GET", "/api/v1/nodes").json()["items"]}
        zones = sorted({n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in node_objs.values()})
        log = workdir / "ksched.log"
        proc, _ = start_ksched_run(state.kubeconfig, log)
        print(f"== ksched run (pid {proc.pid}, log {log}); creating {pods} pods in namespace demo")
        phases = Phases(kube)
        figures, items = phases.run(workload(pods, "demo", "ksched", zones), "ksched", proc.pid)
        print(summary(items, _failures(kube, "demo"), node_objs))
        _print_figures(figures)
        results = [figures]
        if compare:
            ns = "demo-kube-scheduler"
            print(f"== the same {pods} pods through kube-scheduler (namespace {ns})")
            upstream, items = phases.run(
                workload(pods, ns, "default-scheduler", zones), "kube-scheduler", state.pids["kube-scheduler"]
            )
            print(summary(items, _failures(kube, ns), node_objs))
            _print_figures(upstream)
            print("== backlog drain: pods created while the scheduler is paused, timed from its resumption")
            drains = []
            for name, scheduler, pid in (
                ("ksched", "ksched", proc.pid),
                ("kube-scheduler", "default-scheduler", state.pids["kube-scheduler"]),
            ):
                namespace = f"demo-drain-{name}"
                f, _ = phases.run(workload(pods, namespace, scheduler, zones), name, pid, backlog=True)
                _print_figures(f, "resume to last bind")
                drains.append(f)
            results += [upstream, *drains]
            quality = None
            if load:
                phases.clear()
                terminate(proc, 30)
                proc = None
                # KWOK would go on serving the cleared phases' pods' usage (forget_deleted_pods).
                forget_deleted_pods(f"http://127.0.0.1:{state.ports['prometheus']}", nodes, LOAD_SCRAPE_S)
                print(
                    f"== placement under real load: each pod uses 0.2-3x its request (requests-lie) or 1.2x "
                    f"(burst, all at once); KWOK serves the usage, Prometheus scrapes every {LOAD_SCRAPE_S:.0f} s; "
                    f"ksched ({EXAMPLE_CONFIG.name}) and kube-scheduler each on a pool of {LOAD_POOL_NODES} "
                    f"nodes, all at once (hot: above {LOAD_THRESHOLD:.0%} CPU)"
                )
                quality = load_round(kube, state, workdir)
                _print_load(quality)
            if all(r.ok for r in results) and (quality is None or not quality.violations):
                line = (
                    f"== ksched / kube-scheduler: {figures.pods_per_s / max(upstream.pods_per_s, 1e-9):.2f}x "
                    f"first create to last bind, "
                    f"{drains[0].pods_per_s / max(drains[1].pods_per_s, 1e-9):.2f}x backlog drain"
                )
                if quality is not None:
                    line += "; hot node-minutes " + ", ".join(
                        f"{_hot(quality, s, KSCHED):.1f} vs {_hot(quality, s, KUBE_SCHEDULER):.1f} ({s})"
                        for s in LOAD_SCENARIOS
                    )
                print(line)
            if quality is not None and quality.violations:
                return 1
        return 0 if all(r.ok for r in results) else 1
    finally:
        if proc is not None:
            terminate(proc, 30)
        print("== " + local.down())
