"""The Python/Rust boundary: ``_core``'s code tables, and inputs shaped as ``ksched.core_types`` says.

The engine's codes (plugins, reasons, enum values) are read from ``_core``,
never copied, so these tests pin them to upstream's names and strings; and
the binding rejects an input whose keys or dtypes differ from the TypedDicts,
so the stub cannot drift from what Rust reads.
"""

from __future__ import annotations

from typing import Any, get_type_hints

import numpy as np
import pytest

from ksched import _core, core_types
from ksched.config import Config, MetricConfig
from ksched.engine import Engine
from ksched.engine.messages import ReasonNames
from ksched.engine.snapshot import build_snapshot
from tests.conftest import node, pod

# Upstream v1.36: the default profile's Filter order and score weights
# (pkg/scheduler/apis/config/v1/default_plugins.go), in registry order.
UPSTREAM_FILTERS = [
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "PodTopologySpread",
    "InterPodAffinity",
]
UPSTREAM_WEIGHTS = {
    "TaintToleration": 3,
    "NodeAffinity": 2,
    "NodeResourcesFit": 1,
    "PodTopologySpread": 2,
    "InterPodAffinity": 2,
    "NodeResourcesBalancedAllocation": 1,
    "ImageLocality": 1,
}


def test_plugin_registry_is_upstreams_default_profile() -> None:
    enabled = [p for p in _core.PLUGINS if p["default_enabled"]]
    assert [p["name"] for p in enabled if p["filter"]] == UPSTREAM_FILTERS
    assert {p["name"]: p["default_weight"] for p in enabled if p["score"]} == UPSTREAM_WEIGHTS
    assert all(set(p) == set(core_types.PluginInfo.__annotations__) for p in _core.PLUGINS)


# Upstream v1.36 EventsToRegister with queueing hints on (their default), of the events
# ksched watches (not CSIDriver, CSIStorageCapacity, VolumeAttachment, nor a pending pod's
# own update, which always retries it): pkg/scheduler/framework/plugins/*/.
UPSTREAM_EVENTS = {
    "NodeUnschedulable": {"NodeAdd", "NodeTaintChange"},
    "NodeName": {"NodeAdd"},
    "TaintToleration": {"NodeAdd", "NodeTaintChange"},
    "NodeAffinity": {"NodeAdd", "NodeLabelChange"},
    "NodePorts": {"AssignedPodDelete", "NodeAdd"},
    "NodeResourcesFit": {"AssignedPodDelete", "NodeAdd", "NodeAllocatableChange"},
    "VolumeRestrictions": {"AssignedPodDelete", "NodeAdd", "PersistentVolumeClaimAdd"},
    "NodeVolumeLimits": {"CSINodeAdd", "CSINodeUpdate", "AssignedPodDelete", "PersistentVolumeClaimAdd"},
    "VolumeBinding": {
        "StorageClassAdd",
        "StorageClassUpdate",
        "PersistentVolumeClaimAdd",
        "PersistentVolumeClaimUpdate",
        "PersistentVolumeAdd",
        "PersistentVolumeUpdate",
        "NodeAdd",
        "NodeLabelChange",
        "CSINodeAdd",
        "CSINodeUpdate",
    },
    "VolumeZone": {
        "StorageClassAdd",
        "NodeAdd",
        "NodeLabelChange",
        "PersistentVolumeClaimAdd",
        "PersistentVolumeClaimUpdate",
        "PersistentVolumeAdd",
        "PersistentVolumeUpdate",
    },
    "PodTopologySpread": {
        "AssignedPodAdd",
        "AssignedPodLabelChange",
        "AssignedPodDelete",
        "NodeAdd",
        "NodeDelete",
        "NodeLabelChange",
        "NodeTaintChange",
    },
    "InterPodAffinity": {
        "AssignedPodAdd",
        "AssignedPodLabelChange",
        "AssignedPodDelete",
        "NodeAdd",
        "NodeLabelChange",
    },
}


@pytest.mark.parametrize(("plugin", "events"), sorted(UPSTREAM_EVENTS.items()))
def test_each_filter_plugin_registers_upstreams_events(plugin: str, events: set[str]) -> None:
    (row,) = [p for p in _core.PLUGINS if p["name"] == plugin]
    assert set(row["events"]) == events
    assert set(row["events"]) <= set(_core.CLUSTER_EVENTS)


def test_only_filter_plugins_register_events() -> None:
    assert all(bool(p["events"]) == p["filter"] for p in _core.PLUGINS)
    assert len(set(_core.CLUSTER_EVENTS)) == len(_core.CLUSTER_EVENTS)


@pytest.mark.parametrize(
    ("plugin", "message"),
    [
        ("NodeUnschedulable", "node(s) were unschedulable"),
        ("NodeName", "node(s) didn't match the requested node name"),
        ("TaintToleration", "node(s) had untolerated taint(s)"),
        ("NodeAffinity", "node(s) didn't match Pod's node affinity/selector"),
        ("NodeAffinity", "node(s) didn't satisfy plugin(s) [NodeAffinity]"),
        ("NodePorts", "node(s) didn't have free ports for the requested pod ports"),
        ("NodeResourcesFit", "Too many pods"),
        ("PodTopologySpread", "node(s) didn't match pod topology spread constraints"),
        (
            "PodTopologySpread",
            "node(s) didn't match pod topology spread constraints (missing required label)",
        ),
        ("InterPodAffinity", "node(s) didn't match pod affinity rules"),
        ("InterPodAffinity", "node(s) didn't match pod anti-affinity rules"),
        ("InterPodAffinity", "node(s) didn't satisfy existing pods anti-affinity rules"),
    ],
)
def test_each_upstream_reason_string_is_reported_by_its_plugin(plugin: str, message: str) -> None:
    assert [r["plugin"] for r in _core.REASONS if r["message"] == message] == [plugin]


def test_reason_codes_are_dense_and_parameterized_codes_follow_them() -> None:
    codes = [r["code"] for r in _core.REASONS]
    assert codes == list(range(1, len(codes) + 1)), "0 means feasible; fixed codes are 1..N"
    layout = _core.REASON_LAYOUT
    assert layout["first_insufficient"] == len(codes) + 1
    names = ReasonNames(["cpu", "memory"], [("load", 0.9, None)])
    first = layout["first_insufficient"]
    assert names.reason(first + 1) == "Insufficient memory"
    assert names.plugin(first + 1) == "NodeResourcesFit"
    metric = first + 2
    assert names.reason(metric + layout["metric_above"]) == "node(s) had load above 0.9"
    assert names.reason(metric + layout["metric_missing"]) == "node(s) had no value for load"
    assert names.plugin(metric + layout["metric_below"]) == "Metric/load"
    for side in ("above", "below"):
        assert names.threshold(names.threshold_code(0, side)) == (0, side)
    assert names.threshold_code(0, "above") == metric + layout["metric_above"]


def test_enum_tables_name_every_kubernetes_value() -> None:
    assert set(_core.EFFECTS) == {"", "NoSchedule", "PreferNoSchedule", "NoExecute"}
    assert set(_core.TOLERATION_OPERATORS) == {"Equal", "Exists"}
    assert set(_core.SELECTOR_OPERATORS) == {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}
    assert set(_core.POD_SELECTOR_OPERATORS) == {"In", "NotIn", "Exists", "DoesNotExist"}
    assert set(_core.PROTOCOLS) == {"TCP", "UDP", "SCTP"}
    for table in (_core.EFFECTS, _core.SELECTOR_OPERATORS, _core.PROTOCOLS):
        assert len(set(table.values())) == len(table), "codes are distinct"


def _captured_call(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Schedule a batch that needs every input table (pod table, preemption, a metric)
    and return the arguments ``_core.schedule`` got."""
    calls: list[dict[str, Any]] = []
    real = _core.schedule

    def spy(*args: Any, **kwargs: Any) -> Any:
        names = ("nodes", "classes", "pods", "metric_values", "metric_specs", "profile")
        calls.append(dict(zip(names, args, strict=True)))
        return real(*args, **kwargs)

    monkeypatch.setattr(_core, "schedule", spy)
    low = pod("low", cpu="2", node_name="n0")
    low["spec"]["priority"] = 1
    web = pod("web", cpu="1")
    web["metadata"]["labels"] = {"app": "web"}
    web["spec"]["priority"] = 100
    web["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    snapshot = build_snapshot([node("n0", cpu="2")], [low])
    config = Config(metrics=(MetricConfig(name="price", source="annotation", annotation="ksched.io/price"),))
    placement = Engine(config).schedule(snapshot, [web], np.full((1, 1), 0.5)).placements[0]
    assert placement.nominated_node == "n0", "the call exercised preemption"
    assert len(calls) == 1
    return calls[0]


def _keys(typed: type) -> set[str]:
    return set(get_type_hints(typed))


def test_engine_inputs_have_exactly_the_typed_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    call = _captured_call(monkeypatch)
    pods = call["pods"]
    assert set(call["nodes"]) == _keys(core_types.NodeTable)
    assert set(call["classes"]) == _keys(core_types.ClassTable)
    assert set(pods) == _keys(core_types.PodBatch)
    assert pods["table"] is not None and set(pods["table"]) == _keys(core_types.PodTableArrays)
    assert pods["preemption"] is not None and set(pods["preemption"]) == _keys(core_types.PreemptionArrays)
    assert [set(s) for s in call["metric_specs"]] == [_keys(core_types.MetricSpec)]
    assert set(call["profile"]) == _keys(core_types.Profile)


def test_binding_names_what_is_wrong_with_an_input(monkeypatch: pytest.MonkeyPatch) -> None:
    call = _captured_call(monkeypatch)
    monkeypatch.undo()

    def schedule(**changes: Any) -> Any:
        args = {**call, **changes}
        return _core.schedule(
            args["nodes"],
            args["classes"],
            args["pods"],
            args["metric_values"],
            args["metric_specs"],
            args["profile"],
        )

    assert set(schedule()) == _keys(core_types.Outcome)
    nodes = dict(call["nodes"])
    del nodes["taint_keys"]
    with pytest.raises(KeyError, match=r'nodes: missing array "taint_keys"'):
        schedule(nodes=nodes)
    with pytest.raises(KeyError, match=r"nodes: unexpected arrays \[\"stale\"\]"):
        schedule(nodes={**call["nodes"], "stale": np.zeros(1, dtype=np.int64)})
    with pytest.raises(TypeError, match=r'classes: array "tol_effects" must be uint8, got int64'):
        schedule(classes={**call["classes"], "tol_effects": call["classes"]["tol_effects"].astype(np.int64)})
    with pytest.raises(ValueError, match=r'"NodePort" is not a filter plugin \(known: NodeUnschedulable, '):
        schedule(profile={**call["profile"], "filters": ["NodePort"]})
    with pytest.raises(ValueError, match=r'"NodeName" is not a score plugin'):
        schedule(profile={**call["profile"], "weights": {"NodeName": 1}})
    with pytest.raises(ValueError, match=r'metric spec: unknown prefer "sideways"'):
        schedule(metric_specs=[{**call["metric_specs"][0], "prefer": "sideways"}])
