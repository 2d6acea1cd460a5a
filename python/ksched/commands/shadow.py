"""``ksched shadow report`` and ``ksched status``: read a running ksched and print it.

Both read the JSON the running process serves on its health address
(``/shadow``, ``/status``; see :mod:`ksched.loop.server`), over HTTPS with the kubeconfig's
credentials (:mod:`ksched.commands.remote`); the shadow
report can also be built from the JSON lines ``shadow.log`` appends, through
the same :class:`~ksched.loop.scheduling.shadow.ShadowLedger` the process keeps, imported
when a report is built (it brings the engine), not with the command line: its decisions and
the placement outcomes appended after them (lines with ``"type": "outcome"``).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ksched.commands import remote
from ksched.commands.exit_codes import EXIT_OK
from ksched.commands.text import printable
from ksched.errors import KschedError

# Longest message shown in a table cell.
CELL = 100
# A shadow log grows a line per decision; one past this is not read (split it first).
MAX_SHADOW_LOG_BYTES = 512 * 1024 * 1024


def report_from_log(path: str | Path, keep: int) -> dict[str, Any]:
    """The report of the decisions a ``shadow.log`` file holds (the last ``keep`` listed)."""
    from ksched.config.documents import decode, read_bounded
    from ksched.loop.scheduling.outcomes import Judgement
    from ksched.loop.scheduling.shadow import Decision, ShadowLedger

    if keep < 1:
        raise KschedError(f"--keep {keep}: list at least 1 decision")
    ledger = ShadowLedger(keep)
    data = read_bounded(path, MAX_SHADOW_LOG_BYTES, "shadow log", KschedError)
    lines = decode(data, str(path), KschedError).splitlines()
    first: Decision | None = None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if isinstance(obj, dict) and obj.get("type") == "outcome":
                ledger.judge(Judgement.from_json(obj))
                continue
            d = Decision.from_json(obj)
        except (ValueError, TypeError, LookupError, AttributeError) as err:
            raise KschedError(f"{path}:{i}: not a shadow decision: {err}") from None
        except RecursionError:
            raise KschedError(f"{path}:{i}: not a shadow decision: nested too deeply") from None
        ledger.record(d)
        first = first or d
    if first is not None:
        # The counters cover the whole file, beyond the ``keep`` decisions listed.
        ledger.started = first.at
    return ledger.report()


def _clip(text: str) -> str:
    return text if len(text) <= CELL else text[: CELL - 3] + "..."


def _table(rows: Sequence[tuple[str, ...]], right: tuple[int, ...] = ()) -> list[str]:
    rows = [tuple(printable(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)]
        out.append("  " + "  ".join(cells).rstrip())
    return out


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def render_report(report: dict[str, Any], source: str) -> str:
    from ksched.loop.scheduling.shadow import PENDING

    counts = report["counts"]
    total = report["total"]
    agreement = report["agreement"]
    lines = [
        f"shadow report from {source} (since {_when(report['since'])})",
        f"{total} pods compared: {counts.get('same', 0)} same node, {counts.get('other', 0)} other node, "
        f"{counts.get('pending', 0)} pending; agreement "
        + (f"{agreement:.1%}" if agreement is not None else "n/a"),
    ]
    lines += _outcome_lines(report.get("outcomes"))
    if report["reasons"]:
        lines += ["", "disagreements by plugin and metric:"]
        rows: list[tuple[str, ...]] = [("OUTCOME", "REASON", "PODS", "MEAN GAP")]
        for r in report["reasons"]:
            gap = "-" if r["meanGap"] is None else f"{r['meanGap']:.1f}"
            rows.append((r["outcome"], r["reason"], str(r["decisions"]), gap))
        lines += _table(rows, right=(2, 3))
    if report["differMost"]:
        lines += ["", "pods that differ most:"]
        rows = [("POD", "BOUND TO", "BY", "KSCHED", "GAP", "WHY")]
        for d in report["differMost"]:
            rows.append(
                (
                    d["pod"],
                    d["node"],
                    d["scheduler"],
                    "pending" if d["outcome"] == PENDING else str(d["ksched_node"]),
                    "-" if d["gap"] is None else f"{d['gap']:.1f}",
                    _clip(_why(d)),
                )
            )
        lines += _table(rows, right=(4,))
    return "\n".join(printable(line) for line in lines)


def _outcome_lines(o: dict[str, Any] | None) -> list[str]:
    """Whether the other scheduler's placements went hot, and ksched's estimate for its own."""
    if not o or not o["judged"]:
        return ["", "outcomes: no placement judged yet (each is, once its horizon has ended)"]
    counts, mine = o["counts"], o["kschedCountsEstimated"]
    lines = [
        "",
        f"outcomes: {o['judged']} placements judged: {counts['went_hot']} nodes went hot "
        f"({_percent(o['wentHotShare'])}), {counts['stayed_cool']} stayed cool, "
        f"{counts['unmeasured']} unmeasured",
        f"  hot node-minutes, the other scheduler's placements:  {o['hotNodeMinutes']:.1f}",
        f"  hot node-minutes, ksched's choices (estimated):       {o['kschedHotNodeMinutesEstimated']:.1f} "
        f"({mine['went_hot']} of its nodes would have gone hot, {_percent(o['kschedWentHotShareEstimated'])})",
    ]
    if o["leftPending"]:
        lines.append(
            f"  left out: {o['leftPending']} placements ksched would have left pending "
            f"({o['leftPendingHotNodeMinutes']:.1f} hot node-minutes)"
        )
    lines.append(
        f"  hot node-minutes avoided (estimated):                 {o['hotNodeMinutesAvoidedEstimated']:.1f}"
    )
    return lines


def _percent(share: float | None) -> str:
    return f"{share:.1%}" if share is not None else "n/a"


def _why(d: dict[str, Any]) -> str:
    from ksched.loop.scheduling.shadow import OTHER

    reason = d["reason"] or "unknown"
    if d["outcome"] == OTHER and d["gap"] is not None:
        return (
            f"{reason} (+{d['differences'].get(reason, 0.0):.1f}); "
            f"scores {d['ksched_score']:.1f} vs {d['node_score']:.1f}"
        )
    if d["outcome"] == OTHER:
        return f"{reason} filters {d['node']}: {d['detail'] or ''}".rstrip(": ")
    return f"{reason}: {d['detail'] or ''}".rstrip(": ")


def render_status(status: dict[str, Any], address: str) -> str:
    lines = [f"ksched at {address}: {status['mode']} (identity {status['identity']})"]
    if not status["leaderElection"]:
        lead = "leader election off" + (" (shadow mode binds nothing)" if status["mode"] == "shadow" else "")
    elif status["leading"]:
        lead = f"{status['identity']} (this replica)"
    elif status["leader"]:
        lead = f"{status['leader']} (this replica follows)"
    else:
        lead = "none"
    lines.append(f"leader:    {lead}")
    sharding = status.get("sharding") or {}
    if sharding.get("enabled"):
        members = sharding["members"]
        binds = "binds onto" if sharding["active"] else "not binding yet; owns"
        lines.append(
            f"sharding:  {len(members)} live replica(s) ({', '.join(members) or 'none read yet'}); this one "
            f"{binds} {sharding['ownedNodes']} node(s); {sharding['handedOver']} pod(s) handed over"
        )
    lines.append(f"informers: {'synced' if status['synced'] else 'not synced yet'}")
    queues = status["queues"]
    lines.append(
        "queues:    "
        + ", ".join(f"{q} {n}" for q, n in queues.items())
        + f"; {status['bound']} pods bound since start"
    )
    metrics = status["metrics"]
    if metrics["degraded"]:
        lines.append("metrics:   degraded: " + "; ".join(metrics["degraded"]))
    elif metrics["live"]:
        lines.append(f"metrics:   {len(metrics['live'])} live metric(s) fresh: {', '.join(metrics['live'])}")
    else:
        lines.append("metrics:   no live metrics configured")
    lines += [f"estimate:  {name}: {_learned(c)}" for name, c in (metrics.get("learned") or {}).items()]
    shadow = status.get("shadow")
    if shadow:
        agreement = shadow["agreement"]
        lines.append(
            f"shadow:    {shadow['total']} pods compared, agreement "
            + (f"{agreement:.1%}" if agreement is not None else "n/a")
        )
    if "pod" in status:
        lines += pod_lines(status["pod"])
    lines += _placement_lines(status.get("outcomes"))
    lines += _rebalance_lines(status.get("rebalance"))
    left_out = status.get("leftOut") or {}
    if left_out.get("count"):
        lines.append(f"left out ({left_out['count']}): objects ksched cannot read, the rest schedules:")
        lines += [f"  {o['kind']} {o['name']}: {_clip(o['problem'])}" for o in left_out.get("objects") or []]
    failures = status["failures"]
    if failures:
        lines.append(f"recent failures ({len(failures)}):")
        rows: list[tuple[str, ...]] = [("WHEN", "POD", "REASON", "MESSAGE")]
        for f in reversed(failures):
            rows.append(
                (time.strftime("%H:%M:%S", time.gmtime(f["at"])), f["pod"], f["reason"], _clip(f["message"]))
            )
        lines += _table(rows)
    else:
        lines.append("recent failures: none")
    return "\n".join(printable(line) for line in lines)


# What each source of a pod's count means, as ``ksched status --pod`` says it.
_COUNTED = {
    "measured": "its measured usage: it settled",
    "ramping": (
        "ramping up: the larger of its estimate and what its climb says it will reach (where its samples"
        " show no rise, only the share of that excess that the pods before it make likely)"
    ),
    "workload": "learned from its workload {workload}",
    "prior": "the prior: its workload {workload} has no measured pod yet",
    "cluster-wide": "learned from the recent pods cluster-wide",
    "configured": "its guess as configured (nothing learned for it)",
    "limit": "its limit (above its request; learning, until its workload has a figure), or a legacy estimate",
    "declared": "declared by its ksched.io/expected annotation",
}


def pod_lines(pod: dict[str, Any]) -> list[str]:
    """How the load estimate counts one pod (``/status?pod=``), as ``ksched status --pod``
    shows it."""
    state, estimates = pod["state"], pod["estimates"]
    if state == "not counted":
        return [
            f"pod {pod['pod']}: not counted by any estimate: neither pending nor bound within the "
            "metrics' windows (their samples show it), or unknown to ksched"
        ]
    if not estimates:
        return [
            f"pod {pod['pod']}: {state}" + ("; no metric has a load estimate" if state == "pending" else "")
        ]
    lines = [f"pod {pod['pod']}: {state}"]
    for e in estimates:
        if e.get("metric") is None:
            lines.append(f"  cannot be read: {e.get('problem')}")
            continue
        cpu = e.get("resource") == "cpu"
        amount = f"{e['counts']:.0f}m" if cpu else f"{e['counts']:g}"
        why = _COUNTED.get(e["source"], e["source"]).format(workload=e.get("workload") or "(none)")
        extra = []
        if e.get("measured") is not None:
            extra.append(f"measured {e['measured']:.0f}m" if cpu else f"measured {e['measured']:g}")
        if e.get("figure") is not None:
            extra.append(
                f"figure {e['figure']:.3g}" + (f" from {e['pods']} measured pods" if e.get("pods") else "")
            )
        if e.get("boundSecondsAgo") is not None:
            extra.append(f"bound {e['boundSecondsAgo']:g}s ago")
        if e.get("problem"):
            extra.append(f"{e['problem']}: ignored")
        tail = f"; {', '.join(extra)}" if extra else ""
        lines.append(
            f"  {e['metric']}: counts {amount} {e.get('resource') or ''} ({e['source']}: {why}{tail})"
        )
    return lines


def _placement_lines(o: dict[str, Any] | None) -> list[str]:
    """The placement outcomes in ``ksched status``: the share of ksched's placements whose node
    went hot within the horizon, and of other schedulers'."""
    if not o or not o.get("enabled"):
        return ["outcomes:  off (no metric has a filter line)"]

    def part(who: str, c: dict[str, Any]) -> str:
        judged = c["wentHot"] + c["stayedCool"]
        return f"{who} {c['wentHot']} of {judged} went hot ({_percent(c['wentHotShare'])})"

    return [
        f"outcomes:  within {o['horizonSeconds']:g}s of the placement: "
        f"{part('ksched', o['ksched'])}, {part('other schedulers', o['other'])}; "
        f"{o['waiting']} not judged yet"
    ]


def _learned(c: dict[str, Any]) -> str:
    """What a learned estimate learned, as ``ksched status`` shows it."""
    parts = []
    if c["ratio"] is not None:
        parts.append(
            f"pods use {c['ratio']:.2f}x their guess (sd {c['ratioStdDev']:.2f}, {c['ratioPods']} measured)"
        )
    if c["bestEffort"] is not None:
        cpu = c.get("resource") == "cpu"

        def amount(v: float) -> str:
            return f"{v:.0f}m" if cpu else f"{v / 2**20:.0f}Mi" if c.get("resource") == "memory" else f"{v:g}"

        parts.append(
            f"BestEffort pods use {amount(c['bestEffort'])} (sd {amount(c['bestEffortStdDev'])}, "
            f"{c['bestEffortPods']} measured)"
        )
    top = (c.get("workloads") or [])[:3]
    if top:
        parts.append(
            f"{c['workloadCount']} workload(s) learned, e.g. "
            + ", ".join(
                f"{w['workload']} {w['ratio']:.2f}x ({w['ratioPods']} pods)"
                for w in top
                if w["ratio"] is not None
            )
        )
    if c.get("ramping"):
        parts.append(f"{len(c['ramping'])} pod(s) ramping up")
    return "; ".join(parts) or "too few recent pods measured yet: the configured guesses stand"


def _rebalance_lines(rebalance: dict[str, Any] | None) -> list[str]:
    """The rebalancer's part of ``ksched status``: its mode, the hot nodes, what it evicted
    (or, in shadow mode, would have), the last look's moves and why the other pods stayed."""
    if not rebalance or not rebalance.get("enabled"):
        return ["rebalance: off"]
    mode = rebalance["mode"]
    hot = rebalance["hot"]
    nodes = ", ".join(f"{h['node']} ({h['metric']} {h['value']:.2f}, high {h['high']:.2f})" for h in hot)
    blocked = rebalance["blocked"]
    done = (
        f"would have evicted {rebalance['wouldEvict']}"
        if mode == "shadow"
        else f"{rebalance['evictions']} evicted, {blocked['pdb']} refused by a budget, {blocked['failed']} failed"
    )
    lines = [
        f"rebalance: {mode}; {len(hot)} hot: {nodes or 'none'}",
        f"           {done} since start; {len(rebalance['reservations'])} reservation(s) held, "
        f"{rebalance.get('settling', 0)} replacement(s) growing back",
    ]
    if mode == "follower":
        lines.append("           the leader moves pods; this replica only tracks hot nodes")
    last = rebalance.get("lastPlan")
    if last is None:
        return lines
    verb = "would move" if mode == "shadow" else "moved"
    for m in last["moves"]:
        lines.append(
            f"  {verb} {m['pod']} {m['source']} -> {m['target']}: {m['metric']} {m['sourceBefore']:.2f} -> "
            f"{m['sourceAfter']:.2f} there, {m['targetBefore']:.2f} -> {m['targetAfter']:.2f} on {m['target']}"
        )
    skipped = sorted(last["skipped"].items(), key=lambda kv: (-kv[1], kv[0]))
    if skipped:
        lines.append("  not moved: " + "; ".join(f"{n} {reason}" for reason, n in skipped))
    return lines


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``ksched shadow report`` and ``ksched status``."""
    sh = sub.add_parser(
        "shadow",
        help="read what a shadow-mode ksched would have done with the pods other schedulers bound",
        description="Example: ksched shadow report --address 127.0.0.1:10259",
    )
    shsub = sh.add_subparsers(dest="shadow_command", required=True)
    rep = shsub.add_parser(
        "report",
        help="agreement rate, disagreements by plugin and metric, the pods that differ most, "
        "hot node-minutes avoided (estimated)",
        description="Reads /shadow from a running `ksched run --shadow`, or the JSON lines of its "
        "shadow.log. Example: ksched shadow report --address 127.0.0.1:10259",
    )
    remote.add_arguments(rep)
    rep.add_argument("--file", help="read a shadow.log file instead of a running ksched")
    rep.add_argument("--keep", type=int, default=1000, help="with --file: decisions listed (default 1000)")
    rep.add_argument("-o", "--output", choices=("table", "json"), default="table")
    rep.set_defaults(func=_shadow_report)

    st = sub.add_parser(
        "status",
        help="leader, queue sizes, degraded metrics, placement outcomes and recent failures of a "
        "running ksched",
        description="Reads /status from a running ksched. Example: ksched status --address 127.0.0.1:10259",
    )
    remote.add_arguments(st)
    st.add_argument(
        "--pod",
        metavar="NAMESPACE/NAME",
        help="also show how the load estimate counts this pod: a recent one as measured, ramping "
        "or estimated (and from what), a pending one as it would count if placed now",
    )
    st.add_argument("-o", "--output", choices=("table", "json"), default="table")
    st.set_defaults(func=_status)


def _shadow_report(args: argparse.Namespace) -> int:
    if args.file:
        report, source = report_from_log(args.file, args.keep), args.file
    else:
        report, source = remote.fetch(remote.target(args), "/shadow"), args.address
    _print_document(args.output, report, lambda: render_report(report, source))
    return EXIT_OK


def _status(args: argparse.Namespace) -> int:
    status = remote.status(remote.target(args), args.pod)
    _print_document(args.output, status, lambda: render_status(status, args.address))
    return EXIT_OK


def _print_document(output: str, document: object, table: Callable[[], str]) -> None:
    """A running ksched's JSON document as ``-o json`` or ``-o table`` prints it."""
    print(json.dumps(document, indent=2) if output == "json" else table())
