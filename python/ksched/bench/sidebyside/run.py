"""The whole run: the control plane, every scheduler on every workload and round, the
results written under ``--out`` (:func:`main`, the entry)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import resource
import shlex
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ksched.bench.charts import pyplot
from ksched.bench.pods import CREATE_WORKERS, KSCHED_COMMAND, parse_kscheds, process_usage
from ksched.bench.sidebyside import fill as filling
from ksched.bench.sidebyside.curve import fill_phase
from ksched.bench.sidebyside.existing import ExistingRun, headroom
from ksched.bench.sidebyside.existing_report import render_existing
from ksched.bench.sidebyside.hog import cpu_hog
from ksched.bench.sidebyside.options import (
    BENCH_NODE_LEASE_S,
    KSCHED,
    KUBE_SCHEDULER,
    KUBE_SCHEDULER_QPS,
    NODE_LEASES,
    NULL,
    WORKLOAD_TITLES,
    WORKLOADS,
    ExistingFigures,
    ExistingOptions,
    Options,
    Phase,
)
from ksched.bench.sidebyside.phase import run_phase
from ksched.bench.sidebyside.report import (
    chart,
    checkout,
    phase_line,
    render_fill_curve,
    render_summary,
    render_table,
)
from ksched.bench.sidebyside.schedulers import Scheduler
from ksched.bench.sidebyside.workloads import exporter
from ksched.cluster import local
from ksched.cluster.build import Pins, ensure_built
from ksched.errors import KschedError
from ksched.loop.client import Kube, load_configuration

# The chart of bound pods over time, under --out (where matplotlib is installed).
CHART = "bound-over-time.png"


def _machine() -> str:
    cpus = os.cpu_count() or 0
    mem = 0.0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) / 1024 / 1024
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{cpus} cores ({model or platform.machine()}), {mem:.0f} GiB, shared with the API server"


def node_lease_seconds(kube: Kube, within_s: float = 60.0) -> int | None:
    """The duration of the node Leases KWOK keeps (one read), once one exists."""
    deadline = time.monotonic() + within_s
    while True:
        r = kube.request("GET", NODE_LEASES, query={"limit": "1"})
        items = r.json().get("items") if r.ok else None
        if items:
            return int((items[0].get("spec") or {}).get("leaseDurationSeconds") or 0) or None
        if time.monotonic() > deadline:
            return None
        time.sleep(1.0)


def side_by_side(opts: Options, plot: Any | None) -> dict[str, Any]:
    """Run every scheduler on every workload; returns the JSON document (also written under
    ``opts.out``, with the chart where ``plot`` is :func:`ksched.bench.charts.pyplot`'s)."""
    opts.out.mkdir(parents=True, exist_ok=True)
    workdir = opts.out / "logs"
    workdir.mkdir(exist_ok=True)
    print(f"== building what is missing, then a local control plane with {opts.nodes} KWOK nodes", flush=True)
    ensure_built(Pins(), with_helm=False)
    node_names = [f"kwok-node-{i:05d}" for i in range(opts.nodes)]
    started = time.monotonic()
    phases: list[Phase] = []
    with contextlib.ExitStack() as stack:
        targets = stack.enter_context(exporter(node_names)) if "metrics" in opts.workloads else None
        state = local.up(
            nodes=opts.nodes, zones=opts.zones, prometheus_targets=targets, node_lease_s=opts.node_lease_s
        )
        stack.callback(lambda: print("== " + local.down(), flush=True))
        print(f"  up in {time.monotonic() - started:.0f} s: {state.apiserver}", flush=True)
        kube = Kube(load_configuration(state.kubeconfig, CREATE_WORKERS + 4))
        nodes = {n["metadata"]["name"]: n for n in kube.request("GET", "/api/v1/nodes").json()["items"]}
        lease_s = node_lease_seconds(kube)
        scheds = {
            label: Scheduler(label, state, workdir, opts.kscheds.get(label), opts.replicas.get(label, 1))
            for label in opts.schedulers
        }
        stack.enter_context(cpu_hog(opts.cpu_hog))
        # Workload by workload, the schedulers one after the other: the control plane's cost per
        # pod grows through a run (etcd and the event store fill up), so the schedulers compared on
        # a workload run close together rather than a whole scheduler's round apart. With several
        # rounds every other one runs them in reverse order, so none is always first or last.
        for workload in opts.workloads:
            for round_ in range(opts.rounds):
                order = list(scheds.items())
                for label, sched in order if round_ % 2 == 0 else reversed(order):
                    if workload == "fill" and label == NULL:
                        # Round-robin, it would over-commit the nodes it fills.
                        print(
                            f"== {label}: skips the fill workload (it binds with no regard to room)",
                            flush=True,
                        )
                        continue
                    title = WORKLOAD_TITLES[workload] + (f" (round {round_ + 1})" if opts.rounds > 1 else "")
                    print(f"== {label}: {title}", flush=True)
                    try:
                        if workload == "fill":
                            phase = fill_phase(kube, state, sched, opts, nodes, round_)
                        else:
                            phase = run_phase(kube, state, sched, workload, opts, nodes, round_)
                    except KschedError as err:
                        phase = Phase(label, workload, opts.pods, round_, error=str(err))
                        sched.stop()
                    print("  " + phase_line(phase), flush=True)
                    phases.append(phase)
    doc: dict[str, Any] = {
        "machine": _machine(),
        "nodes": opts.nodes,
        "pods": opts.pods,
        "steady_pods": opts.steady_pods,
        "steady_rate": opts.rate,
        "rounds": opts.rounds,
        "cpu_hog": opts.cpu_hog,
        # As KWOK wrote them (None if no node's Lease showed up within a minute).
        "node_lease_seconds": lease_s,
        "schedulers": opts.schedulers,
        "kube_scheduler": {"qps": KUBE_SCHEDULER_QPS, "percentageOfNodesToScore": "default (adaptive)"},
        "ksched_commands": {k: shlex.join(v) for k, v in opts.kscheds.items()},
        "checkout": checkout(),
        "seconds": round(time.monotonic() - started, 1),
        "phases": [asdict(p) for p in phases],
    }
    (opts.out / "results.json").write_text(json.dumps(doc, indent=2))
    curve = render_fill_curve(doc)
    (opts.out / "table.md").write_text(
        render_table(doc) + "\n\n" + render_summary(doc) + "\n" + (f"\n{curve}\n" if curve else "")
    )
    if plot is not None:
        chart(plot, phases, opts, opts.out / CHART)
    return doc


def main(
    nodes: int,
    pods: int,
    workloads: list[str],
    schedulers: list[str],
    extra: list[str],
    rate: float,
    steady_pods: int,
    out: str,
    stall_s: float,
    as_json: bool,
    rounds: int = 1,
    node_lease_s: int = BENCH_NODE_LEASE_S,
    cpu_hog: int = 0,
    replicas: list[int] | None = None,
) -> int:
    kscheds, labels, by_label = _schedulers(schedulers, extra, replicas)
    unknown = set(workloads) - set(WORKLOADS)
    if unknown or not workloads:
        raise KschedError(
            f"unknown workload(s) {', '.join(sorted(unknown)) or '(none given)'}: choose from {', '.join(WORKLOADS)}"
        )
    if nodes < 1 or pods < 1 or rate <= 0 or steady_pods < 0 or rounds < 1 or node_lease_s < 1 or cpu_hog < 0:
        raise KschedError(
            "--nodes, --pods, --rounds and --node-lease-seconds must be at least 1, --rate above 0, "
            "--steady-pods and --cpu-hog at least 0"
        )
    opts = Options(
        nodes,
        pods,
        workloads,
        labels,
        kscheds,
        rate,
        steady_pods,
        stall_s,
        Path(out),
        rounds=rounds,
        node_lease_s=node_lease_s,
        cpu_hog=cpu_hog,
        replicas=by_label,
    )
    # Before the run: a missing matplotlib is said now, and only the chart is skipped.
    plot = pyplot()
    doc = side_by_side(opts, plot)
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        print(render_table(doc))
        print()
        print(render_summary(doc))
        curve = render_fill_curve(doc)
        if curve:
            print("\n" + curve)
        written = ["results.json", "table.md", *([CHART] if plot is not None else [])]
        print("\nwrote " + ", ".join(str(opts.out / name) for name in written))
    # The fill workload leaves pending the pods that fit nowhere at its last steps; one that fit is bad.
    bad = [
        p
        for p in doc["phases"]
        if p["error"] or p.get("pending_that_fit") or (p["workload"] != "fill" and p["bound"] < p["pods"])
    ]
    return 1 if bad else 0


def _schedulers(
    schedulers: list[str], extra: list[str], replicas: list[int] | None = None
) -> tuple[dict[str, list[str]], list[str], dict[str, int]]:
    """The ksched commands by label, every scheduler's label in run order, and the sharded
    replicas of each ksched label: with ``replicas`` (say [1, 3]) each ksched runs once per
    count, as LABEL for 1 and LABEL-xN for N replicas."""
    kscheds = {KSCHED: list(KSCHED_COMMAND), **parse_kscheds(extra, (NULL, KUBE_SCHEDULER, KSCHED))}
    for s in schedulers:
        if s not in (NULL, KUBE_SCHEDULER, KSCHED):
            raise KschedError(f"unknown scheduler {s!r}: choose from {NULL}, {KUBE_SCHEDULER}, {KSCHED}")
    counts = replicas or [1]
    if any(n < 1 for n in counts) or len(set(counts)) != len(counts):
        raise KschedError(f"--replicas: distinct counts of at least 1, not {','.join(map(str, counts))}")
    labels: list[str] = []
    by_label: dict[str, int] = {}
    for label in [*schedulers, *(k for k in kscheds if k != KSCHED)]:
        if label not in kscheds:
            labels.append(label)
            continue
        for n in counts:
            name = label if n == 1 else f"{label}-x{n}"
            kscheds[name] = kscheds[label]
            by_label[name] = n
            labels.append(name)
    return kscheds, labels, by_label


# ---------------------------------------------------------------------------
# --existing-pods


def existing(opts: ExistingOptions) -> dict[str, Any]:
    """Fill the cluster, then run phases (a)-(e) for each scheduler; returns the JSON document
    (also written under ``opts.out`` with the table)."""
    opts.out.mkdir(parents=True, exist_ok=True)
    workdir = opts.out / "logs"
    workdir.mkdir(exist_ok=True)
    groups = filling.plan(opts.nodes, opts.zones, opts.existing_pods, headroom(opts), opts.seed)
    print(f"== building what is missing, then a local control plane with {opts.nodes} KWOK nodes", flush=True)
    ensure_built(Pins(), with_helm=False)
    started = time.monotonic()
    figures: list[ExistingFigures] = []
    with contextlib.ExitStack() as stack:
        state = local.up(nodes=opts.nodes, zones=opts.zones, node_lease_s=opts.node_lease_s)
        stack.callback(lambda: print("== " + local.down(), flush=True))
        print(f"  up in {time.monotonic() - started:.0f} s: {state.apiserver}", flush=True)
        kube = Kube(load_configuration(state.kubeconfig, CREATE_WORKERS + 4))
        print(f"== filling the cluster with {opts.existing_pods:,} bound pods", flush=True)
        filled = filling.fill(kube, groups)
        counts: dict[str, int] = {}
        for g in groups:
            counts[g.kind] = counts.get(g.kind, 0) + len(g.nodes)
        per_node: dict[int, int] = {}
        for g in groups:
            for n in g.nodes:
                per_node[n] = per_node.get(n, 0) + 1
        print(
            f"  {len(filled.uids):,} pods in {filled.seconds:.1f} s = {filled.pods_per_s:,.0f} pods/s "
            f"({', '.join(f'{k} {v:,}' for k, v in counts.items())}; at most {max(per_node.values())} on a node)",
            flush=True,
        )
        bench = ExistingRun(opts, state, kube, filled)
        stack.enter_context(cpu_hog(opts.cpu_hog))
        if opts.cpu_hog:
            print(f"== {opts.cpu_hog} CPU hog process(es) spinning", flush=True)
        for label in opts.schedulers:
            sched = Scheduler(label, state, workdir, opts.kscheds.get(label), opts.replicas.get(label, 1))
            print(f"== {label}", flush=True)
            try:
                figures.append(bench.run(sched))
            except KschedError as err:
                figures.append(ExistingFigures(label, error=str(err)))
                print(f"  error: {str(err).splitlines()[0]}", flush=True)
            finally:
                sched.stop()
        peaks: dict[str, float] = {}
        for name, pid in state.pids.items():
            with contextlib.suppress(OSError):
                peaks[name] = process_usage(pid)[1]
    peaks["bench (this process)"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    doc: dict[str, Any] = {
        "machine": _machine(),
        "nodes": opts.nodes,
        "existing_pods": opts.existing_pods,
        "fill": {
            "seconds": round(filled.seconds, 1),
            "pods_per_s": round(filled.pods_per_s, 1),
            "kinds": counts,
            "most_on_a_node": max(per_node.values()),
        },
        "drain_pods": opts.drain_pods,
        "churn_pods": opts.churn_pods,
        "churn_rate": opts.churn_rate,
        "steady_pods": opts.steady_pods,
        "rate": opts.rate,
        "relist_pods": opts.relist_pods,
        "cpu_hog": opts.cpu_hog,
        "node_lease_seconds": opts.node_lease_s,
        "schedulers": opts.schedulers,
        "ksched_commands": {k: shlex.join(v) for k, v in opts.kscheds.items()},
        "checkout": checkout(),
        "seconds": round(time.monotonic() - started, 1),
        # The control plane's processes' (the API server since its restart) and this process's.
        "peak_rss_mib": {k: round(v, 1) for k, v in peaks.items()},
        "figures": [asdict(f) for f in figures],
    }
    (opts.out / "results.json").write_text(json.dumps(doc, indent=2))
    (opts.out / "table.md").write_text(render_existing(doc) + "\n")
    return doc


def existing_main(
    nodes: int,
    existing_pods: int,
    schedulers: list[str],
    extra: list[str],
    drain_pods: int,
    churn_pods: int,
    churn_rate: float,
    steady_pods: int,
    rate: float,
    out: str,
    stall_s: float,
    as_json: bool,
    cpu_hog: int = 0,
    seed: int = 1,
    node_lease_s: int = BENCH_NODE_LEASE_S,
    replicas: list[int] | None = None,
) -> int:
    """``--existing-pods``: exit 1 when a scheduler failed a phase or the census found a pod
    lost, unbound or over a node's capacity."""
    kscheds, labels, by_label = _schedulers(schedulers, extra, replicas)
    if nodes < 1 or drain_pods < 1 or churn_pods < 0 or steady_pods < 1 or cpu_hog < 0:
        raise KschedError(
            "--nodes, --pods and --steady-pods must be at least 1, --churn-pods and --cpu-hog at least 0"
        )
    if churn_rate <= 0 or rate <= 0:
        raise KschedError("--churn-rate and --rate must be above 0")
    opts = ExistingOptions(
        nodes,
        existing_pods,
        labels,
        kscheds,
        drain_pods,
        churn_pods,
        churn_rate,
        steady_pods,
        rate,
        stall_s,
        Path(out),
        cpu_hog=cpu_hog,
        seed=seed,
        node_lease_s=node_lease_s,
        replicas=by_label,
    )
    doc = existing(opts)
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        print(render_existing(doc))
        print(f"\nwrote {opts.out / 'results.json'}, {opts.out / 'table.md'}")
    bad = [f for f in doc["figures"] if f["error"] or f["violations"]]
    return 1 if bad else 0
