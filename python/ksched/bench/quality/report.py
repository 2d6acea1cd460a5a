"""The quality benchmark's table, ``results.json`` and a plot of node utilisation over time;
where pods could be moved, a second table of what moving them did; where the shadow setup ran,
its estimate beside the measured difference (:mod:`.shadow_estimate`); where a steering setup
ran, its marks (:mod:`.marks`); where a pod's estimate was traced, its points and a plot of them
(:mod:`.estimates`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ksched.bench.quality.figures import QualityFigures, QualityResults
from ksched.bench.quality.gap import gap_rows, gaps_json
from ksched.bench.quality.marks import described
from ksched.bench.quality.shadow_estimate import checks_json, shadow_rows

REBALANCE_HEADER = (
    "scenario",
    "setup",
    "s to cool",
    "evictions",
    "after window",
    "nodes cooled",
    "evictions/node cooled",
    "ping-pong",
    "PDB violations",
    "pending after eviction",
)


def _optional(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _rebalance_row(f: QualityFigures) -> tuple[str, ...]:
    r = f.rebalance
    assert r is not None
    return (
        f.scenario,
        f.scheduler,
        # Never cooled: hot nodes remained at the end.
        "never" if r.seconds_to_cool is None else f"{r.seconds_to_cool:.0f}",
        str(r.evictions),
        str(r.evictions_after_window),
        str(r.nodes_cooled),
        _optional(r.evictions_per_node_cooled),
        str(r.pingpong),
        str(r.pdb_violations),
        str(r.pending_after_eviction),
    )


def _aligned(rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Rows as lines: the first two columns left-aligned, the figures right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in rows
    ]


def table(results: QualityResults) -> str:
    header = (
        "scenario",
        "scheduler",
        "hot node-min",
        "excess",
        "max util",
        "p95 util",
        "cv",
        "end cv",
        "pods on hot",
        "pending",
        "pods/s",
        "p99 bind s",
        "over line",
        "CPU s",
    )
    rows = [header]
    for f in results.figures:
        rows.append(
            (
                f.scenario,
                f.scheduler,
                f"{f.hotspot_node_minutes:.1f}",
                f"{f.excess_node_minutes:.2f}",
                f"{f.max_utilisation:.2f}",
                f"{f.p95_utilisation:.2f}",
                f"{f.cv:.2f}",
                f"{f.end_cv:.2f}",
                str(f.pods_on_hot_nodes),
                str(f.pending),
                f"{f.pods_per_s:.1f}",
                f"{f.p99_bind_s:.0f}",
                "-" if f.over_threshold is None else str(f.over_threshold),
                "-" if f.cpu_s is None else f"{f.cpu_s:.0f}",
            )
        )
    lines = _aligned(rows)
    moved = [f for f in results.figures if f.rebalance is not None]
    if moved:
        lines += ["", *_aligned([REBALANCE_HEADER, *(_rebalance_row(f) for f in moved)])]
    if shaped := shape_rows(results):
        lines += ["", *_aligned(shaped)]
    # Hot node-minutes against kube-scheduler's and, where the round ran it, each setup's oracle's.
    if against_oracle := gap_rows(results):
        lines += ["", *_aligned(against_oracle)]
    if estimates := shadow_rows(results):
        lines += ["", *_aligned(estimates)]
    if marks := marks_lines(results):
        lines += ["", *marks]
    if slow := [f for f in results.figures if f.p99_bind_s > 1]:
        lines += ["", "create→bind, pods per whole seconds waited (where the p99 is over 1 s)"]
        lines += [
            f"{f.scenario} / {f.scheduler}: " + ", ".join(f"{s} s: {n}" for s, n in f.bind_waits.items())
            for f in slow
        ]
    for f in results.figures:
        if f.hottest:
            lines += ["", f"hottest nodes, {f.scenario} / {f.scheduler} (seconds from the first create)"]
            lines += [line for node in f.hottest for line in node.described()]
    for f in results.figures:
        if f.estimate is not None:
            first, *rest = f.estimate.described()
            lines += ["", f"one pod's estimate, {f.scenario} / {f.scheduler}: {first}", *rest]
    lines += [f"VIOLATION: {v}" for v in results.violations] or [
        "invariants: every pod accounted for, no node over-committed"
    ]
    return "\n".join(lines)


SHAPE_HEADER = (
    "scenario",
    "scheduler",
    "node cpu",
    "nodes",
    "pods a node",
    "pods sd",
    "hot node-min",
    "end util mean",
    "end util max",
)


def shape_rows(results: QualityResults) -> list[tuple[str, ...]]:
    """Each setup's figures per node shape, for the scenarios whose nodes have several shapes
    (empty where none has): where each scheduler put the pods, and which shapes ran hot."""
    rows = [
        (
            f.scenario,
            f.scheduler,
            f"{s.cores:g}",
            str(s.nodes),
            f"{s.pods_per_node:.2f}",
            f"{s.pods_sd:.2f}",
            f"{s.hotspot_node_minutes:.1f}",
            f"{s.end_mean:.2f}",
            f"{s.end_max:.2f}",
        )
        for f in results.figures
        if len(f.shapes) > 1
        for s in f.shapes
    ]
    return [SHAPE_HEADER, *rows] if rows else []


def marks_lines(results: QualityResults) -> list[str]:
    """The steering marks section: per steering setup and scenario, its figures and its most
    marked node's marks; none where no steering setup ran."""
    lines: list[str] = []
    for f in results.figures:
        if f.marks is not None:
            first, *rest = described(f.marks)
            lines += [f"{f.scenario} / {f.scheduler}: {first}", *(f"  {line}" for line in rest)]
    return ["steering marks (seconds from the first create)", *lines] if lines else []


def write(results: QualityResults, out: Path, plt: Any | None) -> None:
    """``results.json``, ``table.md`` and, with ``plt`` (:func:`ksched.bench.charts.pyplot`;
    None: no chart), ``utilisation.png`` (p50/p95/max bands per scheduler) under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    document = {
        "options": results.options,
        "scenarios": results.by_scenario(),
        "runs": [asdict(f) for f in results.figures],
        "gaps": gaps_json(results),
        "shadowEstimates": checks_json(results),
        "violations": results.violations,
    }
    (out / "results.json").write_text(json.dumps(document, indent=1))
    (out / "table.md").write_text(table(results) + "\n")
    if plt is not None:
        _chart(results, plt, out / "utilisation.png")
        if any(f.estimate is not None for f in results.figures):
            _estimate_chart(results, plt, out / "estimate.png")


def _chart(results: QualityResults, plt: Any, path: Path) -> None:
    """Each scenario's utilisation over time, a panel per scheduler."""
    scenarios = sorted({f.scenario for f in results.figures})
    schedulers = sorted({f.scheduler for f in results.figures})
    if not scenarios:
        return
    fig, axes = plt.subplots(
        len(scenarios),
        len(schedulers),
        figsize=(4 * len(schedulers), 2.6 * len(scenarios)),
        squeeze=False,
        sharey=True,
    )
    for f in results.figures:
        ax = axes[scenarios.index(f.scenario)][schedulers.index(f.scheduler)]
        t = [b[0] / 60 for b in f.bands]
        ax.fill_between(t, [b[1] for b in f.bands], [b[2] for b in f.bands], alpha=0.4, label="p50-p95")
        ax.plot(t, [b[3] for b in f.bands], color="tab:red", linewidth=1, label="max")
        ax.axhline(float(results.options.get("threshold", 0.8)), color="grey", linestyle="--", linewidth=0.8)
        title = f"{f.scenario} / {f.scheduler}: {f.hotspot_node_minutes:.1f} hot node-min"
        if f.rebalance is not None:
            title += f"\n{f.rebalance.evictions} evictions, {f.rebalance.pingpong} ping-pong"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("minutes")
    axes[0][0].set_ylabel("node CPU utilisation")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _estimate_chart(results: QualityResults, plt: Any, path: Path) -> None:
    """Each traced pod: what ksched counted it at and what it measured, beside its true usage,
    from its bind on (a panel per scenario)."""
    traced = [f for f in results.figures if f.estimate is not None]
    fig, axes = plt.subplots(1, len(traced), figsize=(5 * len(traced), 3.2), squeeze=False)
    for ax, f in zip(axes[0], traced, strict=True):
        e = f.estimate
        assert e is not None
        end = max([p[0] for p in e.points] + [e.ramp_s]) + 15.0
        grid = [end * i / 100 for i in range(101)]
        ax.plot(grid, [e.truth(a) for a in grid], color="grey", linestyle="--", label="true usage")
        ax.plot(
            [p[0] for p in e.points], [p[1] for p in e.points], marker="o", markersize=3, label="counted at"
        )
        seen = [p for p in e.points if p[3] is not None]
        ax.plot([p[0] for p in seen], [p[3] for p in seen], marker="x", markersize=3, label="measured")
        ax.axvline(e.settled_at_s, color="tab:green", linewidth=0.8, label="counted as measured")
        ax.set_title(f"{f.scenario} / {f.scheduler}: {e.pod.split('/')[-1]}", fontsize=9)
        ax.set_xlabel("seconds since its bind")
    axes[0][0].set_ylabel("millicores")
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
