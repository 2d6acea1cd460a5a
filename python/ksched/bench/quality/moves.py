"""What the quality harness records about pods moved during a run: evictions from the API
server's audit log, and every pod and PodDisruptionBudget of the scenario's namespaces,
sampled while the run goes on.

Owns the audit policy a rebalancing run needs (:func:`audit_policy`: Eviction API requests
only), reading the successful evictions back (:func:`evictions`), and :class:`Sampler`, a
thread that lists the namespaces' pods and budgets every few seconds so that an evicted pod's
node, each replacement's node and each budget's health are known after the pods are gone.
Whoever evicts (the descheduler, ksched's rebalancer) is counted the same way.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from ksched.bench.quality.periodic import Periodic
from ksched.bench.quality.rebalance import BudgetSample, Eviction, PodRecord
from ksched.loop.client import Kube
from ksched.objects import Obj

# How often the sampler lists the pods and budgets: finer than a scrape, coarse enough that
# listing a pool's pods costs the busy machine little.
SAMPLE_S = 5.0
# The label that names a load-shift pod's workload where no controller owns it (yet).
APP_LABEL = "app"


def audit_policy() -> dict[str, Any]:
    """Eviction API requests (who, which pod, the answer) and nothing else."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived", "ResponseStarted"],
        "rules": [
            {
                "level": "Metadata",
                "verbs": ["create"],
                "resources": [{"group": "", "resources": ["pods/eviction"]}],
            },
            {"level": "None"},
        ],
    }


def _epoch(raw: object) -> float | None:
    if not isinstance(raw, str) or not raw:
        return None
    return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()


def evicted(lines: Iterable[str], namespace: str) -> list[tuple[float, str]]:
    """(when, pod) of each eviction in ``namespace`` that the API server granted, from audit
    log lines."""
    out = []
    for line in lines:
        if '"eviction"' not in line:
            continue
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        code = (event.get("responseStatus") or {}).get("code", 0)
        if (
            ref.get("subresource") == "eviction"
            and ref.get("namespace") == namespace
            and event.get("verb") == "create"
            and event.get("stage") == "ResponseComplete"
            and 200 <= code < 300
        ):
            at = _epoch(event.get("stageTimestamp")) or _epoch(event.get("requestReceivedTimestamp")) or 0.0
            out.append((at, str(ref.get("name"))))
    return sorted(out)


def workload(pod: Obj) -> str:
    """The controller that owns the pod, else its ``app`` label (what its controller selects)."""
    meta = pod.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("name"))
    return str((meta.get("labels") or {}).get(APP_LABEL, ""))


def record(pod: Obj) -> PodRecord:
    meta = pod["metadata"]
    bound = None
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "True":
            bound = _epoch(c.get("lastTransitionTime"))
    return PodRecord(
        name=meta["name"],
        workload=workload(pod),
        node=(pod.get("spec") or {}).get("nodeName") or None,
        created=_epoch(meta.get("creationTimestamp")) or 0.0,
        bound=bound,
    )


class Sampler(Periodic):
    """Lists the namespaces' pods and PodDisruptionBudgets every :data:`SAMPLE_S` on a thread
    of its own, from :meth:`start` to :meth:`stop`; keeps every pod's latest record (a pod
    once bound keeps its node after it is gone) and every budget sample."""

    def __init__(self, kube: Kube, namespaces: Iterable[str]) -> None:
        super().__init__("quality-sampler", SAMPLE_S)
        self.kube = kube
        self.pods: dict[str, dict[str, PodRecord]] = {ns: {} for ns in namespaces}
        self.budgets: dict[str, list[BudgetSample]] = {ns: [] for ns in self.pods}

    def stop(self) -> None:
        super().stop()
        self.tick()

    def tick(self) -> None:
        for ns, seen in self.pods.items():
            r = self.kube.request("GET", f"/api/v1/namespaces/{ns}/pods")
            if r.ok:
                for pod in r.json()["items"]:
                    rec = record(pod)
                    previous = seen.get(rec.name)
                    if rec.node is None and previous is not None and previous.node is not None:
                        continue
                    seen[rec.name] = rec
            r = self.kube.request("GET", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets")
            if r.ok:
                now = time.time()
                for pdb in r.json()["items"]:
                    status = pdb.get("status") or {}
                    if status.get("observedGeneration") is None:
                        continue
                    self.budgets[ns].append(
                        BudgetSample(
                            now,
                            pdb["metadata"]["name"],
                            int(status.get("currentHealthy", 0)),
                            int(status.get("desiredHealthy", 0)),
                        )
                    )

    def evictions(self, audit_log: Path, namespace: str) -> list[Eviction]:
        """The granted evictions in ``namespace``, each with the node its pod was last seen on."""
        lines = audit_log.read_text().splitlines() if audit_log.exists() else []
        seen = self.pods.get(namespace, {})
        out = []
        for at, name in evicted(lines, namespace):
            rec = seen.get(name)
            out.append(Eviction(at, name, rec.node if rec else None, rec.workload if rec else ""))
        return out
