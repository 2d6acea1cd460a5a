"""The results as a table, a summary against the null binder, and a chart of bound pods
over time."""

from __future__ import annotations

import math
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ksched.bench.sidebyside.options import KSCHED, NULL, WORKLOAD_TITLES, Options, Phase
from ksched.bench.sidebyside.phase import percentile, replicas_clause
from ksched.objects import Obj


def phase_line(p: Phase) -> str:
    if p.error:
        return f"error: {p.error.splitlines()[0]}"
    lat = (
        f"p50 {p.p50_ms} ms, p99 {p.p99_ms} ms at {p.steady_rate:g} pods/s"
        if p.steady_pods
        else "no steady phase"
    )
    return (
        f"{p.bound}/{p.pods} bound in {p.drain_seconds:.2f} s = {p.pods_per_s:,.0f} pods/s; "
        f"{p.scheduled_events} Scheduled events, last write at {p.writes_seconds:.2f} s = "
        f"{p.writes_pods_per_s:,.0f} pods/s; {lat}; "
        f"{p.cpu_ms_per_pod:.2f} CPU ms/pod"
        + replicas_clause(p.replicas, p.cpu_ms_per_pod_by_replica, p.handoffs, p.bind_conflicts)
        + f" (control plane {p.control_plane_cpu_ms_per_pod:.2f}: "
        + ", ".join(f"{k} {v:.2f}" for k, v in p.control_plane_by_process.items())
        + "), "
        f"peak RSS {p.peak_rss_mib:.0f} MiB; "
        f"{p.overcommitted_nodes} over-committed nodes, {p.constraint_violations} constraint violations"
        + (f"; {p.watchers_closed} watcher(s) closed for falling behind" if p.watchers_closed else "")
        + (f"; ksched /readyz: {p.metrics_status}" if p.metrics_status else "")
    )


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def render_table(doc: dict[str, Any]) -> str:
    rows = [
        f"{doc['nodes']:,} KWOK nodes, {doc['pods']:,} backlog pods and {doc['steady_pods']:,} steady pods "
        f"at {doc['steady_rate']:g} pods/s per workload; node Leases of {doc.get('node_lease_seconds') or '?'} s; "
        f"{doc['machine']}",
        "",
        "| workload | scheduler | backlog drain pods/s (to last bind) | with Scheduled events (to last write) "
        "| bound | p50 / p99 create→bind ms | CPU ms per pod | control plane CPU ms per pod | peak RSS MiB "
        "| over-committed nodes | constraint violations |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in doc["phases"]:
        if p["error"]:
            rows.append(
                f"| {p['workload']} | {p['scheduler']} | error: {p['error'].splitlines()[0][:120]} |||||||||"
            )
            continue
        who = p["scheduler"] + (f" (round {p.get('round', 0) + 1})" if doc.get("rounds", 1) > 1 else "")
        lat = f"{_fmt(p['p50_ms'], '.0f')} / {_fmt(p['p99_ms'], '.0f')}"
        if p["steady_pods"] and p["steady_bound"] < p["steady_pods"]:
            lat += f" ({p['steady_bound']}/{p['steady_pods']} bound)"
        writes = f"{p.get('writes_pods_per_s', 0.0):,.0f}"
        if p.get("scheduled_events", 0) < p["bound"]:
            writes += f" ({p.get('scheduled_events', 0)} events)"
        rows.append(
            f"| {p['workload']} | {who} | {p['pods_per_s']:,.0f} | {writes} | {p['bound']}/{p['pods']} "
            f"| {lat} "
            f"| {p['cpu_ms_per_pod']:.2f} | {p.get('control_plane_cpu_ms_per_pod', 0.0):.2f} "
            f"| {p['peak_rss_mib']:.0f} | {p['overcommitted_nodes']} "
            f"| {p['constraint_violations']} |"
        )
    return "\n".join(rows)


_MEDIAN_FIELDS = ("pods_per_s", "writes_pods_per_s", "cpu_ms_per_pod", "peak_rss_mib", "p50_ms", "p99_ms")


def _combined(phases: list[Obj]) -> Obj:
    """One scheduler's rounds on one workload as one row: the median of each figure, the
    most over-committed nodes of any round, an error if any round failed. p50 and p99 are
    those of every round's steady pods together where each round recorded its pods: the
    median of per-round p99s is the median of a few pods each (the 3rd slowest of 300)."""
    errors = [p["error"] for p in phases if p["error"]]
    if errors:
        return {"error": errors[0]}
    out: Obj = {"error": None, "overcommitted_nodes": max(p["overcommitted_nodes"] for p in phases)}
    for name in _MEDIAN_FIELDS:
        values: list[float] = [p[name] for p in phases if p.get(name) is not None]
        out[name] = statistics.median(values) if values else None
    steady = [p for p in phases if p.get("steady_pods")]
    if len(steady) > 1 and all(p.get("steady_latencies") for p in steady):
        pooled = [ms for p in steady for _, ms in p["steady_latencies"]]
        out["p50_ms"] = round(percentile(pooled, 0.50), 1)
        out["p99_ms"] = round(percentile(pooled, 0.99), 1)
    return out


def null_ratios(doc: dict[str, Any], workload: str) -> list[float]:
    """ksched's pods/s to the last write over the null binder's, one per round both completed."""
    rounds: dict[int, dict[str, Obj]] = {}
    for p in doc["phases"]:
        if p["workload"] == workload and not p["error"]:
            rounds.setdefault(p.get("round", 0), {})[p["scheduler"]] = p
    return [
        r[KSCHED]["writes_pods_per_s"] / r[NULL]["writes_pods_per_s"]
        for _, r in sorted(rounds.items())
        if KSCHED in r and NULL in r and r[NULL].get("writes_pods_per_s")
    ]


def render_summary(doc: dict[str, Any]) -> str:
    """One row per workload, each cell the schedulers' figures in run order (as the README shows them);
    with several rounds each figure is the median of the rounds (p50 and p99: of all their steady
    pods together), and the ratio the median of the rounds' ratios (each listed)."""
    labels: list[str] = doc["schedulers"]
    grouped: dict[tuple[str, str], list[Obj]] = {}
    for p in doc["phases"]:
        grouped.setdefault((p["scheduler"], p["workload"]), []).append(p)
    by = {key: _combined(ps) for key, ps in grouped.items()}
    workloads = list(dict.fromkeys(p["workload"] for p in doc["phases"]))
    order = " / ".join(labels)
    rounds = doc.get("rounds", 1)
    of = f", median of {rounds} rounds" if rounds > 1 else ""
    recorded = any(p.get("steady_latencies") for p in doc["phases"])
    pooled = f", {rounds} rounds' steady pods" if rounds > 1 and recorded else ""
    rows = [
        f"| workload | backlog drain pods/s ({order}{of}) | with Scheduled events ({order}) | ksched ÷ null binder "
        f"| CPU ms per pod ({order}) | peak RSS MiB ({order}) | p50 create→bind ms ({order}{pooled}) "
        f"| p99 create→bind ms ({order}{pooled}) | over-committed nodes ({order}) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def cells(workload: str, fmt: Callable[[Obj], str]) -> str:
        out = []
        for label in labels:
            p = by.get((label, workload))
            out.append("-" if p is None else "error" if p["error"] else fmt(p))
        return " / ".join(out)

    for w in workloads:
        # Like for like: both to their last write, binds and Scheduled events.
        ratios = null_ratios(doc, w)
        ratio = f"{statistics.median(ratios):.2f}" if ratios else "-"
        if len(ratios) > 1:
            ratio += f" ({', '.join(f'{r:.2f}' for r in ratios)})"
        rows.append(
            f"| {WORKLOAD_TITLES.get(w, w)} | {cells(w, lambda p: format(p['pods_per_s'], ',.0f'))} "
            f"| {cells(w, lambda p: format(p.get('writes_pods_per_s', 0.0), ',.0f'))} | {ratio} "
            f"| {cells(w, lambda p: format(p['cpu_ms_per_pod'], '.2f'))} "
            f"| {cells(w, lambda p: format(p['peak_rss_mib'], '.0f'))} "
            f"| {cells(w, lambda p: _fmt(p['p50_ms'], '.0f'))} | {cells(w, lambda p: _fmt(p['p99_ms'], '.0f'))} "
            f"| {cells(w, lambda p: str(p['overcommitted_nodes']))} |"
        )
    return "\n".join(rows)


def render_fill_curve(doc: dict[str, Any]) -> str:
    """The fill workload's steps, a row per scheduler: at each fill, the step's pods bound, and
    its hand-offs and binds refused as already bound against its binds (sharded replicas'
    conflicts); empty without the fill workload."""
    phases = [p for p in doc["phases"] if p["workload"] == "fill" and not p["error"] and p.get("fill_steps")]
    if not phases:
        return ""
    shares = [step["fill"] for step in phases[0]["fill_steps"]]
    rows = [
        "Fill: each step's pods bound, then hand-offs + binds refused as already bound, against its binds",
        "",
        "| scheduler | "
        + " | ".join(f"to {s:.0%} of the cpu" for s in shares)
        + " | left pending that fit |",
        "|---|" + "---|" * len(shares) + "---|",
    ]
    for p in phases:
        cells = []
        for step in p["fill_steps"]:
            conflicts = step["handoffs"] + step["conflicts"]
            share = conflicts / step["bound"] if step["bound"] else 0.0
            cells.append(
                f"{step['bound']:,}/{step['pods']:,}; {step['handoffs']:,} + {step['conflicts']:,} = {share:.1%}"
            )
        rows.append(f"| {p['scheduler']} | " + " | ".join(cells) + f" | {p.get('pending_that_fit', 0)} |")
    return "\n".join(rows)


def checkout() -> str | None:
    """The commit of the checkout this ksched runs from, if it is one."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(Path(__file__).parent), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except OSError:
        return None
    return proc.stdout.strip() or None


def chart(plt: Any, phases: list[Phase], opts: Options, path: Path) -> None:
    """Bound pods over time from the resumption, one panel per workload, one line per scheduler."""
    workloads = [w for w in opts.workloads if any(p.workload == w for p in phases)]
    cols = min(3, max(1, len(workloads)))
    rows = math.ceil(len(workloads) / cols) if workloads else 1
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, w in zip(axes.flat, workloads, strict=False):
        for p in phases:
            if p.workload == w and p.bind_times:
                label = p.scheduler + (f" (round {p.round + 1})" if opts.rounds > 1 else "")
                ax.step([0.0, *p.bind_times], range(len(p.bind_times) + 1), where="post", label=label)
        ax.set_title(WORKLOAD_TITLES[w], fontsize=9)
        ax.set_xlabel("seconds since the scheduler resumed")
        ax.set_ylabel("pods bound")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(workloads) :]:
        ax.set_visible(False)
    fig.suptitle(f"Backlog of {opts.pods:,} pods on {opts.nodes:,} KWOK nodes", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
