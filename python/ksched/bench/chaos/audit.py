"""The API server's audit policy for the soak, and what the soak reads back from its log:
Lease writes (who led when), binds, creates and deletes with the user that sent them."""

from __future__ import annotations

import bisect
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ksched.bench.chaos.figures import (
    LEASE_NAME,
    LEASE_NS,
    NS,
    ROUTED_NS,
    SHARD_LEASE_PREFIX,
    parse_time,
    replica_names,
)


def audit_policy() -> dict[str, Any]:
    """Bindings (who, when) and the soak's Lease writes (with the Lease as written); nothing else."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived", "ResponseStarted"],
        "rules": [
            {
                # Request: the node each bind names (the Binding's target).
                "level": "Request",
                "verbs": ["create"],
                "resources": [{"group": "", "resources": ["pods/binding"]}],
            },
            {
                # RequestResponse: a pod made from generateName (a Deployment's) has its name
                # only in the response.
                "level": "RequestResponse",
                "verbs": ["create"],
                "namespaces": [NS, ROUTED_NS],
                "resources": [{"group": "", "resources": ["pods"]}],
            },
            {
                # Who removed each pod that is gone at the end: the soak, a preemption, a controller.
                "level": "Metadata",
                "verbs": ["delete", "create"],
                "namespaces": [NS, ROUTED_NS],
                "resources": [{"group": "", "resources": ["pods", "pods/eviction"]}],
            },
            {
                "level": "RequestResponse",
                "verbs": ["create", "update", "patch"],
                "namespaces": [LEASE_NS],
                "resources": [
                    {"group": "coordination.k8s.io", "resources": ["leases"], "resourceNames": [LEASE_NAME]}
                ],
            },
            {
                # Sharded replicas' own Leases (named after LEASE_NAME), their deletion included.
                "level": "RequestResponse",
                "verbs": ["create", "update", "patch", "delete"],
                "namespaces": [LEASE_NS],
                "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}],
            },
            {"level": "None"},
        ],
    }


@dataclass
class LeaseWrite:
    at: float  # when the API server completed it
    holder: str
    duration_s: float
    # Sharded replicas' Leases: which, and whether this was its deletion.
    name: str = LEASE_NAME
    deleted: bool = False


@dataclass
class BindRecord:
    at: float  # when the API server received it
    user: str
    namespace: str
    name: str
    code: int
    # A bind's node (its Binding's target), where the audit log has it.
    node: str = ""


@dataclass
class AuditRecords:
    """What the soak reads back from kube-apiserver's audit log."""

    leases: list[LeaseWrite] = field(default_factory=list)
    # The sharded replicas' Leases, each write and deletion (holder of a deletion: its last).
    shard_leases: list[LeaseWrite] = field(default_factory=list)
    binds: list[BindRecord] = field(default_factory=list)
    creates: list[BindRecord] = field(default_factory=list)
    deletes: list[BindRecord] = field(default_factory=list)  # successful pod deletes and evictions


# A pod delete's (or eviction's) answers that removed it.
DELETED = frozenset((200, 201, 202))


def deleter_kind(user: str) -> str:
    """A readable name for who sent a pod's delete: a ksched replica (preemption), a
    controller, or the soak itself (the cluster's admin user)."""
    if user.startswith("controller:"):
        return user.split(":", 1)[1]
    prefix = f"system:serviceaccount:{LEASE_NS}:"
    if user.startswith(prefix) and user[len(prefix) :] in replica_names(26):
        return "ksched preemption"
    if user.startswith("system:serviceaccount:kube-system:"):
        return user.rsplit(":", 1)[1]
    if user.startswith("system:"):
        return user
    return "the soak"


def first_deleters(deletes: list[BindRecord]) -> dict[tuple[str, str], BindRecord]:
    """Who deleted each pod: its first successful delete, else its first delete answered with
    a server error or no answer. A graceful delete is finished by a second one from KWOK (the
    kubelet's part), which is no one's decision."""
    out: dict[tuple[str, str], BindRecord] = {}
    for d in sorted(deletes, key=lambda d: (d.code not in DELETED, d.at)):
        out.setdefault((d.namespace, d.name), d)
    return out


def deleted_by(record: BindRecord) -> str:
    """``deleter_kind`` of a delete, with its answer where that was not a success."""
    kind = deleter_kind(record.user)
    return kind if record.code in DELETED else f"{kind} (answered {record.code or 'nothing'})"


def read_audit(path: Path) -> AuditRecords:
    """The Lease writes, binding requests, pod creations and pod deletions the audit log recorded."""
    records = AuditRecords()
    leases, binds, creates, deletes = records.leases, records.binds, records.creates, records.deletes
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return records
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut by a restart
        if event.get("stage") != "ResponseComplete":
            continue
        ref = event.get("objectRef") or {}
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        user = (event.get("user") or {}).get("username", "")
        # A create's name may be in its response only (generateName).
        name = (event.get("responseObject") or {}).get("metadata", {}).get("name") or ref.get("name", "")
        received = parse_time(event["requestReceivedTimestamp"])
        if ref.get("resource") == "leases":
            if code not in (200, 201):
                continue
            lease_name = ref.get("name") or name
            shard = lease_name.startswith(SHARD_LEASE_PREFIX)
            if not shard and lease_name != LEASE_NAME:
                continue
            deleted = event.get("verb") == "delete"
            lease_spec = {} if deleted else (event.get("responseObject") or {}).get("spec") or {}
            write = LeaseWrite(
                parse_time(event["stageTimestamp"]),
                lease_spec.get("holderIdentity") or "",
                float(lease_spec.get("leaseDurationSeconds") or 0),
                lease_name,
                deleted,
            )
            (records.shard_leases if shard else leases).append(write)
        elif ref.get("resource") == "pods" and (
            (event.get("verb") == "delete" and not ref.get("subresource"))
            or ref.get("subresource") == "eviction"
        ):
            # A delete answered with a server error, or with none (the API server or etcd
            # restarting under it), may still have removed the pod: it counts as a delete
            # request, marked with its answer. A 4xx removed nothing.
            if code in DELETED or code == 0 or code >= 500:
                agent = event.get("userAgent") or ""
                if agent.startswith("kube-controller-manager/"):
                    # It runs with the admin's kubeconfig; its user agent names the controller.
                    user = "controller:" + agent.rsplit("/", 1)[1]
                deletes.append(
                    BindRecord(received, user, ref.get("namespace", ""), ref.get("name", ""), code)
                )
        elif ref.get("resource") == "pods" and not ref.get("subresource"):
            if code == 201:
                creates.append(BindRecord(received, user, ref.get("namespace", ""), name, code))
        elif ref.get("subresource") == "binding":
            target = ((event.get("requestObject") or {}).get("target") or {}).get("name", "")
            binds.append(
                BindRecord(received, user, ref.get("namespace", ""), ref.get("name", ""), code, str(target))
            )
    leases.sort(key=lambda w: w.at)
    records.shard_leases.sort(key=lambda w: w.at)
    binds.sort(key=lambda b: b.at)
    deletes.sort(key=lambda b: b.at)
    return records


def holder_at(leases: list[LeaseWrite], t: float) -> str | None:
    """Who held the Lease at ``t``: the holder of the last write before it, while that
    write's duration lasts (a renewal extends it; a release clears it)."""
    last: LeaseWrite | None = None
    for w in leases:
        if w.at > t:
            break
        last = w
    if last is None or not last.holder or t > last.at + last.duration_s:
        return None
    return last.holder


@dataclass(frozen=True)
class Memberships:
    """The sharded replicas live by their Leases as written, over time: each entry the
    members from its time on (a write adds or keeps one, a deletion or a Lease that ran out
    unrenewed removes one)."""

    times: list[float]
    members: list[tuple[str, ...]]

    @classmethod
    def of(cls, shard_leases: list[LeaseWrite]) -> Memberships:
        # Each write, and the moment just after its duration runs out (when it may expire).
        events = sorted(
            [(w.at, 0, w) for w in shard_leases]
            + [(w.at + w.duration_s + 1e-6, 1, w) for w in shard_leases if w.holder and not w.deleted],
            key=lambda e: (e[0], e[1]),
        )
        last: dict[str, LeaseWrite] = {}
        times: list[float] = []
        members: list[tuple[str, ...]] = []
        for t, kind, w in events:
            if kind == 0:
                last[w.name] = w if not w.deleted else LeaseWrite(w.at, "", 0.0, w.name, True)
            live = tuple(sorted(x.holder for x in last.values() if x.holder and t <= x.at + x.duration_s))
            if not members or live != members[-1]:
                times.append(t)
                members.append(live)
        return cls(times, members)

    def at(self, t: float) -> tuple[str, ...]:
        i = bisect.bisect_right(self.times, t)
        return self.members[i - 1] if i else ()

    def between(self, lo: float, hi: float) -> set[tuple[str, ...]]:
        """Every membership in force at some moment of [lo, hi]."""
        first = bisect.bisect_right(self.times, lo)
        return {self.at(lo), *self.members[first : bisect.bisect_right(self.times, hi)]}

    def changes(self) -> int:
        return max(0, len(self.members) - 1)


def longest_gap(times: list[float], start: float, end: float) -> tuple[float, float]:
    """The longest stretch in [start, end] between consecutive ``times`` (sorted), with
    the window's ends counting as times: (where it begins, how long it is)."""
    inside = [start, *(x for x in times if start <= x <= end), end]
    return max(((a, b - a) for a, b in itertools.pairwise(inside)), key=lambda g: g[1], default=(start, 0.0))


def serving(start: float, end: float, windows: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The stretches of [start, end] outside every window (windows may overlap)."""
    spans, reach = [], start
    for lo, hi in sorted(windows):
        if lo > reach:
            spans.append((reach, min(lo, end)))
        reach = max(reach, hi)
        if reach >= end:
            break
    if reach < end:
        spans.append((reach, end))
    return [(lo, hi) for lo, hi in spans if hi > lo]


def longest_outside(
    times: list[float], start: float, end: float, windows: list[tuple[float, float]]
) -> tuple[float, float]:
    """The longest stretch of [start, end] with no ``times`` (sorted) and no window in it,
    (where it begins, how long it is): the time from a window's end to the next of
    ``times`` counts, the windows do not."""
    gaps = [longest_gap(times, lo, hi) for lo, hi in serving(start, end, windows)]
    return max(gaps, key=lambda g: g[1], default=(start, 0.0))


def leaderless_gaps(leases: list[LeaseWrite], start: float, end: float) -> float:
    """The longest stretch in [start, end] with no successful write by a holder (acquire or renew)."""
    times = [start] + [w.at for w in leases if w.holder and start <= w.at <= end] + [end]
    return max((b - a for a, b in itertools.pairwise(times)), default=0.0)
