"""One fuzz run: generate, the live phase, then the simulate phase (:func:`run_fuzz`)."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from ksched.bench.fuzz.live import live_phase
from ksched.bench.fuzz.mutations import generate
from ksched.bench.fuzz.report import FUZZ_NODES, Cli, FuzzReport
from ksched.bench.fuzz.simulate import simulate_phase
from ksched.cluster import local
from ksched.errors import KschedError
from ksched.objects import Obj


def run_fuzz(
    specs: int, seed: int, live: int | None = None, state: local.ClusterState | None = None, *, cli: Cli
) -> FuzzReport:
    """Generate ``specs`` specs; create the first ``live`` (default all) through a local control
    plane (``state``, or one started here with KWOK nodes and torn down after), then feed every
    spec and the accepted pods to ``simulate`` through ``cli``, the command line's entry
    (:func:`ksched.commands.cli.main`, passed in because the command line runs this harness)."""
    if specs < 1:
        raise KschedError("--specs must be at least 1")
    started = time.monotonic()
    report = FuzzReport(seed, specs)
    generated = generate(specs, seed)
    workdir = Path(tempfile.mkdtemp(prefix="ksched-fuzz-"))
    live_specs = generated if live is None else generated[: max(0, live)]
    accepted: list[Obj] = []
    if live_specs:
        own = state is None
        if own:
            print(
                f"== local control plane: {FUZZ_NODES} fake nodes (builds it first if needed)",
                file=sys.stderr,
            )
            state = local.up(nodes=FUZZ_NODES, zones=3)
        assert state is not None
        try:
            print(
                f"== {len(live_specs)} specs through the API server, ksched and its webhook", file=sys.stderr
            )
            accepted = live_phase(report, state, live_specs, workdir)
        finally:
            if own:
                local.down()
    print(f"== {len(generated)} specs and {len(accepted)} accepted pods through simulate", file=sys.stderr)
    simulate_phase(report, generated, accepted, workdir, cli)
    report.seconds = time.monotonic() - started
    return report
