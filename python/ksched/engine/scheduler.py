"""The one scheduling algorithm behind ``run``, ``simulate``, ``explain`` and ``bench``.

Owns parsing and ordering a batch of pending pods (queue order, gangs kept
together), compiling it (:mod:`ksched.engine.batch`; the engine's inputs are
:mod:`ksched.engine.inputs`'s) and the call into ``ksched._core``. A batch runs
once, or again until its gangs are whole (:mod:`ksched.engine.gang_placement`)
and its saturated pods are relaxed (:mod:`ksched.engine.saturation`); the last
run's integer results become placements (:mod:`ksched.engine.verdicts`,
:mod:`ksched.engine.placements`) with upstream's FailedScheduling message. A
malformed pod becomes a placement with an error message; it never stops the batch.

Two metric policies are applied here, so every command shares them: a profile
runs with its own metrics only (``ProfileConfig.metrics``), and a pod that every
node passing the other filters rejects on a threshold of a ``leastLoaded``
metric (``onSaturation``) is placed again in the same batch with that threshold
raised to the least-loaded node's value (:mod:`ksched.engine.saturation`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import numpy.typing as npt

from ksched import _core
from ksched.config import Config, MetricConfig
from ksched.core_types import Outcome
from ksched.engine.batch import Batch, EngineInputs, Parsed
from ksched.engine.gang_placement import gang_order, place_whole_gangs
from ksched.engine.gangs import GangStatus
from ksched.engine.inputs import (
    ClassColumns,
    Row,
    engine_profile,
    metric_columns,
    metric_load,
    metric_specs,
    pod_batch,
    shape_row,
)
from ksched.engine.messages import (
    AFFINITY_CONFLICT,
    RESOURCE_CLAIMS_UNSUPPORTED,
    ReasonNames,
    prefilter_error,
)
from ksched.engine.placements import LEAST_LOADED, BatchResult, Placement
from ksched.engine.pod_level import SpreadConstraint
from ksched.engine.requirements import PodRequirements, requirements
from ksched.engine.saturation import note_saturation, relax_saturated, relax_thresholds, relaxed_load
from ksched.engine.selectors import added_affinity, prefilter_node_names
from ksched.engine.snapshot import Snapshot
from ksched.engine.verdicts import explanation_of, read_verdicts
from ksched.engine.volumes import NO_VOLUMES, pod_volumes
from ksched.errors import KschedError, MalformedObjectError
from ksched.objects import Obj, pod_key, uses_resource_claims


class Engine:
    """Schedules batches of pending pods for one profile.

    >>> engine = Engine(Config())                          # doctest: +SKIP
    >>> result = engine.schedule(snapshot, pending_pods)   # doctest: +SKIP
    """

    def __init__(
        self,
        config: Config,
        profile: str | None = None,
        *,
        seed: int = 0,
        parallel: bool = True,
        reuse: bool = True,
    ):
        chosen = config.profile(profile) if profile else config.profiles[0]
        if chosen is None:
            raise KschedError(
                f"no profile named {profile!r} (profiles: {', '.join(p.scheduler_name for p in config.profiles)})"
            )
        self.config = config
        self.profile = chosen
        # NodeAffinity's addedAffinity: required of every pod (its own reason), preferred merged into each pod's.
        self.enforced, self.added_preferred = added_affinity(chosen.added_affinity)
        self.seed = seed
        self.parallel = parallel
        # The engine's class and signature caches, kept from one call to the next: the
        # engine reuses them only where this call's inputs equal those they were computed
        # from (nodes whose state moved are re-evaluated), so placements never depend on it.
        self.cache = _core.ScheduleCache() if reuse else None

    def schedule(
        self,
        snapshot: Snapshot,
        pods: Sequence[Obj],
        metric_values: npt.NDArray[np.float64] | None = None,
        *,
        deadline_s: float | None = None,
        explain: str | None = None,
        metrics: Sequence[MetricConfig] | None = None,
        groups: Mapping[str, GangStatus] | None = None,
        nominated: Sequence[Obj] = (),
        moved: Mapping[str, Mapping[str, float]] | None = None,
        nodes: set[str] | None = None,
        caution: npt.NDArray[np.float64] | None = None,
    ) -> BatchResult:
        """Place ``pods`` (pending, any order) on ``snapshot``; returns one placement per pod, in queue order.

        ``metric_values`` has one column per metric of ``metrics`` (default: the
        configuration's); ``metrics=()`` schedules without any. ``groups`` maps
        each PodGroup (``namespace/name``) to its minMember and members already
        bound: a gang is placed only if at least minMember of it can be placed
        together, else none of it is (see :mod:`ksched.engine.gang_placement`). ``nominated`` are
        pending pods outside the batch that an earlier preemption nominated to a
        node: that room is held for pods of lower or equal priority. ``moved``: pods (by
        key) that move a known load, metric name -> usage in engine units
        (:func:`~ksched.engine.inputs.metric_load`): a rebalancing move's replacement. ``nodes``:
        the only nodes a pod may be placed or preempt on (a sharded replica's own), as if each
        pod's node affinity named them (upstream's PreFilter result); None: every node.
        ``caution``: the part of each of ``metric_values`` that the load estimate's deviations
        added (:attr:`~ksched.loop.metrics.metric_sources.Matrix.caution`): the metric filter
        reads the values, the metric scores the values less this; None: none."""
        started = time.perf_counter()
        if metrics is None:
            metrics = self.config.metrics
        kept = self._own_metrics(metrics)
        if kept is not None:
            metrics = [metrics[k] for k in kept]
            metric_values = None if metric_values is None else metric_values[:, kept]
            caution = None if caution is None else caution[:, kept]
        batch = self._compile(snapshot, _in_queue_order(pods), metrics, groups, explain, nodes)
        call = partial(
            self._call,
            snapshot,
            batch,
            metrics,
            metric_values,
            nominated=nominated,
            moved=moved,
            caution=caution,
        )
        run = partial(call, deadline_s)
        if any(m.on_saturation == LEAST_LOADED for m in metrics):
            relax = partial(relax_thresholds, batch, metrics, snapshot)
            run = partial(relax_saturated, call, relax, deadline_s)
        out, victim_keys = place_whole_gangs(batch, groups or {}, run)
        read_verdicts(snapshot, batch, out, victim_keys)
        if metrics:
            note_saturation(snapshot, batch, out, metrics, metric_values)
        placements = [p for p in batch.results if p is not None]
        explanation = explanation_of(snapshot, batch, out, metrics)
        python_seconds = time.perf_counter() - started - batch.rust_seconds
        return BatchResult(placements, explanation, batch.rust_seconds, python_seconds)

    def _own_metrics(self, metrics: Sequence[MetricConfig]) -> list[int] | None:
        """The columns of the profile's metrics among ``metrics`` (None: all of them)."""
        if self.profile.metrics is None:
            return None
        kept = [k for k, m in enumerate(metrics) if self.profile.uses(m.name)]
        return None if len(kept) == len(metrics) else kept

    def _compile(
        self,
        snapshot: Snapshot,
        parsed: Sequence[Parsed],
        metrics: Sequence[MetricConfig],
        groups: Mapping[str, GangStatus] | None,
        explain: str | None,
        nodes: set[str] | None = None,
    ) -> Batch:
        """An engine row per pod the engine can attempt, in queue order. The others get
        their placement here: a malformed pod, a pod with ResourceClaims (never ksched's),
        a pod of an unknown PodGroup, and a pod whose required node affinity names no node."""
        selectors = snapshot.spread_selectors
        # With no Service or controller known, every pod's default spreading selector is
        # empty (no default constraints): not looked up pod by pod.
        spread_defaults = () if selectors.selects_nothing() else self.profile.spread_defaults
        results: list[Placement | None] = []
        rows: list[Row] = []
        explain_slot = None
        pod_level = False
        # What follows from a pod's spec alone, once per shape (see PodRequirements.shape_id):
        # the shapes met, and those with a row (their engine rows are built below).
        shapes: dict[int, _Shape] = {}
        requested: list[dict[str, int]] = []
        with_rows: list[tuple[PodRequirements, set[str] | None]] = []
        for _, pod, req in parsed:
            if isinstance(req, MalformedObjectError):
                results.append(
                    Placement(pod_key(pod), None, None, f"invalid pod: {req.field}: {req.problem}")
                )
                continue
            shape = shapes.get(req.shape_id)
            if shape is None:
                prefilter = prefilter_node_names(req.constraints.required)
                if nodes is not None:
                    prefilter = nodes if prefilter is None else prefilter & nodes
                shape = _Shape(uses_resource_claims(pod), prefilter)
                if req.shape_id >= 0:
                    shapes[req.shape_id] = shape
                # The pods of a shape share its requests mapping.
                requested.append(req.requests)
            if shape.resource_claims:
                results.append(Placement(req.key, None, None, RESOURCE_CLAIMS_UNSUPPORTED))
                continue
            if req.group is not None and (groups is None or req.group not in groups):
                results.append(Placement(req.key, None, None, f'pod group "{req.group}" not found'))
                continue
            prefilter = shape.prefilter
            if prefilter is not None and not prefilter:
                results.append(
                    Placement(req.key, None, None, prefilter_error(snapshot.count, AFFINITY_CONFLICT))
                )
                continue
            volumes = NO_VOLUMES
            if req.claims:
                claimed = pod_volumes(
                    snapshot.storage,
                    req.claims,
                    restrictions="VolumeRestrictions" in self.profile.filters,
                    binding="VolumeBinding" in self.profile.filters,
                    zone="VolumeZone" in self.profile.filters,
                    limits="NodeVolumeLimits" in self.profile.filters,
                )
                if isinstance(claimed, str):
                    results.append(Placement(req.key, None, None, prefilter_error(snapshot.count, claimed)))
                    continue
                volumes = claimed
            if shape.index < 0:
                shape.index = len(with_rows)
                with_rows.append((req, prefilter))
                # Affinity and spreading are the shape's.
                pod_level = pod_level or req.info.affinity is not None or bool(req.spread)
            if explain == req.key:
                explain_slot = len(results)
            default_spread: tuple[SpreadConstraint, ...] = ()
            if spread_defaults and not req.spread:
                default_spread = selectors.defaults(pod, spread_defaults)
                pod_level = pod_level or bool(default_spread)
            rows.append(Row(len(results), req, shape.index, pod, default_spread, volumes))
            results.append(None)
        snapshot.ensure_resources(
            {r for requests in requested for r in requests}
            | {m.estimate.resource for m in metrics if m.estimate is not None}
        )
        res = snapshot.resources
        batch = Batch(
            ClassColumns(snapshot, enforced=self.enforced or ()),
            ReasonNames(res.names, [(m.name, m.above, m.below) for m in metrics]),
            rows,
            results=results,
            explain_slot=explain_slot,
            pod_level=pod_level,
        )
        batch.shapes = [
            shape_row(snapshot, batch.classes, req, prefilter, self.added_preferred)
            for req, prefilter in with_rows
        ]
        return batch

    def _call(
        self,
        snapshot: Snapshot,
        batch: Batch,
        metrics: Sequence[MetricConfig],
        metric_values: npt.NDArray[np.float64] | None,
        deadline_s: float | None,
        nominated: Sequence[Obj],
        moved: Mapping[str, Mapping[str, float]] | None = None,
        caution: npt.NDArray[np.float64] | None = None,
    ) -> tuple[Outcome, list[str]]:
        """One engine call on the batch's rows (in order); also the keys of the evictable pods.
        Only the call itself counts as the batch's Rust time: its inputs are built first, once
        for the rows (:meth:`_compiled`), with each run's relaxed thresholds on top."""
        inputs = batch.inputs
        if inputs is None:
            inputs = batch.inputs = self._compiled(
                snapshot, batch, metrics, metric_values, nominated, moved, caution
            )
        load = relaxed_load(inputs.load, batch)
        started = time.perf_counter()
        out = _core.schedule(
            inputs.nodes,
            inputs.classes,
            inputs.pods.pods,
            inputs.values,
            inputs.specs,
            inputs.profile,
            metric_load=load,
            seed=self.seed,
            deadline_s=deadline_s,
            explain=inputs.explain_row,
            parallel=self.parallel,
            cache=self.cache,
            # The nodes only these metrics' thresholds refused are where a saturated pod may go.
            threshold_metrics=[k for k, m in enumerate(metrics) if m.on_saturation == LEAST_LOADED],
        )
        batch.rust_seconds += time.perf_counter() - started
        return out, inputs.pods.victim_keys

    def _compiled(
        self,
        snapshot: Snapshot,
        batch: Batch,
        metrics: Sequence[MetricConfig],
        metric_values: npt.NDArray[np.float64] | None,
        nominated: Sequence[Obj],
        moved: Mapping[str, Mapping[str, float]] | None,
        caution: npt.NDArray[np.float64] | None,
    ) -> EngineInputs:
        """The engine's inputs for the batch's rows, before any threshold is relaxed. Nothing
        they are built from changes between runs on the same rows (the saturation reruns)."""
        pods = pod_batch(
            snapshot,
            batch.rows,
            batch.shapes,
            batch.classes,
            self.profile,
            pod_level=batch.pod_level,
            nominated=nominated,
        )
        batch.volumes = pods.volumes
        return EngineInputs(
            pods=pods,
            values=metric_columns(snapshot, metrics, metric_values),
            nodes=snapshot.engine_nodes(),
            classes=batch.classes.table(),
            specs=metric_specs(metrics, snapshot),
            profile=engine_profile(self.profile, snapshot),
            explain_row=batch.explain_row(),
            load=metric_load(snapshot, batch.rows, metrics, moved, caution),
        )


@dataclass(slots=True)
class _Shape:
    """What one batch's pods of one shape share (see ``Engine._compile``)."""

    resource_claims: bool
    prefilter: set[str] | None
    # Its index in the batch's shapes, once a pod of the shape gets a row.
    index: int = -1


def _in_queue_order(pods: Sequence[Obj]) -> list[Parsed]:
    """Each pod parsed, by priority descending, then arrival (upstream PrioritySort);
    a pod that cannot be parsed keeps its place with its error. Gangs' members are
    then moved together (:func:`~ksched.engine.gang_placement.gang_order`) when the batch holds any."""
    parsed: list[Parsed] = []
    priorities: set[int] = set()
    grouped = False
    for i, pod in enumerate(pods):
        try:
            req = requirements(pod)
        except MalformedObjectError as err:
            parsed.append((i, pod, err))
            priorities.add(0)
            continue
        parsed.append((i, pod, req))
        priorities.add(req.priority)
        grouped = grouped or req.group is not None
    # A stable sort: pods of equal priority stay in arrival order (all of one priority: as they came).
    if len(priorities) > 1:
        parsed.sort(key=lambda t: -t[2].priority if isinstance(t[2], PodRequirements) else 0)
    return gang_order(parsed) if grouped else parsed
