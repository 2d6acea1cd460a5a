"""Active-active replicas (``sharding``): Leases, who is live, who owns which node and pod,
and the engine and queue as a sharded replica uses them."""

from __future__ import annotations

import itertools
import time
from typing import Any

import orjson
import pytest
import yaml

from ksched.commands.shadow import render_status
from ksched.config import Config, LeaderElectionConfig, ShardingConfig, parse_config
from ksched.engine import Engine
from ksched.engine.snapshot import build_snapshot
from ksched.errors import ConfigError
from ksched.loop.client import ApiUnavailableError, Response
from ksched.loop.scheduling.queue import SchedulingQueue
from ksched.loop.shards import SHARD_LABEL, Shards, lease_name, owner
from tests.conftest import node, pod
from tests.unit.test_handoff_rbac import DEPLOY
from tests.unit.test_shadow import quiet_status
from tests.unit.wire_bodies import body as wire_body

SHARDING = ShardingConfig(
    enabled=True, lease_duration_s=10, renew_deadline_s=6, retry_period_s=2, read_deadline_s=4
)
ELECTION = LeaderElectionConfig()


class FakeLeases:
    """The Lease API of one namespace, as ``Kube.request`` reaches it."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.versions = itertools.count(1)
        self.down = False
        # The events posted (read back from their protobuf).
        self.events: list[dict[str, Any]] = []

    def request(
        self, method: str, path: str, *, query: Any = None, body: Any = None, raw: bytes = b"", **_: Any
    ) -> Response:
        if self.down:
            raise ApiUnavailableError("down")
        if path.endswith("/events"):
            assert method == "POST"
            self.events.append(wire_body(raw))
            return Response(201, b"{}")
        name = path.rsplit("/", 1)[1] if not path.endswith("/leases") else None
        if method == "GET" and name is None:
            selector = query["labelSelector"]
            key, _, value = selector.partition("=")
            items = [x for x in self.leases.values() if x["metadata"]["labels"].get(key) == value]
            return Response(200, orjson.dumps({"items": items}))
        if method == "GET":
            got = self.leases.get(name or "")
            return Response(200, orjson.dumps(got)) if got else Response(404, b"")
        if method == "POST":
            lease_name_ = body["metadata"]["name"]
            if lease_name_ in self.leases:
                return Response(409, b"")
            return self._store(lease_name_, body, uid=f"uid-{lease_name_}-{next(self.versions)}")
        if method == "PUT":
            current = self.leases.get(name or "")
            if current is None:
                return Response(404, b"")
            if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
                return Response(409, b"")
            return self._store(name or "", body, uid=current["metadata"]["uid"])
        if method == "DELETE":
            current = self.leases.get(name or "")
            if current is None:
                return Response(404, b"")
            if body["preconditions"]["uid"] != current["metadata"]["uid"]:
                return Response(409, b"")
            del self.leases[name or ""]
            return Response(200, b"{}")
        raise AssertionError(method)

    def _store(self, name: str, body: dict[str, Any], uid: str) -> Response:
        stored = {
            **body,
            "metadata": {**body["metadata"], "uid": uid, "resourceVersion": str(next(self.versions))},
        }
        self.leases[name] = stored
        return Response(200, orjson.dumps(stored))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def replica(api: FakeLeases, identity: str, clock: Clock, changes: list[str] | None = None) -> Shards:
    def changed() -> None:
        if changes is not None:
            changes.append(identity)

    return Shards(  # type: ignore[arg-type]
        SHARDING,
        ELECTION,
        identity,
        api,
        changed,
        clock=clock,
        wall=lambda: clock.now,
        sleep=lambda _: None,
        background=lambda call: call(),
    )


def tick_all(clock: Clock, replicas: list[Shards], seconds: float = 2.0) -> None:
    clock.now += seconds
    for r in replicas:
        r.tick()


# -- ownership ---------------------------------------------------------------------------------


NODES = [f"node-{i}" for i in range(300)]


def test_every_node_has_exactly_one_owner_and_the_split_is_even() -> None:
    members = ("a", "b", "c")
    counts = {m: sum(owner(members, n) == m for n in NODES) for m in members}
    assert sum(counts.values()) == len(NODES)
    assert min(counts.values()) > len(NODES) / 3 * 0.7


def test_a_replica_leaving_moves_only_its_own_nodes() -> None:
    before = {n: owner(("a", "b", "c"), n) for n in NODES}
    after = {n: owner(("a", "c"), n) for n in NODES}
    moved = {n for n in NODES if before[n] != after[n]}
    assert moved == {n for n in NODES if before[n] == "b"}


def test_replicas_that_disagree_only_about_a_third_never_both_own_a_node() -> None:
    # a thinks b is gone; c still counts b: a and c, each live to the other, never both claim a node.
    for n in NODES:
        assert not (owner(("a", "c"), n) == "a" and owner(("a", "b", "c"), n) == "c")


# -- leases --------------------------------------------------------------------------------------


def test_a_replica_binds_only_once_its_lease_has_been_renewed_for_a_read_deadline() -> None:
    api, clock = FakeLeases(), Clock()
    a = replica(api, "a", clock)
    a.tick()  # reads first (nothing yet), then creates its Lease
    assert a.members() == () and not a.active()
    assert api.leases[lease_name("ksched", "a")]["metadata"]["labels"] == {SHARD_LABEL: "ksched"}
    tick_all(clock, [a])
    assert a.members() == ("a",)
    assert not a.active()  # a joining replica waits: the others must read its Lease first
    tick_all(clock, [a])
    assert a.active()
    assert a.owns_node("node-1")


def test_two_replicas_split_the_nodes_and_a_stopped_one_hands_them_over_at_once() -> None:
    api, clock = FakeLeases(), Clock()
    changes: list[str] = []
    a, b = replica(api, "a", clock, changes), replica(api, "b", clock, changes)
    for _ in range(4):
        tick_all(clock, [a, b])
    assert a.members() == b.members() == ("a", "b")
    assert a.active() and b.active()
    own_a, own_b = a.own_nodes(NODES), b.own_nodes(NODES)
    assert own_a.isdisjoint(own_b) and own_a | own_b == set(NODES) and own_a and own_b
    b.stop()
    assert not b.active() and not b.owns_node(next(iter(own_b)))
    assert lease_name("ksched", "b") not in api.leases
    tick_all(clock, [a])
    assert a.members() == ("a",)
    assert a.own_nodes(NODES) == set(NODES)
    assert "a" in changes
    # Each replica's view, as an event on its own Lease (b's first view, read before its
    # Lease existed, is said by its next).
    said = [
        (e["regarding"]["kind"], e["regarding"]["name"], e["reason"], e["note"], e["reportingInstance"])
        for e in api.events
    ]
    lease_a, lease_b = lease_name("ksched", "a"), lease_name("ksched", "b")
    assert said == [
        ("Lease", lease_a, "KschedShardsChanged", "live replicas: a, b (2); before: none", "a"),
        ("Lease", lease_b, "KschedShardsChanged", "live replicas: a, b (2); before: a", "b"),
        ("Lease", lease_a, "KschedShardsChanged", "live replicas: a (1); before: a, b", "a"),
    ]
    assert all(
        e["regarding"]["apiVersion"] == "coordination.k8s.io/v1"
        and e["regarding"]["namespace"] == "kube-system"
        for e in api.events
    )


def test_a_replica_whose_lease_stops_changing_is_gone_after_the_lease_duration() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = replica(api, "a", clock), replica(api, "b", clock)
    for _ in range(4):
        tick_all(clock, [a, b])
    # b is killed after its last renewal (at 108 s): its Lease stays, unrenewed. a first
    # read that renewal at 110 s.
    for _ in range(4):
        tick_all(clock, [a])
    assert a.members() == ("a", "b")  # 116 s: unchanged for 6 s of a's clock
    tick_all(clock, [a])
    assert a.members() == ("a", "b")
    tick_all(clock, [a])  # 120 s: unchanged for a lease duration
    assert a.members() == ("a",)
    assert a.own_nodes(NODES) == set(NODES)


def test_a_replica_that_cannot_reach_the_api_server_stops_binding_within_the_renew_deadline() -> None:
    api, clock = FakeLeases(), Clock()
    a = replica(api, "a", clock)
    for _ in range(4):
        tick_all(clock, [a])
    assert a.active()
    api.down = True
    tick_all(clock, [a], 3.0)
    assert a.active()  # renewed and read 3 s ago: within both deadlines
    tick_all(clock, [a], 2.0)
    assert not a.active()  # its view of the others is 5 s old: past the 4 s read deadline
    tick_all(clock, [a], 2.0)
    # Back after 7 s without a renewal: the others may have taken its nodes, so it waits a read
    # deadline of renewals before binding again.
    api.down = False
    tick_all(clock, [a])
    assert not a.active()
    tick_all(clock, [a])
    assert not a.active()
    tick_all(clock, [a])
    assert a.active()


def test_a_replica_paused_for_less_than_its_renew_deadline_binds_again_at_its_next_reading() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = replica(api, "a", clock), replica(api, "b", clock)
    for _ in range(4):
        tick_all(clock, [a, b])
    clock.now += 5.0  # a is paused (SIGSTOP) 5 s: its reading is stale, its renewals unbroken
    assert not a.active()
    b.tick()
    assert b.members() == ("a", "b")  # unchanged for 5 s of b's clock: still live
    a.tick()
    assert a.active()


def test_a_replica_whose_lease_was_deleted_rejoins_as_a_newcomer() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = replica(api, "a", clock), replica(api, "b", clock)
    for _ in range(4):
        tick_all(clock, [a, b])
    del api.leases[lease_name("ksched", "a")]  # kubectl delete lease, by hand
    tick_all(clock, [b, a])
    assert b.members() == ("b",) and not a.active()
    tick_all(clock, [a, b])  # a recreates it, b reads it
    assert b.members() == ("a", "b") and not a.active()
    tick_all(clock, [a, b])
    assert not a.active()  # 2 s of renewals: the read deadline is 4 s
    tick_all(clock, [a, b])
    assert a.active()


def test_the_lease_of_a_replica_that_crashed_long_ago_is_deleted() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = replica(api, "a", clock), replica(api, "b", clock)
    for _ in range(2):
        tick_all(clock, [a, b])
    for _ in range(31):
        tick_all(clock, [a])
    assert set(api.leases) == {lease_name("ksched", "a")}


def test_a_pod_belongs_to_the_owner_of_its_nominated_node_else_of_its_uid() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = replica(api, "a", clock), replica(api, "b", clock)
    tick_all(clock, [a, b])
    tick_all(clock, [a, b])
    p = pod("web")
    p["metadata"]["uid"] = "uid-web"
    assert a.pod_owner(p) == b.pod_owner(p) == owner(("a", "b"), "uid-web")
    b_node = next(n for n in NODES if owner(("a", "b"), n) == "b")
    p["status"] = {"nominatedNodeName": b_node}
    assert a.pod_owner(p) == "b"


# -- configuration --------------------------------------------------------------------------------


def doc(**sections: Any) -> dict[str, Any]:
    return {"apiVersion": "ksched.io/v1alpha1", "kind": "KschedConfiguration", **sections}


def test_sharding_is_off_by_default() -> None:
    assert Config().sharding.enabled is False
    assert parse_config(doc()).sharding == ShardingConfig()


@pytest.mark.parametrize(
    ("sharding", "election", "error"),
    [
        (
            {"enabled": True, "leaseDuration": "7s"},
            {},
            "sharding.leaseDuration: must be greater than renewDeadline + retryPeriod",
        ),
        ({"leaseDuration": "10.5s"}, {}, "sharding.leaseDuration: must be whole seconds"),
        ({"retryPeriod": "2s"}, {}, "sharding.readDeadline: must be at least 2 x retryPeriod"),
        ({"enabled": True}, {"leaderElect": False}, "sharding.enabled: needs leaderElection.leaderElect"),
        ({"replicas": 3}, {}, "sharding"),
    ],
)
def test_bad_sharding_is_refused_with_its_key(
    sharding: dict[str, Any], election: dict[str, Any], error: str
) -> None:
    with pytest.raises(ConfigError, match=error.replace(".", r"\.").replace("+", r"\+")):
        parse_config(doc(sharding=sharding, leaderElection=election))


# -- the engine and the queue as a sharded replica uses them --------------------------------------


def test_the_engine_places_only_onto_the_nodes_it_is_given() -> None:
    # "b" is the emptiest node, but this replica owns only "a" and "c".
    snapshot = build_snapshot(
        [node("a"), node("b"), node("c")],
        [pod("x", cpu="3", node_name="a"), pod("y", cpu="2", node_name="c")],
    )
    engine = Engine(Config())
    (anywhere,) = engine.schedule(snapshot, [pod("p", cpu="1")]).placements
    (within,) = engine.schedule(snapshot, [pod("p", cpu="1")], nodes={"a", "c"}).placements
    assert (anywhere.node, within.node) == ("b", "c")
    (none,) = engine.schedule(snapshot, [pod("big", cpu="3")], nodes={"a", "c"}).placements
    assert none.node is None and none.nominated_node is None


def test_a_pod_another_replica_places_waits_until_the_replicas_change() -> None:
    q = SchedulingQueue(lambda: 1000.0)
    p = pod("web")
    p["metadata"]["uid"] = "uid-web"
    q.add(p)
    (qp,) = q.pop_batch(10, 0.0, 0.0)
    q.done_elsewhere(qp)
    assert q.counts()["elsewhere"] == 1
    assert q.pop_batch(10, 0.0, 0.0) == []
    q.reown()
    assert [x.key for x in q.pop_batch(10, 0.0, 0.0)] == ["default/web"]


def test_a_pod_this_replica_handed_over_comes_back_only_after_its_backoff() -> None:
    clock = Clock()
    q = SchedulingQueue(clock)
    p = pod("web")
    p["metadata"]["uid"] = "uid-web"
    q.add(p)
    (qp,) = q.pop_batch(10, 0.0, 0.0)
    q.done_elsewhere(qp, handed=True)
    q.add({**p, "status": {"nominatedNodeName": "n1"}})  # handed back at once
    assert q.pop_batch(10, 0.0, 0.0) == []
    clock.now += 1.0
    assert [x.key for x in q.pop_batch(10, 0.0, 0.0)] == ["default/web"]


# -- RBAC -----------------------------------------------------------------------------------------


class Recording(FakeLeases):
    def __init__(self) -> None:
        super().__init__()
        self.asked: set[str] = set()

    def request(self, method: str, path: str, **kwargs: Any) -> Response:
        list_ = method == "GET" and path.endswith("/leases")
        if not path.endswith("/events"):  # granted by ksched's own ClusterRole
            self.asked.add(
                "list"
                if list_
                else {"GET": "get", "POST": "create", "PUT": "update", "DELETE": "delete"}[method]
            )
        return super().request(method, path, **kwargs)


def test_the_sharding_role_grants_exactly_what_a_replica_asks_for() -> None:
    api, clock = Recording(), Clock()
    a, b = replica(api, "a", clock), replica(api, "b", clock)
    tick_all(clock, [a, b])
    api.leases[lease_name("ksched", "a")]["metadata"]["resourceVersion"] = "stale"  # written meanwhile
    for _ in range(32):
        tick_all(clock, [a])  # renewed, re-read after a conflict; b's Lease forgotten
    a.stop()
    (role,) = [
        d for d in yaml.safe_load_all((DEPLOY / "sharding" / "rbac.yaml").read_text()) if d["kind"] == "Role"
    ]
    (rule,) = role["rules"]
    assert rule["apiGroups"] == ["coordination.k8s.io"] and rule["resources"] == ["leases"]
    assert not rule.get("resourceNames")
    assert set(rule["verbs"]) == api.asked == {"get", "list", "create", "update", "delete"}
    helm = (DEPLOY / "helm" / "ksched" / "templates" / "sharding-rbac.yaml").read_text()
    assert "verbs: [get, list, create, update, delete]" in helm


def test_ksched_status_says_who_owns_what() -> None:
    sharding = {
        "enabled": True,
        "lease": "kube-system/ksched-shard-0123456789ab",
        "active": True,
        "members": ["a", "b", "c"],
        "handedOver": 4,
        "ownedNodes": 1667,
    }
    text = render_status(quiet_status(sharding=sharding), "127.0.0.1:10259")
    assert (
        "sharding:  3 live replica(s) (a, b, c); this one binds onto 1667 node(s); 4 pod(s) handed over"
        in text
    )
    joining = render_status(quiet_status(sharding={**sharding, "active": False}), "127.0.0.1:10259")
    assert "this one not binding yet; owns 1667 node(s)" in joining
    assert "sharding:" not in render_status(quiet_status(sharding={"enabled": False}), "127.0.0.1:10259")


def test_a_replica_that_cannot_read_the_leases_stops_renewing_so_the_others_take_its_share() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = replica(api, "a", clock), replica(api, "b", clock)
    for _ in range(4):
        tick_all(clock, [a, b])
    renewed = api.leases[lease_name("ksched", "a")]["spec"]["renewTime"]
    a._read = lambda: False  # type: ignore[method-assign]  # a list refused (RBAC) or timing out
    for _ in range(5):
        tick_all(clock, [a, b])
    assert api.leases[lease_name("ksched", "a")]["spec"]["renewTime"] == renewed
    assert not a.active() and b.members() == ("b",)


def test_a_renewal_answered_late_starts_a_new_run_counted_from_its_answer() -> None:
    api, clock = FakeLeases(), Clock()
    a = replica(api, "a", clock)
    for _ in range(3):
        tick_all(clock, [a])
    assert a.active()
    request = api.request

    def slow(method: str, path: str, **kwargs: Any) -> Any:
        if method == "PUT":
            clock.now += 7.0  # answered 7 s after it was sent: past the 6 s renew deadline
        return request(method, path, **kwargs)

    api.request = slow  # type: ignore[method-assign]
    tick_all(clock, [a])
    assert not a.active()  # the others may have counted it gone meanwhile: it waits again
    api.request = request  # type: ignore[method-assign]
    # The next renewal is answered at once, but 9 s after the slow one was sent: a new run too.
    for _ in range(2):
        tick_all(clock, [a])
        assert not a.active()
    tick_all(clock, [a])
    assert a.active()


def test_a_slow_event_post_never_holds_up_the_renewals() -> None:
    class SlowEvents(FakeLeases):
        def request(self, method: str, path: str, **kwargs: Any) -> Response:
            if path.endswith("/events"):
                time.sleep(1.0)  # the events' etcd, slow as the API server struggles
            return super().request(method, path, **kwargs)

    api, clock = SlowEvents(), Clock()
    a, b = (
        Shards(SHARDING, ELECTION, name, api, clock=clock, wall=lambda: clock.now)  # type: ignore[arg-type]
        for name in "ab"
    )
    started = time.monotonic()
    for _ in range(3):
        tick_all(clock, [a, b])  # each tick of a changes its view once at least
    assert time.monotonic() - started < 0.5
    assert a.members() == ("a", "b")
