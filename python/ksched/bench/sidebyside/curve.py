"""The fill workload: the cluster filled to 95 % of its allocatable cpu in steps, each step a
backlog drain, so that sharded replicas' hand-offs and refused binds are counted by how full
the cluster was (the curve Godel and Volcano describe in words).

A pod owned by a replica is placed on that replica's nodes while one fits it; only a pod that
fits none of them, or would preempt there, is tried on every node and handed over. So the
conflicts grow with the fill, and the last steps, where nodes have only fragments left, are
the ones to read."""

from __future__ import annotations

import dataclasses

from ksched.bench import invariants
from ksched.bench.pods import clear_pods
from ksched.bench.sidebyside.options import FILL_SIZES, FILL_STALL_S, FILL_STEPS, Options, Phase
from ksched.bench.sidebyside.phase import check_placements, drain, settle
from ksched.bench.sidebyside.schedulers import Scheduler
from ksched.bench.sidebyside.watch import FirstSeen
from ksched.bench.sidebyside.workloads import fill_pods, setup_namespace
from ksched.cluster import local
from ksched.loop.client import Kube
from ksched.objects import Obj


def fill_phase(
    kube: Kube,
    state: local.ClusterState,
    sched: Scheduler,
    opts: Options,
    nodes: dict[str, Obj],
    round_: int = 0,
) -> Phase:
    """``sched`` on the fill workload: a drain per step of ``FILL_STEPS``, each step's pods
    taking the requested cpu to its share of the cluster's; the phase totals the steps."""
    namespace = f"fill-{sched.label}{f'-{round_}' if round_ else ''}".lower()
    setup_namespace(kube, namespace, "fill", 0)
    capacity = sum(invariants.allocatable(n).get("cpu", 0) for n in nodes.values())
    phase = Phase(sched.label, "fill", 0, round_)
    # Every step waits FILL_STALL_S after its last bind, not --stall: near full, some pods fit nowhere.
    step_opts = dataclasses.replace(opts, stall_s=min(opts.stall_s, FILL_STALL_S))
    sched.start("fill", state.prometheus)
    watch = FirstSeen.binds(state.kubeconfig, namespace)
    events = FirstSeen.scheduled_events(state.kubeconfig, namespace)
    try:
        created, requested = 0, 0
        for share in FILL_STEPS:
            settle(state, sched)
            pods, millis = fill_pods(
                namespace, sched.scheduler_name, created, int(share * capacity) - requested, FILL_SIZES
            )
            created += len(pods)
            requested += millis
            step = Phase(sched.label, "fill", len(pods), round_)
            drain(kube, state, sched, pods, step_opts, watch, events, step)
            phase.fill_steps.append(
                {
                    "fill": share,
                    "pods": len(pods),
                    "bound": step.bound,
                    "handoffs": step.handoffs,
                    "conflicts": step.bind_conflicts,
                    "pods_per_s": round(step.pods_per_s, 1),
                }
            )
            print(
                f"  to {share:.0%} of the cpu: {step.bound}/{len(pods)} bound at {step.pods_per_s:,.0f} pods/s, "
                f"{step.handoffs} hand-offs, {step.bind_conflicts} binds refused as already bound",
                flush=True,
            )
            _add(phase, step)
        every = kube.request("GET", "/api/v1/pods").json()["items"]
        phase.pending_that_fit = len(
            invariants.pending_that_fit(
                list(nodes.values()),
                [p for p in every if p["spec"].get("nodeName") or p["metadata"]["namespace"] == namespace],
            )
        )
        phase.overcommitted_nodes, phase.constraint_violations = check_placements(kube, nodes)
        _, phase.peak_rss_mib = sched.usage()
    finally:
        watch.close()
        events.close()
        sched.stop()
        clear_pods(kube, namespace)
    return phase


def _add(total: Phase, step: Phase) -> None:
    """One step's drain into the phase's: counts added, rates over the summed drain time."""
    bound = total.bound + step.bound

    def mean(a: float, b: float) -> float:
        return (a * total.bound + b * step.bound) / max(bound, 1)

    total.cpu_ms_per_pod = mean(total.cpu_ms_per_pod, step.cpu_ms_per_pod)
    total.control_plane_cpu_ms_per_pod = mean(
        total.control_plane_cpu_ms_per_pod, step.control_plane_cpu_ms_per_pod
    )
    total.control_plane_by_process = {
        name: round(mean(total.control_plane_by_process.get(name, 0.0), ms), 3)
        for name, ms in step.control_plane_by_process.items()
    }
    before = total.cpu_ms_per_pod_by_replica or [0.0] * len(step.cpu_ms_per_pod_by_replica)
    total.cpu_ms_per_pod_by_replica = [
        round(mean(a, b), 3) for a, b in zip(before, step.cpu_ms_per_pod_by_replica, strict=True)
    ]
    total.pods += step.pods
    total.bound = bound
    total.scheduled_events += step.scheduled_events
    total.drain_seconds += step.drain_seconds
    total.writes_seconds += step.writes_seconds
    total.pods_per_s = total.bound / total.drain_seconds if total.drain_seconds > 0 else 0.0
    total.writes_pods_per_s = total.bound / total.writes_seconds if total.writes_seconds > 0 else 0.0
    total.handoffs += step.handoffs
    total.bind_conflicts += step.bind_conflicts
    total.replicas = step.replicas
    total.bind_times += [round(t + total.drain_seconds - step.drain_seconds, 4) for t in step.bind_times]
