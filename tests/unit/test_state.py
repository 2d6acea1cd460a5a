"""ClusterState: the incrementally kept node table equals one built from scratch."""

from __future__ import annotations

import copy
import datetime as dt
import random
import threading
import time
from typing import Any

import numpy as np

from ksched.config import Config
from ksched.engine import Engine
from ksched.engine.pods import pod_requests
from ksched.engine.snapshot import build_snapshot, safe_pod_info
from ksched.loop.mirror import state as state_module
from ksched.loop.mirror.slim import slim_node, slim_pod
from ksched.loop.mirror.state import WAKE_AT, ClusterState, interned
from ksched.loop.scheduling.cycle import Scheduler
from ksched.loop.scheduling.queue import SchedulingQueue
from ksched.loop.telemetry import Telemetry
from tests.conftest import node, pod


def bound(name: str, node_name: str, cpu: str = "250m", **spec: Any) -> dict[str, Any]:
    p = pod(name, cpu=cpu, node_name=node_name, **spec)
    p["metadata"]["uid"] = f"uid-{name}"
    return slim_pod(p)


def assert_equal_to_rebuilt(state: ClusterState, pods: dict[str, dict[str, Any]]) -> None:
    nodes = sorted(state.nodes.values(), key=lambda n: n["metadata"]["name"])
    want = build_snapshot(nodes, list(pods.values()))
    got = state.snapshot()
    assert got.node_names == want.node_names
    for column in ("pod_count", "nonzero_requested", "allocatable", "allowed_pods"):
        np.testing.assert_array_equal(got.arrays[column], want.arrays[column], err_msg=column)
    r = len(want.resources)
    got_req = got.arrays["requested"].reshape(got.count, -1)[:, :r]
    np.testing.assert_array_equal(got_req, want.arrays["requested"].reshape(want.count, r))
    assert not got.arrays["requested"].reshape(got.count, -1)[:, r:].any()
    # The pod-level plugins' table: each pod's labels and terms on its node.
    got_pods = {k: (got.pods.node[row], got.pods.infos[row]) for k, row in got.pods.rows.items()}
    want_pods = {k: (want.pods.node[row], want.pods.infos[row]) for k, row in want.pods.rows.items()}
    assert got_pods == want_pods


def updated(p: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """``p`` after one of the updates a bound pod sees."""
    p = copy.deepcopy(p)
    change = rng.randrange(4)
    if change == 0:  # the kubelet reports it running
        p["status"] = {**p.get("status", {}), "phase": "Running", "startTime": "2026-01-02T03:04:05Z"}
    elif change == 1:  # an in-place resize, actuated
        cpu = rng.choice(["100m", "2", "500m"])
        p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
        p.setdefault("status", {})["containerStatuses"] = [
            {"name": "c", "allocatedResources": {"cpu": cpu}, "resources": {"requests": {"cpu": cpu}}}
        ]
    elif change == 2:  # a resize the kubelet has not actuated yet: the larger counts
        p.setdefault("status", {})["containerStatuses"] = [
            {"name": "c", "allocatedResources": {"cpu": "3"}, "resources": {"requests": {"cpu": "3"}}}
        ]
    else:  # relabelled
        p["metadata"]["labels"] = {"app": rng.choice(["a", "b"])}
    return p


def test_random_event_stream_matches_a_rebuild() -> None:
    rng = random.Random(7)
    state = ClusterState()
    live: dict[str, dict[str, Any]] = {}
    for i in range(6):
        state.on_node("ADDED", slim_node(node(f"n{i}")), None)
    for step in range(400):
        action = rng.random()
        if action < 0.5 or not live:
            name = f"p{step}"
            live[name] = bound(name, f"n{rng.randrange(6)}", cpu=rng.choice(["100m", "1", "250m"]))
            state.on_pod("ADDED", live[name], None)
        elif action < 0.8:
            name = rng.choice(sorted(live))
            state.on_pod("DELETED", live.pop(name), None)
        elif action < 0.85:
            name = rng.choice(sorted(live))
            done = {**live.pop(name), "status": {"phase": "Succeeded"}}
            state.on_pod("MODIFIED", done, None)
        elif action < 0.95:
            # An update of a running pod: the kubelet's status, an in-place resize, a label.
            name = rng.choice(sorted(live))
            live[name] = updated(live[name], rng)
            state.on_pod("MODIFIED", live[name], None)
        else:
            i = rng.randrange(6)
            state.on_node("MODIFIED", slim_node(node(f"n{i}", cpu=rng.choice(["4", "8"]))), None)
        if step % 37 == 0:
            state.sync()
            state.snapshot()  # later events are applied to a live snapshot
    state.sync()
    nodes_now = {n["metadata"]["name"]: n for n in state.nodes.values()}
    assert len(nodes_now) == 6
    assert_equal_to_rebuilt(state, live)


def test_assumed_pod_counts_once_and_a_failed_bind_is_forgotten() -> None:
    state = ClusterState()
    state.on_node("ADDED", slim_node(node("n0")), None)
    state.sync()
    p = bound("web", "n0")
    reqs = pod_requests(p)
    state.assume("default/web", "uid-web", "n0", reqs, ())
    assert state.snapshot().arrays["pod_count"][0] == 1
    state.on_pod("MODIFIED", p, None)  # the watch confirms the bind
    state.forget("default/web", "uid-web")  # a late failure report must not undo a confirmed bind
    state.sync()
    assert state.snapshot().arrays["pod_count"][0] == 1
    assert_equal_to_rebuilt(state, {"web": p})

    state.assume("default/other", "uid-other", "n0", reqs, ())
    state.forget("default/other", "uid-other")
    state.sync()
    assert state.snapshot().arrays["pod_count"][0] == 1, "the failed bind no longer counts"


def test_a_bound_pod_resized_in_place_counts_its_new_requests() -> None:
    state = ClusterState()
    state.on_node("ADDED", slim_node(node("n0", cpu="4")), None)
    p = bound("web", "n0", cpu="1")
    state.on_pod("ADDED", p, None)
    state.sync()
    state.snapshot()
    grown = copy.deepcopy(p)
    grown["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
    grown["status"] = {
        "phase": "Running",
        "containerStatuses": [
            {"name": "c", "allocatedResources": {"cpu": "3"}, "resources": {"requests": {"cpu": "3"}}}
        ],
    }
    state.on_pod("MODIFIED", grown, None)
    state.sync()
    cpu = state.snapshot().resources.get("cpu")
    assert cpu is not None
    assert state.snapshot().arrays["requested"][cpu] == 3000, "the node counts the resized request"
    assert_equal_to_rebuilt(state, {"web": grown})


def test_confirmed_assumed_pod_keeps_its_counts_and_takes_its_labels_and_start_time() -> None:
    state = ClusterState()
    state.on_node("ADDED", slim_node(node("n0")), None)
    state.sync()
    pending = slim_pod({**pod("web", cpu="500m"), "status": {"phase": "Pending"}})
    pending["metadata"]["uid"] = "uid-web"
    reqs = pod_requests(pending)
    state.assume("default/web", "uid-web", "n0", reqs, (), safe_pod_info(pending), 0, pending)
    snap = state.snapshot()
    confirmed = copy.deepcopy(pending)
    confirmed["spec"]["nodeName"] = "n0"
    confirmed["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    state.on_pod("MODIFIED", confirmed, None)
    state.sync()
    assert state.snapshot() is snap, "confirming a bind rebuilds nothing"
    assert_equal_to_rebuilt(state, {"web": confirmed})
    running = {
        **confirmed,
        "status": {**confirmed["status"], "phase": "Running", "startTime": "2026-01-02T03:04:05Z"},
    }
    state.on_pod("MODIFIED", running, None)
    state.sync()
    row = snap.pods.rows["default/web"]
    assert snap.pods.evictable[row].start_time == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC).timestamp()
    relabelled = copy.deepcopy(running)
    relabelled["metadata"]["labels"] = {"app": "web"}
    state.on_pod("MODIFIED", relabelled, None)
    state.sync()
    assert snap.pods.infos[snap.pods.rows["default/web"]].labels == (("app", "web"),)
    assert_equal_to_rebuilt(state, {"web": relabelled})


def test_an_update_before_the_bind_lands_keeps_the_assumed_pod() -> None:
    state = ClusterState()
    state.on_node("ADDED", slim_node(node("n0")), None)
    p = bound("web", "n0")
    unbound = {**p, "spec": {k: v for k, v in p["spec"].items() if k != "nodeName"}}
    state.sync()
    state.assume("default/web", "uid-web", "n0", pod_requests(p), ())
    state.on_pod("MODIFIED", unbound, None)
    state.sync()
    assert state.counted() == {"default/web": "n0"}


def test_a_node_heartbeat_does_not_rebuild() -> None:
    state = ClusterState()
    n = node("n0")
    state.on_node("ADDED", slim_node(n), None)
    state.sync()
    first = state.snapshot()
    beat = {**n, "status": {**n["status"], "conditions": [{"type": "Ready", "lastHeartbeatTime": "now"}]}}
    state.on_node("MODIFIED", slim_node(beat), None)
    state.sync()
    assert state.snapshot() is first


def test_a_node_with_a_malformed_allocatable_is_left_out_not_fatal() -> None:
    state = ClusterState()
    bad = node("bad", cpu="lots")
    state.on_node("ADDED", slim_node(bad), None)
    state.on_node("ADDED", slim_node(node("good")), None)
    state.sync()
    assert state.snapshot().node_names == ["good"]


def assert_loop_applies_watch_events(leading: bool, pods: int, within_s: float) -> None:
    """Run the scheduling loop (as leader or follower), feed it ``pods`` bound pods' watch
    events and no pending pod: within ``within_s`` every event is applied."""
    state, queue = ClusterState(), SchedulingQueue()
    scheduler = Scheduler(Config(), state, queue, None, Telemetry(), lambda: leading, None)  # type: ignore[arg-type]
    stop = threading.Event()
    loop = threading.Thread(target=scheduler.run, args=(stop,))
    loop.start()
    try:
        state.on_node("ADDED", slim_node(node("n0")), None)
        for i in range(pods):
            scheduler.on_pod("ADDED", bound(f"p{i}", "n0", cpu="1m"), None)
        deadline = time.monotonic() + within_s
        while state.inbox and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not state.inbox, f"{len(state.inbox)} events still waiting"
        assert len(state.usage) == pods
    finally:
        stop.set()
        queue.close()
        loop.join()


def test_an_idle_loop_applies_watch_events_without_waiting_for_a_pod() -> None:
    # After a mass deletion (or any burst of events) the idle loop applies them as they
    # come, so the next pod's cycle does not start by applying thousands of them.
    assert_loop_applies_watch_events(leading=True, pods=WAKE_AT * 3, within_s=20)


def test_a_follower_applies_watch_events_while_another_replica_leads() -> None:
    # A replica that is not leader never schedules, but keeps its state current: its inbox
    # does not grow for as long as the other leads, and a takeover starts from a fresh state.
    assert_loop_applies_watch_events(leading=False, pods=10, within_s=10)


def test_pods_with_a_label_of_their_own_coming_and_going_leave_nothing_behind(monkeypatch: Any) -> None:
    # A StatefulSet's pods each carry their own name as a label (a Job's pods, its uid): every
    # pod interns a string and a label set. 3,000 of them come and go, 20 bound at a time, seen
    # as a follower (or an idle leader) sees them: applied by ``sync`` alone.
    monkeypatch.setattr(state_module, "REBUILD_INTERNED", 500)
    state = ClusterState()
    for i in range(3):
        state.on_node("ADDED", slim_node(node(f"n{i}")), None)
    state.sync()
    built = interned(state.snapshot())
    live: dict[str, dict[str, Any]] = {}
    most = 0
    for i in range(3000):
        p = bound(f"web-{i}", f"n{i % 3}")
        p["metadata"]["labels"] = {"app": "web", "statefulset.kubernetes.io/pod-name": f"web-{i}"}
        live[p["metadata"]["name"]] = p
        state.on_pod("ADDED", p, None)
        if len(live) > 20:
            gone = live.pop(f"web-{i - 20}")
            state.on_pod("DELETED", gone, None)
        state.sync()
        assert state._snapshot is not None
        most = max(most, interned(state._snapshot))
    # Bounded by the table as built (its 20 pods' names and label sets) and the 500 allowed,
    # not by the 3,000 pods that came and went (6,000 ids).
    assert most <= built + 2 * 21 + 500 + 10, most
    assert state.builds > 2
    # Each rebuild kept what the pods counted now hold.
    assert_equal_to_rebuilt(state, live)
    assert {state.snapshot().pods.infos[r].labels for r in state.snapshot().pods.rows.values()} == {
        tuple(sorted(p["metadata"]["labels"].items())) for p in live.values()
    }


def test_an_engine_keeping_its_caches_across_a_rebuild_places_as_a_fresh_one(monkeypatch: Any) -> None:
    # A rebuild renumbers the strings only pods had; the engine's kept caches compare integers.
    # Pending pods name node labels and values only gone pods had; churn rebuilds the table
    # between their batches; an engine that kept its caches must place them as a fresh one.
    monkeypatch.setattr(state_module, "REBUILD_INTERNED", 40)
    state = ClusterState()
    for i in range(4):
        labels = {"disk": "ssd" if i % 2 else "hdd", "rack": f"r{i // 2}"}
        state.on_node("ADDED", slim_node(node(f"n{i}", cpu="64", labels=labels)), None)
    state.sync()
    kept = Engine(Config())
    n = 0
    for batch in range(8):
        for _ in range(30):
            p = bound(f"web-{n}", f"n{n % 4}", cpu="10m")
            p["metadata"]["labels"] = {"app": "web", "statefulset.kubernetes.io/pod-name": f"web-{n}"}
            state.on_pod("ADDED", p, None)
            if n >= 10:
                state.on_pod("DELETED", bound(f"web-{n - 10}", f"n{(n - 10) % 4}", cpu="10m"), None)
            n += 1
        state.sync()
        gone = f"web-{n - 25}"
        pending = [
            pod(f"p{batch}-0", nodeSelector={"disk": "ssd"}),
            pod(f"p{batch}-1", nodeSelector={"disk": gone}),
            pod(
                f"p{batch}-2",
                affinity={
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "rack", "operator": "NotIn", "values": [gone, "r1"]}
                                    ]
                                }
                            ]
                        },
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 5,
                                "preference": {
                                    "matchExpressions": [
                                        {"key": "disk", "operator": "In", "values": [gone, "hdd"]}
                                    ]
                                },
                            }
                        ],
                    }
                },
            ),
            pod(f"p{batch}-3", tolerations=[{"key": gone, "operator": "Exists"}]),
        ]
        snap = state.snapshot()
        got = kept.schedule(snap, pending).placements
        want = Engine(Config(), reuse=False).schedule(snap, pending).placements
        assert [(p.pod, p.node, p.message) for p in got] == [(p.pod, p.node, p.message) for p in want], batch
        assert [p.node is None for p in got] == [False, True, False, False], batch
    assert state.builds > 3
