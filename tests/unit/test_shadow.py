"""Shadow mode without a cluster: decisions on watch events, the ledger, the report and status text."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ksched.commands import remote
from ksched.commands.shadow import pod_lines, render_report, render_status, report_from_log
from ksched.config import parse_config
from ksched.engine import Explanation, NodeExplanation, Placement
from ksched.errors import ConfigError, KschedError
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.mirror.state import ClusterState
from ksched.loop.scheduling.shadow import Decision, Shadow, ShadowLedger, decide
from ksched.loop.telemetry import Telemetry
from tests.conftest import Obj, annotation_metric, node, pod

PRICE = "ksched.io/price"
CONFIG = {
    "apiVersion": "ksched.io/v1alpha1",
    "kind": "KschedConfiguration",
    "metrics": [annotation_metric(PRICE, prefer="lower")],
    "shadow": {"enabled": True, "namespaces": ["default"]},
}
# "a" is cheapest but has room for one 1-cpu pod only; "c" has no price (ksched excludes it).
NODES = [
    node("a", cpu="1", annotations={PRICE: "0.1"}),
    node("b", annotations={PRICE: "0.9"}),
    node("c"),
]


def shadow_of(config: dict[str, Any] = CONFIG) -> tuple[Shadow, ClusterState, Telemetry]:
    cfg = parse_config(config)
    telemetry = Telemetry()
    state = ClusterState(cfg.metrics)
    shadow = Shadow(cfg, state, MetricStore(cfg.metrics, None, telemetry), telemetry)
    for n in NODES:
        state.on_node("ADDED", n, None)
    return shadow, state, telemetry


def bind(shadow: Shadow, state: ClusterState, p: Obj, node_name: str) -> None:
    """The watch events of a pod created unbound, then bound by another scheduler."""
    bound = {**p, "spec": {**p["spec"], "nodeName": node_name}}
    shadow.on_pod("ADDED", p, None)
    shadow.on_pod("MODIFIED", bound, p)
    state.sync()


CASES = [
    # name, pod, node it was bound to, want (outcome, ksched node, reason)
    ("ksched agrees", pod("web", scheduler="default-scheduler"), "a", ("same", "a", None)),
    (
        "the pod itself is not counted",
        pod("big", cpu="1", scheduler="default-scheduler"),
        "a",
        ("same", "a", None),
    ),
    ("a dearer node", pod("web", scheduler="default-scheduler"), "b", ("other", "a", "Metric/price")),
    (
        "a node ksched excludes",
        pod("web", scheduler="default-scheduler"),
        "c",
        ("other", "a", "Metric/price"),
    ),
    (
        "only a node ksched excludes fits",
        pod("pinned", scheduler="default-scheduler", nodeSelector={"kubernetes.io/hostname": "c"}),
        "c",
        ("pending", None, "Metric/price"),
    ),
    (
        "only an over-full node fits",
        pod("huge", cpu="2", scheduler="default-scheduler", nodeSelector={"kubernetes.io/hostname": "a"}),
        "a",
        ("pending", None, "NodeResourcesFit"),
    ),
]


@pytest.mark.parametrize(("name", "p", "bound_to", "want"), CASES, ids=[c[0] for c in CASES])
def test_shadow_decision_on_a_pod_another_scheduler_binds(
    name: str, p: Obj, bound_to: str, want: tuple[str, str | None, str | None]
) -> None:
    shadow, state, telemetry = shadow_of()
    bind(shadow, state, p, bound_to)
    [d] = shadow.ledger.recent
    got = (d.outcome, d.ksched_node, d.reason)
    assert got == want, f"want {want}, got {got}: {d}"
    assert (d.pod, d.node, d.scheduler) == (f"default/{p['metadata']['name']}", bound_to, "default-scheduler")
    assert telemetry.registry.get_sample_value("ksched_shadow_decisions_total", {"outcome": want[0]}) == 1
    if d.outcome == "same":
        assert d.gap == 0.0
    if name == "a dearer node":
        assert d.gap is not None and d.gap > 0 and d.differences["Metric/price"] > 0
        assert d.ksched_score is not None and d.node_score is not None
        assert d.ksched_score - d.node_score == pytest.approx(d.gap)
    if name == "a node ksched excludes":
        assert d.gap is None and d.detail == "node(s) had no value for price"
    if d.outcome == "pending":
        assert d.detail is not None and d.detail.startswith("0/3 nodes are available: ")


def test_two_nodes_ksched_scores_alike_are_a_tie_not_a_plugin() -> None:
    def row(name: str, fit: float, taints: float) -> NodeExplanation:
        scores = {"NodeResourcesFit": {"weighted": fit}, "TaintToleration": {"weighted": taints}}
        return NodeExplanation(name, True, None, [], scores, fit + taints, name == "x")

    placement = Placement("default/web", "x", 350.0, None)
    tie = Explanation("default/web", placement, [row("x", 50.0, 300.0), row("y", 50.0, 300.0)], {})
    d = decide("default/web", "default-scheduler", "y", placement, tie)
    assert (d.outcome, d.gap, d.reason) == ("other", 0.0, "equal scores")
    fuller = Explanation("default/web", placement, [row("x", 50.0, 300.0), row("y", 40.0, 300.0)], {})
    d = decide("default/web", "default-scheduler", "y", placement, fuller)
    assert (d.outcome, d.gap, d.reason) == ("other", 10.0, "NodeResourcesFit")


def test_shadow_decisions_count_the_load_estimate_as_the_scheduling_loop_does() -> None:
    shadow, state, _ = shadow_of()
    given: list[object] = []
    matrix = shadow.metrics.matrix

    def spy(snapshot: Any, extra: Any = None) -> Any:
        given.append(extra)
        return matrix(snapshot, extra)

    shadow.metrics.matrix = spy  # type: ignore[method-assign]
    bind(shadow, state, pod("web", scheduler="default-scheduler"), "a")
    # The estimate of the state's recent pods, on the snapshot the decision is made on.
    assert [(g.func, g.args) for g in given] == [(state.recent.add_to, (state.snapshot(),))]


def test_shadow_skips_pods_it_saw_bound_pods_elsewhere_and_still_counts_them() -> None:
    shadow, state, _ = shadow_of()
    # Already bound when first seen (listed at start): no decision, but it fills node "a".
    shadow.on_pod("ADDED", pod("old", cpu="1", node_name="a"), None)
    # Another namespace than shadow.namespaces: no decision.
    bind(shadow, state, pod("elsewhere", namespace="kube-system", scheduler="default-scheduler"), "b")
    bind(shadow, state, pod("web", cpu="500m", scheduler="default-scheduler"), "b")
    assert [(d.pod, d.outcome, d.ksched_node) for d in shadow.ledger.recent] == [("default/web", "same", "b")]


def test_a_shadow_log_that_cannot_be_written_stops_the_start(tmp_path: Path) -> None:
    config = {**CONFIG, "shadow": {**CONFIG["shadow"], "log": str(tmp_path / "no-such-dir" / "shadow.jsonl")}}
    with pytest.raises(KschedError, match=r"shadow\.log: cannot append to .*no-such-dir.*: No such file"):
        shadow_of(config)


def test_a_failing_shadow_log_stops_neither_the_decisions_nor_the_watch_events() -> None:
    shadow, state, _ = shadow_of()

    class FullDisk(io.StringIO):
        def write(self, s: str) -> int:
            raise OSError(28, "No space left on device")

    shadow._log = FullDisk()
    bind(shadow, state, pod("web", scheduler="default-scheduler"), "a")
    bind(shadow, state, pod("api", scheduler="default-scheduler"), "b")
    assert [d.pod for d in shadow.ledger.recent] == ["default/web", "default/api"]
    assert state.counted() == {"default/web": "a", "default/api": "b"}, (
        "the bindings behind a failed write apply"
    )


def decision(pod_name: str, outcome: str, gap: float | None = None, reason: str | None = None) -> Decision:
    return Decision(
        f"ns/{pod_name}",
        "default-scheduler",
        "n1",
        outcome,
        ksched_node=None if outcome == "pending" else "n2",
        ksched_score=None if gap is None else 100.0,
        node_score=None if gap is None else 100.0 - gap,
        gap=gap,
        reason=reason,
        detail="0/2 nodes are available: 2 Insufficient cpu." if outcome == "pending" else None,
        differences={} if reason is None else {reason: gap or 0.0},
    )


def test_ledger_keeps_counters_for_all_and_a_bounded_ring() -> None:
    ledger = ShadowLedger(keep=3)
    for d in [
        decision("a", "same", 0.0),
        decision("b", "other", 5.0, "NodeResourcesFit"),
        decision("c", "other", 50.0, "Metric/price"),
        decision("d", "pending", reason="NodeResourcesFit"),
        decision("e", "other", 30.0, "Metric/price"),
    ]:
        ledger.record(d)
    report = ledger.report()
    assert report["total"] == 5 and report["counts"] == {"same": 1, "other": 3, "pending": 1}
    assert report["agreement"] == pytest.approx(0.2)
    assert [d["pod"] for d in report["recent"]] == ["ns/c", "ns/d", "ns/e"], "only the last 3 kept"
    assert [(r["outcome"], r["reason"], r["decisions"], r["meanGap"]) for r in report["reasons"]] == [
        ("other", "Metric/price", 2, 40.0),
        ("other", "NodeResourcesFit", 1, 5.0),
        ("pending", "NodeResourcesFit", 1, None),
    ]
    # Pending first (ksched would not use the node at all), then the largest score gap.
    assert [d["pod"] for d in report["differMost"]] == ["ns/d", "ns/c", "ns/e"]
    assert Decision.from_json(report["recent"][0]) == ledger.recent[0]


def test_report_from_a_shadow_log_counts_every_line_and_lists_the_last(tmp_path: Path) -> None:
    log = tmp_path / "shadow.jsonl"
    decisions = [
        replace(decision("a", "same", 0.0), at=100.0),
        replace(decision("b", "other", 5.0, "Metric/price"), at=200.0),
        replace(decision("c", "pending", reason="NodeResourcesFit"), at=300.0),
    ]
    log.write_text("".join(json.dumps(d.as_json()) + "\n" for d in decisions) + "\n")
    report = report_from_log(log, keep=2)
    assert report["counts"] == {"same": 1, "other": 1, "pending": 1}
    assert [d["pod"] for d in report["recent"]] == ["ns/b", "ns/c"]
    assert report["since"] == 100.0, "since the first decision in the file, not the first listed"
    log.write_text(log.read_text() + "not json\n")
    with pytest.raises(KschedError, match=r"shadow\.jsonl:5: not a shadow decision"):
        report_from_log(log, keep=2)
    with pytest.raises(KschedError, match=r"--keep 0: list at least 1 decision"):
        report_from_log(log, keep=0)


def test_report_text_names_agreement_reasons_and_pods() -> None:
    ledger = ShadowLedger(keep=10)
    for d in [
        decision("a", "same", 0.0),
        decision("b", "other", 12.5, "Metric/price"),
        decision("c", "pending"),
    ]:
        ledger.record(d)
    text = render_report(ledger.report(), "127.0.0.1:10259")
    lines = text.splitlines()
    assert lines[1] == "3 pods compared: 1 same node, 1 other node, 1 pending; agreement 33.3%"
    assert any(line.split() == ["other", "Metric/price", "1", "12.5"] for line in lines), text
    assert any(line.split()[:5] == ["ns/c", "n1", "default-scheduler", "pending", "-"] for line in lines), (
        text
    )
    assert "Metric/price (+12.5); scores 100.0 vs 87.5" in text
    assert "unknown: 0/2 nodes are available: 2 Insufficient cpu." in text


def test_status_text_shows_leader_queues_degraded_metrics_and_failures() -> None:
    status = {
        "identity": "ksched-0",
        "mode": "scheduling",
        "leaderElection": True,
        "leading": False,
        "leader": "ksched-1",
        "synced": True,
        "queues": {"active": 3, "backoff": 1, "unschedulable": 2, "in_flight": 0, "handoff": 0},
        "bound": 42,
        "metrics": {
            "live": ["cpu", "mem"],
            "degraded": ["cpu: query failed: connection refused"],
            "learned": {
                "cpu": {
                    "resource": "cpu",
                    "ratio": 1.234,
                    "ratioStdDev": 0.5,
                    "ratioPods": 40,
                    "bestEffort": 480.0,
                    "bestEffortStdDev": 120.0,
                    "bestEffortPods": 12,
                },
                "mem": {
                    "resource": "memory",
                    "ratio": None,
                    "ratioStdDev": 0.0,
                    "ratioPods": 3,
                    "bestEffort": None,
                    "bestEffortStdDev": 0.0,
                    "bestEffortPods": 0,
                },
            },
        },
        "failures": [
            {"pod": "ns/a", "reason": "Unschedulable", "message": "0/3 nodes are available.", "at": 0.0},
            {"pod": "ns/b", "reason": "BindingError", "message": "binding to n1 failed", "at": 60.0},
        ],
        "shadow": None,
    }
    lines = render_status(status, "127.0.0.1:10259").splitlines()
    assert "leader:    ksched-1 (this replica follows)" in lines
    assert (
        "queues:    active 3, backoff 1, unschedulable 2, in_flight 0, handoff 0; 42 pods bound since start"
        in lines
    )
    assert "metrics:   degraded: cpu: query failed: connection refused" in lines
    assert (
        "estimate:  cpu: pods use 1.23x their guess (sd 0.50, 40 measured); "
        "BestEffort pods use 480m (sd 120m, 12 measured)" in lines
    )
    assert "estimate:  mem: too few recent pods measured yet: the configured guesses stand" in lines
    failures = lines[lines.index("recent failures (2):") + 2 :]
    assert [f.split()[:3] for f in failures] == [
        ["00:01:00", "ns/b", "BindingError"],
        ["00:00:00", "ns/a", "Unschedulable"],
    ]


def rebalance_status(mode: str) -> dict[str, Any]:
    return {
        "enabled": True,
        "mode": mode,
        "hot": [{"node": "n0", "metric": "cpu", "value": 0.93, "high": 0.8, "samples": 3}],
        "lastPlan": {
            "moves": [
                {
                    "pod": "ns/web-1",
                    "source": "n0",
                    "target": "n7",
                    "metric": "cpu",
                    "sourceBefore": 0.93,
                    "sourceAfter": 0.68,
                    "targetBefore": 0.41,
                    "targetAfter": 0.55,
                }
            ],
            "skipped": {"limit maxPerNode reached": 3, "younger than minPodAge 5m0s": 4},
        },
        "evictions": 2,
        "wouldEvict": 5,
        "blocked": {"pdb": 1, "failed": 0},
        "reservations": [{"pod": "ns/web-1", "target": "n7"}],
    }


@pytest.mark.parametrize(
    ("name", "rebalance", "want"),
    [
        ("not configured (an older ksched)", None, ["rebalance: off"]),
        ("off", {"enabled": False}, ["rebalance: off"]),
        (
            "the leader: what it moved and why the rest stayed",
            rebalance_status("leader"),
            [
                "rebalance: leader; 1 hot: n0 (cpu 0.93, high 0.80)",
                "           2 evicted, 1 refused by a budget, 0 failed since start; 1 reservation(s) held",
                "  moved ns/web-1 n0 -> n7: cpu 0.93 -> 0.68 there, 0.41 -> 0.55 on n7",
                "  not moved: 4 younger than minPodAge 5m0s; 3 limit maxPerNode reached",
            ],
        ),
        (
            "a shadow: what it would have evicted",
            rebalance_status("shadow"),
            [
                "rebalance: shadow; 1 hot: n0 (cpu 0.93, high 0.80)",
                "           would have evicted 5 since start",
            ],
        ),
        (
            "a follower: hot nodes only",
            {**rebalance_status("follower"), "lastPlan": None},
            ["           the leader moves pods; this replica only tracks hot nodes"],
        ),
    ],
)
def test_status_text_shows_the_rebalancer(
    name: str, rebalance: dict[str, Any] | None, want: list[str]
) -> None:
    text = render_status(quiet_status(rebalance=rebalance), "127.0.0.1:10259")
    for line in want:
        assert any(got.startswith(line) for got in text.splitlines()), (name, line, text)
    assert ("  moved ns/web-1" in text) == name.startswith("the leader"), name


def quiet_status(**fields: Any) -> dict[str, Any]:
    """``/status`` of a replica that schedules alone, has bound nothing and has no metric."""
    return {
        "identity": "ksched-0",
        "mode": "scheduling",
        "leaderElection": False,
        "leading": False,
        "leader": None,
        "synced": True,
        "queues": {},
        "bound": 0,
        "metrics": {"live": [], "degraded": []},
        "failures": [],
        "shadow": None,
        "rebalance": None,
        **fields,
    }


@pytest.mark.parametrize(
    ("shadow", "error"),
    [
        ({"enabled": "yes"}, r"shadow\.enabled: 'yes' is not a boolean"),
        ({"profile": "nope"}, r"shadow\.profile: 'nope' is not allowed \(allowed: ksched\)"),
        ({"keep": 0}, r"shadow\.keep: 0 is not an integer in 1\.\.100000"),
        ({"namespaces": "default"}, r"shadow\.namespaces: must be a list"),
        ({"logs": "x"}, r"shadow\.logs: unknown key \(allowed: enabled, profile, namespaces, keep, log\)"),
    ],
)
def test_bad_shadow_configuration_names_the_key(shadow: dict[str, Any], error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        parse_config({"apiVersion": "ksched.io/v1alpha1", "kind": "KschedConfiguration", "shadow": shadow})


def test_status_lists_the_objects_left_out() -> None:
    left_out = {
        "count": 1,
        "objects": [
            {"kind": "Node", "name": "big", "reason": "malformed", "problem": "status.allocatable: not a map"}
        ],
    }
    status = quiet_status(leftOut=left_out)
    text = render_status(status, "127.0.0.1:10259").splitlines()
    assert "left out (1): objects ksched cannot read, the rest schedules:" in text
    assert "  Node big: status.allocatable: not a map" in text


def test_status_with_a_pod_tells_how_it_counts() -> None:
    lines = pod_lines(
        {
            "pod": "default/java",
            "state": "recent",
            "estimates": [
                {
                    "metric": "cpu_utilisation",
                    "resource": "cpu",
                    "counts": 750.0,
                    "source": "ramping",
                    "measured": 200.0,
                    "boundSecondsAgo": 12.0,
                },
            ],
        }
    )
    assert lines == [
        "pod default/java: recent",
        "  cpu_utilisation: counts 750m cpu (ramping: ramping up: the larger of its estimate and what "
        "its climb says it will reach (where its samples show no rise, only the share of that excess "
        "that the pods before it make likely); measured 200m, bound 12s ago)",
    ]
    pending = pod_lines(
        {
            "pod": "default/web-9",
            "state": "pending",
            "estimates": [
                {
                    "metric": "cpu_utilisation",
                    "resource": "cpu",
                    "counts": 400.0,
                    "source": "workload",
                    "workload": "default/Deployment/web",
                    "figure": 0.4,
                    "pods": 3,
                    "problem": None,
                },
            ],
        }
    )
    assert pending[1] == (
        "  cpu_utilisation: counts 400m cpu (workload: learned from its workload default/Deployment/web; "
        "figure 0.4 from 3 measured pods)"
    )
    assert "not counted" in pod_lines({"pod": "default/x", "state": "not counted", "estimates": []})[0]


@pytest.mark.parametrize("bad", ["web-0", "default/", "/web-0", "a/b/c"])
def test_status_pod_names_one_pod(bad: str) -> None:
    with pytest.raises(KschedError, match="NAMESPACE/NAME"):
        remote.status_path(bad)
    assert remote.status_path("default/web-0") == "/status?pod=default%2Fweb-0"
    assert remote.status_path(None) == "/status"
