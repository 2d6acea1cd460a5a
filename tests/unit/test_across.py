"""The workloads' figures as columns (:mod:`ksched.loop.metrics.across`) say what the figures
by workload say: the columns a history keeps up to date are the columns made whole from its
figures; each workload weighed from them is weighed as one workload alone would be; and every
(kind, workload) pair counts at what :func:`ksched.engine.estimate.terms` says of it."""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ksched.config.estimate import Calibration, WorkloadCalibration
from ksched.engine.estimate import BEST_EFFORT, DECLARED, FIXED, FROM_REQUEST, LIMITED, terms
from ksched.loop.metrics import workloads
from ksched.loop.metrics.across import (
    FigureColumns,
    FigureTable,
    credibility_k,
    credible,
    most_measured,
    pair_terms,
    prior_figures,
)
from ksched.loop.metrics.workloads import WORKLOAD_TTL_S, WorkloadHistory

T0 = 1_800_000_000.0
NAMES = [f"default/Deployment/w{i}" for i in range(12)]

figure = st.one_of(st.none(), st.floats(0.05, 4.0))
calibrations = st.builds(
    WorkloadCalibration,
    ratio=figure,
    ratio_sd=st.floats(0.0, 1.0),
    ratio_pods=st.integers(1, 6),
    best_effort=st.one_of(st.none(), st.floats(10.0, 2000.0)),
    best_effort_sd=st.floats(0.0, 300.0),
    best_effort_pods=st.integers(1, 6),
    warmup_s=st.one_of(st.none(), st.floats(0.0, 300.0)),
    ratio_request=st.floats(1.0, 2000.0),
)
workload_maps = st.dictionaries(st.sampled_from(NAMES), calibrations, max_size=len(NAMES))


def by_workload(table: FigureTable) -> dict[str, tuple[float, ...]]:
    return {name: tuple(np.nan_to_num(table.data[:, row], nan=-1.0)) for name, row in table.rows.items()}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(NAMES), st.one_of(st.none(), calibrations)), max_size=60))
def test_columns_set_and_dropped_one_at_a_time_are_the_columns_made_whole(
    steps: list[tuple[str, WorkloadCalibration | None]],
) -> None:
    columns, figures = FigureColumns(), dict[str, WorkloadCalibration]()
    for name, set_to in steps:
        if set_to is None:
            columns.drop(name)
            figures.pop(name, None)
        else:
            columns.set(name, set_to)
            figures[name] = set_to
    table = columns.table()
    assert by_workload(table) == by_workload(FigureTable.of(figures))
    empty = np.setdiff1d(np.arange(table.data.shape[1]), list(table.rows.values()))
    assert np.isnan(table.ratio[empty]).all() and np.isnan(table.best_effort[empty]).all()
    assert not table.ratio_pods[empty].any(), "a row no workload holds counts no pods"


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(NAMES), st.one_of(st.none(), calibrations)), max_size=60))
def test_status_lists_the_most_measured_workloads_as_nlargest_would_and_weighs_only_those(
    steps: list[tuple[str, WorkloadCalibration | None]],
) -> None:
    # Set and dropped in turn, so that rows are reused out of the mapping's order; counts of
    # 1-6 pods tie often, and a tie is listed in the mapping's order.
    columns = FigureColumns()
    for name, set_to in steps:
        if set_to is None:
            columns.drop(name)
        else:
            columns.set(name, set_to)
    own = columns.snapshot()
    weighed = credible(own, 1.0, 300.0)
    listed = most_measured(weighed, 5)
    assert len(weighed._made) == len(listed) <= 5, "only the listed workloads are weighed"
    whole = dict(weighed.items())
    expected = heapq.nlargest(
        5, whole.items(), key=lambda item: item[1].ratio_pods + item[1].best_effort_pods
    )
    assert listed == expected
    assert most_measured(whole, 5) == expected


def test_a_history_hands_out_its_figures_with_columns_that_agree() -> None:
    history = WorkloadHistory(T0)
    for n in range(40):
        history.observe(T0 + n, f"w{n % 7}", f"uid-{n}", FROM_REQUEST, 100.0 + n, 30.0 + 5 * n)
        if n % 5 == 0:
            history.departed(f"w{n % 7}", f"uid-{n - 7}")
        figures = history.figures(T0 + n)
        assert by_workload(figures.table) == by_workload(FigureTable.of(dict(figures)))


def test_the_columns_agree_whatever_the_history_let_go_moved_or_took_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(workloads, "WORKLOAD_MEMORY", 4)  # room for four: the rest push one out
    rng = random.Random(7)
    history, now, rows_seen = WorkloadHistory(T0), T0, 0
    for n in range(400):
        now += rng.choice((1.0, 1.0, 1.0, WORKLOAD_TTL_S / 3))  # now and then, some hours run out
        workload, uid = f"w{rng.randrange(7)}", f"uid-{rng.randrange(12)}"
        action = rng.random()
        if action < 0.6:
            history.observe(now, workload, uid, FROM_REQUEST, 100.0 + n, rng.uniform(10.0, 300.0))
        elif action < 0.8:
            history.departed(workload, uid)
        else:
            history.moved(workload, uid)
        figures = history.figures(now)
        assert by_workload(figures.table) == by_workload(FigureTable.of(dict(figures))), n
        rows_seen = max(rows_seen, figures.table.data.shape[1])
    assert rows_seen <= 4, "a row let go is taken again"


def weighed_alone(
    own: WorkloadCalibration, collective: float, k: float, within: float | None
) -> tuple[float, float]:
    """A workload's ratio and its spread weighed by Buhlmann's credibility, written out."""
    assert own.ratio is not None
    around = within if within is not None else own.ratio_sd
    spread = own.ratio_sd if own.ratio_pods >= 2 else around
    z = own.ratio_pods / (own.ratio_pods + k)
    return z * own.ratio + (1 - z) * collective, math.sqrt(z * spread**2 + (1 - z) * around**2)


@settings(max_examples=150, deadline=None)
@given(workload_maps, st.one_of(st.none(), st.floats(0.1, 3.0)))
def test_each_workload_is_weighed_as_it_would_be_alone(
    workloads: dict[str, WorkloadCalibration], cluster_ratio: float | None
) -> None:
    weighed = credible(workloads, cluster_ratio, None)
    assert list(weighed) == list(workloads) and len(weighed) == len(workloads)
    table = FigureTable.of(workloads)
    sized = table.sized()
    f, sd, n = table.ratio[sized], table.ratio_sd[sized], table.ratio_pods[sized]
    collective = (
        cluster_ratio if cluster_ratio is not None else float((f * n).sum() / n.sum()) if len(f) else None
    )
    two = n >= 2
    within = float(np.sqrt((n[two] * sd[two] ** 2).sum() / (n[two] - 1).sum())) if two.any() else None
    k = credibility_k(f, sd, n)
    for name, own in workloads.items():
        got = weighed[name]
        assert (got.ratio_pods, got.warmup_s, got.ratio_request) == (
            own.ratio_pods,
            own.warmup_s,
            own.ratio_request,
        )
        if own.ratio is None:
            assert got.ratio is None
        elif collective is None:
            assert got.ratio == pytest.approx(own.ratio)
        else:
            want = weighed_alone(own, collective, k, within)
            assert (got.ratio, got.ratio_sd) == (pytest.approx(want[0]), pytest.approx(want[1]))
    assert weighed.get("default/Deployment/none") is None and "default/Deployment/none" not in weighed


@settings(max_examples=100, deadline=None)
@given(workload_maps, st.sampled_from(["quantile", "limit", "ratio"]), st.floats(0.0, 1.0))
def test_every_pair_counts_as_terms_says(
    workloads: dict[str, WorkloadCalibration], prior: str, spread: float
) -> None:
    cluster, weighed = Calibration(ratio=0.8, ratio_sd=0.2, ratio_pods=5), credible(workloads, 0.8, None)
    calibration = prior_figures(cluster, weighed, 0.9).onto(cluster, weighed)
    kinds = (FROM_REQUEST, LIMITED, BEST_EFFORT, FIXED, DECLARED)
    pairs = [(kind, name) for kind in kinds for name in [*NAMES, None]]
    for given_calibration in (calibration, replace(calibration, workloads=dict(weighed)), None):
        table, sources, typical = pair_terms(given_calibration, pairs, prior, spread)
        for j, (kind, name) in enumerate(pairs):
            want = terms(given_calibration, kind, name, prior, spread)
            assert list(table[j]) == pytest.approx([*want[:4], float(want.at_limit)]), (kind, name)
            assert sources[j] == want.source, (kind, name)
            assert (None if np.isnan(typical[j]) else typical[j]) == want.typical, (kind, name)


def test_the_prior_is_taken_over_the_weighed_workloads_that_request_enough() -> None:
    ratios = [0.1 * (i + 1) for i in range(12)]
    workloads = {f"w{i}": WorkloadCalibration(r, 0.1, 4, ratio_request=500.0) for i, r in enumerate(ratios)}
    # An agent requesting 10m and using eight times that says nothing of the others' usage.
    workloads["agent"] = WorkloadCalibration(8.0, 0.1, 4, ratio_request=10.0)
    weighed = credible(workloads, 0.5, None)
    prior = prior_figures(Calibration(ratio=0.5, ratio_pods=20), weighed, 0.9)
    sized = [weighed[f"w{i}"].ratio for i in range(12)]
    assert prior.ratio == pytest.approx(np.quantile(sized, 0.9, method="higher"))
    assert prior.ratio_typical == pytest.approx(np.mean(sized))
    assert prior.ratio < weighed["w11"].ratio < weighed["agent"].ratio
