"""One scheduler on one workload: the backlog drain and the steady phase, timed, with the
placements judged by :mod:`ksched.bench.invariants`."""

from __future__ import annotations

import contextlib
import math
import time
from concurrent.futures import ThreadPoolExecutor

from ksched.bench import invariants
from ksched.bench.pods import CREATE_WORKERS, clear_pods, create_pods, process_usage
from ksched.bench.sidebyside.options import (
    CONFLICTS,
    HANDOFFS,
    QUIET_CORES,
    SETTLE_MAX_S,
    TERMINATED_WATCHERS,
    Options,
    Phase,
)
from ksched.bench.sidebyside.schedulers import Scheduler, metrics_status
from ksched.bench.sidebyside.watch import FirstSeen
from ksched.bench.sidebyside.workloads import setup_namespace, workload_pods
from ksched.cluster import local
from ksched.errors import KschedError
from ksched.loop.client import Kube
from ksched.objects import Obj


def check_placements(kube: Kube, nodes: dict[str, Obj]) -> tuple[int, int]:
    """(over-committed nodes, constraint violations) over every bound pod of the cluster, as
    :mod:`ksched.bench.invariants` judges them.

    A node is over-committed when its pods request more of any resource than its allocatable
    or are more than its pod capacity; a node the pods are bound to but the listing lacks
    counts too. Violations: each pod on a node with a pod its required anti-affinity selects,
    each pod off its nodeSelector or required node affinity, and each unit of spread skew
    above a constraint's maxSkew."""
    pods = kube.request("GET", "/api/v1/pods", query={"fieldSelector": "spec.nodeName!="}).json()["items"]
    listed = list(nodes.values())
    over = len(invariants.overcommitted(listed, pods)) + len(invariants.unknown_nodes(listed, pods))
    violations = sum(v.excess for v in invariants.constraint_violations(listed, pods))
    return over, violations


# ---------------------------------------------------------------------------
# One scheduler on one workload


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of ``values`` (the value at or below which ``q`` of them lie)."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def run_phase(
    kube: Kube,
    state: local.ClusterState,
    sched: Scheduler,
    workload: str,
    opts: Options,
    nodes: dict[str, Obj],
    round_: int = 0,
) -> Phase:
    phase = Phase(sched.label, workload, opts.pods, round_)
    # A namespace per round too: a later round's pods take the same names, and its watches
    # must not see the earlier round's events.
    namespace = f"{workload}-{sched.label}{f'-{round_}' if round_ else ''}".lower()
    owner = setup_namespace(kube, namespace, workload, opts.pods + opts.steady_pods)
    sched.start(workload, state.prometheus)
    watch = FirstSeen.binds(state.kubeconfig, namespace)
    events = FirstSeen.scheduled_events(state.kubeconfig, namespace)
    try:
        # Each drain starts on a quiet control plane, not while it still works off the last phase
        # (the deletion of its pods) or the scheduler's start (its lists).
        settle(state, sched)
        pods = workload_pods(workload, namespace, sched.scheduler_name, opts.pods, "b", opts.nodes, owner)
        drain(kube, state, sched, pods, opts, watch, events, phase)
        over, violations = check_placements(kube, nodes)
        clear_pods(kube, namespace)

        # Steady: a fixed arrival rate, create→bind latency per pod, from a quiet control plane
        # and scheduler too (not while they still work off the deletion of the backlog).
        if opts.steady_pods:
            settle(state, sched)
            steady = workload_pods(
                workload, namespace, sched.scheduler_name, opts.steady_pods, "s", opts.nodes, owner
            )
            _steady(kube, steady, opts, watch, phase)
            over2, violations2 = check_placements(kube, nodes)
            over, violations = max(over, over2), max(violations, violations2)
        phase.overcommitted_nodes, phase.constraint_violations = over, violations
        _, phase.peak_rss_mib = sched.usage()
        if workload == "metrics" and sched.port is not None:
            phase.metrics_status = metrics_status(sched.port)
    except BaseException:
        watch.close()
        events.close()
        sched.stop()
        # Best effort: the error (or an interrupt) in flight is what to report.
        with contextlib.suppress(KschedError):
            clear_pods(kube, namespace)
        raise
    watch.close()
    events.close()
    sched.stop()
    clear_pods(kube, namespace)
    return phase


def drain(
    kube: Kube,
    state: local.ClusterState,
    sched: Scheduler,
    pods: list[Obj],
    opts: Options,
    watch: FirstSeen,
    events: FirstSeen,
    phase: Phase,
) -> None:
    """The backlog: ``pods`` created while the scheduler is paused, timed from its resumption
    until each is bound and has its Scheduled event; fills the phase's drain figures."""
    closed_before = terminated_watchers(kube)
    sched.pause()
    try:
        create_pods(kube, pods)
        cpu_before, _ = sched.usage()
        replicas_before = sched.cpu_by_replica()
        handed_before, conflicts_before = sched.counter(HANDOFFS), sched.counter(CONFLICTS)
        control_before = control_plane_usage(state)
    finally:
        sched.resume()
    resumed = time.monotonic()
    names = {p["metadata"]["name"] for p in pods}
    watch.wait(names, opts.stall_s)
    with watch.lock:
        bound = {n for n in watch.seen if n in names}
    # The drain is done when every bound pod also has its Scheduled event: a scheduler that
    # posts events after its binds has not finished its writes at its last bind.
    events.wait(bound, opts.stall_s)
    cpu_after, _ = sched.usage()
    replicas_after = sched.cpu_by_replica()
    phase.handoffs = round(sched.counter(HANDOFFS) - handed_before)
    phase.bind_conflicts = round(sched.counter(CONFLICTS) - conflicts_before)
    control_after = control_plane_usage(state)
    closed_after = terminated_watchers(kube)
    if closed_before is not None and closed_after is not None:
        phase.watchers_closed = int(closed_after - closed_before)
    with watch.lock:
        times = sorted(watch.seen[n] - resumed for n in bound)
    with events.lock:
        event_times = [events.seen[n] - resumed for n in bound if n in events.seen]
    phase.bound = len(times)
    phase.bind_times = [round(t, 4) for t in times]
    phase.drain_seconds = times[-1] if times else 0.0
    phase.pods_per_s = phase.bound / phase.drain_seconds if phase.drain_seconds > 0 else 0.0
    phase.scheduled_events = len(event_times)
    phase.writes_seconds = max([*times, *event_times], default=0.0)
    phase.writes_pods_per_s = phase.bound / phase.writes_seconds if phase.writes_seconds > 0 else 0.0
    phase.cpu_ms_per_pod = (cpu_after - cpu_before) * 1000 / max(phase.bound, 1)
    phase.replicas = len(replicas_after)
    phase.cpu_ms_per_pod_by_replica = [
        round((a - b) * 1000 / max(phase.bound, 1), 3)
        for a, b in zip(replicas_after, replicas_before, strict=True)
    ]
    per_pod = {
        name: round((cpu - control_before.get(name, 0.0)) * 1000 / max(phase.bound, 1), 3)
        for name, cpu in control_after.items()
    }
    phase.control_plane_by_process = per_pod
    phase.control_plane_cpu_ms_per_pod = sum(per_pod.values())


def _steady(kube: Kube, steady: list[Obj], opts: Options, watch: FirstSeen, phase: Phase) -> None:
    """The steady phase: ``steady`` created at ``opts.rate``; fills the phase's create→bind
    latencies and their p50 and p99."""
    sent, _ = create_at_rate(kube, steady, opts.rate)
    snames = set(sent)
    watch.wait(snames, opts.stall_s)
    with watch.lock:
        order = sorted((t, n) for n, t in sent.items() if n in watch.seen)
        latencies = [(watch.seen[n] - t) * 1000 for t, n in order]
    first = min(sent.values(), default=0.0)
    phase.steady_latencies = [
        (round(t - first, 4), round(ms, 2)) for (t, _), ms in zip(order, latencies, strict=True)
    ]
    phase.steady_pods, phase.steady_bound, phase.steady_rate = len(steady), len(latencies), opts.rate
    if latencies:
        phase.p50_ms = round(percentile(latencies, 0.50), 1)
        phase.p99_ms = round(percentile(latencies, 0.99), 1)


def terminated_watchers(kube: Kube) -> float | None:
    """How many watchers the API server has closed for falling behind, all resources; None if
    its metrics could not be read."""
    try:
        r = kube.request("GET", "/metrics", timeout=30)
    except KschedError:
        return None
    if not r.ok:
        return None
    total = 0.0
    for line in r.data.decode(errors="replace").splitlines():
        if line.startswith(TERMINATED_WATCHERS):
            with contextlib.suppress(ValueError):
                total += float(line.rsplit(" ", 1)[1])
    return total


def settle(state: local.ClusterState, sched: Scheduler) -> None:
    """Wait (up to ``SETTLE_MAX_S``) until the control plane and the scheduler (every replica)
    together use under ``QUIET_CORES`` for a second."""

    def used() -> float:
        return control_plane_cpu(state) + sched.usage()[0]

    deadline = time.monotonic() + SETTLE_MAX_S
    before = used()
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = used()
        if now - before < QUIET_CORES:
            return
        before = now


def control_plane_usage(state: local.ClusterState) -> dict[str, float]:
    """CPU seconds (user+system) each of the control plane's processes has used so far."""
    usage: dict[str, float] = {}
    for name, pid in state.pids.items():
        with contextlib.suppress(OSError):
            usage[name] = process_usage(pid)[0]
    return usage


def control_plane_cpu(state: local.ClusterState) -> float:
    """CPU seconds (user+system) the control plane's processes have used so far."""
    return sum(control_plane_usage(state).values())


def create_at_rate(kube: Kube, pods: list[Obj], rate: float) -> tuple[dict[str, float], dict[str, str]]:
    """Create ``pods`` at ``rate`` per second; the monotonic time each create was sent, and each
    created pod's UID, by name."""
    sent: dict[str, float] = {}
    uids: dict[str, str] = {}
    errors: list[str] = []

    def post(p: Obj) -> None:
        sent[p["metadata"]["name"]] = time.monotonic()
        r = kube.request("POST", f"/api/v1/namespaces/{p['metadata']['namespace']}/pods", body=p)
        if r.ok:
            uids[p["metadata"]["name"]] = r.json()["metadata"]["uid"]
        else:
            errors.append(f"creating {p['metadata']['name']}: HTTP {r.status}: {r.data[:200]!r}")

    start = time.monotonic()
    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        for i, p in enumerate(pods):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            pool.submit(post, p)
    if errors:
        raise KschedError(errors[0])
    return sent, uids


def replicas_clause(replicas: int, cpu_by_replica: list[float], handoffs: int, conflicts: int) -> str:
    """After a drain's CPU ms a pod: each sharded replica's share, its hand-offs and the binds
    refused as already bound (nothing for one process)."""
    if replicas <= 1:
        return ""
    cpus = ", ".join(f"{c:.2f}" for c in cpu_by_replica)
    return f" over {replicas} replicas ({cpus}; {handoffs} hand-offs, {conflicts} binds refused as already bound)"
