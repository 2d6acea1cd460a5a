"""What one refresh of a metric source gives: values with the time they were measured.

Shared by the sources (Prometheus, metrics-server, node annotations), the store that
caches their samples (:mod:`ksched.loop.metrics.metric_sources`) and the load estimate; beside
them, how the Kubernetes times they carry (RFC 3339) read.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime


def parse_time(raw: object) -> float | None:
    """An RFC 3339 time as seconds since the epoch (None where absent or malformed)."""
    if not isinstance(raw, str) or not raw:
        return None
    try:
        at = datetime.fromisoformat(raw)
    except ValueError:
        return None
    # A time without a zone is taken as UTC, as Kubernetes writes its times.
    return at.timestamp() if at.tzinfo is not None else at.replace(tzinfo=UTC).timestamp()


class SourceError(Exception):
    """A query failed: unreachable, an error status, or an answer that is not a vector of numbers."""


@dataclass(frozen=True)
class Sample:
    """One refresh of one metric: node (or, for a pod usage query, ``namespace/pod``) -> value,
    with the time the source evaluated it."""

    values: dict[str, float]
    sampled_at: float
    unmapped: int = 0
    not_finite: int = 0
    # The span the values average over, where the source says (metrics-server's ``window``).
    window_s: float | None = None
