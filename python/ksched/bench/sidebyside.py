"""``ksched bench --cluster``: a null binder, kube-scheduler and ksched side by side on a real API server.

One run brings up the local control plane (:mod:`ksched.cluster.local`) with N
KWOK nodes and, when the metrics workload is asked for, a real Prometheus
scraping an exporter of two per-node gauges served from this process. Then,
for each scheduler and each workload, in its own namespace:

1. the scheduler is started and waited for (ready), then paused (SIGSTOP);
2. *backlog*: the workload's pods are created, the scheduler resumed (SIGCONT)
   and timed from then to its last bind (pods/s) and to its last write, bind
   or ``Scheduled`` event (pods/s with events: what the null binder's rate
   measures, so the ratio to it is taken on this one), with its CPU time
   (utime + stime from /proc) to its last write per bound pod;
3. the pods are deleted; *steady*: pods are created at a fixed rate and each
   pod's create→bind latency is taken (p50, p99);
4. the bound pods are checked against the nodes' allocatable (over-committed
   nodes) and the workload's own constraint (anti-affinity, zone spread);
5. its peak RSS (VmHWM) is read, it is stopped and the pods are deleted.

The schedulers: a null binder (a small Go program built with the control
plane, :mod:`ksched.cluster.build`: it binds round-robin and posts the
``Scheduled`` event, nothing else: the API server's ceiling), kube-scheduler
(QPS 5000, its default percentageOfNodesToScore) and ``ksched run`` (this
checkout, and any other ksched command given with ``--ksched LABEL=COMMAND``,
say an older build's, for before/after figures in one run).

Binds and ``Scheduled`` events are seen through two watches of the namespace
from this process; times are taken on receipt. Results: a JSON document, a
table, and a PNG chart of bound pods over time in each backlog drain.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ksched.bench import invariants
from ksched.cluster import local
from ksched.cluster.build import Pins, ensure_built, nullbinder_binary
from ksched.cluster.gauges import GaugeServer
from ksched.commands.demo import CREATE_WORKERS, clear_pods, create_pods, process_usage
from ksched.errors import KschedError
from ksched.loop.client import ApiUnavailableError, Kube, load_configuration
from ksched.objects import Obj

NULL = "null-binder"
KUBE_SCHEDULER = "kube-scheduler"
KSCHED = "ksched"
SCHEDULER_NAMES = {NULL: "null-binder", KUBE_SCHEDULER: "default-scheduler"}
WORKLOADS = ("bare", "replicaset", "anti-affinity", "spread", "metrics")
WORKLOAD_TITLES = {
    "bare": "bare pods, cpu/memory requests",
    "replicaset": "pods owned by a ReplicaSet behind a Service",
    "anti-affinity": "required pod anti-affinity (hostname)",
    "spread": "zone topology spread (maxSkew 1, DoNotSchedule)",
    "metrics": "bare pods under two live Prometheus metrics",
}
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
KUBE_SCHEDULER_QPS = 5000.0
READY_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 20.0
# Before each drain and each steady phase: the control plane and the scheduler quiet (under this
# many cores together for a second), or this long waited.
QUIET_CORES = 0.25
SETTLE_MAX_S = 30.0
# KWOK's node Lease duration here: renewed every quarter of it. A kubelet's 40 s renews 5,000
# Leases about 480 times a second, which took 1.40 of the 2-core development machine's cores on
# an idle cluster (API server, etcd, KWOK; 0.91-2.02 in 5-second windows), taken from every
# scheduler's drains and moving with the renewals' timing by more than the schedulers differ.
# Nothing here reads them (no node lifecycle controller runs; scheduler_perf has no Leases at
# all): a day keeps them out of the drains. --node-lease-seconds 40 puts them back.
BENCH_NODE_LEASE_S = 86400
NODE_LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
TERMINATED_WATCHERS = "apiserver_terminated_watchers_total{"
# The exporter's two gauges, per node; the values move every few seconds (live metrics).
UTILIZATION = "ksched_bench_node_utilization"
POWER = "ksched_bench_node_power_watts"
METRIC_PERIOD_S = 5


@dataclass
class Phase:
    """One scheduler's figures for one workload."""

    scheduler: str
    workload: str
    pods: int
    # Which of ``--rounds`` (from 0).
    round: int = 0
    bound: int = 0
    drain_seconds: float = 0.0
    pods_per_s: float = 0.0
    # To the last write of the drain, bind or Scheduled event: the work the null binder does per pod.
    scheduled_events: int = 0
    writes_seconds: float = 0.0
    writes_pods_per_s: float = 0.0
    cpu_ms_per_pod: float = 0.0
    # The control plane's processes (API server, etcd, KWOK, ...) over the same drain: the work
    # the scheduler's writes and watches cost them, on the cores the scheduler shares.
    control_plane_cpu_ms_per_pod: float = 0.0
    # The same by process (kube-apiserver, etcd, kwok, prometheus).
    control_plane_by_process: dict[str, float] = field(default_factory=dict)
    peak_rss_mib: float = 0.0
    steady_pods: int = 0
    steady_bound: int = 0
    steady_rate: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    # Each steady pod as [seconds from the first create, create→bind ms], in the order sent: where
    # in the phase the slow ones fell. Unbound pods are left out.
    steady_latencies: list[tuple[float, float]] = field(default_factory=list)
    overcommitted_nodes: int = 0
    constraint_violations: int = 0
    # Watchers the API server closed for falling behind (``apiserver_terminated_watchers_total``), from
    # the backlog's creation to the drain's end: the paused scheduler's, or any other. A closed watcher
    # watches again and is sent the events it missed, at the drain's cost; None if not read.
    watchers_closed: int | None = None
    # ksched on the metrics workload: its /readyz line for metrics after the phases ("2 live metric(s) fresh").
    metrics_status: str | None = None
    # Seconds from the resumption to each bind of the backlog, sorted (the chart).
    bind_times: list[float] = field(default_factory=list)
    error: str | None = None


@dataclass
class Options:
    nodes: int
    pods: int
    workloads: list[str]
    schedulers: list[str]
    kscheds: dict[str, list[str]]
    rate: float
    steady_pods: int
    stall_s: float
    out: Path
    zones: int = 3
    rounds: int = 1
    node_lease_s: int = BENCH_NODE_LEASE_S


# ---------------------------------------------------------------------------
# Workloads


def _container(cpu: str, memory: str) -> list[Obj]:
    return [{"name": "app", "image": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]


def workload_pods(
    workload: str, namespace: str, scheduler_name: str, count: int, prefix: str, nodes: int, owner: Obj | None
) -> list[Obj]:
    """``count`` pods of ``workload``; ``owner`` is the ReplicaSet of the replicaset workload."""
    pods = []
    # Anti-affinity: groups small enough that each fits on half the nodes.
    groups = max(1, math.ceil(2 * count / max(nodes, 1)))
    for i in range(count):
        labels = {"app": workload}
        spec: Obj = {"schedulerName": scheduler_name, "containers": _container("100m", "128Mi")}
        meta: Obj = {"name": f"{prefix}-{i}", "namespace": namespace, "labels": labels}
        if workload == "replicaset" and owner is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        elif workload == "anti-affinity":
            labels["group"] = f"g{i % groups}"
            spec["affinity"] = {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"group": labels["group"]}},
                            "topologyKey": HOSTNAME,
                        }
                    ]
                }
            }
        elif workload == "spread":
            spec["topologySpreadConstraints"] = [
                {
                    "maxSkew": 1,
                    "topologyKey": ZONE,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": workload}},
                }
            ]
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    return pods


def _setup_namespace(kube: Kube, namespace: str, workload: str, count: int) -> Obj | None:
    """The namespace, and for the replicaset workload its Service and ReplicaSet (returned).

    No controller-manager runs: the bench creates the ReplicaSet's pods itself, with the
    ownerReference the ReplicaSet controller would set, so the creation rate is the same
    for every scheduler and no controller competes for the CPU."""
    r = kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    if not r.ok and r.status != 409:
        raise KschedError(f"creating namespace {namespace}: HTTP {r.status}: {r.data[:200]!r}")
    if workload != "replicaset":
        return None
    selector = {"app": workload}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {"selector": selector, "ports": [{"port": 80}]},
    }
    kube.request("POST", f"/api/v1/namespaces/{namespace}/services", body=service)
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "replicas": count,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {"containers": _container("100m", "128Mi")},
            },
        },
    }
    r = kube.request("POST", f"/apis/apps/v1/namespaces/{namespace}/replicasets", body=rs)
    if r.status == 409:
        r = kube.request("GET", f"/apis/apps/v1/namespaces/{namespace}/replicasets/web")
    if not r.ok:
        raise KschedError(f"creating the ReplicaSet in {namespace}: HTTP {r.status}: {r.data[:200]!r}")
    owner: Obj = r.json()
    return owner


# ---------------------------------------------------------------------------
# Exporter of two live per-node gauges


def _metric_values(nodes: list[str], now: float) -> str:
    period = int(now // METRIC_PERIOD_S)
    lines = [f"# TYPE {UTILIZATION} gauge\n"]
    power = [f"# TYPE {POWER} gauge\n"]
    for n in nodes:
        h = zlib.crc32(f"{n}/{period}".encode())
        lines.append(f'{UTILIZATION}{{node="{n}"}} {(h % 1000) / 1000:.3f}\n')
        power.append(f'{POWER}{{node="{n}"}} {100 + (h >> 10) % 300}\n')
    return "".join(lines + power)


@contextlib.contextmanager
def exporter(nodes: list[str]) -> Iterator[str]:
    """Serve the gauges on loopback for Prometheus to scrape; yields host:port."""

    cache: dict[int, bytes] = {}

    def body() -> bytes:
        # Rendered once per period: thousands of nodes, scraped every second.
        now = time.time()
        period = int(now // METRIC_PERIOD_S)
        if period not in cache:
            cache.clear()
            cache[period] = _metric_values(nodes, now).encode()
        return cache[period]

    with GaugeServer(body) as server:
        yield server.address


def ksched_config(workload: str, prometheus: str | None) -> Obj:
    config: Obj = {
        "apiVersion": "ksched.io/v1alpha1",
        "kind": "KschedConfiguration",
        "leaderElection": {"leaderElect": False},
        # The client rate limit kube-scheduler gets here: its own default (500 qps) would cap
        # ksched's binds and events at 500 writes/s, below the API server's ceiling.
        "clientConnection": {"qps": KUBE_SCHEDULER_QPS, "burst": int(KUBE_SCHEDULER_QPS * 2)},
    }
    if workload == "metrics":
        refresh = {"min": "1s", "max": "5s"}
        config["prometheus"] = {"url": prometheus}
        config["metrics"] = [
            {"name": "utilization", "source": "prometheus", "query": UTILIZATION, "nodeLabel": "node"}
            | {"prefer": "lower", "missing": "neutral", "weight": 2, "maxAge": "1m", "refresh": refresh},
            {"name": "power", "source": "prometheus", "query": POWER, "nodeLabel": "node"}
            | {"prefer": "lower", "missing": "neutral", "weight": 1, "maxAge": "1m", "refresh": refresh},
        ]
    return config


# ---------------------------------------------------------------------------
# Schedulers as processes


class Scheduler:
    """One scheduler process, started for one workload and stopped after it."""

    def __init__(self, label: str, state: local.ClusterState, workdir: Path, ksched_cmd: list[str] | None):
        self.label = label
        self.state = state
        self.workdir = workdir
        self.ksched_cmd = ksched_cmd
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.log = workdir / f"{label}.log"

    @property
    def scheduler_name(self) -> str:
        return SCHEDULER_NAMES.get(self.label, KSCHED)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, workload: str, prometheus: str | None) -> None:
        ready: Callable[[], bool]
        if self.label == NULL:
            ready_file = self.workdir / f"{self.label}-{workload}.ready"
            ready_file.unlink(missing_ok=True)
            cmd = [str(nullbinder_binary()), f"--kubeconfig={self.state.kubeconfig}"]
            cmd += [f"--scheduler-name={self.scheduler_name}", f"--ready-file={ready_file}"]
            ready = ready_file.exists
        elif self.label == KUBE_SCHEDULER:
            args, port = local.kube_scheduler_args(self.state, KUBE_SCHEDULER_QPS, 0, "bench-kube-scheduler")
            cmd = [str(ensure_built(Pins(), with_helm=False) / "kube-scheduler"), *args]

            def ready() -> bool:
                return local.http_ok(f"https://127.0.0.1:{port}/readyz")
        else:
            assert self.ksched_cmd is not None
            config = self.workdir / f"{self.label}-{workload}.json"
            config.write_text(json.dumps(ksched_config(workload, prometheus)))
            port = self.port = local.free_port()
            cmd = [*self.ksched_cmd, "run", "--config", str(config), "--kubeconfig", self.state.kubeconfig]
            cmd += ["--address", f"127.0.0.1:{port}", "--no-leader-elect"]
            with_metrics = workload == "metrics"

            def ready() -> bool:
                return _ksched_ready(port, with_metrics)

        with open(self.log, "ab") as out:
            out.write(f"=== {workload}: {shlex.join(cmd)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready():
            if self.proc.poll() is not None:
                raise KschedError(f"{self.label} exited with {self.proc.returncode}:\n{_tail(self.log)}")
            if time.monotonic() > deadline:
                raise KschedError(
                    f"{self.label} was not ready after {READY_TIMEOUT_S:.0f} s:\n{_tail(self.log)}"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
                self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def _readyz(port: int) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            return int(r.status), r.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")
    except OSError:
        return 0, ""


def _ksched_ready(port: int, with_metrics: bool) -> bool:
    status, body = _readyz(port)
    return status == 200 and (not with_metrics or "fresh" in body)


def metrics_status(port: int) -> str:
    """The metrics line of a running ksched's /readyz."""
    _, body = _readyz(port)
    return next((line.strip() for line in body.splitlines() if "metric" in line), body.strip()[:200])


def _tail(path: Path) -> str:
    try:
        return path.read_bytes()[-3000:].decode(errors="replace")
    except OSError:
        return "(no log)"


# ---------------------------------------------------------------------------
# Watching binds


class FirstSeen:
    """Records when each pod of a namespace is first seen by a watch (monotonic clock, on receipt).

    Two are used per phase: pods with ``spec.nodeName`` set (the bind), and core/v1 events
    with reason ``Scheduled`` (the event each scheduler must post; events.k8s.io events show
    there too), keyed by the pod they are about."""

    def __init__(
        self,
        kubeconfig: str,
        namespace: str,
        resource: str,
        field_selector: str,
        pod_of: Callable[[Obj], str],
    ):
        self.kube = Kube(load_configuration(kubeconfig, 2))
        self.path = f"/api/v1/namespaces/{namespace}/{resource}"
        self.field_selector = field_selector
        # The name of the pod an object of the watch is about ("" for one to pass over).
        self.pod_of = pod_of
        self.seen: dict[str, float] = {}
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self._stop = threading.Event()
        self._response: Any = None
        listing = self.kube.request("GET", self.path, query={"limit": 1}).json()
        self.resource_version = listing["metadata"]["resourceVersion"]
        self.thread = threading.Thread(target=self._run, name=f"watch-{namespace}-{resource}", daemon=True)
        self.thread.start()

    @classmethod
    def binds(cls, kubeconfig: str, namespace: str) -> FirstSeen:
        def bound(pod: Obj) -> str:
            return (
                str((pod.get("metadata") or {}).get("name", ""))
                if (pod.get("spec") or {}).get("nodeName")
                else ""
            )

        return cls(kubeconfig, namespace, "pods", "spec.nodeName!=", bound)

    @classmethod
    def scheduled_events(cls, kubeconfig: str, namespace: str) -> FirstSeen:
        def about(event: Obj) -> str:
            return str((event.get("involvedObject") or {}).get("name", ""))

        return cls(kubeconfig, namespace, "events", "reason=Scheduled", about)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch()
            except Exception:  # a dropped watch (any transport error): watch again from the last version
                if self._stop.is_set():
                    return
                time.sleep(0.2)

    def _watch(self) -> None:
        query = {
            "watch": True,
            "resourceVersion": self.resource_version,
            "timeoutSeconds": 3600,
            "fieldSelector": self.field_selector,
        }
        response = self.kube.stream(self.path, query, timeout=3700)
        self._response = response
        try:
            if response.status != 200:
                raise ApiUnavailableError(f"watch: HTTP {response.status}")
            buffer = b""
            for chunk in response.stream(65536):
                now = time.monotonic()
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        self._event(orjson.loads(line), now)
                if self._stop.is_set():
                    return
        finally:
            response.release_conn()

    def _event(self, event: Obj, now: float) -> None:
        obj = event.get("object") or {}
        if event.get("type") == "ERROR":
            # 410 Gone: start again from now on; binds seen so far are kept.
            listing = self.kube.request("GET", self.path, query={"limit": 1}).json()
            self.resource_version = listing["metadata"]["resourceVersion"]
            raise ApiUnavailableError(f"watch: {obj.get('message')}")
        meta = obj.get("metadata") or {}
        self.resource_version = meta.get("resourceVersion", self.resource_version)
        if event.get("type") not in ("ADDED", "MODIFIED"):
            return
        name = self.pod_of(obj)
        if name:
            with self.changed:
                if name not in self.seen:
                    self.seen[name] = now
                    self.changed.notify_all()

    def wait(self, names: set[str], stall_s: float) -> bool:
        """Until every pod in ``names`` is seen (True) or none new came for ``stall_s``."""
        with self.changed:
            last, seen = time.monotonic(), -1
            while not names <= self.seen.keys():
                if len(self.seen) != seen:
                    last, seen = time.monotonic(), len(self.seen)
                if time.monotonic() - last > stall_s:
                    return False
                self.changed.wait(0.5)
        return True

    def close(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):
                response.shutdown()
        self.thread.join(5)


# ---------------------------------------------------------------------------
# Checks on the bound pods


def check_placements(kube: Kube, nodes: dict[str, Obj]) -> tuple[int, int]:
    """(over-committed nodes, constraint violations) over every bound pod of the cluster, as
    :mod:`ksched.bench.invariants` judges them.

    A node is over-committed when its pods request more of any resource than its allocatable
    or are more than its pod capacity; a node the pods are bound to but the listing lacks
    counts too. Violations: each pod on a node with a pod its required anti-affinity selects,
    each pod off its nodeSelector, and each unit of spread skew above a constraint's maxSkew."""
    pods = kube.request("GET", "/api/v1/pods", query={"fieldSelector": "spec.nodeName!="}).json()["items"]
    listed = list(nodes.values())
    over = len(invariants.overcommitted(listed, pods)) + len(invariants.unknown_nodes(listed, pods))
    violations = sum(v.excess for v in invariants.constraint_violations(listed, pods))
    return over, violations


# ---------------------------------------------------------------------------
# One scheduler on one workload


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of ``values`` (the value at or below which ``q`` of them lie)."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def run_phase(
    kube: Kube,
    state: local.ClusterState,
    sched: Scheduler,
    workload: str,
    opts: Options,
    nodes: dict[str, Obj],
    round_: int = 0,
) -> Phase:
    phase = Phase(sched.label, workload, opts.pods, round_)
    # A namespace per round too: a later round's pods take the same names, and its watches
    # must not see the earlier round's events.
    namespace = f"{workload}-{sched.label}{f'-{round_}' if round_ else ''}".lower()
    owner = _setup_namespace(kube, namespace, workload, opts.pods + opts.steady_pods)
    sched.start(workload, state.prometheus)
    watch = FirstSeen.binds(state.kubeconfig, namespace)
    events = FirstSeen.scheduled_events(state.kubeconfig, namespace)
    try:
        # Each drain starts on a quiet control plane, not while it still works off the last phase
        # (the deletion of its pods) or the scheduler's start (its lists).
        settle(state, sched.pid)
        # Backlog: created while the scheduler is paused, timed from its resumption.
        pods = workload_pods(workload, namespace, sched.scheduler_name, opts.pods, "b", opts.nodes, owner)
        closed_before = terminated_watchers(kube)
        os.kill(sched.pid, signal.SIGSTOP)
        try:
            create_pods(kube, pods)
            cpu_before, _ = process_usage(sched.pid)
            control_before = control_plane_usage(state)
        finally:
            os.kill(sched.pid, signal.SIGCONT)
        resumed = time.monotonic()
        names = {p["metadata"]["name"] for p in pods}
        watch.wait(names, opts.stall_s)
        with watch.lock:
            bound = {n for n in watch.seen if n in names}
        # The drain is done when every bound pod also has its Scheduled event: a scheduler that
        # posts events after its binds has not finished its writes at its last bind.
        events.wait(bound, opts.stall_s)
        cpu_after, _ = process_usage(sched.pid)
        control_after = control_plane_usage(state)
        closed_after = terminated_watchers(kube)
        if closed_before is not None and closed_after is not None:
            phase.watchers_closed = int(closed_after - closed_before)
        with watch.lock:
            times = sorted(watch.seen[n] - resumed for n in bound)
        with events.lock:
            event_times = [events.seen[n] - resumed for n in bound if n in events.seen]
        phase.bound = len(times)
        phase.bind_times = [round(t, 4) for t in times]
        phase.drain_seconds = times[-1] if times else 0.0
        phase.pods_per_s = phase.bound / phase.drain_seconds if phase.drain_seconds > 0 else 0.0
        phase.scheduled_events = len(event_times)
        phase.writes_seconds = max([*times, *event_times], default=0.0)
        phase.writes_pods_per_s = phase.bound / phase.writes_seconds if phase.writes_seconds > 0 else 0.0
        phase.cpu_ms_per_pod = (cpu_after - cpu_before) * 1000 / max(phase.bound, 1)
        per_pod = {
            name: round((cpu - control_before.get(name, 0.0)) * 1000 / max(phase.bound, 1), 3)
            for name, cpu in control_after.items()
        }
        phase.control_plane_by_process = per_pod
        phase.control_plane_cpu_ms_per_pod = sum(per_pod.values())
        over, violations = check_placements(kube, nodes)
        clear_pods(kube, namespace)

        # Steady: a fixed arrival rate, create→bind latency per pod, from a quiet control plane
        # and scheduler too (not while they still work off the deletion of the backlog).
        if opts.steady_pods:
            settle(state, sched.pid)
            steady = workload_pods(
                workload, namespace, sched.scheduler_name, opts.steady_pods, "s", opts.nodes, owner
            )
            sent = _create_at_rate(kube, steady, opts.rate)
            snames = set(sent)
            watch.wait(snames, opts.stall_s)
            with watch.lock:
                order = sorted((t, n) for n, t in sent.items() if n in watch.seen)
                latencies = [(watch.seen[n] - t) * 1000 for t, n in order]
            first = min(sent.values(), default=0.0)
            phase.steady_latencies = [
                (round(t - first, 4), round(ms, 2)) for (t, _), ms in zip(order, latencies, strict=True)
            ]
            phase.steady_pods, phase.steady_bound, phase.steady_rate = len(steady), len(latencies), opts.rate
            if latencies:
                phase.p50_ms = round(percentile(latencies, 0.50), 1)
                phase.p99_ms = round(percentile(latencies, 0.99), 1)
            over2, violations2 = check_placements(kube, nodes)
            over, violations = max(over, over2), max(violations, violations2)
        phase.overcommitted_nodes, phase.constraint_violations = over, violations
        _, phase.peak_rss_mib = process_usage(sched.pid)
        if workload == "metrics" and sched.port is not None:
            phase.metrics_status = metrics_status(sched.port)
    except BaseException:
        watch.close()
        events.close()
        sched.stop()
        # Best effort: the error (or an interrupt) in flight is what to report.
        with contextlib.suppress(KschedError):
            clear_pods(kube, namespace)
        raise
    watch.close()
    events.close()
    sched.stop()
    clear_pods(kube, namespace)
    return phase


def terminated_watchers(kube: Kube) -> float | None:
    """How many watchers the API server has closed for falling behind, all resources; None if
    its metrics could not be read."""
    try:
        r = kube.request("GET", "/metrics", timeout=30)
    except KschedError:
        return None
    if not r.ok:
        return None
    total = 0.0
    for line in r.data.decode(errors="replace").splitlines():
        if line.startswith(TERMINATED_WATCHERS):
            with contextlib.suppress(ValueError):
                total += float(line.rsplit(" ", 1)[1])
    return total


def settle(state: local.ClusterState, scheduler_pid: int) -> None:
    """Wait (up to ``SETTLE_MAX_S``) until the control plane and the scheduler together use under
    ``QUIET_CORES`` for a second."""

    def used() -> float:
        return control_plane_cpu(state) + process_usage(scheduler_pid)[0]

    deadline = time.monotonic() + SETTLE_MAX_S
    before = used()
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = used()
        if now - before < QUIET_CORES:
            return
        before = now


def control_plane_usage(state: local.ClusterState) -> dict[str, float]:
    """CPU seconds (user+system) each of the control plane's processes has used so far."""
    usage: dict[str, float] = {}
    for name, pid in state.pids.items():
        with contextlib.suppress(OSError):
            usage[name] = process_usage(pid)[0]
    return usage


def control_plane_cpu(state: local.ClusterState) -> float:
    """CPU seconds (user+system) the control plane's processes have used so far."""
    return sum(control_plane_usage(state).values())


def _create_at_rate(kube: Kube, pods: list[Obj], rate: float) -> dict[str, float]:
    """Create ``pods`` at ``rate`` per second; the monotonic time each create was sent."""
    sent: dict[str, float] = {}
    errors: list[str] = []

    def post(p: Obj) -> None:
        sent[p["metadata"]["name"]] = time.monotonic()
        r = kube.request("POST", f"/api/v1/namespaces/{p['metadata']['namespace']}/pods", body=p)
        if not r.ok:
            errors.append(f"creating {p['metadata']['name']}: HTTP {r.status}: {r.data[:200]!r}")

    start = time.monotonic()
    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        for i, p in enumerate(pods):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            pool.submit(post, p)
    if errors:
        raise KschedError(errors[0])
    return sent


# ---------------------------------------------------------------------------
# The whole run


def _machine() -> str:
    cpus = os.cpu_count() or 0
    mem = 0.0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) / 1024 / 1024
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{cpus} cores ({model or platform.machine()}), {mem:.0f} GiB, shared with the API server"


def node_lease_seconds(kube: Kube, within_s: float = 60.0) -> int | None:
    """The duration of the node Leases KWOK keeps (one read), once one exists."""
    deadline = time.monotonic() + within_s
    while True:
        r = kube.request("GET", NODE_LEASES, query={"limit": "1"})
        items = r.json().get("items") if r.ok else None
        if items:
            return int((items[0].get("spec") or {}).get("leaseDurationSeconds") or 0) or None
        if time.monotonic() > deadline:
            return None
        time.sleep(1.0)


def side_by_side(opts: Options) -> dict[str, Any]:
    """Run every scheduler on every workload; returns the JSON document (also written under ``opts.out``)."""
    plot = _pyplot()  # fail before the long run when matplotlib is missing
    opts.out.mkdir(parents=True, exist_ok=True)
    workdir = opts.out / "logs"
    workdir.mkdir(exist_ok=True)
    print(f"== building what is missing, then a local control plane with {opts.nodes} KWOK nodes", flush=True)
    ensure_built(Pins(), with_helm=False)
    node_names = [f"kwok-node-{i:05d}" for i in range(opts.nodes)]
    started = time.monotonic()
    phases: list[Phase] = []
    with contextlib.ExitStack() as stack:
        targets = stack.enter_context(exporter(node_names)) if "metrics" in opts.workloads else None
        state = local.up(
            nodes=opts.nodes, zones=opts.zones, prometheus_targets=targets, node_lease_s=opts.node_lease_s
        )
        stack.callback(lambda: print("== " + local.down(), flush=True))
        print(f"  up in {time.monotonic() - started:.0f} s: {state.apiserver}", flush=True)
        kube = Kube(load_configuration(state.kubeconfig, CREATE_WORKERS + 4))
        nodes = {n["metadata"]["name"]: n for n in kube.request("GET", "/api/v1/nodes").json()["items"]}
        lease_s = node_lease_seconds(kube)
        scheds = {
            label: Scheduler(label, state, workdir, opts.kscheds.get(label)) for label in opts.schedulers
        }
        # Workload by workload, the schedulers one after the other: the control plane's cost per
        # pod grows through a run (etcd and the event store fill up), so the schedulers compared on
        # a workload run close together rather than a whole scheduler's round apart. With several
        # rounds every other one runs them in reverse order, so none is always first or last.
        for workload in opts.workloads:
            for round_ in range(opts.rounds):
                order = list(scheds.items())
                for label, sched in order if round_ % 2 == 0 else reversed(order):
                    title = WORKLOAD_TITLES[workload] + (f" (round {round_ + 1})" if opts.rounds > 1 else "")
                    print(f"== {label}: {title}", flush=True)
                    try:
                        phase = run_phase(kube, state, sched, workload, opts, nodes, round_)
                    except KschedError as err:
                        phase = Phase(label, workload, opts.pods, round_, error=str(err))
                        sched.stop()
                    print("  " + _phase_line(phase), flush=True)
                    phases.append(phase)
    doc: dict[str, Any] = {
        "machine": _machine(),
        "nodes": opts.nodes,
        "pods": opts.pods,
        "steady_pods": opts.steady_pods,
        "steady_rate": opts.rate,
        "rounds": opts.rounds,
        # As KWOK wrote them (None if no node's Lease showed up within a minute).
        "node_lease_seconds": lease_s,
        "schedulers": opts.schedulers,
        "kube_scheduler": {"qps": KUBE_SCHEDULER_QPS, "percentageOfNodesToScore": "default (adaptive)"},
        "ksched_commands": {k: shlex.join(v) for k, v in opts.kscheds.items()},
        "checkout": _checkout(),
        "seconds": round(time.monotonic() - started, 1),
        "phases": [asdict(p) for p in phases],
    }
    (opts.out / "results.json").write_text(json.dumps(doc, indent=2))
    (opts.out / "table.md").write_text(render_table(doc) + "\n\n" + render_summary(doc) + "\n")
    chart(plot, phases, opts, opts.out / "bound-over-time.png")
    return doc


def _phase_line(p: Phase) -> str:
    if p.error:
        return f"error: {p.error.splitlines()[0]}"
    lat = (
        f"p50 {p.p50_ms} ms, p99 {p.p99_ms} ms at {p.steady_rate:g} pods/s"
        if p.steady_pods
        else "no steady phase"
    )
    return (
        f"{p.bound}/{p.pods} bound in {p.drain_seconds:.2f} s = {p.pods_per_s:,.0f} pods/s; "
        f"{p.scheduled_events} Scheduled events, last write at {p.writes_seconds:.2f} s = "
        f"{p.writes_pods_per_s:,.0f} pods/s; {lat}; "
        f"{p.cpu_ms_per_pod:.2f} CPU ms/pod (control plane {p.control_plane_cpu_ms_per_pod:.2f}: "
        + ", ".join(f"{k} {v:.2f}" for k, v in p.control_plane_by_process.items())
        + "), "
        f"peak RSS {p.peak_rss_mib:.0f} MiB; "
        f"{p.overcommitted_nodes} over-committed nodes, {p.constraint_violations} constraint violations"
        + (f"; {p.watchers_closed} watcher(s) closed for falling behind" if p.watchers_closed else "")
        + (f"; ksched /readyz: {p.metrics_status}" if p.metrics_status else "")
    )


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def render_table(doc: dict[str, Any]) -> str:
    rows = [
        f"{doc['nodes']:,} KWOK nodes, {doc['pods']:,} backlog pods and {doc['steady_pods']:,} steady pods "
        f"at {doc['steady_rate']:g} pods/s per workload; node Leases of {doc.get('node_lease_seconds') or '?'} s; "
        f"{doc['machine']}",
        "",
        "| workload | scheduler | backlog drain pods/s (to last bind) | with Scheduled events (to last write) "
        "| bound | p50 / p99 create→bind ms | CPU ms per pod | control plane CPU ms per pod | peak RSS MiB "
        "| over-committed nodes | constraint violations |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in doc["phases"]:
        if p["error"]:
            rows.append(
                f"| {p['workload']} | {p['scheduler']} | error: {p['error'].splitlines()[0][:120]} |||||||||"
            )
            continue
        who = p["scheduler"] + (f" (round {p.get('round', 0) + 1})" if doc.get("rounds", 1) > 1 else "")
        lat = f"{_fmt(p['p50_ms'], '.0f')} / {_fmt(p['p99_ms'], '.0f')}"
        if p["steady_pods"] and p["steady_bound"] < p["steady_pods"]:
            lat += f" ({p['steady_bound']}/{p['steady_pods']} bound)"
        writes = f"{p.get('writes_pods_per_s', 0.0):,.0f}"
        if p.get("scheduled_events", 0) < p["bound"]:
            writes += f" ({p.get('scheduled_events', 0)} events)"
        rows.append(
            f"| {p['workload']} | {who} | {p['pods_per_s']:,.0f} | {writes} | {p['bound']}/{p['pods']} "
            f"| {lat} "
            f"| {p['cpu_ms_per_pod']:.2f} | {p.get('control_plane_cpu_ms_per_pod', 0.0):.2f} "
            f"| {p['peak_rss_mib']:.0f} | {p['overcommitted_nodes']} "
            f"| {p['constraint_violations']} |"
        )
    return "\n".join(rows)


_MEDIAN_FIELDS = ("pods_per_s", "writes_pods_per_s", "cpu_ms_per_pod", "peak_rss_mib", "p50_ms", "p99_ms")


def _combined(phases: list[Obj]) -> Obj:
    """One scheduler's rounds on one workload as one row: the median of each figure, the
    most over-committed nodes of any round, an error if any round failed. p50 and p99 are
    those of every round's steady pods together where each round recorded its pods: the
    median of per-round p99s is the median of a few pods each (the 3rd slowest of 300)."""
    errors = [p["error"] for p in phases if p["error"]]
    if errors:
        return {"error": errors[0]}
    out: Obj = {"error": None, "overcommitted_nodes": max(p["overcommitted_nodes"] for p in phases)}
    for name in _MEDIAN_FIELDS:
        values: list[float] = [p[name] for p in phases if p.get(name) is not None]
        out[name] = statistics.median(values) if values else None
    steady = [p for p in phases if p.get("steady_pods")]
    if len(steady) > 1 and all(p.get("steady_latencies") for p in steady):
        pooled = [ms for p in steady for _, ms in p["steady_latencies"]]
        out["p50_ms"] = round(percentile(pooled, 0.50), 1)
        out["p99_ms"] = round(percentile(pooled, 0.99), 1)
    return out


def null_ratios(doc: dict[str, Any], workload: str) -> list[float]:
    """ksched's pods/s to the last write over the null binder's, one per round both completed."""
    rounds: dict[int, dict[str, Obj]] = {}
    for p in doc["phases"]:
        if p["workload"] == workload and not p["error"]:
            rounds.setdefault(p.get("round", 0), {})[p["scheduler"]] = p
    return [
        r[KSCHED]["writes_pods_per_s"] / r[NULL]["writes_pods_per_s"]
        for _, r in sorted(rounds.items())
        if KSCHED in r and NULL in r and r[NULL].get("writes_pods_per_s")
    ]


def render_summary(doc: dict[str, Any]) -> str:
    """One row per workload, each cell the schedulers' figures in run order (as the README shows them);
    with several rounds each figure is the median of the rounds (p50 and p99: of all their steady
    pods together), and the ratio the median of the rounds' ratios (each listed)."""
    labels: list[str] = doc["schedulers"]
    grouped: dict[tuple[str, str], list[Obj]] = {}
    for p in doc["phases"]:
        grouped.setdefault((p["scheduler"], p["workload"]), []).append(p)
    by = {key: _combined(ps) for key, ps in grouped.items()}
    workloads = list(dict.fromkeys(p["workload"] for p in doc["phases"]))
    order = " / ".join(labels)
    rounds = doc.get("rounds", 1)
    of = f", median of {rounds} rounds" if rounds > 1 else ""
    recorded = any(p.get("steady_latencies") for p in doc["phases"])
    pooled = f", {rounds} rounds' steady pods" if rounds > 1 and recorded else ""
    rows = [
        f"| workload | backlog drain pods/s ({order}{of}) | with Scheduled events ({order}) | ksched ÷ null binder "
        f"| CPU ms per pod ({order}) | peak RSS MiB ({order}) | p50 create→bind ms ({order}{pooled}) "
        f"| p99 create→bind ms ({order}{pooled}) | over-committed nodes ({order}) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def cells(workload: str, fmt: Callable[[Obj], str]) -> str:
        out = []
        for label in labels:
            p = by.get((label, workload))
            out.append("error" if p is None or p["error"] else fmt(p))
        return " / ".join(out)

    for w in workloads:
        # Like for like: both to their last write, binds and Scheduled events.
        ratios = null_ratios(doc, w)
        ratio = f"{statistics.median(ratios):.2f}" if ratios else "-"
        if len(ratios) > 1:
            ratio += f" ({', '.join(f'{r:.2f}' for r in ratios)})"
        rows.append(
            f"| {WORKLOAD_TITLES.get(w, w)} | {cells(w, lambda p: format(p['pods_per_s'], ',.0f'))} "
            f"| {cells(w, lambda p: format(p.get('writes_pods_per_s', 0.0), ',.0f'))} | {ratio} "
            f"| {cells(w, lambda p: format(p['cpu_ms_per_pod'], '.2f'))} "
            f"| {cells(w, lambda p: format(p['peak_rss_mib'], '.0f'))} "
            f"| {cells(w, lambda p: _fmt(p['p50_ms'], '.0f'))} | {cells(w, lambda p: _fmt(p['p99_ms'], '.0f'))} "
            f"| {cells(w, lambda p: str(p['overcommitted_nodes']))} |"
        )
    return "\n".join(rows)


def _checkout() -> str | None:
    """The commit of the checkout this ksched runs from, if it is one."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(Path(__file__).parent), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except OSError:
        return None
    return proc.stdout.strip() or None


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise KschedError(
            "ksched bench --cluster draws its chart with matplotlib: pip install 'ksched[bench]'"
        ) from None
    return plt


def chart(plt: Any, phases: list[Phase], opts: Options, path: Path) -> None:
    """Bound pods over time from the resumption, one panel per workload, one line per scheduler."""
    workloads = [w for w in opts.workloads if any(p.workload == w for p in phases)]
    cols = min(3, max(1, len(workloads)))
    rows = math.ceil(len(workloads) / cols) if workloads else 1
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, w in zip(axes.flat, workloads, strict=False):
        for p in phases:
            if p.workload == w and p.bind_times:
                label = p.scheduler + (f" (round {p.round + 1})" if opts.rounds > 1 else "")
                ax.step([0.0, *p.bind_times], range(len(p.bind_times) + 1), where="post", label=label)
        ax.set_title(WORKLOAD_TITLES[w], fontsize=9)
        ax.set_xlabel("seconds since the scheduler resumed")
        ax.set_ylabel("pods bound")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(workloads) :]:
        ax.set_visible(False)
    fig.suptitle(f"Backlog of {opts.pods:,} pods on {opts.nodes:,} KWOK nodes", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_kscheds(values: list[str]) -> dict[str, list[str]]:
    """``--ksched LABEL=COMMAND`` values: extra ksched builds to run beside this checkout's."""
    out: dict[str, list[str]] = {}
    for v in values:
        label, sep, cmd = v.partition("=")
        if not sep or not label or not cmd.strip():
            raise KschedError(f"--ksched {v!r}: give LABEL=COMMAND, e.g. before=/opt/old/.venv/bin/ksched")
        if label in (NULL, KUBE_SCHEDULER, KSCHED):
            raise KschedError(f"--ksched {v!r}: the label {label!r} is taken; choose another")
        out[label] = shlex.split(cmd)
    return out


def main(
    nodes: int,
    pods: int,
    workloads: list[str],
    schedulers: list[str],
    extra: list[str],
    rate: float,
    steady_pods: int,
    out: str,
    stall_s: float,
    as_json: bool,
    rounds: int = 1,
    node_lease_s: int = BENCH_NODE_LEASE_S,
) -> int:
    kscheds = {KSCHED: [sys.executable, "-m", "ksched.commands.cli"], **parse_kscheds(extra)}
    labels = [*schedulers, *(k for k in kscheds if k != KSCHED)]
    for s in schedulers:
        if s not in (NULL, KUBE_SCHEDULER, KSCHED):
            raise KschedError(f"unknown scheduler {s!r}: choose from {NULL}, {KUBE_SCHEDULER}, {KSCHED}")
    unknown = set(workloads) - set(WORKLOADS)
    if unknown or not workloads:
        raise KschedError(
            f"unknown workload(s) {', '.join(sorted(unknown)) or '(none given)'}: choose from {', '.join(WORKLOADS)}"
        )
    if nodes < 1 or pods < 1 or rate <= 0 or steady_pods < 0 or rounds < 1 or node_lease_s < 1:
        raise KschedError(
            "--nodes, --pods, --rounds and --node-lease-seconds must be at least 1, --rate above 0, "
            "--steady-pods at least 0"
        )
    opts = Options(
        nodes,
        pods,
        workloads,
        labels,
        kscheds,
        rate,
        steady_pods,
        stall_s,
        Path(out),
        rounds=rounds,
        node_lease_s=node_lease_s,
    )
    doc = side_by_side(opts)
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        print(render_table(doc))
        print()
        print(render_summary(doc))
        print(
            f"\nwrote {opts.out / 'results.json'}, {opts.out / 'table.md'}, {opts.out / 'bound-over-time.png'}"
        )
    bad = [p for p in doc["phases"] if p["error"] or p["bound"] < p["pods"]]
    return 1 if bad else 0
