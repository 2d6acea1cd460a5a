"""Usage over requested CPU as a public cluster trace has it, for the quality scenarios.

Owns :data:`TRACE_QUANTILES` (where the numbers come from is beside them) and
:func:`trace_multiple`, a seeded draw from the distribution those quantiles describe: the
quantile function interpolated log-linearly between them, so every quantile given is hit
exactly and the draws between two are spread as a log-uniform would. Never reads the trace
itself: the package that bundles it is only the numbers' source.
"""

from __future__ import annotations

import bisect
import math
import random

# (cumulative probability, usage / requested CPU). Source: the Alibaba cluster trace 2018's
# sample bundled in the PyPI package `spar` (instances' CPU usage over their request):
# p10 0.17, p50 0.75, p90 1.82, p99 2.80, and 34 % of instances above their request (so
# p66 is 1.0). The ends (p0 0.12, p100 2.94) extend the neighbouring segments' slopes.
TRACE_QUANTILES = (
    (0.0, 0.12),
    (0.10, 0.17),
    (0.50, 0.75),
    (0.66, 1.0),
    (0.90, 1.82),
    (0.99, 2.80),
    (1.0, 2.94),
)
_PS = tuple(p for p, _ in TRACE_QUANTILES)


def trace_quantile(p: float) -> float:
    """The usage multiple at cumulative probability ``p`` (0..1): log-linear between the
    trace's quantiles."""
    i = min(max(bisect.bisect_right(_PS, p) - 1, 0), len(TRACE_QUANTILES) - 2)
    (p0, x0), (p1, x1) = TRACE_QUANTILES[i], TRACE_QUANTILES[i + 1]
    share = min(max((p - p0) / (p1 - p0), 0.0), 1.0)
    return math.exp(math.log(x0) + share * (math.log(x1) - math.log(x0)))


def trace_multiple(rng: random.Random) -> float:
    """One usage multiple of the request, drawn from the trace's distribution (rounded to
    three places, as an annotation carries it)."""
    return round(trace_quantile(rng.random()), 3)
