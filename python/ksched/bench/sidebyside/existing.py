"""``ksched bench --cluster --existing-pods N``: the schedulers on a cluster that already runs N pods.

One run brings up the local control plane with the KWOK nodes, fills it with N bound pods
(:mod:`ksched.bench.sidebyside.fill`, its rate printed), optionally starts the CPU hog
(:mod:`ksched.bench.sidebyside.hog`), then for each scheduler in turn, started once:

(a) *start-up*: from the process's start to ready, and its peak RSS then;
(d) *forced relist*: etcd compacted and the API server restarted, so that every watch
    resumes from a resourceVersion the store no longer has (``410 Gone``), as the chaos soak
    does; pods created right after at ``--rate`` show, by their create→bind, how long the
    scheduler stopped; ksched's ``ksched_loop_longest_pause_seconds`` and the RSS before and
    after. It comes right after the start, so the loop's longest pause is the relist's;
(b) *backlog drain*: pods created while the scheduler is paused (SIGSTOP), timed from its
    resumption (SIGCONT) to the last bind;
(c) *churn*: a rolling update: the oldest plain Deployments' pods deleted and their new
    revision's pods created, one of each at ``--churn-rate`` a second; p50/p99 create→bind;
(e) *steady*: pods arriving at ``--rate``: p50/p99, CPU per scheduled pod, the RSS held
    then and per pod of the cluster.

After each phase a census lists every pod and judges it with :mod:`ksched.bench.invariants`:
each pod the bench created and has not deleted is there under its UID, bound; no node is
over-committed or unknown; no constraint is broken. Any failure is recorded against the
scheduler and the run exits 1. Pods of a phase (except the churn's, which replace pods for
good) are deleted after it, each phase in a namespace of its own.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ksched.bench import invariants
from ksched.bench.pods import CREATE_WORKERS, clear_pods, create_pods, list_pods
from ksched.bench.sidebyside import fill as filling
from ksched.bench.sidebyside.options import CONFLICTS, HANDOFFS, ExistingFigures, ExistingOptions
from ksched.bench.sidebyside.phase import create_at_rate, percentile, replicas_clause, settle
from ksched.bench.sidebyside.schedulers import Scheduler
from ksched.bench.sidebyside.watch import FirstSeen
from ksched.cluster import local
from ksched.cluster.processes import load_state
from ksched.errors import KschedError
from ksched.loop.client import ApiUnavailableError, Kube
from ksched.objects import Obj

PAUSE_GAUGE = "ksched_loop_longest_pause_seconds"
# After the API server's restart: how long its first answers may take (it lists etcd for its
# watch cache first).
RESTART_ANSWER_S = 120.0
# Each phase's pods: a plain Deployment's, requests the fill's middle size.
PHASE_REQUESTS = ("20m", "64Mi")


class ExistingRun:
    """The filled cluster and what the bench knows of it: every pod it expects, by
    ``namespace/name`` with its UID, and the Deployments' pods a rolling update replaces next."""

    def __init__(self, opts: ExistingOptions, state: local.ClusterState, kube: Kube, filled: filling.Filled):
        self.opts = opts
        self.state = state
        self.kube = kube
        self.expected = dict(filled.uids)
        self.replaceable = list(filled.replaceable)
        self.controllers = filled.controllers
        self.revisions: dict[tuple[str, str], int] = defaultdict(int)

    # -- the census ------------------------------------------------------

    def census(self, phase: str, figures: ExistingFigures) -> None:
        """Every expected pod present under its UID and bound, no node over-committed or
        unknown, no constraint broken; what fails is added to ``figures.violations``."""
        nodes = self.kube.request("GET", "/api/v1/nodes").json()["items"]
        pods = list_pods(self.kube)
        problems: list[str] = []
        lost = invariants.lost(self.expected, pods)
        if lost:
            problems.append(f"{len(lost)} pod(s) lost (first: {', '.join(lost[:3])})")
        ours = set(self.expected.values())
        pending = invariants.unaccounted([p for p in pods if p["metadata"]["uid"] in ours], ())
        if pending:
            names = ", ".join(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pending[:3])
            problems.append(f"{len(pending)} pod(s) not bound (first: {names})")
        over = invariants.overcommitted(nodes, pods)
        if over:
            problems.append(f"{len(over)} node(s) over-committed (first: {over[0]})")
        unknown = invariants.unknown_nodes(nodes, pods)
        if unknown:
            problems.append(f"pods bound to {len(unknown)} unknown node(s): {', '.join(unknown[:3])}")
        # Constraints hold within a namespace (anti-affinity and spread select its pods): judged
        # namespace by namespace, so the cost grows with the pods of one, not of the cluster.
        by_namespace: dict[str, list[Obj]] = defaultdict(list)
        for p in pods:
            by_namespace[p["metadata"]["namespace"]].append(p)
        broken = [
            v for group in by_namespace.values() for v in invariants.constraint_violations(nodes, group)
        ]
        if broken:
            problems.append(f"{len(broken)} constraint violation(s) (first: {broken[0]})")
        for problem in problems:
            figures.violations.append(f"{phase}: {problem}")
            print(f"  VIOLATED after {phase}: {problem}", flush=True)

    # -- one scheduler, every phase ---------------------------------------

    def run(self, sched: Scheduler) -> ExistingFigures:
        f = ExistingFigures(sched.label)
        started = time.monotonic()
        sched.start("existing", None)
        f.startup_s = time.monotonic() - started
        f.startup_peak_rss_mib = sched.usage()[1]
        print(f"  (a) ready in {f.startup_s:.1f} s, peak RSS {f.startup_peak_rss_mib:.0f} MiB", flush=True)
        f.startup_profile = sched.startup_lines()
        for line in f.startup_profile:
            print(f"      {line}", flush=True)
        self.census("start-up", f)
        # Each phase takes its census before it deletes its pods; the next phase's (or the last,
        # after the steady pods are gone) finds any other pod that the deletion took with them.
        self.relist(sched, f)
        self.drain(sched, f)
        self.churn(sched, f)
        self.census("churn", f)
        self.steady(sched, f)
        self.census("end", f)
        f.peak_rss_mib = sched.usage()[1]
        return f

    def relist(self, sched: Scheduler, f: ExistingFigures) -> None:
        settle(self.state, sched)
        f.relist_rss_before_mib = sched.rss()
        revision = local.etcd_compact()
        local.restart("kube-apiserver")
        # The restarted API server is a new process: the control plane's CPU is read from it now.
        restarted = load_state()
        if restarted is not None:
            self.state.pids = restarted.pids
        self._until_answers()
        namespace = f"relist-{sched.label}"
        sent, times = self._arrivals(sched, namespace, self.opts.relist_pods, self.opts.rate)
        latencies = sorted((times[n] - t) * 1000 for n, t in sent.items() if n in times)
        f.relist_bound = len(latencies)
        if latencies:
            f.relist_max_ms = round(latencies[-1], 1)
            f.relist_p99_ms = round(percentile(latencies, 0.99), 1)
        settle(self.state, sched)
        f.relist_rss_after_mib = sched.rss()
        if sched.port is not None:  # a ksched
            f.relist_loop_pause_s = loop_pause(sched.port)
        pause = (
            f"; loop's longest pause {f.relist_loop_pause_s:.2f} s"
            if f.relist_loop_pause_s is not None
            else ""
        )
        print(
            f"  (d) relist (etcd compacted at {revision}, API server restarted): {f.relist_bound}/"
            f"{self.opts.relist_pods} bound, create→bind p99 {f.relist_p99_ms} ms, max {f.relist_max_ms} ms{pause}; "
            f"RSS {f.relist_rss_before_mib:.0f} → {f.relist_rss_after_mib:.0f} MiB",
            flush=True,
        )
        self.census("relist", f)
        self._clear(namespace)

    def drain(self, sched: Scheduler, f: ExistingFigures) -> None:
        namespace = f"drain-{sched.label}"
        group, owner = self._phase_group(namespace, "drain", self.opts.drain_pods)
        pods = [
            filling.pod(group, 0, i, owner, sched.scheduler_name, None) for i in range(self.opts.drain_pods)
        ]
        watch = FirstSeen.binds(self.state.kubeconfig, namespace)
        try:
            settle(self.state, sched)
            sched.pause()
            try:
                uids = create_pods(self.kube, pods)
                self.expected |= {f"{namespace}/{n}": u for n, u in uids.items()}
                cpu_before, _ = sched.usage()
                replicas_before = sched.cpu_by_replica()
                handed_before, conflicts_before = sched.counter(HANDOFFS), sched.counter(CONFLICTS)
            finally:
                sched.resume()
            resumed = time.monotonic()
            names = set(uids)
            watch.wait(names, self.opts.stall_s)
            cpu_after, _ = sched.usage()
            replicas_after = sched.cpu_by_replica()
            f.drain_handoffs = round(sched.counter(HANDOFFS) - handed_before)
            f.drain_bind_conflicts = round(sched.counter(CONFLICTS) - conflicts_before)
            with watch.lock:
                times = sorted(watch.seen[n] - resumed for n in names if n in watch.seen)
        finally:
            watch.close()
        f.drain_bound = len(times)
        f.drain_seconds = times[-1] if times else 0.0
        f.drain_pods_per_s = f.drain_bound / f.drain_seconds if f.drain_seconds > 0 else 0.0
        f.drain_cpu_ms_per_pod = (cpu_after - cpu_before) * 1000 / max(f.drain_bound, 1)
        f.replicas = len(replicas_after)
        f.drain_cpu_ms_per_pod_by_replica = [
            round((a - b) * 1000 / max(f.drain_bound, 1), 3)
            for a, b in zip(replicas_after, replicas_before, strict=True)
        ]
        print(
            f"  (b) drain: {f.drain_bound}/{self.opts.drain_pods} bound in {f.drain_seconds:.2f} s = "
            f"{f.drain_pods_per_s:,.0f} pods/s, {f.drain_cpu_ms_per_pod:.2f} CPU ms/pod"
            + replicas_clause(
                f.replicas, f.drain_cpu_ms_per_pod_by_replica, f.drain_handoffs, f.drain_bind_conflicts
            ),
            flush=True,
        )
        self.census("drain", f)
        self._clear(namespace)

    def churn(self, sched: Scheduler, f: ExistingFigures) -> None:
        """A rolling update of the oldest plain Deployments' pods: one old pod deleted and one of
        the new revision created per step, ``churn_rate`` steps a second."""
        count = min(self.opts.churn_pods, len(self.replaceable))
        victims, self.replaceable = self.replaceable[:count], self.replaceable[count:]
        groups = {(g.namespace, g.name): g for g, _ in victims}
        for key in groups:
            self.revisions[key] += 1
        sets = filling.post_all(
            self.kube,
            [
                filling.replica_set(g, self.revisions[key], len(g.nodes), self.controllers[key])
                for key, g in groups.items()
            ],
        )
        owners = dict(zip(groups, sets, strict=True))
        index: dict[tuple[str, str], int] = defaultdict(int)
        steps: list[tuple[str, Obj]] = []
        for g, old in victims:
            key = (g.namespace, g.name)
            steps.append(
                (
                    old,
                    filling.pod(g, self.revisions[key], index[key], owners[key], sched.scheduler_name, None),
                )
            )
            index[key] += 1
        namespaces = sorted({g.namespace for g in groups.values()})
        watches = {ns: FirstSeen.binds(self.state.kubeconfig, ns) for ns in namespaces}
        try:
            settle(self.state, sched)
            sent, uids = self._rolling_update(steps)
            for old, _ in steps:
                self.expected.pop(old, None)
            for (_, new), (g, _) in zip(steps, victims, strict=True):
                name = new["metadata"]["name"]
                if name in uids:
                    self.expected[f"{g.namespace}/{name}"] = uids[name]
                    self.replaceable.append((g, f"{g.namespace}/{name}"))
            seen: dict[str, float] = {}
            for ns, watch in watches.items():
                watch.wait(
                    {new["metadata"]["name"] for _, new in steps if new["metadata"]["namespace"] == ns},
                    self.opts.stall_s,
                )
                with watch.lock:
                    seen |= watch.seen
        finally:
            for watch in watches.values():
                watch.close()
        latencies = sorted((seen[n] - t) * 1000 for n, t in sent.items() if n in seen)
        f.churn_bound = len(latencies)
        if len(sent) > 1:
            f.churn_rate_sent = (len(sent) - 1) / (max(sent.values()) - min(sent.values()))
        if latencies:
            f.churn_p50_ms = round(percentile(latencies, 0.50), 1)
            f.churn_p99_ms = round(percentile(latencies, 0.99), 1)
        print(
            f"  (c) churn: {f.churn_bound}/{count} new pods bound, sent at {f.churn_rate_sent:.0f} pods/s, "
            f"create→bind p50 {f.churn_p50_ms} ms, p99 {f.churn_p99_ms} ms",
            flush=True,
        )
        if count < self.opts.churn_pods:
            f.violations.append(f"churn: only {count} pods to replace, not {self.opts.churn_pods}")

    def steady(self, sched: Scheduler, f: ExistingFigures) -> None:
        namespace = f"steady-{sched.label}"
        cpu_before = 0.0

        def before() -> None:
            nonlocal cpu_before
            cpu_before = sched.usage()[0]

        sent, times = self._arrivals(sched, namespace, self.opts.steady_pods, self.opts.rate, before)
        cpu_after = sched.usage()[0]
        latencies = sorted((times[n] - t) * 1000 for n, t in sent.items() if n in times)
        f.steady_bound = len(latencies)
        if latencies:
            f.steady_p50_ms = round(percentile(latencies, 0.50), 1)
            f.steady_p99_ms = round(percentile(latencies, 0.99), 1)
        f.steady_cpu_ms_per_pod = (cpu_after - cpu_before) * 1000 / max(f.steady_bound, 1)
        f.steady_rss_mib = sched.rss()
        f.rss_kib_per_cluster_pod = f.steady_rss_mib * 1024 / max(len(self.expected), 1)
        print(
            f"  (e) steady: {f.steady_bound}/{self.opts.steady_pods} bound at {self.opts.rate:g} pods/s, "
            f"p50 {f.steady_p50_ms} ms, p99 {f.steady_p99_ms} ms, {f.steady_cpu_ms_per_pod:.2f} CPU ms/pod; "
            f"RSS {f.steady_rss_mib:.0f} MiB = {f.rss_kib_per_cluster_pod:.1f} KiB per pod of the cluster",
            flush=True,
        )
        self.census("steady", f)
        self._clear(namespace)

    # -- helpers -----------------------------------------------------------

    def _phase_group(self, namespace: str, name: str, count: int) -> tuple[filling.Group, Obj]:
        """A plain Deployment (with its Service and ReplicaSet) in a namespace of its own for a
        phase's ``count`` pods; returns the group and its ReplicaSet."""
        group = filling.Group(filling.WEB, namespace, name, (), PHASE_REQUESTS)
        filling.post_all(
            self.kube,
            [
                (
                    "/api/v1/namespaces",
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                )
            ],
        )
        deployment = filling.post_all(self.kube, filling.owners(group))[0]
        return group, filling.post_all(self.kube, [filling.replica_set(group, 0, count, deployment)])[0]

    def _arrivals(
        self, sched: Scheduler, namespace: str, count: int, rate: float, before: Any = None
    ) -> tuple[dict[str, float], dict[str, float]]:
        """``count`` pods created at ``rate`` in ``namespace``: when each was sent and when each
        was first seen bound, by name (unbound pods are absent from the second)."""
        group, owner = self._phase_group(namespace, namespace.split("-", 1)[0], count)
        pods = [filling.pod(group, 0, i, owner, sched.scheduler_name, None) for i in range(count)]
        watch = FirstSeen.binds(self.state.kubeconfig, namespace)
        try:
            if before is not None:
                before()
            sent, uids = create_at_rate(self.kube, pods, rate)
            self.expected |= {f"{namespace}/{n}": u for n, u in uids.items()}
            watch.wait(set(sent), self.opts.stall_s)
            with watch.lock:
                return sent, dict(watch.seen)
        finally:
            watch.close()

    def _rolling_update(self, steps: list[tuple[str, Obj]]) -> tuple[dict[str, float], dict[str, str]]:
        """Per step, delete the old pod (``namespace/name``), then create the new one, at
        ``churn_rate`` steps a second; when each create was sent, and each new pod's UID, by name.
        An old pod already gone is an error: the census before found it."""
        sent: dict[str, float] = {}
        uids: dict[str, str] = {}
        errors: list[str] = []

        def step(old: str, new: Obj) -> None:
            ns, name = old.split("/", 1)
            r = self.kube.request(
                "DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", query={"gracePeriodSeconds": 0}
            )
            if not r.ok:
                errors.append(f"deleting {old}: HTTP {r.status}: {r.data[:200]!r}")
            name = new["metadata"]["name"]
            sent[name] = time.monotonic()
            r = self.kube.request("POST", f"/api/v1/namespaces/{ns}/pods", body=new)
            if r.ok:
                uids[name] = r.json()["metadata"]["uid"]
            else:
                errors.append(f"creating {ns}/{name}: HTTP {r.status}: {r.data[:200]!r}")

        start = time.monotonic()
        with ThreadPoolExecutor(CREATE_WORKERS) as pool:
            for i, (old, new) in enumerate(steps):
                delay = start + i / self.opts.churn_rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                pool.submit(step, old, new)
        if errors:
            raise KschedError(f"{len(errors)} error(s) in the rolling update; first: {errors[0]}")
        return sent, uids

    def _clear(self, namespace: str) -> None:
        clear_pods(self.kube, namespace)
        prefix = f"{namespace}/"
        for key in [k for k in self.expected if k.startswith(prefix)]:
            del self.expected[key]

    def _until_answers(self) -> None:
        deadline = time.monotonic() + RESTART_ANSWER_S
        while True:
            try:
                if self.kube.request("GET", "/api/v1/namespaces", query={"limit": 1}).ok:
                    return
            except ApiUnavailableError:
                pass
            if time.monotonic() > deadline:
                raise KschedError(
                    f"the API server did not answer within {RESTART_ANSWER_S:.0f} s of its restart"
                )
            time.sleep(0.5)


def loop_pause(port: int) -> float | None:
    """``ksched_loop_longest_pause_seconds`` from a running ksched's /metrics, if it has it."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(PAUSE_GAUGE + " "):
            return float(line.split()[1])
    return None


def headroom(opts: ExistingOptions) -> int:
    """Pods the fill leaves free on every node: what a round-robin null binder may add to one
    node in the largest phase that is cleared after it, plus every scheduler's churn, whose pods stay."""
    per_node = max(
        math.ceil(n / opts.nodes) for n in (opts.drain_pods, opts.steady_pods, opts.relist_pods, 1)
    )
    return per_node + math.ceil(opts.churn_pods / opts.nodes) * len(opts.schedulers)
