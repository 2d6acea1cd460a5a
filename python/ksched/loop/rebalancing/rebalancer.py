"""The rebalancer inside ``ksched run``: every ``rebalance.interval``, judge which nodes are hot,
plan moves with the engine, reserve each target, then evict through the Eviction API.

Owns the live side of rebalancing: the hot-node tracker fed with each judged metric's fresh
sample (a stale or degraded metric is forgotten, so it never makes a node hot), the limits that
span looks (a token bucket of ``evictionsPerMinute``, per-workload cool-downs of
``workloadCooldown``; ``maxPerCycle`` and the per-node, per-namespace and per-workload limits
of one look are the planner's), the evictions and their events and telemetry, and what
``/status`` shows of it. A move's reservation is held before its eviction is posted, and
released when the eviction does not happen.

The plan itself is made on the thread that owns the cluster state (the scheduling or shadow
loop, through :meth:`~ksched.loop.mirror.state.ClusterState.at_this_point`): the snapshot, the metric
matrix and the engine's proof see one consistent state, and the reservations are held before
the next cycle. Until every usable sample was taken a window after an evicted pod left, the
pod's load is taken off its source's value, so one look's eviction is not followed by another
from a node the first already cooled.

Other schedulers' pods (``rebalance.otherSchedulers``) move only off a source that carries the
steering mark as the node watch shows it (:func:`steering_view`), which the dry run reads
the same way from the nodes it lists.

Only the leader evicts. A follower only tracks hot nodes; a shadow replica (``shadow.enabled``)
plans and records what it would have moved, and writes nothing.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

import orjson

from ksched.config import Config
from ksched.config.rebalance import RebalanceThreshold
from ksched.config.steering import SteeringConfig, is_mark
from ksched.engine import Engine
from ksched.engine.rebalance import Budget, HotNode, Move, Plan, SteeringView, plan
from ksched.loop.client import ApiUnavailableError, Kube, pod_path
from ksched.loop.events import REBALANCE_BLOCKED, REBALANCED
from ksched.loop.metrics.load_model import Departure, LoadModel
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.mirror.state import ClusterState
from ksched.loop.rebalancing.hot import HotTracker
from ksched.loop.rebalancing.reservations import EXPIRED, Reservation, Reservations
from ksched.loop.telemetry import Telemetry
from ksched.objects import Obj, spec
from ksched.objects import name as name_of

log = logging.getLogger(__name__)

LEADER, FOLLOWER, SHADOW = "leader", "follower", "shadow"
# Why an eviction did not happen (``ksched_rebalance_blocked_total{reason}``).
BLOCKED_PDB, BLOCKED_FAILED = "pdb", "failed"
HTTP_NOT_FOUND = 404
HTTP_TOO_MANY_REQUESTS = 429
# The StatusCause reason (its Go field Type, its JSON key "reason") of an eviction a PodDisruptionBudget refused (policy/v1's DisruptionBudgetCause).
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
# How long a look waits for the state's thread to plan (it applies queued events at least
# twice a second; a cycle on a large batch can take longer).
PLAN_WAIT_S = 10.0
ACTION = "Rebalancing"
# How often, between looks, each judged metric's fresh sample is counted toward hotSamples
# (a refresh is at least every second, ``refresh.min``).
FEED_S = 1.0
# Hot nodes named in a look's log line (the rest are counted).
SUMMARY_NODES = 5


class Rebalancer:
    def __init__(
        self,
        config: Config,
        state: ClusterState,
        metrics: MetricStore,
        engine: Engine,
        kube: Kube,
        reservations: Reservations,
        telemetry: Telemetry,
        is_leader: Callable[[], bool],
        shadow: bool,
        event: Callable[[Obj, str, str, str, str], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config.rebalance
        self.steering = config.steering
        self.state = state
        self.metrics = metrics
        self.engine = engine
        self.kube = kube
        self.reservations = reservations
        self.telemetry = telemetry
        self.is_leader = is_leader
        self.shadow = shadow
        # Posts an event about a pod or node: (object, type, reason, action, note).
        self.event = event
        self.clock = clock
        self.judged = tuple(m for m in config.metrics if engine.profile.uses(m.name))
        self.lines = {line.metric: line for line in self.config.thresholds(self.judged)}
        self.tracker = HotTracker(tuple(self.lines.values()), self.config.hot_samples)
        # The eviction rate's token bucket: a minute's worth at most (at least one eviction,
        # unless the rate is 0).
        rate = self.config.evictions_per_minute
        self._capacity = max(rate, 1.0) if rate > 0 else 0.0
        self._tokens = self._capacity
        self._refilled = clock()
        # Workload (``<Kind>/<namespace>/<name>``) -> until when it is not moved again.
        self.cooling: dict[str, float] = {}
        # The values it judges and proves with, and the evicted pods whose load their sources still show.
        self.load = LoadModel(
            metrics,
            state.recent,
            reservations,
            lambda key, uid: (u := state.usage.get(key)) is not None and u.uid == uid,
        )
        # The reservations of the last plan's moves, by the victim's uid, until evicted.
        self._reserved: dict[str, Reservation] = {}
        self.hot: list[HotNode] = []
        self.last_plan: Plan | None = None
        self.last_look: float | None = None
        self.evictions = 0
        # What a shadow replica would have evicted.
        self.would_evict = 0
        self.blocked: Counter[str] = Counter()
        # The last look's summary line, logged again only once it changes.
        self._summary = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rebalancer", daemon=True)
        telemetry.rebalance_reservations.set_function(lambda: float(len(reservations)))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def mode(self) -> str:
        if self.shadow:
            return SHADOW
        return LEADER if self.is_leader() else FOLLOWER

    def _run(self) -> None:
        next_look = time.monotonic() + self.config.interval_s
        while not self._stop.wait(max(0.0, min(FEED_S, next_look - time.monotonic()))):
            try:
                if time.monotonic() < next_look:
                    self.feed()
                    continue
                next_look = time.monotonic() + self.config.interval_s
                self.look()
            except Exception:
                # A bug must not stop the scheduler: the next look tries again.
                log.exception("rebalancer look failed")

    def feed(self) -> None:
        """Count each judged metric's fresh sample toward ``hotSamples``, between looks too: a
        refresh every 5-15 s under a look every 30 s would otherwise count one sample a look,
        and a node would be hot for ``hotSamples`` looks before it is judged so."""
        self.tracker.feed(self.metrics.latest)

    # -- one look --------------------------------------------------------

    def look(self) -> Plan | None:
        """Judge the nodes; where this replica leads (or shadows) and a node is hot, plan
        and act on the plan. Returns the plan (None: nothing was planned)."""
        now = self.clock()
        self.last_look = now
        for r in self.reservations.expire(now):
            log.info("reservation of %s for %s's replacement expired", r.move.target, r.move.pod)
            self.telemetry.rebalance_replacements.labels(outcome=EXPIRED).inc()
        self.hot = self._observe()
        mode = self.mode()
        if mode == FOLLOWER:
            return None
        if not self.hot:
            self.last_plan = Plan((), (), ())
            # Hot nodes that come back later are logged again, even with the same line.
            self._summary = ""
            return self.last_plan
        pods = self._pods_on(sorted({h.node for h in self.hot}))
        if pods is None:
            return None
        planned = self.state.ask(lambda: self._plan(pods, now, hold=mode == LEADER), self._stop, PLAN_WAIT_S)
        if planned is None:
            return None
        self.last_plan = planned
        self._log_look(planned)
        for move in planned.moves:
            if mode == SHADOW:
                self.would_evict += 1
                self.telemetry.rebalance_shadow_moves.inc()
                self._spend(move, now)
                # As if evicted at once: its node is judged without it until the metric would show it gone.
                self.load.departed.append(
                    Departure(move.pod, move.uid, move.source, move.metric, move.usage, now)
                )
                log.info("shadow: would move %s from %s to %s", move.pod, move.source, move.target)
            else:
                self._evict(move, now)
        return planned

    def _log_look(self, planned: Plan) -> None:
        """One line per look with hot nodes: how many, the moves planned, and why the other
        candidates stay (by kind of reason); repeated only when it changes, so a node that
        stays hot with nothing movable does not fill the log."""
        line = look_summary(planned)
        if line != self._summary:
            self._summary = line
            log.info("rebalancer: %s", line)

    def _observe(self) -> list[HotNode]:
        """Feed each judged metric's fresh sample to the tracker (forget a stale one); the
        hot nodes, and the hot-node gauge per metric."""
        self.tracker.feed(self.metrics.latest)
        hot = self.tracker.hot()
        counts = Counter(h.metric for h in hot)
        for name in self.lines:
            self.telemetry.rebalance_hot_nodes.labels(metric=name).set(counts[name])
        return hot

    def _pods_on(self, nodes: Sequence[str]) -> list[Obj] | None:
        """The running pods bound to ``nodes``, whole (the informer's copies leave out the
        volumes and annotations the planner's exclusions read); None when a list fails."""
        pods: list[Obj] = []
        for node in nodes:
            try:
                r = self.kube.request(
                    "GET",
                    "/api/v1/pods",
                    query={"fieldSelector": f"spec.nodeName={node},status.phase=Running"},
                )
            except ApiUnavailableError as err:
                log.warning("rebalancer: listing the pods on %s: %s", node, err)
                return None
            if not r.ok:
                log.warning("rebalancer: listing the pods on %s: HTTP %d: %s", node, r.status, r.data[:300])
                return None
            pods.extend(r.json().get("items") or [])
        return pods

    def _plan(self, pods: Sequence[Obj], now: float, *, hold: bool) -> Plan:
        """The plan for the current state (on the state's thread); its targets held
        (``hold``) before any eviction is posted."""
        snapshot = self.state.snapshot()
        judged = self.load.rebalancing(snapshot, self.lines, now)
        names = {m.name for m in judged.metrics}
        hot = [h for h in self.hot if h.metric in names]
        self.cooling = {w: until for w, until in self.cooling.items() if until > now}
        budget = Budget(
            evictions=min(self.config.max_per_cycle, self._tokens_left(now)),
            cooling=frozenset(self.cooling),
            placed_back=self.reservations.placed_back(),
        )
        out = plan(
            self.engine,
            self.config,
            snapshot,
            pods,
            judged.metrics,
            judged.values,
            hot,
            judged.measured,
            now,
            budget,
            self.reservations.holding(),
            steering_view(self.steering, self.state.nodes.values()),
            judged.caution,
        )
        if hold:
            for move in out.moves:
                until = now + self.config.reservation_timeout_s
                self._reserved[move.uid] = self.reservations.hold(move, until)
        return out

    # -- limits ------------------------------------------------------------

    def _tokens_left(self, now: float) -> int:
        rate = self.config.evictions_per_minute
        self._tokens = min(self._capacity, self._tokens + (now - self._refilled) * rate / 60.0)
        self._refilled = now
        return math.floor(self._tokens)

    def _spend(self, move: Move, now: float) -> None:
        """A move made (or, in shadow mode, that would have been): a token, and the
        workload's cool-down."""
        self._tokens = max(self._tokens - 1.0, 0.0)
        self.cooling[move.workload] = now + self.config.workload_cooldown_s

    # -- eviction ----------------------------------------------------------

    def _evict(self, move: Move, now: float) -> None:
        """Post the move's eviction (its reservation is held already) and report it."""
        namespace, _, name = move.pod.partition("/")
        pod = {"metadata": {"namespace": namespace, "name": name, "uid": move.uid}}
        reservation = self._reserved.pop(move.uid, None)
        if not self.is_leader():
            if reservation is not None:
                self.reservations.release(reservation)
            return
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": move.uid}},
        }
        try:
            r = self.kube.request("POST", pod_path(namespace, name, "eviction"), body=body, rate_limited=True)
            status, problem, budget = r.status, _message(r.data), _budget_refused(r.data)
        except ApiUnavailableError as err:
            status, problem, budget = 0, str(err), False
        if 200 <= status < 300:
            self.evictions += 1
            self._spend(move, now)
            self.load.departed.append(Departure(move.pod, move.uid, move.source, move.metric, move.usage))
            self.telemetry.rebalance_evictions.labels(reason=move.metric).inc()
            note = moved_note(move, self.lines[move.metric])
            log.info("rebalanced %s: %s", move.pod, note)
            self.event(pod, "Normal", REBALANCED, ACTION, note)
            self.event(
                {"kind": "Node", "metadata": {"name": move.source}},
                "Normal",
                REBALANCED,
                ACTION,
                f"evicted {move.pod}, {note}",
            )
            return
        if reservation is not None:
            self.reservations.release(reservation)
        if status == HTTP_NOT_FOUND:
            return  # gone already: nothing to move
        if status == HTTP_TOO_MANY_REQUESTS and budget:
            self.blocked[BLOCKED_PDB] += 1
            self.telemetry.rebalance_blocked.labels(reason=BLOCKED_PDB).inc()
            # Refused moves of the workload are not retried at every look.
            self.cooling[move.workload] = now + self.config.workload_cooldown_s
            log.info("rebalancer: moving %s to %s refused: %s", move.pod, move.target, problem)
            self.event(pod, "Warning", REBALANCE_BLOCKED, ACTION, f"not moved to {move.target}: {problem}")
            return
        self.blocked[BLOCKED_FAILED] += 1
        self.telemetry.rebalance_blocked.labels(reason=BLOCKED_FAILED).inc()
        log.warning("rebalancer: evicting %s: HTTP %d: %s", move.pod, status, problem)

    # -- /status -----------------------------------------------------------

    def status(self) -> dict[str, object]:
        last = self.last_plan
        return {
            "enabled": True,
            "mode": self.mode(),
            "profile": self.engine.profile.scheduler_name,
            "otherSchedulers": {
                "schedulerNames": list(self.config.other_schedulers.scheduler_names),
                "namespaces": list(self.config.other_schedulers.namespaces),
            },
            "lastLook": self.last_look,
            "hot": [h.as_json() for h in self.hot],
            "lastPlan": None
            if last is None
            else {
                "moves": [m.as_json() for m in last.moves],
                "skipped": dict(Counter(s.reason for s in last.skipped)),
            },
            "evictions": self.evictions,
            "wouldEvict": self.would_evict,
            "blocked": {r: self.blocked[r] for r in (BLOCKED_PDB, BLOCKED_FAILED)},
            "reservations": self.reservations.as_json(),
            "settling": self.reservations.settling(),
            "replacements": dict(self.reservations.outcomes),
        }


def steering_view(steering: SteeringConfig, nodes: Iterable[Obj]) -> SteeringView | None:
    """The steering marks other schedulers see: the nodes among ``nodes`` that carry the mark
    (None: steering is off, so no source steers another scheduler's replacement away)."""
    if not steering.enabled:
        return None
    key = steering.taint_key
    marked = frozenset(name_of(n) for n in nodes if any(is_mark(t, key) for t in spec(n).get("taints") or []))
    return SteeringView(key, marked)


def look_summary(planned: Plan) -> str:
    """``3 hot nodes (node-3, node-7, node-9), 1 move; not moved: 4 workload cooling down,
    2 no feasible node for its replacement``: a look's plan, its skip reasons without the
    per-pod detail that follows a reason's first ``" ("`` or ``": "``."""
    nodes = sorted({h.node for h in planned.hot})
    shown = ", ".join(nodes[:SUMMARY_NODES]) + (", ..." if len(nodes) > SUMMARY_NODES else "")
    moves = len(planned.moves)
    out = f"{len(nodes)} hot node{'s' * (len(nodes) != 1)} ({shown}), {moves} move{'s' * (moves != 1)}"
    kinds = Counter(re.split(r" \(|: ", s.reason, maxsplit=1)[0] for s in planned.skipped)
    if kinds:
        out += "; not moved: " + ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
    return out


def moved_note(move: Move, line: RebalanceThreshold) -> str:
    """The Rebalanced event's note: where the pod goes, and the metric's values that made
    the move (``moved to node-7: cpu 0.93 on node-3 over high 0.80; node-7 0.41 -> 0.55
    (low 0.60)``)."""
    side = "over" if line.direction == "above" else "under"
    return (
        f"moved to {move.target}: {move.metric} {move.source_before:.2f} on {move.source} {side} high "
        f"{line.high:.2f}; {move.target} {move.target_before:.2f} -> {move.target_after:.2f} "
        f"(low {line.low:.2f})"
    )


def _budget_refused(data: bytes) -> bool:
    """A 429 is a PodDisruptionBudget's refusal when its Status names a ``DisruptionBudget``
    cause (upstream's eviction REST handler); any other 429 is the API server throttling."""
    try:
        body = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        return False
    details = body.get("details") if isinstance(body, Mapping) else None
    causes = details.get("causes") if isinstance(details, Mapping) else None
    return any(isinstance(c, Mapping) and c.get("reason") == DISRUPTION_BUDGET_CAUSE for c in causes or ())


def _message(data: bytes) -> str:
    """An API answer's Status message (else its first bytes)."""
    try:
        body = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, Mapping) and body.get("message"):
        return str(body["message"])
    return data[:300].decode(errors="replace")
