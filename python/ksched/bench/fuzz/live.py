"""The live phase: specs created through a local control plane whose pods go through
ksched's webhook, with ``ksched run`` scheduling on KWOK nodes; every accepted pod must
end with an outcome, and ksched must stay up and log no traceback."""

from __future__ import annotations

import collections
import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

from ksched.bench.fuzz.nodes import nodes_live
from ksched.bench.fuzz.report import (
    CREATE_WORKERS,
    MWC_NAME,
    NAMESPACE,
    ROUND,
    ROUTE_LABEL,
    SETTLE_TIMEOUT_S,
    FuzzReport,
    Spec,
)
from ksched.bench.fuzz.webhook import webhook_phase
from ksched.bench.pods import start_ksched_run
from ksched.bench.routing import wait_routing, webhook_configuration
from ksched.cluster import local
from ksched.cluster.processes import terminate
from ksched.errors import KschedError
from ksched.loop.client import Kube, load_configuration
from ksched.loop.events import events_path
from ksched.objects import Obj


@dataclass
class _Ksched:
    proc: subprocess.Popen[bytes]
    port: int
    webhook_port: int
    log: Path

    def get(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return int(r.status)
        except urllib.error.HTTPError as err:
            return int(err.code)
        except OSError:
            return 0

    def healthy(self) -> bool:
        return self.proc.poll() is None and self.get("/healthz") == 200

    def tracebacks(self) -> list[str]:
        """The exception line of each traceback in ksched's log."""
        lines = self.log.read_text(errors="replace").splitlines()
        out = []
        for i, line in enumerate(lines):
            if line.startswith("Traceback (most recent call last)"):
                j = i + 1
                while j < len(lines) and (lines[j].startswith(" ") or lines[j].startswith("^")):
                    j += 1
                out.append(lines[j] if j < len(lines) else "(truncated)")
        return out


def _start_ksched(state: local.ClusterState, workdir: Path, hook_port: int) -> _Ksched:
    config = {
        "apiVersion": "ksched.io/v1alpha1",
        "kind": "KschedConfiguration",
        "leaderElection": {"leaderElect": False},
        "webhook": {
            "enabled": True,
            "address": f"127.0.0.1:{hook_port}",
            "hosts": ["127.0.0.1"],
            "configurationName": MWC_NAME,
        },
    }
    path = workdir / "ksched-fuzz.yaml"
    path.write_text(yaml.safe_dump(config))
    log = workdir / "ksched.log"
    proc, port = start_ksched_run(state.kubeconfig, log, path)
    return _Ksched(proc, port, hook_port, log)


def _stop(k: _Ksched) -> None:
    terminate(k.proc, 30)


def _delete_all(kube: Kube) -> None:
    kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods", query={"gracePeriodSeconds": 0})
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods", query={"limit": 1}).json()["items"]:
        if time.monotonic() > deadline:
            raise KschedError(f"the pods in {NAMESPACE} were not deleted")
        time.sleep(0.5)


def _create_round(kube: Kube, report: FuzzReport, specs: list[Spec]) -> list[tuple[Spec, Obj]]:
    def post(s: Spec) -> tuple[Spec, int, bytes]:
        body = json.dumps(s.pod).encode()
        try:
            r = kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", raw=body, timeout=60)
        except KschedError as err:
            return s, 0, str(err).encode()
        return s, r.status, r.data

    accepted = []
    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        for s, status, data in pool.map(post, specs):
            report.live_specs += 1
            if status in (200, 201):
                report.accepted += 1
                accepted.append((s, json.loads(data)))
                continue
            report.rejected += 1
            text = data.decode(errors="replace")
            if "webhook" in text and "ksched" in text:
                report.rejected_by_webhook += 1
                report.defect("webhook via API server", s.index, f"HTTP {status}: {text[:300]}")
            elif status >= 500 or status == 0:
                report.defect("API server", s.index, f"HTTP {status}: {text[:300]}")
    return accepted


def _outcome(pod: Obj, created: Obj, events: dict[str, list[str]], preempted: set[str]) -> str | None:
    """What became of an accepted pod, None while it is pending for ksched without an event."""
    spec = pod.get("spec") or {}
    uid = pod["metadata"]["uid"]
    if created["spec"].get("nodeName"):
        return "bound at creation (spec.nodeName)"
    if spec.get("nodeName"):
        return "bound"
    if spec.get("schedulingGates"):
        return "gated"
    if spec.get("schedulerName") != "ksched":
        return "another scheduler's"
    if any(events.get(uid, [])):
        return "pending with FailedScheduling"
    if uid in preempted:
        return "preempted"
    return None


def _settle(kube: Kube, report: FuzzReport, accepted: list[tuple[Spec, Obj]], k: _Ksched) -> None:
    """Wait until every accepted pod of the round has an outcome, then count them."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    pending: list[tuple[Spec, Obj]] = accepted
    outcomes: dict[str, str] = {}
    while True:
        items = {
            p["metadata"]["uid"]: p
            for p in kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods").json()["items"]
        }
        events: dict[str, list[str]] = collections.defaultdict(list)
        preempted: set[str] = set()
        for e in kube.request("GET", events_path(NAMESPACE)).json()["items"]:
            regarding = e.get("regarding") or {}
            if e.get("reason") == "FailedScheduling":
                events[regarding.get("uid", "")].append(e.get("note") or "")
            elif e.get("reason") == "Preempted":
                preempted.add(regarding.get("uid", ""))
        still = []
        for s, created in pending:
            uid = created["metadata"]["uid"]
            pod = items.get(uid)
            if pod is None:
                outcomes[uid] = "preempted" if uid in preempted else "deleted"
                continue
            outcome = _outcome(pod, created, events, preempted)
            if outcome is None:
                still.append((s, created))
            else:
                outcomes[uid] = outcome
        pending = still
        if not pending or time.monotonic() > deadline or not k.healthy():
            break
        time.sleep(1.0)
    for s, created in accepted:
        uid = created["metadata"]["uid"]
        outcome = outcomes.get(uid, "silently pending")
        report.outcomes[outcome] += 1
        if outcome in ("silently pending", "deleted"):
            report.defect("loop", s.index, f"{outcome}: {'; '.join(s.mutations) or 'unmutated'}")
        if (
            not (s.pod.get("spec") or {}).get("schedulerName")
            and created["spec"].get("schedulerName") == "ksched"
            and isinstance(created.get("metadata", {}).get("annotations"), dict)
            and created["metadata"]["annotations"].get("ksched.io/routed-by") == "webhook"
        ):
            report.routed_by_webhook += 1


def live_phase(
    report: FuzzReport,
    state: local.ClusterState,
    specs: list[Spec],
    workdir: Path,
    odd_nodes: Sequence[tuple[Obj, list[str]]] = (),
) -> list[Obj]:
    """Create the specs through the API server with ksched and its webhook running, then the
    odd nodes (the nodes kind, :func:`~.nodes.nodes_live`); returns the accepted pods as the
    API server returned them."""
    kube = Kube(load_configuration(state.kubeconfig, CREATE_WORKERS + 4), qps=5000, burst=5000)
    r = kube.request(
        "POST",
        "/api/v1/namespaces",
        body={"metadata": {"name": NAMESPACE, "labels": {ROUTE_LABEL: "true"}}},
    )
    if not r.ok and r.status != 409:
        raise KschedError(f"cannot create namespace {NAMESPACE}: HTTP {r.status}")
    mwc_path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{MWC_NAME}"
    kube.request("DELETE", mwc_path)
    _delete_all(kube)
    hook_port = local.free_port()
    # ksched writes its CA into the configuration when it starts, so the configuration comes first.
    r = kube.request(
        "POST",
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        body=webhook_configuration(MWC_NAME, "fuzz.ksched.io", hook_port, ROUTE_LABEL, 15),
    )
    if not r.ok:
        raise KschedError(f"cannot create the webhook configuration: HTTP {r.status}: {r.data[:200]!r}")
    accepted_all: list[Obj] = []
    k: _Ksched | None = None
    try:
        k = _start_ksched(state, workdir, hook_port)
        wait_routing(kube, NAMESPACE)
        for start in range(0, len(specs), ROUND):
            accepted = _create_round(kube, report, specs[start : start + ROUND])
            accepted_all += [created for _, created in accepted]
            _settle(kube, report, accepted, k)
            if not k.healthy():
                report.ksched_alive = False
                report.defect("loop", None, f"ksched stopped answering /healthz after spec {start + ROUND}")
                break
            _delete_all(kube)
        if odd_nodes:
            nodes_live(kube, report, list(odd_nodes), k.healthy)
        if specs:
            webhook_phase(report, k.webhook_port, k.healthy)
        report.ksched_alive = report.ksched_alive and k.healthy()
        if not report.ksched_alive:
            report.defect("loop", None, "ksched is not alive and healthy at the end")
    finally:
        kube.request("DELETE", mwc_path)
        if k is not None:
            _stop(k)
        _delete_all(kube)
        kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}")
    tracebacks = k.tracebacks()
    report.ksched_tracebacks = len(tracebacks)
    for line in collections.Counter(tracebacks):
        report.defect("loop", None, f"ksched logged a traceback: {line}")
    return accepted_all
