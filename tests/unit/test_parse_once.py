"""Pods of one shape are parsed once (see ``ksched.engine.requirements.requirements``) and a
batch's placements are counted in one pass (``commit_placements``): each pod still
gets its own name, labels, namespace, deletion and nomination, and the node and pod
tables end as counting the pods one by one would leave them."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from ksched.config import Config
from ksched.engine import Engine, commit_placements
from ksched.engine import requirements as parsing
from ksched.engine.gangs import POD_GROUP_LABEL
from ksched.engine.podtable import Evictable, PendingPod
from ksched.engine.requirements import PodRequirements, requirements
from ksched.engine.selectors import Requirement
from ksched.engine.snapshot import add_usage, build_snapshot
from ksched.engine.spread_selectors import SpreadSelectors
from ksched.objects import Obj
from tests.conftest import node, pod

ANTI_AFFINITY = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}


def _variant(base: Obj, name: str, **changes: Any) -> Obj:
    out = copy.deepcopy(base)
    out["metadata"]["name"] = name
    for key, value in changes.items():
        if key == "status":
            out["status"] = value
        else:
            out["metadata"][key] = value
    return out


def test_pods_of_one_shape_keep_what_is_their_own() -> None:
    web = pod("web-0", affinity=ANTI_AFFINITY, volumes=[{"name": "scratch", "ephemeral": {}}])
    web["metadata"]["labels"] = {"app": "web"}
    same = requirements(_variant(web, "web-1"))
    first = requirements(web)
    assert (first.key, same.key) == ("default/web-0", "default/web-1")
    # Generic ephemeral volumes' claims are named after their pod.
    assert [c.key for c in first.claims] == ["default/web-0-scratch"]
    assert [c.key for c in same.claims] == ["default/web-1-scratch"]

    plain = pod("app-0", affinity=ANTI_AFFINITY)
    plain["metadata"]["labels"] = {"app": "web"}
    base = requirements(plain)
    other_labels = requirements(_variant(plain, "app-1", labels={"app": "db"}))
    other_namespace = requirements(_variant(plain, "app-2", namespace="prod"))
    deleted = requirements(_variant(plain, "app-3", deletionTimestamp="2026-01-01T00:00:00Z"))
    nominated = requirements(_variant(plain, "app-4", status={"nominatedNodeName": "n1"}))
    assert base.info.labels == (("app", "web"),) and other_labels.info.labels == (("app", "db"),)
    assert other_namespace.key == "prod/app-2" and other_namespace.info.namespace == "prod"
    assert deleted.info.terminating and not base.info.terminating
    assert (base.nominated_node, nominated.nominated_node) == ("", "n1")
    # The same shape: everything but the name is the first pod's.
    again = requirements(_variant(plain, "app-5"))
    assert again.key == "default/app-5" and again.info == base.info and again.requests == base.requests
    # The engine builds a shape's row once a batch: only pods parsed alike may share one.
    assert again.shape_id == base.shape_id
    assert len({r.shape_id for r in (base, other_labels, other_namespace, deleted, nominated)}) == 5


def test_a_batch_is_counted_as_one_pod_at_a_time_would() -> None:
    nodes = [node(f"n{i}", cpu="8", labels={"zone": f"z{i % 2}"}) for i in range(4)]
    pending = []
    for i in range(12):
        p = pod(
            f"p{i}", cpu=("250m", "500m")[i % 2], priority=i % 3, affinity=ANTI_AFFINITY if i % 4 == 0 else {}
        )
        p["metadata"]["labels"] = {"app": ("web", "db")[i % 2]}
        pending.append(p)
    placements = Engine(Config()).schedule(build_snapshot(nodes, []), pending).placements
    placed = [p for p in placements if p.node is not None and p.requirements is not None]
    assert len(placed) > 4

    batch = commit_placements(build_snapshot(nodes, []), placements)
    one_by_one = build_snapshot(nodes, [])
    for p in placed:
        req = p.requirements
        assert req is not None and p.node is not None
        one_by_one.pods.add(p.pod, one_by_one.index[p.node], req.info, Evictable(req.priority, 0.0, req))
        add_usage(one_by_one, [(one_by_one.index[p.node], req, req.host_ports)])

    for key in ("requested", "nonzero_requested", "pod_count"):
        assert np.array_equal(batch.arrays[key], one_by_one.arrays[key]), key
    probe = [PendingPod(requirements(pending[0]).info, ())]
    tables = [s.pods.engine_table(probe, s.namespaces) for s in (batch, one_by_one)]
    assert tables[0] is not None and tables[1] is not None
    assert tables[0].keys() == tables[1].keys()
    for key, value in tables[0].items():
        assert np.array_equal(np.asarray(value), np.asarray(tables[1][key])), key
    for s in (batch, one_by_one):
        assert s.pods.min_evictable_priority() == 0


def test_a_batch_of_shapes_keeps_each_pods_own_ports_and_images() -> None:
    nodes = [node("n0"), node("n1")]
    nodes[1]["status"]["images"] = [{"names": ["cache:v1"], "sizeBytes": 500 * 1024 * 1024}]

    def with_ports(name: str, *ports: int, image: str = "pause") -> Obj:
        p = pod(name)
        container = p["spec"]["containers"][0]
        container["image"] = image
        container["ports"] = [{"containerPort": port, "hostPort": port} for port in ports]
        return p

    # Interleaved shapes with 2, 0 and 1 host ports: each row must get its own.
    pending = [
        with_ports("web-0", 80, 443),
        with_ports("plain-0", image="cache:v1"),
        with_ports("web-1", 80, 443),
        with_ports("api-0", 8080),
        with_ports("web-2", 80, 443),
        with_ports("api-1", 8080),
        with_ports("api-2", 8080),
    ]
    placements = {p.pod: p for p in Engine(Config()).schedule(build_snapshot(nodes, []), pending).placements}
    assert {placements["default/web-0"].node, placements["default/web-1"].node} == {"n0", "n1"}
    assert {placements["default/api-0"].node, placements["default/api-1"].node} == {"n0", "n1"}
    for unplaced in ("default/web-2", "default/api-2"):
        assert placements[unplaced].node is None
        assert "didn't have free ports" in (placements[unplaced].message or "")
    assert placements["default/plain-0"].node == "n1", "the node with its image"


def _fresh(p: Obj) -> PodRequirements:
    """``requirements`` with nothing remembered: what the pod parses to on its own."""
    parsing._pod_memo.clear()
    parsing._spec_memo.clear()
    return requirements(p)


def test_a_remembered_parse_is_what_each_pod_parses_to_alone() -> None:
    # Every part of the parse that reads the pod's labels (matchLabelKeys, the PodGroup label)
    # or its namespace (claims), so a shape key missing one of them shows here.
    base = pod(
        "web-0",
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"tier": "x"}},
                        "topologyKey": "h",
                        "matchLabelKeys": ["app"],
                    }
                ]
            }
        },
        topologySpreadConstraints=[
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"tier": "x"}},
                "matchLabelKeys": ["app"],
            }
        ],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
    )
    base["metadata"]["labels"] = {"app": "web", "tier": "x", POD_GROUP_LABEL: "g1"}
    variants: dict[str, Any] = {
        "labels": {"app": "db", "tier": "x", POD_GROUP_LABEL: "g2"},
        "namespace": "prod",
        "deletionTimestamp": "2026-01-01T00:00:00Z",
        "annotations": {"note": "x"},
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "controller": True}
        ],
        "uid": "u-1",
        "generateName": "web-",
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "status": {"nominatedNodeName": "n1", "phase": "Pending", "conditions": [{"type": "PodScheduled"}]},
    }
    requirements(base)  # remembered first: every variant below is looked up against it
    for i, (what, value) in enumerate(variants.items()):
        variant = _variant(base, f"web-{i + 1}", **{what: value})
        remembered = requirements(variant)
        assert remembered == _fresh(variant), what
        requirements(base)
    db = requirements(_variant(base, "db-0", labels=variants["labels"]))
    assert db.group == "default/g2" and db.spread[0].selector != requirements(base).spread[0].selector
    assert [c.key for c in requirements(_variant(base, "p-0", namespace="prod")).claims] == ["prod/data"]


def test_default_spreading_follows_the_pods_controller() -> None:
    selectors = SpreadSelectors()
    rs = {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
    }
    owned = pod("web-0")
    owned["metadata"]["labels"] = {"app": "web", "tier": "x"}
    owned["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "controller": True}
    ]
    defaults = [("zone", 1, False)]
    assert selectors.defaults(owned, defaults) == (), "no ReplicaSet known yet"
    selectors.update("apps/v1", "ReplicaSet", rs)
    (first,) = selectors.defaults(owned, defaults)
    assert first.selector == (Requirement("app", "In", ("web",)),)
    rs["spec"]["selector"] = {"matchLabels": {"tier": "x"}}
    selectors.update("apps/v1", "ReplicaSet", rs)
    (changed,) = selectors.defaults(owned, defaults)
    assert changed.selector == (Requirement("tier", "In", ("x",)),), "the ReplicaSet's new selector"
    selectors.update("apps/v1", "ReplicaSet", rs, deleted=True)
    assert selectors.defaults(owned, defaults) == (), "its ReplicaSet is gone"


def test_default_spreading_is_looked_up_only_while_a_service_or_controller_is_known() -> None:
    selectors = SpreadSelectors()
    web = pod("web-0")
    web["metadata"]["labels"] = {"app": "web"}
    defaults = [("zone", 1, False)]
    assert selectors.selects_nothing() and selectors.defaults(web, defaults) == ()
    service = {"metadata": {"name": "web", "namespace": "default"}, "spec": {"selector": {"app": "web"}}}
    selectors.update("v1", "Service", service)
    assert not selectors.selects_nothing()
    (constraint,) = selectors.defaults(web, defaults)
    assert constraint.selector == (Requirement("app", "In", ("web",)),)
    selectors.update("v1", "Service", service, deleted=True)
    assert selectors.selects_nothing() and selectors.defaults(web, defaults) == ()


def test_stable_keys_are_each_texts_stable_key() -> None:
    from ksched.objects import stable_key, stable_keys

    texts = ["", "default/web-0", "ns/pöd-ü", "x" * 300, *(f"bench/pod-{i:06d}" for i in range(100))]
    words = np.frombuffer(stable_keys(texts), dtype="<u8")
    assert [int(w) for w in words] == [stable_key(t) for t in texts]
    assert len(set(words.tolist())) == len(texts)
