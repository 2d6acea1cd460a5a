"""Load estimate v3: what a learned estimate learns per workload (and keeps after its pods left
the recent window), how a pod still ramping up counts, the prior a herd of an unknown workload
counts at, and a pod's declared expected usage."""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from ksched.commands.cli import main
from ksched.commands.simulate import estimate_text
from ksched.config import EstimateConfig, MetricConfig, parse_config
from ksched.config.estimate import LEARN_MIN_PODS, Calibration, WorkloadCalibration
from ksched.engine.estimate import FROM_REQUEST, estimate_choice, workload_of
from ksched.engine.pods import pod_requests
from ksched.errors import ConfigError
from ksched.loop.metrics import across, workloads
from ksched.loop.metrics.across import MIN_CREDIBILITY_K
from ksched.loop.metrics.load_model import LoadModel
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.metrics.pod_series import RAMP_SPAN, PodSeries
from ksched.loop.metrics.samples import Sample
from ksched.loop.metrics.settled import SETTLED_EVERY_S, SETTLED_TTL_S, SettledPods
from ksched.loop.metrics.workloads import (
    WORKLOAD_MEMORY,
    WORKLOAD_TTL_S,
    WorkloadHistory,
    learned_json,
)
from ksched.loop.mirror.slim import slim_node, slim_pod
from ksched.loop.mirror.state import ClusterState
from ksched.loop.telemetry import Telemetry
from tests.conftest import node, pod
from tests.unit.test_learned_estimate import NODE_VALUE, POD_QUERY, SCRAPE_S, learned_metric, placing_estimate
from tests.unit.test_load_estimate import CONFIG, T0, Clock, PodUsageSource, rfc3339


def owned(
    name: str,
    node_name: str,
    cpu: str | None = "100m",
    owner: tuple[str, str] | None = ("Deployment", "web"),
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    bound_at: float = T0 - 3,
) -> dict[str, Any]:
    """A pod bound to ``node_name`` at ``bound_at`` (by default three seconds before T0), made
    by ``owner`` (a Deployment's pods are owned by its ReplicaSet ``<name>-h1``)."""
    p = pod(name, cpu=cpu, memory=None, node_name=node_name, scheduler="default-scheduler")
    m = p["metadata"]
    m["uid"] = f"uid-{name}"
    m["labels"] = dict(labels or {})
    m["annotations"] = dict(annotations or {})
    if owner is not None:
        kind, owner_name = owner
        if kind == "Deployment":
            m["labels"].setdefault("pod-template-hash", "h1")
            kind, owner_name = "ReplicaSet", f"{owner_name}-{m['labels']['pod-template-hash']}"
        m["ownerReferences"] = [{"kind": kind, "name": owner_name, "controller": True, "uid": "u"}]
    p["status"] = {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(bound_at)}],
    }
    return slim_pod(p)


class Source(PodUsageSource):
    """The node query sampled at ``node_at`` (default: five seconds ago), before the pods'
    binds: they count fully until the clock is moved past the window."""

    node_at: float | None = T0 - 10

    def query(self, m: MetricConfig, resolve: object) -> Sample:
        at = self.clock.now - 5 if self.node_at is None else self.node_at
        return Sample({"n0": NODE_VALUE, "n1": NODE_VALUE}, at)


class Loop:
    """A cluster state (n0, n1: 4 CPUs each), a metric store over a table Prometheus and the
    load model: ``sample`` refreshes both and reads the values, two seconds later each time."""

    def __init__(self, m: MetricConfig, telemetry: Telemetry | None = None) -> None:
        self.m = m
        self.clock = Clock(T0)
        self.state = ClusterState((m,), self.clock, telemetry)
        for n in ("n0", "n1"):
            self.state.on_node("ADDED", slim_node(node(n, cpu="4")), None)
        self.source = Source(self.clock)
        self.store = MetricStore(
            [m], self.source, None, lambda: list(self.state.nodes.values()), clock=self.clock
        )  # type: ignore[arg-type]
        self.model = LoadModel(self.store, self.state.recent)

    def add(self, *pods: dict[str, Any]) -> None:
        for p in pods:
            self.state.on_pod("ADDED", p, None)
        self.state.sync()

    def sample(self, usage: dict[str, float], times: int = 1) -> Any:
        matrix = None
        for _ in range(times):
            self.clock.now += 2
            self.source.pods = {f"default/{k}": v for k, v in usage.items()}
            self.store.refresh(self.m)
            self.store.refresh_pods(self.m)
            matrix = self.model.scheduling(self.state.snapshot())
        return matrix

    def choice(self, matrix: Any, p: dict[str, Any]) -> Any:
        estimate = matrix.metrics[0].estimate
        return estimate_choice(p, pod_requests(p), estimate)


# Equal samples a pod needs to be stable.
SETTLE = RAMP_SPAN + 1


def weighed(own: float, pods: int, collective: float, k: float = MIN_CREDIBILITY_K) -> float:
    """A workload's figure from ``pods`` measured pods at ``own``, weighed against the
    collective figure (Buhlmann: ``k`` is at its floor where replicas agree exactly)."""
    z = pods / (pods + k)
    return z * own + (1 - z) * collective


def teach(loop: Loop, workloads: dict[str, float], node_name: str = "n0", pods: int = LEARN_MIN_PODS) -> Any:
    """``pods`` measured pods of each Deployment (100m each, using ratio x 100m) on
    ``node_name``, sampled alike until stable; returns the last matrix."""
    usage = {}
    for name, ratio in workloads.items():
        for i in range(pods):
            loop.add(owned(f"{name}-{i}", node_name, owner=("Deployment", name)))
            usage[f"{name}-{i}"] = 100 * ratio
    return loop.sample(usage, times=SETTLE)


def judge(loop: Loop, rising: bool, name: str = "first") -> None:
    """A bare pod judged at its first chance (its ``SETTLE``-th sample): rising, or level; then
    it leaves. Whether pods showed a rise then is how far a ramping pod whose samples show
    none is held at its estimate."""
    loop.add(owned(name, "n0"))
    for n in range(SETTLE):
        loop.sample({name: 100.0 * (1 + n) if rising else 100.0 + n})
    loop.state.recent.drop(f"default/{name}")


def teach_and_leave(loop: Loop, workloads: dict[str, float]) -> None:
    """:func:`teach`, then the teachers leave the recent window: what they taught stays."""
    teach(loop, workloads)
    for key in list(loop.state.recent.pods):
        loop.state.recent.drop(key)


@pytest.mark.parametrize(
    ("case", "owner", "labels", "label", "want"),
    [
        ("deployment", ("ReplicaSet", "web-7d4b9c"), {"pod-template-hash": "7d4b9c"}, None, "ns/Deployment/web"),
        ("replicaset alone", ("ReplicaSet", "web-7d4b9c"), {}, None, "ns/ReplicaSet/web-7d4b9c"),
        ("statefulset", ("StatefulSet", "db"), {}, None, "ns/StatefulSet/db"),
        ("cronjob's job", ("Job", "backup-29031840"), {}, None, "ns/CronJob/backup"),
        ("daemonset", ("DaemonSet", "agent"), {}, None, "ns/DaemonSet/agent"),
        ("bare pod", None, {}, None, None),
        ("label wins", ("StatefulSet", "db"), {"app.kubernetes.io/name": "pg"}, "app.kubernetes.io/name",
         "ns/app.kubernetes.io/name=pg"),
        ("label absent", ("StatefulSet", "db"), {}, "app.kubernetes.io/name", "ns/StatefulSet/db"),
    ],
)  # fmt: skip
def test_a_pods_workload_is_its_controller_or_the_operators_label(
    case: str, owner: tuple[str, str] | None, labels: dict[str, str], label: str | None, want: str | None
) -> None:
    p: dict[str, Any] = {"metadata": {"name": "p", "namespace": "ns", "labels": labels}}
    if owner is not None:
        p["metadata"]["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    assert workload_of(p, label) == want, case


def test_each_workload_counts_at_what_its_own_pods_use() -> None:
    loop = Loop(learned_metric())
    taught = teach(loop, {"small": 0.5, "big": 2.0})
    assert taught.metrics[0].estimate.calibration.ratio == pytest.approx(1.25), "cluster-wide: both mixed"
    loop.add(owned("small-new", "n1", cpu="1", owner=("Deployment", "small")))
    matrix = loop.sample({})
    small = weighed(0.5, LEARN_MIN_PODS, 1.25)
    assert matrix.values[1, 0] == pytest.approx(NODE_VALUE + small / 4), "the unmeasured pod: small's 0.5x"
    incoming = loop.choice(matrix, owned("small-next", "", cpu="1", owner=("Deployment", "small")))
    assert (incoming.amount, incoming.source, incoming.workload) == (
        round(1000 * small),
        "workload",
        "default/Deployment/small",
    )
    assert incoming.pods == LEARN_MIN_PODS
    status = loop.store.learned()["cpu"]
    assert {w["workload"]: w["ratio"] for w in status["workloads"]} == {
        "default/Deployment/small": pytest.approx(small),
        "default/Deployment/big": pytest.approx(weighed(2.0, LEARN_MIN_PODS, 1.25)),
    }


def scattered(loop: Loop, workloads: dict[str, float], spread: float, pods: int = 4) -> dict[str, float]:
    """``pods`` measured pods of each Deployment (100m each), alternately ``1 - spread`` and
    ``1 + spread`` times the workload's ratio; returns their usage."""
    usage = {}
    for name, ratio in workloads.items():
        for i in range(pods):
            loop.add(owned(f"{name}-{i}", "n0", owner=("Deployment", name)))
            usage[f"{name}-{i}"] = 100 * ratio * (1 + spread if i % 2 else 1 - spread)
    return usage


def test_a_workload_counts_at_its_own_pods_from_the_first_where_replicas_agree() -> None:
    loop = Loop(learned_metric())
    usage = scattered(loop, {"web": 0.5, "batch": 2.0, "api": 1.0}, spread=0.05)
    loop.add(*[owned(f"herd-{i}", "n0", owner=("Deployment", "herd")) for i in range(3)])
    matrix = loop.sample(usage | {f"herd-{i}": 150.0 for i in range(3)}, times=SETTLE)
    calibration = matrix.metrics[0].estimate.calibration
    herd = loop.choice(matrix, owned("herd-3", "", cpu="1", owner=("Deployment", "herd")))
    assert herd.source == "workload" and herd.pods == 3
    # Three replicas that agree, beside workloads that differ: k at its floor, 6/7 its own.
    assert herd.amount == pytest.approx(1000 * weighed(1.5, 3, calibration.ratio), abs=2)
    assert abs(herd.amount - 1500) < abs(herd.amount - 1000 * calibration.ratio) / 3


def test_a_workload_whose_replicas_scatter_like_workloads_do_stays_near_the_collective_figure() -> None:
    loop = Loop(learned_metric())
    usage = scattered(loop, {"web": 0.9, "batch": 1.1, "api": 1.0}, spread=0.6)
    loop.add(owned("odd-0", "n0", owner=("Deployment", "odd")))
    matrix = loop.sample(usage | {"odd-0": 30.0}, times=SETTLE)
    collective = matrix.metrics[0].estimate.calibration.ratio
    odd = loop.choice(matrix, owned("odd-1", "", cpu="1", owner=("Deployment", "odd")))
    assert odd.source == "workload"
    assert 1000 * (0.9 * collective) < odd.amount < 1000 * collective, "one pod at 0.3x says little here"


def test_a_rolling_update_keeps_the_deployments_ratio() -> None:
    loop = Loop(learned_metric())
    teach(loop, {"web": 0.4, "other": 1.0})
    new_revision = owned(
        "web-next", "", cpu="1", owner=("Deployment", "web"), labels={"pod-template-hash": "h2"}
    )
    choice = loop.choice(loop.sample({}), new_revision)
    web = round(1000 * weighed(0.4, LEARN_MIN_PODS, 0.7))
    assert (choice.source, choice.amount) == ("workload", web), "the new ReplicaSet's pod: web's 0.4x"


def test_once_a_rolling_updates_new_pods_are_measured_its_old_ones_no_longer_speak_for_it() -> None:
    loop = Loop(learned_metric())
    old = [owned(f"web-{i}", "n0", owner=("Deployment", "web")) for i in range(LEARN_MIN_PODS)]
    other = [owned(f"other-{i}", "n1", owner=("Deployment", "other")) for i in range(LEARN_MIN_PODS)]
    loop.add(*old, *other)
    loop.sample(
        {f"web-{i}": 30.0 for i in range(LEARN_MIN_PODS)} | {f"other-{i}": 100.0 for i in range(10)}, SETTLE
    )
    for p in old:
        loop.state.on_pod("DELETED", p, None)
    loop.state.sync()
    probe = owned("web-next", "", cpu="1", owner=("Deployment", "web"), labels={"pod-template-hash": "h3"})
    between = loop.choice(loop.sample({}), probe)
    assert between.source == "workload" and between.amount < 500, (
        "no new pod measured yet: the old 0.3x stands"
    )

    labels = {"pod-template-hash": "h2"}
    new = [
        owned(f"web-v2-{i}", "n0", owner=("Deployment", "web"), labels=labels) for i in range(LEARN_MIN_PODS)
    ]
    loop.add(*new)
    matrix = loop.sample({f"web-v2-{i}": 90.0 for i in range(LEARN_MIN_PODS)}, times=SETTLE)
    choice = loop.choice(matrix, probe)
    collective = matrix.metrics[0].estimate.calibration.ratio
    assert choice.source == "workload" and choice.pods == LEARN_MIN_PODS
    assert choice.amount == pytest.approx(1000 * weighed(0.9, LEARN_MIN_PODS, collective), abs=2), (
        "the new revision's 0.9x, not a blend with the deleted pods' 0.3x"
    )


def test_a_statefulset_pod_replaced_in_a_watch_gap_speaks_only_as_its_new_revision() -> None:
    """A pod recreated under its name (a StatefulSet's update) whose deletion the watch missed:
    the old pod left, so once the new revision is measured the old one's figure stops."""
    loop = Loop(learned_metric())

    def db(i: int, revision: str) -> dict[str, Any]:
        p = owned(f"db-{i}", "n0", owner=("StatefulSet", "db"), labels={"controller-revision-hash": revision})
        p["metadata"]["uid"] = f"uid-db-{i}-{revision}"
        return p

    loop.add(*(db(i, "r1") for i in range(3)))
    loop.sample({f"db-{i}": 300.0 for i in range(3)}, SETTLE)
    for i in range(3):
        loop.state.on_pod("MODIFIED", db(i, "r2"), None)  # no DELETED between
    loop.state.sync()
    matrix = loop.sample({f"db-{i}": 50.0 for i in range(3)}, SETTLE)
    workload = matrix.metrics[0].estimate.calibration.workloads["default/StatefulSet/db"]
    assert workload.ratio_pods == 3, "the three pods of r2, not r1's three that left as well"


def test_a_scale_down_or_a_cronjobs_finished_runs_keep_speaking_for_their_workload() -> None:
    loop = Loop(learned_metric())
    pods = [owned(f"web-{i}", "n0", owner=("Deployment", "web")) for i in range(LEARN_MIN_PODS)]
    loop.add(
        *pods, *[owned(f"other-{i}", "n1", owner=("Deployment", "other")) for i in range(LEARN_MIN_PODS)]
    )
    usage = {f"web-{i}": 80.0 for i in range(LEARN_MIN_PODS)} | {f"other-{i}": 100.0 for i in range(10)}
    loop.sample(usage, SETTLE)
    for p in pods[2:]:
        loop.state.on_pod("DELETED", p, None)
    loop.state.sync()
    assert "default/web-2" not in loop.state.recent.pods
    matrix = loop.sample({f"web-{i}": 80.0 for i in range(2)})
    web = matrix.metrics[0].estimate.calibration.workloads["default/Deployment/web"]
    assert web.ratio_pods == LEARN_MIN_PODS, "the same revision: the pods scaled away still speak"


def test_a_pod_relabelled_to_another_workload_stops_speaking_for_its_old_one() -> None:
    loop = Loop(learned_metric(workload_label="app"))
    pods = [owned(f"a-{i}", "n0", owner=None, labels={"app": "a"}) for i in range(3)]
    loop.add(*pods)
    loop.sample({"a-0": 50.0, "a-1": 50.0, "a-2": 300.0}, SETTLE)
    moved = dict(pods[2], metadata={**pods[2]["metadata"], "labels": {"app": "b"}})
    loop.state.on_pod("MODIFIED", moved, None)
    loop.state.sync()
    matrix = loop.sample({"a-0": 50.0, "a-1": 50.0, "a-2": 300.0}, SETTLE)
    workloads = matrix.metrics[0].estimate.calibration.workloads
    assert workloads["default/app=a"].ratio_pods == 2, "a-2 now speaks for b only"
    assert workloads["default/app=b"].ratio_pods == 1


def test_a_settled_pod_relabelled_to_another_workload_stops_speaking_for_its_old_one() -> None:
    """A pod bound long ago (taught by the pass through the settled pods, never recent) that is
    relabelled speaks for its new workload only, as a recent one does."""
    loop = Loop(learned_metric(workload_label="app"))
    day_ago = T0 - 86400
    pods = [owned(f"a-{i}", "n0", owner=None, labels={"app": "a"}, bound_at=day_ago) for i in range(3)]
    loop.add(*pods)
    usage = {"a-0": 50.0, "a-1": 50.0, "a-2": 300.0}
    before = loop.sample(usage).metrics[0].estimate.calibration.workloads
    assert before["default/app=a"].ratio_pods == 3 and not loop.state.recent.pods
    moved = dict(pods[2], metadata={**pods[2]["metadata"], "labels": {"app": "b"}})
    loop.state.on_pod("MODIFIED", moved, None)
    loop.state.sync()
    loop.clock.now += SETTLED_EVERY_S  # the next pass through the settled pods
    workloads = loop.sample(usage).metrics[0].estimate.calibration.workloads
    assert workloads["default/app=a"].ratio_pods == 2, "a-2 now speaks for b only"
    assert workloads["default/app=b"].ratio_pods == 1


def test_one_huge_workload_weighs_as_one_workload() -> None:
    loop = Loop(learned_metric())
    for w in range(19):
        loop.add(*[owned(f"svc{w}-{i}", "n0", cpu="500m", owner=("Deployment", f"svc{w}")) for i in range(3)])
    loop.add(*[owned(f"big-{i}", "n1", cpu="64", owner=("Deployment", "big")) for i in range(3)])
    usage = {f"svc{w}-{i}": 500 * (0.9 + 0.05 * w) for w in range(19) for i in range(3)}
    usage |= {f"big-{i}": 64000 * 0.2 for i in range(3)}
    calibration = loop.sample(usage, times=SETTLE).metrics[0].estimate.calibration
    assert calibration.prior_ratio > 1.5, "the services' p90, not the big one's 0.2"
    assert calibration.prior_ratio_typical > 0.8


def test_agents_that_request_next_to_nothing_do_not_set_what_a_new_workload_is_held_to() -> None:
    # Ten services of 500m using 0.4 of it beside two node agents (DaemonSets) that request
    # 10m and use 40-120m: one workload in six is at a ratio of 8, as agents often are.
    loop = Loop(learned_metric(deviations=1.0))
    services = {f"svc{w}": 0.4 for w in range(LEARN_MIN_PODS)}
    agents = [
        owned(f"agent{w}-{i}", "n1", cpu="10m", owner=("DaemonSet", f"agent{w}"))
        for w in range(2)
        for i in range(LEARN_MIN_PODS)
    ]
    loop.add(*agents)
    usage = {f"agent{w}-{i}": 40.0 + 80.0 * (i % 2) for w in range(2) for i in range(LEARN_MIN_PODS)}
    for name, ratio in services.items():
        for i in range(LEARN_MIN_PODS):
            loop.add(owned(f"{name}-{i}", "n0", cpu="500m", owner=("Deployment", name)))
            usage[f"{name}-{i}"] = 500 * ratio + 10 * (i % 2)
    matrix = loop.sample(usage, times=SETTLE)
    calibration = matrix.metrics[0].estimate.calibration
    assert calibration.workloads["default/DaemonSet/agent0"].ratio > 4, "the agents' own figure stands"
    assert calibration.prior_ratio < 1.0, "the agents request too little to say what a Deployment uses"
    assert calibration.prior_ratio_typical < 0.6
    assert calibration.prior_ratio_sd < 0.25, "the agents scatter by 4 of 10m: little of a CPU"
    new = loop.choice(matrix, owned("new-0", "", cpu="1", owner=("Deployment", "new")))
    assert new.source == "prior" and new.amount < 1000, "a new 1-CPU Deployment is not held to 8 cores"
    service = loop.choice(matrix, owned("svc0-next", "", cpu="1", owner=("Deployment", "svc0")))
    assert service.amount < 500, "a known service counts near its 0.4x, its spread its own"


def test_a_ramping_pod_counts_at_least_its_estimate_until_its_usage_is_stable() -> None:
    loop = Loop(learned_metric())
    loop.add(owned("java", "n1", cpu="1"))
    first = loop.sample({"java": 200.0})
    assert first.values[1, 0] == pytest.approx(NODE_VALUE + 1.0 / 4), "one sample of 200m: counts its 1 CPU"
    rising = loop.sample({"java": 600.0})
    assert rising.values[1, 0] == pytest.approx(NODE_VALUE + 1.0 / 4), "still rising: its 1 CPU"
    assert loop.store.learned()["cpu"]["ramping"] == ["default/java"]
    [shown] = loop.store.learned()["cpu"]["rampingPods"]
    assert (shown["pod"], shown["counts"], shown["measured"]) == ("default/java", 1000.0, 600.0)
    noisy = loop.sample({"java": 620.0})
    assert noisy.values[1, 0] == pytest.approx(NODE_VALUE + 1.0 / 4), "+3 % a sample, +210 % over two"
    stable = loop.sample({"java": 630.0})
    assert stable.values[1, 0] == pytest.approx(NODE_VALUE + 0.63 / 4), "stable: its measured 630m"
    assert loop.store.learned()["cpu"]["ramping"] == []


def test_noise_does_not_end_a_climb() -> None:
    loop = Loop(learned_metric(warmup_s=600.0))
    loop.add(owned("java", "n1", cpu="4"))
    # +20 % a sample, with +-10 % noise: one step reads +1 %.
    for value in (1000.0, 1300.0, 1310.0, 1700.0, 2000.0):
        loop.sample({"java": value})
        assert loop.store.learned()["cpu"]["ramping"] == ["default/java"], f"at {value:g}m it still climbs"
    for value in (2050.0, 2010.0):
        loop.sample({"java": value})
    assert loop.store.learned()["cpu"]["ramping"] == [], "level over two samples: stable"


def test_the_same_scrape_read_again_does_not_end_a_ramp() -> None:
    loop = Loop(learned_metric())
    loop.add(owned("ticker", "n0", owner=("Deployment", "ticker")))
    for value in (100.0, 100.0, 200.0, 200.0, 300.0):
        loop.sample({"ticker": value})  # a new scrape every 4 s, read every 2 s
    loop.add(owned("java", "n1", cpu="1"))
    for ticker in (300.0, 400.0, 400.0):
        again = loop.sample({"ticker": ticker, "java": 200.0})
    assert "default/java" in loop.store.learned()["cpu"]["ramping"], "one scrape read three times"
    assert again.values[1, 0] == pytest.approx(NODE_VALUE + 1.0 / 4), "its 1 CPU, not its 200m"
    for ticker in (500.0, 500.0, 600.0, 600.0, 700.0, 700.0):
        loop.sample({"ticker": ticker, "java": 600.0})
    assert "default/java" in loop.store.learned()["cpu"]["ramping"], "600m twice: 200m two samples back"
    stable = loop.sample({"ticker": 800.0, "java": 600.0})
    assert "default/java" not in loop.store.learned()["cpu"]["ramping"], (
        "600m for three samples 6 s apart: stable"
    )
    assert stable.values[1, 0] == pytest.approx(NODE_VALUE + 0.6 / 4), "stable: its measured 600m"


def warmups(loop: Loop) -> dict[str, float | None]:
    """Each workload's learned warm-up, as ``/status`` shows it."""
    return {w["workload"]: w["warmup"] for w in loop.store.learned()["cpu"]["workloads"]}


def test_a_workloads_next_pods_ramp_as_long_as_its_first_one_took_to_reach_its_usage() -> None:
    """A pod's warm-up is its age when its samples first read its level, not when enough equal
    samples said so; a later replica whose samples are level early keeps counting at least its
    estimate until that age."""
    loop = Loop(learned_metric(warmup_s=600.0))
    # Bound in the second before T0 - 2 (API times are to the second: ksched takes its end).
    loop.add(owned("java-0", "n1", cpu="1", owner=("Deployment", "java")))
    # Read every 2 s from T0 + 2, a new value each time: the scrape cadence is 2 s, so the
    # same value read again is a new sample every other read.
    for value in (200.0, 400.0, 600.0, 800.0, 1000.0, 1000.0, 1000.0, 1000.0):
        loop.sample({"java-0": value})
        assert loop.store.learned()["cpu"]["ramping"] == ["default/java-0"], f"at {value:g}m it may climb"
    loop.sample({"java-0": 1000.0})
    assert loop.store.learned()["cpu"]["ramping"] == [], (
        "1000m for three samples: stable, 20 s after its bind"
    )
    assert warmups(loop) == {"default/Deployment/java": pytest.approx(12.0)}, "it reached 1000m 12 s after"
    loop.clock.now += 1
    loop.add(owned("java-1", "n1", cpu="1", owner=("Deployment", "java"), bound_at=loop.clock.now))
    ages = []
    while "default/java-1" in loop.store.learned()["cpu"]["ramping"] or not ages:
        loop.sample({"java-0": 1000.0, "java-1": 300.0})
        ages.append(loop.clock.now - (T0 + 19))
    assert ages[-1] == 14.0, (
        "level from 2 s after its bind (three samples by 10 s), ramping until its workload's 12 s"
    )
    # java-1 read 300m from its first scrape, 2 s after its bind: it teaches a warm-up of 2 s.
    assert warmups(loop) == {"default/Deployment/java": pytest.approx(7.0)}, "the median of 12 s and 2 s"


def test_a_noisy_pod_level_from_its_first_sample_teaches_that_age_not_its_settling() -> None:
    """Usage with noise changes at every scrape, so the read that takes a pod as settled is also
    the last change: a workload that uses the same from its first scrape would otherwise teach
    a warm-up of three scrapes, and its next pods would be held at their estimate that long."""
    series = PodSeries(scrape_interval_s=15.0)
    taught = []
    for age, value in ((12, 480.0), (27, 530.0), (42, 505.0), (57, 470.0)):
        ramping, warmed, _ = series.ramping("default/web-0", "u1", float(age), value, float(age), None, 600.0)
        taught.append((ramping, warmed))
    assert taught[:2] == [(True, None)] * 2, "two samples cannot tell a ramp from a level"
    assert taught[2] == (False, 12.0), "settled at its third sample; level from its first, at 12 s"
    # A pod whose first sample reads low (its CPU time since its container started, over a
    # lifetime that began before its usage did) levels from its second.
    series = PodSeries(scrape_interval_s=15.0)
    taught = []
    for age, value in ((12, 300.0), (27, 500.0), (42, 530.0), (57, 490.0)):
        ramping, warmed, _ = series.ramping("default/web-1", "u1", float(age), value, float(age), None, 600.0)
        taught.append((ramping, warmed))
    assert taught == [(True, None)] * 3 + [(False, 27.0)], "level from its second sample, at 27 s"


def test_a_pod_that_reads_the_same_from_its_first_scrape_teaches_a_warm_up_of_that_age() -> None:
    """Before the scrape cadence is known a constant pod waits a whole ``scrapeInterval`` for
    each sample; the wait is not its warm-up."""
    series = PodSeries(scrape_interval_s=60.0)
    ages = []
    for at in range(0, 300, 5):
        ramping, warmed, fresh = series.ramping("default/idle", "u1", float(at), 0.0, at + 20.0, None, 600.0)
        ages.append(at + 20.0)
        if not ramping:
            break
    assert ages[-1] == 20.0 + 2 * 90.0, "its second and third samples 1.5 scrape intervals apart"
    assert (warmed, fresh) == (20.0, True), "it read the same from its first scrape, 20 s after its bind"


def test_a_pod_held_by_its_workloads_warm_up_teaches_when_its_own_samples_levelled() -> None:
    """A replica that reaches its usage sooner than its workload's warm-up counts as ramping
    until that warm-up, but teaches its own: else each held replica would teach at least the
    warm-up that held it, and a workload's warm-up could only grow."""
    series = PodSeries(scrape_interval_s=1.0)
    taught = []
    for age, value in (
        (10, 300.0),
        (12, 600.0),
        (14, 610.0),
        (16, 605.0),
        (18, 612.0),
        (20, 600.0),
        (30, 608.0),
    ):
        ramping, warmed, _ = series.ramping(
            "default/java-1", "u1", float(age), value, float(age), 25.0, 180.0
        )
        taught.append((ramping, warmed))
    assert taught[:6] == [(True, None)] * 6, (
        "level from 12 s (three samples by 16 s), held until its workload's 25 s"
    )
    assert taught[6] == (False, 12.0), "it teaches 12 s: the first sample of its level span"


def test_a_pod_taken_as_settled_at_the_warm_up_cap_teaches_on_that_read() -> None:
    """A pod reading the same scrape again (not a new sample) when it reaches the estimate's
    ``warmup`` counts as measured and teaches its workload on that read, not a scrape later."""
    loop = Loop(learned_metric(scrape_interval_s=60.0, warmup_s=20.0))
    loop.add(owned("web-0", "n1"))
    matrix = loop.sample({"web-0": 50.0})
    while loop.store.learned()["cpu"]["ramping"]:
        matrix = loop.sample({"web-0": 50.0})
    assert loop.clock.now - (T0 - 2) == 20.0, "at the 20 s cap, one scrape read again all along"
    assert matrix.metrics[0].estimate.calibration.workloads["default/Deployment/web"].ratio_pods == 1
    # A pod held by its workload's warm-up up to the cap teaches what its own samples said.
    series = PodSeries(scrape_interval_s=10.0)
    for age in range(10, 185, 5):
        ramping, warmed, fresh = series.ramping(
            "default/java", "u1", float(age), 500.0, float(age), 178.0, 180.0
        )
        if not ramping:
            break
    assert (age, warmed, fresh) == (180, 10.0, True), "level from its first read, 10 s after its bind"


def test_a_pod_past_the_window_that_still_ramps_counts_what_the_sample_does_not_show() -> None:
    loop = Loop(learned_metric(warmup_s=600.0))
    loop.add(owned("java", "n1", cpu="1"))
    loop.clock.now += 200
    loop.source.node_at = None  # sampled now, past the 90 s window: it shows the pod's 300m
    matrix = loop.sample({"java": 300.0})
    assert matrix.values[1, 0] == pytest.approx(NODE_VALUE + 0.7 / 4), "1 CPU expected, 300m shown"


def test_ramping_pods_do_not_teach() -> None:
    loop = Loop(learned_metric())
    for i in range(LEARN_MIN_PODS):
        loop.add(owned(f"web-{i}", "n0"))
    usage = {f"web-{i}": 30.0 for i in range(LEARN_MIN_PODS)}
    ramping = loop.sample(usage, times=RAMP_SPAN).metrics[0].estimate.calibration
    assert ramping.ratio is None and ramping.workloads == {}, "two samples each: they may still ramp"
    stable = loop.sample(usage).metrics[0].estimate.calibration
    assert stable.ratio == pytest.approx(0.3)
    assert stable.workloads["default/Deployment/web"].ratio == pytest.approx(0.3)


def test_a_herd_counts_at_its_workloads_history_else_at_the_prior() -> None:
    loop = Loop(learned_metric())
    teach_and_leave(loop, {"web": 0.5, "batch": 2.0, "api": 1.0})
    herd = [owned(f"web-herd-{i}", "n1", owner=("Deployment", "web")) for i in range(20)]
    loop.add(*herd)
    matrix = loop.sample({})
    mean = (0.5 + 2.0 + 1.0) / 3  # no cluster-wide figure: the workloads' pods-weighted mean
    web = weighed(0.5, LEARN_MIN_PODS, mean)
    assert matrix.values[1, 0] == pytest.approx(NODE_VALUE + 20 * 100 * web / 4000), "20 pods at web's 0.5x"
    calibration = matrix.metrics[0].estimate.calibration
    assert calibration.ratio is None, "nothing measured in the window: no cluster-wide figure"
    assert calibration.next_pod == pytest.approx(100 * web), "a heavy next pod: what the recent pods count"
    unknown = loop.choice(matrix, owned("new-0", "", cpu="1", owner=("Deployment", "new")))
    batch = round(1000 * weighed(2.0, LEARN_MIN_PODS, mean))
    assert (unknown.source, unknown.amount) == ("prior", batch), "p90 of the workloads: batch's"
    bare = loop.choice(matrix, owned("bare", "", cpu="1", owner=None))
    assert (bare.source, bare.amount) == ("configured", 1000)


REQUESTS_M = (100, 200, 400, 800, 1600)


def test_before_any_best_effort_pod_is_measured_one_counts_as_a_new_workload_requesting_what_pods_do() -> (
    None
):
    """A BestEffort pod tells nothing of its size: until one is measured, a pod of a new
    BestEffort workload counts as a pod of a workload without history that requests the
    recent requests' quantile (held to the ratio prior's quantile of it), and is scored at their
    mean at the typical ratio, not at the configured 100m that makes the smallest idle node look
    coolest; once as many BestEffort workloads as a quantile needs taught theirs, those are the
    prior."""
    loop = Loop(learned_metric())
    teach_and_leave(loop, {"web": 0.5, "batch": 2.0, "api": 1.0})
    loop.add(
        *(
            owned(f"svc{i}-0", "n1", cpu=f"{m}m", owner=("Deployment", f"svc{i}"))
            for i, m in enumerate(REQUESTS_M)
        )
    )
    matrix = loop.sample({})
    calibration = matrix.metrics[0].estimate.calibration
    ratio, typical = calibration.prior_ratio, calibration.prior_ratio_typical
    assert ratio > typical > 0
    mean = sum(REQUESTS_M) / len(REQUESTS_M)
    assert calibration.prior_best_effort == pytest.approx(1600 * ratio), "p90 of five requests: the highest"
    assert calibration.prior_best_effort_typical == pytest.approx(mean * typical)
    be = loop.choice(matrix, owned("cache-0", "", cpu=None, owner=("Deployment", "cache")))
    assert (be.source, be.amount, be.expected) == ("prior", round(1600 * ratio), round(mean * typical))
    assert learned_json("cpu", calibration)["prior"]["bestEffortFrom"] == "requesting pods"
    bare = loop.choice(matrix, owned("be-bare", "", cpu=None, owner=None))
    assert (bare.source, bare.amount) == ("configured", 100), "a pod of no workload: the cluster-wide figure"

    # One light BestEffort workload measured: its figure is not a quantile of anything, and what
    # the requesting pods say still holds the prior up.
    loop.add(owned("cache-1", "n0", cpu=None, owner=("Deployment", "cache")))
    calibration = loop.sample({"cache-1": 30.0}, times=SETTLE).metrics[0].estimate.calibration
    assert calibration.workloads["default/Deployment/cache"].best_effort == pytest.approx(30.0)
    assert calibration.prior_best_effort == pytest.approx(1600 * ratio)
    assert learned_json("cpu", calibration)["prior"]["bestEffortFrom"] == "best-effort pods"
    # As many BestEffort workloads measured as a cluster-wide figure needs pods: theirs is the prior.
    light = {f"be{i}-0": 30.0 + i for i in range(LEARN_MIN_PODS)}
    loop.add(*(owned(k, "n0", cpu=None, owner=("Deployment", k[:-2])) for k in light))
    calibration = loop.sample({"cache-1": 30.0, **light}, times=SETTLE).metrics[0].estimate.calibration
    assert 30.0 <= calibration.prior_best_effort <= 30.0 + LEARN_MIN_PODS


def test_the_prior_of_fewer_workloads_than_its_quantile_needs_is_held_up_by_the_guess() -> None:
    """The 90th percentile of three light workloads is the highest of them, not a quantile: a
    pod of a new workload is held to at least its guess with the initial spread (as before any
    workload was measured) until ten workloads taught a ratio; then theirs stands alone."""
    loop = Loop(learned_metric(initial_spread=0.5, deviations=1.0))
    teach(loop, {"a": 0.2, "b": 0.3, "c": 0.25})
    calibration = loop.sample({}).metrics[0].estimate.calibration
    assert (calibration.prior_ratio, calibration.prior_ratio_sd, calibration.prior_ratio_typical) == (
        1.0,
        0.5,
        1.0,
    )
    new = loop.choice(loop.sample({}), owned("new-0", "", cpu="1", owner=("Deployment", "new")))
    assert (new.source, new.amount) == ("prior", 1500)
    loop = Loop(learned_metric(initial_spread=0.5, deviations=1.0))
    teach(loop, {f"w{i}": 0.2 + 0.01 * i for i in range(LEARN_MIN_PODS)})
    calibration = loop.sample({}).metrics[0].estimate.calibration
    assert calibration.prior_ratio < 0.3, "ten workloads: their own quantile"


def test_before_anything_is_measured_a_best_effort_pod_counts_at_what_pods_request() -> None:
    """With no pod measured at all (a fresh pool), a pod of a BestEffort workload counts at the
    quantile of the recent pods' requests, with the initial spread of it (as a pod guessed at it
    that nothing measured), and is scored at their mean (with its caution): a pod that asks for
    nothing is taken to be like the pods that ask."""
    loop = Loop(learned_metric(initial_spread=0.5, deviations=1.0))
    loop.add(
        *(
            owned(f"svc{i}-0", "n1", cpu=f"{m}m", owner=("Deployment", f"svc{i}"))
            for i, m in enumerate(REQUESTS_M)
        )
    )
    matrix = loop.sample({})
    calibration = matrix.metrics[0].estimate.calibration
    mean = sum(REQUESTS_M) / len(REQUESTS_M)
    assert (calibration.prior_best_effort, calibration.prior_best_effort_typical) == (
        1600,
        pytest.approx(mean),
    )
    assert calibration.prior_best_effort_sd == pytest.approx(0.5 * 1600)
    be = loop.choice(matrix, owned("cache-0", "", cpu=None, owner=("Deployment", "cache")))
    # Scored at the mean plus its deviation (the estimate scores pods with their caution).
    assert (be.source, be.amount, be.expected) == ("prior", round(1.5 * 1600), round(mean + 0.5 * 1600))
    assert learned_json("cpu", calibration)["prior"]["bestEffortFrom"] == "requesting pods"


@pytest.mark.parametrize(
    ("case", "workloads", "margins"),
    [
        ("one pod: at the quantile", ["new"], [1]),
        ("four workloads: the quantile of their sum", ["a", "b", "c", "d"], [1, 1, 1, 1]),
        ("one workload's four replicas: each at the quantile", ["new"] * 4, [4]),
        ("two workloads of two", ["a", "a", "b", "b"], [2, 2]),
    ],
)
def test_pods_of_unknown_workloads_on_a_node_count_at_the_quantile_of_their_sum(
    case: str, workloads: list[str], margins: list[int]
) -> None:
    """A pod of a workload without history counts at the prior's quantile. The replicas of one
    workload share its figure, so they add theirs up; workloads are independent of each other,
    so a node of several counts the typical figure for each and the margins up to the quantile
    in quadrature: one heavy workload among four is likely, four are not."""
    loop = Loop(learned_metric())
    teach_and_leave(loop, {"web": 0.5, "batch": 2.0, "api": 1.0})
    loop.add(*(owned(f"{w}-{i}", "n1", owner=("Deployment", w)) for i, w in enumerate(workloads)))
    matrix = loop.sample({})
    calibration = matrix.metrics[0].estimate.calibration
    high, typical = calibration.prior_ratio, calibration.prior_ratio_typical
    assert high > typical
    margin = 100 * (high - typical)
    want = len(workloads) * 100 * typical + math.sqrt(sum((m * margin) ** 2 for m in margins))
    assert matrix.values[1, 0] == pytest.approx(NODE_VALUE + want / 4000), case
    assert matrix.values[1, 0] <= NODE_VALUE + len(workloads) * 100 * high / 4000 + 1e-12
    # Each pod on its own still counts at the quantile (``/status``).
    counted = loop.state.recent.counted_as(f"default/{workloads[0]}-0")
    assert counted is not None and counted[0]["counts"] == pytest.approx(100 * high)


def test_under_a_limit_prior_a_pod_with_a_limit_counts_at_it_and_the_others_at_the_quantile_of_their_sum() -> (
    None
):
    loop = Loop(parse_metric({"prior": "limit"}))
    teach_and_leave(loop, {"web": 0.5, "batch": 2.0, "api": 1.0})
    capped = owned("a-0", "n1", owner=("Deployment", "a"))
    capped["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "1"}
    loop.add(capped, *(owned(f"{w}-0", "n1", owner=("Deployment", w)) for w in ("b", "c")))
    matrix = loop.sample({})
    calibration = matrix.metrics[0].estimate.calibration
    high, typical = 100 * calibration.prior_ratio, 100 * calibration.prior_ratio_typical
    want = 1000 + 2 * typical + math.sqrt(2) * (high - typical)
    assert matrix.values[1, 0] == pytest.approx(NODE_VALUE + want / 4000), "its 1 CPU limit, no margin on it"


def test_a_ramping_pod_of_an_unknown_workload_keeps_its_margin_until_it_measures_past_it() -> None:
    loop = Loop(learned_metric())
    teach_and_leave(loop, {"web": 0.5, "batch": 2.0, "api": 1.0})
    judge(loop, rising=True)
    loop.add(*(owned(f"{w}-0", "n1", cpu="1", owner=("Deployment", w)) for w in ("a", "b")))
    low = loop.sample({"a-0": 200.0, "b-0": 200.0})
    calibration = low.metrics[0].estimate.calibration
    assert loop.store.learned()["cpu"]["ramping"] == ["default/a-0", "default/b-0"]
    high, typical = 1000 * calibration.prior_ratio, 1000 * calibration.prior_ratio_typical
    # One pod in 1 + the teachers showed a rise at its first chance: each is held at that share
    # of its prior's excess over its 200m, and of its margin.
    share = calibration.rising_share
    assert share == pytest.approx(loop.store.learned()["cpu"]["risingShare"], abs=1e-3)
    assert 0 < share < 1 and 200 < typical < high
    held = 200 + share * (typical - 200)
    both = 2 * held + math.sqrt(2) * share * (high - typical)
    assert low.values[1, 0] == pytest.approx(NODE_VALUE + both / 4000), "both below the mean: the prior's sum"
    past = loop.sample({"a-0": 3000.0, "b-0": 200.0})
    assert loop.store.learned()["cpu"]["ramping"] == ["default/a-0", "default/b-0"]
    assert high < 3000
    assert past.values[1, 0] == pytest.approx(NODE_VALUE + (3000 + held + share * (high - typical)) / 4000), (
        "a-0 at its measured 3 CPU, no margin left; b-0 alone: its share of the quantile"
    )


# Ten workloads' ratios: as many as the prior's quantile needs before it stands alone.
TEN_WORKLOADS = {"web": 0.5, "batch": 2.0, "api": 1.0, **{f"svc{i}": 0.6 + 0.1 * i for i in range(7)}}


@pytest.mark.parametrize("score", [False, "pod", True])
def test_the_score_reads_a_pod_of_an_unknown_workload_at_the_typical_workloads_figure(score: Any) -> None:
    loop = Loop(parse_metric({"scoreByMean": score, "deviations": 1}))
    matrix = teach(loop, TEN_WORKLOADS)
    unknown = loop.choice(matrix, owned("new-0", "", cpu="1", owner=("Deployment", "new")))
    ratios = list(TEN_WORKLOADS.values())
    figures = [weighed(r, LEARN_MIN_PODS, sum(ratios) / len(ratios)) for r in ratios]
    calibration = matrix.metrics[0].estimate.calibration
    assert calibration.prior_ratio == pytest.approx(figures[1]), "p90 of the workloads: batch's"
    assert calibration.prior_ratio_typical == pytest.approx(sum(figures) / len(figures)), "their mean"
    # The filter counts it at the quantile; the replicas agree exactly, so no deviation is added.
    assert (unknown.source, unknown.amount) == ("prior", round(1000 * figures[1]))
    # The score counts it at their mean, whatever scoreByMean says: its replicas agree, so
    # it has no deviations to leave out.
    want = round(1000 * sum(figures) / len(figures))
    assert unknown.expected == want
    # explain says what the score counted where it differs from what the filter holds it to.
    assert f"; scored at {want}m" in estimate_text("cpu", unknown)
    risky = Loop(parse_metric({"scoreByMean": score, "deviations": 1, "scoreRisk": True}))
    matrix = teach(risky, TEN_WORKLOADS)
    unknown = risky.choice(matrix, owned("new-0", "", cpu="1", owner=("Deployment", "new")))
    margin = unknown.amount - want
    assert unknown.risk and margin > 0
    assert f"; scored at {want}m, and the {margin}m above by the chance" in estimate_text("cpu", unknown)
    known = loop.choice(matrix, owned("web-next", "", cpu="1", owner=("Deployment", "web")))
    assert known.expected == known.amount == round(1000 * figures[0]), "a known workload: its own"
    assert not risky.choice(matrix, owned("web-next", "", cpu="1", owner=("Deployment", "web"))).risk, (
        "nothing above its expected usage: no risk to weigh"
    )


def parse_metric(estimate: dict[str, Any], query: str = "q[90s]") -> MetricConfig:
    """A Prometheus metric with a learned estimate of cpu, as ``ksched run`` parses it."""
    raw = {
        **CONFIG,
        "prometheus": {"url": "http://prometheus:9090"},
        "metrics": [
            {
                "name": "cpu",
                "source": "prometheus",
                "query": query,
                "estimate": {
                    "resource": "cpu",
                    "podQuery": POD_QUERY,
                    "learn": True,
                    **({"scrapeInterval": f"{SCRAPE_S:g}s"} if estimate.get("learn", True) else {}),
                    **estimate,
                },
            }
        ],
    }
    (m,) = parse_config(raw).metrics
    return m


@pytest.mark.parametrize(
    ("prior", "limit", "want"),
    [(1.5, None, 1500), ("limit", "1", 1000), ("limit", None, 500), ("p90", "1", 500)],
)
def test_the_prior_can_be_a_ratio_or_the_pods_limit(prior: Any, limit: str | None, want: int) -> None:
    loop = Loop(parse_metric({"prior": prior}))
    teach(loop, {f"web{i}": 0.5 for i in range(LEARN_MIN_PODS)})
    p = owned("new-0", "", cpu="1", owner=("Deployment", "new"))
    if limit is not None:
        p["spec"]["containers"][0]["resources"]["limits"] = {"cpu": limit}
    choice = loop.choice(loop.sample({}), p)
    assert (choice.source, choice.amount) == ("prior", want)


def limited(name: str, node_name: str, workload: str, limit: str, cpu: str = "100m") -> dict[str, Any]:
    """A pod of Deployment ``workload`` requesting ``cpu`` and allowed up to ``limit``."""
    p = owned(name, node_name, cpu=cpu, owner=("Deployment", workload))
    p["spec"]["containers"][0]["resources"]["limits"] = {"cpu": limit}
    return p


def test_a_pod_allowed_past_its_request_counts_at_its_workloads_figure_once_learned_never_past_its_limit() -> (
    None
):
    loop = Loop(learned_metric(deviations=1.0))
    teach(loop, {"web": 0.5, "other": 1.0})
    unknown = loop.choice(loop.sample({}), limited("api-0", "", "api", "2"))
    assert (unknown.source, unknown.amount) == ("limit", 2000), (
        "nothing learned of api: its limit, an upper bound"
    )

    # Burstable replicas of api (100m, limit 2) that use 300m: they teach api, and the next
    # one counts near 300m rather than at 2 cores.
    replicas = [limited(f"api-{i}", "n1", "api", "2") for i in range(LEARN_MIN_PODS)]
    loop.add(*replicas)
    matrix = loop.sample({f"api-{i}": 300.0 + 10 * (i % 2) for i in range(LEARN_MIN_PODS)}, times=SETTLE)
    calibration = matrix.metrics[0].estimate.calibration
    assert calibration.workloads["default/Deployment/api"].ratio_pods == LEARN_MIN_PODS
    known = loop.choice(matrix, limited("api-next", "", "api", "2"))
    assert known.source == "workload" and 280 < known.amount < 400, "api's own 3x of 100m"
    capped = loop.choice(matrix, limited("api-small", "", "api", "200m"))
    assert capped.amount == 200 and capped.expected <= 200, "3x of 100m is past a 200m limit: the limit"
    other = owned("other-g", "", cpu="100m", owner=("Deployment", "other"))
    assert loop.choice(matrix, other).amount > 100, (
        "without a limit, the figure may take a pod past its request"
    )
    other["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "100m"}
    assert loop.choice(matrix, other).amount == 100, "a limit at the request caps it there"

    # Bound and not yet measured, a replica counts on its node at the same figure.
    before = matrix.values[0, 0]
    loop.add(limited("api-new", "n0", "api", "2"))
    after = loop.sample({f"api-{i}": 300.0 for i in range(LEARN_MIN_PODS)})
    assert 280 / 4000 < after.values[0, 0] - before < 400 / 4000, "api's figure, not its 2-core limit"


def test_before_anything_is_learned_a_pod_allowed_past_its_request_counts_at_its_limit() -> None:
    p = limited("api-0", "", "api", "2")
    for estimate in (placing_estimate(), EstimateConfig(resource="cpu")):
        choice = estimate_choice(p, pod_requests(p), estimate)
        assert (choice.source, choice.amount) == ("limit", 2000)


def test_a_spread_across_workloads_no_longer_makes_a_pod_huge() -> None:
    # As the held-out run's: pods that use far more than they request beside pods that use
    # about what they request; cluster-wide the ratio is high and its spread wide.
    loop = Loop(learned_metric(deviations=1.0))
    loop.add(*[owned(f"web-{i}", "n0", cpu="1", owner=("Deployment", "web")) for i in range(LEARN_MIN_PODS)])
    loop.add(*[owned(f"hog-{i}", "n0", cpu="200m", owner=("Deployment", "hog")) for i in range(30)])
    usage = {f"web-{i}": 900.0 + 20 * (i % 2) for i in range(LEARN_MIN_PODS)}
    usage |= {f"hog-{i}": 600.0 for i in range(30)}
    matrix = loop.sample(usage, times=SETTLE)
    calibration = matrix.metrics[0].estimate.calibration
    cluster_wide = 2000 * (calibration.ratio + calibration.ratio_sd)
    assert cluster_wide > 4000, "what a 2000m pod counted as before: over 4 cores"
    web = loop.choice(matrix, owned("web-next", "", cpu="2", owner=("Deployment", "web")))
    assert web.source == "workload" and web.amount < 0.5 * cluster_wide, "web's own 0.92x, near enough"


def test_a_declared_expected_usage_wins_and_a_bad_one_is_ignored_and_counted() -> None:
    telemetry = Telemetry()
    loop = Loop(learned_metric(), telemetry)
    teach(loop, {"web": 2.0})
    declared = owned("vpa", "n1", cpu="1", annotations={"ksched.io/expected-cpu": "750m"})
    bad = owned(
        "typo", "n1", cpu="1", owner=("Deployment", "other"), annotations={"ksched.io/expected-cpu": "lots"}
    )
    loop.add(declared, bad)
    matrix = loop.sample({})
    assert matrix.values[1, 0] == pytest.approx(NODE_VALUE + (0.75 + 2.0) / 4), (
        "750m declared; typo at the prior"
    )
    choice = loop.choice(matrix, declared)
    assert (choice.amount, choice.source) == (750, "declared"), "web's 2x does not apply to what is declared"
    ignored = loop.choice(matrix, bad)
    assert ignored.source == "prior" and ignored.problem is not None and "lots" in ignored.problem
    counted = telemetry.registry.get_sample_value(
        "ksched_objects_rejected_total", {"kind": "Pod", "reason": "invalid_expected_usage"}
    )
    assert counted == 1.0


def test_explain_says_which_estimate_a_pod_got(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster_file = tmp_path / "cluster.yaml"
    web = pod("web", cpu="1")
    web["metadata"]["annotations"] = {"ksched.io/expected-cpu": "750m"}
    cluster_file.write_text(yaml.safe_dump_all([node("n0", cpu="4"), web, pod("api", cpu="1")]))
    cfg = tmp_path / "config.yaml"
    metric = {"name": "cpu", "source": "prometheus", "query": "q[1m]", "estimate": {"resource": "cpu"}}
    cfg.write_text(yaml.safe_dump({**CONFIG, "prometheus": {"url": "http://p:9090"}, "metrics": [metric]}))
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"n0": {"cpu": 0.1}}))
    base = ["explain", str(cluster_file), "--config", str(cfg), "--metrics", str(values)]
    assert main([*base[:2], "default/web", *base[2:]]) == 0
    assert "estimate: cpu: 750m cpu (declared" in capsys.readouterr().out
    assert main([*base[:2], "default/api", *base[2:]]) == 0
    assert "estimate: cpu: 1000m cpu (configured" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("estimate", "error"),
    [
        ({"warmup": "2h"}, r"estimate.warmup: 7200s is not in 0..3600s"),
        ({"prior": "p200"}, r"estimate.prior: 'p200' is not allowed"),
        ({"prior": 0}, r"estimate.prior: 0: a ratio must be in"),
        ({"prior": [1]}, r"estimate.prior: \[1\] is not allowed"),
        ({"workloadLabel": "not a label"}, r"estimate.workloadLabel: 'not a label' is not a label key"),
        ({"learn": False, "prior": "p90"}, r"estimate.prior: needs learn: true"),
        ({"initialSpread": -0.1}, r"estimate.initialSpread: -0.1 is not in 0..10"),
        ({"initialSpread": "wide"}, r"estimate.initialSpread: 'wide' is not a finite number"),
        ({"learn": False, "initialSpread": 1}, r"estimate.initialSpread: needs learn: true"),
        ({"scrapeInterval": 0}, r"estimate.scrapeInterval: 0s is not in \(0, 600s\]"),
        ({"scrapeInterval": "20m"}, r"estimate.scrapeInterval: 1200s is not in \(0, 600s\]"),
        ({"learn": False, "scrapeInterval": "15s"}, r"estimate.scrapeInterval: needs learn: true"),
    ],
)
def test_bad_workload_settings_name_the_key(estimate: dict[str, Any], error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        parse_metric(estimate, query="q")


def test_workload_settings_are_read() -> None:
    raw = {
        **CONFIG,
        "prometheus": {"url": "http://prometheus:9090"},
        "metrics": [
            {
                "name": "cpu",
                "source": "prometheus",
                "query": "q",
                "estimate": {
                    "resource": "cpu",
                    "podQuery": POD_QUERY,
                    "learn": True,
                    "workloadLabel": "app.kubernetes.io/name",
                    "warmup": "5m",
                    "scrapeInterval": "15s",
                    "prior": "p75",
                    "initialSpread": 0.5,
                },
            }
        ],
    }
    (m,) = parse_config(raw).metrics
    assert m.estimate is not None
    e = m.estimate
    assert (e.workload_label, e.warmup_s, e.scrape_interval_s, e.prior, e.initial_spread) == (
        "app.kubernetes.io/name",
        300.0,
        15.0,
        ("quantile", 0.75),
        0.5,
    )


def settled(
    name: str, owner: str, bound_at: float, node_name: str = "n0", cpu: str = "100m"
) -> dict[str, Any]:
    """A pod of Deployment ``owner`` bound at ``bound_at``, long before the recent window."""
    p = owned(name, node_name, cpu=cpu, owner=("Deployment", owner))
    p["status"]["conditions"][0]["lastTransitionTime"] = rfc3339(bound_at)
    return p


def test_a_workload_running_since_before_ksched_started_counts_at_its_own_replicas() -> None:
    """Replicas bound a day ago (before this ksched started, or over an hour ago) are never
    recent, yet the pod usage sample measures them: they teach their workload, so a herd of it
    counts at what they use rather than at the prior; pods of no workload teach nothing."""
    loop = Loop(learned_metric())
    day_ago = T0 - 86400
    loop.add(*(settled(f"web-{i}", "web", day_ago) for i in range(4)))
    loop.add(*(settled(f"batch-{i}", "batch", day_ago) for i in range(4)))
    bare = owned("bare", "n0", owner=None)
    bare["status"]["conditions"][0]["lastTransitionTime"] = rfc3339(day_ago)
    loop.add(bare)
    assert not loop.state.recent.pods, "nothing bound within the horizon"
    usage = {**{f"web-{i}": 50.0 for i in range(4)}, **{f"batch-{i}": 200.0 for i in range(4)}, "bare": 900.0}
    matrix = loop.sample(usage)
    calibration = matrix.metrics[0].estimate.calibration
    assert set(calibration.workloads) == {"default/Deployment/web", "default/Deployment/batch"}
    assert calibration.workloads["default/Deployment/web"].ratio_pods == 4
    mean = (0.5 + 2.0) / 2
    herd = loop.choice(matrix, owned("web-herd-0", "", cpu="1", owner=("Deployment", "web")))
    assert herd.source == "workload"
    assert herd.amount == round(1000 * weighed(0.5, 4, mean))
    assert loop.choice(matrix, owned("bare-2", "", cpu="1", owner=None)).source == "configured"


def test_settled_pods_stand_in_for_the_cluster_wide_figures_until_recent_pods_teach_them() -> None:
    """A pod of no workload counts at the cluster-wide figures, which recent pods teach; where
    too few recent ones are measured (a ksched just started in a steady cluster), the settled
    pods' stand in: a BestEffort pod counts at what the running BestEffort pods use, not at
    the configured 100m."""
    loop = Loop(learned_metric())
    day_ago = T0 - 86400
    pods = []
    for i in range(LEARN_MIN_PODS + 2):
        p = owned(f"be-{i}", "n0", cpu=None, owner=None)
        p["status"]["conditions"][0]["lastTransitionTime"] = rfc3339(day_ago)
        pods.append(p)
    loop.add(*pods)
    matrix = loop.sample({f"be-{i}": 250.0 + 100 * (i % 2) for i in range(len(pods))})
    calibration = matrix.metrics[0].estimate.calibration
    assert (calibration.best_effort, calibration.best_effort_pods) == (pytest.approx(300.0), len(pods))
    bare = loop.choice(matrix, owned("be-new", "", cpu=None, owner=None))
    assert (bare.source, bare.amount) == ("cluster-wide", 300)
    status = learned_json("cpu", calibration)
    assert (status["bestEffortFrom"], status["ratioFrom"]) == ("settled", None), "/status says who taught it"


def test_recent_pods_teach_the_cluster_wide_ratio_once_enough_are_measured() -> None:
    """The settled pods' ratio stands in only until ten recent pods are measured; a pod being
    deleted teaches nothing."""
    loop = Loop(learned_metric())
    day_ago = T0 - 86400
    old = []
    for i in range(LEARN_MIN_PODS):
        p = owned(f"old-{i}", "n0", owner=None)
        p["status"]["conditions"][0]["lastTransitionTime"] = rfc3339(day_ago)
        old.append(p)
    leaving = owned("leaving", "n0", owner=None)
    leaving["status"]["conditions"][0]["lastTransitionTime"] = rfc3339(day_ago)
    leaving["metadata"]["deletionTimestamp"] = rfc3339(T0)
    loop.add(*old, leaving)
    usage = {**{f"old-{i}": 300.0 for i in range(LEARN_MIN_PODS)}, "leaving": 5000.0}
    calibration = loop.sample(usage).metrics[0].estimate.calibration
    assert (calibration.ratio, calibration.ratio_pods) == (pytest.approx(3.0), LEARN_MIN_PODS), (
        "not 'leaving'"
    )
    new = [owned(f"new-{i}", "n1", owner=None) for i in range(LEARN_MIN_PODS)]
    loop.add(*new)
    calibration = (
        loop.sample({**usage, **{f"new-{i}": 50.0 for i in range(LEARN_MIN_PODS)}}, times=SETTLE)
        .metrics[0]
        .estimate.calibration
    )
    assert calibration.ratio == pytest.approx(0.5), "the recent pods' own figure wins"
    assert learned_json("cpu", calibration)["ratioFrom"] == "recent"


def test_a_kind_no_settled_pod_teaches_any_more_stops_standing_in_after_an_hour() -> None:
    estimate = learned_metric().estimate
    assert estimate is not None
    be = {f"default/be-{i}": owned(f"be-{i}", "n0", cpu=None, owner=None) for i in range(LEARN_MIN_PODS)}
    web = {f"default/web-{i}": owned(f"web-{i}", "n0", owner=None) for i in range(LEARN_MIN_PODS)}
    pods = be | web

    def lookup(key: str) -> Any:
        p = pods.get(key)
        return None if p is None else (p["metadata"]["uid"], T0 - 86400, p, pod_requests(p))

    settled, history = SettledPods(per_pass=None), WorkloadHistory(T0)
    settled.teach(T0, {k: 200.0 for k in pods}, lookup, (), 0.0, estimate, history)
    both = settled.stand_in(T0, Calibration())
    assert (both.ratio, both.best_effort) == (pytest.approx(2.0), pytest.approx(200.0))
    half = T0 + SETTLED_TTL_S / 2
    settled.teach(
        half, dict.fromkeys(web, 100.0), lookup, (), 0.0, estimate, history
    )  # the BestEffort pods left
    later = settled.stand_in(T0 + SETTLED_TTL_S + 1, Calibration())
    assert (later.ratio, later.best_effort) == (pytest.approx(1.0), None)


def test_settled_pods_push_no_workload_out_of_a_full_memory() -> None:
    history = WorkloadHistory(T0)
    for w in range(WORKLOAD_MEMORY):
        history.observe(T0, f"ns/Deployment/w{w}", f"uid-{w}", FROM_REQUEST, 100.0, 50.0)
    history.observe(T0, "ns/Deployment/new", "uid-new", FROM_REQUEST, 100.0, 50.0, displace=False)
    history.observe(T0, "ns/Deployment/w0", "uid-w0-b", FROM_REQUEST, 100.0, 150.0, displace=False)
    figures = history.figures(T0)
    assert "ns/Deployment/new" not in figures and len(figures) == WORKLOAD_MEMORY
    assert figures["ns/Deployment/w0"].ratio_pods == 2, "a remembered workload is still taught"


def test_settled_pods_teach_a_share_a_pass_and_keep_their_workload_known() -> None:
    loop = Loop(learned_metric())
    loop.state.recent.settled_per_pass(3)
    loop.source.node_at = None  # sampled at each refresh: fresh an hour on
    loop.add(*(settled(f"web-{i}", "web", T0 - 86400) for i in range(6)))
    usage = {f"web-{i}": 50.0 for i in range(6)}

    def taught() -> int:
        workloads = loop.sample(usage).metrics[0].estimate.calibration.workloads
        return int(workloads["default/Deployment/web"].ratio_pods)

    assert taught() == 3
    assert taught() == 3, "the next pass is not due yet"
    loop.clock.now += SETTLED_EVERY_S
    assert taught() == 6
    for _ in range(round(WORKLOAD_TTL_S / SETTLED_EVERY_S) + 1):
        loop.clock.now += SETTLED_EVERY_S
        assert taught() == 6, "its replicas still run: taught again, never forgotten"


def test_a_workload_getting_new_pods_is_read_again_before_a_pass_reaches_it() -> None:
    """A scale-up from idle: a Deployment's replicas were taught while idle, then got busy (which
    is why it scales). In a large cluster a pass reaches them again only after every other pod;
    a pod of it waiting to be placed has them read at once, so the new replicas count at what
    the busy ones use now, not at the idle figure."""
    loop = Loop(learned_metric())
    loop.state.recent.settled_per_pass(3)
    loop.source.node_at = None  # sampled at each refresh: fresh an hour on
    web = [settled(f"web-{i}", "web", T0 - 86400) for i in range(3)]
    others = [settled(f"batch-{i}", "batch", T0 - 86400) for i in range(30)]
    loop.add(*web, *others)
    idle = {**{f"web-{i}": 10.0 for i in range(3)}, **{f"batch-{i}": 100.0 for i in range(30)}}

    def web_figure(usage: dict[str, float]) -> Any:
        return loop.sample(usage).metrics[0].estimate.calibration.workloads["default/Deployment/web"]

    for _ in range(11):  # a round through the 33 settled pods
        loop.sample(idle)
        loop.clock.now += SETTLED_EVERY_S
    assert web_figure(idle).ratio_pods == 3
    busy = {**idle, **{f"web-{i}": 150.0 for i in range(3)}}
    assert web_figure(busy).ratio < 0.3, "no pass is due: the idle figure (0.1) stands"
    herd = owned("web-new-0", "", owner=("Deployment", "web"))
    herd["spec"].pop("nodeName", None)
    herd["status"] = {"phase": "Pending"}
    loop.add(herd)
    figure = web_figure(busy)
    assert (figure.ratio > 1.2, figure.ratio_pods) == (True, 3), "read again at once (1.5)"


def test_revisits_past_what_one_build_reads_are_read_at_the_next() -> None:
    """Thirty workloads get new pods at once (a node drained): their 150 remembered replicas
    are read again 100 a build, none dropped, however long it takes a pass to come due."""
    estimate = learned_metric().estimate
    assert estimate is not None
    pods = {
        f"default/w{w}-{i}": owned(f"w{w}-{i}", "n0", owner=("Deployment", f"w{w}"))
        for w in range(30)
        for i in range(5)
    }

    def lookup(key: str) -> Any:
        p = pods.get(key)
        return None if p is None else (p["metadata"]["uid"], T0 - 86400, p, pod_requests(p))

    settled, history = SettledPods(per_pass=100), WorkloadHistory(T0)
    settled.teach(T0, {}, lookup, (), 0.0, estimate, history)  # a pass ran: the next is not due
    settled.revisit(pods)
    measured = dict.fromkeys(pods, 50.0)
    settled.teach(T0 + 1, measured, lookup, (), 0.0, estimate, history)
    assert len(history.figures(T0 + 1)) == 20
    settled.teach(T0 + 2, measured, lookup, (), 0.0, estimate, history)
    assert len(history.figures(T0 + 2)) == 30


def test_a_short_jobs_runs_teach_its_next_runs_though_none_lived_to_settle() -> None:
    """A CronJob whose runs last two scrapes: no run's usage is ever stable, yet each that
    succeeds speaks for the next ones at the most it measured, where nothing was learned of
    them before; a run that failed teaches nothing."""
    loop = Loop(learned_metric())

    def run(name: str, used: float, phase: str) -> None:
        p = owned(name, "n0", owner=("Job", f"{name}-29031840"))
        p["metadata"]["ownerReferences"][0]["name"] = name.rsplit("-", 1)[0] + "-29031840"
        loop.add(p)
        loop.sample({name: used})
        loop.sample({name: used * 0.7})  # winding down: the most it used speaks, not the last
        done = {**p, "status": {**p["status"], "phase": phase}}
        loop.state.on_pod("MODIFIED", done, p)
        loop.state.sync()

    run("backup-a", 300.0, "Succeeded")
    run("report-a", 300.0, "Failed")
    matrix = loop.sample({})
    workloads = matrix.metrics[0].estimate.calibration.workloads
    assert "default/CronJob/report" not in workloads, "a failed run teaches nothing"
    nxt = loop.choice(matrix, owned("backup-b", "", owner=("Job", "backup-29031900")))
    assert nxt.source == "workload"
    assert workloads["default/CronJob/backup"].ratio == pytest.approx(3.0)


def test_the_dry_run_learns_from_the_settled_pods_all_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ksched rebalance --dry-run`` builds the live loop's load model from one listing: its
    settled pods teach their workloads in one pass, not the live loop's share a pass."""
    from ksched.commands.rebalance import _load_model
    from ksched.loop.metrics import recent_pods

    monkeypatch.setattr(recent_pods, "SettledPods", partial(SettledPods, 2))
    loop = Loop(learned_metric())
    pods = [settled(f"web-{i}", "web", T0 - 86400) for i in range(5)]
    loop.add(*pods)
    listing = SimpleNamespace(existing=pods)
    engine = SimpleNamespace(profile=SimpleNamespace(scheduler_name="ksched"))
    model = _load_model(loop.store, loop.state.snapshot(), listing, engine, loop.clock.now + 2)  # type: ignore[arg-type]
    loop.clock.now += 2
    loop.source.pods = {f"default/web-{i}": 50.0 for i in range(len(pods))}
    loop.store.refresh(loop.m)
    loop.store.refresh_pods(loop.m)
    workloads = model.scheduling(loop.state.snapshot()).metrics[0].estimate.calibration.workloads
    assert workloads["default/Deployment/web"].ratio_pods == 5
    live = loop.sample({f"web-{i}": 50.0 for i in range(5)}).metrics[0].estimate.calibration.workloads
    assert live["default/Deployment/web"].ratio_pods == 2, "the live loop: two a pass here"


def test_a_workload_is_forgotten_an_hour_after_it_last_taught() -> None:
    history = WorkloadHistory(T0)
    for i in range(LEARN_MIN_PODS):
        history.observe(T0, "default/Deployment/web", f"uid-{i}", FROM_REQUEST, 100.0, 50.0)
    assert history.figures(T0 + WORKLOAD_TTL_S - 1)["default/Deployment/web"].ratio == pytest.approx(0.5)
    assert history.figures(T0 + WORKLOAD_TTL_S + 1) == {}


def test_a_workload_let_go_to_make_room_takes_its_figures_and_warmup_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(workloads, "WORKLOAD_MEMORY", 3)
    history, fresh = WorkloadHistory(T0), WorkloadHistory(T0)
    for n in range(4):
        for h in (history, fresh) if n else (history,):
            h.observe(T0 + n, f"default/Deployment/w{n}", f"uid-{n}", FROM_REQUEST, 100.0, 10.0 * (n + 1))
            h.warmed(T0 + n, f"default/Deployment/w{n}", 30.0 + n)
        assert history.figures(T0 + n) is history.figures(T0 + n), "unchanged: the same mapping"
    assert list(history.figures(T0 + 4)) == [f"default/Deployment/w{n}" for n in (1, 2, 3)]
    assert history.figures(T0 + 4) == fresh.figures(T0 + 4), "as a history that never knew w0"
    assert dict(history.warmups(T0 + 4)) == {f"default/Deployment/w{n}": 30.0 + n for n in (1, 2, 3)}
    assert history.warmups(T0 + 3 + WORKLOAD_TTL_S + 1) == {}, "and an hour after they last taught, all"


def test_a_workload_forgotten_and_taught_again_comes_last_in_the_figures() -> None:
    """The figures list the workloads as the cache holds them, as a rebuild over it would: one
    let go and taught again is last, even where it was marked changed before it went."""
    history = WorkloadHistory(T0)
    history.observe(T0, "w", "uid-w", FROM_REQUEST, 100.0, 50.0)
    history.observe(T0 + 100, "x", "uid-x", FROM_REQUEST, 100.0, 60.0)
    assert list(history.figures(T0 + 100)) == ["w", "x"]
    history.departed("w", "uid-w")  # marks it changed, and renews nothing
    later = T0 + WORKLOAD_TTL_S + 1  # w's hour is up, not x's
    history.observe(later, "y", "uid-y", FROM_REQUEST, 100.0, 70.0)
    history.observe(later, "w", "uid-w2", FROM_REQUEST, 100.0, 80.0)
    assert list(history.figures(later)) == ["x", "y", "w"]
    assert history.figures(later)["w"].ratio_pods == 1, "taught anew: only its new pod"


def test_a_workloads_weighed_figures_keep_everything_else_it_taught() -> None:
    own = WorkloadCalibration(2.0, 0.5, 3, 300.0, 40.0, 2, warmup_s=45.0, ratio_request=250.0)
    weighed = across.credible({"default/Deployment/web": own}, 1.0, 100.0)["default/Deployment/web"]
    changed = {"ratio", "ratio_sd", "best_effort", "best_effort_sd"}
    for f in dataclasses.fields(WorkloadCalibration):
        if f.name not in changed:
            assert getattr(weighed, f.name) == getattr(own, f.name), f.name
    assert 1.0 < weighed.ratio < 2.0 and 100.0 < weighed.best_effort < 300.0, (
        "between its own and the collective"
    )


def test_status_tells_how_one_pod_counts_recent_or_pending() -> None:
    loop = Loop(learned_metric())
    teach(loop, {"web": 0.5, "batch": 2.0})
    settled = loop.model.estimate_of("default/web-0", None)
    assert settled["state"] == "recent"
    assert (settled["estimates"][0]["source"], settled["estimates"][0]["counts"]) == ("measured", 50.0)
    judge(loop, rising=True)
    loop.add(owned("java", "n1", cpu="1", owner=("Deployment", "java")))
    loop.sample({"java": 200.0})
    [ramping] = loop.model.estimate_of("default/java", None)["estimates"]
    assert (ramping["source"], ramping["measured"], ramping["resource"]) == ("ramping", 200.0, "cpu")
    assert ramping["counts"] > 200.0, "a pod showed a rise before: a share of its estimate's excess over 200m"
    pending = owned("web-next", "", cpu="1", owner=("Deployment", "web"))
    [choice] = loop.model.estimate_of("default/web-next", pending)["estimates"]
    assert (choice["source"], choice["workload"], choice["pods"]) == (
        "workload",
        "default/Deployment/web",
        LEARN_MIN_PODS,
    )
    assert choice["counts"] == loop.choice(loop.sample({}), pending).amount, "what placing it now counts"
    gone = loop.model.estimate_of("default/long-gone", None)
    assert gone == {"pod": "default/long-gone", "state": "not counted", "estimates": []}
    loop.state.recent.drop("default/java")
    assert loop.model.estimate_of("default/java", None)["state"] == "not counted", (
        "deleted: no longer counted"
    )
    again = owned("web-0", "", cpu="1", owner=("Deployment", "web"))
    assert loop.model.estimate_of("default/web-0", again)["state"] == "pending", "a new pod of that name"
    broken = owned("bad", "", cpu=None)
    broken["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots"}}
    [problem] = loop.model.estimate_of("default/bad", broken)["estimates"]
    assert problem["metric"] is None and "lots" in problem["problem"]


def test_before_the_scrape_cadence_is_known_a_repeated_value_is_a_sample_only_after_the_scrape_interval() -> (
    None
):
    """A fresh ksched does not know how often Prometheus scrapes until a pod's value changed
    twice; the estimate's ``scrapeInterval`` (by default Prometheus's 1m) stands in. Before,
    every read was a new sample until some value changed, and the pods measured in a fresh
    ksched's first scrape interval settled on their first scrape read three times."""
    series = PodSeries()
    for at in (0.0, 5.0, 10.0, 15.0, 60.0, 85.0):
        ramping, _, fresh = series.ramping("default/java", "u1", at, 200.0, at, None, 180.0)
        assert ramping, f"at {at:g}s: 200m read again is still its first sample"
        assert fresh == (at == 0.0)
    assert series.cadence(85.0) is None
    ramping, _, fresh = series.ramping("default/java", "u1", 90.0, 200.0, 90.0, None, 180.0)
    assert ramping and fresh, "1.5 scrape intervals on, the same value is a second sample"
    # A pod that climbs while the others read the same scrape again: the climb counts, the
    # repeats do not.
    series.ramping("default/web", "u2", 0.0, 100.0, 0.0, None, 180.0)
    for at, value in ((5.0, 100.0), (10.0, 100.0), (15.0, 130.0), (20.0, 130.0), (30.0, 170.0)):
        ramping, _, _ = series.ramping("default/web", "u2", at, value, at, None, 180.0)
        assert ramping, f"at {at:g}s ({value:g}m) it still climbs"
    assert series.cadence(30.0) == 15.0, "learned from its two changes"
    scraped = PodSeries(scrape_interval_s=1.0)  # told: every read two seconds apart is a sample
    results = [scraped.ramping("default/flat", "u3", at, 50.0, at, None, 180.0)[0] for at in (0.0, 2.0, 4.0)]
    assert results == [True, True, False]


def test_a_fresh_ksched_with_the_default_scrape_interval_holds_a_pod_read_the_same_at_its_estimate() -> None:
    """Through the whole loop, with the configuration's default ``scrapeInterval`` (1m): a pod
    whose first scrape a fresh ksched reads every 2 s for a minute is not taken as settled on
    it; it counts at its request until 1.5 minutes give it a second sample."""
    loop = Loop(learned_metric(scrape_interval_s=EstimateConfig.scrape_interval_s, warmup_s=600.0))
    loop.add(owned("java", "n1", cpu="1"))
    for _ in range(30):
        matrix = loop.sample({"java": 200.0})
        assert loop.store.learned()["cpu"]["ramping"] == ["default/java"], "one scrape, read again"
        assert matrix.values[1, 0] == pytest.approx(NODE_VALUE + 1.0 / 4), "its 1 CPU, not its 200m"
    loop.source.node_at = None  # the node sample stays fresh (five seconds old)
    loop.sample({"java": 200.0}, times=59)
    assert loop.store.learned()["cpu"]["ramping"] == ["default/java"], "its second sample at 90 s"
    loop.sample({"java": 200.0}, times=2)
    assert loop.store.learned()["cpu"]["ramping"] == [], "its third sample at 180 s: stable"


def test_a_pod_adopted_after_its_bind_teaches_and_counts_under_its_new_workload() -> None:
    """A ReplicaSet that adopts pods already bound (created before it, or orphaned and taken
    back), or a workload label set after the bind, puts them under that workload: they teach
    it, and count at its figures, from the update on, not only once they have settled."""
    loop = Loop(learned_metric())
    bare = [owned(f"web-{i}", "n0", owner=None) for i in range(3)]
    loop.add(*bare)
    adopted = [owned(f"web-{i}", "n0", owner=("ReplicaSet", "web")) for i in range(3)]
    for p in adopted:
        loop.state.on_pod("MODIFIED", p, None)
    loop.state.sync()
    matrix = loop.sample({f"web-{i}": 300.0 for i in range(3)}, times=SETTLE)
    workloads = matrix.metrics[0].estimate.calibration.workloads
    assert workloads["default/ReplicaSet/web"].ratio_pods == 3
    herd = loop.choice(matrix, owned("web-new", "", owner=("ReplicaSet", "web")))
    assert herd.source == "workload" and herd.amount > 250
