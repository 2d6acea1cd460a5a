"""The steering RBAC (deploy/steering/rbac.yaml and the Helm chart's copy) holds exactly what
:class:`~ksched.loop.steering.controller.Steering` writes: every request it makes is allowed by
the base role and the steering role together, and every rule of the steering role is used."""

from __future__ import annotations

from typing import Any

import yaml

from tests.unit.test_handoff_rbac import DEPLOY, VERBS, cluster_role, granted
from tests.unit.test_steering import DEDICATED, MARK, harness

__all__ = ["harness"]
HELM_TEMPLATE = DEPLOY / "helm" / "ksched" / "templates" / "steering-rbac.yaml"


def steering_requests(harness: Any) -> set[tuple[str, str]]:
    """What a leader's look (marking and unmarking, one node changed meanwhile) and its stop
    ask the API server for, as (verb, resource)."""
    h = harness({"n0": 0.9, "n1": 0.1, "n2": 0.1, "n3": 0.1}, {"n1": [DEDICATED, MARK]}, hold_s=0.0)
    h.api.conflicts.add("n0")
    h.steering.look()
    h.steering.stop()
    assert h.api.taints("n0") == [] and h.api.taints("n1") == [DEDICATED]
    return {(VERBS[method], "nodes") for method, _ in h.api.asked}


def test_the_roles_allow_every_request_and_the_steering_role_nothing_more(harness: Any) -> None:
    base = granted(cluster_role(DEPLOY / "rbac.yaml", "ksched"))
    rules = cluster_role(DEPLOY / "steering" / "rbac.yaml", "ksched-steering")
    steering = granted(rules)
    asked = steering_requests(harness)
    assert asked == {("get", "nodes"), ("patch", "nodes")}
    assert asked - base - steering == set(), "requests no role allows"
    assert steering - asked == set(), "the steering role grants what the controller never asks for"
    assert all(r["apiGroups"] == [""] and not r.get("resourceNames") for r in rules), rules
    assert "*" not in {x for r in rules for x in (*r["verbs"], *r["resources"])}


def test_the_helm_chart_grants_what_the_component_grants() -> None:
    text = HELM_TEMPLATE.read_text()
    block = text.split("\nrules:\n", 1)[1].split("\n---", 1)[0]
    assert yaml.safe_load(block) == cluster_role(DEPLOY / "steering" / "rbac.yaml", "ksched-steering")
