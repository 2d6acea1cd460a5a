"""The chaos soak's reading of kube-apiserver's audit log: which pods were created, bound
and deleted, and by whom, so a pod gone with no delete request counts as lost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ksched.bench.chaos.audit import (
    LeaseWrite,
    Memberships,
    deleted_by,
    deleter_kind,
    first_deleters,
    longest_gap,
    longest_outside,
    read_audit,
    serving,
)
from ksched.bench.chaos.figures import EVICTING_CLIENTS, LEASE_NAME, NS


def _event(verb: str, code: int, user: str, name: str, sub: str = "", **extra: Any) -> str:
    ref = {"resource": "pods", "namespace": NS, "name": name}
    if sub:
        ref["subresource"] = sub
    event = {
        "stage": "ResponseComplete",
        "verb": verb,
        "objectRef": ref,
        "responseStatus": {"code": code},
        "user": {"username": user},
        "requestReceivedTimestamp": "2026-11-22T10:00:00.000000Z",
        "stageTimestamp": "2026-11-22T10:00:00.100000Z",
        **extra,
    }
    return json.dumps(event)


def test_audit_log_names_generated_pods_and_who_deleted_each(tmp_path: Path) -> None:
    replica = "system:serviceaccount:kube-system:chaos-a"
    lines = [
        # A Deployment's pod: the request has only generateName, the response has the name.
        _event(
            "create",
            201,
            "system:serviceaccount:kube-system:replicaset-controller",
            "",
            responseObject={"metadata": {"name": "web-7d9f-abcde"}},
        ),
        _event("create", 201, "admin", "bare-1"),
        _event("create", 409, "admin", "bare-1"),  # refused: not a second pod
        _event("create", 201, replica, "bare-1", sub="binding"),
        _event("delete", 200, replica, "bare-1"),  # a preemption
        _event("delete", 404, "admin", "web-7d9f-abcde"),  # not found: deleted nothing
        _event("create", 201, "admin", "web-7d9f-abcde", sub="eviction"),
        # kube-controller-manager runs as the admin; its user agent names the controller.
        _event(
            "delete",
            200,
            "admin",
            "web-7d9f-fghij",
            userAgent="kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/abc/replicaset-controller",
        ),
        # The taint manager evicts with the node controller's client; the pod collector with its own.
        _event(
            "delete",
            200,
            "admin",
            "gang-7-m0",
            userAgent="kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/abc/node-controller",
        ),
        _event(
            "delete",
            200,
            "admin",
            "bare-2",
            userAgent="kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/abc/pod-garbage-collector",
        ),
        "{cut short by a restart",
    ]
    path = tmp_path / "audit.log"
    path.write_text("\n".join(lines) + "\n")
    audit = read_audit(path)
    assert [(c.name, c.user) for c in audit.creates] == [
        ("web-7d9f-abcde", "system:serviceaccount:kube-system:replicaset-controller"),
        ("bare-1", "admin"),
    ]
    assert [(b.name, b.code) for b in audit.binds] == [("bare-1", 201)]
    assert [(d.name, deleter_kind(d.user)) for d in audit.deletes] == [
        ("bare-1", "ksched preemption"),
        ("web-7d9f-abcde", "the soak"),
        ("web-7d9f-fghij", "replicaset-controller"),
        ("gang-7-m0", "node-controller"),
        ("bare-2", "pod-garbage-collector"),
    ]
    assert {deleter_kind(d.user) for d in audit.deletes[-2:]} == set(EVICTING_CLIENTS)


def test_the_first_delete_names_who_deleted_a_pod(tmp_path: Path) -> None:
    # The full soak counted a gang member the taint manager evicted as deleted by the soak: KWOK
    # finishes a graceful delete with a second delete, as the cluster's admin.
    agent = "kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/abc/node-controller"
    lines = [
        _event("delete", 200, "admin", "gang-1-m5", userAgent=agent),
        _event("delete", 200, "admin", "gang-1-m5", userAgent="kwok/v0.8.0 (linux/amd64)"),
    ]
    path = tmp_path / "audit.log"
    path.write_text("\n".join(lines) + "\n")
    deleter = first_deleters(read_audit(path).deletes)
    assert {k: deleter_kind(v.user) for k, v in deleter.items()} == {(NS, "gang-1-m5"): "node-controller"}


def test_a_delete_answered_with_a_server_error_or_none_counts_as_a_delete_request(tmp_path: Path) -> None:
    # Seed 7's soak reported two Deployment pods "gone with no delete request" that could not be
    # reproduced. A delete the API server answered 5xx (etcd restarting under it) or never
    # answered may still have removed the pod; the audit log then holds a request whose answer
    # says nothing was deleted. Such a pod was deleted by someone, not lost.
    agent = "kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/abc/replicaset-controller"
    lines = [
        _event("delete", 504, "admin", "web-1", userAgent=agent),
        _event("delete", 0, "admin", "web-2", userAgent=agent),
        _event("delete", 500, "admin", "web-3"),
        _event("delete", 200, "admin", "web-3"),  # its retry succeeded: that one names the deleter
        _event("delete", 404, "admin", "web-4"),  # not found: deleted nothing
        _event("delete", 409, "admin", "web-5"),  # a failed precondition: deleted nothing
        _event("create", 429, "admin", "web-6", sub="eviction"),  # a budget refused it
    ]
    path = tmp_path / "audit.log"
    path.write_text("\n".join(lines) + "\n")
    deleter = first_deleters(read_audit(path).deletes)
    assert {k[1]: deleted_by(v) for k, v in deleter.items()} == {
        "web-1": "replicaset-controller (answered 504)",
        "web-2": "replicaset-controller (answered nothing)",
        "web-3": "the soak",
    }


def test_deleter_kinds_name_controllers_and_components() -> None:
    assert deleter_kind("system:serviceaccount:kube-system:chaos-b") == "ksched preemption"
    assert deleter_kind("system:serviceaccount:kube-system:replicaset-controller") == "replicaset-controller"
    assert deleter_kind("system:kube-controller-manager") == "system:kube-controller-manager"
    assert deleter_kind("admin") == "the soak"


def _lease(verb: str, name: str, at: str, holder: str = "", duration: int = 6) -> str:
    event: dict[str, Any] = {
        "stage": "ResponseComplete",
        "verb": verb,
        "objectRef": {"resource": "leases", "namespace": "kube-system", "name": name},
        "responseStatus": {"code": 200},
        "user": {"username": f"system:serviceaccount:kube-system:{holder or 'x'}"},
        "requestReceivedTimestamp": at,
        "stageTimestamp": at,
    }
    if verb != "delete":
        event["responseObject"] = {
            "metadata": {"name": name},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration},
        }
    return json.dumps(event)


def test_sharded_replicas_are_live_while_their_leases_are_renewed_and_binds_name_their_node(
    tmp_path: Path,
) -> None:
    a, b = f"{LEASE_NAME}-shard-aaaa", f"{LEASE_NAME}-shard-bbbb"
    lines = [
        _lease("create", a, "2026-11-22T10:00:00Z", "chaos-a"),
        _lease("create", b, "2026-11-22T10:00:01Z", "chaos-b"),
        _lease("update", a, "2026-11-22T10:00:05Z", "chaos-a"),
        _lease("update", "kube-scheduler", "2026-11-22T10:00:05Z", "other"),  # not the soak's
        _lease("delete", b, "2026-11-22T10:00:06Z"),  # chaos-b stopped with SIGTERM
        _event(
            "create",
            201,
            "system:serviceaccount:kube-system:chaos-a",
            "bare-1",
            sub="binding",
            requestObject={"kind": "Binding", "target": {"kind": "Node", "name": "kwok-node-00007"}},
        ),
    ]
    log = tmp_path / "audit.log"
    log.write_text("\n".join(lines) + "\n")
    records = read_audit(log)
    assert [w.name for w in records.shard_leases] == [a, b, a, b] and not records.leases
    t0 = records.shard_leases[0].at
    timeline = Memberships.of(records.shard_leases)
    assert timeline.at(t0 + 2) == ("chaos-a", "chaos-b")
    assert timeline.at(t0 + 6.5) == ("chaos-a",)  # deleted: gone at once
    assert timeline.at(t0 + 11.5) == ()  # a's last renewal ran out at 11 s
    # Every membership in force over a stretch: b's deletion falls inside 5-7 s.
    assert timeline.between(t0 + 5, t0 + 7) == {("chaos-a", "chaos-b"), ("chaos-a",)}
    assert timeline.changes() == 3  # a joins, then b; b is deleted; a runs out
    (bind,) = records.binds
    assert bind.node == "kwok-node-00007"
    assert longest_gap([t0 + 1, t0 + 4], t0, t0 + 10)[1] == 6.0


def test_gaps_with_the_control_plane_down_taken_out() -> None:
    # Binds at 1 and 4 in [0, 20]: the longest stretch is 4 -> 20 (16 s).
    assert longest_gap([1.0, 4.0], 0.0, 20.0) == (4.0, 16.0)
    # The API server down over 6-10 and (overlapping) 9-14: up over 0-6 and 14-20.
    outages = [(9.0, 14.0), (6.0, 10.0)]
    assert serving(0.0, 20.0, outages) == [(0.0, 6.0), (14.0, 20.0)]
    assert serving(7.0, 12.0, outages) == []  # wholly inside
    assert serving(0.0, 20.0, []) == [(0.0, 20.0)]
    # Up, with no bind: 1 -> 4 (3 s), 4 -> 6 (2 s), 14 -> 20 (6 s): from its return to the end.
    assert longest_outside([1.0, 4.0], 0.0, 20.0, outages) == (14.0, 6.0)
    # A bind 2 s after its return: 15 -> 20 is the longest.
    assert longest_outside([1.0, 4.0, 16.0], 0.0, 20.0, outages) == (16.0, 4.0)


def test_a_replica_that_restarts_just_after_its_lease_ran_out_left_for_a_moment() -> None:
    """chaos-c, killed, renewed last at 10 s (6 s Leases) and again from its restart at
    16.3 s: as written it was gone over 16-16.3 s, and a bind by chaos-a onto its nodes at
    16.6 s may have followed a reading in that moment."""
    a, c = f"{LEASE_NAME}-shard-aaaa", f"{LEASE_NAME}-shard-cccc"
    writes = [LeaseWrite(t, "chaos-a", 6.0, a) for t in range(0, 20)]
    writes += [LeaseWrite(float(t), "chaos-c", 6.0, c) for t in range(0, 11)]
    writes += [LeaseWrite(16.3, "chaos-c", 6.0, c)]
    timeline = Memberships.of(sorted(writes, key=lambda w: w.at))
    assert timeline.at(16.6) == timeline.at(14.6) == ("chaos-a", "chaos-c")
    assert ("chaos-a",) in timeline.between(14.6, 16.6)
    assert timeline.between(12.0, 15.0) == {("chaos-a", "chaos-c")}
