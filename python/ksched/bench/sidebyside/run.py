"""The whole run: the control plane, every scheduler on every workload and round, the
results written under ``--out`` (:func:`main`, the entry)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ksched.bench.pods import CREATE_WORKERS
from ksched.bench.sidebyside.options import (
    BENCH_NODE_LEASE_S,
    KSCHED,
    KUBE_SCHEDULER,
    KUBE_SCHEDULER_QPS,
    NODE_LEASES,
    NULL,
    WORKLOAD_TITLES,
    WORKLOADS,
    Options,
    Phase,
)
from ksched.bench.sidebyside.phase import run_phase
from ksched.bench.sidebyside.report import chart, checkout, phase_line, pyplot, render_summary, render_table
from ksched.bench.sidebyside.schedulers import Scheduler
from ksched.bench.sidebyside.workloads import exporter
from ksched.cluster import local
from ksched.cluster.build import Pins, ensure_built
from ksched.errors import KschedError
from ksched.loop.client import Kube, load_configuration


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


def side_by_side(opts: Options) -> dict[str, Any]:
    """Run every scheduler on every workload; returns the JSON document (also written under ``opts.out``)."""
    plot = pyplot()  # fail before the long run when matplotlib is missing
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
            label: Scheduler(label, state, workdir, opts.kscheds.get(label)) for label in opts.schedulers
        }
        # Workload by workload, the schedulers one after the other: the control plane's cost per
        # pod grows through a run (etcd and the event store fill up), so the schedulers compared on
        # a workload run close together rather than a whole scheduler's round apart. With several
        # rounds every other one runs them in reverse order, so none is always first or last.
        for workload in opts.workloads:
            for round_ in range(opts.rounds):
                order = list(scheds.items())
                for label, sched in order if round_ % 2 == 0 else reversed(order):
                    title = WORKLOAD_TITLES[workload] + (f" (round {round_ + 1})" if opts.rounds > 1 else "")
                    print(f"== {label}: {title}", flush=True)
                    try:
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
    (opts.out / "table.md").write_text(render_table(doc) + "\n\n" + render_summary(doc) + "\n")
    chart(plot, phases, opts, opts.out / "bound-over-time.png")
    return doc


def parse_kscheds(values: list[str]) -> dict[str, list[str]]:
    """``--ksched LABEL=COMMAND`` values: extra ksched builds to run beside this checkout's."""
    out: dict[str, list[str]] = {}
    for v in values:
        label, sep, cmd = v.partition("=")
        if not sep or not label or not cmd.strip():
            raise KschedError(f"--ksched {v!r}: give LABEL=COMMAND, e.g. before=/opt/old/.venv/bin/ksched")
        if label in (NULL, KUBE_SCHEDULER, KSCHED):
            raise KschedError(f"--ksched {v!r}: the label {label!r} is taken; choose another")
        out[label] = shlex.split(cmd)
    return out


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
) -> int:
    kscheds = {KSCHED: [sys.executable, "-m", "ksched.commands.cli"], **parse_kscheds(extra)}
    labels = [*schedulers, *(k for k in kscheds if k != KSCHED)]
    for s in schedulers:
        if s not in (NULL, KUBE_SCHEDULER, KSCHED):
            raise KschedError(f"unknown scheduler {s!r}: choose from {NULL}, {KUBE_SCHEDULER}, {KSCHED}")
    unknown = set(workloads) - set(WORKLOADS)
    if unknown or not workloads:
        raise KschedError(
            f"unknown workload(s) {', '.join(sorted(unknown)) or '(none given)'}: choose from {', '.join(WORKLOADS)}"
        )
    if nodes < 1 or pods < 1 or rate <= 0 or steady_pods < 0 or rounds < 1 or node_lease_s < 1:
        raise KschedError(
            "--nodes, --pods, --rounds and --node-lease-seconds must be at least 1, --rate above 0, "
            "--steady-pods at least 0"
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
    )
    doc = side_by_side(opts)
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        print(render_table(doc))
        print()
        print(render_summary(doc))
        print(
            f"\nwrote {opts.out / 'results.json'}, {opts.out / 'table.md'}, {opts.out / 'bound-over-time.png'}"
        )
    bad = [p for p in doc["phases"] if p["error"] or p["bound"] < p["pods"]]
    return 1 if bad else 0
