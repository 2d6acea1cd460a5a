"""``ksched rebalance --dry-run``: what the rebalancer would move on the live cluster now.

Reads the live cluster through the kubeconfig (:mod:`ksched.commands.live`, as ``explain``
does) and each judged metric once: Prometheus metrics as ``explain`` reads them,
metrics-server metrics from the API server (the rebalancer judges no annotation). One sample
is enough to call a node hot here; the running rebalancer waits for ``hotSamples`` in a row.
Everything else is the live look's: the metric store refreshed once, and the values built by
the rebalancer's load model (:mod:`ksched.loop.metrics.load_model`) with the load estimate of pods
bound within each metric's window, their measured usage and a learned calibration, as the
scheduler counts them. The plan is the engine's
(:func:`ksched.engine.rebalance.plan`), with the steering marks the listed nodes carry, as the
running rebalancer reads them from its node watch; this module prints it. Nothing is evicted or
reserved: rebalancing itself runs inside ``ksched run`` (``rebalance.enabled``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ksched.commands.exit_codes import EXIT_BAD_INPUT, EXIT_OK
from ksched.errors import KschedError

if TYPE_CHECKING:
    from ksched.config import Config, MetricConfig
    from ksched.engine import Engine
    from ksched.engine.cluster_file import ClusterFile
    from ksched.engine.rebalance import Plan
    from ksched.engine.snapshot import Snapshot
    from ksched.loop.client import Kube
    from ksched.loop.metrics.load_model import LoadModel
    from ksched.loop.metrics.metric_sources import MetricStore
    from ksched.loop.metrics.prometheus import PrometheusSource
    from ksched.objects import Obj

NOT_DRY_RUN = (
    "ksched rebalance only previews (--dry-run): rebalancing runs inside `ksched run` "
    "when the configuration sets rebalance.enabled: true"
)
# Skipped candidates of one node and reason listed by name, beyond which they are counted.
NAMES_SHOWN = 3


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = sub.add_parser(
        "rebalance",
        help="preview the rebalancer's moves on the live cluster (--dry-run)",
        description="Read the live cluster and each judged metric once, and print the hot nodes, "
        "each move the rebalancer would make (the pod, source -> target, the metric before -> "
        "after on both) and why the other candidates stay. Evicts nothing: rebalancing runs "
        "inside `ksched run` (rebalance.enabled). "
        "Example: ksched rebalance --dry-run --config ksched.yaml",
    )
    r.add_argument("--dry-run", action="store_true", help="required: print the plan, move nothing")
    r.add_argument("--config", help="KschedConfiguration file (its rebalance section and metrics)")
    r.add_argument("--kubeconfig", help="default $KUBECONFIG or ~/.kube/config")
    r.add_argument("--json", action="store_true", help="print the plan as JSON")
    r.set_defaults(func=_rebalance)


def _rebalance(args: argparse.Namespace) -> int:
    if not args.dry_run:
        print(f"error: {NOT_DRY_RUN}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from ksched.commands.live import connect, live_objects
    from ksched.config import load_config
    from ksched.engine.cluster_file import sort_objects

    config = load_config(args.config)
    kube = connect(args.kubeconfig)
    cluster = sort_objects(
        live_objects(kube), {p.scheduler_name for p in config.profiles}, "the live cluster"
    )
    plan, notes = preview(config, cluster, kube, time.time())
    note_to = sys.stderr if args.json else sys.stdout
    for note in notes:
        print(f"note: {note}", file=note_to)
    if args.json:
        print(json.dumps(plan.as_json(), indent=2))
    else:
        print(render(plan))
    return EXIT_OK


def preview(
    config: Config, cluster: ClusterFile, kube: Kube, now: float, prometheus: PrometheusSource | None = None
) -> tuple[Plan, list[str]]:
    """The plan for the cluster as it is now, and notes on what it judged by. The values are
    built by the live rebalancer's own load model (:meth:`ksched.loop.metrics.load_model.LoadModel.rebalancing`)
    from one refresh of each judged metric's store (``prometheus``: the source to read, by
    default the configured URL's)."""
    from ksched.engine import Engine
    from ksched.engine.rebalance import Budget, plan
    from ksched.loop.rebalancing.hot import HotTracker
    from ksched.loop.rebalancing.rebalancer import steering_view
    from ksched.objects import holds_nomination

    rebalance = config.rebalance
    engine = Engine(config, rebalance.profile)
    metrics = tuple(m for m in config.metrics if engine.profile.uses(m.name))
    lines = rebalance.thresholds(metrics)
    if not lines:
        raise KschedError(
            "rebalance: no metric of profile "
            f"{engine.profile.scheduler_name} has a filter.above or filter.below, nor a "
            "rebalance.metrics high/low pair: nothing can make a node hot"
        )
    notes = [
        f"judged on one sample of each metric; the running rebalancer calls a node hot only after "
        f"hotSamples ({rebalance.hot_samples}) consecutive fresh samples over the line",
        "the values are the running rebalancer's: each sample plus the load estimate of recently "
        "bound pods, as the scheduler counts them",
    ]
    if not rebalance.enabled:
        notes.append("rebalance.enabled is false: `ksched run` moves nothing with this configuration")
    judged = tuple(m for m in metrics if m.name in {line.metric for line in lines})
    store = _read_once(config, judged, cluster, kube, now, prometheus)
    notes += [
        f"metric {why}: not judged (a stale or missing metric never makes a node hot)"
        for why in _unread(store, judged)
    ]
    snapshot = _snapshot(cluster, config.steering.own_marks)
    tracker = HotTracker(lines, samples_needed=1)
    tracker.feed(store.latest)
    look = _load_model(store, snapshot, cluster, engine, now).rebalancing(
        snapshot, {line.metric: line for line in lines}, now
    )
    names = {m.name for m in look.metrics}
    hot = [h for h in tracker.hot() if h.metric in names]
    pods = [p for p in cluster.existing if (p.get("status") or {}).get("phase") == "Running"]
    reserved = [p for p in cluster.pending + cluster.others if holds_nomination(p)]
    budget = Budget(evictions=min(rebalance.max_per_cycle, _rate_allows(rebalance.evictions_per_minute)))
    if rebalance.other_schedulers.scheduler_names and not config.steering.enabled:
        notes.append(
            "rebalance.otherSchedulers is set but steering.enabled is false: no other scheduler's "
            "pod moves (its scheduler could place the replacement back on the hot node)"
        )
    out = plan(
        engine,
        rebalance,
        snapshot,
        pods,
        look.metrics,
        look.values,
        hot,
        look.measured,
        now,
        budget,
        reserved,
        steering_view(config.steering, cluster.nodes),
        look.caution,
    )
    return out, notes + _refused_by_budgets(out, pods, cluster)


def _refused_by_budgets(plan: Plan, pods: Sequence[Obj], cluster: ClusterFile) -> list[str]:
    """A note for each move whose pod a PodDisruptionBudget allowing no disruption now
    covers: the planner proves where a replacement goes, the Eviction API decides whether the
    pod may leave, and would refuse this one."""
    from ksched.objects import meta, pod_key

    by_key = {pod_key(p): p for p in pods}
    notes = []
    for move in plan.moves:
        m = meta(by_key[move.pod])
        name, labels = str(m.get("name")), dict(m.get("labels") or {})
        if any(
            b.disruptions_allowed <= 0 and b.covers(move.namespace, name, labels) for b in cluster.budgets
        ):
            notes.append(
                f"{move.pod}: a PodDisruptionBudget allows no disruption now, so its eviction would be "
                "refused (the running rebalancer then leaves its workload for workloadCooldown)"
            )
    return notes


def _rate_allows(per_minute: float) -> int:
    """The evictions a look may make under ``evictionsPerMinute`` with its token bucket full
    (a minute's worth, at least one; none at a rate of 0), as the running rebalancer allows."""
    import math

    return math.floor(max(per_minute, 1.0)) if per_minute > 0 else 0


def _read_once(
    config: Config,
    metrics: Sequence[MetricConfig],
    cluster: ClusterFile,
    kube: Kube,
    now: float,
    prometheus: PrometheusSource | None,
) -> MetricStore:
    """A metric store as the running one builds it, refreshed once: each judged metric's
    sample and, where its estimate has a pod query, the pods' measured usage."""
    from ksched.loop.metrics.metric_sources import MetricStore
    from ksched.loop.metrics.metrics_server import MetricsServerSource
    from ksched.loop.metrics.prometheus import PrometheusSource

    if prometheus is None and config.prometheus.url:
        prometheus = PrometheusSource(config.prometheus.url, config.prometheus.timeout_s)
    nodes = tuple(cluster.nodes)
    store = MetricStore(
        metrics, prometheus, None, lambda: nodes, MetricsServerSource(kube), clock=lambda: now
    )
    for m in store.live:
        store.refresh(m)
    for m in store.pod_queries:
        store.refresh_pods(m)
    return store


def _unread(store: MetricStore, metrics: Sequence[MetricConfig]) -> list[str]:
    """Why each judged metric has no fresh sample (the rebalancer judges no annotation)."""
    out = []
    for m in metrics:
        if store.latest(m.name) is not None:
            continue
        st = store.state.get(m.name)
        why = st.last_error if st is not None and st.last_error else None
        if m.source not in ("prometheus", "metrics-server"):
            why = f"{m.source} metrics are not judged by the rebalancer"
        out.append(f"{m.name}: {why or f'no value younger than {m.max_age_s:g}s'}")
    return out


def _snapshot(cluster: ClusterFile, own_marks: tuple[str, ...]) -> Snapshot:
    from ksched.engine.snapshot import build_snapshot

    snapshot = build_snapshot(cluster.nodes, cluster.existing, own_marks)
    snapshot.namespaces = cluster.namespaces
    snapshot.spread_selectors = cluster.spread_selectors
    snapshot.budgets = cluster.budgets
    snapshot.storage = cluster.storage
    return snapshot


def _load_model(
    store: MetricStore, snapshot: Snapshot, cluster: ClusterFile, engine: Engine, now: float
) -> LoadModel:
    """The live loop's load model over the cluster's bound pods: each tracked from its bind
    time, as the cluster state tracks the pods its watch brings."""
    from ksched.engine.pods import CountedRequests, pod_requests
    from ksched.errors import MalformedObjectError
    from ksched.loop.metrics.load_model import LoadModel
    from ksched.loop.metrics.recent_pods import RecentPods, bind_time
    from ksched.objects import is_terminal, meta, pod_key, scheduler_name, spec

    recent = RecentPods(store.metrics, clock=lambda: now)
    # The pods bound before the horizon teach their workloads as the live loop's do, all at once.
    bound: dict[str, tuple[str, float, Obj, CountedRequests]] = {}
    recent.settled = bound.get
    recent.settled_per_pass(None)
    for pod in cluster.existing:
        if is_terminal(pod):
            continue  # the live state drops a finished pod
        try:
            requests = pod_requests(pod)
        except MalformedObjectError:
            continue
        key, uid, at = pod_key(pod), str(meta(pod).get("uid")), bind_time(pod, now)
        bound[key] = (uid, at, pod, requests)
        recent.track(
            key,
            uid,
            str(spec(pod).get("nodeName")),
            at,
            scheduler_name(pod) == engine.profile.scheduler_name,
            pod,
            requests,
        )

    return LoadModel(store, recent)


def render(plan: Plan) -> str:
    """The plan for people: hot nodes, moves, and per hot node what stays and why."""
    if not plan.hot:
        return "no hot node: nothing to move"
    out = ["hot nodes:"]
    rows = [("NODE", "METRIC", "VALUE", "HIGH")] + [
        (h.node, h.metric, f"{h.value:.2f}", f"{h.high:.2f}") for h in plan.hot
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    out += ["  " + "  ".join(f"{c:<{w}}" for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    out.append(f"moves ({len(plan.moves)}):" if plan.moves else "moves: none")
    for m in plan.moves:
        out.append(
            f"  {m.pod}: {m.source} -> {m.target}  {m.metric} on {m.source} "
            f"{m.source_before:.2f} -> {m.source_after:.2f}, on {m.target} "
            f"{m.target_before:.2f} -> {m.target_after:.2f}"
        )
    by_node: dict[str, dict[str, list[str]]] = {}
    for s in plan.skipped:
        by_node.setdefault(s.node, {}).setdefault(s.reason, []).append(s.pod)
    for node, reasons in by_node.items():
        count = sum(len(p) for p in reasons.values())
        out.append(f"skipped on {node} ({count}):")
        for reason, pods in reasons.items():
            if len(pods) == 1:
                out.append(f"  {pods[0]}: {reason}")
                continue
            names = ", ".join(pods[:NAMES_SHOWN])
            more = f" and {len(pods) - NAMES_SHOWN} more" if len(pods) > NAMES_SHOWN else ""
            out.append(f"  {len(pods)} pods: {reason} ({names}{more})")
    return "\n".join(out)
