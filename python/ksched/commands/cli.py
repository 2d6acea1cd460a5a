"""The ``ksched`` command line.

Subcommands share one engine: ``run`` schedules a live cluster (with
``--shadow``, it only compares with the scheduler that binds), ``simulate``
schedules a cluster file offline, ``explain`` explains a pod of a cluster
file or of the live cluster, ``shadow report`` and ``status`` read a running
ksched, ``bench`` measures the engine in process, and ``cluster`` runs a
local real control plane for tests and demos.
Exit codes: 0 success, 1 some pod was not placed (simulate) or a command
failed, 2 bad input or configuration.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ksched import __version__
from ksched.errors import KschedError

if TYPE_CHECKING:
    from ksched.commands.bench import RunFigures

EXIT_OK = 0
EXIT_UNPLACED = 1
EXIT_BAD_INPUT = 2
EXIT_VIOLATED = 1  # bench --chaos: an invariant failed
# Where `ksched status` and `ksched shadow report` look for a running ksched: `run`'s default address.
DEFAULT_ADDRESS = "127.0.0.1:10259"


def _run(args: argparse.Namespace) -> int:
    from ksched.config import load_config
    from ksched.loop.run import run

    config = load_config(args.config)
    if args.no_leader_elect:
        config = dataclasses.replace(
            config, leader_election=dataclasses.replace(config.leader_election, leader_elect=False)
        )
    if args.shadow:
        config = dataclasses.replace(config, shadow=dataclasses.replace(config.shadow, enabled=True))
    return run(config, args.kubeconfig, args.address, args.identity)


def _shadow_report(args: argparse.Namespace) -> int:
    from ksched.commands.shadow import fetch, render_report, report_from_log

    if args.file:
        report, source = report_from_log(args.file, args.keep), args.file
    else:
        report, source = fetch(args.address, "/shadow"), args.address
    _print_document(args.output, report, lambda: render_report(report, source))
    return EXIT_OK


def _status(args: argparse.Namespace) -> int:
    from ksched.commands.shadow import fetch, render_status

    status = fetch(args.address, "/status")
    _print_document(args.output, status, lambda: render_status(status, args.address))
    return EXIT_OK


def _print_document(output: str, document: object, table: Callable[[], str]) -> None:
    """A running ksched's JSON document as ``-o json`` or ``-o table`` prints it."""
    print(json.dumps(document, indent=2) if output == "json" else table())


def _add_engine_options(p: argparse.ArgumentParser, metrics_help: str) -> None:
    """What ``simulate`` and ``explain`` schedule with: the configuration, metric values, seed, output."""
    p.add_argument("--config", help="KschedConfiguration file (default: one profile named ksched)")
    p.add_argument("--metrics", help=metrics_help)
    p.add_argument("--seed", type=int, default=0, help="tie-break seed (default 0)")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")


def _add_address(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--address",
        default=DEFAULT_ADDRESS,
        help=f"the running ksched's host:port (default {DEFAULT_ADDRESS})",
    )


def _demo(args: argparse.Namespace) -> int:
    from ksched.commands.demo import demo

    return demo(args.nodes, args.pods, args.compare)


def _annotate(args: argparse.Namespace) -> int:
    from ksched.commands.annotate import annotate

    rows = annotate(args.kubeconfig, args.key, args.assignments)
    width = max((len(n) for n, _ in rows), default=4)
    print(f"{'NODE':<{width}}  {args.key}")
    for node, value in rows:
        print(f"{node:<{width}}  {value}")
    return EXIT_OK


def _simulate(args: argparse.Namespace) -> int:
    from ksched.commands.simulate import load_cluster, load_offline_metrics, render_table, run_simulation
    from ksched.config import load_config

    config = load_config(args.config)
    cluster = load_cluster(args.cluster, {p.scheduler_name for p in config.profiles})
    results, _ = run_simulation(cluster, config, load_offline_metrics(args.metrics), args.seed)
    placements = [p.as_json() for r in results for p in r.placements]
    if args.output == "json":
        print(json.dumps({"placements": placements}, indent=2))
    else:
        print(render_table(placements))
        placed = sum(1 for p in placements if p["node"])
        print(
            f"\n{placed}/{len(placements)} pending pods placed on {len(cluster.nodes)} nodes ({len(cluster.existing)} existing pods)"
        )
    return EXIT_OK if all(p["node"] for p in placements) else EXIT_UNPLACED


def _is_cluster_file(arg: str) -> bool:
    """``explain``'s first argument is a cluster file unless it reads as NAMESPACE/POD."""
    return Path(arg).is_file() or arg.endswith((".yaml", ".yml", ".json")) or arg.count("/") != 1


def _explain(args: argparse.Namespace) -> int:
    from ksched.commands.simulate import (
        as_pending,
        explanation_json,
        load_cluster,
        load_offline_metrics,
        render_explanation,
        run_simulation,
        sort_objects,
    )
    from ksched.config import load_config

    config = load_config(args.config)
    names = {p.scheduler_name for p in config.profiles}
    targets = list(args.targets)
    offline = load_offline_metrics(args.metrics)
    if _is_cluster_file(targets[0]):
        source = targets.pop(0)
        cluster = load_cluster(source, names)
    else:
        from ksched.commands.live import connect, live_metrics, live_objects

        source = "the live cluster"
        cluster = sort_objects(live_objects(connect(args.kubeconfig)), names, source)
        config, values, degraded = live_metrics(config, cluster.nodes)
        for why in degraded:
            print(f"note: metric {why}: left out, as the running scheduler would", file=sys.stderr)
        for node, given in (offline or {}).items():
            values.setdefault(node, {}).update(given)
        offline = dict(values)
    if not targets:
        raise KschedError("name at least one pod as NAMESPACE/NAME")
    out = []
    status = EXIT_OK
    for pod in targets:
        if "/" not in pod:
            raise KschedError(f"{pod!r}: name pods as NAMESPACE/NAME")
        pod_cluster, note = as_pending(cluster, pod, config.profiles[0].scheduler_name)
        if note is not None:
            print(f"note: {note}", file=sys.stderr)
        results, _ = run_simulation(pod_cluster, config, offline, args.seed, explain=pod)
        ex = next((r.explanation for r in results if r.explanation is not None), None)
        if ex is None:
            malformed = next((p for r in results for p in r.placements if p.pod == pod), None)
            if malformed is not None:
                print(f"pod {pod}: {malformed.message}", file=sys.stderr)
                status = EXIT_UNPLACED
                continue
            raise KschedError(f"{pod}: no such pod in {source}")
        out.append(ex)
        if ex.placement.node is None:
            status = EXIT_UNPLACED
    if args.output == "json":
        print(json.dumps([explanation_json(e) for e in out], indent=2))
    else:
        print("\n\n".join(render_explanation(e) for e in out))
    return status


def _chaos(args: argparse.Namespace) -> int:
    from ksched.commands.chaos import render, run_chaos

    def progress(line: str) -> None:
        print(f"[chaos {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    f = run_chaos(
        2000 if args.nodes is None else args.nodes,
        args.minutes,
        10.0 if args.rate is None else args.rate,
        args.seed,
        progress,
    )
    if args.json:
        print(json.dumps(f.as_json(), indent=2))
    else:
        print(render(f))
    return EXIT_OK if f.ok() else EXIT_VIOLATED


def _bench(args: argparse.Namespace) -> int:
    from ksched.commands.bench import PREEMPTION, run_bench, run_pod_level_bench, run_preemption_bench

    if args.chaos:
        return _chaos(args)
    if args.fuzz:
        from ksched.commands.fuzz import run_fuzz

        report = run_fuzz(args.specs, args.seed, args.live)
        print(json.dumps(report.as_json(), indent=2) if args.json else report.render())
        return EXIT_UNPLACED if report.defect_count else EXIT_OK
    if args.nodes is None:
        args.nodes = 5000
    if args.cluster:
        from ksched.commands import sidebyside

        return sidebyside.main(
            nodes=args.nodes,
            pods=args.pods if args.pods is not None else args.nodes,
            workloads=[w.strip() for w in args.workloads.split(",") if w.strip()],
            schedulers=[s.strip() for s in args.schedulers.split(",") if s.strip()],
            extra=args.ksched,
            rate=args.rate if args.rate is not None else 50.0,
            steady_pods=args.steady_pods,
            out=args.out,
            stall_s=args.stall,
            as_json=args.json,
            rounds=args.rounds,
            node_lease_s=args.node_lease_seconds,
        )
    if args.pods is None:
        args.pods = 10000
    if args.workload != "mixed":
        if args.workload == PREEMPTION:
            w = run_preemption_bench(args.nodes, args.seed, args.batch_size, args.scale)
        else:
            w = run_pod_level_bench(args.workload, args.nodes, args.seed, args.batch_size, args.scale)
        if args.json:
            print(json.dumps(w.as_json(), indent=2))
            return EXIT_OK
        print(
            f"ksched bench --workload {w.workload}: {w.nodes} nodes, {w.init_pods} pods placed first, "
            f"{w.pods} timed, batch {args.batch_size}"
        )
        _print_run_figures(w, w.pods)
        if w.threshold is not None:
            print(f"  kube-scheduler  scheduler_perf threshold at this size: {w.threshold:g} pods/s")
        return EXIT_OK

    f = run_bench(
        args.nodes, args.pods, args.existing, args.seed, args.batch_size, with_reference=not args.no_reference
    )
    if args.json:
        print(json.dumps(f.as_json(), indent=2))
        return EXIT_OK
    print(
        f"ksched bench: {f.nodes} nodes, {f.pods} pending pods, {f.existing} existing pods, batch {args.batch_size}"
    )
    _print_run_figures(f, f.pods)
    if f.reference_speedup is not None:
        print(
            f"  vs reference    {f.reference_speedup:.0f}x faster than the pure-Python reference ({f.reference_workload})"
        )
    return EXIT_OK


def _print_run_figures(f: RunFigures, pods: int) -> None:
    print(f"  placed          {f.placed}/{pods}")
    print(f"  throughput      {f.pods_per_s:,.0f} pods/s ({f.seconds:.2f} s)")
    print(f"  batch latency   p50 {f.batch_p50_ms:.1f} ms, p99 {f.batch_p99_ms:.1f} ms")
    print(f"  Rust engine     {f.rust_seconds:.2f} s ({f.rust_share:.0%}): inside ksched._core.schedule")
    print(
        f"  Python          {f.python_seconds:.2f} s ({f.python_share:.0%}): parsing pods, compiling the engine's "
        "inputs, reading its results"
    )
    rest = max(0.0, 1.0 - f.rust_share - f.python_share)
    print(f"  node table      {rest:.0%}: committing each batch's placements in Python")
    print(f"  peak RSS        {f.peak_rss_mib:.0f} MiB")


def _cluster(args: argparse.Namespace) -> int:
    from ksched.cluster import local

    if args.cluster_command == "up":
        env = local.up(
            nodes=args.nodes,
            zones=args.zones,
            with_scheduler=args.with_scheduler,
            with_controllers=args.with_controllers,
            prometheus_targets=args.with_prometheus,
            scheduler_qps=args.scheduler_qps,
            percentage_of_nodes_to_score=args.percentage_of_nodes_to_score,
            node_lease_s=args.node_lease_seconds,
        )
        print(env.describe())
    elif args.cluster_command == "down":
        print(local.down())
    elif args.cluster_command == "env":
        print(local.env_line())
    return EXIT_OK


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ksched", description="A metrics-aware Kubernetes scheduler.")
    p.add_argument("--version", action="version", version=f"ksched {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log warnings and details to stderr")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser(
        "simulate",
        help="schedule the pending pods of a cluster file offline",
        description="Schedule the pending pods of CLUSTER (objects as `kubectl get -o yaml` prints them). "
        "Example: ksched simulate cluster.yaml -o json",
    )
    s.add_argument("cluster", help="YAML or JSON file of Nodes and Pods (kind: List or multi-document)")
    _add_engine_options(s, "YAML mapping node-name: {metric-name: number}")
    s.set_defaults(func=_simulate)

    e = sub.add_parser(
        "explain",
        help="show per node why a pod was placed where it was",
        description="Per node: the failing filter and reason, or each score plugin's raw, normalized "
        "and weighted score. With a cluster file first, offline; without, the live cluster through "
        "the kubeconfig and one read of the configured live metrics. A bound pod is explained as "
        "if pending, without it; a pod of another scheduler under the first profile. "
        "Examples: ksched explain cluster.yaml default/web-0; ksched explain default/web-0",
    )
    e.add_argument(
        "targets",
        nargs="+",
        metavar="[CLUSTER] NAMESPACE/POD",
        help="a cluster file (omit it to read the live cluster), then one or more pods",
    )
    _add_engine_options(e, "YAML mapping node-name: {metric-name: number} (overrides live values)")
    e.add_argument("--kubeconfig", help="live form: default $KUBECONFIG or ~/.kube/config")
    e.set_defaults(func=_explain)

    r = sub.add_parser(
        "run",
        help="schedule pods with schedulerName matching a profile on a live cluster",
        description="In a pod it uses the service account; elsewhere --kubeconfig, $KUBECONFIG or "
        "~/.kube/config. Example: ksched run --kubeconfig ~/.kube/config --address 127.0.0.1:10259",
    )
    r.add_argument("--config", help="KschedConfiguration file (default: one profile named ksched)")
    r.add_argument("--kubeconfig")
    r.add_argument(
        "--address",
        default="0.0.0.0:10259",
        help="host:port for /healthz, /readyz, /metrics, /status and /shadow",
    )
    r.add_argument("--identity", help="leader-election identity (default: hostname_uuid)")
    r.add_argument(
        "--no-leader-elect", action="store_true", help="run without leader election (a single replica only)"
    )
    r.add_argument(
        "--shadow",
        action="store_true",
        help="bind nothing: compare with where other schedulers bind pods (same as shadow.enabled: true)",
    )
    r.set_defaults(func=_run, verbose=True)

    sh = sub.add_parser(
        "shadow",
        help="read what a shadow-mode ksched would have done with the pods other schedulers bound",
        description="Example: ksched shadow report --address 127.0.0.1:10259",
    )
    shsub = sh.add_subparsers(dest="shadow_command", required=True)
    rep = shsub.add_parser(
        "report",
        help="agreement rate, disagreements by plugin and metric, the pods that differ most",
        description="Reads /shadow from a running `ksched run --shadow`, or the JSON lines of its "
        "shadow.log. Example: ksched shadow report --address 127.0.0.1:10259",
    )
    _add_address(rep)
    rep.add_argument("--file", help="read a shadow.log file instead of a running ksched")
    rep.add_argument("--keep", type=int, default=1000, help="with --file: decisions listed (default 1000)")
    rep.add_argument("-o", "--output", choices=("table", "json"), default="table")
    rep.set_defaults(func=_shadow_report)

    st = sub.add_parser(
        "status",
        help="leader, queue sizes, degraded metrics and recent failures of a running ksched",
        description="Reads /status from a running ksched. Example: ksched status --address 127.0.0.1:10259",
    )
    _add_address(st)
    st.add_argument("-o", "--output", choices=("table", "json"), default="table")
    st.set_defaults(func=_status)

    d = sub.add_parser(
        "demo",
        help="the main job end to end: local control plane, ksched run, a sample workload, a summary",
        description="Builds what is missing, starts a local control plane with fake nodes, runs ksched, "
        "creates a workload, prints placements, failures and throughput, and tears down. "
        "Example: ksched demo --nodes 1000 --pods 2000 --compare",
    )
    d.add_argument("--nodes", type=int, default=1000)
    d.add_argument("--pods", type=int, default=2000)
    d.add_argument("--compare", action="store_true", help="then run the same workload through kube-scheduler")
    d.set_defaults(func=_demo)

    a = sub.add_parser(
        "annotate",
        help="set, remove or list a per-node annotation metric such as a price",
        description="NODE=VALUE sets, NODE- removes; then every node's value is listed. "
        "Example: ksched annotate kwok-node-00000=0.12 kwok-node-00001=0.40",
    )
    a.add_argument("assignments", nargs="*", metavar="NODE=VALUE|NODE-")
    a.add_argument("--key", default="ksched.io/price", help="annotation key (default ksched.io/price)")
    a.add_argument("--kubeconfig")
    a.set_defaults(func=_annotate)

    b = sub.add_parser(
        "bench",
        help="measure engine throughput in process, or (--cluster) ksched beside kube-scheduler and a "
        "null binder on a local control plane",
        description="Without --cluster: a synthetic cluster, no API server. With --cluster: a local real "
        "control plane with N KWOK nodes where a null binder (the API server's ceiling), kube-scheduler "
        "and ksched run in turn on the same workloads; per scheduler and workload it prints backlog "
        "drain pods/s, p50/p99 create-to-bind latency at a steady rate, CPU ms per pod, peak RSS and "
        "over-committed nodes, and writes results.json, table.md and bound-over-time.png under --out. "
        "With --chaos: a soak of two leader-elected ksched replicas under faults (see --chaos). "
        "With --fuzz: mutated pod specs through a local control plane (KWOK nodes, ksched run and its "
        "webhook) and simulate, and malformed AdmissionReviews at the webhook; any defect exits 1. "
        "Examples: ksched bench --nodes 5000 --pods 10000; ksched bench --chaos --nodes 2000 --minutes 10 --seed 1; "
        "ksched bench --fuzz --specs 10000 --seed 1; "
        "ksched bench --cluster --nodes 1000 --workloads bare,replicaset --ksched before=/opt/old/bin/ksched",
    )
    b.add_argument("--nodes", type=int, help="nodes (default 5000; with --chaos 2000)")
    b.add_argument(
        "--pods",
        type=int,
        default=None,
        help="pending pods (default 10000; with --cluster: backlog pods per workload, default --nodes)",
    )
    b.add_argument("--existing", type=int, default=0, help="pods already bound (default 0)")
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--batch-size", type=int, default=512)
    b.add_argument("--no-reference", action="store_true", help="skip the pure-Python reference comparison")
    b.add_argument("--json", action="store_true", help="print figures as JSON (key pods_per_s)")
    b.add_argument(
        "--workload",
        choices=("mixed", "anti-affinity", "preferred-affinity", "spread", "preferred-spread", "preemption"),
        default="mixed",
        help="mixed (default): node-level constraints and metrics; the others mirror kube-scheduler's "
        "scheduler_perf cases (required anti-affinity, preferred affinity, topology spread, "
        "preferred topology spread, PreemptionBasic)",
    )
    b.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="pod-level and preemption workloads: multiply their pod counts (default 1)",
    )
    cl = b.add_argument_group("side by side on a local control plane (--cluster)")
    cl.add_argument(
        "--cluster", action="store_true", help="run the side-by-side benchmark on a local control plane"
    )
    cl.add_argument(
        "--workloads",
        default="bare,replicaset,anti-affinity,spread,metrics",
        help="comma-separated, from bare, replicaset, anti-affinity, spread, metrics (default: all)",
    )
    cl.add_argument(
        "--schedulers",
        default="null-binder,kube-scheduler,ksched",
        help="comma-separated, from null-binder, kube-scheduler, ksched (default: all three)",
    )
    cl.add_argument(
        "--ksched",
        action="append",
        default=[],
        metavar="LABEL=COMMAND",
        help="also run another ksched command (say an older build's venv/bin/ksched) under LABEL; repeatable",
    )
    cl.add_argument(
        "--rate",
        type=float,
        help="steady phase: pods created per second (default 50; with --chaos: arrivals, default 10)",
    )
    cl.add_argument(
        "--steady-pods",
        type=int,
        default=1000,
        help="steady phase: pods per workload (default 1000; 0 skips it)",
    )
    cl.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run each workload this many times per scheduler, every other round in reverse order; "
        "the summary gives the medians, and p50/p99 of every round's steady pods together (default 1)",
    )
    cl.add_argument(
        "--node-lease-seconds",
        type=int,
        default=86400,
        help="KWOK's node Lease duration, renewed every quarter of it (default a day: a kubelet's 40 s "
        "renews 5,000 nodes' Leases 500 times a second, most of a 2-core machine, in every scheduler's drain)",
    )
    cl.add_argument(
        "--stall", type=float, default=60.0, help="give up on a phase after this many seconds without a bind"
    )
    cl.add_argument(
        "--out", default="ksched-bench-cluster", help="directory for results.json, table.md, the PNG and logs"
    )
    ch = b.add_argument_group("chaos soak (--chaos)")
    ch.add_argument(
        "--chaos",
        action="store_true",
        help="a soak of two leader-elected ksched replicas on a local control plane of its own "
        "under seeded, overlapping faults; checks the invariants at the end (exit 1 if one fails)",
    )
    ch.add_argument("--minutes", type=float, default=10.0, help="how long pods arrive (default 10)")
    fz = b.add_argument_group("fuzzer (--fuzz)")
    fz.add_argument(
        "--fuzz",
        action="store_true",
        help="mutated pod specs through a local control plane (API server, ksched run, its webhook) "
        "and simulate, malformed AdmissionReviews at the webhook; exit 1 on any defect",
    )
    fz.add_argument("--specs", type=int, default=10000, help="pod specs generated (default 10000)")
    fz.add_argument(
        "--live",
        type=int,
        help="how many of the specs go through the API server (default all; 0: simulate only)",
    )
    b.set_defaults(func=_bench)

    c = sub.add_parser(
        "cluster",
        help="a local real control plane (etcd, kube-apiserver, KWOK, kube-scheduler)",
        description="Example: ksched cluster up --nodes 100 --with-scheduler; eval $(ksched cluster env)",
    )
    csub = c.add_subparsers(dest="cluster_command", required=True)
    up = csub.add_parser("up", help="build (if needed) and start the control plane with fake nodes")
    up.add_argument("--nodes", type=int, default=10)
    up.add_argument("--zones", type=int, default=3)
    up.add_argument("--with-scheduler", action="store_true", help="also run the real kube-scheduler")
    up.add_argument(
        "--with-controllers",
        action="store_true",
        help="also run kube-controller-manager's workload controllers (Deployments, ReplicaSets, GC, PDBs)",
    )
    up.add_argument(
        "--with-prometheus",
        metavar="TARGETS",
        help="also run Prometheus scraping these host:port targets (comma-separated)",
    )
    up.add_argument(
        "--node-lease-seconds",
        type=int,
        default=40,
        help="the fake nodes' Lease duration, renewed every quarter of it (default 40, a kubelet's)",
    )
    up.add_argument(
        "--scheduler-qps", type=float, default=5000.0, help="kube-scheduler client QPS (burst is twice this)"
    )
    up.add_argument(
        "--percentage-of-nodes-to-score",
        type=int,
        default=0,
        help="kube-scheduler percentageOfNodesToScore (0 = adaptive)",
    )
    csub.add_parser("down", help="stop exactly the processes `up` started and remove its state")
    csub.add_parser("env", help="print `export KUBECONFIG=...` for the running cluster")
    c.set_defaults(func=_cluster)
    return p


# The cyclic garbage collector's first threshold (CPython's default is 700 allocations):
# parsing pods and watch events allocates many short-lived acyclic objects (freed by
# reference counting anyway), and each collection also walks the younger generations
# of a large heap. ksched bench spent 5% of its time (a fifth of its Python time) in
# collections at 700; at this threshold, under 1%.
GC_THRESHOLD = 50_000


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


# Commands that start a local control plane or schedulers of their own and tear them down
# when they end: SIGTERM (a CI timeout, `kill`) stops them as Ctrl-C does, through that teardown,
# instead of leaving etcd, the API server, KWOK and schedulers running.
TEARS_DOWN = (_demo, _bench)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.ERROR, format="%(levelname)s %(name)s: %(message)s"
    )
    previous = signal.signal(signal.SIGTERM, _interrupt) if args.func in TEARS_DOWN else None
    try:
        code: int = args.func(args)
    except KschedError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return code


if __name__ == "__main__":
    sys.exit(main())
