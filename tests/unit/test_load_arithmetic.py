"""The load arithmetic written once (ksched.engine.load): a pod's share of a node, and how
much of a pod's load a windowed sample shows, for pods arriving and pods leaving."""

from __future__ import annotations

import numpy as np
import pytest

from ksched.engine.load import before_event, node_share, pod_shares, shares
from ksched.engine.snapshot import build_snapshot
from tests.conftest import node


@pytest.mark.parametrize(
    ("event_at", "sampled_at", "window", "want"),
    [
        (100.0, 90.0, 60.0, 1.0),  # sampled before the event: a new pod is unseen, a gone one still shown
        (100.0, 100.0, 60.0, 1.0),  # at the event
        (100.0, 130.0, 60.0, 0.5),  # half the window (60 s) is after it
        (100.0, 160.0, 60.0, 0.0),  # the whole window is
        (100.0, 101.0, 0.0, 0.0),  # a gauge (no window) shows the change at once
        (100.0, 100.0, 0.0, 1.0),  # ... but not one made at its own instant
    ],
)
def test_the_part_of_a_window_before_an_event(
    event_at: float, sampled_at: float, window: float, want: float
) -> None:
    assert float(before_event(event_at, sampled_at, window)) == pytest.approx(want)


def test_a_share_is_the_amount_over_each_nodes_allocatable() -> None:
    snapshot = build_snapshot([node("small", cpu="2"), node("big", cpu="8"), node("none", cpu="0")], [])
    rows = [snapshot.index[n] for n in ("small", "big", "none")]
    got = shares(snapshot, "cpu", 1000.0)
    assert [float(got[r]) for r in rows] == [0.5, 0.125, 0.0]
    nan = shares(snapshot, "cpu", 1000.0, missing=np.nan)
    assert np.isnan(nan[rows[2]])
    assert node_share(snapshot, "big", "cpu", 2000.0) == 0.25
    assert node_share(snapshot, "none", "cpu", 2000.0) is None
    assert node_share(snapshot, "gone", "cpu", 2000.0) is None
    assert shares(snapshot, "example.com/gpu", 1.0).tolist() == [0.0, 0.0, 0.0]
    counted, each = pod_shares(
        snapshot,
        "cpu",
        np.array([rows[0], -1, rows[2], rows[1]], dtype=np.intp),
        np.array([500.0, 1.0, 1.0, 4000.0]),
    )
    assert counted.tolist() == [True, False, False, True]
    assert each.tolist() == [0.25, 0.5]
