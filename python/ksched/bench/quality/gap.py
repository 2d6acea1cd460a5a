"""How far each setup gets from kube-scheduler towards the oracle, per scenario.

Owns the arithmetic that puts a setup's hot node-minutes beside two references:
kube-scheduler's (the ratio, setup ÷ kube-scheduler) and the oracle's, ksched told every pod's
true usage at placement (the share of the gap closed, (kube-scheduler - setup) ÷
(kube-scheduler - oracle): 1 is as good as the oracle, 0 no better than kube-scheduler). A
steering setup is measured to ``oracle-steer`` (steering that knows every pod's usage too,
:mod:`.setups`), the others to the placing oracle: each to what its own means could reach.
Where the gap is smaller than :data:`MIN_GAP_NODE_MINUTES` the share is not judged, and says
why. Beside them, the excess over the line against kube-scheduler's, and where the setup's
pool ended (its load), marked where that is past the line: there no placement keeps every
node under it, and the hot node-minutes reward heaping the overflow far past it on a few
nodes, which the excess does not. Pure functions of the figures.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass, replace
from typing import Any

from ksched.bench.quality.figures import QualityFigures, QualityResults
from ksched.bench.quality.scenarios import KUBE_SCHEDULER, ORACLE
from ksched.bench.quality.setups import KNOWING, ORACLE_STEER, STEERING

# A gap under this is one node hot for one minute (four 15 s samples): within what one seed's
# noise moves, so a share of it says nothing.
MIN_GAP_NODE_MINUTES = 1.0
GAP_HEADER = (
    "scenario",
    "setup",
    "hot node-min",
    "÷ kube-scheduler",
    "excess ÷ kube-scheduler",
    "end load",
    "gap closed (kube-scheduler → its oracle)",
)


@dataclass(frozen=True)
class Gap:
    """One setup's hot node-minutes against kube-scheduler's and the oracle's."""

    hot_node_minutes: float
    # setup ÷ kube-scheduler; None where kube-scheduler had none.
    of_kube_scheduler: float | None
    # (kube-scheduler - setup) ÷ (kube-scheduler - oracle); None where not judged.
    gap_closed: float | None
    # Why the share is not judged ("" where it is).
    not_judged: str = ""
    # The setup's excess over the line ÷ kube-scheduler's; None where kube-scheduler had none.
    excess_of_kube_scheduler: float | None = None
    # Where the setup's pool ended (``QualityFigures.end_load``), and whether that is at or past
    # its line.
    end_load: float | None = None
    load_past_line: bool = False


def gap(kube_scheduler: float, setup: float, oracle: float | None, oracle_name: str = ORACLE) -> Gap:
    """The setup's figure beside kube-scheduler's and (where the round ran it) the oracle's."""
    ratio = round(setup / kube_scheduler, 3) if kube_scheduler > 0 else None
    if oracle is None:
        return Gap(setup, ratio, None, f"no {oracle_name} in this round")
    width = kube_scheduler - oracle
    if width < MIN_GAP_NODE_MINUTES:
        return Gap(
            setup,
            ratio,
            None,
            f"gap too small to judge (kube-scheduler {kube_scheduler:g}, oracle {oracle:g} hot node-min)",
        )
    return Gap(setup, ratio, round((kube_scheduler - setup) / width, 3))


def gaps(results: QualityResults) -> dict[str, dict[str, Gap]]:
    """Per scenario that ran kube-scheduler, each other setup but the oracles, each measured to
    its own oracle (:func:`oracle_of`)."""
    by: dict[str, dict[str, QualityFigures]] = {}
    for f in results.figures:
        by.setdefault(f.scenario, {})[f.scheduler] = f
    # A configuration of its own that steers (``--quality-config``) is a steering setup too:
    # its marks were judged.
    steering = {f.scheduler for f in results.figures if f.marks is not None}
    out: dict[str, dict[str, Gap]] = {}
    for name, setups in by.items():
        if KUBE_SCHEDULER not in setups:
            continue
        ks = setups[KUBE_SCHEDULER]
        out[name] = {
            label: _beside(ks, f, setups.get(oracle_of(label, steering)), oracle_of(label, steering))
            for label, f in setups.items()
            if label != KUBE_SCHEDULER and label not in KNOWING
        }
    return out


def _beside(ks: QualityFigures, f: QualityFigures, oracle: QualityFigures | None, oracle_name: str) -> Gap:
    """Setup ``f``'s :class:`Gap`, with its excess against kube-scheduler's (``ks``) and where its
    pool ended."""
    found = gap(
        ks.hotspot_node_minutes,
        f.hotspot_node_minutes,
        None if oracle is None else oracle.hotspot_node_minutes,
        oracle_name,
    )
    excess = ks.excess_node_minutes
    return replace(
        found,
        excess_of_kube_scheduler=round(f.excess_node_minutes / excess, 3) if excess > 0 else None,
        end_load=f.end_load,
        load_past_line=f.line > 0 and f.end_load >= f.line,
    )


def oracle_of(label: str, steering: Collection[str] = ()) -> str:
    """The oracle a setup is measured to: steering's for a steering setup (one of
    :data:`STEERING`, or a label in ``steering``; a placing oracle cannot steer
    kube-scheduler's pods, so it would flatter steering), else the placing one."""
    return ORACLE_STEER if label in STEERING or label in steering else ORACLE


def gaps_json(results: QualityResults) -> dict[str, dict[str, dict[str, Any]]]:
    """:func:`gaps` as ``results.json`` and ``--json`` carry them."""
    return {name: {label: asdict(g) for label, g in setups.items()} for name, setups in gaps(results).items()}


def gap_rows(results: QualityResults) -> list[tuple[str, ...]]:
    """The gap table's rows, its header first; none where no scenario ran the oracle."""
    found = gaps(results)
    if not any(not g.not_judged.startswith("no ") for setups in found.values() for g in setups.values()):
        return []
    rows: list[tuple[str, ...]] = [GAP_HEADER]
    for name, setups in found.items():
        for label, g in setups.items():
            ratio = "-" if g.of_kube_scheduler is None else f"{g.of_kube_scheduler:.0%}"
            excess = "-" if g.excess_of_kube_scheduler is None else f"{g.excess_of_kube_scheduler:.0%}"
            load = "-" if g.end_load is None else f"{g.end_load:.2f}"
            if g.load_past_line:
                load += " (past the line)"
            share = g.not_judged if g.gap_closed is None else f"{g.gap_closed:.0%}"
            rows.append((name, label, f"{g.hot_node_minutes:.1f}", ratio, excess, load, share))
    return rows
