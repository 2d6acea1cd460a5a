"""Upstream's plugin args: NodeResourcesFit ``ignoredResources`` /
``ignoredResourceGroups``, NodeAffinity ``addedAffinity`` and InterPodAffinity
``ignorePreferredTermsOfExistingPods``, validated with the configuration and
honoured by the engine; and the defaults every plugin's args take."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from ksched import _core
from ksched.config import Config, ProfileConfig, parse_config
from ksched.config.profiles import PLUGIN_ARGS
from ksched.core_types import Profile
from ksched.engine import Engine
from ksched.engine.inputs import engine_profile
from ksched.engine.snapshot import build_snapshot
from ksched.errors import ConfigError
from tests.conftest import failed_scheduling, no_victims, node, not_helpful, pod

ZONE = "topology.kubernetes.io/zone"


def config(*plugin_config: dict[str, Any]) -> Config:
    return parse_config(
        {
            "apiVersion": "ksched.io/v1alpha1",
            "kind": "KschedConfiguration",
            "profiles": [{"schedulerName": "ksched", "pluginConfig": list(plugin_config)}],
        }
    )


def args(plugin: str, **kw: Any) -> dict[str, Any]:
    return {"name": plugin, "args": kw}


def schedule(cfg: Config, nodes: list[dict[str, Any]], pending: list[dict[str, Any]], **kw: Any) -> Any:
    return Engine(cfg).schedule(build_snapshot(nodes, kw.pop("existing", [])), pending, **kw)


def term(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


@pytest.mark.parametrize("plugin", list(PLUGIN_ARGS))
def test_args_left_out_take_the_profiles_defaults(plugin: str) -> None:
    # Each plugin's parser reads its defaults from ProfileConfig's fields: an empty args
    # object, and no pluginConfig at all, give the same profile as ProfileConfig().
    assert config().profiles == (ProfileConfig(),)
    assert config(args(plugin)).profiles == (ProfileConfig(),), plugin


def test_the_engine_is_sent_upstreams_defaults() -> None:
    # Python sends every field of the profile on every call (the binding has no defaults of
    # its own): what the engine runs with by default is this, upstream's default profile.
    # Filters and weights come from the engine's own registry (``_core.PLUGINS``). Upstream has
    # no default RequestedToCapacityRatio shape: the strategy requires one.
    snapshot = build_snapshot([node("a")], [])
    cpu, memory = snapshot.resources("cpu"), snapshot.resources("memory")
    want: Profile = {
        "filters": [p["name"] for p in _core.PLUGINS if p["filter"] and p["default_enabled"]],
        "weights": {
            p["name"]: p["default_weight"] for p in _core.PLUGINS if p["score"] and p["default_enabled"]
        },
        "hard_pod_affinity_weight": 1,
        "ignore_preferred_terms_of_existing_pods": False,
        "fit_strategy": "LeastAllocated",
        "shape": [],
        "fit_resources": [(cpu, 1), (memory, 1)],
        "fit_ignored": [],
        "balanced_resources": [cpu, memory],
        "preemption": True,
        "max_pods_per_node": 110,
    }
    assert set(want) == set(Profile.__annotations__)
    assert engine_profile(ProfileConfig(), snapshot) == want


def test_pythons_defaults_are_the_engines() -> None:
    # Each default is written once in Python (ProfileConfig's fields) and once in Rust
    # (``Profile::default``, which the engine's own tests run with, exported as
    # ``_core.DEFAULT_PROFILE``): what Python sends for a configuration that sets nothing is
    # the engine's default, field by field.
    sent: dict[str, object] = dict(engine_profile(config().profiles[0], build_snapshot([node("a")], [])))
    engine: dict[str, object] = dict(_core.DEFAULT_PROFILE)
    assert set(sent) == set(engine) == set(Profile.__annotations__)
    for name, want in engine.items():
        assert sent[name] == want, f"{name}: Python sends {sent[name]!r}, the engine's default is {want!r}"


@pytest.mark.parametrize(
    ("name", "plugin_config", "fragment"),
    [
        (
            "ignoredResources must be resource names",
            args("NodeResourcesFit", ignoredResources=["example.com/a b"]),
            r"pluginConfig\[0\]\.args\.ignoredResources\[0\]: 'example.com/a b' is not a valid resource name",
        ),
        (
            "ignoredResourceGroups take no '/'",
            args("NodeResourcesFit", ignoredResourceGroups=["example.com/gpu"]),
            r"ignoredResourceGroups\[0\]: 'example.com/gpu': resource group name can't contain '/'",
        ),
        (
            "unknown NodeResourcesFit arg",
            args("NodeResourcesFit", ignoredResource=["x"]),
            r"args\.ignoredResource: unknown key",
        ),
        (
            "addedAffinity terms must parse",
            args(
                "NodeAffinity",
                addedAffinity={
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [term(ZONE, "NotIn", "not a label value")]
                    }
                },
            ),
            r"addedAffinity\.requiredDuringSchedulingIgnoredDuringExecution\.nodeSelectorTerms\[0\]"
            r"\.matchExpressions\[0\]\.values: NotIn takes one or more valid label values",
        ),
        (
            "addedAffinity operators are upstream's",
            args(
                "NodeAffinity",
                addedAffinity={
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 5, "preference": term(ZONE, "Near", "z1")}
                    ]
                },
            ),
            r"preferredDuringSchedulingIgnoredDuringExecution\[0\]\.preference\.matchExpressions\[0\]\.operator: "
            r"'Near' is not allowed",
        ),
        (
            "addedAffinity preferred weight",
            args(
                "NodeAffinity",
                addedAffinity={
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 0, "preference": term(ZONE, "Exists")}
                    ]
                },
            ),
            r"preferredDuringSchedulingIgnoredDuringExecution\[0\]\.weight: 0 is not an integer in 1\.\.100",
        ),
        (
            "ignorePreferredTermsOfExistingPods is a boolean",
            args("InterPodAffinity", ignorePreferredTermsOfExistingPods="yes"),
            r"args\.ignorePreferredTermsOfExistingPods: 'yes' is not a boolean",
        ),
    ],
)
def test_invalid_args_name_the_key(name: str, plugin_config: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        config(plugin_config)


GPU_POD = pod(
    "p",
    resources={},
    containers=[{"name": "c", "image": "app", "resources": {"requests": {"example.com/gpu": "1"}}}],
)
# The node has none of it: more than its allocatable, which no eviction resolves.
NO_GPU = failed_scheduling("0/1 nodes are available: 1 Insufficient example.com/gpu.", not_helpful(1))
HUGEPAGES_POD = pod(
    "p", containers=[{"name": "c", "image": "app", "resources": {"requests": {"hugepages-2Mi": "2Mi"}}}]
)


@pytest.mark.parametrize(
    ("name", "fit_args", "pending", "want"),
    [
        ("not ignored", {}, GPU_POD, NO_GPU),
        ("ignoredResources", {"ignoredResources": ["example.com/gpu"]}, GPU_POD, None),
        ("ignoredResourceGroups", {"ignoredResourceGroups": ["example.com"]}, GPU_POD, None),
        (
            "another group",
            {"ignoredResourceGroups": ["example.org"]},
            GPU_POD,
            NO_GPU,
        ),
        # Only extended resources are ever ignored (upstream IsExtendedResourceName).
        (
            "hugepages are not extended",
            {"ignoredResources": ["hugepages-2Mi"]},
            HUGEPAGES_POD,
            failed_scheduling("0/1 nodes are available: 1 Insufficient hugepages-2Mi.", not_helpful(1)),
        ),
    ],
)
def test_node_resources_fit_ignored_resources(
    name: str, fit_args: dict[str, Any], pending: dict[str, Any], want: str | None
) -> None:
    [got] = schedule(config(args("NodeResourcesFit", **fit_args)), [node("a")], [pending]).placements
    assert got.message == want, name
    assert (got.node == "a") == (want is None), name


ZONED = [node("n1", labels={ZONE: "z1"}), node("n2", labels={ZONE: "z2"}), node("n3")]


def added(
    required: list[dict[str, Any]] | None = None, preferred: Sequence[tuple[int, dict[str, Any]]] = ()
) -> Config:
    affinity: dict[str, Any] = {}
    if required is not None:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": required}
    if preferred:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": w, "preference": t} for w, t in preferred
        ]
    return config(args("NodeAffinity", addedAffinity=affinity))


def test_added_affinity_is_required_of_every_pod_with_its_own_reason() -> None:
    cfg = added(required=[term(ZONE, "In", "z1", "z2")])
    placed = schedule(cfg, ZONED, [pod(f"p{i}") for i in range(4)]).placements
    assert {p.node for p in placed} == {"n1", "n2"}
    [got] = schedule(cfg, ZONED, [pod("p", nodeSelector={ZONE: "z3"})]).placements
    assert got.message == failed_scheduling(
        "0/3 nodes are available: 1 node(s) didn't match scheduler-enforced node affinity, "
        "2 node(s) didn't match Pod's node affinity/selector.",
        not_helpful(3),
    )


def test_added_affinity_is_anded_with_the_pods_own() -> None:
    cfg = added(required=[term(ZONE, "Exists")])
    [got] = schedule(cfg, ZONED, [pod("p", nodeSelector={ZONE: "z2"})]).placements
    assert got.node == "n2"


def test_added_preferred_terms_score_with_the_pods_own() -> None:
    cfg = added(preferred=[(10, term(ZONE, "In", "z2"))])
    result = schedule(cfg, ZONED, [pod("p")], explain="default/p")
    assert result.placements[0].node == "n2"
    got = {n.node: n.scores["NodeAffinity"]["raw"] for n in result.explanation.nodes}
    assert got == {"n1": 0.0, "n2": 10.0, "n3": 0.0}
    # The pod's own preferred term adds to the profile's (upstream sums both).
    own = pod(
        "q",
        affinity={
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 30, "preference": term(ZONE, "In", "z1")}
                ]
            }
        },
    )
    result = schedule(cfg, ZONED, [own], explain="default/q")
    assert result.placements[0].node == "n1"
    got = {n.node: n.scores["NodeAffinity"]["raw"] for n in result.explanation.nodes}
    assert got == {"n1": 30.0, "n2": 10.0, "n3": 0.0}


def test_ignore_preferred_terms_of_existing_pods() -> None:
    # An existing pod on n1 prefers pods labelled app=web beside it; the incoming web pod has no terms.
    existing = pod(
        "old",
        node_name="n1",
        affinity={
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": {"app": "web"}},
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }
                ]
            }
        },
    )
    web = pod("web")
    web["metadata"]["labels"] = {"app": "web"}
    nodes = [node("n1"), node("n2")]
    cases = [(False, {"n1": 100.0, "n2": 0.0}), (True, {"n1": 0.0, "n2": 0.0})]
    for ignore, want in cases:
        cfg = config(args("InterPodAffinity", ignorePreferredTermsOfExistingPods=ignore))
        result = schedule(cfg, nodes, [web], explain="default/web", existing=[existing])
        got = {n.node: n.scores["InterPodAffinity"]["normalized"] for n in result.explanation.nodes}
        assert got == want, f"ignorePreferredTermsOfExistingPods={ignore}"


def pod_limit(max_pods: int | None = None) -> Config:
    """A profile that enables NodePodLimit (off by default), with ``maxPods`` if given."""
    limit = {"name": "NodePodLimit", "args": {} if max_pods is None else {"maxPods": max_pods}}
    return parse_config(
        {
            "apiVersion": "ksched.io/v1alpha1",
            "kind": "KschedConfiguration",
            "profiles": [
                {
                    "schedulerName": "ksched",
                    "plugins": {"multiPoint": {"enabled": [{"name": "NodePodLimit"}]}},
                    "pluginConfig": [limit],
                }
            ],
        }
    )


def test_node_pod_limit_is_off_by_default_and_takes_max_pods() -> None:
    assert "NodePodLimit" not in ProfileConfig().filters
    (profile,) = pod_limit(2).profiles
    assert "NodePodLimit" in profile.filters and profile.max_pods_per_node == 2
    assert pod_limit().profiles[0].max_pods_per_node == ProfileConfig().max_pods_per_node


@pytest.mark.parametrize(
    ("max_pods", "fragment"),
    [(0, r"args\.maxPods: 0 is not an integer in 1\.\.2147483647"), ("3", r"maxPods: '3' is not an integer")],
)
def test_node_pod_limit_refuses_a_bad_max_pods(max_pods: Any, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        pod_limit(max_pods)


def test_node_pod_limit_counts_bound_pods_and_the_batchs_own() -> None:
    # Two places per node: "a" holds one pod already, so the batch fills a's last place and
    # both of b's, and the fourth pod fits nowhere with the plugin's reason.
    nodes = [node("a"), node("b")]
    existing = [pod("bound", node_name="a")]
    pending = [pod(f"p{i}") for i in range(4)]
    placements = schedule(pod_limit(2), nodes, pending, existing=existing).placements
    assert sorted(p.node or "-" for p in placements) == ["-", "a", "b", "b"]
    (refused,) = [p for p in placements if p.node is None]
    assert refused.message == failed_scheduling(
        "0/2 nodes are available: 2 node(s) had reached the profile's pod limit.", no_victims(2)
    )
    assert refused.rejected_by == {"NodePodLimit"}
    # Off by default: the same cluster takes every pod.
    assert all(p.node for p in schedule(Config(), nodes, pending, existing=existing).placements)
