"""deploy/observability: the Grafana dashboard and the PrometheusRule query only metrics
ksched exports, and the dashboard shows what an operator looks for first."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from ksched.loop.telemetry import Telemetry

OBSERVABILITY = Path(__file__).resolve().parents[2] / "deploy" / "observability"
METRIC_NAME = re.compile(r"\bksched_[a-z_]+\b")
# The series prometheus_client exposes for each kind of metric family.
SERIES_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
}
# What the dashboard must show: throughput, latency, queues, degraded metrics, leader, shadow agreement.
DASHBOARD_MUST_SHOW = {
    "ksched_schedule_attempts_total",
    "ksched_scheduling_attempt_duration_seconds_bucket",
    "ksched_pending_pods",
    "ksched_degraded",
    "ksched_leader",
    "ksched_shadow_decisions_total",
}


def exported_series() -> set[str]:
    names: set[str] = set()
    for family in Telemetry().registry.collect():
        names |= {family.name + suffix for suffix in SERIES_SUFFIXES[family.type]}
    return names


def strings_under(value: Any, keys: tuple[str, ...]) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            if k in keys and isinstance(v, str):
                yield v
            else:
                yield from strings_under(v, keys)
    elif isinstance(value, list):
        for v in value:
            yield from strings_under(v, keys)


def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((OBSERVABILITY / "grafana-dashboard.json").read_text())
    return doc


def dashboard_queries() -> list[str]:
    """Panel expressions and the template variables' queries."""
    return list(strings_under(dashboard(), ("expr", "query", "definition")))


def rule_expressions() -> list[str]:
    rule = yaml.safe_load((OBSERVABILITY / "prometheusrule.yaml").read_text())
    return [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]


def metric_names(expressions: list[str]) -> set[str]:
    return {name for e in expressions for name in METRIC_NAME.findall(e)}


def test_every_metric_the_dashboard_and_the_alerts_query_is_exported() -> None:
    exported = exported_series()
    for source, expressions in (("dashboard", dashboard_queries()), ("alerts", rule_expressions())):
        used = metric_names(expressions)
        assert used, source
        assert used - exported == set(), f"{source} queries metrics ksched does not export"


def test_the_dashboard_shows_throughput_latency_queues_health_and_shadow_agreement() -> None:
    assert DASHBOARD_MUST_SHOW - metric_names(dashboard_queries()) == set()


def test_the_dashboard_imports_into_any_prometheus_data_source() -> None:
    doc = dashboard()
    panels = doc["panels"]
    assert len({p["id"] for p in panels}) == len(panels), "panel ids are unique"
    assert all(p["gridPos"]["x"] + p["gridPos"]["w"] <= 24 for p in panels)
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    for panel in (p for p in panels if p["type"] != "row"):
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"]), panel["title"]
