"""``ksched rebalance --dry-run`` on a fake live cluster (the API server's objects handed to
the command as ``ksched.commands.live`` would list them): the hot nodes, each move with its
values before and after, the skipped candidates grouped by reason, ``--json``, and the exit
codes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from ksched.commands import live
from ksched.commands.cli import main
from ksched.engine.rebalance import BUDGET_SPENT
from ksched.loop.metrics import metrics_server
from ksched.loop.metrics.samples import Sample
from tests.conftest import node, pod

Obj = dict[str, Any]
LONG_AGO = "2020-01-01T00:00:00Z"
CONFIG = {
    "apiVersion": "ksched.io/v1alpha1",
    "kind": "KschedConfiguration",
    "profiles": [{"schedulerName": "ksched"}],
    "metrics": [
        {
            "name": "u",
            "source": "metrics-server",
            "resource": "cpu",
            "maxAge": "5m",
            "missing": "exclude",
            "filter": {"above": 0.8},
            "estimate": {"resource": "cpu"},
        }
    ],
    "rebalance": {"metrics": [{"name": "u", "high": 0.8, "low": 0.6}], "maxPerNode": 5},
}
# What metrics-server answers for u: n3 is missing from its sample (excluded).
SAMPLE = {"n0": 0.9, "n1": 0.5, "n2": 0.3}


def rfc3339(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def measured_node(name: str) -> Obj:
    """A 4-cpu node."""
    return {"kind": "Node", **node(name)}


def running(
    name: str, node_name: str, cpu: str = "1", kind: str = "ReplicaSet", started: str = LONG_AGO
) -> Obj:
    p = pod(name, cpu=cpu, node_name=node_name)
    p["metadata"].update(
        uid=f"uid-{name}",
        creationTimestamp=started,
        ownerReferences=[{"kind": kind, "name": "web", "uid": "uid-web", "controller": True}],
    )
    p["status"] = {"phase": "Running", "startTime": started}
    return {"kind": "Pod", **p}


def cluster() -> list[Obj]:
    just_now = rfc3339(datetime.now(UTC))
    return [
        measured_node("n0"),
        measured_node("n1"),
        measured_node("n2"),
        # Not in the metric's sample: no value, excluded.
        measured_node("n3"),
        running("big", "n0"),
        running("proxy", "n0", cpu="100m", kind="DaemonSet"),
        *(running(f"new-{i}", "n0", cpu="100m", started=just_now) for i in range(4)),
    ]


@pytest.fixture
def sample(monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    values = dict(SAMPLE)
    monkeypatch.setattr(
        metrics_server.MetricsServerSource,
        "query",
        # Evaluated 30 s ago (metrics-server stamps a sample with its window's end, which lags):
        # the pods started since are not in it.
        lambda self, metric, nodes: Sample(dict(values), datetime.now(UTC).timestamp() - 30.0),
    )
    return values


@pytest.fixture
def fake_live(monkeypatch: pytest.MonkeyPatch, sample: dict[str, float]) -> list[Obj]:
    objects = cluster()
    monkeypatch.setattr(live, "connect", lambda kubeconfig: object())
    monkeypatch.setattr(live, "live_objects", lambda kube: objects)
    return objects


def config_file(tmp_path: Path, config: Obj = CONFIG) -> str:
    path = tmp_path / "ksched.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_dry_run_prints_hot_nodes_moves_and_what_stays(
    fake_live: list[Obj], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rebalance", "--dry-run", "--config", config_file(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "hotSamples (3) consecutive fresh samples" in out
    assert "rebalance.enabled is false" in out
    assert (
        "the values are the running rebalancer's: each sample plus the load estimate of recently bound pods"
        in out
    )
    assert "  n0    u       0.90   0.80" in out
    # n0's sample is 0.9; the four pods started just now add their estimate (0.1) to it.
    assert "moves (1):\n  default/big: n0 -> n2  u on n0 1.00 -> 0.75, on n2 0.30 -> 0.55\n" in out
    assert "skipped on n0 (5):\n" in out
    assert "  default/proxy: DaemonSet pod\n" in out
    assert (
        "  4 pods: younger than minPodAge 5m0s (default/new-0, default/new-1, default/new-2 and 1 more)"
        in out
    )


def test_dry_run_json_is_the_plan(
    fake_live: list[Obj], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rebalance", "--dry-run", "--json", "--config", config_file(tmp_path)]) == 0
    captured = capsys.readouterr()
    plan = json.loads(captured.out)
    assert [(h["node"], h["metric"], h["value"]) for h in plan["hot"]] == [("n0", "u", 0.9)]
    [move] = plan["moves"]
    assert (move["pod"], move["source"], move["target"], move["workload"]) == (
        "default/big",
        "n0",
        "n2",
        "ReplicaSet/default/web",
    )
    assert move["targetAfter"] == pytest.approx(0.55)
    assert {s["reason"] for s in plan["skipped"]} == {"DaemonSet pod", "younger than minPodAge 5m0s"}
    assert "hotSamples" in captured.err, "notes go to stderr with --json"


def test_no_hot_node(
    fake_live: list[Obj], sample: dict[str, float], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample["n0"] = 0.7
    assert main(["rebalance", "--dry-run", "--config", config_file(tmp_path)]) == 0
    assert capsys.readouterr().out.endswith("no hot node: nothing to move\n")


def test_without_dry_run_it_says_where_rebalancing_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rebalance"]) == 2
    err = capsys.readouterr().err
    assert "rebalancing runs inside `ksched run`" in err and "rebalance.enabled" in err


def test_a_configuration_with_no_hot_line_is_refused(
    fake_live: list[Obj], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {**CONFIG, "metrics": [{**CONFIG["metrics"][0], "filter": {}}], "rebalance": {}}  # type: ignore[index]
    assert main(["rebalance", "--dry-run", "--config", config_file(tmp_path, config)]) == 2
    assert "nothing can make a node hot" in capsys.readouterr().err


def test_the_eviction_rate_caps_the_moves_as_the_running_rebalancer_would(
    fake_live: list[Obj], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """evictionsPerMinute 0 evicts nothing, whatever maxPerCycle says: no move is shown."""
    config = {**CONFIG, "rebalance": {**CONFIG["rebalance"], "evictionsPerMinute": 0}}  # type: ignore[dict-item]
    assert main(["rebalance", "--dry-run", "--json", "--config", config_file(tmp_path, config)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["moves"] == []
    assert {"pod": "default/big", "node": "n0", "reason": BUDGET_SPENT} in plan["skipped"]


def test_a_stale_metrics_server_sample_is_not_judged(
    fake_live: list[Obj], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """metrics-server answers with n0 over the line, measured 10 minutes ago (maxAge 1m)."""
    at = (datetime.now(UTC) - timedelta(minutes=10)).timestamp()
    monkeypatch.setattr(
        metrics_server.MetricsServerSource, "query", lambda self, metric, nodes: Sample({"n0": 0.95}, at)
    )
    metric = {
        "name": "cpu",
        "source": "metrics-server",
        "resource": "cpu",
        "maxAge": "1m",
        "filter": {"above": 0.8},
        "estimate": {"resource": "cpu"},
    }
    config = {**CONFIG, "metrics": [metric], "rebalance": {}}
    assert main(["rebalance", "--dry-run", "--config", config_file(tmp_path, config)]) == 0
    out = capsys.readouterr().out
    assert "note: metric cpu: no value younger than 60s: not judged" in out
    assert out.endswith("no hot node: nothing to move\n")


def test_a_move_a_disruption_budget_would_refuse_is_noted(
    fake_live: list[Obj], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 0},
    }
    fake_live[4]["metadata"]["labels"] = {"app": "web"}
    fake_live.append(budget)
    assert main(["rebalance", "--dry-run", "--config", config_file(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "note: default/big: a PodDisruptionBudget allows no disruption now" in out
    budget["status"] = {"disruptionsAllowed": 1}
    assert main(["rebalance", "--dry-run", "--config", config_file(tmp_path)]) == 0
    assert "PodDisruptionBudget" not in capsys.readouterr().out


def test_an_annotation_metric_is_never_judged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A price or another annotation is not load that moving a pod changes, and has no series
    of samples to count hot ones in: naming it for the rebalancer is refused."""
    metric = {
        "name": "price",
        "source": "annotation",
        "annotation": "ksched.io/price",
        "filter": {"above": 1},
    }
    config = {
        **CONFIG,
        "metrics": [metric],
        "rebalance": {"metrics": [{"name": "price", "high": 1, "low": 0.5}]},
    }
    assert main(["rebalance", "--dry-run", "--config", config_file(tmp_path, config)]) == 2
    assert "the rebalancer judges only metrics sampled over time" in capsys.readouterr().err
