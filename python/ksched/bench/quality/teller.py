"""``oracle-measured``: ksched told each pod's true steady usage once a scrape could have seen it.

Owns :class:`Teller`, which sets :data:`~.scenarios.EXPECTED_CPU` on each bound pod of a
namespace about one scrape interval after its bind (:func:`due`), never much before: the
placement of a pod is as blind as ksched's, and each pod placed earlier counts at what it
really uses from about when its first scrape would show it, without noise, ramp or rate
window. Beside ksched and the oracle in one round, it says how much of the gap between them
an estimate of the measured pods could still close, and how much is the pod being placed,
which nothing has measured.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from ksched.bench.quality.moves import record
from ksched.bench.quality.periodic import Periodic
from ksched.bench.quality.scenarios import EXPECTED_CPU, expected_cpu
from ksched.loop.client import ApiUnavailableError, Kube, pod_path
from ksched.objects import Obj

ORACLE_MEASURED = "oracle-measured"
# How often the teller lists its namespace's pods (from the API server's cache: a list of a
# pool's pods every few seconds is load the round's other processes share), and how much
# sooner than one scrape interval after its bind a pod is due, so that on average it is told
# one scrape interval after it.
TELL_EVERY_S = 5.0
EARLY_S = TELL_EVERY_S / 2


def due(pods: Iterable[Obj], told: set[str], delay_s: float, now: float) -> list[tuple[str, str]]:
    """Each pod among ``pods`` bound at least ``delay_s`` before ``now`` and not ``told`` yet,
    with the declared usage it is to be told (its steady usage: no burst foreseen)."""
    out = []
    for pod in pods:
        rec = record(pod)
        if rec.name in told or rec.node is None or rec.bound is None or rec.bound + delay_s > now:
            continue
        out.append((rec.name, f"{round(expected_cpu(pod, 0) * 1000)}m"))
    return out


class Teller(Periodic):
    """Tells the bound pods of ``namespace`` their usage about ``delay_s`` after their bind
    (:func:`due`, :data:`EARLY_S` sooner at the earliest), looking every :data:`TELL_EVERY_S`
    from :meth:`start` to :meth:`stop`."""

    def __init__(self, kube: Kube, namespace: str, delay_s: float) -> None:
        super().__init__(f"quality-teller-{namespace}", TELL_EVERY_S)
        self.kube = kube
        self.namespace = namespace
        self.delay_s = delay_s
        self.told: set[str] = set()
        # Lists and patches that failed (a patch refused for a pod gone is not one): the round
        # names its pool's figures as not a judgement where any did.
        self.failed = 0

    def tick(self, now: float | None = None) -> None:
        # A failure is counted and the next look tries again: an exception would end the
        # thread, and every pod after it would go untold without a word.
        try:
            r = self.kube.request(
                "GET", f"/api/v1/namespaces/{self.namespace}/pods", query={"resourceVersion": "0"}
            )
        except ApiUnavailableError:
            r = None
        if r is None or not r.ok:
            self.failed += 1
            return
        at = time.time() if now is None else now
        for name, cpu in due(r.json()["items"], self.told, self.delay_s - EARLY_S, at):
            body = {"metadata": {"annotations": {EXPECTED_CPU: cpu}}}
            try:
                patched = self.kube.request(
                    "PATCH",
                    pod_path(self.namespace, name),
                    body=body,
                    content_type="application/merge-patch+json",
                )
            except ApiUnavailableError:
                self.failed += 1
                continue
            if patched.ok or patched.status == 404:
                self.told.add(name)  # told, or gone (evicted, deleted): nothing to tell
            else:
                self.failed += 1
