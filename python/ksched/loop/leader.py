"""Leader election on a coordination.k8s.io/v1 Lease, through the client's ``leaderelection``.

The library does the election (acquire, renew every retry period, give up
after the renew deadline). Two things it lacks are added here: releasing the
lease on shutdown (so a successor need not wait out the lease), and a check
that is false *at once* when renewals stop succeeding, not only when the
library notices: :meth:`Leadership.is_leader` also requires the last
successful renewal to be younger than the renew deadline. A replica that
loses the lease stops binding at once and stands for election again as a
follower. (kube-scheduler exits instead, to be restarted with fresh caches;
ksched's caches are kept by informers that run whatever the leadership, so
rejoining keeps them warm and spares a relist.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from ksched.config import LeaderElectionConfig

log = logging.getLogger(__name__)
# The library logs every renewal at INFO; keep its warnings only.
logging.getLogger("leaderelection").setLevel(logging.WARNING)


class _ReleasableLeaseLock:
    """The Lease lock the library drives (``store``: a client LeaseLock), with three additions:
    it refuses to renew once released; it reports an unreachable API server as a failed
    attempt (the library only expects ApiException, and a refused connection would end its
    election thread); and it records when this replica's last successful write was sent
    (``renewed_at``): the lease it wrote runs from then, whatever the library observes later."""

    def __init__(self, name: str, namespace: str, identity: str, store: Any = None) -> None:
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.store = store if store is not None else LeaseLock(name, namespace, identity)
        self.released = False
        self.renewed_at = 0.0

    def get(self, name: str, namespace: str) -> tuple[bool, Any]:
        try:
            return self.store.get(name, namespace)  # type: ignore[no-any-return]
        except (urllib3.exceptions.HTTPError, OSError) as err:
            log.warning("lease %s/%s: %s", namespace, name, err)
            return False, err

    def create(self, name: str, namespace: str, election_record: Any) -> bool:
        sent = time.monotonic()  # a wall-clock step must not stretch the lease
        try:
            created = bool(self.store.create(name, namespace, election_record))
        except (urllib3.exceptions.HTTPError, OSError) as err:
            log.warning("lease %s/%s: %s", namespace, name, err)
            return False
        if created and election_record.holder_identity == self.identity:
            self.renewed_at = sent
        return created

    def update(self, name: str, namespace: str, updated_record: Any) -> bool:
        if self.released:
            return False
        sent = time.monotonic()  # a wall-clock step must not stretch the lease
        try:
            updated = bool(self.store.update(name, namespace, updated_record))
        except (urllib3.exceptions.HTTPError, OSError) as err:
            log.warning("lease %s/%s: %s", namespace, name, err)
            return False
        if updated and updated_record.holder_identity == self.identity:
            self.renewed_at = sent
        return updated


class Leadership:
    def __init__(
        self,
        config: LeaderElectionConfig,
        identity: str,
        on_lost: Callable[[], None],
        store: Any = None,
    ) -> None:
        """``store``: what reads and writes the Lease (default: the client's LeaseLock)."""
        self.config = config
        self.store = store
        self.identity = identity
        self.on_lost = on_lost
        self.leading = threading.Event()
        self._elector: Any = None
        self._lock: _ReleasableLeaseLock | None = None
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.config.leader_elect

    def start(self) -> None:
        if not self.enabled:
            self.leading.set()
            return
        c = self.config
        self._lock = _ReleasableLeaseLock(c.resource_name, c.resource_namespace, self.identity, self.store)
        self._thread = threading.Thread(target=self._elect, name="leader-election", daemon=True)
        self._thread.start()

    def is_leader(self) -> bool:
        """True only while the Lease last seen names this replica and this replica's own last
        write of it was sent within the renew deadline. (The library's observed time is not
        enough: it is refreshed when another replica's record is read, so a leader that wakes
        after a freeze and finds the lease taken would otherwise count as leading until its
        renew loop gives up.)"""
        if not self.enabled:
            return True
        lock, elector = self._lock, self._elector
        if not self.leading.is_set() or lock is None or elector is None:
            return False
        record = getattr(elector, "observed_record", None)
        if getattr(record, "holder_identity", None) != self.identity:
            return False
        return time.monotonic() - lock.renewed_at < self.config.renew_deadline_s

    def leader_alive(self) -> bool:
        """Whether some replica (this one or another) holds a lease that has not run out."""
        if not self.enabled or self.is_leader():
            return True
        elector = self._elector
        record = getattr(elector, "observed_record", None)
        if elector is None or not getattr(record, "holder_identity", None):
            return False
        age_ms = time.time() * 1000 - elector.observed_time_milliseconds
        return bool(age_ms < self.config.lease_duration_s * 1000)

    def holder(self) -> str | None:
        """The identity holding the lease as last observed (None: unknown or free)."""
        if not self.enabled:
            return self.identity
        record = getattr(self._elector, "observed_record", None)
        return getattr(record, "holder_identity", None) or None

    def release(self) -> None:
        """Stop renewing and hand the lease back (holder cleared, as client-go's ReleaseOnCancel)."""
        if not self.enabled or self._lock is None:
            return
        was_leading = self.leading.is_set()
        self._lock.released = True
        self.leading.clear()
        if not was_leading:
            return
        api = client.CoordinationV1Api()
        c = self.config
        try:
            lease = api.read_namespaced_lease(c.resource_name, c.resource_namespace)
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            api.replace_namespaced_lease(c.resource_name, c.resource_namespace, lease)
            log.info("released lease %s/%s", c.resource_namespace, c.resource_name)
        except ApiException as err:
            log.warning("could not release lease: %s", err)

    def _elect(self) -> None:
        """Stand for election until released; a lost term starts a new candidacy."""
        c = self.config
        assert self._lock is not None
        while not self._lock.released:
            election = electionconfig.Config(
                self._lock,
                lease_duration=int(c.lease_duration_s),  # the Lease holds whole seconds
                renew_deadline=c.renew_deadline_s,
                retry_period=c.retry_period_s,
                onstarted_leading=self._started,
                onstopped_leading=self._stopped,
            )
            self._elector = leaderelection.LeaderElection(election)
            try:
                self._elector.run()  # returns when a term ends
            except Exception:
                log.exception("leader election failed; standing again")
                self.leading.clear()
                time.sleep(c.retry_period_s)

    def _started(self) -> None:
        log.info("%s became the leader", self.identity)
        self.leading.set()

    def _stopped(self) -> None:
        self.leading.clear()
        if self._lock is not None and self._lock.released:
            return
        log.error("lost the lease: binding stopped; standing for election again")
        self.on_lost()
