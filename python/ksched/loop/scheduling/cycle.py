"""The scheduling loop: one cycle, top to bottom (upstream's schedule_one.go).

A cycle pops a batch from the queue, brings the cluster state up to date,
calls the engine once per profile present in the batch, then for each pod
either *assumes* it on its node and hands the bind to the binder, or
reports it unschedulable (event + condition) and parks it until a cluster
event that a plugin which rejected it registered may help (the informer
callbacks name the events). A pod with ResourceClaims is never placed: it goes to
default-scheduler at once through the hand-off, or (hand-off off or opted
out) gets one FailedScheduling event and stays parked. Binds finish on the binder's threads and report back here
(:meth:`Scheduler._bound`). A pod the engine placed over a metric's threshold
(saturation) gets a PlacedOverThreshold event once bound; saturated pods count in
``ksched_metric_saturation_total`` as placed (when bound) or pending. Only the leader runs cycles.

Rebalancing is read through one provider, its held room
(:class:`~ksched.loop.rebalancing.held.HeldRoom`): a pod of the batch that replaces a moved
pod is offered its held target first (as a nominated pod, in the engine's copy only), while
the replacements not yet seen hold their room as nominated pods and their load on their
targets' metrics (added by the load model). A replacement binding anywhere ends its hold.

The informer callbacks (:meth:`Scheduler.on_pod`, :meth:`Scheduler.on_node`)
route watch events to the cluster state and the queue.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
import numpy.typing as npt

from ksched.config import Config, MetricConfig
from ksched.engine import Engine, GangStatus, Placement
from ksched.engine.gangs import pod_group_of
from ksched.engine.messages import RESOURCE_CLAIMS_UNSUPPORTED
from ksched.engine.snapshot import Snapshot
from ksched.loop.metrics.load_model import LoadModel
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.mirror.state import ClusterState
from ksched.loop.rebalancing.held import HeldRoom
from ksched.loop.scheduling.binder import Binder, Outcome
from ksched.loop.scheduling.handoff import Handoff, opted_out
from ksched.loop.scheduling.queue import QueuedPod, SchedulingQueue, node_events
from ksched.loop.shards import Shards
from ksched.loop.telemetry import Telemetry
from ksched.objects import (
    Obj,
    is_terminal,
    meta,
    object_key,
    scheduler_name,
    spec,
    uses_resource_claims,
    without_hand_over,
)

log = logging.getLogger(__name__)

# How long an idle loop waits for work before checking leadership and shutdown again.
IDLE_WAIT_S = 0.5
# The event on a pod that this replica nominated to another replica's node (sharding).
HANDED_OVER = "HandedOver"
# Failures kept for ``/status`` (``ksched status``): enough for a screen.
RECENT_FAILURES = 20


class Scheduler:
    def __init__(
        self,
        config: Config,
        state: ClusterState,
        queue: SchedulingQueue,
        binder: Binder,
        telemetry: Telemetry,
        is_leader: Callable[[], bool],
        metrics: MetricStore,
        handoff: Handoff | None = None,
        *,
        seed: int = 0,
        held: HeldRoom | None = None,
        shards: Shards | None = None,
    ) -> None:
        self.config = config
        self.state = state
        self.queue = queue
        self.binder = binder
        self.telemetry = telemetry
        self.is_leader = is_leader
        self.metrics = metrics
        self.handoff = handoff
        # Active-active replicas (None: this replica places every pod, onto any node).
        self.shards = shards if shards is not None and shards.enabled else None
        # The room and load rebalancing holds for its moves' replacements (None: rebalancing is off).
        self.held = held
        # The metric values the engine is given, the held load included (:mod:`ksched.loop.metrics.load_model`).
        self.load = LoadModel(metrics, state.recent, held)
        self.engines = {
            p.scheduler_name: Engine(config, p.scheduler_name, seed=seed) for p in config.profiles
        }
        self.bound = 0
        state.wake = queue.wake
        # The last failures (unschedulable pods, failed binds) as {pod, reason, message, at}.
        self.failures: deque[dict[str, object]] = deque(maxlen=RECENT_FAILURES)

    # -- informer callbacks (informer threads) -------------------------

    def on_pod(self, kind: str, pod: Obj, old: Obj | None) -> None:
        self.state.on_pod(kind, pod, old)
        key = object_key(pod)
        bound = bool(spec(pod).get("nodeName"))
        if bound and kind != "DELETED" and not (old and spec(old).get("nodeName")):
            self._landed(pod)
        if kind == "DELETED" or bound or is_terminal(pod) or meta(pod).get("deletionTimestamp"):
            self.queue.remove(key)
            # Each event retries the unschedulable pods whose rejecting plugins registered it.
            if kind == "DELETED" and bound:
                self.queue.move_all("AssignedPodDelete")  # its node has room now
            elif bound and not (old and spec(old).get("nodeName")):
                self.queue.move_all("AssignedPodAdd")  # newly bound: affinity, spread or a gang may hold now
            elif bound and old is not None and meta(pod).get("labels") != meta(old).get("labels"):
                self.queue.move_all("AssignedPodLabelChange")  # what affinity and spread select
            return
        if scheduler_name(pod) in self.engines and not spec(pod).get("schedulingGates"):
            self.queue.add(pod)

    def on_pod_group(self, kind: str, group: Obj, old: Obj | None) -> None:
        self.state.on_pod_group(kind, group, old)
        # A gang waiting for its PodGroup, or for a lower minMember.
        self.queue.move_all("PodGroupAdd" if old is None else "PodGroupUpdate")

    def storage_handler(self, kind: str) -> Callable[[str, Obj, Obj | None], None]:
        """An informer handler for a volume kind (PersistentVolume, PersistentVolumeClaim,
        StorageClass, CSINode): an addition or change may let a pod waiting on its volumes fit
        (no plugin registers a deletion)."""
        into_state = self.state.storage_handler(kind)

        def handle(event: str, obj: Obj, old: Obj | None) -> None:
            into_state(event, obj, old)
            if event != "DELETED":
                self.queue.move_all(f"{kind}{'Add' if old is None else 'Update'}")

        return handle

    def on_node(self, kind: str, node: Obj, old: Obj | None) -> None:
        self.state.on_node(kind, node, old)
        for event in ["NodeDelete"] if kind == "DELETED" else node_events(node, old):
            self.queue.move_all(event)

    # -- the loop (one thread) ----------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Schedule until ``stop`` is set; waits while another replica leads."""
        # When the loop last left the queue: the time away until it asks again (applying watch
        # events, a cycle) is a pause no pending pod is looked at in.
        left_queue: float | None = None
        while not stop.is_set():
            if not self.is_leader():
                # A follower applies the watch events too: its inbox would otherwise grow for as
                # long as another replica leads, and its first cycle as leader apply all of them.
                self.state.sync()
                stop.wait(IDLE_WAIT_S)
                left_queue = None
                continue
            self._hand_off_overdue()
            if left_queue is not None:
                self.telemetry.loop_pause(time.perf_counter() - left_queue)
            batch = self.queue.pop_batch(
                self.config.batch.max_size, self.config.batch.max_wait_s, IDLE_WAIT_S
            )
            left_queue = time.perf_counter()
            if not batch:
                # Idle (or woken by the state's inbox filling): apply the watch events now, so
                # the next pod's cycle does not start by applying all of them.
                self.state.sync()
                # A learned estimate still takes the samples that come in while no pod waits.
                self.load.keep_learning(self.state.snapshot)
                continue
            try:
                self.cycle(batch)
            except Exception:
                # A bug must not stop scheduling: the batch backs off and the loop goes on.
                log.exception("scheduling cycle failed; %d pods back off", len(batch))
                for qp in batch:
                    if qp.where == "in_flight":
                        self.queue.done_error(qp)

    def cycle(self, batch: list[QueuedPod]) -> None:
        started = time.perf_counter()
        self.state.sync()
        if not self.is_leader():
            for qp in batch:
                self.queue.requeue(qp)
            return
        # Ownership first: only the owner hands a pod to default-scheduler or reports it.
        batch = [qp for qp in batch if self._owned(qp) and not self._not_ours(qp)]
        if not batch:
            return
        snapshot = self.state.snapshot()
        own = self.shards.own_nodes(snapshot.node_names) if self.shards is not None else None
        gangs = self._gangs(batch)
        # Replacements of the rebalancer's moves try their held target first (matched before
        # the values are built); the holds no pod has matched keep their load (the load model)
        # and their room.
        steered = {qp.key: self._engine_view(qp.pod) for qp in batch}
        matrix = self.load.scheduling(snapshot)
        nominated = self.queue.nominated()
        if self.held is not None:
            nominated += self.held.holding()
        groups: dict[tuple[str, bool], list[QueuedPod]] = defaultdict(list)
        for qp in batch:
            groups[(scheduler_name(qp.pod), qp.degraded)].append(qp)
        self.telemetry.batch_size.observe(len(batch))
        # Unbound claims a placement of this cycle binds: the engine does not know that two
        # pods of a batch name one claim, so each may pick another volume or node for it.
        claimed: set[str] = set()
        for (profile, retry), pods in groups.items():
            # A profile is degraded by its own metrics only; each note names its metric first
            # ("<metric>: <why>"). Pods a previous batch could not decide in time are retried
            # without metrics.
            uses = self.engines[profile].profile.uses
            dropped = [d for d in matrix.degraded if uses(d.partition(":")[0])]
            degraded = [*dropped, *(["retried without metrics"] if retry else [])]
            metrics = () if retry else matrix.metrics
            values = matrix.values if not retry else None
            caution = matrix.caution if not retry else None
            if degraded:
                self.telemetry.fallbacks.labels(reason="metric_unavailable" if not retry else "deadline").inc(
                    len(pods)
                )
            note = f" (degraded: {'; '.join(degraded)})" if degraded else ""
            try:
                result = self.engines[profile].schedule(
                    snapshot,
                    [steered[qp.key] for qp in pods],
                    values,
                    metrics=metrics,
                    deadline_s=self.config.batch.decision_deadline_s,
                    groups=gangs,
                    nominated=nominated,
                    nodes=own,
                    caution=caution,
                )
            except Exception:
                log.exception(
                    "engine error on a batch of %d pods; retrying them one by one without metrics", len(pods)
                )
                self.telemetry.fallbacks.labels(reason="engine_error").inc(len(pods))
                self._one_by_one(snapshot, profile, pods, gangs, own)
                continue
            self.telemetry.engine_duration.observe(result.rust_seconds)
            self.telemetry.engine_python.observe(result.python_seconds)
            elapsed = time.perf_counter() - started
            by_key = {qp.key: qp for qp in pods}
            # Pods no node of this replica's takes (sharding): tried on every node, then handed over.
            beyond: list[QueuedPod] = []
            for placement in result.placements:
                if self._beyond(by_key[placement.pod], placement):
                    beyond.append(by_key[placement.pod])
                    continue
                shared = {b.claim for b in placement.volumes} if placement.node is not None else set()
                if shared & claimed:
                    # Placed next cycle, where the earlier pod's binding of the claim is assumed
                    # (upstream's assume cache): binding it here would bind the claim twice.
                    self.queue.requeue(by_key[placement.pod])
                    continue
                claimed |= shared
                self._place(by_key[placement.pod], placement, profile, elapsed, note)
            if beyond:
                self._across(beyond, profile, values, metrics, gangs, nominated, elapsed, note, caution)

    def _owned(self, qp: QueuedPod) -> bool:
        """Whether this replica places the pod (sharding; see :mod:`ksched.loop.shards`); a pod
        another replica places waits in the queue until it or the replicas change."""
        if self.shards is None:
            return True
        if self.shards.pod_owner(qp.pod) == self.shards.identity:
            return True
        self.queue.done_elsewhere(qp)
        return False

    def _beyond(self, qp: QueuedPod, placement: Placement) -> bool:
        """A pod that fits none of this replica's nodes while other replicas own nodes: it is
        tried on every node (a gang is placed within one replica's). So is one that would
        preempt here: upstream preempts only for a pod that fits no node of the cluster."""
        return (
            self.shards is not None
            and placement.attempted
            and placement.node is None
            and len(self.shards.members()) > 1
            and pod_group_of(qp.pod) is None
        )

    def _across(
        self,
        pods: list[QueuedPod],
        profile: str,
        values: npt.NDArray[np.float64] | None,
        metrics: Sequence[MetricConfig],
        gangs: dict[str, GangStatus],
        nominated: list[Obj],
        elapsed: float,
        note: str,
        caution: npt.NDArray[np.float64] | None = None,
    ) -> None:
        """Place ``pods`` on every node: a pod whose node (or node to preempt on) is another
        replica's is handed over there (nominated, its ``ksched.io/HandedOver`` condition True:
        the nomination routes it and holds no room), for that replica to place (and to preempt
        on: only a node's owner evicts there); one that preempts on a node of this replica's does so here;
        the others are reported as any unschedulable pod (the message counts every node)."""
        assert self.shards is not None
        shards = self.shards
        try:
            result = self.engines[profile].schedule(
                self.state.snapshot(),
                [self._engine_view(qp.pod) for qp in pods],
                values,
                metrics=metrics,
                deadline_s=self.config.batch.decision_deadline_s,
                groups=gangs,
                nominated=nominated,
                caution=caution,
            )
        except Exception:
            log.exception("engine error placing %d pods on every node; they back off", len(pods))
            self.telemetry.fallbacks.labels(reason="engine_error").inc(len(pods))
            for qp in pods:
                self.queue.done_error(qp)
            return
        by_key = {qp.key: qp for qp in pods}
        for placement in result.placements:
            qp = by_key[placement.pod]
            target = placement.node or placement.nominated_node
            owner = shards.node_owner(target) if target is not None else None
            if target is None or owner is None or (owner == shards.identity and placement.node is None):
                self._place(qp, placement, profile, elapsed, note)  # fits nowhere, or preempts here
                continue
            if owner == shards.identity:
                self.queue.requeue(qp)  # fits here after all (the view moved): next cycle
                continue
            self.queue.done_elsewhere(qp, handed=True)
            self.telemetry.shard_handoffs.inc()
            shards.handed_over += 1
            why = "fits" if placement.node is not None else "may preempt"
            note = f"handed to replica {owner}: it {why} on {target}, its node"
            self.binder.report(qp.pod, "Normal", HANDED_OVER, "Scheduling", note)
            self.binder.hand_over(qp.pod, target, note, self._handed_over(qp))

    def _handed_over(self, qp: QueuedPod) -> Callable[[bool], None]:
        """After a hand-over's nomination: a pod whose nomination was not written is this
        replica's still, retried after its backoff."""

        def done(written: bool) -> None:
            if not written:
                self.queue.done_error(qp)

        return done

    def _engine_view(self, pod: Obj) -> Obj:
        """The pod as the engine is given it (a shallow copy; nothing is written to the API
        server): without a hand-over's nomination, which only routed it to this replica (the
        owner places it by its own view, and it holds no room), and a replacement of a
        rebalancing move nominated to its held target."""
        pod = without_hand_over(pod)
        target = self.held.steered_to(pod) if self.held is not None else None
        if target is None:
            return pod
        status = {**(pod.get("status") or {}), "nominatedNodeName": target}
        return {**pod, "status": status}

    def _landed(self, pod: Obj) -> None:
        """A pod was bound (by any scheduler): where it replaces a moved pod, its hold ends,
        counted by where it landed."""
        if self.held is None:
            return
        outcome = self.held.landed(pod, str(spec(pod).get("nodeName")))
        if outcome is not None:
            self.telemetry.rebalance_replacements.labels(outcome=outcome).inc()

    def _gangs(self, batch: list[QueuedPod]) -> dict[str, GangStatus]:
        """Complete the batch's gangs with their members waiting elsewhere in the queue
        (a gang is placed in one engine call or not at all), and their PodGroups' status."""
        wanted = {g for g in (pod_group_of(qp.pod) for qp in batch) if g is not None}
        if not wanted:
            return {}
        batch.extend(self.queue.take_members(lambda pod: pod_group_of(pod) in wanted))
        return {
            key: GangStatus(group.min_member, self.state.group_bound.get(key, 0))
            for key, group in self.state.pod_groups.items()
            if key in wanted
        }

    def _one_by_one(
        self,
        snapshot: Snapshot,
        profile: str,
        pods: list[QueuedPod],
        gangs: dict[str, GangStatus],
        own: set[str] | None = None,
    ) -> None:
        """Each pod alone and without metrics, on ``own`` nodes (sharding) or every node."""
        for qp in pods:
            try:
                # A gang member alone places only if the gang's bound members already reach minMember.
                result = self.engines[profile].schedule(
                    snapshot, [self._engine_view(qp.pod)], metrics=(), groups=gangs, nodes=own
                )
            except Exception:
                log.exception("engine error on %s even alone and without metrics", qp.key)
                self.telemetry.schedule_attempts.labels(result="error", profile=profile).inc()
                if self.handoff is not None:
                    # Never retried forever: default-scheduler gets it.
                    self.handoff.submit(qp.pod, "engine error", lambda ok, qp=qp: self._handed_off(qp, ok))
                else:
                    self.queue.done_error(qp)
                continue
            self._place(qp, result.placements[0], profile, 0.0, " (degraded: engine error on its batch)")

    def _place(
        self, qp: QueuedPod, placement: Placement, profile: str, elapsed: float, note: str = ""
    ) -> None:
        if not placement.attempted:
            qp.degraded = True  # past the decision deadline: next time without metrics
            self.telemetry.fallbacks.labels(reason="deadline").inc()
            self.queue.requeue(qp)
            return
        qp.degraded = False
        if placement.nominated_node is not None:
            self._preempt(qp, placement)
        elif placement.node is None and (qp.pod.get("status") or {}).get("nominatedNodeName"):
            self.binder.clear_nomination(qp.pod)
            self.queue.clear_nomination(qp)
        if placement.node is None or placement.requirements is None:
            message = placement.message or "no node fits"
            self.telemetry.schedule_attempts.labels(result="unschedulable", profile=profile).inc()
            self.telemetry.attempt_duration.labels(result="unschedulable", profile=profile).observe(elapsed)
            self.queue.done_unschedulable(qp, message, placement.rejected_by)
            self.binder.unschedulable(qp.pod, message + note)
            self._failed(qp, "Unschedulable", message + note)
            for s in placement.saturation:
                self.telemetry.saturated(s.metric, s.policy, "pending")
            return
        req = placement.requirements
        node = placement.node
        volumes = placement.volumes
        self.state.assume(qp.key, qp.uid, node, req, req.host_ports, req.info, req.priority, qp.pod)
        self.state.storage.assume(volumes, node)
        self.telemetry.placed(profile, elapsed)
        self.binder.bind(
            qp.pod,
            node,
            lambda outcome: self._bound(qp, placement, profile, outcome),
            note,
            volumes,
            self.engines[profile].profile.volume_bind_timeout_s,
        )

    def _preempt(self, qp: QueuedPod, placement: Placement) -> None:
        """Nominate the node and evict the victims; the pod is retried as they go."""
        assert placement.nominated_node is not None
        victims = []
        for key in placement.victims:
            usage = self.state.usage.get(key)
            namespace, _, name = key.partition("/")
            if usage is not None:
                victims.append((namespace, name, usage.uid))
        if victims:
            self.telemetry.preemption_attempts.inc()
            # Lower-priority pods nominated to that node lose their nomination (upstream
            # prepareCandidate): the room they held is the preemptor's now.
            for pod in self.queue.take_nominations(placement.nominated_node, qp.priority):
                self.binder.clear_nomination(pod)
        # The writer gets the pod as it stands (it skips a nomination already written); the
        # queue holds the new one from now on, and drops it if it was not written.
        pod, node = qp.pod, placement.nominated_node
        self.queue.nominate(qp, node)
        # Its victims count as terminating by preemption at once (this thread owns the state),
        # so that it waits for them rather than preempting again before the watch shows them.
        self.state.preempting(placement.victims)

        def done(written: bool) -> None:
            if not written:
                self.queue.nomination_failed(qp, node)
                self.state.at_this_point(partial(self.state.eviction_failed, placement.victims))

        self.binder.preempt(pod, node, victims, done)

    def _not_ours(self, qp: QueuedPod) -> bool:
        """Whether the pod is one ksched never places (it uses ResourceClaims), now dealt with:
        handed to default-scheduler at once, or reported and parked."""
        if not uses_resource_claims(qp.pod):
            return False
        if self.handoff is not None and self.config.handoff.enabled and not opted_out(qp.pod):
            # A failed hand-off backs off and comes back here.
            self.handoff.submit(qp.pod, "uses ResourceClaims", lambda ok, qp=qp: self._handed_off(qp, ok))
            return True
        self.queue.done_parked(qp, RESOURCE_CLAIMS_UNSUPPORTED)
        self.binder.unschedulable(qp.pod, RESOURCE_CLAIMS_UNSUPPORTED)
        self._failed(qp, "Unschedulable", RESOURCE_CLAIMS_UNSUPPORTED)
        return True

    def _hand_off_overdue(self) -> None:
        """Give pods ksched has failed to place for too long to default-scheduler."""
        if self.handoff is None or not self.config.handoff.enabled:
            return
        for qp in self.queue.take_overdue(self.config.handoff.after_s):
            if not self._owned(qp):
                continue  # another replica's now (sharding): it decides
            if opted_out(qp.pod):
                self.queue.done_unschedulable(qp, qp.last_message)
                continue
            reason = f"not placed for {self.config.handoff.after_s:g}s: {qp.last_message}"
            self.handoff.submit(qp.pod, reason, lambda ok, qp=qp: self._handed_off(qp, ok))

    def _handed_off(self, qp: QueuedPod, ok: bool) -> None:
        if ok:
            self.queue.done_bound(qp)
        else:
            self.queue.done_error(qp)

    # -- bind results (binder threads) ---------------------------------

    def _bound(self, qp: QueuedPod, placement: Placement, profile: str, outcome: Outcome) -> None:
        node = placement.node
        if outcome is Outcome.BOUND:
            self.bound += 1
            self.telemetry.bound(profile, qp.attempts + 1, self.queue.clock() - qp.added)
            if placement.saturation:
                self.binder.placed_over_threshold(qp.pod, placement.over_threshold())
                for s in placement.saturation:
                    self.telemetry.saturated(s.metric, s.policy, "placed")
            self.queue.done_bound(qp)
            return
        self.state.forget(qp.key, qp.uid)
        if placement.volumes:
            self.state.forget_volumes(placement.volumes)
        if outcome in (Outcome.CONFLICT, Outcome.GONE):
            # Bound by someone else, or deleted: the watch tells the rest.
            self.queue.done_bound(qp)
            return
        if outcome is Outcome.ERROR:
            self.telemetry.schedule_attempts.labels(result="error", profile=profile).inc()
            self._failed(qp, "BindingError", f"binding to {node} failed; retried with backoff")
        self.queue.done_error(qp)

    def _failed(self, qp: QueuedPod, reason: str, message: str) -> None:
        self.failures.append({"pod": qp.key, "reason": reason, "message": message, "at": time.time()})
