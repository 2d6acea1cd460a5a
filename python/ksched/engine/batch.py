"""One batch of pending pods as the engine runs it: the rows it places, in queue order,
and a result slot per pod.

Owns what the engine's reruns of a batch share: the rows (a gang that falls short
is dropped from them, :mod:`ksched.engine.gang_placement`), the engine's inputs
compiled for those rows, the thresholds relaxed pod by pod
(:mod:`ksched.engine.saturation`), and the placements the verdicts fill in
(:mod:`ksched.engine.verdicts`). It never calls the engine: :mod:`ksched.engine.scheduler`
compiles the batch and runs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ksched import _core
from ksched.core_types import ClassTable, MetricLoad, MetricSpec, NodeTable, Outcome, Profile
from ksched.engine.inputs import ClassColumns, PodInputs, Row, ShapeRow
from ksched.engine.messages import ReasonNames
from ksched.engine.placements import Placement
from ksched.engine.requirements import PodRequirements
from ksched.engine.volumes import VolumeColumns
from ksched.errors import MalformedObjectError
from ksched.objects import Obj

Parsed = tuple[int, Obj, PodRequirements | MalformedObjectError]
"""A pod's arrival index, the pod, and its parsed requirements (or why they cannot be parsed)."""


@dataclass(frozen=True)
class EngineInputs:
    """``_core.schedule``'s inputs for a batch's rows, as compiled before any run: the
    saturation reruns share them and add their relaxed thresholds to ``load``."""

    pods: PodInputs
    values: npt.NDArray[np.float64]
    nodes: NodeTable
    classes: ClassTable
    specs: list[MetricSpec]
    profile: Profile
    explain_row: int | None
    # Load estimate v2's inputs to the metric filter, each pod's own thresholds unrelaxed.
    load: MetricLoad | None


@dataclass
class Batch:
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
    # The engine's inputs for ``rows`` (None: not compiled since the rows last changed).
    inputs: EngineInputs | None = None
    # The last engine call's claims, to read the volumes it chose.
    volumes: VolumeColumns | None = None
    # Some row (dropped gangs' included) has pod affinity or spreading, its own or by default.
    pod_level: bool = False
    # Saturation: the pods (by slot) whose thresholds of ``leastLoaded`` metrics are relaxed,
    # each with the side (``above``, ``below``) that rejected the nodes.
    relaxed: dict[int, dict[int, str]] = field(default_factory=dict)
    # Per relaxed (slot, metric): how many bands of the least-loaded nodes over the threshold
    # the relaxed threshold let through and the pod still could not take
    # (:func:`ksched.engine.saturation.relax_thresholds`); ``off``: those with no node left to
    # let through, whose threshold is off.
    passed_over: dict[tuple[int, int], int] = field(default_factory=dict)
    off: set[tuple[int, int]] = field(default_factory=set)
    # Per relaxed (slot, metric): its relaxed threshold, and where the pods before it in the
    # batch were predicted to go when it was set (a hash of their nodes).
    limits: dict[tuple[int, int], float] = field(default_factory=dict)
    prefixes: dict[tuple[int, int], int] = field(default_factory=dict)
    # Per relaxed (slot, metric): the node its relaxed threshold was set at (the least loaded
    # of its band, as predicted).
    targets: dict[tuple[int, int], int] = field(default_factory=dict)
    # The first pod (by slot) the last rerun relaxed.
    first_left: int | None = None

    def explain_row(self) -> int | None:
        """The row of the explained pod, None when it has none (or was dropped with its gang)."""
        return None if self.explain_slot is None else self.row_of(self.explain_slot)

    def row_of(self, slot: int) -> int | None:
        """The row of the pod in result ``slot``, None when it has none (dropped with its gang)."""
        return next((j for j, r in enumerate(self.rows) if r.slot == slot), None)

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

    def threshold_room(
        self, out: Outcome, row: int, sides: Mapping[int, str], count: int
    ) -> npt.NDArray[np.bool_]:
        """The nodes (a mask over ``count``) where the engine's run (``out``) rejected the pod in
        ``row`` only by a threshold of one of the metrics ``sides`` names (metric index -> side):
        every other filter passed there, so those are the nodes relaxing them could open."""
        lo, hi = int(out["threshold_offsets"][row]), int(out["threshold_offsets"][row + 1])
        nodes, codes = out["threshold_nodes"][lo:hi], out["threshold_codes"][lo:hi]
        wanted = [self.names.threshold_code(m, side) for m, side in sides.items()]
        room = np.zeros(count, dtype=bool)
        room[nodes[codes == wanted[0] if len(wanted) == 1 else np.isin(codes, wanted)]] = True
        return room

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
        self.inputs = None
        # The rows changed: what the reruns predicted from the rows before each pod is void.
        self.prefixes.clear()
        self.first_left = None
