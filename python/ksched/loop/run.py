"""``ksched run``: wire informers, state, queue, binder, leader election and the HTTP endpoint.

Start-up order: configuration (a bad file stops here, with the key path),
API connection, informers (nodes, then pods), HTTP endpoint (HTTPS with delegated
authentication and authorization unless ``--insecure-serving``: :mod:`ksched.loop.serving`), leader
election; scheduling starts once the informers have synced and this replica
leads, or, with ``sharding.enabled``, once its own Lease makes it active: then every live
replica schedules, each binding onto the nodes it owns (:mod:`ksched.loop.shards`). In shadow mode (``shadow.enabled``) there is no election, binder use,
hand-off or webhook: the shadow loop (:mod:`ksched.loop.scheduling.shadow`) compares
instead of scheduling. With ``rebalance.enabled``, the rebalancer (:mod:`ksched.loop.rebalancing.rebalancer`)
runs beside either loop on its own thread and engine; with ``steering.enabled`` (not in shadow mode),
the steering controller (:mod:`ksched.loop.steering.controller`) marks hot nodes while this
replica leads. Placement outcomes (:mod:`ksched.loop.scheduling.outcomes`) judge whether
each placement's node went hot, in either mode. SIGTERM or SIGINT: stop taking work, finish the binds already handed
to the binder, remove the steering marks, release the lease, stop the watches. Exit status 0 after a
clean shutdown, 2 on bad configuration.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ksched.config import Config
from ksched.engine import Engine
from ksched.engine.gangs import POD_GROUP_API
from ksched.engine.spread_selectors import SELECTOR_OWNERS
from ksched.engine.storage import STORAGE_KINDS
from ksched.loop.client import Kube, load_configuration
from ksched.loop.leader import Leadership
from ksched.loop.metrics.metric_sources import MetricStore
from ksched.loop.metrics.metrics_server import MetricsServerSource
from ksched.loop.metrics.prometheus import PrometheusSource
from ksched.loop.mirror.informer import Informer
from ksched.loop.mirror.slim import (
    decode_pod_event,
    decode_pod_frame,
    decode_pod_list,
    decode_pod_list_proto,
    slim_budget,
    slim_claim,
    slim_csi_node,
    slim_namespace,
    slim_node,
    slim_pod,
    slim_pod_group,
    slim_selector_owner,
    slim_storage_class,
    slim_volume,
)
from ksched.loop.mirror.state import ClusterState
from ksched.loop.rebalancing.rebalancer import Rebalancer
from ksched.loop.rebalancing.reservations import Reservations
from ksched.loop.scheduling.binder import Binder, report_workers
from ksched.loop.scheduling.cycle import Scheduler
from ksched.loop.scheduling.handoff import Handoff
from ksched.loop.scheduling.outcomes import OutcomeWatch
from ksched.loop.scheduling.queue import SchedulingQueue
from ksched.loop.scheduling.shadow import Shadow
from ksched.loop.scheduling.webhook import Webhook
from ksched.loop.server import Check, Document, Gate, HealthServer, TlsContext
from ksched.loop.serving import SECURE, ClientCA, DelegatedAuth, ServingOptions, ServingTls
from ksched.loop.shards import Shards
from ksched.loop.steering.controller import Steering
from ksched.loop.telemetry import Telemetry
from ksched.objects import Obj

log = logging.getLogger(__name__)

# Connections beyond the bind and report workers: one watch per informer (thirteen),
# their relists, the lease, hand-off.
EXTRA_CONNECTIONS = 24
# What the informers keep of each object the volume plugins read.
STORAGE_SLIM = {
    "PersistentVolume": slim_volume,
    "PersistentVolumeClaim": slim_claim,
    "StorageClass": slim_storage_class,
    "CSINode": slim_csi_node,
}
SYNC_LOG_EVERY_S = 10.0


def default_identity() -> str:
    """Upstream's lease identity: hostname plus a unique suffix."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass
class Running:
    """A started ksched, for ``ksched run`` and for tests that run it in-process."""

    config: Config
    scheduler: Scheduler
    queue: SchedulingQueue
    state: ClusterState
    binder: Binder
    leadership: Leadership
    # By the name each logs and reports its sync under ("nodes", "pods", ...).
    informers: dict[str, Informer]
    server: HealthServer
    stop: threading.Event = field(default_factory=threading.Event)
    webhook: Webhook | None = None
    shadow: Shadow | None = None
    rebalancer: Rebalancer | None = None
    steering: Steering | None = None
    outcomes: OutcomeWatch | None = None
    # The client CA the endpoint accepts client certificates by (None: insecure serving).
    client_ca: ClientCA | None = None
    # Set once the first node table is built after the informers synced: ready to schedule.
    table_built: threading.Event = field(default_factory=threading.Event)
    # Active-active replicas (``sharding.enabled``; None: only the leader schedules).
    shards: Shards | None = None

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers.values())

    def checks(self) -> list[Check]:
        out: list[Check] = []
        unsynced = [name for name, i in self.informers.items() if not i.synced.is_set()]
        out.append(
            ("informers", not unsynced, f"waiting for {', '.join(unsynced)}" if unsynced else "synced")
        )
        if not unsynced:
            # Ready means ready to schedule: at 5,000 nodes the table takes about half a second.
            built = self.table_built.is_set()
            out.append(("node table", built, "built" if built else "building"))
        if self.scheduler.metrics.live:
            out.append(("metrics", True, self.scheduler.metrics.status()))
        if self.leadership.enabled:
            if self.leadership.is_leader():
                out.append(("leader", True, "this replica leads"))
            else:
                holder = self.leadership.holder()
                out.append(
                    ("leader", holder is not None, f"following {holder}" if holder else "no leader yet")
                )
        if self.shards is not None:
            members = self.shards.members()
            active = self.shards.active()
            why = "binds onto its nodes" if active else "not binding yet"
            out.append(("shards", active, f"{len(members)} live replicas; this one {why}"))
        if self.shadow is not None:
            counts = self.shadow.ledger.counts
            out.append(("shadow", True, f"binding nothing; {sum(counts.values())} pods compared"))
        return out

    def status(self, pod: str | None = None) -> dict[str, object]:
        """``/status``: what ``ksched status`` shows; with ``pod`` (``namespace/name``), how
        the load estimate counts that pod (``ksched status --pod``)."""
        leadership = self.leadership
        shadow = None
        if self.shadow is not None:
            report = self.shadow.ledger.report(top=0)
            shadow = {k: report[k] for k in ("total", "counts", "agreement")}
        return {
            "identity": leadership.identity,
            "mode": "shadow" if self.shadow is not None else "scheduling",
            "leaderElection": leadership.enabled,
            "leading": self.shadow is None and leadership.is_leader(),
            "leader": leadership.holder() if leadership.enabled else None,
            "synced": self.synced(),
            "queues": self.queue.counts(),
            "bound": self.scheduler.bound,
            "metrics": {
                "live": [m.name for m in self.scheduler.metrics.live],
                "degraded": self.scheduler.metrics.degraded(),
                "learned": self.scheduler.metrics.learned(),
            },
            "failures": list(self.scheduler.failures),
            # Objects the cluster state cannot read, left out now (nodes: of the node table).
            "leftOut": self.state.left_out_report(),
            "shadow": shadow,
            "outcomes": self.outcomes.status() if self.outcomes is not None else {"enabled": False},
            "rebalance": self.rebalancer.status() if self.rebalancer is not None else {"enabled": False},
            "steering": self.steering.status() if self.steering is not None else {"enabled": False},
            "sharding": self._sharding(),
        } | ({} if pod is None else {"pod": self._pod_estimate(pod)})

    def _sharding(self) -> dict[str, object]:
        if self.shards is None:
            return {"enabled": False}
        return self.shards.status() | {"ownedNodes": self.owned_nodes()}

    def owned_nodes(self) -> int:
        """How many nodes this replica owns now (sharding: of the nodes the informer holds)."""
        if self.shards is None:
            return len(self.informers["nodes"].store)
        return len(self.shards.own_nodes(list(self.informers["nodes"].store)))

    def _pod_estimate(self, key: str) -> dict[str, Any]:
        queued = self.queue.get(key)
        return self.scheduler.load.estimate_of(key, None if queued is None else queued.pod)

    def serve(self) -> int:
        """Schedule until stopped; then shut down cleanly. Returns the exit status."""
        last_log = 0.0
        while not self.synced() and not self.stop.is_set():
            if time.monotonic() - last_log > SYNC_LOG_EVERY_S:
                log.info("waiting for informers to sync")
                last_log = time.monotonic()
            self.stop.wait(0.1)
        log.info(
            "informers synced%s: %d nodes, %d pods (pods listed in %s)",
            since_start(),
            len(self.informers["nodes"].store),
            len(self.informers["pods"].store),
            self.informers["pods"].last_list or "-",
        )
        # The node table is built now rather than by the first cycle, so a backlog waiting
        # at start (5,000 nodes: about half a second) starts binding without that delay.
        building = time.monotonic()
        self.scheduler.state.sync()
        self.scheduler.state.snapshot()
        self.table_built.set()
        log.info("node table built in %.2f s; ready%s", time.monotonic() - building, since_start())
        if self.shards is not None:
            # Only now: a replica counted live owns nodes and pods, and would leave them waiting
            # while it lists the cluster (150,000 pods: 40 s).
            self.shards.start()
        # The objects alive now (the informers' stores and the node table, mostly) stay:
        # the collector stops walking them in every full collection.
        gc.freeze()
        if self.rebalancer is not None:
            self.rebalancer.start()
        if self.steering is not None:
            self.steering.start()
        if self.outcomes is not None:
            self.outcomes.start()
        if self.shadow is not None:
            self.shadow.run(self.stop)
        else:
            self.scheduler.run(self.stop)
        self.shutdown()
        return 0

    def shutdown(self) -> None:
        """Stop every part, each even where one before it failed: a watch that will not close
        must not leave the HTTP server or the webhook serving."""
        steps: list[tuple[str, Callable[[], None]]] = []
        if self.rebalancer is not None:
            steps.append(("rebalancer", self.rebalancer.stop))
        if self.steering is not None:
            # Before the binder (its events) and the lease (only the leader removes marks).
            steps.append(("steering", self.steering.stop))
        if self.outcomes is not None:
            steps.append(("outcomes", self.outcomes.stop))
        steps += [("queue", self.queue.close), ("binder", self.binder.shutdown)]
        if self.scheduler.handoff is not None:
            steps.append(("hand-off", self.scheduler.handoff.shutdown))
        if self.shards is not None:
            # After the binder: the nodes pass to the others once this replica's binds are done.
            steps.append(("shard lease", self.shards.stop))
        steps += [("metrics", self.scheduler.metrics.stop), ("lease", self.leadership.release)]
        steps += [(f"informer {name}", informer.stop) for name, informer in self.informers.items()]
        steps.append(("server", self.server.stop))
        if self.client_ca is not None:
            steps.append(("client CA", self.client_ca.stop))
        if self.webhook is not None:
            steps.append(("webhook", self.webhook.stop))
        for name, stop in steps:
            try:
                stop()
            except Exception:
                log.exception("stopping the %s failed; stopping the rest", name)
        log.info("stopped; %d pods bound", self.scheduler.bound)


def start(
    config: Config,
    kubeconfig: str | None,
    address: str,
    identity: str | None = None,
    seed: int = 0,
    serving: ServingOptions = SECURE,
) -> Running:
    """Build every part, then start them in the start-up order (informers, metrics, HTTP
    endpoint, webhook, leader election); scheduling waits for :meth:`Running.serve`."""
    kube = _connect(config, kubeconfig)
    identity = identity or default_identity()
    config = _for_mode(config)
    shadowing = config.shadow.enabled
    telemetry = Telemetry()
    state = ClusterState(config.metrics, telemetry=telemetry, own_marks=config.steering.own_marks)
    queue = SchedulingQueue()
    stop = threading.Event()
    leadership = Leadership(config.leader_election, identity, on_lost=telemetry.lost_leases.inc)
    shards = (
        Shards(config.sharding, config.leader_election, identity, kube, on_change=queue.reown)
        if config.sharding.enabled and not shadowing
        else None
    )
    # Sharded, every live replica schedules and binds onto the nodes it owns; else only the leader.
    may_bind = shards.active if shards is not None else leadership.is_leader
    binder = Binder(
        kube,
        config.batch.bind_workers,
        identity,
        telemetry,
        may_bind,
        owns=shards.owns_node if shards is not None else None,
    )
    # Filled once the informers exist; the metric store asks for the nodes only once started.
    informers: dict[str, Informer] = {}

    def nodes() -> list[Obj]:
        return list(informers["nodes"].store.values())

    metrics = _metric_store(config, kube, telemetry, nodes)
    handoff = Handoff(kube, config.handoff, telemetry) if config.handoff.enabled and not shadowing else None
    # A moved pod's replacement keeps its moved load counted on its node while it grows back.
    reservations = (
        Reservations(settle_s=config.rebalance.replacement_settle_s)
        if config.rebalance.enabled and not shadowing
        else None
    )
    scheduler = Scheduler(
        config,
        state,
        queue,
        binder,
        telemetry,
        may_bind,
        metrics,
        handoff,
        seed=seed,
        held=reservations,
        shards=shards,
    )
    rebalancer = _rebalancer(config, state, metrics, kube, reservations, telemetry, leadership, binder, seed)
    outcomes = OutcomeWatch(config, state, metrics, telemetry)
    shadow = Shadow(config, state, metrics, telemetry, seed, outcomes) if shadowing else None
    if not shadowing:
        # Live mode judges every placement the state sees; a shadow hands over its comparisons.
        state.placements = outcomes
    steering = _steering(config, state, metrics, kube, telemetry, leadership, binder, nodes)
    informers.update((i.name, i) for i in _informers(kube, state, scheduler, shadow))

    def checks() -> list[Check]:
        return running.checks()

    def status(query: dict[str, str]) -> object:
        return running.status(query.get("pod"))

    def shadow_report(query: dict[str, str]) -> object:
        return shadow.ledger.report() if shadow is not None else None

    tls, gate, client_ca = _serving(serving, kube)
    documents: dict[str, Document] = {"/status": status, "/shadow": shadow_report}
    server = HealthServer(address, telemetry.registry, checks, documents, tls, gate)
    webhook = None
    if config.webhook.enabled and not shadowing:

        def can_route(pod: Obj) -> bool:
            if handoff is not None and handoff.skip_owner(pod):
                return False  # the replacement of a pod ksched handed off
            return running.synced() and leadership.leader_alive()

        scheduler_name = config.webhook.scheduler_name or config.profiles[0].scheduler_name
        webhook = Webhook(config.webhook, scheduler_name, can_route, kube)
    running = Running(
        config,
        scheduler,
        queue,
        state,
        binder,
        leadership,
        informers,
        server,
        stop,
        webhook,
        shadow,
        rebalancer,
        steering,
        outcomes,
        client_ca,
        shards=shards,
    )
    _start_parts(running, metrics, telemetry)
    return running


def _serving(serving: ServingOptions, kube: Kube) -> tuple[TlsContext | None, Gate | None, ClientCA | None]:
    """The endpoint's TLS context, gate and client CA: none of them when serving insecurely."""
    if serving.insecure:
        log.warning(
            "--insecure-serving: /metrics, /status and /shadow are served over plain HTTP to anyone "
            "who can reach the port; for local development and tests only"
        )
        return None, None, None
    client_ca = ClientCA(kube)
    return ServingTls(serving.cert_file, serving.key_file, client_ca), DelegatedAuth(kube).gate, client_ca


def _connect(config: Config, kubeconfig: str | None) -> Kube:
    """The API client, its pool sized for every worker that writes through it."""
    workers = config.batch.bind_workers
    # Pods with volumes to bind and reports use the client's pool; binds of other pods and
    # their Scheduled events have connections of their own (the binder's writers).
    configuration = load_configuration(kubeconfig, workers + report_workers(workers) + EXTRA_CONNECTIONS)
    return Kube(configuration, config.client_connection.qps, config.client_connection.burst)


def _for_mode(config: Config) -> Config:
    """The configuration as run: in shadow mode without leader election."""
    if not config.shadow.enabled:
        return config
    # A shadow must never take the lease from the ksched it runs beside.
    config = dataclasses.replace(
        config, leader_election=dataclasses.replace(config.leader_election, leader_elect=False)
    )
    if config.webhook.enabled or config.handoff.enabled:
        log.info("shadow mode: webhook and hand-off stay off")
    return config


def _metric_store(
    config: Config, kube: Kube, telemetry: Telemetry, nodes: Callable[[], list[Obj]]
) -> MetricStore:
    """The live metrics, from Prometheus and metrics-server where the configuration reads them."""
    prometheus = (
        PrometheusSource(config.prometheus.url, config.prometheus.timeout_s)
        if config.prometheus.url
        else None
    )
    metrics_server = (
        MetricsServerSource(kube) if any(m.source == "metrics-server" for m in config.metrics) else None
    )
    return MetricStore(config.metrics, prometheus, telemetry, nodes, metrics_server)


def _rebalancer(
    config: Config,
    state: ClusterState,
    metrics: MetricStore,
    kube: Kube,
    reservations: Reservations | None,
    telemetry: Telemetry,
    leadership: Leadership,
    binder: Binder,
    seed: int,
) -> Rebalancer | None:
    """The rebalancer where the configuration enables it (shadow mode: moves logged, none made)."""
    if not config.rebalance.enabled:
        return None
    # An engine of its own: the scheduler's caches are not shared across threads.
    return Rebalancer(
        config,
        state,
        metrics,
        Engine(config, config.rebalance.profile, seed=seed),
        kube,
        reservations if reservations is not None else Reservations(),
        telemetry,
        leadership.is_leader,
        config.shadow.enabled,
        binder.report,
    )


def _steering(
    config: Config,
    state: ClusterState,
    metrics: MetricStore,
    kube: Kube,
    telemetry: Telemetry,
    leadership: Leadership,
    binder: Binder,
    nodes: Callable[[], list[Obj]],
) -> Steering | None:
    """The steering controller where the configuration enables it (never in shadow mode: a
    shadow writes nothing)."""
    if not config.steering.enabled:
        return None
    if config.shadow.enabled:
        log.info("shadow mode: steering marks no node")
        return None
    return Steering(config, state, metrics, kube, telemetry, leadership.is_leader, binder.report, nodes)


def _informers(
    kube: Kube, state: ClusterState, scheduler: Scheduler, shadow: Shadow | None
) -> list[Informer]:
    """One informer per watched kind, nodes first, then pods; in shadow mode nodes and pods
    go to the shadow loop instead of the scheduler. Nodes and pods, the large lists, are
    streamed, as kube-scheduler lists them."""
    return [
        Informer(
            kube,
            "/api/v1/nodes",
            slim_node,
            state.on_node if shadow else scheduler.on_node,
            name="nodes",
            stream_list=True,
        ),
        Informer(
            kube,
            "/api/v1/pods",
            slim_pod,
            shadow.on_pod if shadow else scheduler.on_pod,
            name="pods",
            decode=decode_pod_event,
            decode_frame=decode_pod_frame,
            decode_list=decode_pod_list,
            decode_list_frame=decode_pod_list_proto,
            stream_list=True,
        ),
        Informer(kube, "/api/v1/namespaces", slim_namespace, state.on_namespace, name="namespaces"),
        Informer(
            kube,
            f"/apis/{POD_GROUP_API}/podgroups",
            slim_pod_group,
            scheduler.on_pod_group,
            name="podgroups",
            optional=True,
        ),
        Informer(kube, "/apis/policy/v1/poddisruptionbudgets", slim_budget, state.on_budget, name="pdbs"),
        *(
            Informer(kube, path, slim_selector_owner, state.selector_owner_handler(api, kind), name=name)
            for path, api, kind, name in SELECTOR_OWNERS
        ),
        *(
            Informer(
                kube, path, STORAGE_SLIM[kind], scheduler.storage_handler(kind), name=path.rsplit("/", 1)[1]
            )
            for path, _, kind in STORAGE_KINDS
        ),
    ]


def since_start() -> str:
    """ " N s after the process started" (Linux: from /proc), for the start-up's log lines;
    empty where that cannot be read."""
    try:
        with open("/proc/self/stat", "rb") as stat, open("/proc/uptime", "rb") as uptime:
            # The fields after the command's closing parenthesis; starttime is the 22nd field.
            started = int(stat.read().rsplit(b")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
            up = float(uptime.read().split()[0])
    except (OSError, ValueError, IndexError):
        return ""
    return f" {up - started:.1f} s after the process started"


def _start_parts(running: Running, metrics: MetricStore, telemetry: Telemetry) -> None:
    """Start the watches, the metric sources, the HTTP endpoint, the webhook and the election."""
    shadowing = running.config.shadow.enabled
    leadership = running.leadership
    telemetry.watch_queue(running.queue.counts)
    telemetry.leader.set_function(lambda: float(not shadowing and leadership.is_leader()))
    for informer in running.informers.values():
        informer.start()
    metrics.start()
    if running.client_ca is not None:
        running.client_ca.start()
    running.server.start()
    if running.webhook is not None:
        running.webhook.start()
    leadership.start()
    shards = running.shards
    if shards is not None:
        telemetry.shard_members.set_function(lambda: float(len(shards.members())))
        telemetry.shard_active.set_function(lambda: float(shards.active()))
        telemetry.shard_nodes.set_function(lambda: float(running.owned_nodes()))


def run(
    config: Config,
    kubeconfig: str | None,
    address: str,
    identity: str | None = None,
    serving: ServingOptions = SECURE,
) -> int:
    running = start(config, kubeconfig, address, identity, serving=serving)
    scheme = "http" if serving.insecure else "https"
    log.info("ksched %s serving on %s://%s", running.leadership.identity, scheme, address)

    def on_signal(signum: int, frame: object) -> None:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        running.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return running.serve()
