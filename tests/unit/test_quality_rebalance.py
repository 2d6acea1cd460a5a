"""The quality benchmark's rebalance figures, load-shift's controllers, the evictions read
back from the audit log, and the descheduler's policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ksched.bench.quality.moves import evicted, record
from ksched.bench.quality.rebalance import (
    HOT_SAMPLES,
    BudgetSample,
    Eviction,
    PodRecord,
    hot_nodes,
    judge_rebalance,
    replacements,
    seconds_to_cool,
)
from ksched.bench.quality.run import rebalance_hot_samples
from ksched.bench.quality.scenarios import controllers, scenario
from ksched.cluster.descheduler import DeschedulerSetup, low_node_utilization_policy

STEP = 30.0


def _times(n: int) -> list[float]:
    return [STEP * i for i in range(n)]


@pytest.mark.parametrize(
    ("samples", "want"),
    [
        pytest.param([{"a": 0.5}, {"a": 0.6}], 0.0, id="never-hot"),
        pytest.param([{"a": 0.5}, {"a": 0.9}, {"a": 0.9}, {"a": 0.5}], 0.0, id="two-samples-over-are-noise"),
        pytest.param([{"a": 0.9}] * 4 + [{"a": 0.5, "b": 0.7}], 60.0, id="cooled"),
        pytest.param([{"a": 0.9}] * 3 + [{"a": 0.5}] + [{"a": 0.9}] * 3, None, id="hot-at-the-end"),
        pytest.param([{"a": 0.5, "c": 0.99}, {"a": 0.5, "c": 0.99}], 0.0, id="other-pools-node"),
    ],
)
def test_seconds_to_cool(samples: list[dict[str, float]], want: float | None) -> None:
    assert seconds_to_cool(_times(len(samples)), hot_nodes(samples, ["a", "b"], 0.8)) == want


def test_a_run_is_judged_with_its_configured_hot_samples() -> None:
    """With hotSamples 5, four samples over the line are not a hot node (the bench judged every
    run at 3), and five are; the round carries the rebalancer configuration's figure."""
    four = [{"a": 0.9}] * 4 + [{"a": 0.5}]
    assert seconds_to_cool(_times(len(four)), hot_nodes(four, ["a"], 0.8, samples=5)) == 0.0
    assert seconds_to_cool(_times(len(four)), hot_nodes(four, ["a"], 0.8)) == 60.0
    five = [{"a": 0.9}] * 5 + [{"a": 0.5}]
    figures = judge_rebalance(_times(len(five)), five, ["a"], 0.8, [], [], set(), [], hot_samples=5)
    assert figures.seconds_to_cool == 30.0 and figures.nodes_cooled == 1


def test_the_round_takes_hot_samples_from_the_rebalancer_configuration(tmp_path: Path) -> None:
    config = tmp_path / "rebalance.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "ksched.io/v1alpha1",
                "kind": "KschedConfiguration",
                "rebalance": {"hotSamples": 5},
            }
        )
    )
    assert rebalance_hot_samples(config) == 5
    assert rebalance_hot_samples(None) == HOT_SAMPLES


def _pod(name: str, node: str | None, created: float, workload: str = "w") -> PodRecord:
    return PodRecord(name, workload, node, created, None if node is None else created + 1)


def test_each_eviction_is_paired_with_a_later_replacement_of_its_workload_once() -> None:
    initial = {"w-0", "w-1", "v-0"}
    pods = [
        _pod("w-0", "a", 0.0),
        _pod("w-1", "a", 0.0),
        _pod("v-0", "a", 0.0, "v"),
        _pod("w-x", "b", 100.0),
        _pod("v-x", "c", 101.0, "v"),
        _pod("w-y", "c", 30.0),  # created before the evictions: not a replacement of them
    ]
    got = replacements([Eviction(99.5, "w-0", "a", "w"), Eviction(99.7, "w-1", "a", "w")], pods, initial)
    assert [r.name if r else None for r in got] == ["w-x", None]


@pytest.mark.parametrize(
    ("name", "evictions", "pods", "samples", "budgets", "want"),
    [
        pytest.param(
            "the replacement lands on a cool node: cooled with one eviction, no ping-pong",
            [Eviction(75.0, "w-0", "a", "w")],
            [_pod("w-0", "a", 0.0), _pod("w-1", "b", 80.0)],
            [{"a": 0.9, "b": 0.2}] * 3 + [{"a": 0.5, "b": 0.4}] * 2,
            [],
            {
                "seconds_to_cool": 30.0,
                "evictions": 1,
                "nodes_cooled": 1,
                "evictions_per_node_cooled": 1.0,
                "pingpong": 0,
                "hot_at_end": {},
            },
            id="cooled",
        ),
        pytest.param(
            "the replacement lands on a node that becomes hot within five minutes: ping-pong",
            [Eviction(75.0, "w-0", "a", "w")],
            [_pod("w-0", "a", 0.0), _pod("w-1", "b", 80.0)],
            [{"a": 0.9, "b": 0.2}] * 3 + [{"a": 0.5, "b": 0.85}] * 3,
            [],
            {
                "pingpong": 1,
                "seconds_to_cool": None,
                "nodes_cooled": 1,
                "moves": [(75.0, "w-0", "a", "b", True)],
                "hot_at_end": {"b": [0.2, 0.2, 0.2, 0.85, 0.85, 0.85]},
            },
            id="pingpong",
        ),
        pytest.param(
            "a budget below its desired healthy pods after its workload lost a pod; another "
            "workload's low budget before any eviction does not count",
            [Eviction(45.0, "w-0", "a", "w")],
            [_pod("w-0", "a", 0.0), _pod("w-1", None, 50.0)],
            [{"a": 0.9}] * 3 + [{"a": 0.5}],
            [
                BudgetSample(40.0, "w", 1, 2),
                BudgetSample(50.0, "w", 1, 2),
                BudgetSample(60.0, "w", 1, 2),
                BudgetSample(50.0, "v", 0, 2),
            ],
            {"pdb_violations": 1, "pending_after_eviction": 1, "pingpong": 0},
            id="budget-and-pending",
        ),
        pytest.param(
            "an eviction after the last sample is counted apart: it cooled nothing judged, yet "
            "its budget still counts",
            [Eviction(45.0, "w-0", "a", "w"), Eviction(200.0, "w-1", "a", "w")],
            [_pod("w-0", "a", 0.0), _pod("w-1", "a", 0.0), _pod("w-2", "b", 50.0)],
            [{"a": 0.9, "b": 0.2}] * 3 + [{"a": 0.5, "b": 0.3}],
            [BudgetSample(210.0, "w", 1, 2)],
            {
                "evictions": 1,
                "evictions_after_window": 1,
                "evictions_per_node_cooled": 1.0,
                "moves": [(45.0, "w-0", "a", "b", False)],
                "pdb_violations": 1,
            },
            id="after-the-window",
        ),
        pytest.param(
            "no eviction: a node that cooled by itself, nothing to pair",
            [],
            [_pod("w-0", "a", 0.0)],
            [{"a": 0.9}] * 3 + [{"a": 0.5}],
            [],
            {
                "evictions": 0,
                "nodes_cooled": 1,
                "evictions_per_node_cooled": 0.0,
                "pending_after_eviction": 0,
            },
            id="none",
        ),
    ],
)
def test_judge_rebalance(
    name: str,
    evictions: list[Eviction],
    pods: list[PodRecord],
    samples: list[dict[str, float]],
    budgets: list[BudgetSample],
    want: dict[str, object],
) -> None:
    figures = judge_rebalance(
        _times(len(samples)), samples, ["a", "b"], 0.8, evictions, pods, {"w-0"}, budgets
    )
    got = {k: getattr(figures, k) for k in want}
    assert got == want, name


def test_load_shift_workloads_share_a_profile_and_get_a_replica_set_each() -> None:
    s = scenario("load-shift", 10, "ns", "ksched", seed=1, rate=10)
    assert s.controlled
    objects = controllers(s.pods)
    sets = [o for o in objects if o["kind"] == "ReplicaSet"]
    budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert [rs["spec"]["replicas"] for rs in sets] == [3, 3, 3, 1]
    assert sum(rs["spec"]["replicas"] for rs in sets) == len(s.pods)
    assert [b["metadata"]["name"] for b in budgets] == ["svc-0", "svc-2"]
    for rs in sets:
        members = [p for p in s.pods if p["metadata"]["labels"]["app"] == rs["metadata"]["name"]]
        # A replacement made from the template uses what the pods it replaces did.
        assert {json.dumps(p["metadata"]["annotations"]) for p in members} == {
            json.dumps(rs["spec"]["template"]["metadata"]["annotations"])
        }
        assert rs["spec"]["template"]["spec"] == members[0]["spec"]
    assert not scenario("requests-lie", 10, "ns", "ksched", seed=1, rate=10).controlled


def _audit(code: int, namespace: str = "q", subresource: str = "eviction") -> str:
    return json.dumps(
        {
            "stage": "ResponseComplete",
            "verb": "create",
            "objectRef": {
                "resource": "pods",
                "subresource": subresource,
                "namespace": namespace,
                "name": "p",
            },
            "responseStatus": {"code": code},
            "stageTimestamp": "2026-01-01T00:00:01.500000Z",
        }
    )


def test_only_granted_evictions_in_the_namespace_count() -> None:
    lines = [_audit(201), _audit(429), _audit(201, "other"), _audit(201, subresource="binding")]
    assert evicted(lines, "q") == [(1767225601.5, "p")]


def test_a_pod_record_names_its_controller_else_its_app() -> None:
    pod = {
        "metadata": {
            "name": "svc-1-0",
            "labels": {"app": "svc-1"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"nodeName": "n1"},
        "status": {
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:02Z"}
            ]
        },
    }
    assert record(pod) == PodRecord("svc-1-0", "svc-1", "n1", 1767225600.0, 1767225602.0)
    pod["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs", "controller": True}]
    assert record(pod).workload == "rs"


def test_the_descheduler_balances_one_pool_and_namespace_at_the_rebalancer_lines() -> None:
    policy = low_node_utilization_policy(DeschedulerSetup("pool=1", "q-ns", high=0.8, low=0.6, interval_s=30))
    assert policy["nodeSelector"] == "pool=1"
    assert policy["metricsProviders"] == [{"source": "KubernetesMetrics"}]
    (profile,) = policy["profiles"]
    args = {c["name"]: c["args"] for c in profile["pluginConfig"]}
    assert args["LowNodeUtilization"]["thresholds"] == {"cpu": 60.0}
    assert args["LowNodeUtilization"]["targetThresholds"] == {"cpu": 80.0}
    assert args["LowNodeUtilization"]["metricsUtilization"] == {"source": "KubernetesMetrics"}
    assert args["DefaultEvictor"]["namespaceLabelSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "q-ns"
    }
    assert profile["plugins"]["balance"]["enabled"] == ["LowNodeUtilization"]
