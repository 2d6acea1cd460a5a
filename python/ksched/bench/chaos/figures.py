"""The chaos soak's names and limits, what it measures (:class:`ChaosFigures`) and how it prints."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ksched.errors import KschedError

NS = "chaos"  # pods that name ksched (bare, affinity, gangs, preemptors)
ROUTED_NS = "chaos-routed"  # pods without a scheduler name, routed by the webhook
LEASE_NAME = "ksched-chaos"
LEASE_NS = "kube-system"
LEASE = {"leaseDuration": "6s", "renewDeadline": "4s", "retryPeriod": "1s"}
LEASE_S = 6.0
REPLICAS = ("chaos-a", "chaos-b")
# --replicas N: N replicas with sharding on (every one binds onto the nodes it owns), each
# holding a Lease named after LEASE_NAME; renewDeadline + retryPeriod < leaseDuration.
SHARD_LEASE = {
    "enabled": True,
    "leaseDuration": "6s",
    "renewDeadline": "3s",
    "retryPeriod": "1s",
    "readDeadline": "3s",
}
SHARD_LEASE_PREFIX = f"{LEASE_NAME}-shard-"
# A bind counts as the owner's if the binder owned the node under the Leases as written at
# some moment of this stretch before it: a replica binds only while its last reading of the
# Leases is younger than readDeadline, so its view is what they were at that reading (a
# newcomer is seen at the next one, and binds only readDeadline after it joined).
SHARD_READ_SLACK_S = 3.0
# After a replica is killed, the others' binds are watched this long: it spans the victim's
# Lease running out and its restart.
SURVIVOR_WINDOW_S = 15.0
# The faults that take the API server away from every scheduler.
CONTROL_PLANE_FAULTS = ("apiserver-restart", "etcd-restart", "watch-expiry")


def replica_names(count: int) -> tuple[str, ...]:
    """The replicas' identities (and ServiceAccounts): chaos-a, chaos-b, ..."""
    return tuple(f"chaos-{chr(ord('a') + i)}" for i in range(count))


POOL_LABEL = "chaos.ksched.io/pool"
# Controllers that delete bound pods: NoExecute taints evict, pods on deleted nodes are collected;
# and the names their requests carry (the taint manager uses the node controller's client). The
# taint manager finds a node's pods through an index of pods by node that it does not add itself
# (the node lifecycle or DaemonSet controller does); the DaemonSet controller, idle here, adds it.
EVICTING_CONTROLLERS = (
    "taint-eviction-controller",
    "pod-garbage-collector-controller",
    "daemonset-controller",
)
EVICTING_CLIENTS = ("node-controller", "pod-garbage-collector")
POOL_TAINT = {"key": "chaos.ksched.io/preempt", "value": "true", "effect": "NoSchedule"}
CHAOS_TAINT = {"key": "chaos.ksched.io/evict", "value": "true", "effect": "NoExecute"}
METRIC_QUERY = "node_chaos_utilization"
# A pod still pending this long after the faults ended, with no FailedScheduling event, is lost.
SETTLE_S = 120.0
FAULT_KINDS = (
    "leader-kill",
    "leader-freeze",
    "apiserver-restart",
    "etcd-restart",
    "prometheus-stop",
    "prometheus-hang",
    "watch-expiry",
    "nodes-delete-add",
    "nodes-cordon",
    "nodes-taint",
    "pods-delete-inflight",
    "podgroup-delete",
)
# Sharded, every replica binds: the kill and the freeze take any replica.
SHARDED_FAULT_KINDS = ("replica-kill", "replica-freeze", *FAULT_KINDS[2:])


class ChaosError(KschedError):
    """The soak could not be set up or run."""


@dataclass
class Fault:
    kind: str
    start: float  # wall-clock seconds
    end: float = 0.0
    detail: str = ""
    target: str = ""  # the replica killed or frozen


@dataclass
class ChaosFigures:
    seed: int
    nodes: int
    minutes: float
    rate: float
    duration_s: float = 0.0
    pods_created: int = 0
    pods_bound: int = 0
    pods_pending_with_reason: int = 0
    pods_lost: int = 0
    pods_deleted_by_soak: int = 0
    pods_gone_by: dict[str, int] = field(default_factory=dict)  # who deleted the pods gone at the end
    overcommitted_nodes: int = 0
    constraint_violations: int = 0  # nodeSelector, node affinity, anti-affinity, spread
    binds_by_ksched: int = 0
    binds_by_kube_scheduler: int = 0
    binds_by_non_leader: int = 0
    longest_without_leader_s: float = 0.0
    leader_changes: int = 0
    # Sharded (``--replicas N``): N replicas that all bind, each onto the nodes it owns.
    replicas: int = 2
    sharded: bool = False
    binds_by_non_owner: int = 0
    # The longest stretch of the soak in which no replica bound a pod, where it began and the
    # faults it overlapped; and the longest one with no restart of the control plane in it
    # (no scheduler binds while kube-apiserver or etcd is down; the wait after one counts).
    longest_without_binds_s: float = 0.0
    longest_without_binds_at: str = ""
    longest_without_binds_serving_s: float = 0.0
    longest_without_binds_serving_at: str = ""
    # Each replica-kill: the victim, the longest stretch of the next SURVIVOR_WINDOW_S in which
    # no other replica bound (as above, with no control-plane restart in it), and when the
    # victim's nodes were bound onto again and by whom.
    replica_kills: list[dict[str, Any]] = field(default_factory=list)
    membership_changes: int = 0
    p99_bind_during_faults_s: float | None = None
    p99_bind_outside_faults_s: float | None = None
    bind_samples_during_faults: int = 0
    bind_samples_outside_faults: int = 0
    gangs_partly_bound: int = 0
    victims_without_preemptor: int = 0
    victims: int = 0
    replicas_running: int = 0
    replica_restarts: int = 0
    replica_exits: int = 0  # exits the soak did not cause (each one a violation)
    pending_reasons: dict[str, int] = field(default_factory=dict)  # "kind: message" -> pods
    watch_relists: int = 0  # relists after 410 Gone, from the replicas' logs
    terms_lost: int = 0  # "lost the lease" in the replicas' logs
    faults: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def ok(self) -> bool:
        return not self.violations

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def now() -> float:
    return time.time()


def parse_time(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def p99(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def rounded(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def render(f: ChaosFigures) -> str:
    def opt(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f} s"

    rows = [
        ("pods created", f"{f.pods_created}"),
        ("pods bound", f"{f.pods_bound}"),
        ("pending with a reason", f"{f.pods_pending_with_reason}"),
        ("pods lost (must be 0)", f"{f.pods_lost}"),
        ("deleted by the soak", f"{f.pods_deleted_by_soak}"),
        ("gone at the end, by", ", ".join(f"{k} {v}" for k, v in f.pods_gone_by.items()) or "-"),
        ("over-committed nodes", f"{f.overcommitted_nodes}"),
        ("constraints broken", f"{f.constraint_violations}"),
        ("binds by ksched", f"{f.binds_by_ksched}"),
        ("binds by kube-scheduler", f"{f.binds_by_kube_scheduler} (pods the webhook left to it)"),
        *(
            [
                ("binds onto another's node", f"{f.binds_by_non_owner} (by the replicas' Leases as written)"),
                (
                    "longest without a bind",
                    f"{f.longest_without_binds_s:.1f} s (any replica; from {f.longest_without_binds_at}); "
                    f"{f.longest_without_binds_serving_s:.1f} s with the control plane up "
                    f"(from {f.longest_without_binds_serving_at})",
                ),
                *(
                    (
                        "replica killed",
                        f"{k['victim']} at +{k['at_s']:.0f} s: the others' longest gap {k['survivors_gap_s']:.1f} s; "
                        + (
                            f"its nodes bound again after {k['nodes_bound_after_s']:.1f} s (by {k['nodes_bound_by']})"
                            if k["nodes_bound_by"]
                            else "its nodes not bound again"
                        ),
                    )
                    for k in f.replica_kills
                ),
                ("live replicas changed", f"{f.membership_changes} times"),
            ]
            if f.sharded
            else [
                ("binds by a non-leader", f"{f.binds_by_non_leader}"),
                ("longest without a leader", f"{f.longest_without_leader_s:.1f} s"),
                ("leader changes", f"{f.leader_changes}"),
            ]
        ),
        (
            "p99 create->bind, faults",
            f"{opt(f.p99_bind_during_faults_s)} ({f.bind_samples_during_faults} pods)",
        ),
        (
            "p99 create->bind, quiet",
            f"{opt(f.p99_bind_outside_faults_s)} ({f.bind_samples_outside_faults} pods)",
        ),
        ("gangs partly bound", f"{f.gangs_partly_bound}"),
        ("victims w/o preemptor", f"{f.victims_without_preemptor} of {f.victims} victims"),
        (
            "replicas running",
            f"{f.replicas_running} ({f.replica_restarts} restarts, {f.replica_exits} exits the soak did not cause)",
        ),
        ("terms lost", f"{f.terms_lost} (a leader's renewals failing past the renew deadline)"),
        ("watch relists (410)", f"{f.watch_relists}"),
        ("faults injected", ", ".join(f"{k} {v}" for k, v in sorted(f.faults.items()))),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [
        f"ksched bench --chaos: {f.nodes} nodes, {f.minutes:g} min at {f.rate:g} pods/s, seed {f.seed}, "
        f"{f.duration_s:.0f} s in all" + (f"; {f.replicas} sharded replicas" if f.sharded else "")
    ]
    lines += [f"  {k.ljust(width)}  {v}" for k, v in rows]
    if f.pending_reasons:
        lines.append("  pending at the end, by kind and FailedScheduling message:")
        lines += [f"    {n:5d}  {reason}" for reason, n in f.pending_reasons.items()]
    lines.append("  invariants      " + ("all hold" if f.ok() else "VIOLATED:"))
    lines += [f"    {v}" for v in f.violations]
    return "\n".join(lines)
