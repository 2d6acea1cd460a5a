"""Differential test: ksched's default-equivalent profile against the real kube-scheduler.

Each seeded scenario (see ``scenarios.py``) is created on a dedicated local
control plane whose kube-scheduler scores every node
(``percentageOfNodesToScore: 100``); the pending pod is left to
kube-scheduler, and ksched's engine is run on the same objects as the API
server stored them. Asserted per scenario:

- both agree whether the pod is schedulable;
- unschedulable: the FailedScheduling messages are identical, PostFilter
  (DynamicResources, DefaultPreemption) part included;
- preempting: the FailedScheduling message (upstream's FitError alone: a
  nominating PostFilter adds nothing) is identical;
- schedulable: kube-scheduler's node is feasible for ksched and among its
  top-scoring nodes (kube-scheduler breaks ties at random).

``KSCHED_DIFF_SCENARIOS`` sets the count (300 in CI; the README documents a
nightly-size run) and ``KSCHED_DIFF_SEED`` the first seed.
The scenarios include volumes and nominated pods (``scenarios.py``);
``KSCHED_DIFF_VOLUMES=0`` leaves them out.
"""

from __future__ import annotations

import collections
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from ksched.cluster import local
from ksched.config import Config
from ksched.engine import Engine, Placement
from ksched.engine.disruption_budgets import disruption_budget
from ksched.engine.snapshot import build_snapshot
from ksched.engine.spread_selectors import SpreadSelectors
from ksched.engine.storage import Storage
from ksched.loop.client import MERGE_PATCH, Kube, load_configuration
from tests.integration.helpers import create, events_for, own_cluster, pods_in, wait_for
from tests.integration.scenarios import NAMESPACE_LABELS, NAMESPACES, PRIORITY_CLASSES, Scenario, generate

pytestmark = pytest.mark.cluster

SCENARIOS = int(os.environ.get("KSCHED_DIFF_SCENARIOS", "300"))
FIRST_SEED = int(os.environ.get("KSCHED_DIFF_SEED", "0"))
VOLUMES = os.environ.get("KSCHED_DIFF_VOLUMES", "1") == "1"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def diff_kube(cluster: local.ClusterState, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """A second control plane of its own: no node but the scenario's is ever in kube-scheduler's view."""
    with own_cluster(tmp_path_factory.mktemp("diff-cluster")):
        state = local.up(nodes=0, with_scheduler=True, percentage_of_nodes_to_score=100)
        kube = Kube(load_configuration(state.kubeconfig, 32))
        create(
            kube,
            [
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": ns, "labels": NAMESPACE_LABELS[ns]},
                }
                for ns in NAMESPACES
            ],
        )
        for name, value in PRIORITY_CLASSES.items():
            body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
            if name.endswith("-never"):
                body["preemptionPolicy"] = "Never"
            r = kube.request(
                "POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body={**body, "value": value}
            )
            assert r.status in (200, 201, 409), r.data[:300]
        # The namespaces' default ServiceAccount is not needed: ServiceAccount admission is off.
        yield kube


def _path(obj: Obj) -> str:
    ns = obj["metadata"].get("namespace")
    return {
        "Node": "/api/v1/nodes",
        "Pod": f"/api/v1/namespaces/{ns}/pods",
        "Service": f"/api/v1/namespaces/{ns}/services",
        "ReplicaSet": f"/apis/apps/v1/namespaces/{ns}/replicasets",
        "PodDisruptionBudget": f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
        "PersistentVolume": "/api/v1/persistentvolumes",
        "PersistentVolumeClaim": f"/api/v1/namespaces/{ns}/persistentvolumeclaims",
        "StorageClass": "/apis/storage.k8s.io/v1/storageclasses",
        "CSINode": "/apis/storage.k8s.io/v1/csinodes",
    }[obj["kind"]]


def _post(kube: Kube, obj: Obj) -> Obj:
    r = kube.request("POST", _path(obj), body=obj)
    assert r.status in (200, 201), r.data[:500]
    stored: Obj = r.json()
    return stored


def _nominate(kube: Kube, pod: Obj) -> Obj:
    """Create a pod kube-scheduler cannot place, wait for its verdict, then patch in
    its ``status.nominatedNodeName``: kube-scheduler's queue adds it to the
    nominator from that field, and (``preemptionPolicy: Never``) keeps it there."""
    node = pod["status"]["nominatedNodeName"]
    stored = _post(kube, {k: v for k, v in pod.items() if k != "status"})
    m = stored["metadata"]
    path = f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}"

    def unschedulable() -> bool:
        conditions = kube.request("GET", path).json()["status"].get("conditions") or []
        return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions)

    assert wait_for(unschedulable, 30, 0.02), f"kube-scheduler never tried {m['name']}"
    r = kube.request(
        "PATCH", f"{path}/status", body={"status": {"nominatedNodeName": node}}, content_type=MERGE_PATCH
    )
    assert r.ok, r.data[:300]
    patched: Obj = r.json()
    return patched


@dataclass
class Verdict:
    node: str | None  # where it was bound (after preempting, where it was nominated)
    message: str | None  # the first FailedScheduling message, if any
    nominated: str | None  # set when kube-scheduler preempted


def _volume_choice(kube: Kube, sc: Scenario, claims: set[tuple[str, str]]) -> str | None:
    """The node kube-scheduler chose for a pod whose unbound claims it is binding:
    the node of a local volume it gave one of them (its PreBind then waits for a
    PV controller this control plane does not run)."""
    for pv_name, node in sc.volume_nodes.items():
        pv = kube.request("GET", f"/api/v1/persistentvolumes/{pv_name}").json()
        ref = pv["spec"].get("claimRef") or {}
        if (ref.get("namespace"), ref.get("name")) in claims:
            return node
    return None


def _kube_scheduler_verdict(kube: Kube, sc: Scenario, namespace: str, name: str) -> Verdict:
    """Bound at once; unschedulable without preemption; or preempted, nominated and then bound."""
    claims = {
        (namespace, v["persistentVolumeClaim"]["claimName"])
        for v in sc.pending["spec"].get("volumes") or []
        if "persistentVolumeClaim" in v
    }

    def verdict() -> Verdict | None:
        pod = kube.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}").json()
        if pod["spec"].get("nodeName"):
            return Verdict(pod["spec"]["nodeName"], None, None)
        chosen = _volume_choice(kube, sc, claims) if sc.volume_nodes else None
        if chosen is not None:
            return Verdict(chosen, None, None)
        for c in pod["status"].get("conditions") or []:
            if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable":
                return Verdict(None, c.get("message", ""), pod["status"].get("nominatedNodeName"))
        return None

    found: Verdict | None = wait_for(verdict, 30, 0.05)
    assert found, f"kube-scheduler decided nothing for {namespace}/{name} in 30 s"
    if found.nominated:
        # Its victims go (grace period 0); it is retried and usually bound.
        def bound() -> str | None:
            pod = kube.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}").json()
            if pod["spec"].get("nodeName"):
                return pod["spec"]["nodeName"]  # type: ignore[no-any-return]
            return _volume_choice(kube, sc, claims) if sc.volume_nodes else None

        found.node = wait_for(bound, 5, 0.1)
    return found


# kube-scheduler's FailedScheduling messages by their PostFilter part, printed with the results.
POSTFILTER_KINDS: collections.Counter[str] = collections.Counter()


def _postfilter_kind(message: str) -> str:
    """What kube-scheduler's PostFilter said: nothing (it nominated a node), DefaultPreemption
    not eligible, or which per-node reasons its FitError counts."""
    if ". no new claims to deallocate" not in message and not message.endswith(". not found"):
        return "no PostFilter message (nominated)"
    if message.endswith(". not found"):
        return "PreFilter rejection: DynamicResources state not found"
    _, _, preemption = message.partition(", preemption: ")
    if not preemption:
        return "no preemption message"
    if preemption.startswith("not eligible"):
        return f"preemption: {preemption}"
    kinds = [
        "not helpful" if "not helpful" in preemption else "",
        "no victims" if "No preemption victims" in preemption else "",
    ]
    rest = (
        preemption.split(": ", 1)[1]
        .replace("Preemption is not helpful for scheduling", "")
        .replace("No preemption victims found for incoming pod", "")
    )
    if any(c.isalpha() for c in rest):
        kinds.append("unfit after eviction")
    return "preemption FitError: " + ", ".join(k for k in kinds if k)


def _preemption_key(victims: list[Obj]) -> tuple[int, int, int]:
    """Upstream's node choice among candidates: lowest highest victim priority,
    lowest sum of priorities, fewest victims (PDB violations and start times
    decide only between candidates equal on these)."""
    priorities = [int(v["spec"].get("priority") or 0) for v in victims]
    return (max(priorities, default=0), sum(priorities), len(priorities))


def _cleanup(kube: Kube, sc: Scenario) -> None:
    for ns in NAMESPACES:
        kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods", query={"gracePeriodSeconds": 0})
    for svc in sc.services:
        kube.request(
            "DELETE", f"/api/v1/namespaces/{svc['metadata']['namespace']}/services/{svc['metadata']['name']}"
        )
    if sc.replica_set is not None:
        m = sc.replica_set["metadata"]
        kube.request("DELETE", f"/apis/apps/v1/namespaces/{m['namespace']}/replicasets/{m['name']}")
    for pdb in sc.budgets:
        m = pdb["metadata"]
        kube.request(
            "DELETE", f"/apis/policy/v1/namespaces/{m['namespace']}/poddisruptionbudgets/{m['name']}"
        )
    for node in sc.nodes:
        kube.request("DELETE", f"/api/v1/nodes/{node['metadata']['name']}")
    for obj in sc.storage:
        # No controller removes the protection finalizers here.
        path = f"{_path(obj)}/{obj['metadata']['name']}"
        if obj["kind"] in ("PersistentVolume", "PersistentVolumeClaim"):
            kube.request("PATCH", path, body={"metadata": {"finalizers": None}}, content_type=MERGE_PATCH)
        kube.request("DELETE", path)


class StaleViewError(Exception):
    """kube-scheduler judged the pod over another number of nodes than the scenario's: its node
    watch had not caught up (this scenario's nodes not all there yet, or the last one's still)."""


def _judged_over(message: str | None) -> int | None:
    """The N of kube-scheduler's ``0/N nodes are available``; None without one."""
    m = re.match(r"0/(\d+) nodes are available", message or "")
    return int(m.group(1)) if m else None


def _run(kube: Kube, sc: Scenario, namespaces: dict[str, dict[str, str]]) -> str | None:
    """Run one scenario; returns None on agreement, else what differed."""
    nodes = [_post(kube, n) for n in sc.nodes]
    # Pods come through one watch in order, nodes through another: give the
    # node watch time to deliver before the pods that refer to them.
    time.sleep(0.25)
    selectors = SpreadSelectors()
    for svc in sc.services:
        selectors.update("v1", "Service", _post(kube, svc))
    pod = sc.pending
    if sc.replica_set is not None:
        rs = _post(kube, sc.replica_set)
        selectors.update("apps/v1", "ReplicaSet", rs)
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs["metadata"]["name"]}
        owner |= {"uid": rs["metadata"]["uid"], "controller": True}
        pod = {**pod, "metadata": {**pod["metadata"], "ownerReferences": [owner]}}
    if sc.services or sc.replica_set is not None:
        time.sleep(0.25)  # the Service and ReplicaSet watches deliver on their own
    budgets = [_post(kube, b) for b in sc.budgets]
    storage = Storage()
    for obj in sc.storage:
        storage.update(obj["kind"], _post(kube, obj), deleted=False)
    if sc.storage:
        time.sleep(0.25)  # the volume, claim, class and CSINode watches deliver on their own
    existing = []
    for j, p in enumerate(sc.existing):
        stored = _post(kube, p)
        # Distinct start times: preemption orders equal priorities by them
        # (with none, kube-scheduler takes "now" for each, an arbitrary order).
        started = {"status": {"startTime": f"2026-01-01T00:{j:02d}:00Z"}}
        m = stored["metadata"]
        r = kube.request(
            "PATCH",
            f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}/status",
            body=started,
            content_type=MERGE_PATCH,
        )
        assert r.ok, r.data[:300]
        existing.append(r.json())
    nominated = [_nominate(kube, p) for p in sc.nominated]
    pending = _post(kube, pod)
    ns, name = pending["metadata"]["namespace"], pending["metadata"]["name"]
    kube_verdict = _kube_scheduler_verdict(kube, sc, ns, name)
    left = {(p["metadata"]["namespace"], p["metadata"]["name"]) for n in NAMESPACES for p in pods_in(kube, n)}
    if not kube_verdict.nominated and any(
        (p["metadata"]["namespace"], p["metadata"]["name"]) not in left for p in existing
    ):
        # It preempted, and its victims went and it was bound before the first poll.
        kube_verdict.nominated = kube_verdict.node
        uid = pending["metadata"]["uid"]
        # kube-scheduler's event recorder writes its events on goroutines of their own: the
        # failed attempt's event may land after the bind that followed it.
        failed = wait_for(
            lambda: [
                e for e in events_for(kube, ns, name, "FailedScheduling") if e["regarding"].get("uid") == uid
            ],
            10,
        )
        kube_verdict.message = failed[0]["note"] if failed else None
    kube_node, kube_message = kube_verdict.node, kube_verdict.message
    judged = _judged_over(kube_message)
    if kube_node is not None and kube_node not in {n["metadata"]["name"] for n in sc.nodes}:
        raise StaleViewError(f"kube-scheduler bound onto {kube_node}, a node of another scenario")
    if judged is not None and judged != len(sc.nodes):
        raise StaleViewError(
            f"kube-scheduler judged {judged} nodes, the scenario has {len(sc.nodes)}: {kube_message}"
        )
    if kube_message is not None:
        POSTFILTER_KINDS[_postfilter_kind(kube_message)] += 1

    snapshot = build_snapshot(nodes, existing)
    snapshot.storage = storage
    snapshot.namespaces = namespaces
    snapshot.spread_selectors = selectors
    snapshot.budgets = [disruption_budget(b) for b in budgets]
    result = Engine(Config(), seed=sc.seed).schedule(
        snapshot, [pending], explain=f"{ns}/{name}", nominated=nominated
    )
    placement = result.placements[0]
    # None for a pod ksched rejects before filtering nodes (a claim that is
    # missing or unbound and Immediate): it is then unschedulable, compared below.
    ex = result.explanation
    if kube_verdict.nominated or placement.nominated_node:
        return _compare_preemption(kube, kube_verdict, placement, existing)
    if kube_node is None:
        if placement.node is not None:
            return f"kube-scheduler: unschedulable ({kube_message}); ksched: {placement.node}"
        assert kube_message is not None and placement.message is not None
        if kube_message != placement.message:
            return (
                f"messages differ:\n  kube-scheduler: {kube_message}\n  ksched:         {placement.message}"
            )
        return None
    if placement.node is None:
        return f"kube-scheduler: {kube_node}; ksched: unschedulable ({placement.message})"
    if ex is None:
        return f"kube-scheduler: {kube_node}; ksched explained nothing ({placement.message})"
    rows = {n.node: n for n in ex.nodes}
    chosen = rows[kube_node]
    if not chosen.feasible:
        return f"kube-scheduler chose {kube_node}, which ksched filters: {chosen.plugin}: {chosen.reasons}"
    best = max(n.total or 0.0 for n in ex.nodes if n.feasible)
    if chosen.total != best:
        totals = {n.node: n.total for n in ex.nodes if n.feasible}
        scores = {n.node: n.scores for n in ex.nodes if n.feasible}
        return (
            f"kube-scheduler chose {kube_node} (ksched total {chosen.total}), ksched's best is {best}: "
            f"{totals}\n{json.dumps(scores, indent=1)[:3000]}"
        )
    return None


def _compare_preemption(
    kube: Kube, kube_verdict: Verdict, placement: Placement, existing: list[Obj]
) -> str | None:
    """Both preempt; kube-scheduler's node is as good a candidate as ksched's by
    upstream's criteria; on the same node, the same victims; the messages agree."""
    if not kube_verdict.nominated or not placement.nominated_node:
        return (
            f"preemption: kube-scheduler nominated {kube_verdict.nominated} (bound {kube_verdict.node}), "
            f"ksched nominated {placement.nominated_node} (node {placement.node}, victims {placement.victims})"
        )
    theirs_message = kube_verdict.message or ""
    if theirs_message != placement.message:
        return f"messages differ:\n  kube-scheduler: {theirs_message}\n  ksched:         {placement.message}"
    # Victims: the bound pods deleted (grace period 0) or being deleted. Whether and
    # when kube-scheduler then binds the pod is its queue's business, not compared.
    left = {
        (p["metadata"]["namespace"], p["metadata"]["name"])
        for ns in NAMESPACES
        for p in pods_in(kube, ns)
        if not p["metadata"].get("deletionTimestamp")
    }
    by_key = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in existing}
    kube_victims = sorted(
        k for k, p in by_key.items() if (p["metadata"]["namespace"], p["metadata"]["name"]) not in left
    )
    ours = [by_key[k] for k in placement.victims]
    theirs = [by_key[k] for k in kube_victims]
    if placement.nominated_node == kube_verdict.nominated:
        if sorted(placement.victims) != kube_victims:
            return f"on {kube_verdict.nominated}: kube-scheduler evicted {kube_victims}, ksched {sorted(placement.victims)}"
    elif _preemption_key(ours) != _preemption_key(theirs):
        return (
            f"kube-scheduler preempted on {kube_verdict.nominated} ({kube_victims}), "
            f"ksched on {placement.nominated_node} ({list(placement.victims)}), which upstream would not rank equal"
        )
    return None


def test_ksched_agrees_with_kube_scheduler(diff_kube: Kube, capsys: pytest.CaptureFixture[str]) -> None:
    kube = diff_kube
    namespaces = {
        n["metadata"]["name"]: n["metadata"].get("labels") or {}
        for n in kube.request("GET", "/api/v1/namespaces").json()["items"]
    }
    runs: collections.Counter[str] = collections.Counter()
    disagreements: collections.Counter[str] = collections.Counter()
    outcomes: collections.Counter[str] = collections.Counter()
    failures = []
    started = time.monotonic()
    stale = 0
    for k in range(SCENARIOS):
        seed = FIRST_SEED + k
        # A verdict over a stale node list says nothing of either scheduler: the scenario runs
        # once more under other names (the first's objects may still be going), and a second
        # stale verdict is a failure.
        for prefix in (f"s{seed}", f"s{seed}r"):
            sc = generate(seed, prefix, volumes_and_nominations=VOLUMES)
            try:
                problem = _run(kube, sc, namespaces)
            except StaleViewError as err:
                problem = str(err)
                stale += 1
                time.sleep(1.0)  # for the watch to catch up with the cleanup, too
                continue
            finally:
                _cleanup(kube, sc)
            break
        for p in sc.plugins:
            runs[p] += 1
            if problem:
                disagreements[p] += 1
        if problem:
            failures.append(f"seed {seed}: {problem}")
        outcomes["disagree" if problem else "agree"] += 1
    elapsed = time.monotonic() - started
    with capsys.disabled():
        print(
            f"\ndifferential: {SCENARIOS} scenarios in {elapsed:.0f} s, {dict(outcomes)}, {stale} stale verdicts (each scenario run again once)"
        )
        for p in sorted(runs):
            print(f"  {p:45s} {runs[p]:5d} scenarios  {disagreements[p]:3d} disagreements")
        print("kube-scheduler's FailedScheduling messages by PostFilter part:")
        for kind, n in sorted(POSTFILTER_KINDS.items()):
            print(f"  {kind:70s} {n:5d}")
    report = os.environ.get("KSCHED_DIFF_REPORT")
    if report:
        with open(report, "w") as f:
            json.dump({"runs": runs, "disagreements": disagreements, "failures": failures}, f, indent=1)
    assert not failures, f"{len(failures)} of {SCENARIOS} scenarios disagree:\n" + "\n".join(failures[:10])
