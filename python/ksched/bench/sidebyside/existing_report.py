"""``--existing-pods``' results as a table: one row per scheduler, phases (a)-(e) in columns,
then each process's memory."""

from __future__ import annotations

from typing import Any

from ksched.bench.sidebyside.options import NULL


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def render_existing(doc: dict[str, Any]) -> str:
    fill = doc["fill"]
    hog = f"; CPU hog on {doc['cpu_hog']} core(s)" if doc["cpu_hog"] else ""
    rows = [
        f"{doc['nodes']:,} KWOK nodes, {doc['existing_pods']:,} existing pods filled in {fill['seconds']:.0f} s "
        f"({fill['pods_per_s']:,.0f} pods/s; {fill['most_on_a_node']} on the fullest node); drain "
        f"{doc['drain_pods']:,}, churn {doc['churn_pods']:,} at {doc['churn_rate']:g}/s, steady "
        f"{doc['steady_pods']:,} at {doc['rate']:g}/s{hog}; {doc['machine']}",
        "",
        "| scheduler | (a) start-up s | (a) peak RSS MiB | (d) relist RSS MiB before → after "
        "| (d) loop's longest pause s | (d) create→bind p99 / max ms | (b) drain pods/s | ÷ null binder "
        "| (c) churn p50 / p99 ms | (e) steady p50 / p99 ms | (e) CPU ms per pod | (e) RSS MiB "
        "| (e) KiB per cluster pod | peak RSS MiB | violations |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    null = next((f for f in doc["figures"] if f["scheduler"] == NULL and not f["error"]), None)
    for f in doc["figures"]:
        if f["error"]:
            rows.append(f"| {f['scheduler']} | error: {f['error'].splitlines()[0][:160]} |||||||||||||")
            continue
        ratio = (
            f"{f['drain_pods_per_s'] / null['drain_pods_per_s']:.2f}"
            if null is not None and null["drain_pods_per_s"]
            else "-"
        )
        pause = "-" if f["relist_loop_pause_s"] is None else f"{f['relist_loop_pause_s']:.2f}"
        rows.append(
            f"| {f['scheduler']} | {f['startup_s']:.1f} | {f['startup_peak_rss_mib']:.0f} "
            f"| {f['relist_rss_before_mib']:.0f} → {f['relist_rss_after_mib']:.0f} | {pause} "
            f"| {_ms(f['relist_p99_ms'])} / {_ms(f['relist_max_ms'])} "
            f"| {f['drain_pods_per_s']:,.0f} | {ratio} "
            f"| {_ms(f['churn_p50_ms'])} / {_ms(f['churn_p99_ms'])} ({f.get('churn_rate_sent', 0.0):.0f}/s sent) "
            f"| {_ms(f['steady_p50_ms'])} / {_ms(f['steady_p99_ms'])} | {f['steady_cpu_ms_per_pod']:.2f} "
            f"| {f['steady_rss_mib']:.0f} | {f['rss_kib_per_cluster_pod']:.1f} | {f['peak_rss_mib']:.0f} "
            f"| {len(f['violations'])} |"
        )
    memory = ", ".join(f"{name} {mib:,.0f}" for name, mib in doc["peak_rss_mib"].items())
    rows += ["", f"Peak RSS MiB of the other processes: {memory}."]
    profiles = [(f["scheduler"], f.get("startup_profile") or []) for f in doc["figures"]]
    if any(lines for _, lines in profiles):
        rows += ["", "(a) start-up, from ksched's log:"]
        rows += [f"- {name}: {line}" for name, lines in profiles for line in lines]
    bad = [f"{f['scheduler']}: {v}" for f in doc["figures"] for v in f["violations"]]
    bad += [f"{f['scheduler']}: {f['error']}" for f in doc["figures"] if f["error"]]
    if bad:
        rows += ["", "VIOLATED:", *(f"- {b}" for b in bad)]
    return "\n".join(rows)
