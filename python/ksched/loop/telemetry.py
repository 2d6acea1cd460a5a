"""Prometheus metrics, named after kube-scheduler's with a ``ksched_`` prefix.

Owns one registry per process (so tests can build several schedulers); the
HTTP server exposes it at ``/metrics``. Besides upstream's series, ksched's own:
engine time, degraded mode and fallbacks, shadow mode's verdicts, placement outcomes
(``ksched_placements_judged_total``: whether a placement's node went hot within its horizon,
by who placed it; ``ksched_shadow_hot_node_minutes_total``: the hot node-minutes another
scheduler's placements led to beside ksched's estimate for its own choices), and
``ksched_metric_values_rejected_total`` (values dropped as missing: not finite or past
the metric limit), ``ksched_objects_rejected_total`` (cluster objects left out because they
cannot be read: a node whose allocatable or images are not numbers), ``ksched_metric_saturation_total`` (pods that every node passing the other
filters rejected on a metric's threshold, by metric, its ``onSaturation`` policy
and whether the pod was placed over the threshold or left pending), and the
rebalancer's (``ksched_rebalance_*``: evictions by the metric that made the node
hot, moves refused or failed, hot nodes, reservations held and where replacements
landed), and the steering marks' (``ksched_steering_*``: nodes marked, marks added and
removed).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.utils import INF

# Upstream's attempt-duration buckets: exponential from 1 ms, factor 2, 15 buckets.
ATTEMPT_BUCKETS = (*(0.001 * 2**i for i in range(15)), INF)
# Upstream's SLI buckets: exponential from 10 ms, factor 2, 20 buckets.
SLI_BUCKETS = (*(0.01 * 2**i for i in range(20)), INF)
BATCH_BUCKETS = (*(float(2**i) for i in range(14)), INF)
# Where a queued pod can be (the queue's ``QueuedPod.where``); parked: never ksched's to place;
# elsewhere: another replica's to place (sharding).
QUEUES = ("active", "backoff", "unschedulable", "in_flight", "handoff", "parked", "elsewhere")
SHADOW_OUTCOMES = ("same", "other", "pending")
# Who placed a judged pod: this ksched (a ksched profile), or any other scheduler.
PLACED_BY = ("ksched", "other")
# What became of a placement's node within its horizon; unmeasured: no value for it then.
JUDGED_OUTCOMES = ("stayed_cool", "went_hot", "unmeasured")
# A saturated pod placed over the threshold (bound), or left pending (each attempt counts).
SATURATION_OUTCOMES = ("placed", "pending")
# Score totals are sums of weighted 0-100 plugin scores (upstream weights sum to 7,
# metric weights add to that): gaps run from 0 (same node) to several hundred.
SHADOW_GAP_BUCKETS = (0.0, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, INF)
# Why a rebalancing eviction did not happen: a PodDisruptionBudget refused it (HTTP 429), or
# another error.
REBALANCE_BLOCKED = ("pdb", "failed")
# A steering mark written onto a node, or taken off one.
STEERING_CHANGES = ("added", "removed")
# Where a move's replacement went: bound on the reserved node, back on its source (a
# ping-pong), on another, or not bound before the reservation's timeout.
REPLACEMENT_OUTCOMES = ("on_target", "on_source", "elsewhere", "expired")


class Telemetry:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        # The per-pod series, looked up once: ``labels()`` cost 7 us of the 10 that a bound
        # pod's three observations took.
        self._placed: dict[str, Histogram] = {}
        self._bound: dict[str, Counter] = {}
        self._sli: dict[int, Histogram] = {}
        self._longest_pause = 0.0
        # Declared group by group, in the order the registry exposes them.
        self._scheduling(r)
        self._replica(r)
        self._preemption(r)
        self._metrics(r)
        self._objects(r)
        self._shadow(r)
        self._outcomes(r)
        self._saturation(r)
        self._rebalancing(r)
        self._steering(r)

    def _scheduling(self, r: CollectorRegistry) -> None:
        """Upstream's attempt, queue, SLI and bind series, and the engine's share of a batch."""
        self.schedule_attempts = Counter(
            "ksched_schedule_attempts_total",
            "Scheduling attempts by result (scheduled, unschedulable, error) and profile.",
            ["result", "profile"],
            registry=r,
        )
        self.attempt_duration = Histogram(
            "ksched_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency (the batch's engine call and the pod's share of it).",
            ["result", "profile"],
            buckets=ATTEMPT_BUCKETS,
            registry=r,
        )
        self.pending_pods = Gauge("ksched_pending_pods", "Pending pods by queue.", ["queue"], registry=r)
        self.sli_duration = Histogram(
            "ksched_pod_scheduling_sli_duration_seconds",
            "From a pod entering the queue to its successful bind, by number of attempts.",
            ["attempts"],
            buckets=SLI_BUCKETS,
            registry=r,
        )
        self.binding_errors = Counter(
            "ksched_binding_errors_total",
            "Failed binds by reason (conflict, not_found, error).",
            ["reason"],
            registry=r,
        )
        self.batch_size = Histogram(
            "ksched_batch_size", "Pods per scheduling batch.", buckets=BATCH_BUCKETS, registry=r
        )
        self.engine_duration = Histogram(
            "ksched_engine_duration_seconds",
            "Time inside the Rust engine (ksched._core) per engine call on a batch, summed over its gang re-runs.",
            buckets=ATTEMPT_BUCKETS,
            registry=r,
        )
        self.engine_python = Histogram(
            "ksched_engine_python_seconds",
            "Python time of the same engine calls around the Rust engine: parsing the pods, "
            "compiling the engine's inputs for each run, reading its results.",
            buckets=ATTEMPT_BUCKETS,
            registry=r,
        )

    def _replica(self, r: CollectorRegistry) -> None:
        """This replica's lease and how long its loop was away from the queue."""
        self.leader = Gauge("ksched_leader", "1 while this replica holds the lease.", registry=r)
        self.loop_longest_pause = Gauge(
            "ksched_loop_longest_pause_seconds",
            "The longest time the scheduling loop spent away from the queue since start (applying "
            "watch events, a relist's among them, or a cycle): no pending pod was looked at meanwhile.",
            registry=r,
        )
        self.lost_leases = Counter("ksched_leader_lost_total", "Terms ended by a failed renewal.", registry=r)
        self.shard_members = Gauge(
            "ksched_shard_members",
            "Live replicas as this replica last read their Leases (sharding).",
            registry=r,
        )
        self.shard_active = Gauge(
            "ksched_shard_active",
            "1 while this replica may bind onto the nodes it owns (sharding).",
            registry=r,
        )
        self.shard_nodes = Gauge(
            "ksched_shard_owned_nodes",
            "Nodes this replica owns under the live replicas (sharding).",
            registry=r,
        )
        self.shard_handoffs = Counter(
            "ksched_shard_handoffs_total",
            "Pods this replica handed to another replica: nominated to a node it owns (sharding).",
            registry=r,
        )

    def _preemption(self, r: CollectorRegistry) -> None:
        """Upstream's preemption_attempts / preemption_victims, as counters."""
        self.preemption_attempts = Counter(
            "ksched_preemption_attempts_total",
            "Pods that fit nowhere and preempted lower-priority pods.",
            registry=r,
        )
        self.preemption_victims = Counter(
            "ksched_preemption_victims_total",
            "Pods evicted to make room for higher-priority pods.",
            registry=r,
        )

    def _metrics(self, r: CollectorRegistry) -> None:
        """Live metrics: their age, degraded mode and the fallbacks it takes."""
        self.metric_age = Gauge(
            "ksched_metric_age_seconds", "Age of each live metric's newest sample.", ["metric"], registry=r
        )
        self.degraded = Gauge(
            "ksched_degraded", "1 while ksched schedules in degraded mode, by reason.", ["reason"], registry=r
        )
        self.fallbacks = Counter(
            "ksched_fallback_total",
            "Pods scheduled through a fallback: metric_unavailable, deadline, engine_error, handed_off.",
            ["reason"],
            registry=r,
        )
        self.metric_values_rejected = Counter(
            "ksched_metric_values_rejected_total",
            "Node (or pod usage) metric values dropped as missing, by metric and reason: not_finite "
            "(inf, -inf) or out_of_range (past +-1e18). Live values count once per refresh, "
            "annotations once per node table.",
            ["metric", "reason"],
            registry=r,
        )

    def _objects(self, r: CollectorRegistry) -> None:
        """Cluster objects left out because they cannot be read."""
        self.objects_rejected = Counter(
            "ksched_objects_rejected_total",
            "Cluster objects left out because they cannot be read, by kind (Node) and reason: "
            "unreadable_quantity (an allocatable that is not a quantity) or malformed (a field of "
            "the wrong type). Each counts once per problem while it lasts; /status lists those left out now.",
            ["kind", "reason"],
            registry=r,
        )

    def _outcomes(self, r: CollectorRegistry) -> None:
        """Whether placements' nodes went hot, and shadow mode's hot node-minutes."""
        self.placements_judged = Counter(
            "ksched_placements_judged_total",
            "Placements whose horizon (a metric's window plus outcomes.margin) ended, by who placed "
            "the pod (ksched or another scheduler) and whether its node went hot meanwhile (a "
            "metric at or over the line the filter holds a pod to there), stayed cool, or had no value.",
            ["scheduler", "outcome"],
            registry=r,
        )
        for scheduler in PLACED_BY:
            for outcome in JUDGED_OUTCOMES:
                self.placements_judged.labels(scheduler=scheduler, outcome=outcome)
        self.shadow_hot_minutes = Counter(
            "ksched_shadow_hot_node_minutes_total",
            "Shadow mode: node-minutes the nodes of the other scheduler's placements were hot within "
            "their horizon (scheduler=other), and ksched's estimate for the nodes it would have chosen "
            "with the pod added (scheduler=ksched); each node-minute counted once.",
            ["scheduler"],
            registry=r,
        )
        for scheduler in PLACED_BY:
            self.shadow_hot_minutes.labels(scheduler=scheduler)

    def _shadow(self, r: CollectorRegistry) -> None:
        """Shadow mode's verdicts on the pods another scheduler bound."""
        self.shadow_decisions = Counter(
            "ksched_shadow_decisions_total",
            "Shadow mode: pods another scheduler bound, by what ksched would have done "
            "(same node, other node, pending).",
            ["outcome"],
            registry=r,
        )
        for outcome in SHADOW_OUTCOMES:
            self.shadow_decisions.labels(outcome=outcome)
        self.shadow_score_gap = Histogram(
            "ksched_shadow_score_gap",
            "Shadow mode: ksched's score of its own choice minus its score of the node the other "
            "scheduler chose (0 when the same node), for decisions where ksched scored both nodes.",
            buckets=SHADOW_GAP_BUCKETS,
            registry=r,
        )

    def _saturation(self, r: CollectorRegistry) -> None:
        """Pods every node rejected on a metric's threshold (``saturated``)."""
        self.metric_saturation = Counter(
            "ksched_metric_saturation_total",
            "Pods that every node passing the other filters rejected on the metric's threshold, "
            "by metric, its onSaturation policy (pending, leastLoaded) and outcome: placed "
            "(bound over the threshold, leastLoaded) or pending (each attempt left pending).",
            ["metric", "policy", "outcome"],
            registry=r,
        )

    def _rebalancing(self, r: CollectorRegistry) -> None:
        """The rebalancer's evictions, refusals, hot nodes and reservations."""
        self.rebalance_evictions = Counter(
            "ksched_rebalance_evictions_total",
            "Pods the rebalancer evicted, by the metric whose node was hot.",
            ["reason"],
            registry=r,
        )
        self.rebalance_blocked = Counter(
            "ksched_rebalance_blocked_total",
            "Rebalancing evictions that did not happen: refused by a PodDisruptionBudget (pdb) or failed.",
            ["reason"],
            registry=r,
        )
        for reason in REBALANCE_BLOCKED:
            self.rebalance_blocked.labels(reason=reason)
        self.rebalance_hot_nodes = Gauge(
            "ksched_rebalance_hot_nodes",
            "Nodes the rebalancer judges hot (over the metric's high line for hotSamples fresh samples).",
            ["metric"],
            registry=r,
        )
        self.rebalance_reservations = Gauge(
            "ksched_rebalance_reservations",
            "Nodes held for the replacements of pods the rebalancer moved.",
            registry=r,
        )
        self.rebalance_replacements = Counter(
            "ksched_rebalance_replacements_total",
            "Replacements of moved pods by outcome: on_target (bound on the reserved node), "
            "on_source (bound back on the node it was moved off), elsewhere, expired (not bound "
            "before the reservation's timeout).",
            ["outcome"],
            registry=r,
        )
        for outcome in REPLACEMENT_OUTCOMES:
            self.rebalance_replacements.labels(outcome=outcome)
        self.rebalance_shadow_moves = Counter(
            "ksched_rebalance_shadow_moves_total",
            "Shadow mode: pods the rebalancer would have evicted (it evicts none).",
            registry=r,
        )

    def _steering(self, r: CollectorRegistry) -> None:
        """The steering marks: nodes marked hot now, nodes marked warm only, and nodes marked and
        unmarked."""
        self.steering_marked = Gauge(
            "ksched_steering_marked_nodes",
            "Nodes ksched marks hot now (its PreferNoSchedule taint, steering.taintKey).",
            registry=r,
        )
        self.steering_warm = Gauge(
            "ksched_steering_warm_nodes",
            "Nodes ksched marks warm only now (the lighter PreferNoSchedule taint, steering.warmKey).",
            registry=r,
        )
        self.steering_marks = Counter(
            "ksched_steering_marks_total",
            "Nodes marked (added: hot or warm, from no mark) or unmarked (removed: cooled, "
            "capped, stale, or ksched stopping).",
            ["change"],
            registry=r,
        )
        for change in STEERING_CHANGES:
            self.steering_marks.labels(change=change)

    def saturated(self, metric: str, policy: str, outcome: str) -> None:
        """A saturated pod's outcome (one of SATURATION_OUTCOMES) under one metric's policy."""
        self.metric_saturation.labels(metric=metric, policy=policy, outcome=outcome).inc()

    def placed(self, profile: str, elapsed_s: float) -> None:
        """A pod's attempt placed it (its bind follows)."""
        series = self._placed.get(profile)
        if series is None:
            series = self._placed[profile] = self.attempt_duration.labels(result="scheduled", profile=profile)
        series.observe(elapsed_s)

    def bound(self, profile: str, attempts: int, since_queued_s: float) -> None:
        """A pod bound: the scheduled count and the SLI duration."""
        count = self._bound.get(profile)
        if count is None:
            count = self._bound[profile] = self.schedule_attempts.labels(result="scheduled", profile=profile)
        count.inc()
        sli = self._sli.get(attempts)
        if sli is None:
            sli = self._sli[attempts] = self.sli_duration.labels(attempts=str(attempts))
        sli.observe(since_queued_s)

    def set_degraded(self, reason: str, on: bool) -> None:
        self.degraded.labels(reason=reason).set(1.0 if on else 0.0)

    def loop_pause(self, seconds: float) -> None:
        """A stretch the scheduling loop spent away from the queue; the longest is kept."""
        if seconds > self._longest_pause:
            self._longest_pause = seconds
            self.loop_longest_pause.set(seconds)

    def watch_queue(self, counts: Callable[[], dict[str, int]]) -> None:
        """Read the queue sizes at scrape time."""
        for q in QUEUES:
            self.pending_pods.labels(queue=q).set_function(functools.partial(_count, counts, q))


def _count(counts: Callable[[], dict[str, int]], queue: str) -> float:
    return float(counts().get(queue, 0))
