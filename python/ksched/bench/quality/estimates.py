"""One pod's estimate over time, as ksched counted it from its bind until its usage settled.

Owns the trace the closing figures of a quality run show for a learned estimate. Before the
round, :func:`candidates` names a few of the traced setup's pods (of different workloads, those
ramping over one to two minutes first); a :class:`StatusPoller` asks its ksched every
:data:`POLL_S`, on a thread of its own, how it counts each (``/status?pod=``: the amount, its
source, what it measured, its age). :func:`trace` (a pure function) then keeps the candidate
seen at the most polls among those first seen within :data:`FIRST_SEEN_S` of their bind whose
count came to their measured usage (they settled), and returns its points beside its true usage
(the load simulation's annotations: base multiple and ramp).
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field

from ksched.bench.quality.periodic import Periodic
from ksched.cluster.load import BASE, BEST_EFFORT_CPU, RAMP_SECONDS, REFERENCE_CPU
from ksched.engine.estimate import MEASURED
from ksched.engine.pods import pod_requests
from ksched.engine.quantity import canonical, parse_quantity
from ksched.objects import Obj

# The setup whose estimate is traced: plain ksched with the load-aware configuration.
TRACED = "ksched"
POLL_S = 5.0
# Pods asked about at each poll, and the ramps (seconds) preferred among them.
CANDIDATES = 3
TRACE_RAMP_S = (60.0, 120.0)
# A trace starts within this many seconds of the pod's bind (a cycle, two scrapes and a poll).
FIRST_SEEN_S = 40.0

# One poll of one pod: seconds since its bind, what it counts at, its source, what it measured
# (None: not yet), in the engine's unit (millicores for cpu).
Point = tuple[float, float, str, float | None]


@dataclass
class EstimateTrace:
    """One pod's points from its bind on."""

    pod: str
    metric: str
    request: float
    # The load simulation's truth: its usage climbs linearly to ``base`` x its request over
    # ``ramp_s`` after it starts.
    base: float
    ramp_s: float
    points: list[Point] = field(default_factory=list)
    # Seconds since its bind when it first counted at its measured usage.
    settled_at_s: float = 0.0
    # It requests no CPU: ``request`` is the reference CPU the simulation multiplies instead.
    best_effort: bool = False

    def truth(self, age_s: float) -> float:
        """What it uses ``age_s`` after its bind, as the simulation draws it (without noise)."""
        climbed = min(1.0, age_s / self.ramp_s) if self.ramp_s > 0 else 1.0
        return self.base * self.request * climbed

    def described(self) -> list[str]:
        """The trace as lines: one per point, and when it settled."""
        lines = [
            f"{self.pod} ({self.metric}): {'reference CPU' if self.best_effort else 'requests'} "
            f"{self.request:g}, uses {self.base:g}x after a "
            f"{self.ramp_s:g} s ramp; counted at its measured usage from {self.settled_at_s:g} s after its bind"
        ]
        for age, counts, source, measured in self.points:
            seen = "-" if measured is None else f"{measured:.0f}"
            lines.append(
                f"  {age:5.0f} s: counted {counts:7.0f} ({source}), measured {seen:>7}, true {self.truth(age):7.0f}"
            )
        return lines


def candidates(pods: Iterable[Obj], ksched: str) -> list[str]:
    """The keys of up to :data:`CANDIDATES` of the pods placed by ``ksched``, each of another
    workload (its ``app`` label), the first created first: those that ramp up over
    :data:`TRACE_RAMP_S` before others, so that the trace shows a climb that ends well within
    the window."""
    first: dict[str, tuple[int, Obj]] = {}
    for i, p in enumerate(pods):
        if p["spec"].get("schedulerName") == ksched:
            first.setdefault((p["metadata"].get("labels") or {}).get("app", str(i)), (i, p))
    low, high = TRACE_RAMP_S

    def order(item: tuple[int, Obj]) -> tuple[bool, int]:
        ramp = float((item[1]["metadata"].get("annotations") or {}).get(RAMP_SECONDS, 0.0))
        return (not low <= ramp <= high, item[0])

    chosen = sorted(first.values(), key=order)[:CANDIDATES]
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for _, p in chosen]


class StatusPoller(Periodic):
    """Asks the ksched on ``port`` how it counts each of ``pods`` every :data:`POLL_S`, from
    :meth:`start` to :meth:`stop`; keeps each cpu estimate's answers by pod."""

    def __init__(self, port: int, pods: list[str]) -> None:
        super().__init__("quality-status", POLL_S)
        self.port = port
        self.pods = pods
        # By pod: its cpu metric and points, in poll order.
        self.points: dict[str, list[tuple[str, Point]]] = {}

    def tick(self) -> None:
        for key in self.pods:
            query = urllib.parse.urlencode({"pod": key})
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/status?{query}", timeout=5) as r:
                    answer = json.loads(r.read())["pod"]
            except Exception:  # ksched busy, starting or gone: the next poll tells
                continue
            cpu = [e for e in answer.get("estimates", []) if e.get("resource") == "cpu"]
            if answer.get("state") == "recent" and cpu:
                e = cpu[0]  # the first cpu metric's estimate only
                point = (float(e["boundSecondsAgo"]), float(e["counts"]), str(e["source"]), e["measured"])
                self.points.setdefault(key, []).append((str(e["metric"]), point))


def _simulated_request(pod: Obj) -> tuple[float, bool]:
    """What the load simulation multiplies a pod's usage against, in millicores: its CPU
    request, else (BestEffort: the second value True) its reference CPU for each container,
    else the simulation's default (:func:`ksched.cluster.load.usage_annotations`)."""
    request = pod_requests(pod).requests.get("cpu", 0)
    if request:
        return float(request), False
    reference = (pod["metadata"].get("annotations") or {}).get(REFERENCE_CPU, BEST_EFFORT_CPU)
    containers = len(pod["spec"].get("containers") or ())
    return float(canonical("cpu", parse_quantity(reference)) * containers), True


def trace(points: dict[str, list[tuple[str, Point]]], pods: Iterable[Obj]) -> EstimateTrace | None:
    """The pod with the most points among those that came to count at their measured usage;
    None where none did."""
    by_key = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pods}
    best: EstimateTrace | None = None
    for key, seen in points.items():
        pod = by_key.get(key)
        settled = [point[0] for _, point in seen if point[2] == MEASURED]
        if pod is None or not settled or seen[0][1][0] > FIRST_SEEN_S:
            continue
        if best is not None and len(seen) <= len(best.points):
            continue
        annotations = pod["metadata"].get("annotations") or {}
        request, best_effort = _simulated_request(pod)
        best = EstimateTrace(
            pod=key,
            metric=seen[0][0],
            request=request,
            best_effort=best_effort,
            base=float(annotations.get(BASE, 1.0)),
            ramp_s=float(annotations.get(RAMP_SECONDS, 0.0)),
            points=[point for _, point in seen],
            settled_at_s=settled[0],
        )
    return best
