"""Binder: posts bindings, Events and PodScheduled conditions on a thread pool.

Every write goes through the client's rate limit (``clientConnection``). A
bind answers with an :class:`Outcome` the cycle turns into queue moves:
``bound``; ``conflict`` (409: already bound, or the name now belongs to a
new pod); ``gone`` (404: deleted); ``error`` (5xx, 429, unreachable, other
4xx: retried after backoff, never in a tight loop); ``not_leader`` (the lease
was lost before the bind was sent: nothing is written). Events and the
condition copy upstream's: ``Scheduled`` / "Successfully assigned ns/pod to
node", and ``FailedScheduling`` with the engine's message plus
``PodScheduled=False`` reason ``Unschedulable``. A pod bound over a metric's
threshold (saturation, ``onSaturation: leastLoaded``) also gets a Normal
``PlacedOverThreshold`` event per metric, which names the node's value and the threshold.

A pod with unbound claims has its volumes bound first, on threads of their own
(:mod:`ksched.loop.scheduling.volume_binder` writes and waits); if that fails, a
``FailedScheduling`` event says why and the pod is retried. Preemption's
nominations and evictions are written on the report threads by
:mod:`ksched.loop.scheduling.evictor`. The bodies of events are :mod:`ksched.loop.events`'.

Binds of pods without volumes and their ``Scheduled`` events are written by
a few writer threads, each with one persistent connection of its own
(:class:`~ksched.loop.client.Connection`), fed from one queue: a writer takes
a waiting bind before any event, so events never hold a bind back. The writers
connect when they start, so no bind waits for a handshake. Bindings and events
are sent as protobuf (:mod:`ksched.loop.protobuf`), as kube-scheduler sends them. An event
refused by an unavailable API server is retried on the report threads.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from ksched.engine.storage import ClaimBinding
from ksched.loop import protobuf
from ksched.loop.client import MERGE_PATCH, ApiUnavailableError, Connection, Kube, Response, pod_path
from ksched.loop.events import PLACED_OVER_THRESHOLD, event_request, now, scheduled_message
from ksched.loop.protobuf import PROTOBUF
from ksched.loop.scheduling.evictor import Evictor
from ksched.loop.scheduling.volume_binder import VolumeBinder, VolumeBindingError
from ksched.loop.telemetry import Telemetry
from ksched.objects import Obj, meta

log = logging.getLogger(__name__)

HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
HTTP_SERVER_ERROR = 500
# An event refused by an unavailable API server is retried a few times (upstream's
# broadcaster retries too), so a short outage does not lose Scheduled events.
EVENT_TRIES = 3
EVENT_RETRY_S = 1.0
# Writer threads (one connection each) for binds and Scheduled events: each has one
# request at the API server at a time (pipelined events are read one after the other), so
# the writers' number is the concurrency. On the 2-core development VM, 32 drained binds and
# events 1.4x faster than 8 at 5,000 KWOK nodes, and 64 1.14x faster than 32 at 10,000, each
# at the same CPU per pod.
WRITERS = 64
# Events a writer takes at once and sends in one write (HTTP/1.1 pipelining); binds go one a write.
PIPELINE = 16


class Writer(Protocol):
    """What a writer thread sends through: a :class:`~ksched.loop.client.Connection`, or
    the client's pool (:class:`~ksched.loop.client.Kube`)."""

    def request(
        self, method: str, path: str, *, raw: bytes, content_type: str = ..., rate_limited: bool = ...
    ) -> Response: ...


def send_all(conn: Writer, requests: list[tuple[str, str, bytes]]) -> list[Response | ApiUnavailableError]:
    """The requests' answers (protobuf bodies): pipelined on a :class:`Connection`, else one
    after the other."""
    if isinstance(conn, Connection):
        return conn.pipeline(requests, content_type=PROTOBUF)
    answers: list[Response | ApiUnavailableError] = []
    for method, path, raw in requests:
        try:
            answers.append(conn.request(method, path, raw=raw, content_type=PROTOBUF))
        except ApiUnavailableError as err:
            answers.append(err)
    return answers


class Outcome(enum.Enum):
    BOUND = "bound"
    CONFLICT = "conflict"
    GONE = "gone"
    ERROR = "error"
    NOT_LEADER = "not_leader"


def report_workers(bind_workers: int) -> int:
    """Threads for events and conditions beside ``bind_workers`` binding threads."""
    return max(2, bind_workers // 2)


def writers(bind_workers: int) -> int:
    """Writer threads (and connections) for binds and Scheduled events."""
    return max(1, min(bind_workers, WRITERS))


def _binding(namespace: str, name: str, uid: object, node: str) -> bytes:
    # The uid makes the API server refuse a different pod that reused the name.
    return protobuf.binding(namespace, name, str(uid) if uid else None, node)


class Binder:
    """The cycle's one writer: binds, their Events and conditions, and (through the
    volume binder and the evictor it holds) volume binding and preemption."""

    def __init__(
        self,
        kube: Kube,
        workers: int,
        identity: str,
        telemetry: Telemetry,
        is_leader: Callable[[], bool],
        owns: Callable[[str], bool] | None = None,
    ) -> None:
        """``is_leader``: whether this replica may write now; ``owns``: whether it may bind
        onto a node now (sharding; None: onto any), checked just before each bind is sent."""
        self.kube = kube
        self.identity = identity
        self.telemetry = telemetry
        self.is_leader = is_leader
        self.owns = owns
        # Binds (and, behind them, Scheduled events) for the writer threads.
        self._binds: deque[tuple[Obj, str, Callable[[Outcome], None], str]] = deque()
        self._events: deque[tuple[Obj, str, str, str, str]] = deque()
        self._wake = threading.Condition()
        self._stopping = False
        self._writers = [
            threading.Thread(target=self._write, name=f"write-{i}", daemon=True)
            for i in range(writers(workers))
        ]
        for t in self._writers:
            t.start()
        # Pods with volumes to bind wait (up to bindTimeoutSeconds) for the PV controller:
        # on their own threads, so no pod without volumes waits behind them.
        self._volume_pool = ThreadPoolExecutor(workers, thread_name_prefix="bind-volumes")
        # Events and conditions have their own threads, so a bind never waits behind a report.
        self._reports = ThreadPoolExecutor(report_workers(workers), thread_name_prefix="report")
        self.volumes = VolumeBinder(kube)
        self.evictor = Evictor(kube, is_leader, telemetry, self._event)

    def bind(
        self,
        pod: Obj,
        node: str,
        done: Callable[[Outcome], None],
        note: str = "",
        volumes: tuple[ClaimBinding, ...] = (),
        volume_timeout_s: float = 600.0,
    ) -> None:
        """Bind in the background; ``done`` is called from a pool thread. ``note`` is
        appended to the Scheduled event (degraded mode says so there). ``volumes`` are
        bound first, waiting up to ``volume_timeout_s`` for the claims to be bound."""
        if volumes:
            self._volume_pool.submit(self._bind_and_report, pod, node, done, note, volumes, volume_timeout_s)
            return
        with self._wake:
            self._binds.append((pod, node, done, note))
            self._wake.notify()

    def unschedulable(self, pod: Obj, message: str) -> None:
        """Post FailedScheduling and set PodScheduled=False (in the background)."""
        self._reports.submit(self._failed, pod, message)

    def placed_over_threshold(self, pod: Obj, notes: list[str]) -> None:
        """Post a ``PlacedOverThreshold`` event per note beside the pod's Scheduled (in the background)."""
        for note in notes:
            self._reports.submit(self._event, pod, "Normal", PLACED_OVER_THRESHOLD, "Scheduling", note)

    def report(self, obj: Obj, kind: str, reason: str, action: str, note: str) -> None:
        """Post an event about a pod (or a node: an object of kind ``Node``) in the background."""
        self._reports.submit(self._event, obj, kind, reason, action, note)

    def clear_nomination(self, pod: Obj) -> None:
        """The pod fits nowhere, even by preempting: drop its nominated node (upstream
        clears it), so the room it held is free again (in the background)."""
        self._reports.submit(self.evictor.nominate, pod, None, [])

    def hand_over(self, pod: Obj, node: str, note: str, done: Callable[[bool], None]) -> None:
        """Nominate ``node``, another replica's (sharding), for the pod, as a hand-over (its
        ``ksched.io/HandedOver`` condition True, with ``note``): that replica places it, and
        the nomination holds no room there (in the background; ``done`` says whether the
        nomination was written)."""

        def nominate() -> None:
            written = False
            try:
                written = self.evictor.nominate(pod, node, [], hand_over=note)
            finally:
                done(written)

        self._reports.submit(nominate)

    def preempt(
        self, pod: Obj, node: str, victims: list[tuple[str, str, str]], done: Callable[[bool], None]
    ) -> None:
        """Nominate ``node`` for the pod and evict the victims (namespace, name, uid) there,
        as upstream's DefaultPreemption does: a DisruptionTarget condition, then a delete
        (the victims' own grace period), and a ``Preempted`` event on each (in the background;
        ``done`` says whether the nomination was written)."""

        def nominate() -> None:
            written = False
            try:
                written = self.evictor.nominate(pod, node, victims)
            finally:
                done(written)

        self._reports.submit(nominate)

    def shutdown(self) -> None:
        """Finish every bind (and report) already handed over, then stop."""
        # Binds with volumes queue their events for the writers: they finish first.
        self._volume_pool.shutdown(wait=True)
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        for t in self._writers:
            t.join()
        self._reports.shutdown(wait=True)

    def _write(self) -> None:
        """A writer thread: binds first, then events, on a connection of its own."""
        conn: Writer = self.kube.connection()
        if isinstance(conn, Connection):
            # Each writer's TLS handshake at start, not in front of the first binds (a new
            # leader's, or a backlog's).
            conn.open()
        wake, binds, events = self._wake, self._binds, self._events
        try:
            while True:
                with wake:
                    while not binds and not events:
                        if self._stopping:
                            return
                        wake.wait()
                    if binds:
                        # One bind a write: a bind pipelined behind a slow request on the same
                        # connection is read by the API server only when that one is answered, so
                        # it could land long after its lease check (the chaos soak saw 14 binds
                        # received 9 s after the lease expired, queued behind a bind waiting on
                        # an etcd restart). Events, which no lease guards, are still pipelined.
                        jobs = [binds.popleft()]
                        reports = []
                    else:
                        jobs = []
                        reports = [events.popleft() for _ in range(min(len(events), PIPELINE))]
                try:
                    if jobs:
                        self._bind_all(jobs, conn)
                    else:
                        self._post_events(reports, conn)
                except Exception:  # a bug here must not stop the writer: every later bind waits on it
                    log.exception("writer")
        finally:
            if isinstance(conn, Connection):
                conn.close()

    def _bind_all(self, jobs: list[tuple[Obj, str, Callable[[Outcome], None], str]], conn: Writer) -> None:
        """Binds taken together by a writer, sent in one write."""
        requests = []
        for pod, node, _, _ in jobs:
            m = meta(pod)
            ns, name = str(m.get("namespace")), str(m.get("name"))
            requests.append(("POST", pod_path(ns, name, "binding"), _binding(ns, name, m.get("uid"), node)))
            # The rate limit is waited out first, then the lease checked, then the binds sent:
            # the lease may have been lost while they waited in the queue or for tokens.
            self.kube.writes.acquire()
        if not self.is_leader():
            answers: list[Response | ApiUnavailableError | None] = [None] * len(jobs)
        elif self.owns is not None and not all(self.owns(node) for _, node, _, _ in jobs):
            # Ownership moved since the decision (sharding): another replica binds there now.
            answers = [None] * len(jobs)
        else:
            answers = list(send_all(conn, requests))
        for (pod, node, done, note), answer in zip(jobs, answers, strict=True):
            try:
                outcome = Outcome.NOT_LEADER if answer is None else self._outcome(pod, node, note, answer)
            except Exception:  # a bug here must not lose the pod: report it as an error, retried
                log.exception("binding %s/%s", meta(pod).get("namespace"), meta(pod).get("name"))
                outcome = Outcome.ERROR
            if outcome not in (Outcome.BOUND, Outcome.NOT_LEADER):
                self.telemetry.binding_errors.labels(reason=outcome.value).inc()
            try:
                done(outcome)
            except Exception:
                log.exception("after binding %s/%s", meta(pod).get("namespace"), meta(pod).get("name"))

    def _outcome(self, pod: Obj, node: str, note: str, answer: Response | ApiUnavailableError) -> Outcome:
        """What the API server's answer to a bind means; a Scheduled event is queued on success."""
        m = meta(pod)
        ns, name = str(m.get("namespace")), str(m.get("name"))
        if isinstance(answer, ApiUnavailableError):
            log.warning("bind %s/%s to %s: %s", ns, name, node, answer)
            return Outcome.ERROR
        if answer.ok:
            message = scheduled_message(ns, name, node) + note
            with self._wake:
                self._events.append((pod, "Normal", "Scheduled", "Binding", message))
                self._wake.notify()
            return Outcome.BOUND
        if answer.status == HTTP_CONFLICT:
            return Outcome.CONFLICT
        if answer.status == HTTP_NOT_FOUND:
            return Outcome.GONE
        log.warning(
            "bind %s/%s to %s: HTTP %d: %s", ns, name, node, answer.status, protobuf.readable(answer.data)
        )
        return Outcome.ERROR

    def _post_events(self, reports: list[tuple[Obj, str, str, str, str]], conn: Writer) -> None:
        """Events taken together by a writer, sent in one write; one refused as unavailable
        is retried on a report thread (a writer never sleeps)."""
        requests = []
        for report in reports:
            path, raw = event_request(*report, self.identity)
            self.kube.writes.acquire()
            requests.append(("POST", path, raw))
        for (pod, _, reason, _, _), (_, path, raw), answer in zip(
            reports, requests, send_all(conn, requests), strict=True
        ):
            m = meta(pod)
            ns, name = str(m.get("namespace")), str(m.get("name"))
            if isinstance(answer, ApiUnavailableError) or answer.status >= HTTP_SERVER_ERROR:
                self._reports.submit(self._retry_event, path, raw, ns, name, reason, 1)
            elif not answer.ok:
                log.warning(
                    "event %s for %s/%s: HTTP %d: %s",
                    reason,
                    ns,
                    name,
                    answer.status,
                    protobuf.readable(answer.data),
                )

    def _bind_and_report(
        self,
        pod: Obj,
        node: str,
        done: Callable[[Outcome], None],
        note: str,
        volumes: tuple[ClaimBinding, ...],
        volume_timeout_s: float,
        conn: Writer | None = None,
    ) -> None:
        try:
            outcome = self._bind_volumes(pod, node, volumes, volume_timeout_s) if volumes else None
            if outcome is None:
                outcome = self._bind(pod, node, note, conn or self.kube)
        except Exception:  # a bug here must not lose the pod: report it as an error, retried
            log.exception("binding %s/%s", meta(pod).get("namespace"), meta(pod).get("name"))
            outcome = Outcome.ERROR
        if outcome not in (Outcome.BOUND, Outcome.NOT_LEADER):
            self.telemetry.binding_errors.labels(reason=outcome.value).inc()
        done(outcome)

    def _bind(self, pod: Obj, node: str, note: str, conn: Writer) -> Outcome:
        m = meta(pod)
        ns, name = str(m.get("namespace")), str(m.get("name"))
        raw = _binding(ns, name, m.get("uid"), node)
        # The rate limit is waited out first, then the lease checked, then the bind sent: the
        # lease may have been lost while the bind waited in the queue or for a token.
        self.kube.writes.acquire()
        if not self.is_leader() or (self.owns is not None and not self.owns(node)):
            return Outcome.NOT_LEADER
        try:
            answer: Response | ApiUnavailableError = conn.request(
                "POST", pod_path(ns, name, "binding"), raw=raw, content_type=PROTOBUF
            )
        except ApiUnavailableError as err:
            answer = err
        return self._outcome(pod, node, note, answer)

    def _bind_volumes(
        self, pod: Obj, node: str, volumes: tuple[ClaimBinding, ...], timeout_s: float
    ) -> Outcome | None:
        """Bind the pod's claims (upstream ``BindPodVolumes``); None when they are bound."""
        if not self.is_leader():
            return Outcome.NOT_LEADER
        try:
            self.volumes.bind(node, volumes, timeout_s)
            return None
        except (VolumeBindingError, ApiUnavailableError) as err:
            m = meta(pod)
            why = f"binding volumes: {err}"
            log.warning("pod %s/%s on %s: %s", m.get("namespace"), m.get("name"), node, why)
            self._reports.submit(self._failed, pod, why)
            return Outcome.ERROR

    def _failed(self, pod: Obj, message: str) -> None:
        try:
            self._event(pod, "Warning", "FailedScheduling", "Scheduling", message)
            self._condition(pod, message)
        except Exception:
            log.exception("reporting FailedScheduling")

    def _event(self, pod: Obj, kind: str, reason: str, action: str, note: str) -> None:
        """Post an event, retried a few times while the API server is unavailable."""
        path, raw = event_request(pod, kind, reason, action, note, self.identity)
        m = meta(pod)
        self._retry_event(path, raw, str(m.get("namespace")), str(m.get("name")), reason, 0)

    def _retry_event(self, path: str, raw: bytes, ns: str, name: str, reason: str, attempt: int) -> None:
        """An event's tries from ``attempt`` on (a writer made the first); an event refused by
        an unavailable API server is retried (upstream's broadcaster retries too)."""
        problem = ""
        for tried in range(attempt, EVENT_TRIES):
            if tried:
                time.sleep(EVENT_RETRY_S * tried)
            try:
                r = self.kube.request("POST", path, raw=raw, content_type=PROTOBUF, rate_limited=True)
            except ApiUnavailableError as err:
                problem = str(err)
                continue
            if r.ok or r.status < HTTP_SERVER_ERROR:
                if not r.ok:
                    log.warning(
                        "event %s for %s/%s: HTTP %d: %s",
                        reason,
                        ns,
                        name,
                        r.status,
                        protobuf.readable(r.data),
                    )
                return
            problem = f"HTTP {r.status}: {protobuf.readable(r.data)}"
        log.warning("event %s for %s/%s not recorded: %s", reason, ns, name, problem)

    def _condition(self, pod: Obj, message: str) -> None:
        wanted = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        conditions = (pod.get("status") or {}).get("conditions") or []
        current: Obj = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
        if all(current.get(k) == v for k, v in wanted.items()):
            return  # already says so: no write
        m = meta(pod)
        ns, name = str(m.get("namespace")), str(m.get("name"))
        patch = {"status": {"conditions": [{**wanted, "lastProbeTime": None, "lastTransitionTime": now()}]}}
        try:
            r = self.kube.request(
                "PATCH", pod_path(ns, name, "status"), body=patch, content_type=MERGE_PATCH, rate_limited=True
            )
        except ApiUnavailableError as err:
            log.warning("PodScheduled condition for %s/%s: %s", ns, name, err)
            return
        if not r.ok and r.status != HTTP_NOT_FOUND:
            log.warning("PodScheduled condition for %s/%s: HTTP %d: %s", ns, name, r.status, r.data[:300])
