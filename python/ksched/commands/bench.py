"""``ksched bench``: its arguments, and which harness of :mod:`ksched.bench` they run.

Without a mode flag the engine's in-process throughput (:mod:`ksched.bench.engine`);
``--cluster`` the side by side on a local control plane (:mod:`ksched.bench.sidebyside`);
``--chaos`` the soak under faults (:mod:`ksched.bench.chaos`); ``--fuzz`` the fuzzer
(:mod:`ksched.bench.fuzz`). This module parses and prints; the harnesses measure.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ksched.commands.exit_codes import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNPLACED, EXIT_VIOLATED

if TYPE_CHECKING:
    from ksched.bench.engine import RunFigures


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], cli: Callable[[list[str]], int]
) -> None:
    """``ksched bench``; ``cli`` is the command line's entry, which ``--fuzz`` runs ``simulate`` through."""
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
    b.add_argument("--nodes", type=int, help="nodes (default 5000; with --chaos 2000; with --quality 1000)")
    b.add_argument(
        "--pods",
        type=int,
        default=None,
        help="pending pods (default 10000; with --cluster: backlog pods per workload, default --nodes; "
        "with --existing-pods: the backlog drained, default 5000; with --quality: pods per scenario, "
        "default 6 per node)",
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
        help="comma-separated, from null-binder, kube-scheduler, ksched (default: all three); with "
        "--quality from kube-scheduler, ksched, ksched-no-metrics (default: these three), and with --pools "
        "kube-scheduler+descheduler (the descheduler's LowNodeUtilization on actual usage) and "
        "ksched-rebalance (ksched with its rebalancer), which load-shift also judges by their evictions",
    )
    cl.add_argument(
        "--ksched",
        action="append",
        default=[],
        metavar="LABEL=COMMAND",
        help=(
            "also run another ksched command (say an older build's venv/bin/ksched) under LABEL; "
            "with --quality it runs ksched's configuration; repeatable"
        ),
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
        "--cpu-hog",
        type=int,
        default=0,
        metavar="CORES",
        help="a busy control plane: this many processes spin at 100%% of a core each while the schedulers "
        "are measured, stopped when the bench ends (default 0)",
    )
    ex = b.add_argument_group("on a cluster already running pods (--cluster --existing-pods N)")
    ex.add_argument(
        "--existing-pods",
        type=int,
        default=0,
        metavar="N",
        help="fill the cluster with N bound pods first (a DaemonSet pod per node, Deployments behind "
        "Services, zone spread and anti-affinity, at most 110 on a node), then per scheduler: (a) start-up "
        "to ready and peak RSS, (d) a forced relist (etcd compacted, API server restarted), (b) a drain of "
        "--pods (default 5000), (c) a rolling update of --churn-pods at --churn-rate, (e) --steady-pods at "
        "--rate: RSS and CPU per pod; exit 1 if a pod is lost or unbound or a node over-committed",
    )
    ex.add_argument(
        "--churn-pods",
        type=int,
        default=10000,
        help="--existing-pods: pods the rolling update replaces (default 10000)",
    )
    ex.add_argument(
        "--churn-rate",
        type=float,
        default=100.0,
        help="--existing-pods: pods deleted and created per second by the rolling update (default 100)",
    )
    cl.add_argument(
        "--out",
        help="directory for results.json, table.md, the PNG and logs "
        "(default ksched-bench-cluster; with --quality ksched-bench-quality)",
    )
    q = b.add_argument_group("placement quality under real load (--quality)")
    q.add_argument(
        "--quality",
        action="store_true",
        help="a local control plane with the load simulation (KWOK usage, Prometheus): kube-scheduler, "
        "ksched with a load-aware configuration and ksched without metrics place the same seeded "
        "scenarios in turn; prints hotspot node-minutes, p95 utilisation, its spread, pods on hot "
        "nodes, pending pods and pods/s; --out gets results.json, table.md, utilisation.png",
    )
    q.add_argument(
        "--scenarios",
        default="requests-lie,burst,mixed-schedulers,best-effort,load-shift",
        help="comma-separated (default: all five)",
    )
    q.add_argument(
        "--observe",
        type=float,
        default=180.0,
        help="seconds from the first create that are judged (default 180)",
    )
    q.add_argument(
        "--scrape-interval",
        type=float,
        default=15.0,
        help="Prometheus's scrape interval, seconds (default 15)",
    )
    q.add_argument(
        "--threshold", type=float, default=0.8, help="CPU utilisation over which a node is hot (default 0.8)"
    )
    q.add_argument(
        "--ksched-config",
        help="ksched's load-aware configuration (default: examples/load-aware.yaml of the checkout)",
    )
    q.add_argument(
        "--rebalance-config",
        help="ksched-rebalance's configuration, whose rebalance lines and interval the descheduler gets too "
        "(default: examples/rebalance.yaml of the checkout)",
    )
    q.add_argument(
        "--quality-config",
        action="append",
        default=[],
        metavar="LABEL=FILE",
        help="also run ksched with this configuration under LABEL (say today's beside a candidate's); repeatable",
    )
    q.add_argument(
        "--pools",
        action="store_true",
        help="run each scenario's schedulers at once, each on an equal pool of the nodes (same shapes, "
        "same scrapes, same machine load; one observation window a scenario instead of one each)",
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
    # Every mode but the in-process one starts a control plane and schedulers and tears them down.
    b.set_defaults(func=functools.partial(_bench, cli=cli), tears_down=True)


def _names(csv: str) -> list[str]:
    return [n.strip() for n in csv.split(",") if n.strip()]


def _quality(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ksched.bench.pods import parse_kscheds
    from ksched.bench.quality.report import table
    from ksched.bench.quality.run import SCHEDULERS, SETUPS, QualityOptions, run_quality

    configs = {label: Path(path) for label, _, path in (c.partition("=") for c in args.quality_config)}
    opts = QualityOptions(
        nodes=args.nodes if args.nodes is not None else 1000,
        pods=args.pods,
        scenarios=tuple(_names(args.scenarios)),
        schedulers=tuple(_names(args.schedulers) if args.schedulers else SCHEDULERS),
        seed=args.seed,
        rate=args.rate if args.rate is not None else 50.0,
        observe_s=args.observe,
        scrape_interval_s=args.scrape_interval,
        threshold=args.threshold,
        ksched_config=Path(args.ksched_config) if args.ksched_config else None,
        rebalance_config=Path(args.rebalance_config) if args.rebalance_config else None,
        configs=configs,
        builds=parse_kscheds(args.ksched, (*SETUPS, *configs)),
        pools=args.pools,
        out=Path(args.out or "ksched-bench-quality"),
    )
    results = run_quality(
        opts, log=lambda line: print(f"[quality {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr)
    )
    if args.json:
        print(json.dumps({"scenarios": results.by_scenario(), "violations": results.violations}, indent=2))
    else:
        print(table(results))
    return EXIT_VIOLATED if results.violations else EXIT_OK


def _bench(args: argparse.Namespace, cli: Callable[[list[str]], int]) -> int:
    from ksched.bench.engine import PREEMPTION, run_bench, run_pod_level_bench, run_preemption_bench

    modes = [f"--{m}" for m in ("cluster", "quality", "chaos", "fuzz") if getattr(args, m)]
    if len(modes) > 1:
        print(f"ksched bench: {' and '.join(modes)} are separate modes: give one", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.chaos:
        return _chaos(args)
    if args.fuzz:
        from ksched.bench.fuzz.run import run_fuzz

        report = run_fuzz(args.specs, args.seed, args.live, cli=cli)
        print(json.dumps(report.as_json(), indent=2) if args.json else report.render())
        return EXIT_UNPLACED if report.defect_count else EXIT_OK
    if args.nodes is None:
        args.nodes = 5000
    if args.quality:
        return _quality(args)
    if args.existing_pods and not args.cluster:
        print("ksched bench: --existing-pods goes with --cluster", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.cluster and args.existing_pods:
        from ksched.bench.sidebyside.run import existing_main

        return existing_main(
            nodes=args.nodes,
            existing_pods=args.existing_pods,
            schedulers=_names(args.schedulers or "null-binder,kube-scheduler,ksched"),
            extra=args.ksched,
            drain_pods=args.pods if args.pods is not None else 5000,
            churn_pods=args.churn_pods,
            churn_rate=args.churn_rate,
            steady_pods=args.steady_pods,
            rate=args.rate if args.rate is not None else 50.0,
            out=args.out or "ksched-bench-cluster",
            stall_s=args.stall,
            as_json=args.json,
            cpu_hog=args.cpu_hog,
            seed=args.seed,
            node_lease_s=args.node_lease_seconds,
        )
    if args.cluster:
        from ksched.bench.sidebyside.run import main

        return main(
            nodes=args.nodes,
            pods=args.pods if args.pods is not None else args.nodes,
            workloads=_names(args.workloads),
            schedulers=_names(args.schedulers or "null-binder,kube-scheduler,ksched"),
            extra=args.ksched,
            rate=args.rate if args.rate is not None else 50.0,
            steady_pods=args.steady_pods,
            out=args.out or "ksched-bench-cluster",
            stall_s=args.stall,
            as_json=args.json,
            rounds=args.rounds,
            node_lease_s=args.node_lease_seconds,
            cpu_hog=args.cpu_hog,
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


def _chaos(args: argparse.Namespace) -> int:
    from ksched.bench.chaos.figures import render
    from ksched.bench.chaos.run import run_chaos

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
