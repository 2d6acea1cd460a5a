"""The rebalance planner: which pods to move off hot nodes, and the engine's proof of where
each replacement lands.

Owns the candidates on each hot node (pods a controller re-creates, scheduled by the
rebalancing profile or by another scheduler ``rebalance.otherSchedulers`` opts in, old enough,
not critical, not mirror or DaemonSet pods), their order
(lowest priority, then BestEffort < Burstable < Guaranteed, then largest usage), the limits
of one look, and the proof: the victim's replacement (its copy) is placed by the same
:class:`~ksched.engine.Engine` that schedules pods, carrying the victim's usage in the
engine's own estimate input (``Engine.schedule``'s ``moved``), so the engine adds its share
to each node's value as it does for any pod being placed (load.rs), against each judged
metric's threshold lowered to ``low`` and a node's own threshold where that is stricter
(``METRIC_STRICTER_THRESHOLDS``: a node's looser annotation never lets a target stay hot).
The source is out by its value, not by a node-affinity term, which would also change the
replacement's topology spread domains; the plan's victims count as gone (topology spread
skips them). A move is made only where the engine places it, and a candidate it cannot
place is skipped with the engine's own FailedScheduling message; each move's load is then
counted on its target (and taken off its source) before the next candidate is proved, and
its replacement holds its room as a nominated pod and its proved load on its target's
values, so two moves never fill one node twice. A source stops giving pods once it is no
longer hot. The share arithmetic is :mod:`ksched.engine.load`'s.

Another scheduler's pod: its replacement is placed by that scheduler, not steered to the
proved target. The proof (every kube-scheduler filter, plus the metric lines) shows that a
node exists that scheduler finds feasible and that stays cool; what keeps that scheduler from
picking the hot source again is the steering mark, which its TaintToleration scores down. So
such a pod is a candidate only where the source carries the mark now and the pod does not
tolerate it (:class:`SteeringView`); else it is skipped with :func:`source_not_marked`. Where
that scheduler bound a replacement back on the source all the same lately (``Budget.placed_back``),
its pods there stay (:func:`placed_back`).

Pure: it reads a snapshot, values and pods, and returns a :class:`Plan` (a proof marks the
victims terminating in the snapshot's pod table and puts them back). It never evicts,
reserves or reads the clock; the live loop (:mod:`ksched.loop`) and ``ksched rebalance
--dry-run`` act on or print what it returns.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from ksched.config import MetricConfig
from ksched.config.metrics import MISSING, ON_SATURATION
from ksched.config.rebalance import RebalanceConfig, RebalanceThreshold
from ksched.engine.estimate import estimated_usage
from ksched.engine.inputs import MIRROR_ANNOTATION
from ksched.engine.load import node_share
from ksched.engine.moves import (
    BUDGET_SPENT,
    COOLING,
    DAEMONSET,
    JOB_POD,
    LOCAL_STORAGE,
    MIRROR,
    MOVED_USAGE_ANNOTATION,
    NO_CONTROLLER,
    QOS_ORDER,
    RECREATING_KINDS,
    RESTARTING_KINDS,
    SYSTEM_CRITICAL,
    SYSTEM_CRITICAL_CLASSES,
    SYSTEM_CRITICAL_PRIORITY,
    TEMPLATE_HASH_LABELS,
    TERMINATING,
    Budget,
    HotNode,
    Move,
    Plan,
    Skipped,
    SteeringView,
    build_replacement,
    epoch,
    go_duration,
    has_local_storage,
    limit_reached,
    moved_usage,
    namespace_of,
    other_scheduler,
    pending_copy,
    placed_back,
    qos_class,
    source_not_marked,
    template_hash_of,
    tolerates_mark,
    too_young,
)
from ksched.engine.pods import pod_requests, priority
from ksched.engine.scheduler import Engine
from ksched.engine.snapshot import Snapshot
from ksched.errors import MalformedObjectError
from ksched.objects import Obj, controller_of, meta, pod_key, scheduler_name, spec

# The planner's callers read the types and reasons from here too (they live in moves).
__all__ = [
    "BUDGET_SPENT",
    "COOLING",
    "DAEMONSET",
    "JOB_POD",
    "LOCAL_STORAGE",
    "MIRROR",
    "MOVED_USAGE_ANNOTATION",
    "NO_CONTROLLER",
    "SYSTEM_CRITICAL",
    "TEMPLATE_HASH_LABELS",
    "TERMINATING",
    "Budget",
    "HotNode",
    "Move",
    "Plan",
    "Skipped",
    "SteeringView",
    "build_replacement",
    "go_duration",
    "limit_reached",
    "other_scheduler",
    "pending_copy",
    "plan",
    "qos_class",
    "source_not_marked",
    "too_young",
]

EXCLUDE, PENDING = MISSING[2], ON_SATURATION[0]
# A source's value in its own proof: past every line, finite (a non-finite value reads as
# none), so the engine counts it as over the line, not as missing.
OUT_OF_REACH = float(np.finfo(np.float64).max)
# How the engine names the metric filter in a placement's ``rejected_by`` (``Metric/<name>``).
METRIC_PLUGIN = "Metric/"


def plan(
    engine: Engine,
    config: RebalanceConfig,
    snapshot: Snapshot,
    pods: Sequence[Obj],
    metrics: Sequence[MetricConfig],
    values: npt.NDArray[np.float64],
    hot: Sequence[HotNode],
    measured: Callable[[str, MetricConfig], float | None],
    now: float,
    budget: Budget,
    reserved: Sequence[Obj] = (),
    steering: SteeringView | None = None,
    caution: npt.NDArray[np.float64] | None = None,
) -> Plan:
    """The moves that cool the ``hot`` nodes, each proved by ``engine``.

    ``pods``: the bound, running pods (any scheduler). ``values``: node x metric values of
    ``metrics`` (rows: the snapshot's), with the load estimate. ``measured(pod_key, metric)``:
    a pod's measured usage in engine units, None where unknown (then its estimate counts).
    ``reserved``: replacements already reserved (pending, with status.nominatedNodeName):
    their room is held, and their load is added to their node's values here (what their move
    was proved with, :data:`MOVED_USAGE_ANNOTATION`; else their estimate). ``steering``: the
    steering marks other schedulers see now (None: steering is off), which another scheduler's
    pod needs on its source. ``caution``: node x metric, the part of ``values`` that is the
    load estimate's deviations (None: none): a proof's filter reads it, its scores do not, as
    in placing."""
    planner = _Planner(
        engine, config, snapshot, metrics, values, measured, now, budget, reserved, steering, caution
    )
    on_node: dict[str, list[Obj]] = {}
    for pod in pods:
        on_node.setdefault(str(spec(pod).get("nodeName") or ""), []).append(pod)
    by_node: dict[str, list[HotNode]] = {}
    for h in hot:
        by_node.setdefault(h.node, []).append(h)
    for node in _hottest_first(hot):
        planner.cool(node, by_node[node], on_node.get(node, []))
    return Plan(tuple(hot), tuple(planner.moves), tuple(planner.skipped))


@dataclass(frozen=True)
class _Candidate:
    pod: Obj
    key: str
    controller: Obj
    # Per judged metric (``_Planner.lines`` order): the pod's usage in engine units.
    amounts: tuple[float, ...]
    order: tuple[int, int, float, str]
    workload: str


class _Planner:
    """One look's working state: the values as the moves so far leave them, the
    replacements holding room, and the counts the limits apply to."""

    def __init__(
        self,
        engine: Engine,
        config: RebalanceConfig,
        snapshot: Snapshot,
        metrics: Sequence[MetricConfig],
        values: npt.NDArray[np.float64],
        measured: Callable[[str, MetricConfig], float | None],
        now: float,
        budget: Budget,
        reserved: Sequence[Obj],
        steering: SteeringView | None,
        caution: npt.NDArray[np.float64] | None = None,
    ) -> None:
        self.engine = engine
        self.steering = steering
        self.config = config
        self.snapshot = snapshot
        self.measured = measured
        self.now = now
        self.budget = budget
        by_name = {m.name: k for k, m in enumerate(metrics)}
        # The judged metrics: their hot lines, configs and value columns.
        self.lines: list[RebalanceThreshold] = list(config.thresholds(tuple(metrics)))
        self.judged = [metrics[by_name[line.metric]] for line in self.lines]
        columns = [by_name[line.metric] for line in self.lines]
        self.values = np.array(values[:, columns], dtype=np.float64)
        self.caution = None if caution is None else np.array(caution[:, columns], dtype=np.float64)
        # A pod's load raises an "above" metric and lowers a "below" one (higher is better).
        self.sign = np.array(
            [1.0 if line.direction == "above" else -1.0 for line in self.lines], dtype=np.float64
        )
        self.proof_metrics = [_proof_metric(m, line) for m, line in zip(self.judged, self.lines, strict=True)]
        self.held: list[Obj] = list(reserved)
        # Usage the engine found no node for by the judged metrics alone, with its reason,
        # since the last move.
        self.hopeless: list[tuple[tuple[float, ...], str]] = []
        # The pod table rows of this plan's victims: they leave, so no proof counts them.
        self.leaving: list[int] = []
        self.moves: list[Move] = []
        self.skipped: list[Skipped] = []
        self.evictions = budget.evictions
        self.namespaces: dict[str, int] = {}
        self.workloads: dict[str, int] = {}
        for pod in reserved:
            row = snapshot.index.get(str((pod.get("status") or {}).get("nominatedNodeName") or ""))
            try:
                amounts = self._held_amounts(pod)
            except MalformedObjectError:
                continue
            if row is not None:
                self.values[row] += self._moves(amounts, self.snapshot.node_names[row])

    def cool(self, node: str, hot: Sequence[HotNode], pods: Sequence[Obj]) -> None:
        """Take candidates off ``node`` in order while it stays hot and the limits allow."""
        row = self.snapshot.index.get(node)
        columns = [k for k, line in enumerate(self.lines) if any(h.metric == line.metric for h in hot)]
        if row is None or not columns:
            return
        candidates = []
        for pod in pods:
            candidate = self._candidate(pod, node, columns[0])
            if candidate is not None:
                candidates.append(candidate)
        taken = self.budget.per_node.get(node, 0)
        for c in sorted(candidates, key=lambda c: c.order):
            still_hot = [k for k in columns if self.lines[k].hot(float(self.values[row, k]))]
            if not still_hot:
                return
            namespace = namespace_of(c.pod)
            if self.evictions <= 0:
                reason = BUDGET_SPENT
            elif taken >= self.config.max_per_node:
                reason = limit_reached("maxPerNode")
            elif self.namespaces.get(namespace, 0) >= self.config.max_per_namespace:
                reason = limit_reached("maxPerNamespace")
            elif self.workloads.get(c.workload, 0) >= self.config.max_per_workload:
                reason = limit_reached("maxPerWorkload")
            else:
                outcome = self._prove(c, node, row, still_hot[0])
                if isinstance(outcome, Move):
                    self.moves.append(outcome)
                    self.evictions -= 1
                    taken += 1
                    self.namespaces[namespace] = self.namespaces.get(namespace, 0) + 1
                    self.workloads[c.workload] = self.workloads.get(c.workload, 0) + 1
                    continue
                reason = outcome
            self.skipped.append(Skipped(c.key, node, reason))

    # -- candidates ----------------------------------------------------

    def _candidate(self, pod: Obj, node: str, column: int) -> _Candidate | None:
        """The pod as a candidate, or None (recorded as skipped, with why)."""
        key = pod_key(pod)
        reason = self._excluded(pod, node)
        if reason is None:
            controller = controller_of(pod)
            assert controller is not None
            workload = f"{controller.get('kind')}/{namespace_of(pod)}/{controller.get('name')}"
            if workload in self.budget.cooling:
                reason = COOLING
            else:
                try:
                    amounts = self._amounts(pod, measure=True)
                    order = (priority(pod), QOS_ORDER[qos_class(pod)], -amounts[column], key)
                except MalformedObjectError as e:
                    reason = f"invalid pod: {e.field}: {e.problem}"
                else:
                    return _Candidate(pod, key, controller, amounts, order, workload)
        self.skipped.append(Skipped(key, node, reason))
        return None

    def _excluded(self, pod: Obj, node: str) -> str | None:
        """Why the pod is not a candidate (None: it may be): the pods never moved first, then
        those moved only where the configuration opts in (``moveJobPods``, ``allowLocalStorage``),
        then another scheduler's pod whose source ``node`` does not steer its replacement away."""
        m = meta(pod)
        s = spec(pod)
        if m.get("deletionTimestamp") is not None:
            return TERMINATING
        if MIRROR_ANNOTATION in (m.get("annotations") or {}):
            return MIRROR
        controller = controller_of(pod)
        if controller is not None and controller.get("kind") == "DaemonSet":
            return DAEMONSET
        if controller is None or controller.get("kind") not in RECREATING_KINDS:
            return NO_CONTROLLER
        p = s.get("priority")
        if s.get("priorityClassName") in SYSTEM_CRITICAL_CLASSES or (
            isinstance(p, int) and p >= SYSTEM_CRITICAL_PRIORITY
        ):
            return SYSTEM_CRITICAL
        profile, scheduler = self.engine.profile.scheduler_name, scheduler_name(pod)
        if scheduler != profile and not self.config.other_schedulers.opted_in(scheduler, namespace_of(pod)):
            return other_scheduler(profile, scheduler)
        started = epoch((pod.get("status") or {}).get("startTime")) or epoch(m.get("creationTimestamp"))
        if started is None or self.now - started < self.config.min_pod_age_s:
            return too_young(self.config.min_pod_age_s)
        if not self.config.move_job_pods and controller.get("kind") in RESTARTING_KINDS:
            return JOB_POD
        if not self.config.allow_local_storage and has_local_storage(pod):
            return LOCAL_STORAGE
        if scheduler != profile:
            return self._unsteered(pod, node, scheduler)
        return None

    def _unsteered(self, pod: Obj, node: str, scheduler: str) -> str | None:
        """Why ``scheduler`` could place another scheduler's pod's replacement back on its source
        ``node`` (None: the steering mark there scores it down)."""
        if self.steering is None:
            return source_not_marked(scheduler, "steering is off")
        if node not in self.steering.marked:
            return source_not_marked(scheduler, f"{node} has no {self.steering.key} mark")
        if tolerates_mark(pod, self.steering.key):
            return source_not_marked(scheduler, f"the pod tolerates {self.steering.key}")
        if (node, scheduler) in self.budget.placed_back:
            return placed_back(scheduler, node)
        return None

    def _amounts(self, pod: Obj, *, measure: bool) -> tuple[float, ...]:
        """The pod's usage of each judged metric's estimate resource, in engine units:
        measured where ``measure`` and known, else estimated (0 with no estimate)."""
        requests = pod_requests(pod)
        out = []
        for m in self.judged:
            value = self.measured(pod_key(pod), m) if measure else None
            if value is None or not math.isfinite(value):
                value = 0.0 if m.estimate is None else float(estimated_usage(pod, requests, m.estimate))
            out.append(value)
        return tuple(out)

    def _held_amounts(self, pod: Obj) -> tuple[float, ...]:
        """A reserved replacement's usage per judged metric: what its move was proved with,
        else (a metric the move did not judge, or a pod no move made) its estimate."""
        proved = moved_usage(pod)
        estimated = self._amounts(pod, measure=False)
        return tuple(proved.get(m.name, e) for m, e in zip(self.judged, estimated, strict=True))

    def _moves(self, amounts: Sequence[float], node: str) -> npt.NDArray[np.float64]:
        """Per judged metric, how a pod using ``amounts`` moves ``node``'s value: its share of
        the node (:func:`~ksched.engine.load.node_share`), added for an "above" metric and
        taken off for a "below" one; 0 where the node has none of the resource."""
        out = np.zeros(len(self.judged), dtype=np.float64)
        for k, (m, amount) in enumerate(zip(self.judged, amounts, strict=True)):
            share = (
                None if m.estimate is None else node_share(self.snapshot, node, m.estimate.resource, amount)
            )
            out[k] = 0.0 if share is None else share * self.sign[k]
        return out

    # -- the proof -----------------------------------------------------

    def _prove(self, c: _Candidate, source: str, row: int, k: int) -> Move | str:
        """Place the candidate's replacement with its load: a Move where the engine places it
        (its load counted on each node by the engine's own estimate input, against every
        judged metric's ``low``), else why not."""
        off = self._moves(c.amounts, source)
        if not off[k] * self.sign[k] > 0:
            return f"takes no {self.lines[k].metric} with it"
        hopeless = next((why for amounts, why in self.hopeless if _at_least(c.amounts, amounts)), None)
        if hopeless is not None:
            return hopeless
        # The source is out; every other node keeps its value, which the engine reads with
        # the replacement's load added (``moved``), held to ``low`` and to a node's own
        # threshold where that is stricter, never to a looser one.
        proof = self.values.copy()
        proof[row] = OUT_OF_REACH * self.sign
        table = self.snapshot.pods
        victim = table.rows.get(c.key)
        leaving = [*self.leaving, *([] if victim is None else [victim])]
        # The victims count as terminating while the replacement is placed: topology spread
        # skips them as it will once they are evicted (counting the victim in its domain could
        # prove a target whose skew the eviction then breaks).
        before = table.terminating[leaving].copy()
        table.terminating[leaving] = 1
        pending = pending_copy(c.pod)
        usage = {m.name: amount for m, amount in zip(self.judged, c.amounts, strict=True)}
        try:
            placement = self.engine.schedule(
                self.snapshot,
                [pending],
                proof,
                metrics=self.proof_metrics,
                nominated=_holding(self.held, priority(c.pod)),
                moved={pod_key(pending): usage},
                caution=self.caution,
            ).placements[0]
        finally:
            table.terminating[leaving] = before
        target = placement.node
        if target is None:
            why = f"no feasible node for its replacement: {_filter_verdict(placement.message)}"
            if placement.rejected_by and all(p.startswith(METRIC_PLUGIN) for p in placement.rejected_by):
                # Every node was over a judged metric's line: until a move changes the values,
                # no candidate moving at least as much load can land either (no engine call).
                self.hopeless.append((c.amounts, why))
            return why
        t = self.snapshot.index[target]
        on = self._moves(c.amounts, target)
        line = self.lines[k]
        replacement = build_replacement(c.pod, source)
        held = copy.copy(replacement)
        held["metadata"] = {
            **replacement["metadata"],
            "annotations": {
                **(replacement["metadata"].get("annotations") or {}),
                MOVED_USAGE_ANNOTATION: json.dumps(usage, sort_keys=True),
            },
        }
        held["status"] = {"nominatedNodeName": target}
        move = Move(
            pod=c.key,
            uid=str(meta(c.pod).get("uid") or ""),
            namespace=namespace_of(c.pod),
            workload=c.workload,
            owner_uid=str(c.controller.get("uid") or ""),
            template_hash=template_hash_of(c.pod),
            source=source,
            target=target,
            metric=line.metric,
            usage=float(off[k] * self.sign[k]),
            source_before=float(self.values[row, k]),
            source_after=float(self.values[row, k] - off[k]),
            target_before=float(self.values[t, k]),
            target_after=float(self.values[t, k] + on[k]),
            replacement=held,
        )
        self.values[row] -= off
        self.values[t] += on
        self.hopeless.clear()
        self.held.append(move.replacement)
        if victim is not None:
            self.leaving.append(victim)
        return move


def _at_least(amounts: Sequence[float], than: Sequence[float]) -> bool:
    """Whether a pod using ``amounts`` moves at least as much of each metric as ``than``."""
    return all(a >= b for a, b in zip(amounts, than, strict=True))


def _filter_verdict(message: str | None) -> str:
    """The filters' part of a FailedScheduling message (``0/4 nodes are available: 3 node(s)
    had u above 0.6.``), without the preemption and claims verdicts a move never uses."""
    out = message or "no node fits"
    for tail in (" no new claims to deallocate,", " preemption:"):
        out = out.split(tail, 1)[0]
    return out.rstrip()


def _proof_metric(metric: MetricConfig, line: RebalanceThreshold) -> MetricConfig:
    """The metric as the proof judges a target by: its threshold at ``low``, no priority
    bands or exempt owners, the replacement's load counted by the engine (its estimate input
    carries the victim's usage: ``Engine.schedule``'s ``moved``), a node without a value
    excluded, and no placement over the line."""
    # The engine rejects a value over ``above``; a target must end strictly below ``low``.
    estimate = metric.estimate
    if estimate is not None:
        # Counted as given, whatever the configured estimate would guess or learn.
        estimate = replace(estimate, legacy=False, calibration=None, deviations=0.0)
    return replace(
        metric,
        above=math.nextafter(line.low, -math.inf) if line.direction == "above" else None,
        below=math.nextafter(line.low, math.inf) if line.direction == "below" else None,
        bands=(),
        exempt=(),
        estimate=estimate,
        missing=EXCLUDE,
        on_saturation=PENDING,
    )


def _holding(held: Sequence[Obj], at_least: int) -> list[Obj]:
    """The held replacements as nominated pods that hold their room against a replacement
    of priority ``at_least`` (the engine lets a nominated pod hold room only against pods
    of lower or equal priority; a plan never counts one node's room twice)."""
    out = []
    for pod in held:
        try:
            own = priority(pod)
        except MalformedObjectError:
            continue
        if own >= at_least:
            out.append(pod)
        else:
            out.append({**pod, "spec": {**spec(pod), "priority": at_least}})
    return out


def _hottest_first(hot: Sequence[HotNode]) -> list[str]:
    """The hot nodes, furthest over their line first (then by name)."""
    excess: dict[str, float] = {}
    for h in hot:
        over = abs(h.value - h.high) / (abs(h.high) or 1.0)
        excess[h.node] = max(excess.get(h.node, 0.0), over)
    return sorted(excess, key=lambda n: (-excess[n], n))
