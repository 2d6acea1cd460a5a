"""Load estimate v2 in the loop: pods bound recently, by any scheduler, count on their node's
metric until the metric's window covers them; their measured usage replaces the guess."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import orjson
import pytest

from ksched import _core
from ksched.config import EstimateConfig, MetricConfig, parse_config
from ksched.config.metrics import parse_metric, query_window_s
from ksched.engine.load import before_event
from ksched.engine.pods import pod_requests
from ksched.errors import ConfigError
from ksched.loop.metrics.load_model import LoadModel
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.metrics.recent_pods import bind_time
from ksched.loop.metrics.samples import Sample
from ksched.loop.mirror.slim import slim_node, slim_pod
from ksched.loop.mirror.state import ClusterState
from tests.conftest import node, pod

T0 = 1_800_000_000.0  # a whole second, so API times (to the second) read back exactly
WINDOW = 300.0  # rate(...[5m])
QUERY = "sum by (node) (rate(node_cpu_usage_seconds_total[5m])) / on (node) cpu_allocatable"


@dataclass
class Clock:
    now: float = T0

    def __call__(self) -> float:
        return self.now


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def bound(name: str, node_name: str, at: float | None, cpu: str = "1", **extra: Any) -> dict[str, Any]:
    """A pod some scheduler bound to ``node_name`` at ``at`` (its PodScheduled condition)."""
    p = pod(name, cpu=cpu, node_name=node_name, scheduler="default-scheduler", **extra)
    p["metadata"]["uid"] = f"uid-{name}"
    p["metadata"]["creationTimestamp"] = rfc3339(T0 - 3600)
    if at is not None:
        p["status"] = {
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(at)}],
        }
    return slim_pod(p)


def metric(**estimate: Any) -> MetricConfig:
    return MetricConfig(
        name="cpu", source="prometheus", query=QUERY, estimate=EstimateConfig(resource="cpu", **estimate)
    )


def cluster(m: MetricConfig, clock: Clock) -> ClusterState:
    """Nodes n0 and n1, 4 CPUs each."""
    state = ClusterState((m,), clock)
    for n in ("n0", "n1"):
        state.on_node("ADDED", slim_node(node(n, cpu="4")), None)
    state.sync()
    return state


def estimate(state: ClusterState, m: MetricConfig, sampled_at: float, **kw: Any) -> list[float]:
    column = np.zeros(2)
    state.recent.add_to(state.snapshot(), m, sampled_at, column, **kw)
    return [round(float(v), 6) for v in column]


@pytest.mark.parametrize(
    ("case", "bound_at", "sampled_at", "window", "want"),
    [
        ("bound after the sample: counted fully", T0 + 10, T0, None, 0.25),
        ("bound at the sample: counted fully", T0, T0, None, 0.25),
        ("a fifth of the window before the sample: 4/5", T0 - 60, T0, None, 0.2),
        ("half the window before: half", T0 - 150, T0, None, 0.125),
        ("the whole window before: not at all", T0 - 300, T0, None, 0.0),
        ("a 2m window set explicitly: half after 60 s", T0 - 60, T0, 120.0, 0.125),
        ("no window (a gauge), bound before: not counted", T0 - 1, T0, 0.0, 0.0),
        ("no window, bound after: counted fully", T0 + 1, T0, 0.0, 0.25),
    ],
)
def test_a_pod_fades_out_of_the_estimate_over_the_window(
    case: str, bound_at: float, sampled_at: float, window: float | None, want: float
) -> None:
    m = metric() if window is None else metric(window_s=window)
    clock = Clock(max(bound_at, sampled_at))
    state = cluster(m, clock)
    state.on_pod("ADDED", bound("web", "n0", bound_at), None)
    state.sync()
    # The condition's time is to the second: the pod counts from the end of that second.
    got = estimate(state, m, sampled_at + (1 if bound_at < sampled_at else 0))
    assert got == [pytest.approx(want, abs=1 / WINDOW), 0.0], case


def test_pods_bound_by_any_scheduler_count_and_leave_when_deleted() -> None:
    m = metric()
    clock = Clock(T0 + 30)
    state = cluster(m, clock)
    state.on_pod("ADDED", bound("other", "n0", T0 + 5), None)  # default-scheduler's
    state.assume(
        "default/mine", "uid-mine", "n1", pod_requests(pod("mine", cpu="2")), (), pod=pod("mine", cpu="2")
    )
    state.sync()
    assert estimate(state, m, T0) == [0.25, 0.5], "1 of 4 CPUs on n0, 2 of 4 on n1"
    state.on_pod("DELETED", bound("other", "n0", T0 + 5), None)
    state.sync()
    assert estimate(state, m, T0) == [0.0, 0.5], "a deleted pod adds nothing"
    state.forget("default/mine", "uid-mine")
    state.sync()
    assert estimate(state, m, T0) == [0.0, 0.0], "nor does one whose bind failed"


def test_a_pod_created_bound_counts_from_its_creation() -> None:
    p = bound("static", "n0", None)
    p["metadata"]["creationTimestamp"] = rfc3339(T0)
    assert bind_time(p, now=T0 + 100) == T0 + 1
    assert bind_time(bound("web", "n0", T0), now=T0 + 0.5) == T0 + 0.5, "never later than seen"


def test_only_pods_bound_within_the_horizon_are_kept() -> None:
    # window 300 s + maxAge 120 s: a pod bound 421 s ago is in no usable sample's estimate.
    m = metric()
    clock = Clock(T0)
    state = cluster(m, clock)
    state.on_pod("ADDED", bound("old", "n0", T0 - 3600), None)  # listed at start, bound long ago
    state.on_pod("ADDED", bound("new", "n0", T0 - 10), None)
    state.sync()
    assert set(state.recent.pods) == {"default/new"}
    clock.now = T0 + 420
    assert estimate(state, m, clock.now - 120) == [0.0, 0.0]
    assert len(state.recent) == 0, "pruned once past window + maxAge"


def test_the_estimate_reads_limits_and_counts_best_effort_pods() -> None:
    m = metric()
    clock = Clock(T0 + 5)
    state = cluster(m, clock)
    limited = pod("limited", cpu="500m", node_name="n0")
    limited["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "2"}
    limited["metadata"]["uid"] = "uid-limited"
    best_effort = pod("best-effort", cpu=None, memory=None, node_name="n1")
    best_effort["metadata"]["uid"] = "uid-be"
    for p in (limited, best_effort):
        p["status"] = {
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(T0)}]
        }
        state.on_pod("ADDED", slim_pod(p), None)
    state.sync()
    assert estimate(state, m, T0 - 1) == [0.5, 0.025], "its 2-CPU limit; BestEffort's default 100m"


def test_a_legacy_estimate_is_todays_herd_estimate() -> None:
    """herdEstimate: only ksched's binds, requests times factor, until the sample."""
    m = MetricConfig(
        name="cpu",
        source="prometheus",
        query=QUERY,
        estimate=EstimateConfig(resource="cpu", factor=2.0, legacy=True),
    )
    clock = Clock(T0)
    state = cluster(m, clock)
    limited = pod("a", cpu="1")
    limited["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "3"}
    limited["metadata"]["uid"] = "uid-a"
    state.assume("default/a", "uid-a", "n0", pod_requests(limited), (), pod=limited)
    state.on_pod("ADDED", bound("other", "n1", T0), None)
    state.sync()
    before = T0 - 1
    assert estimate(state, m, before) == [0.5, 0.0], "request x factor; another scheduler's pod not counted"
    assert estimate(state, m, T0) == [0.0, 0.0], "not counted from the sample on: no fading"
    state.on_pod(
        "ADDED", {**slim_pod(limited), "spec": {**slim_pod(limited)["spec"], "nodeName": "n0"}}, None
    )
    state.sync()
    assert estimate(state, m, before) == [0.5, 0.0], "the watch confirming the bind changes nothing"


class PodUsageSource:
    """A Prometheus answering the node query and the pod usage query from tables."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.pods: dict[str, float] = {}

    def query(self, m: MetricConfig, resolve: object) -> Sample:
        return Sample({"n0": 0.1, "n1": 0.1}, self.clock.now - 5)

    def pod_usage(self, m: MetricConfig) -> Sample:
        return Sample(dict(self.pods), self.clock.now - 5)


def test_a_pods_measured_usage_replaces_the_guess_while_fresh() -> None:
    m = metric(pod_query="sum by (namespace, pod) (rate(container_cpu_usage_seconds_total[1m]))")
    clock = Clock(T0)
    state = cluster(m, clock)
    source = PodUsageSource(clock)
    nodes = list(state.nodes.values())
    store = MetricStore([m], source, None, lambda: nodes, clock=clock)  # type: ignore[arg-type]
    state.on_pod("ADDED", bound("web", "n0", T0 - 2), None)
    state.on_pod("ADDED", bound("api", "n1", T0 - 2), None)
    state.sync()
    store.refresh(m)
    source.pods = {"default/web": 3000.0}  # 3 cores, in millicores
    store.refresh_pods(m)
    values = LoadModel(store, state.recent).scheduling(state.snapshot()).values[:, 0]
    assert values.tolist() == [pytest.approx(0.1 + 0.75), pytest.approx(0.1 + 0.25)], (
        "web measured, api guessed"
    )
    clock.now += m.max_age_s + 1
    store.refresh(m)
    values = LoadModel(store, state.recent).scheduling(state.snapshot()).values[:, 0]
    assert values[0] < 0.1 + 0.25, "a stale measurement is not used: web counts by its 1-CPU request again"


def test_a_pod_usage_answer_is_read_by_namespace_and_pod_in_millicores() -> None:
    body = orjson.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [
                    {"metric": {"namespace": "default", "pod": "web"}, "value": [T0, "0.25"]},
                    {"metric": {"namespace": "prod", "pod": "web"}, "value": [T0, "1.5"]},
                    {"metric": {"pod": "no-namespace"}, "value": [T0, "1"]},
                ],
            },
        }
    )
    pods, values, _, _ = _core.decode_instant_vector(body, "pod")
    namespaces, _, _, _ = _core.decode_instant_vector(body, "namespace")
    assert list(zip(namespaces, pods, values, strict=True)) == [
        ("default", "web", 0.25),
        ("prod", "web", 1.5),
        ("", "no-namespace", 1.0),
    ], "both passes give the series in one order, so they pair up"


def test_the_pod_projection_keeps_the_bind_time() -> None:
    p = bound("web", "n0", T0)
    raw = pod("web", node_name="n0")
    raw["status"] = {
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": rfc3339(T0),
            }
        ]
    }
    _, _, decoded, _ = _core.decode_pod_event(orjson.dumps({"type": "ADDED", "object": raw}))
    assert decoded == slim_pod(raw)
    assert (
        decoded["status"]["conditions"][0]["lastTransitionTime"]
        == p["status"]["conditions"][0]["lastTransitionTime"]
    )
    assert bind_time(decoded, now=T0 + 60) == T0 + 1


def test_an_annotation_metric_counts_pods_bound_since_its_oldest_fresh_value() -> None:
    m = MetricConfig(
        name="cpu",
        source="annotation",
        annotation="example.com/cpu",
        estimate=EstimateConfig(resource="cpu", window_s=60.0),
    )
    clock = Clock(T0)
    state = ClusterState((m,), clock)
    for n, value, at in (("n0", "0.1", T0 - 30), ("n1", "0.2", T0 - 10)):
        annotations = {"example.com/cpu": value, "example.com/cpu-timestamp": rfc3339(at)}
        state.on_node("ADDED", slim_node(node(n, cpu="4", annotations=annotations)), None)
    state.on_pod("ADDED", bound("web", "n0", T0 - 20), None)
    state.sync()
    store = MetricStore([m], None, None, lambda: list(state.nodes.values()), clock=clock)
    values = LoadModel(store, state.recent).scheduling(state.snapshot()).values[:, 0]
    # Bound after the oldest value (T0 - 30): its 1 CPU of 4 counts fully on n0.
    assert values.tolist() == [pytest.approx(0.1 + 0.25), pytest.approx(0.2)]


def test_a_pod_usage_query_on_an_annotation_metric_is_refused() -> None:
    raw = {
        "name": "cpu",
        "source": "annotation",
        "annotation": "example.com/cpu",
        "estimate": {"resource": "cpu", "podQuery": "sum by (namespace, pod) (x)"},
    }
    with pytest.raises(ConfigError, match=r"metrics\[0\]\.estimate\.podQuery: only for metrics read"):
        parse_metric(raw, "metrics[0]")


CONFIG = {"apiVersion": "ksched.io/v1alpha1", "kind": "KschedConfiguration"}


@pytest.mark.parametrize(
    ("metric", "error"),
    [
        (
            {"source": "prometheus", "query": "q", "estimate": {"resource": "cpu cores"}},
            r"metrics\[0\]\.estimate\.resource: 'cpu cores' is not a resource name",
        ),
        (
            {"source": "prometheus", "query": "q", "herdEstimate": {"resource": "/gpu"}},
            r"metrics\[0\]\.herdEstimate\.resource: '/gpu' is not a resource name",
        ),
        (
            {"source": "metrics-server", "resource": "cpu", "estimate": {"resource": "memory"}},
            r"metrics\[0\]\.estimate\.resource: 'memory' is not the metric's resource 'cpu'",
        ),
        (
            {"source": "prometheus", "query": "q", "estimate": {"resource": "cpu", "podQuery": "x"}},
            r"metrics\[0\]\.estimate\.podQuery: needs prometheus\.url",
        ),
    ],
)
def test_bad_estimates_name_the_key(metric: dict[str, Any], error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        parse_config({**CONFIG, "metrics": [{"name": "cpu", **metric}]})


def test_estimate_resources_and_their_defaults() -> None:
    metrics = [
        {"name": "ms", "source": "metrics-server", "resource": "memory", "estimate": {}},
        {"name": "gpu", "source": "prometheus", "query": "q", "estimate": {"resource": "example.com/gpu"}},
        {
            "name": "pods",
            "source": "prometheus",
            "query": "q",
            "estimate": {"resource": "cpu", "podQuery": "x"},
        },
    ]
    cfg = parse_config({**CONFIG, "metrics": metrics, "prometheus": {"url": "http://prometheus:9090"}})
    assert [m.estimate.resource for m in cfg.metrics if m.estimate] == ["memory", "example.com/gpu", "cpu"]


def test_an_estimate_without_a_window_is_warned_of_at_start(caplog: pytest.LogCaptureFixture) -> None:
    metrics = [
        MetricConfig(
            name="recorded", source="prometheus", query="node:cpu:ratio", estimate=EstimateConfig("cpu")
        ),
        metric(),  # a rate over 5m: its window
        MetricConfig(name="set", source="prometheus", query="r", estimate=EstimateConfig("cpu", window_s=60)),
        MetricConfig(
            name="legacy", source="prometheus", query="r", estimate=EstimateConfig("cpu", legacy=True)
        ),
    ]
    store = MetricStore(metrics, None, None)
    with caplog.at_level("WARNING"):
        store.start()
    store.stop()
    warned = [r.getMessage() for r in caplog.records if "estimate.window" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("metric recorded:")


@pytest.mark.parametrize(
    ("query", "want"),
    [
        ("rate(node_cpu_seconds_total[5m])", 300.0),
        ("x[1h30m]", 5400.0),
        # A subquery shows a new pod only once its own range and its inner range have passed.
        ("max_over_time(rate(x[1m])[5m:30s])", 360.0),
        ("avg_over_time((sum by (node) (rate(x[2m])))[10m:])", 720.0),
        # Side by side, the longest reach.
        ("rate(a[5m]) + rate(b[1m])", 300.0),
        ("max_over_time(rate(x[1m])[5m:]) + rate(y[10m])", 600.0),
        ("node_load1", 0.0),
    ],
)
def test_the_estimate_window_is_how_far_back_the_query_reaches(query: str, want: float) -> None:
    assert query_window_s(query) == want


def test_a_metric_that_falls_with_load_loses_the_recent_pods_share() -> None:
    """Free capacity (``prefer: higher``, ``filter.below``): a pod bound after the sample takes
    its share off its node's value instead of adding it."""
    m = MetricConfig(
        name="cpu",
        source="prometheus",
        query=QUERY,
        prefer="higher",
        below=0.2,
        estimate=EstimateConfig(resource="cpu"),
    )
    state = cluster(m, Clock(T0 + 10))
    state.on_pod("ADDED", bound("web", "n0", T0 + 10), None)
    state.sync()
    assert estimate(state, m, T0) == [-0.25, 0.0]


class Gappy:
    """A Prometheus whose node query answers from ``answers`` in turn: (values, sampled_at)."""

    def __init__(self, *answers: tuple[dict[str, float], float]) -> None:
        self.answers = list(answers)

    def query(self, m: MetricConfig, resolve: object) -> Sample:
        values, at = self.answers.pop(0)
        return Sample(values, at)


def test_a_node_left_out_of_one_sample_keeps_its_last_value_and_counts_every_pod_bound_since() -> None:
    """A missed scrape, or a recording rule late for some series, leaves a node out of one
    sample. Read as missing, it passed the filter and took a neutral score however many pods
    went there, since nothing adds load to a missing value: a batch of BestEffort pods all
    landed on one such node. Until maxAge has passed, its last value stands in, with the pods
    bound since that value was sampled counted in full."""
    m = metric()
    clock = Clock(T0)
    state = cluster(m, clock)
    nodes = list(state.nodes.values())
    source = Gappy(
        ({"n0": 0.1, "n1": 0.3}, T0 - 5),
        ({"n0": 0.1}, T0 + 10),
        ({}, T0 + 20),
        ({"n0": 0.1}, T0 + m.max_age_s),
        ({"n0": 0.1, "n1": 0.4}, T0 + m.max_age_s + 5),
    )
    store = MetricStore([m], source, None, lambda: nodes, clock=clock)  # type: ignore[arg-type]
    store.refresh(m)
    clock.now = T0 + 5
    state.on_pod("ADDED", bound("api", "n0", T0 + 5), None)
    state.on_pod("ADDED", bound("web", "n1", T0 + 5), None)
    state.sync()
    clock.now = T0 + 12
    store.refresh(m)
    model = LoadModel(store, state.recent)
    values = model.scheduling(state.snapshot()).values[:, 0]
    # n0's sample (T0 + 10) shows 5 s of api's window; n1's last one (T0 - 5) none of web.
    unseen = float(before_event(T0 + 5, T0 + 10, m.window_s()))
    assert 0 < unseen < 1
    assert values.tolist() == [pytest.approx(0.1 + 0.25 * unseen), pytest.approx(0.3 + 0.25)]
    observed = model.observed(state.snapshot()).values[:, 0]
    assert observed[0] == 0.1 and np.isnan(observed[1]), "what the metric reads: n1 has no value"
    # A sample that left out every node: each keeps its last value, the metric is not dropped.
    clock.now = T0 + 22
    store.refresh(m)
    matrix = model.scheduling(state.snapshot())
    assert matrix.degraded == [] and matrix.values[1, 0] == pytest.approx(0.3 + 0.25)
    assert model.observed(state.snapshot()).degraded == ["cpu: no value for any node"]
    # Once the last value is older than maxAge, the node is missing again.
    clock.now = T0 + m.max_age_s + 1
    store.refresh(m)
    values = model.scheduling(state.snapshot()).values[:, 0]
    assert values[0] > 0.1 and np.isnan(values[1])
    # Back in a sample, it reads that sample's value, which shows part of web by now.
    clock.now = T0 + m.max_age_s + 6
    store.refresh(m)
    unseen = float(before_event(T0 + 5, T0 + m.max_age_s + 5, m.window_s()))
    assert 0 < unseen < 1
    assert model.scheduling(state.snapshot()).values[1, 0] == pytest.approx(0.4 + 0.25 * unseen)
