"""``ksched simulate`` and ``ksched explain``: their arguments, and results as a table or JSON.

The work is the engine's: :mod:`ksched.engine.cluster_file` reads and sorts a cluster
file, :mod:`ksched.engine.simulation` schedules it, and the live form of ``explain``
reads the API server through :mod:`ksched.commands.live`. They are imported by the
handlers, so the command line starts without numpy, the engine or the Kubernetes client.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ksched.commands import remote
from ksched.commands.exit_codes import EXIT_OK, EXIT_UNPLACED
from ksched.commands.shadow import pod_lines
from ksched.commands.text import printable
from ksched.errors import KschedError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ksched.config import Config
    from ksched.engine import Explanation
    from ksched.engine.cluster_file import ClusterFile
    from ksched.engine.estimate import Choice

# A --metrics file holds a few numbers per node; one past this is a mistaken path.
MAX_METRICS_BYTES = 64 * 1024 * 1024
# How many valid names an error about an unknown one lists.
NAMES_LISTED = 5


def saturation_text(placement: dict[str, Any]) -> str:
    """What a placement's ``saturation`` says, for people: the thresholds a pod was placed
    over, or the metrics whose thresholds left it pending (empty for any other pod)."""
    entries = placement["saturation"]
    if not entries:
        return ""
    if placement["node"] is None:
        return "saturated: " + ", ".join(f"{s['metric']} (onSaturation: {s['policy']})" for s in entries)
    return "placed over threshold: " + ", ".join(_over(s) for s in entries)


def _over(s: dict[str, Any]) -> str:
    """One threshold a pod was placed over: the node's value, what the pod's own estimate added
    there, and the threshold."""
    value = "no value" if s["value"] is None else format(s["value"], "g")
    share = s.get("podShare")
    own = "" if share is None else f" + {share:g} this pod"
    return f"{s['metric']} {value}{own} ({s['threshold']})"


def render_table(placements: list[dict[str, Any]]) -> str:
    rows = [("POD", "NODE", "SCORE", "MESSAGE")]
    for p in placements:
        score = "" if p["score"] is None else f"{p['score']:.1f}"
        message = "; ".join(m for m in (p["message"], saturation_text(p)) if m)
        rows.append((printable(p["pod"]), printable(p["node"] or "<none>"), score, printable(message)))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(
        f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}".rstrip() for r in rows
    )


def json_number(x: Any) -> Any:
    """``x`` with every float that is not finite as None: JSON has no NaN or Infinity (a
    missing metric's raw value is NaN)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: json_number(v) for k, v in x.items()}
    if isinstance(x, list):
        return [json_number(v) for v in x]
    return x


def explanation_json(ex: Explanation, estimates: Sequence[tuple[str, str, Choice]] = ()) -> dict[str, Any]:
    """One explained pod as JSON (every number finite or null); ``estimates``: what the pod
    counts as for each metric with an estimate (:func:`ksched.engine.estimate.pod_estimates`)."""
    explained: dict[str, Any] = json_number(
        {
            "pod": ex.pod,
            "estimates": [
                {
                    "metric": metric,
                    "resource": resource,
                    "amount": c.amount,
                    "scoredAt": c.expected,
                    "source": c.source,
                    "workload": c.workload,
                    "figure": c.figure,
                    "pods": c.pods,
                    "problem": c.problem,
                }
                for metric, resource, c in estimates
            ],
            "node": ex.placement.node,
            "score": ex.placement.score,
            "message": ex.placement.message,
            "nominatedNode": ex.placement.nominated_node,
            "victims": list(ex.placement.victims),
            "saturation": [s.as_json() for s in ex.placement.saturation],
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
    )
    return explained


def estimate_text(resource: str, c: Choice) -> str:
    """One metric's estimate of a pod, as ``explain`` prints it."""

    def quantity(value: int) -> str:
        return f"{value}m" if resource == "cpu" else f"{value}"

    why = {
        "declared": "declared by its ksched.io/expected annotation",
        "limit": "its limit (above its request; learning, until its workload has a figure), or the legacy estimate",
        "configured": "its guess as configured (nothing learned for it here)",
        "workload": f"learned from its workload {c.workload}",
        "cluster-wide": "learned from the recent pods cluster-wide",
        "prior": f"the prior: its workload {c.workload} has too few measured pods",
    }.get(c.source, c.source)
    figure = ""
    if c.figure is not None:
        figure = f", figure {c.figure:.3g}" + (f" from {c.pods} measured pods" if c.pods else "")
    problem = f"; {c.problem}: ignored" if c.problem else ""
    caution = f"; {quantity(c.caution)} of it is the deviations of its spread" if c.caution else ""
    scored = f"; scored at {quantity(c.mean)}" if c.mean is not None else ""
    if c.risk:
        above = quantity(c.amount - c.expected)
        scored += f", and the {above} above by the chance it takes a node past its line, if any"
    return f"{quantity(c.amount)} {resource} ({c.source}: {why}{figure}{caution}{scored}{problem})"


def render_explanation(ex: Explanation, estimates: Sequence[tuple[str, str, Choice]] = ()) -> str:
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
    saturation = saturation_text(ex.placement.as_json())
    if saturation:
        lines.append(saturation)
    lines += [f"estimate: {metric}: {estimate_text(resource, c)}" for metric, resource, c in estimates]
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
    return "\n".join(printable(line) for line in lines)


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
    e.add_argument(
        "--running",
        metavar="ADDRESS",
        help="live form: also ask the running ksched at ADDRESS (HOST:PORT, as `ksched status "
        "--address`, with the kubeconfig's credentials) how its load estimate counts each pod: "
        "measured, ramping, or learned per workload, cluster-wide or as the prior",
    )
    remote.add_certificate_arguments(e)
    e.set_defaults(func=_explain)


def read_metric_values(path: str, cluster: ClusterFile, config: Config) -> dict[str, dict[str, float]]:
    """A ``--metrics`` file: node name -> metric name -> value. Each node must be one of the
    cluster's, each metric one of the configuration's, each value a finite number (or a
    string of one), each key written once: a misspelling would otherwise leave a value out
    without a word."""
    from ksched.config.documents import decode, load_document, read_bounded
    from ksched.objects import name

    data = read_bounded(path, MAX_METRICS_BYTES, "metrics file", KschedError)
    doc = load_document(decode(data, path, KschedError), path, KschedError)
    if not isinstance(doc, dict):
        raise KschedError(f"{path}: expected a mapping of node name to {{metric: number}}")
    nodes = {name(n) for n in cluster.nodes}
    metrics = [m.name for m in config.metrics]
    out: dict[str, dict[str, float]] = {}
    for raw_node, values in doc.items():
        node = str(raw_node)
        if node not in nodes:
            raise KschedError(f"{path}: {node!r}: not a node of the cluster ({_listed(sorted(nodes))})")
        if not isinstance(values, dict):
            raise KschedError(f"{path}: {node!r}: expected a mapping of metric name to number")
        for metric, raw in values.items():
            key = f"{node}.{metric}"
            if metric not in metrics:
                raise KschedError(f"{path}: {key!r}: {metric!r} is not a metric ({_listed(metrics)})")
            out.setdefault(node, {})[str(metric)] = _metric_value(raw, path, key)
    return out


def _metric_value(raw: object, path: str, key: str) -> float:
    try:
        value = float(raw) if isinstance(raw, int | float | str) and not isinstance(raw, bool) else None
    except (ValueError, OverflowError):
        value = None
    if value is None or not math.isfinite(value):
        raise KschedError(f"{path}: {key!r}: {raw!r} is not a finite number")
    return value


def _listed(names: list[str]) -> str:
    if not names:
        return "none defined"
    more = f", ... ({len(names)} in all)" if len(names) > NAMES_LISTED else ""
    return ", ".join(names[:NAMES_LISTED]) + more


def _add_engine_options(p: argparse.ArgumentParser, metrics_help: str) -> None:
    """What ``simulate`` and ``explain`` schedule with: the configuration, metric values, seed, output."""
    p.add_argument("--config", help="KschedConfiguration file (default: one profile named ksched)")
    p.add_argument("--metrics", help=metrics_help)
    p.add_argument("--seed", type=int, default=0, help="tie-break seed (default 0)")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")


def _simulate(args: argparse.Namespace) -> int:
    from ksched.config import load_config
    from ksched.engine.cluster_file import load_cluster
    from ksched.engine.simulation import run_simulation

    config = load_config(args.config)
    cluster = load_cluster(args.cluster, {p.scheduler_name for p in config.profiles})
    offline = read_metric_values(args.metrics, cluster, config) if args.metrics else None
    results, _ = run_simulation(cluster, config, offline, args.seed)
    placements = [p.as_json() for r in results for p in r.placements]
    if args.output == "json":
        print(json.dumps({"placements": placements}, indent=2))
    else:
        print(render_table(placements))
        placed = sum(1 for p in placements if p["node"])
        print(
            f"\n{placed}/{len(placements)} pending pods placed on {len(cluster.nodes)} nodes ({len(cluster.existing)} existing pods)"
        )
        over = sum(1 for p in placements if p["node"] and p["saturation"])
        held = sum(1 for p in placements if not p["node"] and p["saturation"])
        if over or held:
            print(
                f"saturation (every node that passed the other filters over a metric's threshold): "
                f"{over} placed over the threshold, {held} left pending"
            )
    return EXIT_OK if all(p["node"] for p in placements) else EXIT_UNPLACED


def _is_cluster_file(arg: str) -> bool:
    """``explain``'s first argument is a cluster file unless it reads as NAMESPACE/POD."""
    return Path(arg).is_file() or arg.endswith((".yaml", ".yml", ".json")) or arg.count("/") != 1


def _explain(args: argparse.Namespace) -> int:
    from ksched.config import load_config
    from ksched.engine.cluster_file import as_pending, load_cluster, sort_objects
    from ksched.engine.estimate import pod_estimates
    from ksched.engine.simulation import run_simulation
    from ksched.objects import object_key

    config = load_config(args.config)
    names = {p.scheduler_name for p in config.profiles}
    targets = list(args.targets)
    if _is_cluster_file(targets[0]):
        if args.running is not None:
            raise KschedError(
                "--running asks a running ksched: it goes with the live form, not a cluster file"
            )
        source = targets.pop(0)
        cluster = load_cluster(source, names)
        offline = read_metric_values(args.metrics, cluster, config) if args.metrics else None
    else:
        from ksched.commands.live import connect, live_metrics, live_objects

        source = "the live cluster"
        cluster = sort_objects(live_objects(connect(args.kubeconfig)), names, source)
        given = read_metric_values(args.metrics, cluster, config) if args.metrics else {}
        config, values, degraded = live_metrics(config, cluster.nodes)
        for why in degraded:
            print(f"note: metric {why}: left out, as the running scheduler would", file=sys.stderr)
        for node, node_values in given.items():
            values.setdefault(node, {}).update(node_values)
        offline = dict(values)
    if not targets:
        raise KschedError("name at least one pod as NAMESPACE/NAME")
    out: list[tuple[Explanation, list[tuple[str, str, Choice]]]] = []
    status = EXIT_OK
    for pod in targets:
        if "/" not in pod:
            raise KschedError(f"{pod!r}: name pods as NAMESPACE/NAME")
        pod_cluster, note = as_pending(cluster, pod, config.profiles[0].scheduler_name)
        if note is not None:
            print(f"note: {printable(note)}", file=sys.stderr)
        results, _ = run_simulation(pod_cluster, config, offline, args.seed, explain=pod)
        ex = next((r.explanation for r in results if r.explanation is not None), None)
        if ex is None:
            malformed = next((p for r in results for p in r.placements if p.pod == pod), None)
            if malformed is not None:
                print(printable(f"pod {pod}: {malformed.message}"), file=sys.stderr)
                status = EXIT_UNPLACED
                continue
            raise KschedError(f"{pod}: no such pod in {source}")
        target = next((p for p in pod_cluster.pending if object_key(p) == pod), None)
        out.append((ex, pod_estimates(target, config.metrics) if target is not None else []))
        if ex.placement.node is None:
            status = EXIT_UNPLACED
    running = _running_estimates(args, [e.pod for e, _ in out])
    if args.output == "json":
        documents = [explanation_json(e, est) for e, est in out]
        for document, counted in zip(documents, running, strict=False):
            document["running"] = counted
        print(json.dumps(documents, indent=2, allow_nan=False))
    else:
        texts = [render_explanation(e, est) for e, est in out]
        for i, counted in enumerate(running):
            texts[i] += "\n" + "\n".join(
                printable(f"running ksched: {line.strip()}") for line in pod_lines(counted)
            )
        print("\n\n".join(texts))
    return status


def _running_estimates(args: argparse.Namespace, pods: list[str]) -> list[dict[str, Any]]:
    """With ``--running``: how the running ksched's load estimate counts each pod
    (``/status?pod=``); empty without it."""
    if getattr(args, "running", None) is None:
        return []
    target = remote.Target(
        args.running, args.kubeconfig, args.certificate_authority, args.insecure_skip_tls_verify
    )
    return [remote.pod_status(target, pod) for pod in pods]
