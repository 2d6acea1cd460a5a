"""The hand-off's RBAC (deploy/handoff/rbac.yaml and the Helm chart's copy) holds exactly what
:class:`~ksched.loop.scheduling.handoff.Handoff` writes: every request it makes is allowed by
the base role and the hand-off role together, and every rule of the hand-off role is used."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from ksched.config import HandoffConfig
from ksched.loop.client import Response
from ksched.loop.scheduling.handoff import Handoff
from ksched.loop.telemetry import Telemetry

Obj = dict[str, Any]
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
HELM_TEMPLATE = DEPLOY / "helm" / "ksched" / "templates" / "handoff-rbac.yaml"
VERBS = {"GET": "get", "POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"}
POD_PATH = re.compile(r"^/api/v1/namespaces/[^/]+/pods(?:/[^/]+(?:/(?P<sub>[^/]+))?)?$")


class RecordingKube:
    """Answers the hand-off's requests as an API server that allows them, and records each as
    (verb, resource) the way RBAC names them."""

    def __init__(self, pod: Obj) -> None:
        self.pod = pod
        self.asked: list[tuple[str, str]] = []

    def request(self, method: str, path: str, **_: Any) -> Response:
        match = POD_PATH.match(path)
        assert match is not None, path
        sub = match["sub"]
        self.asked.append((VERBS[method], f"pods/{sub}" if sub else "pods"))
        body = json.dumps(self.pod).encode() if method == "GET" else b"{}"
        return Response(201 if method == "POST" else 200, body)


def pending_pod(owner: Obj | None) -> Obj:
    meta: Obj = {"name": "p", "namespace": "shop", "uid": "uid-p"}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {"metadata": meta, "spec": {"schedulerName": "ksched", "containers": [{"name": "c"}]}}


def hand_off(pod: Obj, kube: RecordingKube | None = None, handed: bool = True) -> list[tuple[str, str]]:
    """What the hand-off of ``pod`` asks the API server for (``handed``: it reports the pod
    handed off)."""
    kube = kube or RecordingKube(pod)
    handoff = Handoff(kube, HandoffConfig(enabled=True), Telemetry())  # type: ignore[arg-type]
    done: list[bool] = []
    handoff.submit(pod, "test", done.append)
    handoff.shutdown()
    assert done == [handed]
    return kube.asked


CASES = [
    (
        "a bare pod is re-created (a dry-run create first)",
        None,
        [("get", "pods"), ("create", "pods"), ("delete", "pods"), ("create", "pods")],
    ),
    (
        "a controller-owned pod is evicted",
        {"kind": "ReplicaSet", "name": "web", "uid": "uid-web", "controller": True},
        [("get", "pods"), ("create", "pods/eviction")],
    ),
]


def cluster_role(path: Path, name: str) -> list[Obj]:
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == name:
            return list(doc["rules"])
    raise AssertionError(f"no ClusterRole {name} in {path}")


def granted(rules: list[Obj]) -> set[tuple[str, str]]:
    """(verb, resource) in the core group, in any name, that ``rules`` allow."""
    return {
        (verb, resource)
        for r in rules
        if r["apiGroups"] == [""] and not r.get("resourceNames")
        for verb in r["verbs"]
        for resource in r["resources"]
    }


@pytest.mark.parametrize(("name", "owner", "want"), CASES, ids=[c[0] for c in CASES])
def test_what_the_hand_off_asks_for(name: str, owner: Obj | None, want: list[tuple[str, str]]) -> None:
    assert hand_off(pending_pod(owner)) == want, name


def test_the_roles_allow_every_request_and_the_hand_off_role_nothing_more() -> None:
    base = granted(cluster_role(DEPLOY / "rbac.yaml", "ksched"))
    rules = cluster_role(DEPLOY / "handoff" / "rbac.yaml", "ksched-handoff")
    handoff = granted(rules)
    asked = {request for _, owner, _ in CASES for request in hand_off(pending_pod(owner))}
    assert asked - base - handoff == set(), "requests no role allows"
    assert handoff - asked == set(), "the hand-off role grants what the hand-off never asks for"
    # No wildcard, other group or name-limited rule hides beside them.
    assert all(r["apiGroups"] == [""] and not r.get("resourceNames") for r in rules), rules
    assert "*" not in {x for r in rules for x in (*r["verbs"], *r["resources"])}


def test_the_helm_chart_grants_what_the_component_grants() -> None:
    # The rules block holds no template directive: read it as YAML between "rules:" and the
    # bindings' branch.
    text = HELM_TEMPLATE.read_text()
    block = text.split("\nrules:\n", 1)[1].split("\n{{-", 1)[0]
    assert yaml.safe_load(block) == cluster_role(DEPLOY / "handoff" / "rbac.yaml", "ksched-handoff")


class NoCreateKube(RecordingKube):
    """A role bound in other namespaces only: creating pods here is forbidden."""

    def request(self, method: str, path: str, **kw: Any) -> Response:
        if method == "POST" and path.endswith("/pods"):
            self.asked.append(("create", "pods"))
            return Response(403, b'{"message": "pods is forbidden"}')
        return super().request(method, path, **kw)


def test_a_pod_it_may_not_create_again_is_never_deleted() -> None:
    """The dry-run create is refused (403): the bare pod stays, for a later try or an
    operator, rather than being deleted and lost."""
    pod = pending_pod(None)
    assert hand_off(pod, NoCreateKube(pod), handed=False) == [("get", "pods"), ("create", "pods")]


OWNER = {"kind": "ReplicaSet", "name": "web", "uid": "uid-web", "controller": True}


class ControllerKube(RecordingKube):
    """While the eviction is in flight, the ReplicaSet creates the replacement and the API
    server asks the webhook about it (``seen``: whether the webhook left it alone); ``status``
    answers the eviction."""

    def __init__(self, pod: Obj, status: int) -> None:
        super().__init__(pod)
        self.status = status
        self.handoff: Handoff | None = None
        self.seen: list[bool] = []

    def request(self, method: str, path: str, **kw: Any) -> Response:
        if path.endswith("/eviction"):
            assert self.handoff is not None
            self.seen.append(self.handoff.skip_owner(pending_pod(OWNER)))
            return Response(self.status, b"{}")
        return super().request(method, path, **kw)


@pytest.mark.parametrize(("status", "handed"), [(201, True), (429, False), (500, False)])
def test_the_replacement_created_during_the_eviction_is_left_to_default_scheduler(
    status: int, handed: bool
) -> None:
    """The owner is remembered before the eviction is sent: a replacement the controller creates
    before the answer returns is never routed back to ksched (it would be handed off a second
    time). A refused eviction forgets the owner again, so its other pods stay ksched's."""
    pod = pending_pod(OWNER)
    kube = ControllerKube(pod, status)
    handoff = Handoff(kube, HandoffConfig(enabled=True), Telemetry())  # type: ignore[arg-type]
    kube.handoff = handoff
    done: list[bool] = []
    handoff.submit(pod, "test", done.append)
    handoff.shutdown()
    assert done == [handed]
    assert kube.seen == [True]
    assert handoff.skip_owner(pending_pod(OWNER)) is handed
