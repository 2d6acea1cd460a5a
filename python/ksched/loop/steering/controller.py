"""The steering controller inside ``ksched run``: every ``steering.interval``, the leader marks
the nodes that are hot, or that ksched's load estimate says will be, with a
``PreferNoSchedule`` taint under ``steering.taintKey``, and unmarks them once cool.

Owns the marks' writes and what is reported of them: the Events on the node
(``KschedMarkedHot``, ``KschedUnmarked``), ``ksched_steering_*`` and ``/status``. Which
nodes carry a mark is :mod:`ksched.loop.steering.marks`'s to decide, over the values the
scheduling cycle gives the engine (:meth:`~ksched.loop.metrics.load_model.LoadModel.scheduling`,
read on the cluster state's thread).

Only the nodes ``steering.nodeSelector`` selects are looked at: one outside it is never
marked, unmarked or counted in the cap, so two kscheds may each steer a pool of their own.
Only the leader writes. A replica that becomes leader reconciles with what the nodes carry:
it removes the marks it would not make (a crashed leader's too) and adds the missing ones. A
replica that loses the lease stops writing at once and forgets its hysteresis. Stopping
(SIGTERM) removes every mark under the key, within :data:`CLEAR_S`. Each write reads the node,
changes only the mark in its taints and sends them back with the node's resourceVersion (a
JSON merge patch): a 409 means the node changed meanwhile, and it is read again. Other taints
are never dropped. kube-scheduler's TaintToleration scores the mark (weight 3 of the default
profile); ksched's own engine leaves it out (:func:`ksched.engine.snapshot.build_snapshot`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ksched.config import Config
from ksched.config.steering import MARK_EFFECT, is_mark
from ksched.loop.client import ApiUnavailableError, Kube
from ksched.loop.events import MARKED_HOT, UNMARKED
from ksched.loop.metrics.load_model import LoadModel
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.mirror.state import ClusterState
from ksched.loop.steering.marks import Decision, Marks, Reading, readings, schedulable
from ksched.loop.telemetry import Telemetry
from ksched.objects import Obj, meta, name, spec

log = logging.getLogger(__name__)

JSON_MERGE_PATCH = "application/merge-patch+json"
HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
# Tries of one write whose node keeps changing under it (each 409 reads it again).
WRITE_ATTEMPTS = 5
# How long a look waits for the cluster state's thread to read the values.
VIEW_WAIT_S = 10.0
# How long stopping spends removing the marks: within a pod's default grace period (30 s),
# beside the rest of the shutdown.
CLEAR_S = 10.0
ACTION = "Steering"
LEADER, FOLLOWER = "leader", "follower"


class Steering:
    def __init__(
        self,
        config: Config,
        state: ClusterState,
        metrics: MetricStore,
        kube: Kube,
        telemetry: Telemetry,
        is_leader: Callable[[], bool],
        event: Callable[[Obj, str, str, str, str], None],
        nodes: Callable[[], Sequence[Obj]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config.steering
        self.key = self.config.taint_key
        self.lines = self.config.lines(config.metrics)
        self.state = state
        self.model = LoadModel(metrics, state.recent)
        self.kube = kube
        self.telemetry = telemetry
        self.is_leader = is_leader
        # Posts an event about a node: (object, type, reason, action, note).
        self.event = event
        # The informer's nodes (any thread): what stopping reads the marks from.
        self.nodes = nodes
        self.clock = clock
        self.marks = Marks(self.config.margin, self.config.hold_s, self.config.max_share)
        # The nodes marked as of the last look, and why (None: no value now, held).
        self.marked: dict[str, Reading | None] = {}
        self.capped: dict[str, Reading | None] = {}
        self.leading = False
        self.last_look: float | None = None
        self.added = 0
        self.removed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steering", daemon=True)
        telemetry.steering_marked.set_function(lambda: float(len(self.marked)))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop looking; where this replica leads, remove every mark under the key (within
        :data:`CLEAR_S`)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.leading and self.is_leader():
            self.clear(CLEAR_S)

    def _run(self) -> None:
        while not self._stop.wait(self.config.interval_s):
            try:
                self.look()
            except Exception:
                # A bug must not stop the scheduler: the next look tries again.
                log.exception("steering look failed")

    # -- one look --------------------------------------------------------

    def look(self) -> Decision | None:
        """Where this replica leads: decide the marks and write the changes. Returns the
        decision (None: a follower, or the values could not be read)."""
        if not self.is_leader():
            if self.leading:
                log.info("steering: not leading any more; the marks are the next leader's")
            self.leading = False
            self.marked, self.capped = {}, {}
            self.marks.cool_since.clear()
            return None
        if not self.leading:
            log.info("steering: leading; reconciling the %s marks with the nodes", self.key)
            self.leading = True
        now = self.clock()
        self.last_look = now
        view = self.state.ask(self._view, self._stop, VIEW_WAIT_S)
        if view is None:
            return None
        values, nodes, marked = view
        decision = self.marks.decide(values, nodes, marked, now)
        kept = {n: r for n, r in decision.marks.items() if n in marked}
        for node in sorted(marked - set(decision.marks)):
            note = self._unmark_note(node, nodes, decision, values)
            if not self._write(node, False, note):
                kept[node] = None  # still marked: tried again at the next look
        for node, reading in sorted(decision.marks.items()):
            if node not in marked and self._write(node, True, _mark_note(reading)):
                kept[node] = reading
        self.marked, self.capped = kept, decision.capped
        return decision

    def _view(self) -> tuple[dict[str, list[Reading]], list[str], set[str]]:
        """On the state's thread: each node's readings, the schedulable nodes, and the nodes
        that carry the mark now."""
        snapshot = self.state.snapshot()
        matrix = self.model.scheduling(snapshot)
        nodes = self.state.nodes
        marked = {n for n, node in nodes.items() if self._carries(node) and self._selects(node)}
        chosen = [n for n in schedulable(snapshot) if n in nodes and self._selects(nodes[n])]
        return readings(snapshot, matrix, self.lines, self.config.anticipate), chosen, marked

    def _selects(self, node: Obj) -> bool:
        return self.config.selects(meta(node).get("labels"))

    def _carries(self, node: Obj) -> bool:
        return any(is_mark(t, self.key) for t in spec(node).get("taints") or [])

    def _unmark_note(
        self, node: str, nodes: Sequence[str], decision: Decision, values: Mapping[str, Sequence[Reading]]
    ) -> str:
        if node in decision.capped:
            return (
                f"capped: at most {self.config.max_share:g} of {len(nodes)} schedulable nodes are "
                "marked, the hottest first"
            )
        if node not in nodes:
            return "not schedulable (cordoned, or not in the node table)"
        hottest = max(values.get(node, ()), key=lambda r: r.over, default=None)
        if hottest is None:
            return f"no value of a marking metric for {self.config.hold_s:g}s"
        return f"{hottest.note()} by more than {self.config.margin:g} of it for {self.config.hold_s:g}s"

    # -- writes ------------------------------------------------------------

    def _write(self, node: str, mark: bool, note: str, timeout: float | None = None) -> bool:
        """Add (``mark``) or remove the mark on ``node``, keeping every other taint, and report
        it. False where the node already was so, is gone, or the write failed (logged)."""
        path = f"/api/v1/nodes/{node}"
        kw: dict[str, Any] = {} if timeout is None else {"timeout": max(timeout, 0.1)}
        for _ in range(WRITE_ATTEMPTS):
            try:
                r = self.kube.request("GET", path, **kw)
                if r.status == HTTP_NOT_FOUND:
                    return False
                if not r.ok:
                    log.warning("steering: reading node %s: HTTP %d: %s", node, r.status, r.data[:300])
                    return False
                obj = r.json()
                taints = [t for t in spec(obj).get("taints") or [] if not is_mark(t, self.key)]
                if (len(taints) < len(spec(obj).get("taints") or [])) == mark:
                    return False  # already so (an earlier write the informer had not shown yet)
                if mark:
                    taints.append({"key": self.key, "effect": MARK_EFFECT})
                body = {
                    "metadata": {"resourceVersion": meta(obj).get("resourceVersion")},
                    "spec": {"taints": taints or None},
                }
                if not self.is_leader():
                    return False
                r = self.kube.request(
                    "PATCH", path, body=body, content_type=JSON_MERGE_PATCH, rate_limited=True, **kw
                )
            except ApiUnavailableError as err:
                log.warning("steering: writing node %s: %s", node, err)
                return False
            if r.ok:
                self._report(obj, mark, note)
                return True
            if r.status != HTTP_CONFLICT:
                log.warning("steering: writing node %s: HTTP %d: %s", node, r.status, r.data[:300])
                return False
        log.warning("steering: node %s kept changing; not written after %d tries", node, WRITE_ATTEMPTS)
        return False

    def _report(self, node: Obj, mark: bool, note: str) -> None:
        ref = {"kind": "Node", "metadata": {"name": name(node), "uid": meta(node).get("uid")}}
        if mark:
            self.added += 1
            self.telemetry.steering_marks.labels(change="added").inc()
            log.info("steering: marked %s hot: %s", name(node), note)
            self.event(ref, "Normal", MARKED_HOT, ACTION, f"other schedulers steered away: {note}")
        else:
            self.removed += 1
            self.telemetry.steering_marks.labels(change="removed").inc()
            log.info("steering: unmarked %s: %s", name(node), note)
            self.event(ref, "Normal", UNMARKED, ACTION, note)

    def clear(self, within_s: float) -> int:
        """Remove the mark from every node that carries it (as this replica last wrote or the
        informer last saw), for at most ``within_s``. Returns how many were removed."""
        deadline = time.monotonic() + within_s
        carrying = set(self.marked) | {name(n) for n in self.nodes() if self._carries(n) and self._selects(n)}
        done = 0
        for node in sorted(carrying):
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("steering: stopping left the mark on %d node(s)", len(carrying) - done)
                break
            done += self._write(node, False, "ksched stopping: its marks are removed", timeout=left)
        self.marked = {}
        return done

    # -- /status -----------------------------------------------------------

    def status(self) -> dict[str, object]:
        return {
            "enabled": True,
            "mode": LEADER if self.leading else FOLLOWER,
            "taintKey": self.key,
            "lastLook": self.last_look,
            "marked": [_entry(n, r) for n, r in sorted(self.marked.items())],
            "capped": [_entry(n, r) for n, r in sorted(self.capped.items())],
            "added": self.added,
            "removed": self.removed,
        }


def _mark_note(reading: Reading | None) -> str:
    return reading.note() if reading is not None else "held: no value yet"


def _entry(node: str, reading: Reading | None) -> dict[str, object]:
    return {"node": node, **(reading.as_json() if reading is not None else {})}
