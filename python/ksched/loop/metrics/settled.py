"""What the pods bound before the recent window teach a learned load estimate.

Owns, for one learning metric, a pass through the pods the pod usage query measures that were
bound before the horizon (:func:`ksched.loop.metrics.recent_pods.horizon_s`: past any warm-up,
so stable) and that the recent pods do not hold:

- each teaches its workload (:class:`~ksched.loop.metrics.workloads.WorkloadHistory`), so that
  a Deployment running for days, or since before ksched started, counts at what its replicas
  use, and a herd of it with them; it refreshes a workload already remembered, or takes a free
  place, never one a workload the recent pods taught holds;
- together they give cluster-wide figures (:func:`~ksched.loop.metrics.workloads.learn`, over
  :data:`SETTLED_FIGURES_PODS` of them at a time, or a whole round through fewer), which stand in for a kind of guess the
  recent pods have not taught yet (:meth:`SettledPods.stand_in`): a ksched just started in a
  steady cluster counts a BestEffort pod at what the running ones use, not at 100m.

A workload that is getting new pods has its remembered replicas visited at the next pass,
due or not (:meth:`SettledPods.revisit`): a scale-up from idle counts at what they use now.
A pass at most every :data:`SETTLED_EVERY_S`, each time the load estimate is asked for the
metric (a scheduling cycle, a steering or rebalancing look, a shadow comparison, and an idle
ksched's build every :data:`~ksched.loop.metrics.load_model.LEARN_EVERY_S`), over at
most :data:`SETTLED_PER_PASS` of the measured pods (in a shuffled order, the next ones at the
next pass), so each pass costs a bounded time on the scheduling thread whatever the cluster's
size. Nothing here reads the cluster state or the
clock: the pods are looked up, and the times given, by the caller.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import replace

import numpy as np

from ksched.config import EstimateConfig
from ksched.config.estimate import Calibration, Learned
from ksched.engine.estimate import guess, revision_of, workload_of
from ksched.engine.pods import CountedRequests
from ksched.loop.metrics.workloads import WorkloadHistory, learn
from ksched.objects import Obj

# A pass at most every SETTLED_EVERY_S over SETTLED_PER_PASS pods: 5,000 pods of 1,000 workloads
# took 62 ms in one block on the 2-core VM, so a pass of 1,000 takes about a fifth of that; a
# cluster of 1,000 pods is read whole each pass, one of 150,000 in 150 passes. The cluster-wide
# figures are taught over SETTLED_FIGURES_PODS pods, or a whole round through fewer.
SETTLED_EVERY_S = 6.0
SETTLED_PER_PASS = 1000
SETTLED_FIGURES_PODS = 5000
# Cluster-wide figures the settled pods taught stand in for this long after they were last
# taught (a pod query that stops answering leaves none standing for good).
SETTLED_TTL_S = 3600.0

# A bound pod's uid, bind time, (slim) object and counted requests, by key (``namespace/name``);
# None where the pod is not counted as bound (gone, only assumed, or being deleted).
Lookup = Callable[[str], tuple[str, float, Obj, CountedRequests] | None]


class SettledPods:
    """One learning metric's pass through the settled pods (see the module's docstring).
    ``per_pass``: pods a pass visits at most (None: all, as the dry run does)."""

    def __init__(self, per_pass: int | None = SETTLED_PER_PASS, seed: int = 0) -> None:
        self.per_pass = per_pass
        self._due = -math.inf
        self._queue: deque[str] = deque()
        self._random = random.Random(seed)
        # What the pods visited since the figures were last taught measured: (kind, guess, used).
        self._rows: list[tuple[int, float, float]] = []
        # Pods to visit at the next builds, a pass due or not (:meth:`revisit`), in order, each
        # once: remembered pods' keys, so never more than the workloads remember.
        self._urgent: deque[str] = deque()
        self._queued: set[str] = set()
        # The last cluster-wide figures they taught of each kind (from requests, BestEffort), and
        # when: a kind no pod teaches any more expires on its own.
        self._ratio: tuple[float, Learned] | None = None
        self._best_effort: tuple[float, Learned] | None = None

    def teach(
        self,
        now: float,
        measured: Mapping[str, float],
        lookup: Lookup,
        recent: Container[str],
        horizon_s: float,
        estimate: EstimateConfig,
        history: WorkloadHistory,
    ) -> None:
        """Visit the next measured pods when a pass is due: each bound before ``now -
        horizon_s`` and not in ``recent`` teaches ``history`` under its workload, and the
        cluster-wide figures once enough were visited (or the round through them ended)."""

        def visit(key: str, cluster: bool = True) -> None:
            """The settled pod ``key`` teaches its workload what it measures, and with
            ``cluster`` the cluster-wide figures (a revisit does not: its pod would count twice
            in the round); unless it is recent, unmeasured, gone or bound within the horizon."""
            used = measured.get(key)
            if used is None or not math.isfinite(used) or key in recent:
                return
            found = lookup(key)
            if found is None:
                return
            uid, bound_at, pod, requests = found
            if now - bound_at < horizon_s:
                return  # bound within the horizon: the recent pods' to judge
            amount, kind = guess(pod, requests, estimate)
            if cluster:
                self._rows.append((kind, float(amount), float(used)))
            workload = workload_of(pod, estimate.workload_label)
            if workload is not None:
                history.observe(
                    now,
                    workload,
                    uid,
                    kind,
                    float(amount),
                    float(used),
                    displace=False,
                    revision=revision_of(pod),
                    key=key,
                )

        urgent = self._urgent
        for _ in range(len(urgent) if self.per_pass is None else min(self.per_pass, len(urgent))):
            key = urgent.popleft()
            self._queued.discard(key)
            visit(key, cluster=False)
        if now < self._due:
            return
        self._due = now + SETTLED_EVERY_S
        queue = self._queue
        if not queue:
            keys = list(measured)
            self._random.shuffle(keys)
            queue.extend(keys)
        rows = self._rows
        for _ in range(len(queue) if self.per_pass is None else min(self.per_pass, len(queue))):
            visit(queue.popleft())
        if rows and (not queue or len(rows) >= SETTLED_FIGURES_PODS):
            table = np.array(rows, dtype=np.float64).reshape(-1, 3)
            taught = learn(table[:, 1], table[:, 0].astype(np.int8), table[:, 2])
            if taught.ratio is not None:
                self._ratio = (now, taught)
            if taught.best_effort is not None:
                self._best_effort = (now, taught)
            rows.clear()

    def revisit(self, keys: Iterable[str]) -> None:
        """Visit these pods at the next :meth:`teach`, whether or not a pass is due (up to
        ``per_pass`` of them a build, the rest at the next): the replicas of a workload that is
        getting new pods, so that a scale-up from idle counts at what they use now, not at what
        they used when a pass last reached them (in a cluster of 150,000 pods, up to fifteen
        minutes before)."""
        for key in keys:
            if key not in self._queued:
                self._queued.add(key)
                self._urgent.append(key)

    def stand_in(self, now: float, recent: Calibration) -> Calibration:
        """The recent pods' cluster-wide figures, with each kind they have not taught (too few
        measured) taken from the settled pods' while those are fresh (:data:`SETTLED_TTL_S`)."""
        ratio, best = self._ratio, self._best_effort
        if recent.ratio is None and ratio is not None and now - ratio[0] <= SETTLED_TTL_S:
            recent = replace(
                recent,
                ratio=ratio[1].ratio,
                ratio_sd=ratio[1].ratio_sd,
                ratio_pods=ratio[1].ratio_pods,
                ratio_settled=True,
            )
        if recent.best_effort is None and best is not None and now - best[0] <= SETTLED_TTL_S:
            recent = replace(
                recent,
                best_effort=best[1].best_effort,
                best_effort_sd=best[1].best_effort_sd,
                best_effort_pods=best[1].best_effort_pods,
                best_effort_settled=True,
            )
        return recent
