"""Several series for one node (or one pod) in a Prometheus answer (issue 48): a query without
``sum by (node)`` returns one series per CPU, per device, per container. The refresh fails
with a message naming the metric and the node, so the metric is degraded rather than scored
by whichever series came last, unless the metric says how to combine them (``aggregate``)."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from ksched.config import EstimateConfig, MetricConfig, parse_config
from ksched.config.metrics import AGGREGATES
from ksched.engine.snapshot import build_snapshot
from ksched.errors import ConfigError
from ksched.loop.metrics.metric_sources import MetricStore, NodeResolver, SourceError
from ksched.loop.metrics.prometheus import COMBINE
from ksched.loop.mirror.slim import slim_node
from tests.conftest import node
from tests.unit.test_sources import answering, vector, with_address

HEAD = {"apiVersion": "ksched.io/v1alpha1", "kind": "KschedConfiguration"}
NODES = [with_address("n1", "10.0.0.1"), with_address("n2", "10.0.0.2"), with_address("n3", "10.0.0.3")]
HINT = "aggregate them, e.g. sum by (node) (...), or set aggregate: sum|max|min|avg"


def per_cpu(**series: list[float]) -> bytes:
    """An answer with one series per CPU of each node, sampled now: ``n1=[0.2, 0.4]``."""
    now = time.time()
    return vector(
        *(
            ({"node": n, "cpu": str(i)}, now, str(v))
            for n, values in series.items()
            for i, v in enumerate(values)
        )
    )


def metric(aggregate: str | None = None, node_label: str = "node") -> MetricConfig:
    return MetricConfig(
        name="cpu", source="prometheus", query="q", node_label=node_label, aggregate=aggregate
    )


def test_two_series_for_one_node_degrade_the_metric_with_the_node_and_query_named() -> None:
    """Was: the later series won, with no count and no log."""
    m = metric()
    nodes = [slim_node(node("n1")), slim_node(node("n2"))]
    with answering(200, per_cpu(n1=[0.2, 0.4], n2=[0.5])) as source:
        store = MetricStore([m], source, None, lambda: nodes)
        store.refresh(m)
    want = f"cpu: query returned 2 series for node n1: {HINT}"
    assert store.state["cpu"].last_error == want
    matrix = store.matrix(build_snapshot(nodes, []))
    assert matrix.metrics == () and matrix.degraded == [f"cpu: {want}"]


@pytest.mark.parametrize(
    ("aggregate", "n1"), [("sum", 0.6), ("max", 0.4), ("min", 0.2), ("avg", 0.3)], ids=str
)
def test_the_metrics_aggregate_combines_a_nodes_series(aggregate: str, n1: float) -> None:
    m = metric(aggregate)
    nodes = [slim_node(node("n1")), slim_node(node("n2"))]
    with answering(200, per_cpu(n1=[0.2, 0.4], n2=[0.5])) as source:
        store = MetricStore([m], source, None, lambda: nodes)
        store.refresh(m)
    assert store.state["cpu"].last_error is None
    column = store.matrix(build_snapshot(nodes, [])).values[:, 0]
    assert column.tolist() == pytest.approx([n1, 0.5])


@pytest.mark.parametrize(
    ("series", "error"),
    [
        ({"n1": [1, 1, 1, 1], "n2": [1, 1], "n3": [1, 1]}, "4 series for node n1 (and 2 more nodes)"),
        ({"n1": [1], "n2": [1, 1, 1]}, "3 series for node n2:"),
        ({"n1": [1], "n2": [1, 1], "n3": [1, 1]}, "2 series for node n2 (and 1 more node)"),
    ],
    ids=["three-nodes", "the-second-node", "one-more"],
)
def test_the_error_names_the_first_node_with_several_series_and_counts_the_others(
    series: dict[str, list[float]], error: str
) -> None:
    with (
        answering(200, per_cpu(**series)) as source,
        pytest.raises(SourceError, match="^" + re.escape(f"cpu: query returned {error}")),
    ):
        source.query(metric(), NodeResolver(NODES))


def test_series_naming_one_node_by_name_and_by_address_are_several_series() -> None:
    body = vector(({"instance": "n1"}, 1000.0, "0.1"), ({"instance": "10.0.0.1:9100"}, 1000.0, "0.3"))
    with answering(200, body) as source:
        with pytest.raises(SourceError, match=r"2 series for node n1: .*sum by \(instance\)"):
            source.query(metric(node_label="instance"), NodeResolver(NODES))
        assert source.query(metric("max", "instance"), NodeResolver(NODES)).values == {"n1": 0.3}


def test_series_that_match_no_node_are_counted_not_several() -> None:
    body = vector(
        ({"node": "n1"}, 1000.0, "0.1"),
        ({"node": "elsewhere"}, 1000.0, "1"),
        ({"node": "elsewhere"}, 1000.0, "2"),
        ({"job": "x"}, 1000.0, "3"),
        ({"job": "y"}, 1000.0, "4"),
    )
    with answering(200, body) as source:
        sample = source.query(metric(), NodeResolver(NODES))
    assert sample.values == {"n1": 0.1} and sample.unmapped == 4


def pod_metric(aggregate: str | None = None) -> MetricConfig:
    estimate = EstimateConfig(resource="cpu", pod_query="pq")
    return MetricConfig(name="cpu", source="prometheus", query="q", estimate=estimate, aggregate=aggregate)


def per_container(*series: tuple[str, str, float]) -> bytes:
    return vector(
        *(
            ({"namespace": ns, "pod": p, "container": str(i)}, 1000.0, str(v))
            for i, (ns, p, v) in enumerate(series)
        )
    )


def test_two_series_for_one_pod_fail_the_pod_usage_query() -> None:
    body = per_container(("default", "a", 0.1), ("default", "a", 0.2), ("default", "b", 0.3))
    m = pod_metric()
    with answering(200, body) as source:
        with pytest.raises(SourceError) as err:
            source.pod_usage(m)
        store = MetricStore([m], source, None, tuple)
        store.refresh_pods(m)
    want = (
        "cpu: pod usage query returned 2 series for pod default/a: aggregate them, "
        "e.g. sum by (namespace, pod) (...), or set aggregate: sum|max|min|avg"
    )
    assert str(err.value) == want
    assert store.pod_state["cpu"].last_error == want
    assert store.pod_usage(m) is None, "recent pods count by their estimate meanwhile"


def test_the_metrics_aggregate_combines_a_pods_series() -> None:
    body = per_container(("default", "a", 0.1), ("default", "a", 0.2), ("default", "b", 0.3), ("", "c", 1))
    with answering(200, body) as source:
        sample = source.pod_usage(pod_metric("sum"))
    assert sample.values == pytest.approx({"default/a": 300.0, "default/b": 300.0}), "cores in millicores"
    assert sample.unmapped == 1, "the series without a namespace"


def config_metric(**extra: Any) -> dict[str, Any]:
    return {"name": "cpu", "source": "prometheus", "query": "q", **extra}


@pytest.mark.parametrize("aggregate", ["sum", "max", "min", "avg"])
def test_aggregate_is_read_from_the_configuration(aggregate: str) -> None:
    config = parse_config({**HEAD, "metrics": [config_metric(aggregate=aggregate)]})
    assert config.metrics[0].aggregate == aggregate
    assert parse_config({**HEAD, "metrics": [config_metric()]}).metrics[0].aggregate is None


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (
            config_metric(aggregate="mean"),
            "metrics[0].aggregate: 'mean' is not allowed (allowed: sum, max, min, avg)",
        ),
        (config_metric(aggregate=1), "metrics[0].aggregate: must be a non-empty string"),
        (
            {"name": "price", "source": "annotation", "annotation": "a", "aggregate": "sum"},
            "metrics[0].aggregate: only for a metric read by a Prometheus query",
        ),
        (
            {"name": "cpu", "source": "metrics-server", "resource": "cpu", "aggregate": "sum"},
            "metrics[0].aggregate: only for a metric read by a Prometheus query",
        ),
    ],
    ids=["unknown", "not-a-string", "annotation", "metrics-server-without-podQuery"],
)
def test_a_bad_aggregate_is_refused_with_its_key_path(raw: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({**HEAD, "metrics": [raw]})
    assert words in str(err.value)


def test_a_metrics_server_metric_may_aggregate_its_pod_usage_query() -> None:
    raw = {
        "name": "cpu",
        "source": "metrics-server",
        "resource": "cpu",
        "estimate": {"podQuery": "pq"},
        "aggregate": "sum",
    }
    config = parse_config({**HEAD, "prometheus": {"url": "http://p:9090"}, "metrics": [raw]})
    assert config.metrics[0].aggregate == "sum"


def test_every_aggregate_the_configuration_allows_has_a_combination() -> None:
    assert set(COMBINE) == set(AGGREGATES)
