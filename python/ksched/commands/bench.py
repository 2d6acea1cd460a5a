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

from ksched.commands.bench_options import LOAD_MODEL, SATURATED_HERD, add_options
from ksched.commands.exit_codes import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNPLACED, EXIT_VIOLATED
from ksched.errors import KschedError

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
        "With --hostile: ksched run timed on a local control plane without and with bad inputs (a 10Ei "
        "node, a price of inf, idle and half-sent clients held on its ports); any loss exits 1. "
        "Examples: ksched bench --nodes 5000 --pods 10000; ksched bench --chaos --nodes 2000 --minutes 10 --seed 1; "
        "ksched bench --fuzz --specs 10000 --seed 1; ksched bench --hostile --nodes 100 --pods 2000; "
        "ksched bench --cluster --nodes 1000 --workloads bare,replicaset --ksched before=/opt/old/bin/ksched",
    )
    add_options(b)
    # Every mode but the in-process one starts a control plane and schedulers and tears them down.
    b.set_defaults(func=functools.partial(_bench, cli=cli), tears_down=True)


def _names(csv: str) -> list[str]:
    return [n.strip() for n in csv.split(",") if n.strip()]


def _counts(csv: str) -> list[int]:
    """``--replicas``: comma-separated counts."""
    try:
        return [int(n) for n in _names(csv)]
    except ValueError:
        raise KschedError(f"--replicas: comma-separated counts, not {csv!r}") from None


def _quality(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ksched.bench.pods import parse_kscheds
    from ksched.bench.quality.gap import gaps_json
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
        shapes=args.shapes,
        out=Path(args.out or "ksched-bench-quality"),
    )
    results = run_quality(
        opts, log=lambda line: print(f"[quality {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr)
    )
    if args.json:
        document = {"scenarios": results.by_scenario(), "gaps": gaps_json(results)}
        print(json.dumps({**document, "violations": results.violations}, indent=2))
    else:
        print(table(results))
    return EXIT_VIOLATED if results.violations else EXIT_OK


def _refused(workload: str, modes: list[str], sizes: dict[str, int]) -> bool:
    """Whether an in-process ``--workload`` cannot run, said on stderr: a mode flag was given
    (``modes``), or one of ``sizes`` (option -> value) is below 1."""
    if modes:
        print(f"ksched bench: --workload {workload} runs in-process, without {modes[0]}", file=sys.stderr)
        return True
    if any(v < 1 for v in sizes.values()):
        print(f"ksched bench: {' and '.join(sizes)} must be at least 1", file=sys.stderr)
        return True
    return False


def _load_model(args: argparse.Namespace, modes: list[str]) -> int:
    """``--workload load-model``; ``modes``: the mode flags given (none may be)."""
    from ksched.bench.load_model import describe, run_load_model_bench

    nodes = 1000 if args.nodes is None else args.nodes
    binds = 10 if args.batch_size is None else args.batch_size
    if _refused(LOAD_MODEL, modes, {"--nodes": nodes, "--batch-size": binds}):
        return EXIT_BAD_INPUT
    figures = run_load_model_bench(nodes, binds, args.seed)
    print(json.dumps(figures.as_json(), indent=2) if args.json else describe(figures))
    return EXIT_OK


def _saturated_herd(args: argparse.Namespace, modes: list[str]) -> int:
    """``--workload saturated-herd``; ``modes``: the mode flags given (none may be)."""
    from ksched.bench.saturation import describe, run_saturation_bench

    nodes = 800 if args.nodes is None else args.nodes
    pods = 300 if args.pods is None else args.pods
    if _refused(SATURATED_HERD, modes, {"--nodes": nodes, "--pods": pods}):
        return EXIT_BAD_INPUT
    figures = run_saturation_bench(nodes, pods, args.seed, args.mixed_requests)
    print(json.dumps(figures.as_json(), indent=2) if args.json else describe(figures))
    return EXIT_OK


def _bench(args: argparse.Namespace, cli: Callable[[list[str]], int]) -> int:
    from ksched.bench.engine import PREEMPTION, run_bench, run_pod_level_bench, run_preemption_bench

    modes = [f"--{m}" for m in ("cluster", "quality", "chaos", "fuzz", "hostile") if getattr(args, m)]
    if len(modes) > 1:
        print(f"ksched bench: {' and '.join(modes)} are separate modes: give one", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.workload == LOAD_MODEL:
        return _load_model(args, modes)
    if args.workload == SATURATED_HERD:
        return _saturated_herd(args, modes)
    if args.chaos:
        return _chaos(args)
    if args.hostile:
        return _hostile(args)
    if args.fuzz:
        from ksched.bench.fuzz.run import run_fuzz

        report = run_fuzz(args.specs, args.seed, args.live, cli=cli, kinds=args.fuzz_kinds)
        print(json.dumps(report.as_json(), indent=2) if args.json else report.render())
        return EXIT_UNPLACED if report.defect_count else EXIT_OK
    if args.batch_size is None:
        args.batch_size = 512
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
            replicas=_counts(args.replicas),
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
            replicas=_counts(args.replicas),
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


def _hostile(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ksched.bench.hostile import render, run_hostile

    result = run_hostile(
        pods=2000 if args.pods is None else args.pods,
        routed=args.routed,
        clients=args.clients,
        nodes=100 if args.nodes is None else args.nodes,
        out=Path(args.out) if args.out else None,
    )
    print(json.dumps(result, indent=2) if args.json else render(result))
    return EXIT_VIOLATED if result["problems"] else EXIT_OK


def _chaos(args: argparse.Namespace) -> int:
    from ksched.bench.chaos.figures import render
    from ksched.bench.chaos.run import run_chaos

    def progress(line: str) -> None:
        print(f"[chaos {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    counts = _counts(args.replicas)
    if len(counts) != 1:
        raise KschedError("--chaos --replicas: one count")
    f = run_chaos(
        2000 if args.nodes is None else args.nodes,
        args.minutes,
        10.0 if args.rate is None else args.rate,
        args.seed,
        progress,
        # The default (1) is the two leader-elected replicas; N above 1 runs N sharded ones.
        replicas=counts[0] if counts[0] > 1 else 0,
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
