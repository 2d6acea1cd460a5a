"""The one scheduling algorithm behind ``run``, ``simulate``, ``explain`` and ``bench``.

Owns parsing and ordering a batch of pending pods (queue order, gangs kept
together), the call into ``ksched._core`` on the inputs :mod:`ksched.engine.inputs`
compiles, placing gangs all-or-nothing, and turning the engine's integer
results into placements (:mod:`ksched.engine.placements`) with upstream's
FailedScheduling message. A malformed pod becomes a placement with an error
message; it never stops the batch.

Two metric policies are applied here, so every command shares them: a profile
runs with its own metrics only (``ProfileConfig.metrics``), and a pod that every
node passing the other filters rejects on a threshold of a ``leastLoaded``
metric (``onSaturation``) is placed again in the same batch with that threshold
raised to the least-loaded node's value, so that node is the one that passes
(:func:`_relax_saturated`); the metric's missing policy still applies. Each such
pod's placement says so (``Placement.saturation``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from ksched import _core
from ksched.config import Config, MetricConfig
from ksched.core_types import MetricLoad, Outcome
from ksched.engine.inputs import (
    ClassColumns,
    Row,
    ShapeRow,
    engine_profile,
    metric_columns,
    metric_load,
    metric_specs,
    pod_batch,
    shape_row,
)
from ksched.engine.load import shares
from ksched.engine.messages import (
    AFFINITY_CONFLICT,
    NOT_ELIGIBLE_NEVER,
    NOT_ELIGIBLE_TERMINATING,
    POSTFILTER,
    RESOURCE_CLAIMS_UNSUPPORTED,
    ReasonNames,
    fit_error,
    post_filter,
    prefilter_error,
    with_post_filter,
)
from ksched.engine.placements import (
    LEAST_LOADED,
    BatchResult,
    Explanation,
    Placement,
    Saturation,
    explanation,
)
from ksched.engine.pod_level import PodInfo, SpreadConstraint
from ksched.engine.pods import HostPort
from ksched.engine.podtable import Evictable
from ksched.engine.requirements import PodRequirements, requirements
from ksched.engine.selectors import added_affinity, prefilter_node_names
from ksched.engine.snapshot import Snapshot, add_usage, node_thresholds
from ksched.engine.volumes import NO_VOLUMES, VolumeColumns, pod_volumes
from ksched.errors import KschedError, MalformedObjectError
from ksched.objects import Obj, pod_key, uses_resource_claims

# ``MetricLoad``'s ``exempt``: only the pod's own thresholds apply (a relaxed pod's), not the
# nodes'; the metric's missing policy still does.
POD_THRESHOLDS = 2

# What every placed pod's Placement shares: each is a copy of its fields with the pod's set
# (see _read_verdicts; no __init__, which checks a setattr per field, per placed pod).
_PLACED = Placement("", None, None, None)


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
    ) -> BatchResult:
        """Place ``pods`` (pending, any order) on ``snapshot``; returns one placement per pod, in queue order.

        ``metric_values`` has one column per metric of ``metrics`` (default: the
        configuration's); ``metrics=()`` schedules without any. ``groups`` maps
        each PodGroup (``namespace/name``) to its minMember and members already
        bound: a gang is placed only if at least minMember of it can be placed
        together, else none of it is (see :func:`_gang_order`). ``nominated`` are
        pending pods outside the batch that an earlier preemption nominated to a
        node: that room is held for pods of lower or equal priority."""
        started = time.perf_counter()
        if metrics is None:
            metrics = self.config.metrics
        metrics, metric_values = self._own_metrics(metrics, metric_values)
        batch = self._compile(snapshot, _in_queue_order(pods), metrics, groups, explain)
        call = partial(self._call, snapshot, batch, metrics, metric_values, nominated=nominated)
        run = partial(call, deadline_s)
        if any(m.on_saturation == LEAST_LOADED for m in metrics):
            run = partial(_relax_saturated, batch, metrics, call, deadline_s)
        out, victim_keys = _place_whole_gangs(batch, groups or {}, run)
        _read_verdicts(snapshot, batch, out, victim_keys)
        if metrics:
            _note_saturation(snapshot, batch, out, metrics, metric_values)
        placements = [p for p in batch.results if p is not None]
        explanation = _explain(snapshot, batch, out, metrics)
        python_seconds = time.perf_counter() - started - batch.rust_seconds
        return BatchResult(placements, explanation, batch.rust_seconds, python_seconds)

    def _own_metrics(
        self, metrics: Sequence[MetricConfig], values: npt.NDArray[np.float64] | None
    ) -> tuple[Sequence[MetricConfig], npt.NDArray[np.float64] | None]:
        """The profile's metrics among ``metrics``, and their columns of ``values``."""
        if self.profile.metrics is None:
            return metrics, values
        kept = [k for k, m in enumerate(metrics) if self.profile.uses(m.name)]
        if len(kept) == len(metrics):
            return metrics, values
        return [metrics[k] for k in kept], None if values is None else values[:, kept]

    def _compile(
        self,
        snapshot: Snapshot,
        parsed: Sequence[_Parsed],
        metrics: Sequence[MetricConfig],
        groups: Mapping[str, GangStatus] | None,
        explain: str | None,
    ) -> _Batch:
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
                shape = _Shape(uses_resource_claims(pod), prefilter_node_names(req.constraints.required))
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
        batch = _Batch(
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
        batch: _Batch,
        metrics: Sequence[MetricConfig],
        metric_values: npt.NDArray[np.float64] | None,
        deadline_s: float | None,
        nominated: Sequence[Obj],
    ) -> tuple[Outcome, list[str]]:
        """One engine call on the batch's rows (in order); also the keys of the evictable pods.
        Only the call itself counts as the batch's Rust time: its inputs are built first."""
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
        values = metric_columns(snapshot, metrics, metric_values)
        nodes = snapshot.engine_nodes()
        classes = batch.classes.table()
        specs = metric_specs(metrics, snapshot)
        profile = engine_profile(self.profile, snapshot)
        explain_row = batch.explain_row()
        load = _relaxed(metric_load(snapshot, batch.rows, metrics), batch, metrics, snapshot, metric_values)
        started = time.perf_counter()
        out = _core.schedule(
            nodes,
            classes,
            pods.pods,
            values,
            specs,
            profile,
            metric_load=load,
            seed=self.seed,
            deadline_s=deadline_s,
            explain=explain_row,
            parallel=self.parallel,
            cache=self.cache,
        )
        batch.rust_seconds += time.perf_counter() - started
        return out, pods.victim_keys


@dataclass(slots=True)
class _Shape:
    """What one batch's pods of one shape share (see ``Engine._compile``)."""

    resource_claims: bool
    prefilter: set[str] | None
    # Its index in the batch's shapes, once a pod of the shape gets a row.
    index: int = -1


_Parsed = tuple[int, Obj, PodRequirements | MalformedObjectError]
"""A pod's arrival index, the pod, and its parsed requirements (or why they cannot be parsed)."""


@dataclass
class _Batch:
    """One batch compiled for the engine: the rows it runs on, and a result slot
    per pod in queue order (None until the engine's verdict is read)."""

    classes: ClassColumns
    names: ReasonNames
    rows: list[Row] = field(default_factory=list)
    # The engine row parts of each shape with a row (``Row.shape``).
    shapes: list[ShapeRow] = field(default_factory=list)
    results: list[Placement | None] = field(default_factory=list)
    # The slot of the pod ``explain`` names, when the engine attempts it.
    explain_slot: int | None = None
    # Time inside ``_core.schedule``, summed over the gang re-runs.
    rust_seconds: float = 0.0
    # The last engine call's claims, to read the volumes it chose.
    volumes: VolumeColumns | None = None
    # Some row (dropped gangs' included) has pod affinity or spreading, its own or by default.
    pod_level: bool = False
    # Saturation: the pods (by slot) whose thresholds of ``leastLoaded`` metrics are relaxed,
    # each with the side (``above``, ``below``) that rejected the nodes.
    relaxed: dict[int, dict[int, str]] = field(default_factory=dict)
    # Per relaxed (slot, metric): how many of the least-loaded nodes over the threshold
    # the relaxed threshold let through and the pod still could not take (``_relaxed``);
    # ``off``: those with no node left to let through, whose threshold is off.
    passed_over: dict[tuple[int, int], int] = field(default_factory=dict)
    off: set[tuple[int, int]] = field(default_factory=set)

    def explain_row(self) -> int | None:
        """The row of the explained pod, None when it has none (or was dropped with its gang)."""
        if self.explain_slot is None:
            return None
        return next((j for j, r in enumerate(self.rows) if r.slot == self.explain_slot), None)

    def threshold_hits(self, out: Outcome) -> dict[int, dict[int, str]]:
        """The pods (by slot) the engine's run left unplaced although some node was rejected
        only by a metric threshold (the metric filter runs after all the others, so that node
        passed them): slot -> {metric index: side}."""
        nodes = out["nodes"]
        offsets, codes = out["reason_offsets"], out["reason_codes"]
        hits: dict[int, dict[int, str]] = {}
        if not np.any(codes >= self.names.first_metric_code):
            return hits  # no metric rejected any node: nothing to read pod by pod
        for j in np.flatnonzero((nodes < 0) & (nodes != _core.NOT_ATTEMPTED)).tolist():
            for code in codes[int(offsets[j]) : int(offsets[j + 1])].tolist():
                hit = self.names.threshold(code)
                if hit is not None:
                    hits.setdefault(self.rows[j].slot, {}).setdefault(*hit)
        return hits

    def drop_gangs(self, short: Mapping[str, str | None]) -> None:
        """Take the members of the ``short`` gangs out of the rows and give each its
        verdict (a None reason: the deadline cut the gang short; it is retried, not attempted)."""
        kept: list[Row] = []
        for row in self.rows:
            group = row.req.group
            if group is not None and group in short:
                why = short[group]
                self.results[row.slot] = Placement(row.req.key, None, None, why, attempted=why is not None)
            else:
                kept.append(row)
        self.rows = kept


@dataclass(frozen=True)
class GangStatus:
    """A PodGroup as the engine sees it: its minMember and how many members are bound."""

    min_member: int
    bound: int = 0


def _in_queue_order(pods: Sequence[Obj]) -> list[_Parsed]:
    """Each pod parsed, by priority descending, then arrival (upstream PrioritySort);
    a pod that cannot be parsed keeps its place with its error. Gangs' members are
    then moved together (:func:`_gang_order`) when the batch holds any."""
    parsed: list[_Parsed] = []
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
    return _gang_order(parsed) if grouped else parsed


def _gang_order(parsed: list[_Parsed]) -> list[_Parsed]:
    """Each gang's members moved together to the place of its first member, so two
    gangs competing for the same room are never interleaved (the first placed whole
    wins instead of both stopping short: the deadlock of one-pod-at-a-time schedulers)."""
    members: dict[str, list[_Parsed]] = {}
    for t in parsed:
        group = t[2].group if isinstance(t[2], PodRequirements) else None
        if group is not None:
            members.setdefault(group, []).append(t)
    if not members:
        return parsed
    out = []
    for t in parsed:
        group = t[2].group if isinstance(t[2], PodRequirements) else None
        if group is None:
            out.append(t)
        elif group in members:
            out.extend(members.pop(group))
    return out


def _place_whole_gangs(
    batch: _Batch, groups: Mapping[str, GangStatus], run: Callable[[], tuple[Outcome, list[str]]]
) -> tuple[Outcome, list[str]]:
    """Run the engine on the batch (``run``) until every gang left in it reaches minMember.

    Gangs that cannot are taken out and the batch placed again without them:
    no partial gang is ever placed, and no later pod sees a placement that is
    undone. Returns the last run's output and the keys of its evictable pods."""
    if not groups:
        return run()  # no gang: a pod of a PodGroup gets a row only when groups holds it
    while True:
        out, victim_keys = run()
        short = _short_gangs(batch.rows, out["nodes"], groups)
        if not short:
            return out, victim_keys
        batch.drop_gangs(short)


def _relax_saturated(
    batch: _Batch,
    metrics: Sequence[MetricConfig],
    run: Callable[[float | None], tuple[Outcome, list[str]]],
    deadline_s: float | None,
) -> tuple[Outcome, list[str]]:
    """Run the engine (``run``) on the batch until it leaves no pod unplaced that a threshold
    of a ``leastLoaded`` metric, still on for that pod, rejected some node on: each such pod
    runs again (``_Batch.relaxed``), at its place in the batch, so the pods before it are
    placed as before, with that threshold at the least-loaded rejected node's value
    (``_relaxed``), so that node passes and the more loaded ones do not. Where the pod still
    cannot go there (another filter rejects it, or the batch's earlier pods loaded it past
    that value), the threshold lets the next node through, and is off once none is left.
    Every run relaxes a threshold further and none back, so this ends. The runs share the
    decision deadline (``deadline_s``, from the first): once it has passed, the last run's
    outcome stands, and the pods it left pending are retried."""
    started = time.perf_counter()
    left = deadline_s
    while True:
        out, victim_keys = run(left)
        more = False
        for slot, hits in batch.threshold_hits(out).items():
            for m, side in hits.items():
                if metrics[m].on_saturation != LEAST_LOADED or (slot, m) in batch.off:
                    continue
                relaxed = batch.relaxed.setdefault(slot, {})
                if m in relaxed:
                    batch.passed_over[slot, m] += 1
                else:
                    relaxed[m] = side
                    batch.passed_over[slot, m] = 0
                more = True
        if deadline_s is not None:
            left = deadline_s - (time.perf_counter() - started)
        if not more or (left is not None and left <= 0):
            return out, victim_keys


def _relaxed(
    load: MetricLoad | None,
    batch: _Batch,
    metrics: Sequence[MetricConfig],
    snapshot: Snapshot,
    values: npt.NDArray[np.float64] | None,
) -> MetricLoad | None:
    """``load`` with each relaxed pod's threshold of each relaxed metric (``_Batch.relaxed``)
    at the value of the least-loaded node it rejected, past the ``passed_over`` ones (the
    node's own thresholds no longer apply to the pod there): only that node passes of
    those over the threshold. The missing policy still applies. A pod is relaxed only after
    a threshold rejected a node for it, which takes metric values and load inputs."""
    if not batch.relaxed or load is None or values is None:
        return load
    m = len(metrics)
    exempt, above, below = load["exempt"].copy(), load["pod_above"].copy(), load["pod_below"].copy()
    for j, row in enumerate(batch.rows):
        for k, side in batch.relaxed.get(row.slot, {}).items():
            at = j * m + k
            rejected = _rejected_values(load, metrics[k], snapshot, values[:, k], at, m, side)
            passed_over = batch.passed_over[row.slot, k]
            limit = math.nan
            if passed_over < len(rejected):
                limit = float(rejected[passed_over])
            else:
                batch.off.add((row.slot, k))
            exempt[at] = POD_THRESHOLDS
            (above if side == "above" else below)[at] = limit
    return {**load, "exempt": exempt, "pod_above": above, "pod_below": below}


def _rejected_values(
    load: MetricLoad,
    metric: MetricConfig,
    snapshot: Snapshot,
    column: npt.NDArray[np.float64],
    at: int,
    m: int,
    side: str,
) -> npt.NDArray[np.float64]:
    """The values, as the metric filter sees them for pod and metric ``at`` (the pod's
    estimate added where it counts), of the nodes over its threshold on ``side``, distinct,
    least loaded first."""
    seen = np.array(column, dtype=np.float64)
    if load["incoming"][at % m] and metric.estimate is not None:
        seen += shares(snapshot, metric.estimate.resource, float(load["amounts"][at]))
    own_above, own_below = node_thresholds(snapshot, metric.name)
    if side == "above":
        limit = np.where(np.isnan(own_above), load["pod_above"][at], own_above)
        return np.unique(seen[seen > limit])
    limit = np.where(np.isnan(own_below), load["pod_below"][at], own_below)
    return np.unique(seen[seen < limit])[::-1]


def _note_saturation(
    snapshot: Snapshot,
    batch: _Batch,
    out: Outcome,
    metrics: Sequence[MetricConfig],
    values: npt.NDArray[np.float64] | None,
) -> None:
    """Give each saturated pod's placement its ``saturation``: a pod placed with thresholds off
    names those metrics, with its node's value and the threshold; a pod left pending names
    every metric whose threshold rejected a node in the last run or was off for it."""
    hits = batch.threshold_hits(out)
    for slot in sorted(hits.keys() | batch.relaxed.keys()):
        placement = batch.results[slot]
        if placement is None:
            continue
        relaxed = batch.relaxed.get(slot, {})
        if placement.node is not None:
            node = snapshot.index[placement.node]
            req = placement.requirements
            priority = req.priority if req is not None else 0
            saturation = tuple(
                _over_threshold(
                    snapshot,
                    metrics[m],
                    side,
                    priority,
                    node,
                    None if values is None else float(values[node, m]),
                )
                for m, side in sorted(relaxed.items())
            )
        else:
            seen = {**hits.get(slot, {}), **relaxed}
            saturation = tuple(Saturation(metrics[m].name, metrics[m].on_saturation) for m in sorted(seen))
        if saturation:
            batch.results[slot] = replace(placement, saturation=saturation)


def _over_threshold(
    snapshot: Snapshot, metric: MetricConfig, side: str, priority: int, node: int, value: float | None
) -> Saturation:
    """A pod of ``priority`` placed on ``node`` over ``metric``'s threshold on ``side``: the
    node's own threshold where it has one (its annotation wins), else the pod's band's.
    ``value`` is the node's value of the metric (NaN or None: none)."""
    own = node_thresholds(snapshot, metric.name)[0 if side == "above" else 1][node]
    above, below = metric.thresholds(priority)
    limit = float(own) if not math.isnan(own) else above if side == "above" else below
    return Saturation(
        metric.name,
        metric.on_saturation,
        None if value is None or math.isnan(value) else value,
        f"{side} {limit:g}" if limit is not None else side,
    )


def _short_gangs(rows: Sequence[Row], nodes: Any, groups: Mapping[str, GangStatus]) -> dict[str, str | None]:
    """Gangs in ``rows`` whose placed members plus bound ones fall short of minMember -> why
    (None: the decision deadline cut the gang short, so it is retried, not reported)."""
    placed: dict[str, int] = {}
    pending: dict[str, int] = {}
    cut: set[str] = set()
    for j, r in enumerate(rows):
        if r.req.group is not None:
            pending[r.req.group] = pending.get(r.req.group, 0) + 1
            placed[r.req.group] = placed.get(r.req.group, 0) + (int(nodes[j]) >= 0)
            if int(nodes[j]) == _core.NOT_ATTEMPTED:
                cut.add(r.req.group)
    short: dict[str, str | None] = {}
    for group, n in placed.items():
        status = groups[group]
        if n + status.bound < status.min_member:
            short[group] = (
                None
                if group in cut
                else (
                    f'pod group "{group}": {n + status.bound} of minMember {status.min_member} members '
                    f"can be placed together ({status.bound} bound, {n} of {pending[group]} pending placeable); "
                    "none of the gang is bound until enough fit"
                )
            )
    return short


def _read_verdicts(snapshot: Snapshot, batch: _Batch, out: Outcome, victim_keys: Sequence[str]) -> None:
    """Each row's placement from the engine's output: a node, a nomination with the
    pods to evict, not attempted (the decision deadline), or upstream's FitError text."""
    total = snapshot.count
    chosen, offsets, codes, counts = (
        out["nodes"],
        out["reason_offsets"],
        out["reason_codes"],
        out["reason_counts"],
    )

    def fit_error_of(j: int) -> str:
        lo, hi = int(offsets[j]), int(offsets[j + 1])
        return fit_error(total, [(batch.names.reason(int(codes[k])), int(counts[k])) for k in range(lo, hi)])

    def rejected_by(j: int) -> frozenset[str]:
        return frozenset(batch.names.plugin(int(c)) for c in codes[int(offsets[j]) : int(offsets[j + 1])])

    # DefaultPreemption's verdict per pod that fits nowhere (none: preemption disabled).
    verdicts: dict[int, tuple[int, int]] = {
        int(row): (int(out["postfilter_verdicts"][k]), k) for k, row in enumerate(out["postfilter_pods"])
    }

    def preemption_of(j: int, may_preempt: bool) -> str | None:
        """DefaultPreemption's PostFilter message: None where it does not run, "" where
        it nominated a node (upstream: Success, no message)."""
        if j not in verdicts:
            return None
        verdict, k = verdicts[j]
        if not may_preempt or verdict == POSTFILTER["never"]:
            return NOT_ELIGIBLE_NEVER
        if verdict == POSTFILTER["nominated"]:
            return ""
        if verdict == POSTFILTER["terminating"]:
            return NOT_ELIGIBLE_TERMINATING
        lo, hi = int(out["postfilter_offsets"][k]), int(out["postfilter_offsets"][k + 1])
        pcodes, pcounts = out["postfilter_codes"], out["postfilter_counts"]
        return fit_error(
            total, [(batch.names.reason(int(pcodes[i])), int(pcounts[i])) for i in range(lo, hi)]
        )

    def failed(j: int, may_preempt: bool) -> str:
        """Upstream's FailedScheduling message: the FitError and its PostFilter message."""
        return with_post_filter(fit_error_of(j), post_filter(preemption_of(j, may_preempt)))

    # As Python ints and floats once, not one numpy scalar per pod.
    nodes, nominees, scores, feasible, volume_offsets = (
        chosen.tolist(),
        out["nominated"].tolist(),
        out["scores"].tolist(),
        out["feasible"].tolist(),
        out["volume_offsets"].tolist(),
    )
    results, node_names, claims = batch.results, snapshot.node_names, batch.volumes
    placed, new_placement, set_attributes = _PLACED.__dict__, object.__new__, object.__setattr__
    for j, row in enumerate(batch.rows):
        req = row.req
        node = nodes[j]
        nominee = nominees[j]
        if nominee >= 0:
            lo, hi = int(out["victim_offsets"][j]), int(out["victim_offsets"][j + 1])
            victims = tuple(victim_keys[int(v)] for v in out["victims"][lo:hi])
            # The nomination and victims are the Placement's; the message is upstream's
            # (no PostFilter text for a nominating preemption).
            batch.results[row.slot] = Placement(
                req.key,
                None,
                None,
                failed(j, req.may_preempt),
                requirements=req,
                nominated_node=snapshot.node_names[nominee],
                victims=victims,
                rejected_by=rejected_by(j),
            )
        elif node >= 0:
            score = scores[j]
            # _PLACED's fields with the pod's own (one dict copy, no __init__).
            values = placed.copy()
            values["pod"] = req.key
            values["node"] = node_names[node]
            values["score"] = None if math.isnan(score) else score  # NaN: its nominated node, taken unscored
            values["feasible_nodes"] = feasible[j]
            values["requirements"] = req
            if claims is not None:
                lo, hi = volume_offsets[j], volume_offsets[j + 1]
                if hi > lo:
                    values["volumes"] = claims.bindings(j, [int(v) for v in out["volumes"][lo:hi]])
            result = new_placement(Placement)
            set_attributes(result, "__dict__", values)
            results[row.slot] = result
        elif node == _core.NOT_ATTEMPTED:
            batch.results[row.slot] = Placement(req.key, None, None, None, attempted=False)
        else:
            batch.results[row.slot] = Placement(
                req.key, None, None, failed(j, req.may_preempt), rejected_by=rejected_by(j)
            )


def _explain(
    snapshot: Snapshot, batch: _Batch, out: Outcome, metrics: Sequence[MetricConfig]
) -> Explanation | None:
    """The per-node breakdown of the pod ``explain`` named, when the engine's last run attempted it."""
    if out["explanation"] is None or batch.explain_slot is None or batch.explain_row() is None:
        return None
    return explanation(out["explanation"], snapshot, batch.names, metrics, batch.results[batch.explain_slot])


def commit_placements(snapshot: Snapshot, placements: Sequence[Placement]) -> Snapshot:
    """Count placed pods on their nodes, as the watch confirming the binds would (the pods are not modified)."""
    index = snapshot.index
    now = time.time()
    bound: list[tuple[str, int, PodInfo, Evictable]] = []
    usage: list[tuple[int, PodRequirements, tuple[HostPort, ...]]] = []
    for p in placements:
        if p.node is None:
            continue
        if p.volumes:
            snapshot.storage.assume(p.volumes, p.node)
        req = p.requirements
        if req is not None:
            node = index[p.node]
            evictable = Evictable(req.priority, now, req, req.host_ports)
            bound.append((p.pod, node, req.info, evictable))
            usage.append((node, req, req.host_ports))
    snapshot.pods.add_many(bound)
    return add_usage(snapshot, usage)
