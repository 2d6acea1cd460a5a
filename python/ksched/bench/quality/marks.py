"""A steering setup's marks over one round: when each of its pool's nodes was marked hot and
when the mark came off, and how many warm marks (the lighter one) were put on.

Owns how the marks are read back and told. The steering controller posts an Event on a node
for each change (:data:`~ksched.loop.events.MARKED_HOT`, :data:`~ksched.loop.events.MARKED_WARM`,
:data:`~ksched.loop.events.UNMARKED`, in :data:`~ksched.loop.events.NODE_EVENT_NAMESPACE`); a
hot mark ends where the node is unmarked or keeps only the warm mark. Once the observation
window is over,
:func:`node_events` lists them once, and :func:`timeline` (a pure function) turns them into
each node's marks as ``[on, off)`` intervals in seconds from the round's first create, ``off``
None where the node was still marked at the end. Only the pool's nodes and the events within
the window count: the namespace keeps earlier rounds' events for an hour, and pools are dealt
afresh each round. A second mark on a node already marked (a new leader reconciling) continues
the first; an unmark with no mark before it in the window (its mark's event lost: events are
best effort) is left out. The events are what ksched reported, not the taints themselves: a
mark whose event was lost is missing here.

:func:`attribute` then says what the marks did: the pool's hot node-minutes split by whether
the node was marked at the sample, and the pods bound onto a node while it was marked, by the
scheduler that placed them (kube-scheduler's there are the ones the mark did not steer away).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ksched.bench.pods import list_all
from ksched.loop.client import Kube
from ksched.loop.events import MARKED_HOT, MARKED_WARM, NODE_EVENT_NAMESPACE, UNMARKED, events_path
from ksched.objects import Obj

EVENTS_PATH = events_path(NODE_EVENT_NAMESPACE)
LIST_TIMEOUT_S = 60.0

# The events of a node's marks changing.
MARK_REASONS = (MARKED_HOT, MARKED_WARM, UNMARKED)
# A mark: seconds from the round's first create when it went on, and when it came off (None:
# still on at the end of the window).
Interval = tuple[float, float | None]


@dataclass
class MarkFigures:
    """One steering setup's marks over a round, and what they add up to."""

    nodes_marked: int = 0
    put_on: int = 0
    taken_off: int = 0
    # The most nodes of the pool marked at the same time.
    most_at_once: int = 0
    # A mark still on at the end counts until then (a lower bound); None: no mark.
    median_duration_s: float | None = None
    # The window's length, from the first create.
    window_s: float = 0.0
    # Per node ever marked, its marks in order.
    intervals: dict[str, list[Interval]] = field(default_factory=dict)
    # The warm marks (the lighter one, ``steering.warm``): nodes that carried one, and how many
    # times a node went warm (from unmarked or from hot).
    warm_nodes: int = 0
    warm_put_on: int = 0
    # The pool's hot node-minutes on nodes marked at the sample, and on the others
    # (:func:`attribute`).
    hot_marked_min: float = 0.0
    hot_unmarked_min: float = 0.0
    # Per scheduler: its pods bound onto a node while that node was marked, and all it bound.
    bound_while_marked: dict[str, int] = field(default_factory=dict)
    bound: dict[str, int] = field(default_factory=dict)
    # The pods bound onto the nodes that went hot in the window, per scheduler, by when each
    # was bound (:data:`PHASES`): whether the mark came too late or came off too soon.
    onto_hot: dict[str, dict[str, int]] = field(default_factory=dict)

    def most_marked(self) -> str | None:
        """The node marked most often (ties: the longest marked, then the first by name)."""
        if not self.intervals:
            return None
        return min(
            self.intervals,
            key=lambda n: (-len(self.intervals[n]), -self._marked_s(self.intervals[n]), n),
        )

    def _marked_s(self, marks: list[Interval]) -> float:
        return sum((self.window_s if off is None else off) - on for on, off in marks)


def event_time(event: Obj) -> float | None:
    """When the event happened: its ``eventTime`` (a MicroTime), else the deprecated first
    timestamp or its creation; None where it carries none."""
    meta = event.get("metadata") or {}
    at = event.get("eventTime") or event.get("deprecatedFirstTimestamp") or meta.get("creationTimestamp")
    if not at:
        return None
    return datetime.fromisoformat(str(at).replace("Z", "+00:00")).timestamp()


def timeline(events: Sequence[Obj], nodes: Sequence[str], start: float, end: float) -> MarkFigures:
    """The marks of ``nodes`` (a pool) from the node events, within the window from ``start``
    (the round's first create, by the wall clock) to ``end``."""
    pool = set(nodes)
    changes: list[tuple[float, str, str]] = []
    for e in events:
        reason = e.get("reason")
        node = (e.get("regarding") or {}).get("name")
        at = event_time(e)
        if reason in MARK_REASONS and node in pool and at is not None and start <= at <= end:
            changes.append((at, str(node), str(reason)))
    intervals: dict[str, list[Interval]] = {}
    on_since: dict[str, float] = {}
    warm: Counter[str] = Counter()
    for at, node, reason in sorted(changes):
        if reason == MARKED_WARM:
            warm[node] += 1
        if reason == MARKED_HOT and node not in on_since:
            on_since[node] = at
        elif reason != MARKED_HOT and node in on_since:
            intervals.setdefault(node, []).append((_seconds(on_since.pop(node), start), _seconds(at, start)))
    for node, at in on_since.items():
        intervals.setdefault(node, []).append((_seconds(at, start), None))
    figures = _figures(dict(sorted(intervals.items())), _seconds(end, start))
    figures.warm_nodes, figures.warm_put_on = len(warm), sum(warm.values())
    return figures


def _seconds(at: float, start: float) -> float:
    return round(at - start, 1)


def _figures(intervals: dict[str, list[Interval]], window_s: float) -> MarkFigures:
    marks = [m for node_marks in intervals.values() for m in node_marks]
    durations = [(window_s if off is None else off) - on for on, off in marks]
    # Offs before ons at the same second: a node unmarked as another is marked is not two at once.
    steps = sorted([(on, 1) for on, _ in marks] + [(off, -1) for _, off in marks if off is not None])
    at_once = most = 0
    for _, step in steps:
        at_once += step
        most = max(most, at_once)
    return MarkFigures(
        nodes_marked=len(intervals),
        put_on=len(marks),
        taken_off=sum(1 for _, off in marks if off is not None),
        most_at_once=most,
        median_duration_s=round(statistics.median(durations), 1) if durations else None,
        window_s=window_s,
        intervals=intervals,
    )


# When a pod was bound onto a node, against that node's marks.
BEFORE, BETWEEN, MARKED = "before its first mark", "after a mark came off", "while marked"
PHASES = (BEFORE, BETWEEN, MARKED)


def phase(marks: Sequence[Interval], at_s: float) -> str:
    """Where ``at_s`` falls in a node's ``marks``: before the first (or never marked), after one
    came off and before the next, or within one."""
    if marked_at(marks, at_s):
        return MARKED
    return BETWEEN if any(off is not None and off <= at_s for _, off in marks) else BEFORE


def marked_at(marks: Sequence[Interval], at_s: float) -> bool:
    """Whether a node with ``marks`` was marked ``at_s`` seconds from the first create."""
    return any(on <= at_s and (off is None or at_s < off) for on, off in marks)


def attribute(
    figures: MarkFigures,
    times: Sequence[float],
    samples: Sequence[Mapping[str, float]],
    step_s: float,
    nodes: Sequence[str],
    binds: Sequence[tuple[str, str, float]],
    threshold: float,
) -> None:
    """Fill ``figures``' attribution: the hot node-minutes of ``nodes`` (``samples`` at
    ``times``, by the wall clock, the first the window's start) on marked and unmarked nodes,
    and ``binds`` (scheduler, node, bind time by the wall clock) while their node was marked."""
    start = times[0] if times else 0.0
    marked = unmarked = 0.0
    went_hot: set[str] = set()
    for t, sample in zip(times, samples, strict=True):
        for node in nodes:
            if sample.get(node, 0.0) > threshold:
                went_hot.add(node)
                if marked_at(figures.intervals.get(node, ()), t - start):
                    marked += step_s / 60.0
                else:
                    unmarked += step_s / 60.0
    figures.hot_marked_min, figures.hot_unmarked_min = round(marked, 2), round(unmarked, 2)
    pool = set(nodes)
    bound: Counter[str] = Counter()
    while_marked: Counter[str] = Counter()
    onto_hot: dict[str, Counter[str]] = {}
    for scheduler, node, at in binds:
        if node not in pool:
            continue
        bound[scheduler] += 1
        when = phase(figures.intervals.get(node, ()), at - start)
        if when == MARKED:
            while_marked[scheduler] += 1
        if node in went_hot:
            onto_hot.setdefault(scheduler, Counter())[when] += 1
    figures.onto_hot = {s: {p: c[p] for p in PHASES} for s, c in sorted(onto_hot.items())}
    figures.bound, figures.bound_while_marked = (
        dict(sorted(bound.items())),
        dict(sorted(while_marked.items())),
    )


def node_events(kube: Kube) -> list[Obj]:
    """The steering marks' events of every round the namespace still keeps, listed page by page
    (:func:`timeline` keeps a pool's and a window's)."""
    events = list_all(kube, EVENTS_PATH, "node events", LIST_TIMEOUT_S)
    return [e for e in events if e.get("reason") in MARK_REASONS]


def described(figures: MarkFigures) -> list[str]:
    """The figures in a line, and the most marked node's marks in another (none if no node
    was marked)."""
    median = "-" if figures.median_duration_s is None else f"{figures.median_duration_s:.0f} s"
    warm = f"; {figures.warm_put_on} warm marks on {figures.warm_nodes} nodes" if figures.warm_put_on else ""
    lines = [
        f"{figures.nodes_marked} nodes marked hot, {figures.put_on} marks put on, {figures.taken_off} taken off, "
        f"at most {figures.most_at_once} at once, median mark {median}{warm}"
    ]
    node = figures.most_marked()
    if node is not None:
        marks = "; ".join(
            f"on {on:.0f} s, " + ("still on at the end" if off is None else f"off {off:.0f} s")
            for on, off in figures.intervals[node]
        )
        lines.append(f"most marked: {node}: {marks}")
    if figures.bound:
        onto = ", ".join(
            f"{scheduler} {figures.bound_while_marked.get(scheduler, 0)} of {n}"
            for scheduler, n in figures.bound.items()
        )
        lines.append(
            f"hot node-min on marked nodes {figures.hot_marked_min:.1f}, on unmarked {figures.hot_unmarked_min:.1f}; "
            f"bound onto a marked node: {onto}"
        )
    if figures.onto_hot:
        split = "; ".join(
            f"{scheduler} " + ", ".join(f"{n} {p}" for p, n in phases.items())
            for scheduler, phases in figures.onto_hot.items()
        )
        lines.append(f"bound onto the nodes that went hot: {split}")
    return lines
