"""One fuzz run (:func:`run_fuzz`): the specs shared out over the kinds asked for, the live
phase (pods, and odd nodes while ksched runs), then each offline kind in turn."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from ksched.bench.fuzz.configs import configs_phase
from ksched.bench.fuzz.floods import connections_phase
from ksched.bench.fuzz.live import live_phase
from ksched.bench.fuzz.metrics import metrics_answers, metrics_files
from ksched.bench.fuzz.mutations import generate
from ksched.bench.fuzz.nodes import generate_nodes, nodes_simulate
from ksched.bench.fuzz.report import FUZZ_NODES, KINDS, Cli, FuzzReport
from ksched.bench.fuzz.simulate import simulate_phase
from ksched.cluster import local
from ksched.errors import KschedError
from ksched.objects import Obj

# Each kind's share of --specs. Connections count attacks, each held for seconds, so theirs
# is small: 10,000 specs make 20 attacks (about two minutes).
SHARES = {"pods": 0.6, "nodes": 0.15, "metrics": 0.1, "configs": 0.148, "connections": 0.002}
# Odd nodes created through the API server in the live phase (the rest go to simulate only).
LIVE_NODES = 300


def parse_kinds(text: str) -> dict[str, int | None]:
    """``--fuzz-kinds``: ``pods,nodes`` (shares of --specs) or ``pods=500,connections=13``
    (counts); an empty text means every kind."""
    out: dict[str, int | None] = {}
    for part in (p.strip() for p in (text or ",".join(KINDS)).split(",")):
        if not part:
            continue
        kind, _, count = part.partition("=")
        if kind not in KINDS:
            raise KschedError(f"--fuzz-kinds: {kind!r} is not one of {', '.join(KINDS)}")
        if count and not count.isdigit():
            raise KschedError(f"--fuzz-kinds: {part!r}: the count must be a whole number")
        out[kind] = int(count) if count else None
    if not out:
        raise KschedError(f"--fuzz-kinds: name at least one of {', '.join(KINDS)}")
    return out


def share_out(specs: int, kinds: dict[str, int | None]) -> dict[str, int]:
    """Each kind's count: its own where given, else its share of ``specs`` among the kinds
    without one (at least 1)."""
    shared = [k for k, n in kinds.items() if n is None]
    total = sum(SHARES[k] for k in shared) or 1.0
    return {k: n if n is not None else max(1, round(specs * SHARES[k] / total)) for k, n in kinds.items()}


def run_fuzz(
    specs: int,
    seed: int,
    live: int | None = None,
    state: local.ClusterState | None = None,
    *,
    cli: Cli,
    kinds: str = "",
) -> FuzzReport:
    """Share ``specs`` out over ``kinds`` (``--fuzz-kinds``, default all); create the first
    ``live`` (default all) pod specs and up to LIVE_NODES odd nodes through a local control
    plane (``state``, or one started here with KWOK nodes and torn down after), then feed the
    offline kinds through ``cli``, the command line's entry (:func:`ksched.commands.cli.main`,
    passed in because the command line runs this harness)."""
    if specs < 1:
        raise KschedError("--specs must be at least 1")
    counts = share_out(specs, parse_kinds(kinds))
    started = time.monotonic()
    report = FuzzReport(seed, counts.get("pods", 0), kinds=tuple(k for k in KINDS if k in counts))
    generated = generate(counts["pods"], seed) if "pods" in counts else []
    odd_nodes = generate_nodes(counts["nodes"], seed) if "nodes" in counts else []
    workdir = Path(tempfile.mkdtemp(prefix="ksched-fuzz-"))
    live_specs = generated if live is None else generated[: max(0, live)]
    live_nodes = odd_nodes[:LIVE_NODES] if live != 0 else []
    accepted: list[Obj] = []
    if live_specs or live_nodes:
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
                f"== {len(live_specs)} specs and {len(live_nodes)} odd nodes through the API server, "
                "ksched and its webhook",
                file=sys.stderr,
            )
            accepted = live_phase(report, state, live_specs, workdir, live_nodes)
        finally:
            if own:
                local.down()
    if "pods" in counts:
        print(
            f"== {len(generated)} specs and {len(accepted)} accepted pods through simulate", file=sys.stderr
        )
        simulate_phase(report, generated, accepted, workdir, cli)
    _offline_kinds(report, counts, seed, odd_nodes, workdir, cli)
    report.seconds = time.monotonic() - started
    return report


def _offline_kinds(
    report: FuzzReport,
    counts: dict[str, int],
    seed: int,
    odd_nodes: list[tuple[Obj, list[str]]],
    workdir: Path,
    cli: Cli,
) -> None:
    if odd_nodes:
        print(f"== {len(odd_nodes)} odd nodes through simulate", file=sys.stderr)
        nodes_simulate(report, odd_nodes, workdir, cli)
    if "metrics" in counts:
        answers = (counts["metrics"] + 1) // 2
        print(
            f"== {answers} Prometheus answers through the metric store and engine, "
            f"{counts['metrics'] - answers} metric files through simulate",
            file=sys.stderr,
        )
        metrics_answers(report, answers, seed)
        metrics_files(report, counts["metrics"] - answers, seed, workdir, cli)
    if "configs" in counts:
        print(f"== {counts['configs']} configurations through simulate and load_config", file=sys.stderr)
        configs_phase(report, counts["configs"], seed, workdir, cli)
    if "connections" in counts:
        print(
            f"== {counts['connections']} connection attacks on the HTTP server and webhook", file=sys.stderr
        )
        connections_phase(report, counts["connections"])
