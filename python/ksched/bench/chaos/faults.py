"""The faults the soak injects, one kind at a time, and when: a seeded schedule in which
every kind comes at least once and faults overlap."""

from __future__ import annotations

import random
import signal
import time

from ksched.bench.chaos.figures import (
    CHAOS_TAINT,
    LEASE_NAME,
    LEASE_NS,
    LEASE_S,
    NS,
    ChaosError,
    Fault,
    now,
)
from ksched.bench.chaos.replicas import Replica
from ksched.bench.chaos.soak import Soak
from ksched.cluster import local
from ksched.loop.client import ApiUnavailableError
from ksched.objects import Obj


def fault(soak: Soak, kind: str, rng: random.Random) -> None:
    record = Fault(kind, now())
    with soak.faults_lock:
        soak.faults.append(record)
    try:
        record.detail = inject(soak, record, rng)
    except Exception as err:  # a fault that could not be injected is reported, not fatal
        record.detail = f"not injected: {err}"
    record.end = now()
    soak.log(f"fault {kind}: {record.detail} ({record.end - record.start:.1f} s)")


def current_leader(soak: Soak) -> Replica | None:
    try:
        r = soak.api.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{LEASE_NAME}")
    except ApiUnavailableError:
        return None
    if not r.ok:
        return None
    holder = (r.json().get("spec") or {}).get("holderIdentity")
    return next((x for x in soak.replicas if x.identity == holder), None)


def inject(soak: Soak, record: Fault, rng: random.Random) -> str:
    kind = record.kind
    if kind == "leader-kill":
        leader = current_leader(soak)
        if leader is None:
            return "no leader to kill"
        leader.kill_and_restart(rng.uniform(1, 5))
        return f"killed {leader.identity}, restarted"
    if kind in ("replica-kill", "replica-freeze"):
        running = [r for r in soak.replicas if r.running()]
        if not running:
            return "no replica running"
        victim = rng.choice(running)
        record.target = victim.identity
        if kind == "replica-kill":
            victim.kill_and_restart(rng.uniform(1, 5))
            return f"killed {victim.identity}, restarted"
        seconds = LEASE_S + rng.uniform(2, 6)
        victim.freeze(seconds)
        return f"froze {victim.identity} for {seconds:.1f} s"
    if kind == "leader-freeze":
        leader = current_leader(soak)
        if leader is None:
            return "no leader to freeze"
        seconds = LEASE_S + rng.uniform(2, 6)
        leader.freeze(seconds)
        return f"froze {leader.identity} for {seconds:.1f} s"
    if kind in ("apiserver-restart", "etcd-restart", "watch-expiry"):
        with soak.control_lock:
            if kind == "watch-expiry":
                revision = local.etcd_compact()
                # Wait until the watchers have moved past nothing: a restart makes every
                # watch resume from a resourceVersion the compacted store no longer has.
                local.restart("kube-apiserver")
                return f"etcd compacted at revision {revision}, kube-apiserver restarted"
            component = "kube-apiserver" if kind == "apiserver-restart" else "etcd"
            local.restart(component, down_s=rng.uniform(0, 3))
            return f"{component} restarted"
    if kind == "prometheus-stop":
        down = rng.uniform(5, 15)
        local.restart("prometheus", down_s=down)
        return f"Prometheus stopped {down:.1f} s and restarted"
    if kind == "prometheus-hang":
        hang = rng.uniform(5, 15)
        local.signal_component("prometheus", signal.SIGSTOP)
        time.sleep(hang)
        local.signal_component("prometheus", signal.SIGCONT)
        return f"Prometheus hung {hang:.1f} s"
    if kind == "nodes-delete-add":
        count = max(1, len(soak.node_names) // 100)
        with soak.node_lock:
            victims = rng.sample(soak.node_names, count)
            for name in victims:
                soak.node_names.remove(name)
        for name in victims:
            soak.request("DELETE", f"/api/v1/nodes/{name}")
        time.sleep(rng.uniform(2, 8))
        with soak.node_lock:
            first = soak.next_node
            soak.next_node += count
        nodes = local.fake_nodes(count, 3, first)["items"]
        for node in nodes:
            soak.request("POST", "/api/v1/nodes", body=node)
        with soak.node_lock:
            soak.node_names.extend(n["metadata"]["name"] for n in nodes)
        return f"deleted {count} nodes, added {count}"
    if kind in ("nodes-cordon", "nodes-taint"):
        count = max(1, len(soak.node_names) // 50)
        with soak.node_lock:
            chosen = rng.sample(soak.node_names, count)
            for name in chosen:
                soak.node_names.remove(name)
        if kind == "nodes-cordon":
            on: Obj = {"spec": {"unschedulable": True}}
            off: Obj = {"spec": {"unschedulable": None}}
        else:
            on, off = {"spec": {"taints": [CHAOS_TAINT]}}, {"spec": {"taints": None}}
        for name in chosen:
            soak.request(
                "PATCH", f"/api/v1/nodes/{name}", body=on, content_type="application/merge-patch+json"
            )
        time.sleep(rng.uniform(5, 20))
        for name in chosen:
            soak.request(
                "PATCH", f"/api/v1/nodes/{name}", body=off, content_type="application/merge-patch+json"
            )
        with soak.node_lock:
            soak.node_names.extend(chosen)
        return f"{kind.split('-')[1]}ed {count} nodes, then undone"
    if kind == "pods-delete-inflight":
        count = rng.randrange(5, 20)
        for _ in range(count):
            name = soak.pod_name("doomed")
            with soak.lock:
                soak.deleted.add((NS, name))
            if soak.create(soak.pod(name), track=False):
                time.sleep(rng.uniform(0, 0.3))
                soak.request(
                    "DELETE", f"/api/v1/namespaces/{NS}/pods/{name}", query={"gracePeriodSeconds": 0}
                )
        return f"{count} pods deleted within 0.3 s of their creation"
    if kind == "podgroup-delete":
        soak.gang(rng, delete_group_after=rng.uniform(0, 1))
        return "a gang's PodGroup deleted while its pods were arriving"
    raise ChaosError(f"unknown fault {kind}")


def schedule(soak: Soak, seconds: float) -> list[tuple[float, str]]:
    """Fault start times (seconds from the start) drawn from the seed: every kind at least
    once, then more at random, a few seconds apart so that they overlap."""
    rng = random.Random(soak.seed * 7919 + 1)
    kinds = list(soak.fault_kinds)
    rng.shuffle(kinds)
    window = max(10.0, seconds - 10.0)
    extra = max(0, int(window / 12) - len(kinds))
    kinds += [rng.choice(soak.fault_kinds) for _ in range(extra)]
    step = window / len(kinds)
    return [(5.0 + i * step + rng.uniform(0, step / 2), kind) for i, kind in enumerate(kinds)]
