"""``ksched bench --cluster --existing-pods``: the fill's mix and placements hold what the bench
then checks (every constraint, no node over capacity), and the CPU hog leaves nothing behind."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from ksched.bench import invariants
from ksched.bench.sidebyside import fill
from ksched.bench.sidebyside.existing import headroom
from ksched.bench.sidebyside.hog import cpu_hog
from ksched.bench.sidebyside.options import NODE_PODS, ExistingOptions
from ksched.cluster.local import fake_nodes
from ksched.errors import KschedError
from ksched.objects import Obj


def _owner(kind: str, name: str) -> Obj:
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "uid": f"uid-{name}"}}


def _bound_pods(groups: list[fill.Group]) -> list[Obj]:
    """The fill's pods as the API server would list them once created."""
    pods = []
    for g in groups:
        owner = _owner("DaemonSet" if g.kind == fill.DAEMON else "ReplicaSet", g.name)
        for i, n in enumerate(g.nodes):
            p = fill.pod(g, 0, i, owner, None, fill.node_name(n))
            p["metadata"]["uid"] = f"{g.namespace}/{p['metadata']['name']}"
            pods.append(p)
    return pods


@pytest.mark.parametrize(
    ("count", "pods", "zones"),
    [(100, 3000, 3), (101, 4000, 4), (100, 9000, 3)],
    ids=["ci size", "zones of unequal size", "nodes nearly full"],
)
def test_plan_keeps_every_constraint_and_capacity(count: int, pods: int, zones: int) -> None:
    most = NODE_PODS - 10
    groups = fill.plan(count, zones, pods, 10, seed=3)
    listed = fake_nodes(count, zones)["items"]
    bound = _bound_pods(groups)
    assert len(bound) == pods
    per_node = Counter(p["spec"]["nodeName"] for p in bound)
    assert len(per_node) == count and max(per_node.values()) == most
    # A DaemonSet pod on every node; the rest a mix of every kind.
    daemon = [g for g in groups if g.kind == fill.DAEMON]
    assert len(daemon) == 1 and sorted(daemon[0].nodes) == list(range(count))
    assert {g.kind for g in groups} == {fill.DAEMON, fill.WEB, fill.SPREAD, fill.ANTI}
    assert invariants.overcommitted(listed, bound) == []
    assert invariants.unknown_nodes(listed, bound) == []
    by_namespace: dict[str, list[Obj]] = {}
    for p in bound:
        by_namespace.setdefault(p["metadata"]["namespace"], []).append(p)
    assert [v for ps in by_namespace.values() for v in invariants.constraint_violations(listed, ps)] == []


def test_node_counts_vary_and_sum() -> None:
    import random

    counts = fill.node_counts(1000, 30000, 100, random.Random(1))
    assert sum(counts) == 30000 and min(counts) >= 1 and max(counts) <= 100
    assert counts.count(100) >= 1000 // fill.DENSE_EVERY  # some nodes full
    rest = [c for c in counts if c < 100]
    assert max(rest) - min(rest) > 10  # the others not all alike


def test_plan_refuses_what_does_not_fit() -> None:
    with pytest.raises(KschedError, match="does not fit"):
        fill.plan(10, 3, 10 * NODE_PODS, 5, seed=1)
    with pytest.raises(KschedError, match="DaemonSet"):
        fill.plan(10, 3, 5, 5, seed=1)


def test_headroom_covers_a_round_robin_phase_and_every_churn() -> None:
    opts = ExistingOptions(
        nodes=100,
        existing_pods=3000,
        schedulers=["null-binder", "kube-scheduler", "ksched"],
        kscheds={},
        drain_pods=500,
        churn_pods=500,
        churn_rate=100.0,
        steady_pods=200,
        rate=50.0,
        stall_s=60.0,
        out=Path("unused"),
    )
    assert headroom(opts) == 5 + 3 * 5


def test_churned_pod_is_the_new_revision_of_its_deployment() -> None:
    group = fill.Group(fill.WEB, "existing-000", "web-00001", (0, 1), ("10m", "32Mi"))
    old = fill.pod(
        group, 0, 0, _owner("ReplicaSet", fill.replica_set_name(group, 0)), None, "kwok-node-00000"
    )
    new = fill.pod(group, 1, 0, _owner("ReplicaSet", fill.replica_set_name(group, 1)), "ksched", None)
    assert old["metadata"]["labels"]["app"] == new["metadata"]["labels"]["app"] == "web-00001"
    assert old["metadata"]["labels"]["pod-template-hash"] != new["metadata"]["labels"]["pod-template-hash"]
    assert old["metadata"]["name"] != new["metadata"]["name"]
    assert new["spec"]["schedulerName"] == "ksched" and "nodeName" not in new["spec"]


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True
        if ") Z " in stat:
            return True
        time.sleep(0.05)
    return False


def test_cpu_hog_spins_and_stops_with_its_context() -> None:
    with cpu_hog(1) as pids:
        assert len(pids) == 1
        time.sleep(0.5)
        fields = Path(f"/proc/{pids[0]}/stat").read_text().rsplit(")", 1)[1].split()
        assert int(fields[11]) + int(fields[12]) > 0  # it used CPU
    assert _gone(pids[0], 5)


def test_cpu_hog_exits_when_the_bench_is_killed() -> None:
    """A SIGKILLed bench runs no teardown: its spinners notice their parent is gone."""
    script = (
        "import sys, time\n"
        "from ksched.bench.sidebyside.hog import cpu_hog\n"
        "with cpu_hog(1) as pids:\n"
        "    print(pids[0], flush=True)\n"
        "    time.sleep(60)\n"
    )
    bench = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert bench.stdout is not None
    pid = int(bench.stdout.readline())
    bench.kill()
    bench.wait()
    assert _gone(pid, 5), f"spinner {pid} outlived its bench"
