"""Offline scheduling of a cluster file: ``ksched simulate`` and ``ksched explain``.

Owns reading Kubernetes objects as ``kubectl get -o yaml`` prints them (a
``kind: List`` or multi-document YAML/JSON), splitting pods into existing
(``spec.nodeName`` set) and pending (their ``schedulerName`` names a
profile), offline metric values, and rendering results as a table or JSON.
Live explain (:mod:`ksched.commands.live`) reads the same objects from the
API server and feeds them to the same :func:`sort_objects` and
:func:`run_simulation`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import yaml

from ksched.commands.exit_codes import EXIT_OK, EXIT_UNPLACED
from ksched.config import Config, MetricConfig, load_config
from ksched.engine import BatchResult, Engine, Explanation, GangStatus, commit_placements
from ksched.engine.disruption_budgets import DisruptionBudget, disruption_budget
from ksched.engine.gangs import POD_GROUP_API, PodGroup, pod_group, pod_group_of
from ksched.engine.podtable import SELECTOR_OWNER_KINDS, SpreadSelectors
from ksched.engine.snapshot import Snapshot, build_snapshot
from ksched.engine.volumes import STORAGE_KINDS, Storage
from ksched.errors import ClusterFileError, KschedError, MalformedObjectError
from ksched.loop.metric_sources import annotation_column, to_number
from ksched.objects import Obj, meta, pod_key, scheduler_name, spec

# (apiVersion, kind) of the objects the volume plugins read.
STORAGE_OBJECT_KINDS = {(api_version, kind) for _, api_version, kind in STORAGE_KINDS}
# A cluster file above this is refused before parsing: it would not fit the
# machines ksched runs on, and the limit keeps a mistaken path from hanging.
MAX_CLUSTER_FILE_BYTES = 512 * 1024 * 1024


@dataclass
class ClusterFile:
    nodes: list[Obj]
    existing: list[Obj]
    pending: list[Obj]
    ignored: int
    # Namespace -> labels (affinity terms' namespaceSelector) and PodGroups (gangs).
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    pod_groups: list[PodGroup] = field(default_factory=list)
    # Services and workload controllers (default topology spreading).
    spread_selectors: SpreadSelectors = field(default_factory=SpreadSelectors)
    # PodDisruptionBudgets (preemption prefers victims no budget protects).
    budgets: list[DisruptionBudget] = field(default_factory=list)
    # Unbound pods of other schedulers (counted in ``ignored``; ``explain`` can name them).
    others: list[Obj] = field(default_factory=list)
    # PersistentVolumes, PersistentVolumeClaims, StorageClasses and CSINodes (the volume plugins).
    storage: Storage = field(default_factory=Storage)


def _documents(text: str, source: str) -> Iterator[Any]:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            yield json.loads(text)
            return
        except json.JSONDecodeError as err:
            raise ClusterFileError(f"{source}: not valid JSON: {err}") from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        yield from yaml.load_all(text, Loader=loader)
    except yaml.YAMLError as err:
        raise ClusterFileError(f"{source}: not valid YAML: {err}") from None


def _objects(doc: Any, source: str) -> Iterator[Obj]:
    if doc is None:
        return
    if isinstance(doc, list):
        for d in doc:
            yield from _objects(d, source)
        return
    if not isinstance(doc, dict):
        raise ClusterFileError(f"{source}: expected Kubernetes objects, found {type(doc).__name__}")
    if doc.get("kind") == "List" or (str(doc.get("kind", "")).endswith("List") and "items" in doc):
        for item in doc.get("items") or []:
            yield from _objects(item, source)
        return
    yield doc


def read_objects(path: str | Path) -> list[Obj]:
    """The Kubernetes objects of a cluster file."""
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError as err:
        raise ClusterFileError(f"cannot read {path}: {err.strerror}") from None
    if size > MAX_CLUSTER_FILE_BYTES:
        raise ClusterFileError(f"{path}: {size} bytes is over the {MAX_CLUSTER_FILE_BYTES}-byte limit")
    text = p.read_text()
    return [obj for doc in _documents(text, str(path)) for obj in _objects(doc, str(path))]


def load_cluster(path: str | Path, scheduler_names: set[str]) -> ClusterFile:
    """Read a cluster file and sort its pods into existing, pending and ignored."""
    return sort_objects(read_objects(path), scheduler_names, str(path))


def sort_objects(objects: list[Obj], scheduler_names: set[str], source: str) -> ClusterFile:
    """Nodes, pods (existing, pending for a profile, ignored) and the objects scheduling reads."""
    nodes, existing, pending, others = [], [], [], []
    namespaces: dict[str, dict[str, str]] = {}
    groups: list[PodGroup] = []
    budgets: list[DisruptionBudget] = []
    selectors = SpreadSelectors()
    storage = Storage()
    ignored = 0
    for obj in objects:
        kind = obj.get("kind")
        if (str(obj.get("apiVersion")), str(kind)) in STORAGE_OBJECT_KINDS:
            storage.update(str(kind), obj, deleted=False)
        elif kind == "Node":
            nodes.append(obj)
        elif kind == "Namespace":
            labels = meta(obj).get("labels") or {}
            namespaces[str(meta(obj).get("name", ""))] = {str(k): str(v) for k, v in labels.items()}
        elif (str(obj.get("apiVersion")), str(kind)) in SELECTOR_OWNER_KINDS:
            selectors.update(str(obj.get("apiVersion")), str(kind), obj)
        elif kind == "PodGroup" and obj.get("apiVersion") == POD_GROUP_API:
            try:
                groups.append(pod_group(obj))
            except MalformedObjectError as err:
                raise ClusterFileError(f"{source}: {err}") from None
        elif kind == "PodDisruptionBudget" and obj.get("apiVersion") == "policy/v1":
            try:
                budgets.append(disruption_budget(obj))
            except MalformedObjectError as err:
                raise ClusterFileError(f"{source}: {err}") from None
        elif kind == "Pod":
            if spec(obj).get("nodeName"):
                existing.append(obj)
            elif scheduler_name(obj) in scheduler_names:
                pending.append(obj)
            else:
                others.append(obj)
                ignored += 1
        else:
            ignored += 1
    return ClusterFile(
        nodes, existing, pending, ignored, namespaces, groups, selectors, budgets, others, storage
    )


def as_pending(cluster: ClusterFile, key: str, profile: str) -> tuple[ClusterFile, str | None]:
    """The cluster with pod ``key`` pending for a profile, so ``explain`` can name any pod:
    a bound pod is taken off its node (where would ksched place it now, without it), a pod
    of another scheduler gets ``profile``. Returns the cluster and a note saying what changed."""
    if any(pod_key(p) == key for p in cluster.pending):
        return cluster, None
    bound = next((p for p in cluster.existing if pod_key(p) == key), None)
    if bound is not None:
        name = scheduler_name(bound)
        if name not in {scheduler_name(p) for p in cluster.pending} | {profile}:
            name = profile
        unbound = {**bound, "spec": {**spec(bound), "schedulerName": name}}
        del unbound["spec"]["nodeName"]
        note = f"{key} is bound to {spec(bound)['nodeName']}: explained as if pending, without it ({name})"
        existing = [p for p in cluster.existing if p is not bound]
        return replace(cluster, existing=existing, pending=[*cluster.pending, unbound]), note
    other = next((p for p in cluster.others if pod_key(p) == key), None)
    if other is None:
        return cluster, None
    moved = {**other, "spec": {**spec(other), "schedulerName": profile}}
    note = f"{key} is for {scheduler_name(other)}: explained under profile {profile}"
    others = [p for p in cluster.others if p is not other]
    return replace(cluster, pending=[*cluster.pending, moved], others=others), note


def metric_matrix(
    snapshot: Snapshot, metrics: tuple[MetricConfig, ...], offline: dict[str, Any] | None
) -> npt.NDArray[np.float64]:
    """Node x metric values: annotation metrics from the nodes, the rest from ``--metrics``."""
    values = np.full((snapshot.count, len(metrics)), np.nan, dtype=np.float64)
    for j, m in enumerate(metrics):
        if m.source == "annotation" and m.annotation:
            values[:, j] = annotation_column(snapshot, m.annotation)
        for i, node in enumerate(snapshot.node_names):
            given = (offline or {}).get(node) or {}
            if m.name in given:
                values[i, j] = to_number(given[m.name])
    return values


def load_offline_metrics(path: str | Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise KschedError(f"cannot read metrics file {path}: {err}") from None
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise KschedError(f"{path}: expected a mapping of node name to {{metric: number}}")
    return doc


def run_simulation(
    cluster: ClusterFile,
    config: Config,
    offline: dict[str, Any] | None,
    seed: int,
    explain: str | None = None,
) -> tuple[list[BatchResult], Snapshot]:
    """Schedule every pending pod, profile by profile, on one shared snapshot."""
    snapshot = build_snapshot(cluster.nodes, cluster.existing)
    snapshot.namespaces = cluster.namespaces
    snapshot.spread_selectors = cluster.spread_selectors
    snapshot.budgets = cluster.budgets
    snapshot.storage = cluster.storage
    values = metric_matrix(snapshot, config.metrics, offline)
    bound: dict[str, int] = {}
    for pod in cluster.existing:
        group = pod_group_of(pod)
        if group is not None:
            bound[group] = bound.get(group, 0) + 1
    groups = {g.key: GangStatus(g.min_member, bound.get(g.key, 0)) for g in cluster.pod_groups}
    results = []
    by_profile: dict[str, list[Obj]] = {}
    for pod in cluster.pending:
        by_profile.setdefault(scheduler_name(pod), []).append(pod)
    for profile in config.profiles:
        pods = by_profile.get(profile.scheduler_name, [])
        if not pods:
            continue
        engine = Engine(config, profile.scheduler_name, seed=seed)
        result = engine.schedule(snapshot, pods, values, explain=explain, groups=groups)
        results.append(result)
        snapshot = commit_placements(snapshot, result.placements)
    return results, snapshot


def render_table(placements: list[dict[str, Any]]) -> str:
    rows = [("POD", "NODE", "SCORE", "MESSAGE")]
    for p in placements:
        score = "" if p["score"] is None else f"{p['score']:.1f}"
        rows.append((p["pod"], p["node"] or "<none>", score, p["message"] or ""))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(
        f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}".rstrip() for r in rows
    )


def explanation_json(ex: Explanation) -> dict[str, Any]:
    return {
        "pod": ex.pod,
        "node": ex.placement.node,
        "score": ex.placement.score,
        "message": ex.placement.message,
        "nominatedNode": ex.placement.nominated_node,
        "victims": list(ex.placement.victims),
        "weights": ex.weights,
        "nodes": [
            {
                "node": n.node,
                "feasible": n.feasible,
                "chosen": n.chosen,
                "filter": None if n.feasible else {"plugin": n.plugin, "reasons": n.reasons},
                "scores": n.scores,
                "total": n.total,
            }
            for n in ex.nodes
        ],
    }


def render_explanation(ex: Explanation) -> str:
    lines = [
        f"pod {ex.pod}: "
        + (
            f"placed on {ex.placement.node} (score {ex.placement.score:.1f})"
            if ex.placement.node
            else f"unschedulable: {ex.placement.message}"
        )
    ]
    if ex.placement.nominated_node:
        lines.append(
            f"preemption: nominated node {ex.placement.nominated_node}, victims: {', '.join(ex.placement.victims) or 'none'}"
        )
    plugins = list(ex.weights)
    lines.append("weights: " + ", ".join(f"{p}={w:g}" for p, w in ex.weights.items()))
    feasible = sorted((n for n in ex.nodes if n.feasible), key=lambda n: -(n.total or 0.0))
    for n in feasible:
        mark = "*" if n.chosen else " "
        parts = ", ".join(
            f"{p} {n.scores[p]['raw']:g}->{n.scores[p]['normalized']:g}x{ex.weights[p]:g}" for p in plugins
        )
        lines.append(f"{mark} {n.node}: total {n.total:.1f} ({parts})")
    for n in ex.nodes:
        if not n.feasible:
            lines.append(f"  {n.node}: filtered by {n.plugin}: {'; '.join(n.reasons)}")
    return "\n".join(lines)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``ksched simulate`` and ``ksched explain``."""
    s = sub.add_parser(
        "simulate",
        help="schedule the pending pods of a cluster file offline",
        description="Schedule the pending pods of CLUSTER (objects as `kubectl get -o yaml` prints them). "
        "Example: ksched simulate cluster.yaml -o json",
    )
    s.add_argument("cluster", help="YAML or JSON file of Nodes and Pods (kind: List or multi-document)")
    _add_engine_options(s, "YAML mapping node-name: {metric-name: number}")
    s.set_defaults(func=_simulate)

    e = sub.add_parser(
        "explain",
        help="show per node why a pod was placed where it was",
        description="Per node: the failing filter and reason, or each score plugin's raw, normalized "
        "and weighted score. With a cluster file first, offline; without, the live cluster through "
        "the kubeconfig and one read of the configured live metrics. A bound pod is explained as "
        "if pending, without it; a pod of another scheduler under the first profile. "
        "Examples: ksched explain cluster.yaml default/web-0; ksched explain default/web-0",
    )
    e.add_argument(
        "targets",
        nargs="+",
        metavar="[CLUSTER] NAMESPACE/POD",
        help="a cluster file (omit it to read the live cluster), then one or more pods",
    )
    _add_engine_options(e, "YAML mapping node-name: {metric-name: number} (overrides live values)")
    e.add_argument("--kubeconfig", help="live form: default $KUBECONFIG or ~/.kube/config")
    e.set_defaults(func=_explain)


def _add_engine_options(p: argparse.ArgumentParser, metrics_help: str) -> None:
    """What ``simulate`` and ``explain`` schedule with: the configuration, metric values, seed, output."""
    p.add_argument("--config", help="KschedConfiguration file (default: one profile named ksched)")
    p.add_argument("--metrics", help=metrics_help)
    p.add_argument("--seed", type=int, default=0, help="tie-break seed (default 0)")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")


def _simulate(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    cluster = load_cluster(args.cluster, {p.scheduler_name for p in config.profiles})
    results, _ = run_simulation(cluster, config, load_offline_metrics(args.metrics), args.seed)
    placements = [p.as_json() for r in results for p in r.placements]
    if args.output == "json":
        print(json.dumps({"placements": placements}, indent=2))
    else:
        print(render_table(placements))
        placed = sum(1 for p in placements if p["node"])
        print(
            f"\n{placed}/{len(placements)} pending pods placed on {len(cluster.nodes)} nodes ({len(cluster.existing)} existing pods)"
        )
    return EXIT_OK if all(p["node"] for p in placements) else EXIT_UNPLACED


def _is_cluster_file(arg: str) -> bool:
    """``explain``'s first argument is a cluster file unless it reads as NAMESPACE/POD."""
    return Path(arg).is_file() or arg.endswith((".yaml", ".yml", ".json")) or arg.count("/") != 1


def _explain(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    names = {p.scheduler_name for p in config.profiles}
    targets = list(args.targets)
    offline = load_offline_metrics(args.metrics)
    if _is_cluster_file(targets[0]):
        source = targets.pop(0)
        cluster = load_cluster(source, names)
    else:
        from ksched.commands.live import connect, live_metrics, live_objects

        source = "the live cluster"
        cluster = sort_objects(live_objects(connect(args.kubeconfig)), names, source)
        config, values, degraded = live_metrics(config, cluster.nodes)
        for why in degraded:
            print(f"note: metric {why}: left out, as the running scheduler would", file=sys.stderr)
        for node, given in (offline or {}).items():
            values.setdefault(node, {}).update(given)
        offline = dict(values)
    if not targets:
        raise KschedError("name at least one pod as NAMESPACE/NAME")
    out = []
    status = EXIT_OK
    for pod in targets:
        if "/" not in pod:
            raise KschedError(f"{pod!r}: name pods as NAMESPACE/NAME")
        pod_cluster, note = as_pending(cluster, pod, config.profiles[0].scheduler_name)
        if note is not None:
            print(f"note: {note}", file=sys.stderr)
        results, _ = run_simulation(pod_cluster, config, offline, args.seed, explain=pod)
        ex = next((r.explanation for r in results if r.explanation is not None), None)
        if ex is None:
            malformed = next((p for r in results for p in r.placements if p.pod == pod), None)
            if malformed is not None:
                print(f"pod {pod}: {malformed.message}", file=sys.stderr)
                status = EXIT_UNPLACED
                continue
            raise KschedError(f"{pod}: no such pod in {source}")
        out.append(ex)
        if ex.placement.node is None:
            status = EXIT_UNPLACED
    if args.output == "json":
        print(json.dumps([explanation_json(e) for e in out], indent=2))
    else:
        print("\n\n".join(render_explanation(e) for e in out))
    return status
