"""A steering setup's marks over a round, read back from the node events the steering
controller posts: each node's intervals, the figures they add up to, and the report's lines."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime
from typing import NamedTuple

import pytest

from ksched.bench.quality.figures import QualityFigures, QualityResults
from ksched.bench.quality.marks import (
    BEFORE,
    BETWEEN,
    MARKED,
    Interval,
    MarkFigures,
    attribute,
    described,
    phase,
    timeline,
)
from ksched.bench.quality.report import marks_lines, table
from ksched.loop.events import COMPONENT, MARKED_HOT, MARKED_WARM, UNMARKED
from ksched.objects import Obj

# The round's first create, and its window's end 600 s later.
START = datetime(2025, 3, 1, 12, 0, tzinfo=UTC).timestamp()
END = START + 600.0
POOL = ["kwok-node-00001", "kwok-node-00002", "kwok-node-00003"]


def _event(reason: str, node: str, at_s: float) -> Obj:
    """An event as the API server lists it, ``at_s`` seconds after the first create."""
    at = datetime.fromtimestamp(START + at_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "metadata": {"name": f"{node}.{int(at_s * 1e6):016x}", "namespace": "default"},
        "eventTime": at,
        "reason": reason,
        "regarding": {"kind": "Node", "name": node},
        "reportingController": COMPONENT,
    }


def on(node: str, at_s: float) -> Obj:
    return _event(MARKED_HOT, node, at_s)


def off(node: str, at_s: float) -> Obj:
    return _event(UNMARKED, node, at_s)


def warm(node: str, at_s: float) -> Obj:
    return _event(MARKED_WARM, node, at_s)


class Case(NamedTuple):
    name: str
    events: list[Obj]
    want: dict[str, list[Interval]]


CASES = [
    Case("no event: no mark", [], {}),
    Case(
        "a mark on and off, and on again until the end",
        [on(POOL[0], 95), off(POOL[0], 240), on(POOL[0], 300)],
        {POOL[0]: [(95.0, 240.0), (300.0, None)]},
    ),
    Case(
        "listed out of order: ordered by when they happened",
        [off(POOL[1], 50.5), on(POOL[1], 10.5)],
        {POOL[1]: [(10.5, 50.5)]},
    ),
    Case(
        "another pool's nodes are not this pool's marks",
        [on("kwok-node-00099", 20), on(POOL[2], 30), off("kwok-node-00099", 40)],
        {POOL[2]: [(30.0, None)]},
    ),
    Case(
        "an earlier round's events and those after the window are left out",
        [on(POOL[0], -3000), off(POOL[0], -2900), on(POOL[1], 590), off(POOL[1], 610), on(POOL[2], 700)],
        {POOL[1]: [(590.0, None)]},
    ),
    Case(
        "an unmark without a mark is tolerated and left out",
        [off(POOL[0], 15), on(POOL[0], 60), off(POOL[0], 120), off(POOL[0], 130)],
        {POOL[0]: [(60.0, 120.0)]},
    ),
    Case(
        "a mark on a marked node (a new leader reconciling) continues the first",
        [on(POOL[0], 60), on(POOL[0], 90), off(POOL[0], 200)],
        {POOL[0]: [(60.0, 200.0)]},
    ),
    Case(
        "a hot mark ends where the node keeps only the warm mark; a warm mark alone is no hot one",
        [warm(POOL[0], 20), on(POOL[0], 60), warm(POOL[0], 150), off(POOL[0], 200), warm(POOL[1], 30)],
        {POOL[0]: [(60.0, 150.0)]},
    ),
    Case(
        "other reasons on the pool's nodes are no marks",
        [_event("NodeNotReady", POOL[0], 10), _event("Rebalanced", POOL[1], 20)],
        {},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_nodes_marks_within_the_round(case: Case) -> None:
    got = timeline(case.events, POOL, START, END).intervals
    assert got == case.want, f"want {case.want}, got {got}"


def test_the_marks_add_up_to_the_figures() -> None:
    events = [
        on(POOL[0], 95),
        on(POOL[1], 100),
        off(POOL[0], 240),
        # Unmarked as another is marked at the same moment: two at once, not three.
        off(POOL[1], 300),
        on(POOL[2], 300),
        on(POOL[0], 300),
    ]
    got = timeline(events, POOL, START, END)
    assert (got.nodes_marked, got.put_on, got.taken_off, got.most_at_once) == (3, 4, 2, 2)
    # 145 s and 200 s off; 300 s and 300 s still on at the end of the 600 s window.
    assert got.median_duration_s == 250.0
    assert got.most_marked() == POOL[0]
    assert timeline([], POOL, START, END).median_duration_s is None
    assert (got.warm_nodes, got.warm_put_on) == (0, 0)
    graded = timeline(
        [warm(POOL[0], 20), on(POOL[0], 60), warm(POOL[0], 150), warm(POOL[1], 30)], POOL, START, END
    )
    assert (graded.nodes_marked, graded.put_on, graded.warm_nodes, graded.warm_put_on) == (1, 1, 2, 3)
    assert described(graded)[0].endswith("; 3 warm marks on 2 nodes")


def test_the_report_tells_the_most_marked_nodes_intervals() -> None:
    marks = timeline(
        [on(POOL[1], 95), off(POOL[1], 240), on(POOL[1], 300), on(POOL[2], 100), off(POOL[2], 130)],
        POOL,
        START,
        END,
    )
    results = QualityResults({})
    steered = QualityFigures("ksched-steer", "mixed-schedulers", 96)
    steered.marks = marks
    results.figures += [QualityFigures("kube-scheduler", "mixed-schedulers", 96), steered]
    assert marks_lines(results) == [
        "steering marks (seconds from the first create)",
        "mixed-schedulers / ksched-steer: 2 nodes marked hot, 3 marks put on, 2 taken off, "
        "at most 2 at once, median mark 145 s",
        "  most marked: kwok-node-00002: on 95 s, off 240 s; on 300 s, still on at the end",
    ]
    assert "most marked: kwok-node-00002" in table(results)
    # results.json carries the intervals with the run, and --json the figures.
    run = json.loads(json.dumps(asdict(steered)))
    assert run["marks"]["intervals"][POOL[1]] == [[95.0, 240.0], [300.0, None]]
    assert results.by_scenario()["mixed-schedulers"]["ksched-steer"]["marks"]["put_on"] == 3
    assert "marks" not in results.by_scenario()["mixed-schedulers"]["kube-scheduler"]


def test_no_steering_setup_no_section() -> None:
    results = QualityResults({}, [QualityFigures("ksched", "requests-lie", 96)])
    assert marks_lines(results) == []
    steered = QualityFigures("ksched-steer", "requests-lie", 96, marks=MarkFigures(window_s=600.0))
    assert marks_lines(QualityResults({}, [steered]))[1:] == [
        "requests-lie / ksched-steer: 0 nodes marked hot, 0 marks put on, 0 taken off, "
        "at most 0 at once, median mark -"
    ]


def test_attribute_splits_hot_minutes_by_mark_and_counts_binds_onto_marked_nodes() -> None:
    """Node 1 is marked from 60 s to 120 s; node 2 never. Four 30 s samples: node 1 hot at 60 s
    and 90 s (marked) and at 0 s (not yet); node 2 hot at 90 s. A kube-scheduler pod bound onto
    node 1 at 100 s landed while it was marked; the others did not."""
    figures = timeline([on(POOL[0], 60.0), off(POOL[0], 120.0)], POOL, START, END)
    times = [START + s for s in (0.0, 30.0, 60.0, 90.0)]
    samples = [
        {POOL[0]: 0.9, POOL[1]: 0.2},
        {POOL[0]: 0.5, POOL[1]: 0.2},
        {POOL[0]: 0.9, POOL[1]: 0.2},
        {POOL[0]: 0.85, POOL[1]: 0.95},
    ]
    binds = [
        ("default-scheduler", POOL[0], START + 100.0),
        ("default-scheduler", POOL[0], START + 20.0),
        ("ksched", POOL[1], START + 100.0),
        ("ksched", "kwok-node-09999", START + 100.0),  # another pool's
    ]
    attribute(figures, times, samples, 30.0, POOL, binds, threshold=0.8)
    assert (figures.hot_marked_min, figures.hot_unmarked_min) == (1.0, 1.0)
    assert figures.bound == {"default-scheduler": 2, "ksched": 1}
    assert figures.bound_while_marked == {"default-scheduler": 1}
    assert "hot node-min on marked nodes 1.0, on unmarked 1.0" in described(figures)[-2]
    assert "default-scheduler 1 of 2, ksched 0 of 1" in described(figures)[-2]
    # Both nodes went hot: node 1's pods were bound before its mark (20 s) and within it (100 s).
    assert figures.onto_hot == {
        "default-scheduler": {BEFORE: 1, BETWEEN: 0, MARKED: 1},
        "ksched": {BEFORE: 1, BETWEEN: 0, MARKED: 0},
    }
    assert described(figures)[-1] == (
        "bound onto the nodes that went hot: default-scheduler 1 before its first mark, "
        "0 after a mark came off, 1 while marked; ksched 1 before its first mark, 0 after a mark came off, 0 while marked"
    )


def test_a_bind_after_a_mark_came_off_is_told_from_one_before_the_first() -> None:
    marks = [(60.0, 120.0), (180.0, None)]
    assert [phase(marks, s) for s in (10.0, 60.0, 130.0, 200.0)] == [BEFORE, MARKED, BETWEEN, MARKED]
    assert phase([], 10.0) == BEFORE
