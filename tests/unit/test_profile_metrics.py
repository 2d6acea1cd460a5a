"""Metrics per profile: a profile's ``metrics`` list is the only metrics it filters and scores with."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ksched.config import Config, parse_config
from ksched.engine.cluster_file import ClusterFile
from ksched.engine.simulation import run_simulation
from ksched.engine.snapshot import Snapshot, build_snapshot
from ksched.errors import ConfigError
from ksched.loop.metrics.metric_sources import Matrix
from ksched.loop.metrics.recent_pods import RecentPods
from ksched.loop.scheduling.binder import Outcome
from ksched.loop.scheduling.cycle import Scheduler
from ksched.loop.scheduling.queue import SchedulingQueue
from ksched.loop.telemetry import Telemetry
from tests.conftest import node, pod

LOAD = {"name": "load", "source": "prometheus", "query": "load", "filter": {"above": 0.8}}
PRICE = {"name": "price", "source": "prometheus", "query": "price"}


def config(*profiles: dict[str, Any], metrics: tuple[dict[str, Any], ...] = (LOAD, PRICE)) -> Config:
    return parse_config(
        {
            "apiVersion": "ksched.io/v1alpha1",
            "kind": "KschedConfiguration",
            "profiles": list(profiles),
            "metrics": list(metrics),
        }
    )


def test_a_profile_runs_with_every_metric_unless_it_lists_them() -> None:
    cfg = config({"schedulerName": "prod"}, {"schedulerName": "batch", "metrics": ["price"]})
    prod, batch = cfg.profiles
    assert prod.metrics is None and prod.uses("load") and prod.uses("price")
    assert batch.metrics == ("price",) and not batch.uses("load") and batch.uses("price")


@pytest.mark.parametrize(
    ("metrics", "fragment"),
    [
        (["load", "cpu"], "profiles[1].metrics[1]: 'cpu' is not a metric (metrics: load, price)"),
        (["load", "load"], "profiles[1].metrics: duplicate metric name"),
        ("load", "profiles[1].metrics: must be a list"),
        ([""], "profiles[1].metrics[0]: must be a non-empty string"),
    ],
)
def test_a_profiles_metrics_must_name_defined_metrics(metrics: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        config({"schedulerName": "prod"}, {"schedulerName": "batch", "metrics": metrics})
    assert fragment in str(err.value)


def test_a_profile_without_a_metric_places_where_the_other_profile_filters() -> None:
    # hot is over prod's load threshold and the only node: prod's pod waits, batch's pod
    # (a profile without the load metric) is placed there.
    cfg = config({"schedulerName": "prod"}, {"schedulerName": "batch", "metrics": ["price"]})
    cluster = ClusterFile(
        nodes=[node("hot")],
        existing=[],
        pending=[pod("web", scheduler="prod"), pod("job", scheduler="batch")],
        ignored=0,
    )
    results, _ = run_simulation(cluster, cfg, {"hot": {"load": 0.95, "price": 1.0}}, seed=0)
    placed = {p.pod: p for r in results for p in r.placements}
    assert placed["default/web"].node is None
    assert "1 node(s) had load above 0.8" in (placed["default/web"].message or "")
    assert placed["default/job"].node == "hot"


def test_a_profile_scores_with_its_own_metrics_only() -> None:
    # cheap has the lower price, roomy the lower load; each profile prefers by the one it uses.
    by_price = {"name": "price", "source": "prometheus", "query": "price", "weight": 100}
    by_load = {"name": "load", "source": "prometheus", "query": "load", "weight": 100}
    cfg = config(
        {"schedulerName": "cost", "metrics": ["price"]},
        {"schedulerName": "spread", "metrics": ["load"]},
        metrics=(by_load, by_price),
    )
    cluster = ClusterFile(
        nodes=[node("cheap"), node("roomy")],
        existing=[],
        pending=[pod("a", scheduler="cost"), pod("b", scheduler="spread")],
        ignored=0,
    )
    offline = {"cheap": {"price": 1.0, "load": 0.7}, "roomy": {"price": 5.0, "load": 0.1}}
    results, _ = run_simulation(cluster, cfg, offline, seed=0)
    placed = {p.pod: p.node for r in results for p in r.placements}
    assert placed == {"default/a": "cheap", "default/b": "roomy"}


class FakeState:
    class Storage:
        def assume(self, *args: Any) -> None:
            pass

    storage = Storage()

    def __init__(self) -> None:
        self.snap = build_snapshot([node("n0")], [])

    def sync(self) -> None:
        pass

    def snapshot(self) -> Snapshot:
        return self.snap

    recent = RecentPods(())

    def assume(self, *args: Any) -> None:
        pass


class DroppedLoad:
    """The metric store with load's source down: load dropped from the matrix (degraded mode)."""

    def matrix(self, snapshot: Snapshot, *args: Any) -> Matrix:
        return Matrix((), np.zeros((snapshot.count, 0)), ["load: no value younger than 120s"])


class NoteBinder:
    def __init__(self) -> None:
        self.notes: dict[str, str] = {}

    def bind(self, p: dict[str, Any], node: str, done: Any, note: str, *args: Any) -> None:
        self.notes[p["metadata"]["name"]] = note
        done(Outcome.BOUND)


def test_a_profile_is_degraded_only_by_its_own_metrics() -> None:
    cfg = config({"schedulerName": "prod"}, {"schedulerName": "batch", "metrics": ["price"]})
    queue = SchedulingQueue(lambda: 1000.0)
    for name, profile in [("web", "prod"), ("job", "batch")]:
        p = pod(name, scheduler=profile)
        p["metadata"]["uid"] = f"uid-{name}"
        queue.add(p)
    binder, telemetry = NoteBinder(), Telemetry()
    s = Scheduler(cfg, FakeState(), queue, binder, telemetry, lambda: True, DroppedLoad())  # type: ignore[arg-type]
    s.cycle(queue.pop_batch(10, 0.0, 0.0))
    assert binder.notes == {"web": " (degraded: load: no value younger than 120s)", "job": ""}
    assert (
        telemetry.registry.get_sample_value("ksched_fallback_total", {"reason": "metric_unavailable"}) == 1.0
    )
