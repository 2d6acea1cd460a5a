"""``ksched bench --hostile``: ksched live on the local control plane, with and without bad inputs.

One ``ksched run`` (its webhook on, a price metric read from a node annotation every node
carries) schedules the side by side's bare workload (100m / 128Mi pods, no constraints) in
two phases:

* **clean**: the cluster as it is;
* **hostile**: with one more node whose allocatable is 10Ei of CPU and memory, one node priced
  ``"inf"``, ``--clients`` idle TCP clients held on the webhook's port and as many half-sent
  HTTP requests held on the HTTP server (:mod:`ksched.bench.fuzz.connections`: a client the
  server closes is opened again, so the pressure lasts the whole phase).

Each phase has two parts:

1. *backlog*: ksched is paused (SIGSTOP), ``--pods`` pods are created for it, it is resumed
   and timed from then to its last bind (pods/s, from a watch's receipt times);
2. *routed*: ``--routed`` pods without a scheduler name are created one at a time through a
   namespace whose pods go through ksched's webhook (``failurePolicy: Fail``); the API
   server's own histogram of that webhook's admission time gives the share answered within
   100 ms and a p99 read from its buckets, and each create's round trip is timed here too.

Then every pod must be bound (nothing lost), no node over-committed, ksched alive with no
traceback in its log. The figures: each phase's rate, the hostile rate over the clean one
(the goal: at least 0.95), and the webhook's latency in each phase (the goal: p99 under 100 ms).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ksched.bench import invariants
from ksched.bench.fuzz import connections
from ksched.bench.pods import create_pods, list_pods, start_ksched_run
from ksched.bench.routing import wait_routing, webhook_configuration
from ksched.bench.sidebyside.watch import FirstSeen
from ksched.bench.sidebyside.workloads import workload_pods
from ksched.cluster import kwok, local
from ksched.cluster.processes import terminate
from ksched.errors import KschedError
from ksched.loop.client import MERGE_PATCH, Kube, Response, load_configuration
from ksched.objects import Obj

PRICE = "hostile.ksched.io/price"
HOOK = "hostile.ksched.io"
MWC = "ksched-bench-hostile"
ROUTE_LABEL = "ksched.io/bench-hostile"
# kube-apiserver's buckets for apiserver_admission_webhook_admission_duration_seconds.
WITHIN_S = 0.1
HUGE = "10Ei"
STALL_S = 60.0


@dataclass
class Phase:
    name: str
    pods: int = 0
    bound: int = 0
    seconds: float = 0.0
    rate: float = 0.0
    routed: int = 0
    webhook_calls: int = 0
    webhook_within_100ms: float = 0.0
    webhook_within_25ms: float = 0.0
    webhook_p99_at_most_ms: float = 0.0
    create_p50_ms: float = 0.0
    create_p99_ms: float = 0.0
    problems: list[str] = field(default_factory=list)


def _must(r: Response, what: str) -> Response:
    if not r.ok:
        raise KschedError(f"{what}: HTTP {r.status}: {r.data[:300].decode(errors='replace')}")
    return r


def _nodes(kube: Kube) -> list[Obj]:
    items: list[Obj] = _must(kube.request("GET", "/api/v1/nodes"), "listing nodes").json()["items"]
    return items


def _config(hook_port: int) -> Obj:
    return {
        "apiVersion": "ksched.io/v1alpha1",
        "kind": "KschedConfiguration",
        "leaderElection": {"leaderElect": False},
        "metrics": [
            {"name": "price", "source": "annotation", "annotation": PRICE, "prefer": "lower", "weight": 2}
        ],
        "webhook": {
            "enabled": True,
            "address": f"127.0.0.1:{hook_port}",
            "hosts": ["127.0.0.1"],
            "configurationName": MWC,
        },
    }


def _price_nodes(kube: Kube, remove: bool = False) -> None:
    """Every node a price (1.0 to 3.0, by its index), or (``remove``) none."""
    for i, node in enumerate(_nodes(kube)):
        name = node["metadata"]["name"]
        patch = {"metadata": {"annotations": {PRICE: None if remove else f"{1 + (i % 5) / 2:g}"}}}
        _must(kube.request("PATCH", f"/api/v1/nodes/{name}", body=patch, content_type=MERGE_PATCH), name)


def _bad_nodes(kube: Kube, first: int) -> list[str]:
    """A node of 10Ei CPU and memory and a node priced "inf", both KWOK's (Ready)."""
    items = kwok.fake_nodes(2, 1, first)["items"]
    huge, inf = items
    for key in ("allocatable", "capacity"):
        huge["status"][key].update({"cpu": HUGE, "memory": HUGE})
    huge["metadata"]["annotations"][PRICE] = "1"
    inf["metadata"]["annotations"][PRICE] = "inf"
    for node in items:
        _must(kube.request("POST", "/api/v1/nodes", body=node), f"creating node {node['metadata']['name']}")
    names = [n["metadata"]["name"] for n in items]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready = [
            n
            for n in names
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (kube.request("GET", f"/api/v1/nodes/{n}").json().get("status") or {}).get(
                    "conditions"
                )
                or []
            )
        ]
        if len(ready) == len(names):
            return names
        time.sleep(0.5)
    raise KschedError(f"the bad nodes {names} did not become Ready")


def _namespace(kube: Kube, name: str, routed: bool) -> str:
    labels = {ROUTE_LABEL: "true"} if routed else {}
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    _must(kube.request("POST", "/api/v1/namespaces", body=body), f"creating namespace {name}")
    return name


def _histogram(kube: Kube) -> dict[float, float]:
    """kube-apiserver's cumulative bucket counts of the webhook's admission time (le -> count)."""
    text = kube.request("GET", "/metrics").data.decode()
    out: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith("apiserver_admission_webhook_admission_duration_seconds_bucket{") and (
            f'name="{HOOK}"' in line
        ):
            labels, value = line.rsplit(" ", 1)
            le = labels.split('le="', 1)[1].split('"', 1)[0]
            bound = math.inf if le == "+Inf" else float(le)
            out[bound] = out.get(bound, 0.0) + float(value)
    return out


def _bound(buckets: dict[float, float], q: float) -> float:
    """The smallest bucket bound that at least ``q`` of the calls fall within (cumulative
    ``buckets``): the quantile is at most that. kube-apiserver's buckets (5, 25, 100, 500 ms...)
    are too coarse to interpolate within."""
    total = buckets.get(math.inf, 0.0)
    if total <= 0:
        return math.nan
    return min((b for b, count in buckets.items() if count >= q * total), default=math.inf)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] if ordered else math.nan


def _backlog(kube: Kube, kubeconfig: str, pid: int, ns: str, count: int, nodes: int, phase: Phase) -> None:
    pods = workload_pods("bare", ns, "ksched", count, "backlog", nodes, None)
    watch = FirstSeen.binds(kubeconfig, ns)
    try:
        os.kill(pid, signal.SIGSTOP)
        try:
            create_pods(kube, pods)
        finally:
            os.kill(pid, signal.SIGCONT)
        resumed = time.monotonic()
        names = {p["metadata"]["name"] for p in pods}
        watch.wait(names, STALL_S)
        seen = [watch.seen[n] for n in names if n in watch.seen]
    finally:
        watch.close()
    phase.pods, phase.bound = count, len(seen)
    phase.seconds = max(seen) - resumed if seen else math.nan
    phase.rate = len(seen) / phase.seconds if seen and phase.seconds > 0 else 0.0
    if len(seen) < count:
        phase.problems.append(f"{count - len(seen)} of {count} backlog pods not bound within {STALL_S:g}s")


def _routed(kube: Kube, ns: str, count: int, phase: Phase) -> None:
    before = _histogram(kube)
    took: list[float] = []
    for pod in workload_pods("bare", ns, "", count, "routed", 1, None):
        del pod["spec"]["schedulerName"]  # the webhook routes it
        started = time.monotonic()
        r = kube.request("POST", f"/api/v1/namespaces/{ns}/pods", body=pod)
        took.append(time.monotonic() - started)
        if not r.ok:
            phase.problems.append(f"creating a routed pod: HTTP {r.status}: {r.data[:200]!r}")
            break
        if r.json()["spec"].get("schedulerName") != "ksched":
            phase.problems.append("a routed pod was not given to ksched by the webhook")
    after = _histogram(kube)
    delta = {b: after.get(b, 0.0) - before.get(b, 0.0) for b in after}
    calls = delta.get(math.inf, 0.0)
    phase.routed = len(took)
    phase.webhook_calls = int(calls)
    phase.webhook_within_100ms = delta.get(WITHIN_S, 0.0) / calls if calls else math.nan
    phase.webhook_within_25ms = delta.get(0.025, 0.0) / calls if calls else math.nan
    phase.webhook_p99_at_most_ms = 1000 * _bound(delta, 0.99)
    phase.create_p50_ms = 1000 * _percentile(took, 0.5)
    phase.create_p99_ms = 1000 * _percentile(took, 0.99)


def _tracebacks(log: Path) -> int:
    return log.read_text(errors="replace").count("Traceback (most recent call last)")


def _check(kube: Kube, phases: list[Phase], namespaces: list[str]) -> list[str]:
    nodes = _nodes(kube)
    pods = [p for ns in namespaces for p in list_pods(kube, f"/api/v1/namespaces/{ns}/pods")]
    problems = [f"over-committed: {o}" for o in invariants.overcommitted(nodes, pods)]
    expected = sum(p.pods + p.routed for p in phases)
    unbound = [p["metadata"]["name"] for p in pods if not (p.get("spec") or {}).get("nodeName")]
    if len(pods) != expected:
        problems.append(f"{expected - len(pods)} pods lost ({len(pods)} of {expected} present)")
    if unbound:
        problems.append(f"{len(unbound)} pods unbound, e.g. {unbound[:3]}")
    return problems


def run_hostile(
    pods: int,
    routed: int,
    clients: int,
    nodes: int,
    out: Path | None,
    state: local.ClusterState | None = None,
) -> dict[str, Any]:
    """Both phases on ``state`` (a running local control plane; its bad nodes, namespaces and
    webhook configuration are removed after) or on one of ``nodes`` KWOK nodes started here
    and torn down after."""
    if min(pods, routed, nodes) < 1 or clients < 0:
        raise KschedError("--pods, --routed and --nodes must be at least 1, --clients at least 0")
    own = state is None
    if state is None:
        print(f"== local control plane: {nodes} fake nodes (builds it first if needed)", file=sys.stderr)
        state = local.up(nodes=nodes, zones=3)
    try:
        phases, problems = _phases(state, pods, routed, clients)
    finally:
        if own:
            local.down()
    clean, hostile = phases
    result = {
        "nodes": state.nodes,
        "clients": clients,
        "phases": [asdict(p) for p in phases],
        "rate_ratio": hostile.rate / clean.rate if clean.rate else math.nan,
        "problems": problems + [f"{p.name}: {x}" for p in phases for x in p.problems],
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "hostile.json").write_text(json.dumps(result, indent=2))
    return result


def _phases(state: local.ClusterState, pods: int, routed: int, clients: int) -> tuple[list[Phase], list[str]]:
    workdir = Path(tempfile.mkdtemp(prefix="ksched-hostile-"))
    kube = Kube(load_configuration(state.kubeconfig, 10))
    nodes = len(_nodes(kube))
    _price_nodes(kube)
    hook_port = local.free_port()
    config = workdir / "ksched.yaml"
    config.write_text(yaml.safe_dump(_config(hook_port)))
    log = workdir / "ksched.log"
    phases: list[Phase] = []
    namespaces: list[str] = []
    bad: list[str] = []
    mwc = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    proc, port = start_ksched_run(state.kubeconfig, log, config)
    try:
        _must(
            kube.request("POST", mwc, body=webhook_configuration(MWC, HOOK, hook_port, ROUTE_LABEL, 10)),
            "the webhook configuration",
        )
        for name in ("clean", "hostile"):
            phase = Phase(name)
            with ExitStack() as stack:
                if name == "hostile":
                    print(
                        f"== hostile: a {HUGE} node, a node priced inf, {clients} idle clients on the "
                        f"webhook, {clients} half-sent requests on the HTTP server",
                        file=sys.stderr,
                    )
                    bad = _bad_nodes(kube, _free_index(kube))
                    stack.enter_context(connections.idle_clients("127.0.0.1", hook_port, clients))
                    stack.enter_context(connections.half_sent_requests("127.0.0.1", port, clients))
                ns = _namespace(kube, f"hostile-{name}", routed=False)
                routed_ns = _namespace(kube, f"hostile-{name}-routed", routed=True)
                namespaces += [ns, routed_ns]
                wait_routing(kube, routed_ns)
                print(f"== {name}: {pods} pods in a backlog, {routed} through the webhook", file=sys.stderr)
                _backlog(kube, state.kubeconfig, proc.pid, ns, pods, nodes, phase)
                _routed(kube, routed_ns, routed, phase)
            phases.append(phase)
        time.sleep(2)  # the routed pods' binds
        problems = _check(kube, phases, namespaces)
        if proc.poll() is not None:
            problems.append(f"ksched exited with {proc.returncode}")
        if (n := _tracebacks(log)) > 0:
            problems.append(f"{n} tracebacks in ksched's log ({log})")
    finally:
        terminate(proc, 30)
        kube.request("DELETE", f"{mwc}/{MWC}")
        for ns in namespaces:
            kube.request("DELETE", f"/api/v1/namespaces/{ns}")
        for node in bad:
            kube.request("DELETE", f"/api/v1/nodes/{node}")
        _price_nodes(kube, remove=True)
    return phases, problems


def _free_index(kube: Kube) -> int:
    """The first ``kwok-node-NNNNN`` index past the cluster's."""
    taken = [n["metadata"]["name"] for n in _nodes(kube)]
    indices = [int(n.rsplit("-", 1)[1]) for n in taken if n.startswith("kwok-node-") and n[10:].isdigit()]
    return max(indices, default=-1) + 1


def render(result: dict[str, Any]) -> str:
    rows = [
        f"{'phase':<8} {'pods/s':>8} {'bound':>11} {'webhook ≤25ms':>14} {'≤100ms':>7} {'p99 ≤':>8} "
        f"{'create p50':>11} {'create p99':>11}"
    ]
    for p in result["phases"]:
        rows.append(
            f"{p['name']:<8} {p['rate']:8.1f} {p['bound']:>5}/{p['pods']:<5} "
            f"{100 * p['webhook_within_25ms']:13.1f}% {100 * p['webhook_within_100ms']:6.1f}% "
            f"{p['webhook_p99_at_most_ms']:6.0f}ms "
            f"{p['create_p50_ms']:9.1f}ms {p['create_p99_ms']:9.1f}ms"
        )
    rows.append(f"hostile rate / clean rate: {result['rate_ratio']:.3f} (goal: at least 0.95)")
    rows += [f"PROBLEM: {x}" for x in result["problems"]] or [
        "nothing lost, nothing over-committed, no traceback"
    ]
    return "\n".join(rows)
