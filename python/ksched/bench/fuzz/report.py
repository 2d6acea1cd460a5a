"""What a fuzz run found (:class:`FuzzReport`, its defects, the specs) and the names and
limits its phases share."""

from __future__ import annotations

import collections
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ksched.objects import Obj

NAMESPACE = "ksched-fuzz"
ROUTE_LABEL = "ksched.io/fuzz-route"
MWC_NAME = "ksched-fuzz"
FUZZ_NODES = 12
CREATE_WORKERS = 16
# Pods created per round: the round settles, its outcomes are read, its pods are deleted.
ROUND = 1000
SETTLE_TIMEOUT_S = 120.0
# Accepted pods per `simulate` batch.
SIM_BATCH = 250
# Defects listed in full (the counts are always complete).
DEFECTS_KEPT = 200
# What a run fuzzes (``--fuzz-kinds``), in the order they run.
KINDS = ("pods", "nodes", "metrics", "configs", "connections")
# The command line's entry: arguments in, exit code out.
Cli = Callable[[list[str]], int]


@dataclass
class Spec:
    index: int
    pod: Obj
    mutations: list[str]


@dataclass
class Defect:
    where: str
    spec: int | None
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {"where": self.where, "spec": self.spec, "detail": self.detail}


@dataclass
class FuzzReport:
    seed: int
    specs: int
    live_specs: int = 0
    accepted: int = 0
    rejected: int = 0
    rejected_by_webhook: int = 0
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    routed_by_webhook: int = 0
    simulate_calls: int = 0
    simulate_exit: collections.Counter[int] = field(default_factory=collections.Counter)
    simulate_batches: int = 0
    simulate_batch_exit: collections.Counter[int] = field(default_factory=collections.Counter)
    webhook_requests: int = 0
    webhook_seconds: dict[str, float] = field(default_factory=dict)
    webhook_status: collections.Counter[int] = field(default_factory=collections.Counter)
    ksched_alive: bool = True
    ksched_tracebacks: int = 0
    defects: list[Defect] = field(default_factory=list)
    defect_count: int = 0
    seconds: float = 0.0
    # The kinds run, the cases of each, what became of them and the defects each found.
    kinds: tuple[str, ...] = KINDS
    cases: collections.Counter[str] = field(default_factory=collections.Counter)
    results: dict[str, collections.Counter[str]] = field(
        default_factory=lambda: collections.defaultdict(collections.Counter)
    )
    kind_defects: collections.Counter[str] = field(default_factory=collections.Counter)
    # Per attack, the p99 seconds of well-formed requests while it was held.
    p99_s: dict[str, float] = field(default_factory=dict)

    def count(self, kind: str, result: str) -> None:
        """One case of ``kind`` ended as ``result``."""
        self.cases[kind] += 1
        self.results[kind][result] += 1

    def raised(self, where: str, case: int, what: str, exc: BaseException, kind: str, result: str) -> None:
        """Case ``case`` of ``kind`` (``what``) raised ``exc``: counted as ``result`` and a defect."""
        self.count(kind, result)
        self.defect(where, case, f"{what}: {escaped(exc)}", kind=kind)

    def defect(self, where: str, spec: int | None, detail: str, kind: str = "pods") -> None:
        self.defect_count += 1
        self.kind_defects[kind] += 1
        if len(self.defects) < DEFECTS_KEPT:
            self.defects.append(Defect(where, spec, detail[:600]))

    def as_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "specs": self.specs,
            "apiServer": {
                "created": self.live_specs,
                "accepted": self.accepted,
                "rejected": self.rejected,
                "rejectedByWebhook": self.rejected_by_webhook,
                "routedByWebhook": self.routed_by_webhook,
                "outcomes": dict(sorted(self.outcomes.items())),
            },
            "simulate": {
                "calls": self.simulate_calls,
                "exitCodes": {str(k): v for k, v in sorted(self.simulate_exit.items())},
                "batches": self.simulate_batches,
                "batchExitCodes": {str(k): v for k, v in sorted(self.simulate_batch_exit.items())},
            },
            "webhook": {
                "requests": self.webhook_requests,
                "statuses": {str(k): v for k, v in sorted(self.webhook_status.items())},
            },
            "ksched": {"alive": self.ksched_alive, "tracebacks": self.ksched_tracebacks},
            "kinds": {
                k: {
                    "cases": self.cases[k],
                    "results": dict(sorted(self.results[k].items())),
                    "defects": self.kind_defects[k],
                }
                for k in self.kinds
            },
            "wellFormedP99Seconds": {k: round(v, 4) for k, v in self.p99_s.items()},
            "defects": self.defect_count,
            "defectList": [d.as_json() for d in self.defects],
            "seconds": round(self.seconds, 1),
        }

    def render(self) -> str:
        j = self.as_json()
        api, sim, hook = j["apiServer"], j["simulate"], j["webhook"]
        lines = [
            f"ksched bench --fuzz: seed {self.seed}, {self.specs} specs, {self.seconds:.0f} s",
            f"  API server      {api['created']} created: {api['accepted']} accepted, {api['rejected']} rejected "
            f"({api['rejectedByWebhook']} by the webhook), {api['routedByWebhook']} routed by the webhook",
            "  accepted pods   "
            + (", ".join(f"{k} {v}" for k, v in api["outcomes"].items()) or "none")
            + f"; ksched alive: {'yes' if self.ksched_alive else 'NO'}, tracebacks logged: {self.ksched_tracebacks}",
            f"  simulate        {sim['calls']} specs alone, exit codes "
            + ", ".join(f"{k}: {v}" for k, v in sim["exitCodes"].items())
            + f"; {sim['batches']} batches of accepted pods, exit codes "
            + (", ".join(f"{k}: {v}" for k, v in sim["batchExitCodes"].items()) or "none"),
            f"  webhook         {hook['requests']} malformed requests, statuses "
            + ", ".join(f"{k}: {v}" for k, v in hook["statuses"].items()),
        ]
        for k in self.kinds:
            if k == "pods":
                continue
            results = ", ".join(f"{r} {n}" for r, n in sorted(self.results[k].items())) or "none"
            lines.append(f"  {k:<15} {self.cases[k]} cases: {results}; defects {self.kind_defects[k]}")
        if self.p99_s:
            lines.append(
                "  well-formed p99 "
                + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in sorted(self.p99_s.items()))
            )
        lines.append(f"  defects         {self.defect_count}")
        for d in self.defects[:20]:
            spec = "" if d.spec is None else f" (spec {d.spec})"
            lines.append(f"    {d.where}{spec}: {d.detail}")
        return "\n".join(lines)


def escaped(exc: BaseException) -> str:
    """An exception that escaped ksched, with where it was raised: what the fuzzer looks for."""
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__}: {exc} at {frame.filename}:{frame.lineno}"
