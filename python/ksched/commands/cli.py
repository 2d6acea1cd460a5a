"""The ``ksched`` command line: one parser assembled from the command modules.

Subcommands share one engine: ``run`` schedules a live cluster (with
``--shadow``, it only compares with the scheduler that binds), ``simulate``
schedules a cluster file offline, ``explain`` explains a pod of a cluster
file or of the live cluster, ``shadow report`` and ``status`` read a running
ksched, ``rebalance --dry-run`` previews the rebalancer's moves on the live
cluster, ``bench`` runs the harnesses of :mod:`ksched.bench`, ``cluster`` runs a
local real control plane for tests and demos, and ``image`` builds ksched's
container image. Each command module adds its own
subparser and handler; this module orders them, sets up logging and the garbage
collector, and turns errors into exit codes (:mod:`ksched.commands.exit_codes`).
"""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys

from ksched import __version__
from ksched.commands import annotate, bench, cluster, demo, image, rebalance, run, shadow, simulate
from ksched.commands.exit_codes import EXIT_BAD_INPUT
from ksched.commands.text import printable
from ksched.errors import KschedError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ksched", description="A metrics-aware Kubernetes scheduler.")
    p.add_argument("--version", action="version", version=f"ksched {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log warnings and details to stderr")
    sub = p.add_subparsers(dest="command", required=True)
    simulate.add_parsers(sub)
    run.add_parser(sub)
    shadow.add_parsers(sub)
    rebalance.add_parser(sub)
    demo.add_parser(sub)
    annotate.add_parser(sub)
    bench.add_parser(sub, cli=main)
    cluster.add_parser(sub)
    image.add_parser(sub)
    return p


# The cyclic garbage collector's first threshold (CPython's default is 700 allocations):
# parsing pods and watch events allocates many short-lived acyclic objects (freed by
# reference counting anyway), and each collection also walks the younger generations
# of a large heap. ksched bench spent 5% of its time (a fifth of its Python time) in
# collections at 700; at this threshold, under 1%.
GC_THRESHOLD = 50_000


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
    # Each line with its time to the millisecond, as kube-scheduler's (klog) have: a replica's
    # log read beside the API server's audit log needs it.
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.ERROR,
        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
        datefmt="%Y-%m-%dT%H:%M:%S",
    )
    # Commands that start a local control plane or schedulers of their own and tear them down
    # when they end (``tears_down``): SIGTERM (a CI timeout, `kill`) stops them as Ctrl-C does,
    # through that teardown, instead of leaving etcd, the API server, KWOK and schedulers running.
    tears_down = getattr(args, "tears_down", False)
    previous = signal.signal(signal.SIGTERM, _interrupt) if tears_down else None
    try:
        code: int = args.func(args)
    except KschedError as err:
        # One line, whatever the message quotes from a file (a name with a newline in it).
        print(f"error: {printable(str(err))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return code


if __name__ == "__main__":
    sys.exit(main())
