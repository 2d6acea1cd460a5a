"""Shadow mode: where ksched would have placed the pods another scheduler binds.

A shadow ksched binds nothing, posts no events and writes nothing to pods
(no nominations, evictions, hand-offs or webhook routing); it does not stand
for leader election either, so it can run beside a real ksched. It watches
pods; for each pod that goes from no node to a node, whoever bound it, it
asks the same engine call a scheduling cycle makes (profile
``shadow.profile``, the live metric matrix, the pod's gang) where the pod
would go on the cluster state *just before* that binding is applied, so the
pod itself is not counted. A pod whose ``schedulerName`` is a ksched profile
is bound only by a non-shadow ksched: comparing it is comparing the shadow's
configuration with the one in production.

Each comparison is a :class:`Decision`: ``same`` node, ``other`` node (with
ksched's score of both nodes and the plugin whose weighted score differed
most, ``equal scores`` when ksched's tie-break chose the other of two equal
nodes, or the filter that rejected the other scheduler's node), or ``pending``
(ksched would have left the pod pending; its FailedScheduling message). The
:class:`ShadowLedger` keeps running counters and a ring of the last
``shadow.keep`` decisions: memory stays bounded however long it runs.
``/shadow`` serves :meth:`ShadowLedger.report`; ``shadow.log`` appends each
decision as a JSON line.

Each compared pod is also handed, with ksched's choice, to the placement outcomes
(:mod:`ksched.loop.scheduling.outcomes`): once its horizon has ended, whether its node went
hot and for how many node-minutes, beside ksched's estimate for its own choice with the pod
added. The ledger sums them (:meth:`ShadowLedger.judge`) into the hot node-minutes avoided
(estimated), and ``shadow.log`` appends each verdict as a line of its own (``"type":
"outcome"``), so a report from the log computes the same.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import IO, Any

from ksched.config import Config
from ksched.engine import Engine, Explanation, GangStatus, NodeExplanation, Placement
from ksched.engine.gangs import pod_group_of
from ksched.errors import KschedError
from ksched.loop.metrics.load_model import LoadModel
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.mirror.state import ClusterState
from ksched.loop.scheduling.outcomes import STAYED_COOL, WENT_HOT, Judgement, OutcomeWatch
from ksched.loop.telemetry import JUDGED_OUTCOMES, SHADOW_OUTCOMES, Telemetry
from ksched.objects import Obj, is_terminal, meta, object_key, scheduler_name, spec

log = logging.getLogger(__name__)

# What ksched would have done, as ``ksched_shadow_decisions_total`` labels it.
OUTCOMES = SHADOW_OUTCOMES
SAME, OTHER, PENDING = OUTCOMES
# The reason of a disagreement on a node ksched does not know (deleted, or left out as malformed).
UNKNOWN_NODE = "node unknown to ksched"
# The reason of a disagreement between two nodes ksched scores alike: its tie-break chose the other.
EQUAL_SCORES = "equal scores"
# How long the shadow loop waits for a binding before applying other watch events anyway.
IDLE_WAIT_S = 0.5
# Pods listed by ``report`` as differing most.
TOP_PODS = 10


@dataclass(frozen=True)
class Decision:
    """ksched's verdict on one pod another scheduler bound."""

    pod: str
    scheduler: str
    node: str
    outcome: str
    # ksched's choice and its score there; ksched's score of ``node`` (None: filtered or unknown).
    ksched_node: str | None = None
    ksched_score: float | None = None
    node_score: float | None = None
    # ksched_score - node_score, when ksched scored both nodes.
    gap: float | None = None
    # The plugin (``Metric/<name>`` for a metric) that made the difference; EQUAL_SCORES for a tie.
    reason: str | None = None
    # pending: ksched's FailedScheduling message; a filtered node: the filter's reasons.
    detail: str | None = None
    # Per plugin: weighted score on ksched's node minus on ``node``.
    differences: dict[str, float] = field(default_factory=dict)
    degraded: tuple[str, ...] = ()
    at: float = 0.0

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["degraded"] = list(self.degraded)
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Decision:
        known = {k: v for k, v in obj.items() if k in cls.__dataclass_fields__}
        known["degraded"] = tuple(known.get("degraded") or ())
        return cls(**known)

    def severity(self) -> float:
        """How far ksched disagrees: a node ksched would not use at all ranks above any score gap."""
        if self.outcome == SAME:
            return 0.0
        if self.gap is None:
            return math.inf
        return self.gap


def decide(
    pod: str,
    scheduler: str,
    node: str,
    placement: Placement,
    explanation: Explanation | None,
    degraded: tuple[str, ...] = (),
    at: float = 0.0,
) -> Decision:
    """Compare the engine's verdict on a pod (with its explanation) with the node it was bound to."""
    rows = {n.node: n for n in explanation.nodes} if explanation is not None else {}
    theirs = rows.get(node)
    base = Decision(pod, scheduler, node, SAME, degraded=degraded, at=at)
    if placement.node is None:
        return replace(
            base,
            outcome=PENDING,
            node_score=theirs.total if theirs is not None else None,
            reason=_rejection(theirs, placement, explanation is not None),
            detail=placement.message,
        )
    mine = rows.get(placement.node)
    score = mine.total if mine is not None and mine.total is not None else placement.score
    if placement.node == node:
        return replace(base, ksched_node=node, ksched_score=score, node_score=score, gap=0.0)
    other = replace(base, outcome=OTHER, ksched_node=placement.node, ksched_score=score)
    if theirs is None or not theirs.feasible or mine is None:
        return replace(
            other,
            reason=theirs.plugin if theirs is not None else UNKNOWN_NODE,
            detail="; ".join(theirs.reasons) if theirs is not None else None,
        )
    differences = {
        p: mine.scores[p]["weighted"] - theirs.scores[p]["weighted"]
        for p in mine.scores
        if p in theirs.scores
    }
    return replace(
        other,
        node_score=theirs.total,
        gap=(mine.total or 0.0) - (theirs.total or 0.0),
        reason=_most_different(differences),
        differences=differences,
    )


def _most_different(differences: dict[str, float]) -> str:
    """The plugin whose weighted score favoured ksched's node most; a tie when none did."""
    best = max(differences, key=lambda p: differences[p], default=None)
    return best if best is not None and differences[best] > 0 else EQUAL_SCORES


def _rejection(theirs: NodeExplanation | None, placement: Placement, explained: bool) -> str | None:
    """Why ksched left the pod pending although another scheduler found a node: the filter
    that rejected that node (None: the pod itself, as its message says, or its gang)."""
    if placement.nominated_node is not None:
        return "DefaultPreemption"
    if not explained:
        return None
    if theirs is None:
        return UNKNOWN_NODE
    return theirs.plugin


class ShadowLedger:
    """Running counters over every decision and a ring of the last ``keep``; thread-safe."""

    def __init__(self, keep: int) -> None:
        self.started = time.time()
        self.counts = dict.fromkeys(OUTCOMES, 0)
        # (outcome, reason) -> [decisions, sum of score gaps, decisions with a gap]
        self.reasons: dict[tuple[str, str], list[float]] = {}
        self.recent: deque[Decision] = deque(maxlen=keep)
        # The verdicts on the compared placements: the other scheduler's node, and ksched's
        # choice with the pod added (estimated; none where it would have left the pod pending).
        self.judged = dict.fromkeys(JUDGED_OUTCOMES, 0)
        self.ksched_judged = dict.fromkeys(JUDGED_OUTCOMES, 0)
        self.hot_minutes = 0.0
        self.ksched_hot_minutes = 0.0
        self.left_pending = 0
        self.left_pending_minutes = 0.0
        self._lock = threading.Lock()

    def record(self, d: Decision) -> None:
        with self._lock:
            self.counts[d.outcome] = self.counts.get(d.outcome, 0) + 1
            if d.outcome != SAME:
                # Reasons are plugin names: a bounded set.
                entry = self.reasons.setdefault((d.outcome, d.reason or "unknown"), [0, 0.0, 0])
                entry[0] += 1
                if d.gap is not None:
                    entry[1] += d.gap
                    entry[2] += 1
            self.recent.append(d)

    def judge(self, j: Judgement) -> None:
        """A compared placement's verdict, once its horizon ended."""
        with self._lock:
            self.judged[j.outcome] = self.judged.get(j.outcome, 0) + 1
            self.hot_minutes += j.hot_minutes
            if j.ksched_outcome is None:
                self.left_pending += 1
                self.left_pending_minutes += j.hot_minutes
            else:
                self.ksched_judged[j.ksched_outcome] = self.ksched_judged.get(j.ksched_outcome, 0) + 1
                self.ksched_hot_minutes += j.ksched_hot_minutes

    def outcomes(self) -> dict[str, Any]:
        """``/shadow``'s ``outcomes``: the hot node-minutes the other scheduler's placements led
        to, ksched's estimate for its own choices, and the difference. The placements ksched
        would have left pending are left out of the difference (their minutes are shown)."""
        with self._lock:
            judged, ksched = dict(self.judged), dict(self.ksched_judged)
            theirs, mine = self.hot_minutes, self.ksched_hot_minutes
            pending, pending_minutes = self.left_pending, self.left_pending_minutes
        return {
            "judged": sum(judged.values()),
            "counts": judged,
            "wentHotShare": _share(judged),
            "hotNodeMinutes": theirs,
            "kschedCountsEstimated": ksched,
            "kschedWentHotShareEstimated": _share(ksched),
            "kschedHotNodeMinutesEstimated": mine,
            "leftPending": pending,
            "leftPendingHotNodeMinutes": pending_minutes,
            "hotNodeMinutesAvoidedEstimated": theirs - pending_minutes - mine,
        }

    def report(self, top: int = TOP_PODS) -> dict[str, Any]:
        """The JSON ``/shadow`` serves and ``ksched shadow report`` prints."""
        with self._lock:
            total = sum(self.counts.values())
            counted = sorted(self.reasons.items(), key=lambda kv: (-kv[1][0], kv[0]))
            recent = list(self.recent)
        reasons = [
            {
                "outcome": outcome,
                "reason": reason,
                "decisions": int(n),
                "meanGap": gaps / scored if scored else None,
            }
            for (outcome, reason), (n, gaps, scored) in counted
        ]
        differ = sorted((d for d in recent if d.outcome != SAME), key=lambda d: (-d.severity(), -d.at))
        return {
            "since": self.started,
            "total": total,
            "counts": dict(self.counts),
            "agreement": self.counts[SAME] / total if total else None,
            "reasons": reasons,
            "differMost": [d.as_json() for d in differ[:top]],
            "recent": [d.as_json() for d in recent],
            "outcomes": self.outcomes(),
        }


def _share(counts: dict[str, int]) -> float | None:
    """The share of the measured verdicts that went hot."""
    measured = counts[WENT_HOT] + counts[STAYED_COOL]
    return counts[WENT_HOT] / measured if measured else None


class Shadow:
    """The shadow loop: informer callbacks queue a decision before the binding they saw;
    :meth:`run` applies the watch events in order and decides on the way."""

    def __init__(
        self,
        config: Config,
        state: ClusterState,
        metrics: MetricStore,
        telemetry: Telemetry,
        seed: int = 0,
        outcomes: OutcomeWatch | None = None,
    ) -> None:
        self.config = config.shadow
        self.state = state
        self.metrics = metrics
        # The values each comparison places on (:mod:`ksched.loop.metrics.load_model`).
        self.load = LoadModel(metrics, state.recent)
        self.telemetry = telemetry
        self.engine = Engine(config, config.shadow.profile, seed=seed)
        self.ledger = ShadowLedger(config.shadow.keep)
        self._namespaces = set(config.shadow.namespaces)
        self._log: IO[str] | None = None
        self._wake = threading.Event()
        # The placement outcomes the compared pods are handed to (None: not judged).
        self.outcomes = outcomes
        if outcomes is not None:
            outcomes.on_judged.append(self._judged)
        if self.config.log:
            # Checked at start, like the rest of the configuration, not when the loop starts.
            try:
                open(self.config.log, "a", encoding="utf-8").close()
            except OSError as err:
                raise KschedError(f"shadow.log: cannot append to {self.config.log}: {err.strerror}") from None

    # -- informer threads ------------------------------------------------

    def on_pod(self, kind: str, pod: Obj, old: Obj | None) -> None:
        if kind == "MODIFIED" and self._newly_bound(pod, old):
            self.state.at_this_point(partial(self._decide, pod))
            self._wake.set()
        self.state.on_pod(kind, pod, old)

    def _newly_bound(self, pod: Obj, old: Obj | None) -> bool:
        if old is None or spec(old).get("nodeName") or not spec(pod).get("nodeName"):
            return False
        if is_terminal(pod) or meta(pod).get("deletionTimestamp"):
            return False
        return not self._namespaces or str(meta(pod).get("namespace")) in self._namespaces

    # -- the shadow thread -------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                self._wake.wait(IDLE_WAIT_S)
                self._wake.clear()
                self.state.sync()
                # Comparisons build the values only as pods are bound: a learned estimate
                # still takes the samples that come in between them.
                self.load.keep_learning(self.state.snapshot)
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None

    def _append(self, path: str, line: str) -> None:
        """Append one decision to ``shadow.log``, opened on the first: decisions are also made
        by the state sync ``run`` does once the informers have synced, before this loop."""
        if self._log is None:
            self._log = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed when stopped)
        self._log.write(line)
        self._log.flush()

    def _decide(self, pod: Obj) -> None:
        try:
            self._compare(pod)
        except Exception:
            # A bug (or a full disk under ``shadow.log``) must not stop the watch
            # events behind this one from being applied, nor the shadow loop.
            log.exception("shadow decision on %s failed", object_key(pod))

    def _compare(self, pod: Obj) -> None:
        key = object_key(pod)
        node = str(spec(pod)["nodeName"])
        unbound = {**pod, "spec": {k: v for k, v in spec(pod).items() if k != "nodeName"}}
        snapshot = self.state.snapshot()
        matrix = self.load.scheduling(snapshot)
        group = pod_group_of(pod)
        groups = {}
        if group is not None and group in self.state.pod_groups:
            groups[group] = GangStatus(
                self.state.pod_groups[group].min_member, self.state.group_bound.get(group, 0)
            )
        result = self.engine.schedule(
            snapshot,
            [unbound],
            matrix.values,
            metrics=matrix.metrics,
            explain=key,
            groups=groups,
            caution=matrix.caution,
        )
        d = decide(
            key,
            scheduler_name(pod),
            node,
            result.placements[0],
            result.explanation,
            tuple(matrix.degraded),
            self.state.clock(),
        )
        if self.outcomes is not None:
            uid = str(meta(pod).get("uid", ""))
            self.outcomes.compared(key, uid, node, d.at, d.scheduler, d.ksched_node, unbound, matrix.metrics)
        self.ledger.record(d)
        self.telemetry.shadow_decisions.labels(outcome=d.outcome).inc()
        if d.gap is not None:
            self.telemetry.shadow_score_gap.observe(d.gap)
        if self.config.log:
            self._append(self.config.log, json.dumps(d.as_json()) + "\n")
        log.info(
            "shadow: %s bound to %s by %s; ksched: %s%s",
            key,
            node,
            d.scheduler,
            d.outcome if d.outcome != OTHER else f"other ({d.ksched_node})",
            f" because of {d.reason}" if d.reason else "",
        )

    def _judged(self, j: Judgement) -> None:
        """A compared placement's verdict (on the cluster state's thread, as decisions are)."""
        try:
            self.ledger.judge(j)
            self.telemetry.shadow_hot_minutes.labels(scheduler="other").inc(j.hot_minutes)
            self.telemetry.shadow_hot_minutes.labels(scheduler="ksched").inc(j.ksched_hot_minutes)
            if self.config.log:
                self._append(self.config.log, json.dumps(j.as_json()) + "\n")
        except Exception:
            log.exception("shadow outcome of %s failed", j.pod)
