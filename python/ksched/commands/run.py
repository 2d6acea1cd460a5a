"""``ksched run``: the arguments of the live scheduler, handed to :func:`ksched.loop.run.run`."""

from __future__ import annotations

import argparse
import dataclasses


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def _run(args: argparse.Namespace) -> int:
    from ksched.config import load_config
    from ksched.config.values import as_host_port
    from ksched.loop.run import run

    config = load_config(args.config)
    as_host_port(args.address, "--address")
    if args.no_leader_elect:
        config = dataclasses.replace(
            config, leader_election=dataclasses.replace(config.leader_election, leader_elect=False)
        )
    if args.shadow:
        config = dataclasses.replace(config, shadow=dataclasses.replace(config.shadow, enabled=True))
    return run(config, args.kubeconfig, args.address, args.identity)
