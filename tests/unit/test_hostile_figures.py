"""``ksched bench --hostile`` reads the webhook's latency from kube-apiserver's histogram, whose
buckets (5, 25, 100, 500 ms...) are too coarse to interpolate: it reports the bound."""

from __future__ import annotations

import math

from ksched.bench.hostile import _bound


def test_the_p99_is_bounded_by_the_first_bucket_holding_99_percent() -> None:
    buckets = {0.005: 10.0, 0.025: 90.0, 0.1: 99.0, 0.5: 100.0, math.inf: 100.0}
    assert _bound(buckets, 0.99) == 0.1
    assert _bound(buckets, 0.9) == 0.025
    assert _bound({**buckets, 0.1: 98.0}, 0.99) == 0.5


def test_no_calls_is_no_figure() -> None:
    assert math.isnan(_bound({0.1: 0.0, math.inf: 0.0}, 0.99))
