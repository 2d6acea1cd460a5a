"""The steering controller inside ``ksched run``: every ``steering.interval``, the leader marks
the nodes that are hot, or that ksched's load estimate says will be, with a
``PreferNoSchedule`` taint under ``steering.taintKey``, and unmarks them once cool; with
``steering.warm``, the nodes a few heavy next pods from their line carry a lighter one under
``steering.warmKey`` (a hot node carries both: a level of 2, warm 1, unmarked 0).

Owns the marks' writes and what is reported of them: the Events on the node
(``KschedMarkedHot``, ``KschedMarkedWarm``, ``KschedUnmarked``), ``ksched_steering_*`` and
``/status``. Which nodes carry a mark is :mod:`ksched.loop.steering.marks`'s to decide, over
the values the scheduling cycle gives the engine (:meth:`~ksched.loop.metrics.load_model.LoadModel.scheduling`,
read on the cluster state's thread).

Only the nodes ``steering.nodeSelector`` selects are looked at: one outside it is never
marked, unmarked or counted in the cap, so two kscheds may each steer a pool of their own.
Only the leader writes. A replica that becomes leader reconciles with what the nodes carry:
it removes the marks it would not make (a crashed leader's too) and adds the missing ones. A
replica that loses the lease stops writing at once and forgets its hysteresis. Stopping
(SIGTERM) removes every mark under the key, within :data:`CLEAR_S`. Each write reads the node,
changes only the mark in its taints and sends them back with the node's resourceVersion (a
JSON merge patch): a 409 means the node changed meanwhile, and it is read again. Other taints
are never dropped. kube-scheduler's TaintToleration scores the marks (weight 3 of the default
profile, by how many a node carries); ksched's own engine leaves them out
(:func:`ksched.engine.snapshot.build_snapshot`).
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
from ksched.loop.events import MARKED_HOT, MARKED_WARM, UNMARKED
from ksched.loop.metrics.load_model import LoadModel
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.mirror.state import ClusterState
from ksched.loop.steering.marks import Decision, Graded, Reading, readings, schedulable, warmer
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
# A node's marks: none, the lighter one, both.
COOL, WARM, HOT = 0, 1, 2


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
        self.keys = self.config.mark_keys
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
        self.marks = Graded(
            self.config.margin,
            self.config.hold_s,
            self.config.max_share,
            self.config.warm_share,
            self.config.warm_leads if self.config.warm else None,
        )
        # The nodes marked hot, and those marked warm only, as of the last look, and why (None:
        # no value now, held).
        self.marked: dict[str, Reading | None] = {}
        self.warm: dict[str, Reading | None] = {}
        self.capped: dict[str, Reading | None] = {}
        self.leading = False
        self.last_look: float | None = None
        self.added = 0
        self.removed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steering", daemon=True)
        telemetry.steering_marked.set_function(lambda: float(len(self.marked)))
        telemetry.steering_warm.set_function(lambda: float(len(self.warm)))

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
            self.marked, self.warm, self.capped = {}, {}, {}
            self.marks.forget()
            return None
        if not self.leading:
            log.info("steering: leading; reconciling the %s marks with the nodes", self.key)
            self.leading = True
        now = self.clock()
        self.last_look = now
        view = self.state.ask(self._view, self._stop, VIEW_WAIT_S)
        if view is None:
            return None
        values, nodes, levels, odd = view
        hot = {n for n, level in levels.items() if level == HOT}
        decision = self.marks.decide(values, nodes, hot, set(levels), now)
        wanted = {n: HOT for n in decision.marks} | {n: WARM for n in decision.warm}
        # Where a write fails the node keeps what it carries, tried again at the next look.
        carried = dict(levels)
        # Marks coming off before marks going on: the nodes marked never outnumber the caps.
        for node in sorted(
            set(levels) | set(wanted), key=lambda n: (wanted.get(n, COOL) > levels.get(n, COOL), n)
        ):
            level, was = wanted.get(node, COOL), levels.get(node, COOL)
            if level == was and node not in odd:
                continue
            if level == COOL:
                note = self._unmark_note(node, nodes, decision, values)
            else:
                note = _mark_note(decision.marks.get(node) if level == HOT else decision.warm.get(node))
            if self._write(node, level, note):
                carried[node] = level
        why = {**decision.warm, **decision.marks}
        self.marked = {n: why.get(n) for n, level in sorted(carried.items()) if level == HOT}
        self.warm = {n: why.get(n) for n, level in sorted(carried.items()) if level == WARM}
        self.capped = decision.capped
        return decision

    def _view(self) -> tuple[dict[str, list[Reading]], list[str], dict[str, int], set[str]]:
        """On the state's thread: each node's readings, the schedulable nodes, the nodes that
        carry a mark now, with their level, and those whose marks are not the whole of a level
        (a hot mark without the warm one, from a ksched with ``warm`` off: written again)."""
        snapshot = self.state.snapshot()
        matrix = self.model.scheduling(snapshot)
        nodes = self.state.nodes
        carried = {n: self._carried(node) for n, node in nodes.items() if self._selects(node)}
        levels = {n: level for n, keys in carried.items() if (level := self._level(keys))}
        odd = {n for n, level in levels.items() if carried[n] != self._keys(level)}
        chosen = [n for n in schedulable(snapshot) if n in nodes and self._selects(nodes[n])]
        return readings(snapshot, matrix, self.lines, self.config.anticipate), chosen, levels, odd

    def _selects(self, node: Obj) -> bool:
        return self.config.selects(meta(node).get("labels"))

    def _carried(self, node: Obj) -> tuple[str, ...]:
        """Which of the marks (``self.keys``, in their order) the node's taints hold."""
        return _carried(spec(node).get("taints") or [], self.keys)

    def _level(self, carried: tuple[str, ...]) -> int:
        """The level of a node that carries these marks: the hot one (with the lighter or
        not) HOT, the lighter one only WARM, none COOL."""
        if self.key in carried:
            return HOT
        return WARM if carried else COOL

    def _unmark_note(
        self, node: str, nodes: Sequence[str], decision: Decision, values: Mapping[str, Sequence[Reading]]
    ) -> str:
        if node in decision.warm_capped:
            return (
                f"capped: at most {self.config.warm_share:g} of {len(nodes)} schedulable nodes carry "
                "a mark, the hottest first"
            )
        if node in decision.capped:
            return (
                f"capped: at most {self.config.max_share:g} of {len(nodes)} schedulable nodes are "
                "marked, the hottest first"
            )
        if node not in nodes:
            return "not schedulable (cordoned, or not in the node table)"
        if self.config.warm:  # it cooled below the lighter mark's line, judged with more room
            values = warmer(values, self.config.warm_leads)
        hottest = max(values.get(node, ()), key=lambda r: r.over, default=None)
        if hottest is None:
            return f"no value of a marking metric for {self.config.hold_s:g}s"
        return f"{hottest.note()} by more than {self.config.margin:g} of it for {self.config.hold_s:g}s"

    # -- writes ------------------------------------------------------------

    def _write(self, node: str, level: int, note: str, timeout: float | None = None) -> bool:
        """Give ``node`` the marks of ``level``, keeping every other taint, and report it.
        False where the node already was so, is gone, or the write failed (logged)."""
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
                now = spec(obj).get("taints") or []
                if (was := _carried(now, self.keys)) == self._keys(level):
                    return False  # already so (an earlier write the informer had not shown yet)
                taints = [t for t in now if not is_mark(t, self.keys)]
                taints += [{"key": k, "effect": MARK_EFFECT} for k in self._keys(level)]
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
                self._report(obj, level, self._level(was), note)
                return True
            if r.status != HTTP_CONFLICT:
                log.warning("steering: writing node %s: HTTP %d: %s", node, r.status, r.data[:300])
                return False
        log.warning("steering: node %s kept changing; not written after %d tries", node, WRITE_ATTEMPTS)
        return False

    def _keys(self, level: int) -> tuple[str, ...]:
        """The keys a node of ``level`` carries: a hot node both marks, a warm one the lighter."""
        if level == HOT:
            return self.keys
        return self.keys[1:] if level == WARM else ()

    def _report(self, node: Obj, level: int, was: int, note: str) -> None:
        """An Event and the counts for a node's change of marks: ``added`` counts a node marked
        from unmarked, ``removed`` one unmarked (hot and warm marks alike)."""
        ref = {"kind": "Node", "metadata": {"name": name(node), "uid": meta(node).get("uid")}}
        if was == COOL:
            self.added += 1
            self.telemetry.steering_marks.labels(change="added").inc()
        elif level == COOL:
            self.removed += 1
            self.telemetry.steering_marks.labels(change="removed").inc()
        if level == HOT:
            log.info("steering: marked %s hot: %s", name(node), note)
            self.event(ref, "Normal", MARKED_HOT, ACTION, f"other schedulers steered away: {note}")
        elif level == WARM:
            log.info("steering: marked %s warm: %s", name(node), note)
            self.event(ref, "Normal", MARKED_WARM, ACTION, f"other schedulers steered away, less: {note}")
        else:
            log.info("steering: unmarked %s: %s", name(node), note)
            self.event(ref, "Normal", UNMARKED, ACTION, note)

    def clear(self, within_s: float) -> int:
        """Remove the mark from every node that carries it (as this replica last wrote or the
        informer last saw), for at most ``within_s``. Returns how many were removed."""
        deadline = time.monotonic() + within_s
        carrying = set(self.marked) | set(self.warm)
        carrying |= {name(n) for n in self.nodes() if self._carried(n) and self._selects(n)}
        done = 0
        for node in sorted(carrying):
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("steering: stopping left the marks on %d node(s)", len(carrying) - done)
                break
            done += self._write(node, COOL, "ksched stopping: its marks are removed", timeout=left)
        self.marked, self.warm = {}, {}
        return done

    # -- /status -----------------------------------------------------------

    def status(self) -> dict[str, object]:
        return {
            "enabled": True,
            "mode": LEADER if self.leading else FOLLOWER,
            "taintKey": self.key,
            "lastLook": self.last_look,
            "warmKey": self.keys[1] if len(self.keys) > 1 else None,
            "marked": [_entry(n, r) for n, r in sorted(self.marked.items())],
            "warm": [_entry(n, r) for n, r in sorted(self.warm.items())],
            "capped": [_entry(n, r) for n, r in sorted(self.capped.items())],
            "added": self.added,
            "removed": self.removed,
        }


def _carried(taints: list[Obj], keys: tuple[str, ...]) -> tuple[str, ...]:
    """Which of the marks (``keys``, in their order) the taints hold."""
    return tuple(k for k in keys if any(is_mark(t, k) for t in taints))


def _mark_note(reading: Reading | None) -> str:
    return reading.note() if reading is not None else "held: no value yet"


def _entry(node: str, reading: Reading | None) -> dict[str, object]:
    return {"node": node, **(reading.as_json() if reading is not None else {})}
