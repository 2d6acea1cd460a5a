"""``ksched bench --quality``: placement quality under real load, side by side.

One local control plane with the load simulation on (:mod:`ksched.cluster.load`: KWOK gives
each pod the usage its profile says, Prometheus scrapes every node and records
``node:node_cpu_utilisation:ratio``). For each scenario (:mod:`.scenarios`) each scheduler in
turn places the same pods in a namespace of its own: kube-scheduler (requests only), ksched
with a load-aware configuration, ksched with no metric. The utilisation Prometheus recorded
from the first create to the end of the observation is judged by :mod:`.figures`. Between
runs the namespace is cleared and the harness waits until no node is recorded busy any more.
The ``oracle`` setup is ksched with the load-aware configuration whose pods carry what
they will really use (:data:`~.scenarios.EXPECTED_CPU`): what ksched's figures are measured
against, beside kube-scheduler's (:mod:`.gap`). A scenario on nodes of other shapes than the
local cluster's four (:func:`~.scenarios.shapes_of`, or every scenario's with ``shapes``) gets
a control plane of its own.
With ``pools`` each scenario instead runs every scheduler at once, each on an equal pool of
the nodes (:mod:`.pooled`); only there can the rebalancing setups run (kube-scheduler with
the descheduler, ksched with its rebalancer), which load-shift, whose pods ReplicaSets own
(kube-controller-manager runs then), judges by their evictions as well (:mod:`.rebalance`),
and the setups that need their pool's nodes or namespace (:mod:`.setups`: ksched with steering,
with steering and the rebalancer moving kube-scheduler's pods, and a shadow ksched beside
kube-scheduler, whose estimate is checked against the round, :mod:`.shadow_estimate`).
Never asserts a timing; a pod lost or a node over-committed is a violation, and exits 1.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ksched.bench.charts import pyplot
from ksched.bench.invariants import lost, overcommitted
from ksched.bench.pods import CREATE_WORKERS, KSCHED_COMMAND, clear_pods, cpu_seconds, start_ksched_run
from ksched.bench.quality.figures import (
    DEFAULT_THRESHOLD,
    QualityFigures,
    QualityResults,
    judge,
    node_cores,
    replicas_together,
    unjudged,
)
from ksched.bench.quality.moves import audit_policy
from ksched.bench.quality.observe import (
    VoidRoundError,
    clear_controllers,
    cool_down,
    create_namespace,
    create_scenario,
    forget_deleted_pods,
    idle_utilisation,
    ksched_config,
    metric_lag_s,
    observation_end,
    reported,
    settle,
    utilisation,
)
from ksched.bench.quality.pooled import (
    KSCHED_REBALANCE,
    KUBE_SCHEDULER_DESCHEDULER,
    KUBE_SCHEDULER_SETUPS,
    WITHOUT_KSCHED,
    Round,
    exited,
    log_beside,
    namespace_of,
    placing,
    pooled_round,
)
from ksched.bench.quality.scenarios import (
    CONTROLLED,
    DEFAULT_SCENARIOS,
    DEFAULT_SCHEDULER,
    KUBE_SCHEDULER,
    MIXED,
    ORACLE,
    ORACLE_STEADY,
    SCENARIOS,
    SHAPES,
    scenario,
    shapes_of,
    time_bursts_from,
)
from ksched.bench.quality.setups import KSCHED_STEER, KSCHED_STEER_REBALANCE, ORACLE_STEER, SHADOW
from ksched.bench.quality.teller import ORACLE_MEASURED
from ksched.cluster import local
from ksched.cluster.load import LoadSimulation
from ksched.cluster.processes import terminate
from ksched.config import load_config
from ksched.config.examples import example_path
from ksched.config.names import is_dns_label
from ksched.errors import KschedError
from ksched.loop.client import Kube, load_configuration
from ksched.objects import Obj

KSCHED = "ksched"
KSCHED_NO_METRICS = "ksched-no-metrics"
SCHEDULERS = (KUBE_SCHEDULER, KSCHED, KSCHED_NO_METRICS)
# The setups a rebalancing round compares (ksched placing only, beside the two that move pods).
REBALANCE_SETUPS = (KUBE_SCHEDULER_DESCHEDULER, KSCHED, KSCHED_REBALANCE)
# Setups that need a pool of their own (its nodes or its namespace); they run on pools only.
POOLED_SETUPS = (
    KUBE_SCHEDULER_DESCHEDULER,
    KSCHED_REBALANCE,
    KSCHED_STEER,
    KSCHED_STEER_REBALANCE,
    ORACLE_STEER,
    ORACLE_MEASURED,
    SHADOW,
)
SETUPS = (*SCHEDULERS, ORACLE, ORACLE_STEADY, *POOLED_SETUPS)
# The shipped load-aware configuration, from the installed package.
EXAMPLE_CONFIG = example_path("load-aware.yaml")
# The same with the rebalancer on.
EXAMPLE_REBALANCE_CONFIG = example_path("rebalance.yaml")
PODS_PER_NODE = 6
# metrics-server's resolution in a quality run: no scheduler there reads it, and a minute keeps
# its scrapes of KWOK (which serves every node's metrics from one process) rare.
QUALITY_METRIC_RESOLUTION_S = 60.0


@dataclass
class QualityOptions:
    nodes: int = 1000
    # Default: six a node, 3 cores requested on the average 6-core node, so that what the
    # pods really use (about their requests on average, heavy-tailed) makes some nodes hot.
    pods: int | None = None
    scenarios: tuple[str, ...] = DEFAULT_SCENARIOS
    schedulers: tuple[str, ...] = SCHEDULERS
    seed: int = 1
    rate: float = 50.0
    observe_s: float = 180.0
    scrape_interval_s: float = 15.0
    threshold: float = DEFAULT_THRESHOLD
    ksched_config: Path | None = None
    # ksched-rebalance's configuration; the descheduler gets its lines and interval.
    rebalance_config: Path | None = None
    # More ksched runs, each under its label with its own configuration (say today's beside a
    # candidate's); they run after the named schedulers.
    configs: dict[str, Path] = field(default_factory=dict)
    # Other ksched builds, each under its label as a command (``--ksched LABEL=COMMAND``, say an
    # older build's venv/bin/ksched), with ksched's configuration; they run after the configs.
    builds: dict[str, list[str]] = field(default_factory=dict)
    # Every scheduler of a scenario at once, each on an equal pool of the nodes (pooled).
    pools: bool = False
    # Every scenario on these node shapes (a key of SHAPES), say herd on nodes of 2-16 cores;
    # None: each on its own (:func:`~.scenarios.shapes_of`).
    shapes: str | None = None
    out: Path | None = None

    @property
    def pod_count(self) -> int:
        return self.pods if self.pods is not None else PODS_PER_NODE * self.nodes

    @property
    def labels(self) -> tuple[str, ...]:
        """Every setup in run order: the named schedulers, the configurations, the builds."""
        return (*self.schedulers, *self.configs, *self.builds)

    def shapes_of(self, name: str) -> str:
        """The node shapes scenario ``name`` runs on in this run."""
        return self.shapes or shapes_of(name)


def _one(
    kube: Kube,
    state: local.ClusterState,
    opts: QualityOptions,
    name: str,
    label: str,
    workdir: Path,
    results: QualityResults,
    log: Callable[[str], None],
    idle: float,
) -> None:
    prometheus = f"http://127.0.0.1:{state.ports['prometheus']}"
    namespace = namespace_of(name, label)
    asks = DEFAULT_SCHEDULER if label == KUBE_SCHEDULER else KSCHED
    knows = label in (ORACLE, ORACLE_STEADY)
    s = scenario(
        name, opts.pod_count, namespace, asks, opts.seed, opts.rate, oracle=knows, foresees=label == ORACLE
    )
    proc = None
    if label != KUBE_SCHEDULER:
        config: Obj = ksched_config(_config_of(opts, label), prometheus)
        path = workdir / f"{name}-{label}.yaml"
        path.write_text(yaml.safe_dump(config))
        proc, _ = start_ksched_run(
            state.kubeconfig, log_beside(path), path, opts.builds.get(label, KSCHED_COMMAND)
        )
    try:
        create_namespace(kube, namespace)
        start = time.time()
        time_bursts_from(s.pods, start)
        lag = metric_lag_s(opts.scrape_interval_s)
        arrivals = create_scenario(kube, s, lag)
        pods, settled = settle(kube, namespace, lambda: exited([proc]) if proc is not None else None)
        figures = QualityFigures(label, name, len(s.pods))
        bound = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}
        figures.pending = len(pods) - len(bound)
        placing(figures, arrivals, pods)
        end = max(observation_end(start, [arrivals], opts.observe_s, lag), settled)
        if end > time.time():
            time.sleep(end - time.time())
        figures.cpu_s = cpu_seconds(proc) if proc is not None else None
        # The last recording-rule evaluation covering ``end`` lands up to one interval later.
        time.sleep(opts.scrape_interval_s)
        series = utilisation(prometheus, start, end, opts.scrape_interval_s)
        nodes = kube.request("GET", "/api/v1/nodes").json()["items"]
        judge(
            figures, series, [n["metadata"]["name"] for n in nodes], bound, opts.threshold, node_cores(nodes)
        )
        figures.replicas_together = replicas_together(pods)
        results.violations += unjudged(figures)
        everywhere = kube.request("GET", "/api/v1/pods").json()["items"]
        results.violations += [
            f"{name}/{label}: over-committed {o}" for o in overcommitted(nodes, everywhere)
        ]
        results.violations += [f"{name}/{label}: lost {p}" for p in lost(arrivals.created, pods)]
        results.violations += [
            f"{name}/{label}: {p['metadata']['name']} neither bound nor reported unschedulable"
            for p in pods
            if not p["spec"].get("nodeName") and not reported(p)
        ]
        results.figures.append(figures)
        log(
            f"{name} / {label}: {figures.hotspot_node_minutes} hot node-minutes, p95 {figures.p95_utilisation}, "
            f"cv {figures.cv}, {figures.pods_on_hot_nodes} pods on hot nodes, {figures.pending} pending, "
            f"{figures.pods_per_s} pods/s, {figures.replicas_together:.0%} of replicas beside another"
        )
    finally:
        if proc is not None:
            terminate(proc, 30)
        if s.controlled:
            clear_controllers(kube, namespace)
        clear_pods(kube, namespace)
    # Until no node holds this run's usage any more: the next scheduler starts cool.
    forget_deleted_pods(prometheus, opts.nodes, opts.scrape_interval_s)
    log(f"cooled down in {cool_down(prometheus, idle, opts.scrape_interval_s):.0f} s")


def _config_of(opts: QualityOptions, label: str) -> Path | None:
    """The configuration file a ksched label runs (None: no metric)."""
    if (
        label in (KSCHED, ORACLE, ORACLE_STEADY, ORACLE_MEASURED, KSCHED_STEER, ORACLE_STEER, SHADOW)
        or label in opts.builds
    ):
        return opts.ksched_config or EXAMPLE_CONFIG
    if label in (KSCHED_REBALANCE, KSCHED_STEER_REBALANCE):
        return opts.rebalance_config or EXAMPLE_REBALANCE_CONFIG
    return opts.configs.get(label)


def rebalance_hot_samples(rebalance_config: Path | None) -> int:
    """The hotSamples a run is judged with: its rebalancer configuration's (the default where
    it names none)."""
    return load_config(rebalance_config).rebalance.hot_samples


def _pooled(
    kube: Kube,
    state: local.ClusterState,
    opts: QualityOptions,
    name: str,
    workdir: Path,
    results: QualityResults,
    log: Callable[[str], None],
    idle: float,
) -> None:
    labels = opts.labels
    # Pools are dealt in whole rounds of the cluster's node shapes.
    grain = len(SHAPES[opts.shapes_of(name)])
    size = opts.nodes // len(labels) // grain * grain
    rebalance_config = _config_of(opts, KSCHED_REBALANCE)
    round_ = Round(
        entries=tuple((name, label) for label in labels),
        pool_size=size,
        pods=opts.pods if opts.pods is not None else PODS_PER_NODE * size,
        seed=opts.seed,
        # Each pool's pods arrive over as long as the whole cluster's would one scheduler at a time.
        rate=opts.rate * size / opts.nodes,
        observe_s=opts.observe_s,
        scrape_interval_s=opts.scrape_interval_s,
        threshold=opts.threshold,
        configs={label: _config_of(opts, label) for label in labels if label not in WITHOUT_KSCHED},
        rebalance_config=rebalance_config,
        commands=dict(opts.builds),
        hot_samples=rebalance_hot_samples(rebalance_config),
    )
    prometheus = f"http://127.0.0.1:{state.ports['prometheus']}"
    audit = local.audit_log_path(state) if name in CONTROLLED else None
    try:
        pooled_round(kube, state.kubeconfig, prometheus, round_, workdir, results, log, audit)
    except VoidRoundError as err:
        # The other scenarios still run, and what was judged is still written.
        results.violations.append(f"{name}: {err}")
        log(f"{name}: not judged: {err}")
    forget_deleted_pods(prometheus, opts.nodes, opts.scrape_interval_s)
    log(f"cooled down in {cool_down(prometheus, idle, opts.scrape_interval_s):.0f} s")


def _on_one_cluster(
    opts: QualityOptions,
    shapes: str,
    names: list[str],
    workdir: Path,
    results: QualityResults,
    log: Callable[[str], None],
) -> None:
    """Bring up a control plane of ``opts.nodes`` nodes of ``shapes`` and run the scenarios
    ``names`` on it, then stop it."""
    controlled = bool(set(names) & set(CONTROLLED))
    log(
        f"local control plane: {opts.nodes} KWOK nodes ({shapes} shapes), load simulation "
        f"(scrapes every {opts.scrape_interval_s:g} s)"
    )
    state = local.up(
        nodes=opts.nodes,
        zones=3,
        # Every setup of a mixed scenario gives kube-scheduler some of its pods.
        with_scheduler=bool(set(KUBE_SCHEDULER_SETUPS) & set(opts.schedulers) or set(names) & set(MIXED)),
        # The ReplicaSets and PodDisruptionBudgets of the owned scenarios, and the evictions counted.
        with_controllers=controlled,
        audit_policy=audit_policy() if controlled else None,
        load_simulation=LoadSimulation(opts.scrape_interval_s, QUALITY_METRIC_RESOLUTION_S),
        shapes=SHAPES[shapes],
    )
    try:
        kube = Kube(load_configuration(state.kubeconfig, CREATE_WORKERS + 4))
        prometheus = f"http://127.0.0.1:{state.ports['prometheus']}"
        idle = idle_utilisation(prometheus, opts.scrape_interval_s, metric_lag_s(opts.scrape_interval_s))
        log(f"idle cluster: hottest node {idle:.3f}")
        for name in names:
            if opts.pools:
                _pooled(kube, state, opts, name, workdir, results, log, idle)
                continue
            for label in opts.labels:
                try:
                    _one(kube, state, opts, name, label, workdir, results, log, idle)
                except VoidRoundError as err:
                    results.violations.append(f"{name}/{label}: {err}")
                    log(f"{name} / {label}: not judged: {err}")
    finally:
        log(local.down())


def run_quality(opts: QualityOptions, log: Callable[[str], None]) -> QualityResults:
    unknown = (set(opts.scenarios) - set(SCENARIOS)) | (set(opts.schedulers) - set(SETUPS))
    unknown |= (set(opts.configs) | set(opts.builds)) & set(SETUPS)
    both = set(opts.configs) & set(opts.builds)
    if both:
        raise KschedError(f"{', '.join(sorted(both))}: a label is a configuration or a build, not both")
    if unknown:
        raise KschedError(
            f"unknown: {', '.join(sorted(unknown))} (scenarios {SCENARIOS}, schedulers {SETUPS})"
        )
    # Said now, not when the first scenario's namespace is refused minutes into the run.
    for label in opts.labels:
        bad = [n for name in opts.scenarios if not is_dns_label(n := namespace_of(name, label))]
        if bad:
            raise KschedError(
                f"the label {label!r} names the namespace {bad[0]!r}, which Kubernetes refuses "
                "(lowercase letters, digits and '-', at most 63 characters): choose another label"
            )
    if opts.shapes is not None and opts.shapes not in SHAPES:
        raise KschedError(f"unknown node shapes {opts.shapes!r} (one of {', '.join(SHAPES)})")
    moving = set(opts.schedulers) & set(POOLED_SETUPS)
    if moving and not opts.pools:
        raise KschedError(f"{', '.join(sorted(moving))} run on pools only: add --pools")
    # Before the run: a missing matplotlib is said now, and only the chart is skipped.
    plot = pyplot() if opts.out is not None else None
    results = QualityResults({k: str(v) for k, v in vars(opts).items()})
    workdir = _logs(opts.out)
    log(f"each scheduler's log and configuration: {workdir}")
    # One control plane for the scenarios of each node shapes, in the order first named.
    by_shapes: dict[str, list[str]] = {}
    for name in opts.scenarios:
        by_shapes.setdefault(opts.shapes_of(name), []).append(name)
    try:
        for shapes, names in by_shapes.items():
            _on_one_cluster(opts, shapes, names, workdir, results, log)
    except BaseException as err:
        # What the scenarios before it judged is written all the same: a run of an hour that
        # a dropped connection in its last scenario stopped kept none of it.
        results.violations.append(f"the run stopped early: {type(err).__name__}: {err}")
        raise
    finally:
        if opts.out is not None:
            from ksched.bench.quality.report import write

            write(results, opts.out, plot)
    if opts.out is None:
        shutil.rmtree(workdir, ignore_errors=True)  # kept where the run failed: the logs say why
    return results


def _logs(out: Path | None) -> Path:
    """Where the schedulers' logs and configurations go: ``out``'s ``logs`` (as the side by
    side's), else a temporary directory that a run which ends well removes."""
    if out is None:
        return Path(tempfile.mkdtemp(prefix="ksched-quality-"))
    (out / "logs").mkdir(parents=True, exist_ok=True)
    return out / "logs"
