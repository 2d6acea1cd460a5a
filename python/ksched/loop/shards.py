"""Active-active replicas (``sharding.enabled``): who owns which node and which pending pod.

Each replica holds a coordination.k8s.io/v1 Lease of its own, named
``<leaderElection.resourceName>-shard-<hash of its identity>`` and labelled
``ksched.io/shard-of: <resourceName>``, in ``leaderElection.resourceNamespace``. Every
retry period it renews that Lease and reads all of them (one list). A replica counts as
live while its Lease keeps changing: one whose ``renewTime`` has not moved for its
``leaseDurationSeconds``, as observed on this replica's own clock (client-go's rule, so
clocks need not agree), is gone, and so is one whose Lease was deleted (a replica stopped
with SIGTERM deletes its own).

**Ownership** is rendezvous hashing (highest random weight) over the live identities:
a node belongs to the live replica with the highest ``hash(identity, node)``; a pending pod
of a gang to the replica with the highest hash of its PodGroup, another to the owner of the
node it is nominated to, else to the one with the highest hash of its uid. When a replica
leaves, only its own nodes and pods move, each to the replica that ranks next for it, so
two replicas that agree on each other's life never both own a node, whatever they think
of a third.

**Binding** is allowed only onto owned nodes, and only while this replica is *active*:
its own last renewal is younger than the renew deadline, its last reading of the Leases
younger than the read deadline, and its current run of renewals (one with no gap of a renew
deadline) started at least one read deadline ago. That last rule makes a replica that joins
(or comes back after a pause) wait until every replica still binding has read its Lease and
given up the nodes that are now its own: each of them stops binding once its own reading is
a read deadline old. A replica that counts another one gone has not seen its Lease change
for a lease duration; the other stopped binding a renew deadline after its last renewal,
which the rule ``renewDeadline + retryPeriod < leaseDuration`` puts before that.

Reads the clock it is given and writes only its own Lease (and deletes Leases that have not
changed for :data:`FORGET_AFTER` lease durations: replicas that crashed), and an event on its
own Lease each time the live replicas it counts change (``KschedShardsChanged``: who they are
now, and before), so ``kubectl get events`` shows each replica's view, and where two disagreed.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from ksched.config import LeaderElectionConfig, ShardingConfig
from ksched.engine.gangs import pod_group_of
from ksched.loop.client import ApiUnavailableError, Kube
from ksched.loop.events import SHARDS_CHANGED, event_request
from ksched.loop.protobuf import PROTOBUF, readable
from ksched.objects import Obj, meta, spec

log = logging.getLogger(__name__)

SHARD_LABEL = "ksched.io/shard-of"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
# A Lease unchanged for this many of its durations belongs to a replica that crashed: deleted.
FORGET_AFTER = 6
HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409


def in_background(call: Callable[[], None]) -> None:
    threading.Thread(target=call, name="shards-event", daemon=True).start()


def lease_name(resource_name: str, identity: str) -> str:
    """The Lease a replica holds: a DNS-1123 name whatever its identity (host_uuid)."""
    return f"{resource_name}-shard-{hashlib.sha256(identity.encode()).hexdigest()[:12]}"


def rank(member: str, key: str) -> int:
    """Rendezvous weight of ``key`` for ``member``: the member with the highest owns the key."""
    digest = hashlib.blake2b(f"{member}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner(members: Iterable[str], key: str) -> str | None:
    """The member that owns ``key`` (None: no member)."""
    best: tuple[int, str] | None = None
    for m in members:
        r = (rank(m, key), m)
        if best is None or r > best:
            best = r
    return None if best is None else best[1]


def micro_time(wall: float) -> str:
    """A Lease's MicroTime."""
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class _Seen:
    """One Lease as this replica last read it: its renewTime, and when (this replica's
    monotonic clock) that value was first read."""

    holder: str
    renew_time: str
    duration_s: float
    changed_at: float
    uid: str = ""
    resource_version: str = ""


@dataclass
class Membership:
    """The live replicas as last read, and the owner of each node asked about under them."""

    members: tuple[str, ...] = ()
    version: int = 0
    nodes: dict[str, str | None] = field(default_factory=dict)


class Shards:
    """This replica's Lease, the live replicas, and who owns what (thread-safe)."""

    def __init__(
        self,
        config: ShardingConfig,
        election: LeaderElectionConfig,
        identity: str,
        kube: Kube,
        on_change: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        background: Callable[[Callable[[], None]], None] = in_background,
    ) -> None:
        self.config = config
        self.identity = identity
        self.kube = kube
        self.namespace = election.resource_namespace
        self.group = election.resource_name
        self.name = lease_name(election.resource_name, identity)
        self.on_change = on_change
        self.clock = clock
        self.wall = wall
        self.sleep = sleep
        # Runs what must not hold up the renewals: the event of a membership change, whose
        # API server (or the events' etcd) is likely slow just then.
        self.background = background
        self._lock = threading.Lock()
        self._view = Membership()
        self._seen: dict[str, _Seen] = {}
        self._lease: Obj | None = None
        # Monotonic times: the last renewal sent that succeeded, the start of the current
        # run of renewals, the last reading of the Leases that succeeded.
        self._renewed = -float("inf")
        self._streak = float("inf")
        self._listed = -float("inf")
        self._released = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Pods handed to another replica's node, and binds refused because ownership moved.
        self.handed_over = 0

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    # -- who owns what -------------------------------------------------

    def members(self) -> tuple[str, ...]:
        with self._lock:
            return self._view.members

    def active(self) -> bool:
        """Whether this replica may bind now (see the module's docstring)."""
        if not self.enabled:
            return True
        now = self.clock()
        renew, read = self.config.renew_deadline_s, self.config.read_deadline_s
        with self._lock:
            return (
                not self._released
                and now - self._renewed < renew
                and now - self._listed < read
                and now - self._streak >= read
                and self.identity in self._view.members
            )

    def node_owner(self, node: str) -> str | None:
        with self._lock:
            view = self._view
        found = view.nodes.get(node, "")
        if found == "":
            found = view.nodes[node] = owner(view.members, node)
        return found

    def owns_node(self, node: str) -> bool:
        """Whether this replica may bind onto ``node`` now."""
        return not self.enabled or (self.active() and self.node_owner(node) == self.identity)

    def own_nodes(self, names: Iterable[str]) -> set[str]:
        """Those of ``names`` this replica owns under the live replicas last read."""
        return {n for n in names if self.node_owner(n) == self.identity}

    def pod_owner(self, pod: Obj) -> str | None:
        """The replica that places ``pod``: a gang member's is the owner of its PodGroup (the
        gang is placed whole by one replica), another pod's the owner of its nominated node,
        else of its uid."""
        group = pod_group_of(pod)
        if group is not None:
            return self.group_owner(group)
        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        if nominated:
            return self.node_owner(str(nominated))
        return owner(self.members(), str(meta(pod).get("uid", "")))

    def group_owner(self, group: str) -> str | None:
        return owner(self.members(), f"podgroup/{group}")

    def status(self) -> dict[str, Any]:
        with self._lock:
            view = self._view
        return {
            "enabled": self.enabled,
            "lease": f"{self.namespace}/{self.name}",
            "active": self.active(),
            "members": list(view.members),
            "handedOver": self.handed_over,
        }

    # -- the Lease loop ------------------------------------------------

    def start(self) -> None:
        if not self.enabled:
            return
        self._thread = threading.Thread(target=self._loop, name="shards", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop binding, stop renewing and, a read deadline later (the others' pod watches
        show its last binds meanwhile), delete this replica's Lease, so that the others take
        its nodes over at their next reading rather than a lease duration later."""
        if not self.enabled:
            return
        with self._lock:
            self._released = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.config.retry_period_s + 5)
        lease = self._lease
        if lease is None:
            return
        # The others take its nodes at their next reading: let their pod watches show its last
        # binds first.
        self.sleep(self.config.read_deadline_s)
        precondition = {"preconditions": {"uid": meta(lease).get("uid")}}
        try:
            r = self.kube.request("DELETE", f"{self._leases()}/{self.name}", body=precondition)
        except ApiUnavailableError as err:
            log.warning("sharding: could not delete lease %s: %s", self.name, err)
            return
        if r.ok or r.status == HTTP_NOT_FOUND:
            log.info("sharding: deleted lease %s/%s", self.namespace, self.name)
        else:
            log.warning("sharding: deleting lease %s: HTTP %d", self.name, r.status)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # a bug here must not end the loop: binding stops by the deadline
                log.exception("sharding: renewing or reading the leases failed")
            self._stop.wait(self.config.retry_period_s)

    def tick(self) -> None:
        """Read every replica's Lease, then renew this replica's. A replica that cannot read
        them does not renew: the others take its nodes and pods a lease duration later
        rather than leave them to a replica that has stopped binding."""
        if self._read():
            self._renew()

    def _leases(self) -> str:
        return LEASES.format(namespace=self.namespace)

    def _renew(self) -> None:
        sent = self.clock()
        now = micro_time(self.wall())
        lease = self._lease
        try:
            if lease is None:
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "labels": {SHARD_LABEL: self.group}},
                    "spec": {
                        "holderIdentity": self.identity,
                        "leaseDurationSeconds": int(self.config.lease_duration_s),
                        "acquireTime": now,
                        "renewTime": now,
                    },
                }
                r = self.kube.request("POST", self._leases(), body=body)
                if r.status == HTTP_CONFLICT:  # there from an earlier try: read it, renew next time
                    got = self.kube.request("GET", f"{self._leases()}/{self.name}")
                    self._lease = got.json() if got.ok else None
                    return
            else:
                body = {**lease, "spec": {**spec(lease), "renewTime": now}}
                r = self.kube.request("PUT", f"{self._leases()}/{self.name}", body=body)
                if r.status == HTTP_NOT_FOUND:
                    with self._lock:
                        # Gone (deleted by hand): the others may take its nodes; it rejoins.
                        self._streak = float("inf")
                if r.status in (HTTP_NOT_FOUND, HTTP_CONFLICT):
                    # Deleted (a replica took it for a crashed one's) or written meanwhile.
                    got = self.kube.request("GET", f"{self._leases()}/{self.name}")
                    self._lease = got.json() if got.ok else None
                    return
        except ApiUnavailableError as err:
            log.warning("sharding: renewing lease %s: %s", self.name, err)
            return
        received = self.clock()
        if not r.ok:
            log.warning("sharding: renewing lease %s: HTTP %d", self.name, r.status)
            return
        self._lease = r.json()
        with self._lock:
            # The write landed between ``sent`` and ``received``. This replica counts its Lease
            # from ``sent`` (the earliest it can have landed); a run of renewals goes on only if
            # this one was answered within a renew deadline of the last one sent, and a new run
            # counts from ``received`` (the latest), so the others have read it by the wait's end.
            gap = received - self._renewed
            if gap >= self.config.renew_deadline_s or self._streak == float("inf"):
                if self._renewed == -float("inf"):
                    why = "first renewal"
                elif gap >= self.config.renew_deadline_s:
                    why = f"renewals start again, the last sent {gap:.1f} s before this one's answer"
                else:
                    why = "its Lease was missing"
                log.info(
                    "sharding: lease %s: %s; binding in %.0f s", self.name, why, self.config.read_deadline_s
                )
                self._streak = received  # a new run of renewals: wait before binding
            self._renewed = sent

    def _read(self) -> bool:
        """Read every replica's Lease; whether that succeeded."""
        sent = self.clock()
        try:
            r = self.kube.request(
                "GET", self._leases(), query={"labelSelector": f"{SHARD_LABEL}={self.group}"}
            )
        except ApiUnavailableError as err:
            log.warning("sharding: reading the leases: %s", err)
            return False
        if not r.ok:
            log.warning("sharding: reading the leases: HTTP %d", r.status)
            return False
        self.observe(r.json().get("items") or [], sent, self.clock())
        return True

    def observe(self, leases: list[Obj], at: float, received: float | None = None) -> None:
        """Take in every replica's Lease as read by a request sent at ``at`` and answered at
        ``received``: who is live, and what changed. A change counts from ``received`` and
        liveness is judged at ``at``, so a slow answer never makes a replica look gone sooner;
        this replica's own view counts as read at ``at``."""
        received = at if received is None else received
        seen: dict[str, _Seen] = {}
        for lease in leases:
            m, s = meta(lease), spec(lease)
            name, holder = str(m.get("name", "")), s.get("holderIdentity")
            if not name or not holder:
                continue
            renew = str(s.get("renewTime") or s.get("acquireTime") or "")
            duration = float(s.get("leaseDurationSeconds") or self.config.lease_duration_s)
            before = self._seen.get(name)
            changed_at = received if before is None or before.renew_time != renew else before.changed_at
            seen[name] = _Seen(
                str(holder),
                renew,
                duration,
                changed_at,
                str(m.get("uid", "")),
                str(m.get("resourceVersion", "")),
            )
        self._seen = seen
        live = sorted({s.holder for s in seen.values() if at - s.changed_at < s.duration_s})
        with self._lock:
            self._listed = at
            if self.identity not in live:
                # Its Lease was not there (deleted by hand, or taken for a crashed replica's):
                # the others may own its nodes, so it rejoins as a newcomer does.
                self._streak = float("inf")
            was = self._view.members
            changed = tuple(live) != was
            if changed:
                self._view = Membership(tuple(live), self._view.version + 1)
        if changed:
            log.info("sharding: %d live replicas: %s", len(live), ", ".join(live))
            self.on_change()
            self.background(partial(self._report, tuple(live), was))
        self._forget_crashed(at)

    def _report(self, live: tuple[str, ...], before: tuple[str, ...]) -> None:
        """The event on this replica's own Lease that says whom it now counts live (a change
        seen before its Lease exists, at its first reading, is said by the next one). Sent
        once: a lost event loses a record, never a bind."""
        lease = self._lease
        if lease is None:
            return
        regarding = {
            "kind": "Lease",
            "apiVersion": "coordination.k8s.io/v1",
            "metadata": {"namespace": self.namespace, "name": self.name, "uid": meta(lease).get("uid")},
        }
        note = (
            f"live replicas: {', '.join(live) or 'none'} ({len(live)}); before: {', '.join(before) or 'none'}"
        )
        path, raw = event_request(regarding, "Normal", SHARDS_CHANGED, "Sharding", note, self.identity)
        try:
            r = self.kube.request("POST", path, raw=raw, content_type=PROTOBUF)
        except ApiUnavailableError as err:
            log.warning("sharding: event %s not recorded: %s", SHARDS_CHANGED, err)
            return
        if not r.ok:
            log.warning("sharding: event %s: HTTP %d: %s", SHARDS_CHANGED, r.status, readable(r.data))

    def _forget_crashed(self, at: float) -> None:
        """Delete the Leases left by replicas that crashed long ago (never this one's)."""
        for name, s in list(self._seen.items()):
            if name == self.name or at - s.changed_at < FORGET_AFTER * s.duration_s:
                continue
            body = {"preconditions": {"uid": s.uid, "resourceVersion": s.resource_version}}
            try:
                r = self.kube.request("DELETE", f"{self._leases()}/{name}", body=body)
            except ApiUnavailableError:
                return
            if r.ok:
                log.info("sharding: deleted lease %s of %s, gone since its last renewal", name, s.holder)
                self._seen.pop(name, None)
