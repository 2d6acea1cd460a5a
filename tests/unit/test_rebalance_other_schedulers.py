"""Other schedulers' pods in the rebalance planner (``rebalance.otherSchedulers``): which are
opted in (by scheduler name, then namespace), that each still passes every rule the
profile's own pods do, and that one moves only off a source carrying the steering mark
(kube-scheduler, not ksched, places its replacement: only the mark scores the source down
for it), nor off a source its scheduler lately put a replacement back on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ksched.commands.rebalance import preview
from ksched.config.rebalance import OtherSchedulers, parse_rebalance
from ksched.engine.cluster_file import sort_objects
from ksched.engine.rebalance import JOB_POD, Budget, SteeringView
from ksched.errors import ConfigError
from ksched.loop.mirror.slim import slim_node
from ksched.loop.rebalancing.reservations import ON_SOURCE
from tests.conftest import node
from tests.unit import test_rebalancer
from tests.unit.test_rebalance_plan import NODES, moved, reasons, rebalance, run_plan, workload_pod
from tests.unit.test_rebalancer import CPU
from tests.unit.test_rebalancer import workload_pod as live_pod

Obj = dict[str, Any]

# The live rebalancer's fixture (``harness(values, pods, ..., steering=True, **rebalance)``).
harness = test_rebalancer.harness

DEFAULT = "default-scheduler"
MARK = "ksched.io/hot"
MARKED_N0 = SteeringView(MARK, frozenset({"n0"}))
NOT_OURS = f"not scheduled by ksched (schedulerName {DEFAULT})"
OPTED_IN = OtherSchedulers(scheduler_names=(DEFAULT,))
IN_TEAM_A = OtherSchedulers(scheduler_names=(DEFAULT,), namespaces=("team-a",))
VALUES = [0.9, 0.5, 0.3, 0.55]


def theirs(namespace: str = "default", kind: str = "ReplicaSet", **spec: Any) -> Obj:
    """A running pod of a ``kind`` on hot n0 that default-scheduler placed (1 of 4 CPUs)."""
    p = workload_pod("p", "n0", kind=kind, schedulerName=DEFAULT, **spec)
    p["metadata"]["namespace"] = namespace
    return p


# (name, pod, opted in, steering marks, placed back, want: the move's target or the skip reason)
CASES: list[tuple[str, Callable[[], Obj], OtherSchedulers, SteeringView | None, bool, str]] = [
    ("not opted in: never moved, marked or not", theirs, OtherSchedulers(), MARKED_N0, False, NOT_OURS),
    (
        "another scheduler's name listed",
        theirs,
        OtherSchedulers(scheduler_names=("batch-scheduler",)),
        MARKED_N0,
        False,
        NOT_OURS,
    ),
    ("a namespace not listed", lambda: theirs("team-b"), IN_TEAM_A, MARKED_N0, False, NOT_OURS),
    ("opted in, source marked: moved", theirs, OPTED_IN, MARKED_N0, False, "n2"),
    (
        "opted in by namespace, source marked: moved",
        lambda: theirs("team-a"),
        IN_TEAM_A,
        MARKED_N0,
        False,
        "n2",
    ),
    (
        "opted in, steering off",
        theirs,
        OPTED_IN,
        None,
        False,
        f"source not marked: {DEFAULT} could place the replacement back (steering is off)",
    ),
    (
        "opted in, another node marked",
        theirs,
        OPTED_IN,
        SteeringView(MARK, frozenset({"n3"})),
        False,
        f"source not marked: {DEFAULT} could place the replacement back (n0 has no {MARK} mark)",
    ),
    (
        "opted in, the pod tolerates the mark",
        lambda: theirs(tolerations=[{"operator": "Exists"}]),
        OPTED_IN,
        MARKED_N0,
        False,
        f"source not marked: {DEFAULT} could place the replacement back (the pod tolerates {MARK})",
    ),
    (
        "opted in, a toleration of another key does not count",
        lambda: theirs(tolerations=[{"key": "gpu", "operator": "Exists"}]),
        OPTED_IN,
        MARKED_N0,
        False,
        "n2",
    ),
    (
        "opted in, marked, but its scheduler put a replacement back on n0 lately",
        theirs,
        OPTED_IN,
        MARKED_N0,
        True,
        f"replacement placed back: {DEFAULT} bound a moved pod's replacement on n0 again "
        "(within replacementSettle)",
    ),
    (
        "opted in, marked: a Job's pod still needs moveJobPods",
        lambda: theirs(kind="Job"),
        OPTED_IN,
        MARKED_N0,
        False,
        JOB_POD,
    ),
]


@pytest.mark.parametrize(
    ("name", "make", "opted", "steering", "back", "want"), CASES, ids=[c[0] for c in CASES]
)
def test_another_schedulers_pod_moves_only_opted_in_and_off_a_marked_source(
    name: str,
    make: Callable[[], Obj],
    opted: OtherSchedulers,
    steering: SteeringView | None,
    back: bool,
    want: str,
) -> None:
    p = make()
    budget = Budget(evictions=5, placed_back=frozenset({("n0", DEFAULT)} if back else ()))
    got = run_plan(VALUES, [p], config=rebalance(other_schedulers=opted), budget=budget, steering=steering)
    if want in NODES:
        assert (moved(got), reasons(got)) == ([(f"{p['metadata']['namespace']}/p", "n0", want)], {}), name
    else:
        assert (moved(got), reasons(got)) == ([], {f"{p['metadata']['namespace']}/p": want}), name


def test_the_profiles_own_pods_need_no_mark() -> None:
    got = run_plan(VALUES, [workload_pod("p", "n0")], config=rebalance(other_schedulers=OPTED_IN))
    assert moved(got) == [("default/p", "n0", "n2")]


def test_other_schedulers_are_read_from_the_configuration() -> None:
    config = parse_rebalance(
        {"otherSchedulers": {"schedulerNames": [DEFAULT], "namespaces": ["team-a", "team-b"]}}, ["ksched"], ()
    )
    assert config.other_schedulers == OtherSchedulers((DEFAULT,), ("team-a", "team-b"))
    assert parse_rebalance({}, ["ksched"], ()).other_schedulers == OtherSchedulers(), "off by default"


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"schedulerName": [DEFAULT]}, r"rebalance\.otherSchedulers\.schedulerName: unknown key"),
        ({"schedulerNames": DEFAULT}, r"rebalance\.otherSchedulers\.schedulerNames: must be a list"),
        (
            {"schedulerNames": [""]},
            r"rebalance\.otherSchedulers\.schedulerNames\[0\]: must be a non-empty string",
        ),
        ({"schedulerNames": [DEFAULT, DEFAULT]}, r"schedulerNames\[1\]: 'default-scheduler' is listed twice"),
        ({"schedulerNames": ["ksched"]}, r"schedulerNames\[0\]: 'ksched' is the rebalancing profile's own"),
        (
            {"schedulerNames": [DEFAULT], "namespaces": ["Team_A"]},
            r"namespaces\[0\]: 'Team_A' is not a namespace",
        ),
        ({"namespaces": ["team-a"]}, r"rebalance\.otherSchedulers\.namespaces: needs schedulerNames"),
        ([DEFAULT], r"rebalance\.otherSchedulers: must be a mapping"),
    ],
)
def test_other_schedulers_are_validated_with_their_key_paths(given: object, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        parse_rebalance({"otherSchedulers": given}, ["ksched"], ())


# -- the live loop and the dry run ----------------------------------------------

# n0 is hot (1.1) and stays so without one pod (0.25); n1 (0.2) stays below low (0.6) with one more.
PUT_BACK_HOT = {"n0": 1.1, "n1": 0.2, "n2": 0.7, "n3": 0.75}
NOT_MARKED = f"source not marked: {DEFAULT} could place the replacement back (n0 has no {MARK} mark)"
PLACED_BACK = f"replacement placed back: {DEFAULT} bound a moved pod's replacement on n0 again (within replacementSettle)"


def placed_by_default(name: str, owner: str) -> Obj:
    """A pod of ReplicaSet ``owner`` on n0 that default-scheduler placed."""
    p = live_pod(name, "n0", owner)
    p["spec"]["schedulerName"] = DEFAULT
    return p


def mark(h: Any, name: str) -> None:
    """The steering controller's mark on ``name``, as the node watch brings it."""
    h.state.on_node(
        "MODIFIED", slim_node(node(name, taints=[{"key": MARK, "effect": "PreferNoSchedule"}])), None
    )


def skipped(h: Any) -> dict[str, int]:
    return h.rebalancer.status()["lastPlan"]["skipped"]  # type: ignore[no-any-return]


def test_the_live_loop_evicts_a_default_scheduler_pod_once_its_source_is_marked(harness: Any) -> None:
    h = harness(PUT_BACK_HOT, [placed_by_default("api-1", "api")], steering=True, other_schedulers=OPTED_IN)
    h.look()
    h.look()
    assert (h.evicted(), skipped(h)) == ([], {NOT_MARKED: 1})
    mark(h, "n0")
    h.look()
    assert h.evicted() == ["api-1"]
    assert ("Pod/api-1", "Normal", "Rebalanced") in [e[:3] for e in h.events]


def test_a_replacement_put_back_on_its_source_stops_its_schedulers_moves_from_there(harness: Any) -> None:
    """default-scheduler put api's replacement back on n0 despite the mark: web-1, also its,
    stays on n0 for replacementSettle (moving it would be another eviction for nothing),
    then moves."""
    pods = [placed_by_default("api-1", "api"), placed_by_default("web-1", "web")]
    h = harness(PUT_BACK_HOT, pods, steering=True, other_schedulers=OPTED_IN)
    mark(h, "n0")
    h.look()
    h.look()
    assert h.evicted() == ["api-1"]
    # The scheduling cycle reports each binding, whichever scheduler made it (HeldRoom.landed).
    assert h.reservations.landed(placed_by_default("api-2", "api"), "n0") == ON_SOURCE
    h.look()
    assert h.evicted() == ["api-1"]
    assert skipped(h).get(PLACED_BACK) == 1, skipped(h)
    h.look(after_s=600)
    assert h.evicted() == ["api-1", "web-1"]


def test_the_dry_run_makes_the_live_loops_decisions(harness: Any) -> None:
    """``ksched rebalance --dry-run`` reads the mark from the nodes it lists, as the live loop
    reads it from its node watch: the same skip before the mark, the same move after."""
    pods = [placed_by_default("api-1", "api")]
    h = harness(PUT_BACK_HOT, pods, shadow=True, hot_samples=1, steering=True, other_schedulers=OPTED_IN)
    config = h.rebalancer.engine.config
    for marked in (False, True):
        if marked:
            mark(h, "n0")
        h.store.refresh(CPU)
        live = h.rebalancer.look()
        nodes = [
            node(n, taints=[{"key": MARK, "effect": "PreferNoSchedule"}] if marked and n == "n0" else None)
            for n in ("n0", "n1", "n2", "n3")
        ]
        objects = [{"kind": "Node", **n} for n in nodes] + [{"kind": "Pod", **p} for p in pods]
        dry, _ = preview(
            config, sort_objects(objects, {"ksched"}, "the test"), h.kube, h.clock.now, prometheus=h.source
        )
        assert live is not None
        assert [(m.pod, m.target) for m in dry.moves] == [(m.pod, m.target) for m in live.moves]
        assert dry.skipped == live.skipped
        assert bool(live.moves) == marked and (marked or live.skipped[0].reason == NOT_MARKED)
