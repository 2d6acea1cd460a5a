"""``ksched demo``: its arguments; the main job itself is :mod:`ksched.bench.demo`."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = sub.add_parser(
        "demo",
        help="the main job end to end: local control plane, ksched run, a sample workload, a summary",
        description="Builds what is missing, starts a local control plane with fake nodes, runs ksched, "
        "creates a workload, prints placements, failures and throughput, and tears down. With "
        "--compare it runs the same workload through kube-scheduler, then places two seeded scenarios "
        "under simulated real load (KWOK usage scraped by Prometheus) with ksched's load-aware "
        "configuration and with kube-scheduler, each on its own pool of nodes at the same time, and "
        "prints their hot node-minutes and p95 utilisation. "
        "Example: ksched demo --nodes 1000 --pods 2000 --compare",
    )
    d.add_argument("--nodes", type=int, default=1000)
    d.add_argument("--pods", type=int, default=2000)
    d.add_argument("--compare", action="store_true", help="then run the same workload through kube-scheduler")
    d.add_argument(
        "--no-load",
        action="store_true",
        help="with --compare: leave out the placement-under-load round (and the load simulation)",
    )
    d.set_defaults(func=_run, tears_down=True)


def _run(args: argparse.Namespace) -> int:
    from ksched.bench.demo import demo

    return demo(args.nodes, args.pods, args.compare, load=args.compare and not args.no_load)
