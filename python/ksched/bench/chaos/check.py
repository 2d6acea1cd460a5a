"""The end of the soak: wait until every pod is bound or reported, then judge the cluster
with :mod:`ksched.bench.invariants` and the audit log (lost pods, over-commitment,
broken constraints, binds by a non-leader (sharded: onto another replica's node), partly bound gangs, victims without a
preemptor, replicas that exited)."""

from __future__ import annotations

import collections
import datetime as dt
import itertools
import time
from typing import Any

from ksched.bench import invariants
from ksched.bench.chaos.audit import (
    AuditRecords,
    BindRecord,
    Memberships,
    deleted_by,
    deleter_kind,
    first_deleters,
    holder_at,
    leaderless_gaps,
    longest_gap,
    longest_outside,
    read_audit,
)
from ksched.bench.chaos.figures import (
    CONTROL_PLANE_FAULTS,
    EVICTING_CLIENTS,
    LEASE_NS,
    NS,
    SETTLE_S,
    SHARD_READ_SLACK_S,
    SURVIVOR_WINDOW_S,
    Fault,
    p99,
    parse_time,
    rounded,
)
from ksched.bench.chaos.soak import Soak
from ksched.cluster import local
from ksched.engine.gangs import POD_GROUP_API, POD_GROUP_LABEL
from ksched.loop.shards import owner
from ksched.objects import Obj, holds_nomination


def current_failures(soak: Soak) -> dict[str, Obj]:
    """Each pod's latest FailedScheduling event (by uid), where it was last observed after
    the faults ended: an older one may be about a fault long gone (a cordon, a restart),
    and a pod the loop then dropped would pass as explained. The loop retries
    unschedulable pods at least every 30 s, so a pod still pending is told again."""
    latest: dict[str, tuple[float, Obj]] = {}
    for e in soak.events("FailedScheduling"):
        seen = (e.get("series") or {}).get("lastObservedTime") or e.get("eventTime")
        at = parse_time(seen or e["metadata"]["creationTimestamp"])
        uid = e["regarding"].get("uid")
        if uid and at >= soak.soak_end and at >= latest.get(uid, (0.0, e))[0]:
            latest[uid] = (at, e)
    return {uid: e for uid, (_, e) in latest.items()}


def unaccounted_pods(soak: Soak) -> list[Obj]:
    """Pods neither bound nor pending with a current FailedScheduling event of their own."""
    return invariants.unaccounted(soak.pods(), current_failures(soak))


def settle(soak: Soak) -> None:
    soak.log("faults over; waiting for every pod to be bound or reported unschedulable")
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        if not unaccounted_pods(soak):
            return
        time.sleep(3)


def check(soak: Soak, state: local.ClusterState) -> None:
    """Fill ``soak.figures`` and its violations, invariant by invariant."""
    pods = soak.pods()
    lost = _pending(soak, pods)
    audit = read_audit(local.audit_log_path(state))
    gone, deleter = _deleted(soak, pods, lost, audit)
    _placements(soak)
    if soak.sharded:
        _shard_binds(soak, audit)
    else:
        _binds(soak, audit)
    _bind_latency(soak, audit)
    _gangs(soak, pods, gone, deleter)
    _preemptions(soak, pods)
    _replicas(soak)


def _pending(soak: Soak, pods: list[Obj]) -> list[Obj]:
    """Count the bound pods and the pending ones with a reason (the most frequent reasons
    kept); returns the pending pods without one, which are lost."""
    f = soak.figures
    failed = current_failures(soak)
    bound = [p for p in pods if p["spec"].get("nodeName")]
    pending = [
        p for p in pods if not p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    ]
    lost = invariants.unaccounted(pods, failed)
    f.pods_bound = len(bound)
    f.pods_pending_with_reason = len(pending) - len(lost)
    f.pods_lost = len(lost)
    reasons: collections.Counter[str] = collections.Counter()
    for p in pending:
        event = failed.get(p["metadata"]["uid"])
        if event is not None:
            kind = p["metadata"]["name"].split("-", 1)[0]
            reasons[f"{kind}: {(event.get('note') or '')[:160]}"] += 1
    f.pending_reasons = dict(reasons.most_common(8))
    return lost


def _deleted(
    soak: Soak, pods: list[Obj], lost: list[Obj], audit: AuditRecords
) -> tuple[set[tuple[str, str]], dict[tuple[str, str], BindRecord]]:
    """Every created pod is still there or was deleted by a request the audit log holds: one
    gone with no such request is lost too, as are the ``lost`` pending pods. Returns the
    pods gone (namespace, name) and each one's first deleter."""
    f = soak.figures
    creates = audit.creates
    f.pods_created = len(creates)
    with soak.lock:
        f.pods_deleted_by_soak = len(soak.deleted)
    present = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods}
    deleter = first_deleters(audit.deletes)
    gone = {(c.namespace, c.name) for c in creates if c.name} - present
    vanished = invariants.vanished(((c.namespace, c.name) for c in creates if c.name), pods, deleter.keys())
    f.pods_gone_by = dict(
        collections.Counter(deleted_by(deleter[k]) for k in gone if k in deleter).most_common()
    )
    f.pods_lost += len(vanished)
    f.violations += [f"lost: {ns}/{name} gone with no delete request" for ns, name in vanished[:10]]
    for p in lost[:10]:
        md = p["metadata"]
        f.violations.append(
            f"lost: {md['namespace']}/{md['name']} pending with no FailedScheduling event since the faults ended"
        )
    if len(lost) > 10:
        f.violations.append(f"lost: {len(lost) - 10} more")
    return gone, deleter


def _placements(soak: Soak) -> None:
    """Over-commitment per node and resource, and the placement constraints (pods on a node a
    fault deleted are left out)."""
    f = soak.figures
    all_nodes, all_pods = soak.get_json("/api/v1/nodes")["items"], soak.get_json("/api/v1/pods")["items"]
    over = invariants.overcommitted(all_nodes, all_pods)
    f.overcommitted_nodes = len(over)
    f.violations += [f"over-committed: {o}" for o in over[:10]]
    broken = invariants.constraint_violations(all_nodes, all_pods)
    f.constraint_violations = len(broken)
    f.violations += [f"constraint broken: {v}" for v in broken[:10]]


def _binds(soak: Soak, audit: AuditRecords) -> None:
    """Binds against the Lease history, from the audit log: each by the replica that led."""
    f = soak.figures
    leases, binds = audit.leases, audit.binds
    users = {f"system:serviceaccount:{LEASE_NS}:{r}": r for r in soak.identities}
    mine = [b for b in binds if b.user in users and b.code == 201]
    f.binds_by_ksched = len(mine)
    f.binds_by_kube_scheduler = sum(1 for b in binds if b.user not in users and b.code == 201)
    wrong = [b for b in mine if holder_at(leases, b.at) != users[b.user]]
    f.binds_by_non_leader = len(wrong)
    for b in wrong[:10]:
        f.violations.append(
            f"bind by a non-leader: {users[b.user]} bound {b.namespace}/{b.name} at "
            f"{dt.datetime.fromtimestamp(b.at, dt.UTC).isoformat()} while {holder_at(leases, b.at)} held the lease"
        )
    f.longest_without_leader_s = round(leaderless_gaps(leases, soak.soak_start, soak.soak_end), 1)
    holders = [w.holder for w in leases if w.holder]
    f.leader_changes = sum(1 for a, b in itertools.pairwise(holders) if a != b)


def _shard_binds(soak: Soak, audit: AuditRecords) -> None:
    """Sharded: each bind onto a node its replica owned by the replicas' Leases as written at
    some moment of the read slack before it, and the longest stretch in which no replica bound."""
    f = soak.figures
    users = {f"system:serviceaccount:{LEASE_NS}:{r}": r for r in soak.identities}
    mine = [b for b in audit.binds if b.user in users and b.code == 201]
    f.binds_by_ksched = len(mine)
    f.binds_by_kube_scheduler = sum(1 for b in audit.binds if b.user not in users and b.code == 201)
    timeline = Memberships.of(audit.shard_leases)
    wrong = []
    for b in mine:
        # The binder read the Leases at some moment of the slack before the bind: any
        # membership in force then may be the one it acted on.
        views = timeline.between(b.at - SHARD_READ_SLACK_S, b.at)
        if not b.node or all(owner(members, b.node) != users[b.user] for members in views):
            wrong.append((b, sorted(views)))
    f.binds_by_non_owner = len(wrong)
    for b, seen in wrong[:10]:
        f.violations.append(
            f"bind onto another's node: {users[b.user]} bound {b.namespace}/{b.name} onto {b.node or '?'} at "
            f"{dt.datetime.fromtimestamp(b.at, dt.UTC).isoformat()}, owned by "
            + " / ".join(str(owner(m, b.node)) for m in seen)
        )
    times = sorted(b.at for b in mine)
    at, gap = longest_gap(times, soak.soak_start, soak.soak_end)
    f.longest_without_binds_s = round(gap, 1)
    f.longest_without_binds_at = _where(soak, at, gap)
    outages = [(x.start, x.end or soak.soak_end) for x in soak.faults if x.kind in CONTROL_PLANE_FAULTS]
    up_at, up_gap = longest_outside(times, soak.soak_start, soak.soak_end, outages)
    f.longest_without_binds_serving_s = round(up_gap, 1)
    f.longest_without_binds_serving_at = _where(soak, up_at, up_gap)
    f.replica_kills = [
        _kill(soak, timeline, mine, users, x, outages)
        for x in soak.faults
        if x.kind == "replica-kill" and x.target
    ]
    f.membership_changes = timeline.changes()


def _where(soak: Soak, at: float, gap: float) -> str:
    """Where a stretch of the soak began, and the faults in progress over it."""
    during = sorted({x.kind for x in soak.faults if x.start < at + gap and (x.end or soak.soak_end) > at})
    return f"+{at - soak.soak_start:.0f} s, " + ("during " + ", ".join(during) if during else "no fault")


def _kill(
    soak: Soak,
    timeline: Memberships,
    binds: list[BindRecord],
    users: dict[str, str],
    kill: Fault,
    outages: list[tuple[float, float]],
) -> dict[str, Any]:
    """One replica's SIGKILL: the longest stretch of the next SURVIVOR_WINDOW_S in which no
    other replica bound (no control-plane restart in it), and the first bind after it onto
    a node the victim owned at the kill (counted live)."""
    end = min(kill.start + SURVIVOR_WINDOW_S, soak.soak_end)
    others = sorted(b.at for b in binds if users[b.user] != kill.target and kill.start <= b.at <= end)
    # Its nodes as it held them live: a control-plane restart in progress can have let every
    # Lease run out as written.
    members = {*timeline.at(kill.start), kill.target}
    onto = [b for b in binds if b.at > kill.start and b.node and owner(members, b.node) == kill.target]
    first = min(onto, key=lambda b: b.at, default=None)
    return {
        "victim": kill.target,
        "at_s": round(kill.start - soak.soak_start, 1),
        "survivors_gap_s": round(longest_outside(others, kill.start, end, outages)[1], 1),
        "nodes_bound_after_s": round(first.at - kill.start, 1) if first else None,
        "nodes_bound_by": users[first.user] if first else "",
    }


def _bind_latency(soak: Soak, audit: AuditRecords) -> None:
    """Create -> bind latency, in and out of fault windows."""
    f = soak.figures
    first_bind: dict[tuple[str, str], float] = {}
    for b in audit.binds:
        if b.code == 201:
            first_bind.setdefault((b.namespace, b.name), b.at)
    created = {(c.namespace, c.name): c.at for c in audit.creates}
    windows = [(x.start, x.end or soak.soak_end) for x in soak.faults]
    during: list[float] = []
    outside: list[float] = []
    for key, t0 in created.items():
        t1 = first_bind.get(key)
        if t1 is None:
            continue
        overlapping = any(a <= t1 and t0 <= b for a, b in windows)
        (during if overlapping else outside).append(max(0.0, t1 - t0))
    f.p99_bind_during_faults_s = rounded(p99(during))
    f.p99_bind_outside_faults_s = rounded(p99(outside))
    f.bind_samples_during_faults = len(during)
    f.bind_samples_outside_faults = len(outside)


def _gangs(
    soak: Soak, pods: list[Obj], gone: set[tuple[str, str]], deleter: dict[tuple[str, str], BindRecord]
) -> None:
    """Gangs: bound whole or not at all."""
    f = soak.figures
    groups = soak.get_json(f"/apis/{POD_GROUP_API}/namespaces/{NS}/podgroups")["items"]
    # Members the taint manager or pod GC removed after they were bound count as bound:
    # a gang they leave short was whole when ksched bound it.
    removed_by_others = collections.Counter(
        name.rsplit("-m", 1)[0]
        for ns, name in gone
        if name.startswith("gang-")
        and (ns, name) in deleter
        and deleter_kind(deleter[ns, name].user) in EVICTING_CLIENTS
    )
    for g in groups:
        name = g["metadata"]["name"]
        members = [p for p in pods if (p["metadata"].get("labels") or {}).get(POD_GROUP_LABEL) == name]
        on = sum(1 for p in members if p["spec"].get("nodeName")) + removed_by_others[name]
        if 0 < on < int(g["spec"].get("minMember", 1)):
            f.gangs_partly_bound += 1
            f.violations.append(f"gang {name}: {on} of {g['spec']['minMember']} bound")


def _preemptions(soak: Soak, pods: list[Obj]) -> None:
    """Preemption victims name a preemptor that is bound or nominated."""
    f = soak.figures
    uids = {p["metadata"]["uid"]: p for p in pods}
    for e in soak.events("Preempted"):
        f.victims += 1
        note = e.get("note") or ""
        uid = note.split("Preempted by pod ", 1)[-1].split(" ", 1)[0]
        preemptor = uids.get(uid)
        # A hand-over's nomination holds no room: the preemptor must hold its own.
        if preemptor is None or not (preemptor["spec"].get("nodeName") or holds_nomination(preemptor)):
            f.victims_without_preemptor += 1
            f.violations.append(
                f"victim {e['regarding']['name']}: preemptor {uid} neither bound nor nominated"
            )


def _replicas(soak: Soak) -> None:
    """The replicas: all running at the end, and none exited unless the soak made it."""
    f = soak.figures
    f.replicas_running = sum(1 for r in soak.replicas if r.running() and r.healthy())
    f.replica_restarts = sum(r.restarts for r in soak.replicas)
    exits = [e for r in soak.replicas for e in r.exits]
    f.replica_exits = len(exits)
    # ksched exits only when told to: an exit the soak did not cause is a defect.
    f.violations += exits[:10]
    logs = "".join(r.tail(None) for r in soak.replicas)
    f.watch_relists = logs.count("expired, relisting")
    f.terms_lost = logs.count("lost the lease")
    if f.replicas_running != len(soak.replicas):
        f.violations.append(f"only {f.replicas_running} of {len(soak.replicas)} replicas running at the end")
    f.faults = dict(
        collections.Counter(x.kind for x in soak.faults if not x.detail.startswith("not injected"))
    )
