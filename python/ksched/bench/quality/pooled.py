"""Every scheduler at once, each on a pool of nodes of its own.

Owns the concurrent form of the quality run: the cluster's nodes are dealt into disjoint
pools of equal size and identical shapes (the same count of each allocatable), each pool
labelled :data:`POOL_LABEL`; each (scenario, scheduler) entry's pods select their pool by
that label and arrive at the same time as the others'. Every entry then sees the same
Prometheus, the same scrapes and the same machine load, and a round takes one observation
window however many schedulers it compares. Each ksched configuration runs as its own
``ksched run`` whose one profile is named after its label, so the processes never race
for a pod. The demo runs a short round; ``ksched bench --quality --pools`` runs each
scenario as one.

Rebalancing setups: ``kube-scheduler+descheduler`` is kube-scheduler with the descheduler
(:mod:`ksched.cluster.descheduler`) on its pool and namespace, at the hot and cool lines and
the interval of the ksched rebalancer's configuration; ``ksched-rebalance`` is ksched with its
rebalancer on. Where a scenario's pods are owned by controllers and the API server audits
evictions, each entry is also judged by what was moved (:mod:`.rebalance`). The steering
setups and ``shadow`` get their configuration for their pool and namespace from
:mod:`.setups`; the shadow's outcomes are read once the window is over, for
:mod:`.shadow_estimate`, and so are the steering setups' marks (the node events, listed once),
for :mod:`.marks`. Each ksched entry's ``PlacedOverThreshold`` events are counted (the pods
its caution placed over a threshold, rather than leaving them pending). Each ``ksched run``'s
configuration and log are named after its scenario and label in the work directory.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ksched.bench.invariants import lost, overcommitted, unowned
from ksched.bench.pods import KSCHED_COMMAND, clear_pods, cpu_seconds, list_all, start_ksched_run
from ksched.bench.quality.estimates import TRACED, StatusPoller, candidates, trace
from ksched.bench.quality.figures import (
    QualityFigures,
    QualityResults,
    Series,
    hottest_nodes,
    judge,
    node_cores,
    percentile,
    replicas_together,
    unjudged,
)
from ksched.bench.quality.marks import attribute, node_events, timeline
from ksched.bench.quality.moves import Sampler, record
from ksched.bench.quality.observe import (
    Arrivals,
    VoidRoundError,
    bind_time,
    bind_waits,
    clear_controllers,
    create_namespace,
    create_scenario,
    ksched_config,
    metric_lag_s,
    observation_end,
    reported,
    settle,
    utilisation,
)
from ksched.bench.quality.rebalance import HOT_SAMPLES, judge_rebalance
from ksched.bench.quality.scenarios import (
    DEFAULT_SCHEDULER,
    KUBE_SCHEDULER,
    ORACLE_STEADY,
    Scenario,
    scenario,
    time_bursts_from,
)
from ksched.bench.quality.setups import KNOWING, SHADOW, pool_config, read_outcomes, steers
from ksched.bench.quality.teller import ORACLE_MEASURED, Teller
from ksched.cluster import descheduler
from ksched.cluster.processes import tail, terminate
from ksched.config import load_config
from ksched.errors import KschedError
from ksched.loop.client import Kube
from ksched.loop.events import PLACED_OVER_THRESHOLD, events_path
from ksched.objects import Obj

POOL_LABEL = "quality.ksched.io/pool"
KUBE_SCHEDULER_DESCHEDULER = "kube-scheduler+descheduler"
KSCHED_REBALANCE = "ksched-rebalance"
# The setups whose pods kube-scheduler places; every other label is a ksched configuration.
KUBE_SCHEDULER_SETUPS = (KUBE_SCHEDULER, KUBE_SCHEDULER_DESCHEDULER, SHADOW)
# The setups that start no ``ksched run`` (the shadow starts one that binds nothing).
WITHOUT_KSCHED = (KUBE_SCHEDULER, KUBE_SCHEDULER_DESCHEDULER)
PATCH_WORKERS = 8


@dataclass(frozen=True)
class Round:
    """One concurrent round: the entries (scenario, scheduler label), each on a pool of
    ``pool_size`` nodes with ``pods`` pods, and how it is observed."""

    entries: tuple[tuple[str, str], ...]
    pool_size: int
    pods: int
    seed: int
    rate: float
    observe_s: float
    scrape_interval_s: float
    threshold: float
    # A ksched label's configuration file (None: no metric); kube-scheduler has none.
    configs: dict[str, Path | None]
    # The rebalancer's configuration whose lines and interval the descheduler is given.
    rebalance_config: Path | None = None
    # A ksched label's command where it is another build's (default: this checkout's).
    commands: dict[str, list[str]] = field(default_factory=dict)
    # Samples over the line in a row that make a node hot: the rebalancer configuration's
    # hotSamples, so a run is judged by the line its policy draws.
    hot_samples: int = HOT_SAMPLES

    def steers(self, label: str) -> bool:
        """Whether the label's setup steers (:func:`~ksched.bench.quality.setups.steers`)."""
        path = self.configs.get(label)
        config = yaml.safe_load(path.read_text()) if path is not None and path.exists() else None
        return steers(label, config if isinstance(config, dict) else None)


def _shape(node: Obj) -> tuple[str, str]:
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return str(alloc.get("cpu")), str(alloc.get("memory"))


def pools(nodes: list[Obj], count: int, size: int) -> list[list[str]]:
    """``count`` disjoint pools of ``size`` node names with the same shapes: each shape's
    nodes dealt round-robin, then every pool cut to the same interleaving of shapes."""
    groups: dict[tuple[str, str], list[str]] = {}
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        groups.setdefault(_shape(node), []).append(node["metadata"]["name"])
    out: list[list[str]] = []
    for p in range(count):
        dealt = [g[p::count][: len(g) // count] for g in groups.values()]
        interleaved = [
            names[j] for j in range(max(map(len, dealt), default=0)) for names in dealt if j < len(names)
        ]
        out.append(interleaved[:size])
    short = min(map(len, out), default=0)
    if short < size:
        raise KschedError(
            f"{len(nodes)} nodes make {count} pools of at most {short} nodes of equal shapes, not {size}: "
            "ask for fewer nodes a pool or start more nodes"
        )
    return out


def _label(kube: Kube, node_pools: list[list[str]]) -> None:
    def patch(item: tuple[int, str]) -> None:
        i, node = item
        body = {"metadata": {"labels": {POOL_LABEL: str(i)}}}
        r = kube.request(
            "PATCH", f"/api/v1/nodes/{node}", body=body, content_type="application/merge-patch+json"
        )
        if not r.ok:
            raise KschedError(f"labelling node {node}: HTTP {r.status}: {r.data[:200]!r}")

    with ThreadPoolExecutor(PATCH_WORKERS) as workers:
        list(workers.map(patch, [(i, n) for i, names in enumerate(node_pools) for n in names]))


def namespace_of(name: str, label: str) -> str:
    """The entry's namespace (a ``+`` is no name character)."""
    return f"q-{name}-{label.replace('+', '-')}"


def descheduler_setup(
    rebalance_config: Path | None, pool: int, namespace: str
) -> descheduler.DeschedulerSetup:
    """The descheduler on one pool and namespace, with the hot line (``high``), the cool line
    (``low``) and the interval of the rebalancer's configuration (its first judged metric)."""
    config = load_config(rebalance_config)
    profile = config.profile(config.rebalance.profile or "") or config.profiles[0]
    metrics = tuple(m for m in config.metrics if profile.metrics is None or m.name in profile.metrics)
    lines = config.rebalance.thresholds(metrics)
    if not lines:
        raise KschedError(
            f"{rebalance_config}: the rebalancer judges no metric, so the descheduler has no lines"
        )
    return descheduler.DeschedulerSetup(
        node_selector=f"{POOL_LABEL}={pool}",
        namespace=namespace,
        high=lines[0].high,
        low=lines[0].low,
        interval_s=config.rebalance.interval_s,
    )


def scheduler_name(r: Round, i: int, label: str) -> str:
    """The name entry ``i``'s ksched answers to (and its pods ask for, where it places them):
    the label, or, where the round runs the label on more than one pool (the demo's two
    scenarios), the label and the pool, so that no two ksched processes race for one pod."""
    return label if sum(1 for _, other in r.entries if other == label) == 1 else f"{label}-{i}"


def _scenario(r: Round, i: int, name: str, label: str) -> tuple[str, Scenario]:
    namespace = namespace_of(name, label)
    asks = DEFAULT_SCHEDULER if label in KUBE_SCHEDULER_SETUPS else scheduler_name(r, i, label)
    knows = label in KNOWING or label == ORACLE_STEADY
    s = scenario(name, r.pods, namespace, asks, r.seed, r.rate, oracle=knows, foresees=label != ORACLE_STEADY)
    for pod in s.pods:
        pod["spec"]["nodeSelector"] = {POOL_LABEL: str(i)}
    return namespace, s


def pooled_round(
    kube: Kube,
    kubeconfig: str,
    prometheus: str,
    r: Round,
    workdir: Path,
    results: QualityResults,
    log: Callable[[str], None],
    audit_log: Path | None = None,
) -> None:
    """Run the round's entries at once, each on its pool; append their figures (and any
    lost pod or over-committed node) to ``results``. With ``audit_log`` (the API server
    audits evictions there, :func:`ksched.bench.quality.moves.audit_policy`), entries whose
    pods controllers own are judged by their evictions too."""
    nodes = kube.request("GET", "/api/v1/nodes").json()["items"]
    node_pools = pools(nodes, len(r.entries), r.pool_size)
    _label(kube, node_pools)
    procs: dict[int, subprocess.Popen[bytes]] = {}
    deschedulers: list[tuple[subprocess.Popen[bytes], Path]] = []
    plans = [_scenario(r, i, name, label) for i, (name, label) in enumerate(r.entries)]
    moved = {ns for ns, s in plans if s.controlled} if audit_log is not None else set()
    sampler = Sampler(kube, moved)
    pollers: dict[int, StatusPoller] = {}
    # oracle-measured's pools: each pod told its usage one scrape after its bind.
    tellers = [
        Teller(kube, namespace, r.scrape_interval_s)
        for (_, label), (namespace, _) in zip(r.entries, plans, strict=True)
        if label == ORACLE_MEASURED
    ]
    try:
        ports = _start_schedulers(r, kubeconfig, prometheus, workdir, plans, procs, deschedulers)
        for teller in tellers:
            teller.start()
        pollers = {
            i: StatusPoller(port, candidates(plans[i][1].pods, scheduler_name(r, i, TRACED)))
            for i, port in ports.items()
            if r.entries[i][1] == TRACED
        }
        for poller in pollers.values():
            poller.start()
        series, arrivals, settled = _observe(
            kube, prometheus, r, plans, sampler, lambda: exited(procs.values())
        )
        # What each ksched used over the window, before the settling below adds its idle wait.
        cpu = {i: cpu_seconds(proc) for i, proc in procs.items()}
        for poller in pollers.values():
            poller.stop()
        for teller in tellers:
            teller.stop()
        results.violations += [
            f"{t.namespace}: {t.failed} lists or patches of oracle-measured's teller failed: "
            "its figures are not a judgement"
            for t in tellers
            if t.failed
        ]
        # Every placement's horizon ends within the window (:mod:`.setups`); the last ones may
        # still wait for a look or two.
        shadows = {
            i: read_outcomes(port, 2 * r.scrape_interval_s)
            for i, port in ports.items()
            if r.entries[i][1] == SHADOW
        }
        # One list of the node events, before the kscheds stop (and unmark everything).
        events = node_events(kube) if any(r.steers(label) for _, label in r.entries) else []
        results.violations += [
            f"the descheduler exited early ({proc.returncode}): {tail(log)}"
            for proc, log in deschedulers
            if proc.poll() is not None
        ]
        # The descheduler evicts no more; the replacements of what was evicted get placed.
        for proc, _ in deschedulers:
            terminate(proc, 30)
        # A ksched that ended within the window (after its pods were placed) changed what would be
        # judged: the round is void, said once here rather than by the first settle below.
        if (why := exited(procs.values())) is not None:
            raise VoidRoundError(f"{why} within the window")
        ended = [settle(kube, namespace, lambda: exited(procs.values()))[0] for namespace, _ in plans]
        nodes = kube.request("GET", "/api/v1/nodes").json()["items"]
        everywhere = kube.request("GET", "/api/v1/pods").json()["items"]
        results.violations += [f"over-committed {o}" for o in overcommitted(nodes, everywhere)]
        cores = node_cores(nodes)
        for i, ((name, label), (namespace, _), names, made, (placed, _), pods) in enumerate(
            zip(r.entries, plans, node_pools, arrivals, settled, ended, strict=True)
        ):
            entry = _Entry(name, label, namespace, names, made, placed, pods)
            if plans[i][1].controlled and (orphans := unowned(pods)):
                results.violations.append(
                    f"{name}/{label}: {len(orphans)} pods no controller owned by the end "
                    f"(first: {orphans[0]}): nothing learned their workload or could move them"
                )
            figures = _judge(
                r,
                entry,
                series,
                sampler,
                audit_log if namespace in moved else None,
                results,
                cores,
            )
            figures.shadow = shadows.get(i)
            if label not in WITHOUT_KSCHED:
                figures.over_threshold = count_over_threshold(kube, namespace, log)
                figures.cpu_s = cpu.get(i)
            if i in pollers:
                figures.estimate = trace(pollers[i].points, pods)
            if r.steers(label):
                figures.marks = timeline(events, names, series.times[0], series.times[-1])
                attribute(
                    figures.marks, series.times, series.values, series.step_s, names, binds(pods), r.threshold
                )
            log(_summary(entry, figures))
    finally:
        if sampler.running:
            sampler.stop()
        for periodic in [*pollers.values(), *tellers]:
            if periodic.running:
                periodic.stop()
        for proc in [*procs.values(), *(d for d, _ in deschedulers)]:
            terminate(proc, 30)
        for namespace, s in plans:
            if s.controlled:
                clear_controllers(kube, namespace)
            clear_pods(kube, namespace)


def count_over_threshold(kube: Kube, namespace: str, log: Callable[[str], None]) -> int | None:
    """The pods placed over a threshold in ``namespace`` (:func:`placed_over_threshold`), or
    None where its events cannot be listed: the round's other figures stand without it."""
    try:
        return placed_over_threshold(list_all(kube, events_path(namespace), "events"))
    except KschedError as err:
        log(f"{namespace}: pods placed over a threshold not counted: {err}")
        return None


def placed_over_threshold(events: Iterable[Obj]) -> int:
    """The pods that a ``PlacedOverThreshold`` event among ``events`` names (one per metric
    the pod was placed over)."""
    return len(
        {
            ((e.get("regarding") or {}).get("namespace"), (e.get("regarding") or {}).get("name"))
            for e in events
            if e.get("reason") == PLACED_OVER_THRESHOLD
        }
    )


def binds(pods: list[Obj]) -> list[tuple[str, str, float]]:
    """Each bound pod's scheduler, node and bind time (its PodScheduled condition's)."""
    out = []
    for pod in pods:
        rec = record(pod)
        if rec.node is not None and rec.bound is not None:
            out.append((str(pod["spec"].get("schedulerName") or DEFAULT_SCHEDULER), rec.node, rec.bound))
    return out


def _start_schedulers(
    r: Round,
    kubeconfig: str,
    prometheus: str,
    workdir: Path,
    plans: list[tuple[str, Scenario]],
    procs: dict[int, subprocess.Popen[bytes]],
    deschedulers: list[tuple[subprocess.Popen[bytes], Path]],
) -> dict[int, int]:
    """A ``ksched run`` per ksched entry, and a descheduler per entry that has one, each
    kept as it starts (``procs``, by its entry's index, so a failure part way stops those
    already started). Returns each ksched's ``/status`` port by its entry's index."""
    ports: dict[int, int] = {}
    for i, ((name, label), (namespace, _)) in enumerate(zip(r.entries, plans, strict=True)):
        if label in WITHOUT_KSCHED:
            continue
        config = ksched_config(r.configs.get(label), prometheus, scheduler_name(r, i, label))
        config = pool_config(config, label, {POOL_LABEL: str(i)}, namespace, r.observe_s)
        # Named by scenario too: the rounds of a run share the work directory.
        path = workdir / f"{name}-{label}.yaml"
        path.write_text(yaml.safe_dump(config))
        command = r.commands.get(label, KSCHED_COMMAND)
        proc, port = start_ksched_run(kubeconfig, log_beside(path), path, command)
        procs[i] = proc
        ports[i] = port
    for i, ((name, label), (namespace, _)) in enumerate(zip(r.entries, plans, strict=True)):
        if label == KUBE_SCHEDULER_DESCHEDULER:
            setup = descheduler_setup(r.rebalance_config, i, namespace)
            logs = workdir / f"descheduler-{name}"
            deschedulers.append((descheduler.start(kubeconfig, setup, logs), logs / descheduler.LOG))
    return ports


def log_beside(config: Path) -> Path:
    """Where a ksched run with ``--config`` ``config`` writes its output: beside it, as
    ``.log`` (:func:`exited` names it)."""
    return config.with_suffix(".log")


def exited(procs: Iterable[subprocess.Popen[bytes]]) -> str | None:
    """Why the round cannot go on: the first of its processes that exited, and how (a ksched
    that crashed leaves its pods pending, and the round would wait them out), with its log
    where it has one beside its ``--config`` (:func:`log_beside`); None while all run. A
    command is told by its end, where its ``--config`` names the scenario and setup."""
    for proc in procs:
        code = proc.poll()
        if code is not None:
            how = f"signal {-code}" if code < 0 else f"exit status {code}"
            args = [str(a) for a in proc.args] if isinstance(proc.args, list | tuple) else [str(proc.args)]
            why = f"{' '.join(args)[-200:]} ended early ({how})"
            configs = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--config"]
            if configs and (log := log_beside(Path(configs[-1]))).exists():
                why += f"; its log: {log}"
            return why
    return None


def _observe(
    kube: Kube,
    prometheus: str,
    r: Round,
    plans: list[tuple[str, Scenario]],
    sampler: Sampler,
    dead: Callable[[], str | None] = lambda: None,
) -> tuple[Series, list[Arrivals], list[tuple[list[Obj], float]]]:
    """Create every entry's pods at once and wait out the observation window: the nodes'
    utilisation over it, each entry's arrivals, and its pods once settled."""
    for namespace, _ in plans:
        create_namespace(kube, namespace)
    sampler.start()
    start = time.time()
    for _, plan in plans:
        time_bursts_from(plan.pods, start)
    # Set where the round stops early (Ctrl-C, SIGTERM, a pool's creator failing): every other
    # pool's creator and settle stop at their next wait, so leaving the executor, and the
    # teardown after it, do not wait out minutes of the scenarios' arrivals.
    stop = threading.Event()
    with ThreadPoolExecutor(len(plans)) as workers:
        lag = metric_lag_s(r.scrape_interval_s)
        try:
            arrivals = list(workers.map(lambda plan: create_scenario(kube, plan[1], lag, stop), plans))
            settled = list(workers.map(lambda plan: settle(kube, plan[0], _unless(stop, dead)), plans))
        except BaseException:
            stop.set()
            raise
    end = max(observation_end(start, arrivals, r.observe_s, lag), *(at for _, at in settled))
    if end > time.time():
        time.sleep(end - time.time())
    # The last recording-rule evaluation covering ``end`` lands up to one interval later.
    time.sleep(r.scrape_interval_s)
    series = utilisation(prometheus, start, end, r.scrape_interval_s)
    sampler.stop()
    return series, arrivals, settled


def _unless(stop: threading.Event, dead: Callable[[], str | None]) -> Callable[[], str | None]:
    """``dead``, or that the round was stopped once ``stop`` is set."""
    return lambda: "the round was stopped" if stop.is_set() else dead()


@dataclass(frozen=True)
class _Entry:
    """One (scenario, scheduler label) entry as the round left it."""

    name: str
    label: str
    namespace: str
    # Its pool's node names.
    nodes: list[str]
    made: Arrivals
    # Its pods when first settled, and as they ended (after the descheduler stopped).
    placed: list[Obj]
    pods: list[Obj]


def placing(figures: QualityFigures, made: Arrivals, pods: list[Obj], now: float | None = None) -> None:
    """How fast the pods were placed: pods/s, and the 99th percentile and the longest of create
    to bind (a pod still pending counts its wait until ``now``, default the present)."""
    figures.pods_per_s = made.pods_per_s(pods)
    waits = bind_waits(pods, time.time() if now is None else now)
    figures.p99_bind_s, figures.max_bind_s = percentile(waits, 0.99), max(waits, default=0.0)
    figures.bind_waits = dict(sorted(Counter(round(w) for w in waits).items()))


def _judge(
    r: Round,
    entry: _Entry,
    series: Series,
    sampler: Sampler,
    audit_log: Path | None,
    results: QualityResults,
    cores: dict[str, float],
) -> QualityFigures:
    """The entry's figures, appended to ``results`` with its violations (``cores``: each node's
    allocatable CPU, for the figures per node shape); with ``audit_log``, judged by its
    evictions too."""
    name, label, pods, made = entry.name, entry.label, entry.pods, entry.made
    figures = QualityFigures(label, name, r.pods)
    figures.pending = sum(1 for p in entry.placed if not p["spec"].get("nodeName"))
    placing(figures, made, entry.placed)
    # Judged by the pods as they ended: an evicted pod's replacement where it landed.
    bound = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}
    judge(figures, series, entry.nodes, bound, r.threshold, cores)
    bound_at = {p["metadata"]["name"]: t for p in pods if (t := bind_time(p)) is not None}
    figures.hottest = hottest_nodes(
        series, pods, bound_at, r.threshold, {n: cores.get(n, 0.0) for n in entry.nodes}
    )
    figures.replicas_together = replicas_together(pods)
    results.violations += unjudged(figures)
    evicted: set[str] = set()
    if audit_log is not None:
        evictions = sampler.evictions(audit_log, entry.namespace)
        evicted = {e.pod for e in evictions}
        figures.rebalance = judge_rebalance(
            series.times,
            series.values,
            entry.nodes,
            r.threshold,
            evictions,
            list(sampler.pods[entry.namespace].values()),
            set(made.created),
            sampler.budgets[entry.namespace],
            r.hot_samples,
        )
    results.figures.append(figures)
    kept = {n: uid for n, uid in made.created.items() if n not in evicted}
    results.violations += [f"{name}/{label}: lost {p}" for p in lost(kept, pods)]
    results.violations += [
        f"{name}/{label}: {p['metadata']['name']} neither bound nor reported unschedulable"
        for p in pods
        if not p["spec"].get("nodeName") and not reported(p)
    ]
    return figures


def _summary(entry: _Entry, figures: QualityFigures) -> str:
    """The entry's line in the log."""
    return (
        f"{entry.name} / {entry.label} ({len(entry.nodes)} nodes): {figures.hotspot_node_minutes} hot node-minutes, "
        f"p95 {figures.p95_utilisation}, cv {figures.cv}, {figures.pods_on_hot_nodes} pods on hot nodes, "
        f"{figures.pending} pending, {figures.pods_per_s} pods/s, "
        f"{figures.replicas_together:.0%} of replicas beside another"
        + (f", {figures.over_threshold} placed over a threshold" if figures.over_threshold else "")
        + (
            f", {figures.rebalance.evictions} evictions"
            + (f" (and {n} after the window)" if (n := figures.rebalance.evictions_after_window) else "")
            if figures.rebalance
            else ""
        )
        + (
            f", shadow: {figures.shadow.hot_node_minutes_avoided_estimated:.1f} hot node-min avoided (estimated)"
            if figures.shadow
            else ""
        )
        + (f", {figures.marks.put_on} marks on {figures.marks.nodes_marked} nodes" if figures.marks else "")
        + (
            ", hot at the end: "
            + ", ".join(f"{n} ({v[-1]:.2f})" for n, v in figures.rebalance.hot_at_end.items())
            if figures.rebalance and figures.rebalance.hot_at_end
            else ""
        )
    )
