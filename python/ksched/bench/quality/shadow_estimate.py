"""The shadow estimate check: what a shadow ksched says it would have avoided, beside what
ksched's own pool avoided in the same round.

Owns the arithmetic that judges what the shadow said at the end of the round
(:class:`~.figures.ShadowOutcomes`): :func:`check`. The shadow watched a pool where kube-scheduler placed every pod
(:data:`~.setups.SHADOW`); the measured difference is that pool's hot node-minutes, as
Prometheus recorded them, minus the hot node-minutes of ksched's pool (the ``ksched`` setup) in
the same round. The relative error is (estimate - measured) ÷ measured; the goal is within
:data:`TOLERANCE`. Not judged where the measured difference is under
:data:`~.gap.MIN_GAP_NODE_MINUTES` (one seed's noise), or where ksched's pool also holds
kube-scheduler's pods (the mixed scenarios: the shadow estimates ksched placing them all).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ksched.bench.quality.figures import QualityResults, ShadowOutcomes
from ksched.bench.quality.gap import MIN_GAP_NODE_MINUTES
from ksched.bench.quality.scenarios import MIXED
from ksched.bench.quality.setups import SHADOW

KSCHED = "ksched"
TOLERANCE = 0.3
HEADER = (
    "scenario",
    "shadow pool hot node-min",
    "shadow's own count",
    "ksched pool hot node-min",
    "measured avoided",
    "estimated avoided",
    "relative error",
    f"within ±{TOLERANCE:.0%}",
)


@dataclass(frozen=True)
class EstimateCheck:
    """One scenario's shadow estimate against the measured difference."""

    scenario: str
    shadow_pool_hot_node_minutes: float
    shadow: ShadowOutcomes
    ksched_pool_hot_node_minutes: float | None
    # Shadow pool - ksched pool, by Prometheus; None: no ksched pool in the round.
    measured_avoided: float | None
    # (estimate - measured) ÷ measured; None where not judged.
    relative_error: float | None
    # Why the error is not judged ("" where it is).
    not_judged: str = ""

    @property
    def within(self) -> bool | None:
        return None if self.relative_error is None else abs(self.relative_error) <= TOLERANCE


def check(
    scenario: str, shadow_pool: float, shadow: ShadowOutcomes, ksched_pool: float | None
) -> EstimateCheck:
    """The shadow's estimate beside the measured difference between its pool and ksched's."""
    estimate = shadow.hot_node_minutes_avoided_estimated
    if ksched_pool is None:
        return EstimateCheck(scenario, shadow_pool, shadow, None, None, None, "no ksched pool in this round")
    measured = round(shadow_pool - ksched_pool, 2)
    if scenario in MIXED:
        why = "ksched's pool holds kube-scheduler's pods too"
        return EstimateCheck(scenario, shadow_pool, shadow, ksched_pool, measured, None, why)
    if abs(measured) < MIN_GAP_NODE_MINUTES:
        why = f"measured difference under {MIN_GAP_NODE_MINUTES:g} hot node-min"
        return EstimateCheck(scenario, shadow_pool, shadow, ksched_pool, measured, None, why)
    error = round((estimate - measured) / abs(measured), 3)
    return EstimateCheck(scenario, shadow_pool, shadow, ksched_pool, measured, error)


def checks(results: QualityResults) -> list[EstimateCheck]:
    """Per scenario that ran the shadow setup."""
    by: dict[str, dict[str, float]] = {}
    for f in results.figures:
        by.setdefault(f.scenario, {})[f.scheduler] = f.hotspot_node_minutes
    return [
        check(f.scenario, f.hotspot_node_minutes, f.shadow, by[f.scenario].get(KSCHED))
        for f in results.figures
        if f.scheduler == SHADOW and f.shadow is not None
    ]


def checks_json(results: QualityResults) -> list[dict[str, Any]]:
    return [{**asdict(c), "within": c.within} for c in checks(results)]


def shadow_rows(results: QualityResults) -> list[tuple[str, ...]]:
    """The shadow estimate table's rows, its header first; none where no round ran it."""
    found = checks(results)
    if not found:
        return []
    out: list[tuple[str, ...]] = [HEADER]
    for c in found:
        error = c.not_judged if c.relative_error is None else f"{c.relative_error:+.0%}"
        within = "-" if c.within is None else ("yes" if c.within else "no")
        out.append(
            (
                c.scenario,
                f"{c.shadow_pool_hot_node_minutes:.1f}",
                f"{c.shadow.hot_node_minutes:.1f} ({c.shadow.judged}/{c.shadow.decisions} judged)",
                _shown(c.ksched_pool_hot_node_minutes),
                _shown(c.measured_avoided),
                f"{c.shadow.hot_node_minutes_avoided_estimated:.1f}",
                error,
                within,
            )
        )
    return out


def _shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
