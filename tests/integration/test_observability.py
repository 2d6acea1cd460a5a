"""deploy/observability with promtool (Debian's prometheus package): the PrometheusRule's
groups and every dashboard query are valid PromQL, and each alert fires when it should
and stays quiet otherwise (``promtool test rules`` on synthetic series)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ksched.cluster.processes import ClusterError
from ksched.cluster.prometheus import prometheus_binary
from tests.integration.helpers import unavailable

OBSERVABILITY = Path(__file__).resolve().parents[2] / "deploy" / "observability"
# Grafana's variables, replaced by values Prometheus accepts.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "1h", "$job": ".*"}

# (name, input series, alert, evaluated at, labels of the alerts expected then).
ALERT_CASES: list[tuple[str, list[dict[str, str]], str, str, list[dict[str, str]]]] = [
    (
        "no replica leads",
        [
            {"series": 'ksched_leader{job="ksched",instance="a"}', "values": "0x10"},
            {"series": 'ksched_leader{job="ksched",instance="b"}', "values": "0x10"},
            {"series": 'ksched_shadow_decisions_total{job="ksched",outcome="same"}', "values": "0x10"},
        ],
        "KschedNoLeader",
        "5m",
        [{"severity": "critical", "job": "ksched"}],
    ),
    (
        "one replica leads",
        [
            {"series": 'ksched_leader{job="ksched",instance="a"}', "values": "1x10"},
            {"series": 'ksched_leader{job="ksched",instance="b"}', "values": "0x10"},
        ],
        "KschedNoLeader",
        "5m",
        [],
    ),
    (
        "a shadow ksched, which never leads",
        [
            {"series": 'ksched_leader{job="ksched-shadow",instance="a"}', "values": "0x10"},
            {
                "series": 'ksched_shadow_decisions_total{job="ksched-shadow",outcome="same"}',
                "values": "0+3x10",
            },
        ],
        "KschedNoLeader",
        "5m",
        [],
    ),
    (
        "no ksched scraped at all",
        [{"series": 'up{job="node"}', "values": "1x10"}],
        "KschedNoLeader",
        "5m",
        [{"severity": "critical"}],
    ),
    (
        "degraded for 15 minutes",
        [{"series": 'ksched_degraded{job="ksched",reason="metric_unavailable"}', "values": "1x20"}],
        "KschedMetricsDegraded",
        "15m",
        [{"severity": "warning", "job": "ksched", "reason": "metric_unavailable"}],
    ),
    (
        "degraded for 5 minutes, then recovered",
        [{"series": 'ksched_degraded{job="ksched",reason="metric_unavailable"}', "values": "1x5 0x15"}],
        "KschedMetricsDegraded",
        "15m",
        [],
    ),
    (
        "unschedulable pods pile up",
        [
            {"series": 'ksched_pending_pods{job="ksched",queue="unschedulable"}', "values": "0+5x45"},
            {"series": 'ksched_pending_pods{job="ksched",queue="active"}', "values": "2x45"},
        ],
        "KschedPendingPodsGrowing",
        "40m",
        [{"severity": "warning", "job": "ksched"}],
    ),
    (
        "a steady queue",
        [{"series": 'ksched_pending_pods{job="ksched",queue="active"}', "values": "50x45"}],
        "KschedPendingPodsGrowing",
        "40m",
        [],
    ),
    (
        "binds fail",
        [{"series": 'ksched_binding_errors_total{job="ksched",reason="error"}', "values": "0+10x20"}],
        "KschedBindingErrors",
        "15m",
        [{"severity": "warning", "job": "ksched"}],
    ),
    (
        "binds meet pods already bound or deleted",
        [
            {"series": 'ksched_binding_errors_total{job="ksched",reason="conflict"}', "values": "0+10x20"},
            {"series": 'ksched_binding_errors_total{job="ksched",reason="gone"}', "values": "0+2x20"},
        ],
        "KschedBindingErrors",
        "15m",
        [],
    ),
    (
        "the rebalancer evicts three pods a minute for an hour",
        [{"series": 'ksched_rebalance_evictions_total{job="ksched",reason="cpu"}', "values": "0+3x60"}],
        "KschedRebalanceEvictionRate",
        "55m",
        [{"severity": "warning", "job": "ksched"}],
    ),
    (
        "the rebalancer cools a few nodes, then has nothing to move",
        [{"series": 'ksched_rebalance_evictions_total{job="ksched",reason="cpu"}', "values": "0+3x5 15x55"}],
        "KschedRebalanceEvictionRate",
        "55m",
        [],
    ),
    (
        "budgets refuse the rebalancer's moves for an hour",
        [{"series": 'ksched_rebalance_blocked_total{job="ksched",reason="pdb"}', "values": "0+1x60"}],
        "KschedRebalanceBlocked",
        "55m",
        [{"severity": "info", "job": "ksched"}],
    ),
    (
        "a budget refuses a move once",
        [{"series": 'ksched_rebalance_blocked_total{job="ksched",reason="pdb"}', "values": "0 1x60"}],
        "KschedRebalanceBlocked",
        "55m",
        [],
    ),
    (
        "every eviction fails (no eviction RBAC)",
        [
            {"series": 'ksched_rebalance_blocked_total{job="ksched",reason="failed"}', "values": "0+2x30"},
            {"series": 'ksched_rebalance_blocked_total{job="ksched",reason="pdb"}', "values": "0x30"},
        ],
        "KschedRebalanceEvictionsFail",
        "25m",
        [{"severity": "warning", "job": "ksched"}],
    ),
    (
        "budgets refuse moves, and no eviction fails",
        [
            {"series": 'ksched_rebalance_blocked_total{job="ksched",reason="failed"}', "values": "0x30"},
            {"series": 'ksched_rebalance_blocked_total{job="ksched",reason="pdb"}', "values": "0+2x30"},
        ],
        "KschedRebalanceEvictionsFail",
        "25m",
        [],
    ),
]


@pytest.fixture(scope="module")
def promtool() -> str:
    try:
        return str(Path(prometheus_binary()).with_name("promtool"))
    except ClusterError as err:
        unavailable(str(err))
        raise


def rule_groups() -> dict[str, Any]:
    rule = yaml.safe_load((OBSERVABILITY / "prometheusrule.yaml").read_text())
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    groups: dict[str, Any] = rule["spec"]
    return groups


def check_rules(promtool: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )


def test_the_rule_groups_pass_promtool(promtool: str, tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule_groups()))
    out = check_rules(promtool, path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 7 rules found" in out.stdout


def test_every_dashboard_query_is_valid_promql(promtool: str, tmp_path: Path) -> None:
    queries = []
    for panel in json.loads((OBSERVABILITY / "grafana-dashboard.json").read_text())["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            queries.append({"record": f"dashboard:panel_{panel['id']}:{target['refId']}", "expr": expr})
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": queries}]}))
    out = check_rules(promtool, path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(queries)} rules found" in out.stdout


def test_each_alert_fires_when_it_should_and_only_then(promtool: str, tmp_path: Path) -> None:
    # The annotations are templates checked above; here only when each alert fires counts.
    groups = rule_groups()
    for group in groups["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(groups))
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                {
                    "eval_time": at,
                    "alertname": alert,
                    "exp_alerts": [{"exp_labels": labels} for labels in expected],
                }
            ],
        }
        for _, series, alert, at, expected in ALERT_CASES
    ]
    suite = tmp_path / "alerts-test.yaml"
    suite.write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests})
    )
    out = subprocess.run(
        [promtool, "test", "rules", str(suite)], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert out.returncode == 0, "\n".join(
        [f"case {i}: {c[0]}" for i, c in enumerate(ALERT_CASES)] + [out.stdout, out.stderr]
    )
