"""One pod's estimate over time, as ksched counted it from its bind until its usage settled.

Owns the trace the closing figures of a quality run show for a learned estimate. A
:class:`StatusPoller` reads a ksched's ``/status`` every :data:`POLL_S` on a thread of its own
and keeps what its learned cpu estimates said of the pods still ramping up (``rampingPods``: the
longest bound of them, what each counts at and measures, and its age). :func:`trace` (a pure
function) then picks the pod seen longest from near its bind until it left the list (its usage
settled), and returns its points beside its true usage (the load simulation's annotations:
base multiple and ramp). Only a pod among the first :data:`TRACE_RANK` listed at every poll
that saw it, at polls in a row, is picked: further down, a pod can drop off the list because
older ones started ramping, not because it settled. A pod still ramping at the end, or first
seen long after its bind, is not picked either: its trace would not run from placement to a
stable usage.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ksched.bench.quality.periodic import Periodic
from ksched.cluster.load import BASE, RAMP_SECONDS
from ksched.engine.pods import pod_requests
from ksched.objects import Obj

# The setup whose estimate is traced: plain ksched with the load-aware configuration.
TRACED = "ksched"
POLL_S = 5.0
# A trace starts within this many seconds of the pod's bind (two scrapes and a poll).
FIRST_SEEN_S = 40.0
# A traced pod is among the first this many ramping pods listed (of ``STATUS_RAMPING``).
TRACE_RANK = 5

# One poll: seconds since the poller started, and the metric's ramping pods as ``/status``
# listed them.
Poll = tuple[float, list[dict[str, Any]]]


@dataclass
class EstimateTrace:
    """One pod's points while it ramped up: (seconds since its bind, what ksched counted it at,
    what it measured), in the engine's unit (millicores for cpu)."""

    pod: str
    metric: str
    request: float
    # The load simulation's truth: its usage climbs linearly to ``base`` x its request over
    # ``ramp_s`` after it starts.
    base: float
    ramp_s: float
    points: list[tuple[float, float, float]] = field(default_factory=list)
    # Seconds since its bind when it was last seen ramping (it settled by the next poll).
    settled_by_s: float = 0.0

    def truth(self, age_s: float) -> float:
        """What it uses ``age_s`` after its bind, as the simulation draws it (without noise)."""
        climbed = min(1.0, age_s / self.ramp_s) if self.ramp_s > 0 else 1.0
        return self.base * self.request * climbed

    def described(self) -> list[str]:
        """The trace as lines: one per point, and where it ended."""
        lines = [
            f"{self.pod} ({self.metric}): requests {self.request:g}, uses {self.base:g}x after a "
            f"{self.ramp_s:g} s ramp; settled by {self.settled_by_s:g} s after its bind"
        ]
        lines += [
            f"  {age:5.0f} s: counted {counts:7.0f}, measured {measured:7.0f}, true {self.truth(age):7.0f}"
            for age, counts, measured in self.points
        ]
        return lines


class StatusPoller(Periodic):
    """Reads ``/status`` on ``port`` every :data:`POLL_S` from :meth:`start` to :meth:`stop`,
    keeping each learned cpu metric's ramping pods."""

    def __init__(self, port: int) -> None:
        super().__init__("quality-status", POLL_S)
        self.port = port
        self.polls: dict[str, list[Poll]] = {}
        self._start = time.time()

    def start(self) -> None:
        self._start = time.time()
        super().start()

    def tick(self) -> None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/status", timeout=5) as r:
                status = json.loads(r.read())
            at = time.time() - self._start
            for metric, learned in status["metrics"]["learned"].items():
                if learned.get("resource") == "cpu":
                    self.polls.setdefault(metric, []).append((at, list(learned.get("rampingPods", []))))
        except Exception:  # ksched busy, starting or gone: the next poll tells
            return


def trace(polls: dict[str, list[Poll]], pods: Iterable[Obj]) -> EstimateTrace | None:
    """The pod seen ramping at the most polls, from within :data:`FIRST_SEEN_S` of its bind
    until it settled before the last poll; None where no pod was."""
    by_key = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pods}
    best: EstimateTrace | None = None
    for metric, seen in polls.items():
        points: dict[str, list[tuple[float, float, float]]] = {}
        indices: dict[str, list[int]] = {}
        ranks: dict[str, int] = {}
        for i, (_, ramping) in enumerate(seen):
            for rank, entry in enumerate(ramping):
                key = str(entry["pod"])
                points.setdefault(key, []).append(
                    (float(entry["age"]), float(entry["counts"]), float(entry["measured"]))
                )
                indices.setdefault(key, []).append(i)
                ranks[key] = max(ranks.get(key, 0), rank)
        for key, ps in points.items():
            pod, at = by_key.get(key), indices[key]
            if (
                pod is None
                or at[-1] == len(seen) - 1
                or at[-1] - at[0] != len(at) - 1
                or ranks[key] >= TRACE_RANK
                or ps[0][0] > FIRST_SEEN_S
            ):
                continue
            if best is not None and len(ps) <= len(best.points):
                continue
            annotations = pod["metadata"].get("annotations") or {}
            request = pod_requests(pod).requests.get("cpu", 0)
            best = EstimateTrace(
                pod=key,
                metric=metric,
                request=float(request),
                base=float(annotations.get(BASE, 1.0)),
                ramp_s=float(annotations.get(RAMP_SECONDS, 0.0)),
                points=ps,
                settled_by_s=ps[-1][0],
            )
    return best
