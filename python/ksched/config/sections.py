"""The configuration's runtime sections: ``batch``, ``leaderElection``, ``sharding``,
``clientConnection``, ``prometheus``, ``webhook``, ``handoff``, ``shadow`` and ``outcomes``.

Each is a frozen dataclass whose field defaults are the section's defaults (a
missing key or section takes them) and a parser that validates the section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ksched.config.names import is_dns_subdomain
from ksched.config.values import (
    as_bool,
    as_float,
    as_host_port,
    as_int,
    as_list,
    as_str,
    as_url,
    check_keys,
    duration_at,
)
from ksched.errors import ConfigError

# The client's leaderelection requires renewDeadline > 1.2 x retryPeriod (its jitter factor).
LEADER_JITTER = 1.2
# The shortest interval between two readings of outcomes: each builds every node's values.
MIN_OUTCOMES_INTERVAL_S = 0.5


@dataclass(frozen=True)
class BatchConfig:
    max_size: int = 512
    max_wait_s: float = 0.05
    # A batch's engine call stops placing pods after this long; the rest are
    # retried without metric plugins (degraded mode).
    decision_deadline_s: float = 2.0
    # Concurrent binds of pods with volumes to bind (each may wait for the PV
    # controller); reports get half as many threads. Binds of other pods and their
    # Scheduled events go through min(bind_workers, binder.WRITERS) writer threads,
    # each with one persistent connection.
    bind_workers: int = 64


@dataclass(frozen=True)
class HandoffConfig:
    """Pods ksched has not placed for ``after_s`` are handed to default-scheduler
    (off by default: it needs RBAC to delete and create pods)."""

    enabled: bool = False
    after_s: float = 300.0


@dataclass(frozen=True)
class ShadowConfig:
    """Shadow mode: ksched binds nothing and writes nothing to pods; for each pod another
    scheduler binds, it records where ``profile`` would have placed it (see ksched.loop.scheduling.shadow)."""

    enabled: bool = False
    # The profile the pods are scored under (default: the first profile).
    profile: str | None = None
    # Only pods of these namespaces are compared (empty: every namespace).
    namespaces: tuple[str, ...] = ()
    # Decisions kept in memory for ``/shadow`` (the counters cover every decision).
    keep: int = 1000
    # A file each decision is appended to as one JSON line (``ksched shadow report --file``).
    log: str | None = None


@dataclass(frozen=True)
class OutcomesConfig:
    """Placement outcomes: whether a placement's node went hot within its horizon, each
    metric's window plus ``margin`` (see ksched.loop.scheduling.outcomes)."""

    # Past the longest window of a metric with a filter line: the pod's own ramp-up and the
    # samples still to come once the window shows it in full.
    margin_s: float = 120.0
    # How often the nodes' values are read against their lines.
    interval_s: float = 10.0


@dataclass(frozen=True)
class WebhookConfig:
    """The mutating admission webhook that routes opted-in pods to ksched."""

    enabled: bool = False
    address: str = "0.0.0.0:9443"
    cert_file: str | None = None
    key_file: str | None = None
    # Names in a self-generated serving certificate (the webhook Service's DNS names).
    hosts: tuple[str, ...] = ("ksched.kube-system.svc", "ksched.kube-system.svc.cluster.local")
    # The MutatingWebhookConfiguration whose caBundle a self-generated CA is written into.
    configuration_name: str | None = "ksched"
    # The Secret through which replicas share one self-generated certificate (None: each
    # replica generates its own, which only one replica may do: the caBundle trusts one CA).
    secret_name: str | None = "ksched-webhook-tls"
    # Not a key of its own: leaderElection.resourceNamespace, ksched's namespace, whose Role
    # grants the Lease and this Secret alike.
    secret_namespace: str = "kube-system"
    # The profile routed pods get (default: the first profile).
    scheduler_name: str | None = None


@dataclass(frozen=True)
class PrometheusConfig:
    url: str | None = None
    timeout_s: float = 5.0


@dataclass(frozen=True)
class LeaderElectionConfig:
    """Upstream ``leaderElection`` (component-base defaults: 15 s / 10 s / 2 s)."""

    leader_elect: bool = True
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    resource_name: str = "ksched"
    resource_namespace: str = "kube-system"


@dataclass(frozen=True)
class ShardingConfig:
    """Active-active replicas (off by default): each replica holds a Lease of its own, the
    live replicas split the nodes between them, and each binds only onto its own nodes (see
    ksched.loop.shards). The Leases are named after ``leaderElection.resourceName`` in its
    namespace; the leader elected there still runs what only one replica may (steering marks,
    the rebalancer)."""

    enabled: bool = False
    # A replica whose Lease has not changed for this long counts as gone: its nodes pass to
    # the others.
    lease_duration_s: float = 10.0
    # A replica stops binding once its own last renewal is this old: the others may count it
    # gone a lease duration after that renewal.
    renew_deadline_s: float = 6.0
    # How often each replica renews its Lease and reads the others'.
    retry_period_s: float = 1.0
    # A replica stops binding once its last reading of the others' Leases is this old, and a
    # replica that (re)joins (its renewals had stopped for a renew deadline) waits this long
    # before it binds: by then every replica still binding has read its Lease.
    read_deadline_s: float = 3.0


@dataclass(frozen=True)
class ClientConnectionConfig:
    """Client-side rate limit for writes (binds, events, status patches).

    Upstream kube-scheduler defaults to 50 qps / 100 burst, which caps it near
    50 binds/s; ksched batches, so its default allows ten times that."""

    qps: float = 500.0
    burst: int = 1000


def parse_batch(obj: Any) -> BatchConfig:
    path = "batch"
    b = check_keys(obj, path, ("maxSize", "maxWait", "bindWorkers", "decisionDeadline"))
    return BatchConfig(
        max_size=as_int(b.get("maxSize", BatchConfig.max_size), f"{path}.maxSize", 1, 100_000),
        max_wait_s=duration_at(b, "maxWait", BatchConfig.max_wait_s, path),
        bind_workers=as_int(b.get("bindWorkers", BatchConfig.bind_workers), f"{path}.bindWorkers", 1, 256),
        # 0 would leave every batch undecided and retried without metrics.
        decision_deadline_s=duration_at(
            b,
            "decisionDeadline",
            BatchConfig.decision_deadline_s,
            path,
            positive=True,
        ),
    )


def parse_prometheus(obj: Any) -> PrometheusConfig:
    path = "prometheus"
    pr = check_keys(obj, path, ("url", "timeout"))
    return PrometheusConfig(
        url=as_url(pr["url"], f"{path}.url") if "url" in pr else None,
        # 0 would fail every query before it is sent: the metrics would never be read.
        timeout_s=duration_at(pr, "timeout", PrometheusConfig.timeout_s, path, positive=True),
    )


def parse_handoff(obj: Any) -> HandoffConfig:
    path = "handoff"
    h = check_keys(obj, path, ("enabled", "after"))
    enabled = as_bool(h.get("enabled", HandoffConfig.enabled), f"{path}.enabled")
    return HandoffConfig(enabled=enabled, after_s=duration_at(h, "after", HandoffConfig.after_s, path))


def parse_shadow(obj: Any, profiles: list[str]) -> ShadowConfig:
    path = "shadow"
    sh = check_keys(obj, path, ("enabled", "profile", "namespaces", "keep", "log"))
    enabled = as_bool(sh.get("enabled", ShadowConfig.enabled), f"{path}.enabled")
    raw = as_list(sh.get("namespaces", []), f"{path}.namespaces")
    return ShadowConfig(
        enabled=enabled,
        profile=as_str(sh["profile"], f"{path}.profile", tuple(profiles)) if "profile" in sh else profiles[0],
        namespaces=tuple(as_str(n, f"{path}.namespaces[{i}]") for i, n in enumerate(raw)),
        keep=as_int(sh.get("keep", ShadowConfig.keep), f"{path}.keep", 1, 100_000),
        log=as_str(sh["log"], f"{path}.log") if "log" in sh else None,
    )


def parse_outcomes(obj: Any) -> OutcomesConfig:
    path = "outcomes"
    o = check_keys(obj, path, ("margin", "interval"))
    d = OutcomesConfig
    return OutcomesConfig(
        margin_s=duration_at(o, "margin", d.margin_s, path),
        interval_s=duration_at(o, "interval", d.interval_s, path, at_least=MIN_OUTCOMES_INTERVAL_S),
    )


def parse_webhook(obj: Any, profiles: list[str], namespace: str) -> WebhookConfig:
    """The ``webhook`` section; ``namespace`` (leaderElection.resourceNamespace) holds its Secret."""
    path = "webhook"
    w = check_keys(
        obj,
        path,
        (
            "enabled",
            "address",
            "certFile",
            "keyFile",
            "hosts",
            "configurationName",
            "secretName",
            "schedulerName",
        ),
    )
    enabled = as_bool(w.get("enabled", WebhookConfig.enabled), f"{path}.enabled")
    cert = as_str(w["certFile"], f"{path}.certFile") if "certFile" in w else None
    key = as_str(w["keyFile"], f"{path}.keyFile") if "keyFile" in w else None
    if (cert is None) != (key is None):
        raise ConfigError(
            f"{path}: certFile and keyFile go together (or neither, for a self-generated certificate)"
        )
    if enabled:
        for key_name, file in (("certFile", cert), ("keyFile", key)):
            if file is not None:
                _check_readable(file, f"{path}.{key_name}")
    raw_hosts = as_list(w.get("hosts", list(WebhookConfig.hosts)), f"{path}.hosts")
    hosts = tuple(as_str(h, f"{path}.hosts[{i}]") for i, h in enumerate(raw_hosts))
    if not hosts:
        raise ConfigError(f"{path}.hosts: must name at least one host")
    scheduler = (
        as_str(w["schedulerName"], f"{path}.schedulerName", tuple(profiles))
        if "schedulerName" in w
        else profiles[0]
    )
    name = w.get("configurationName", WebhookConfig.configuration_name)
    secret = w.get("secretName", WebhookConfig.secret_name)
    if secret is not None:
        secret = as_str(secret, f"{path}.secretName")
        if not is_dns_subdomain(secret):
            raise ConfigError(
                f"{path}.secretName: {secret!r} is not a Secret name (lowercase letters, digits, "
                "'-' and '.', starting and ending with a letter or digit); null for a certificate "
                "per replica"
            )
    return WebhookConfig(
        enabled=enabled,
        address=as_host_port(w.get("address", WebhookConfig.address), f"{path}.address"),
        cert_file=cert,
        key_file=key,
        hosts=hosts,
        configuration_name=None if name is None else as_str(name, f"{path}.configurationName"),
        secret_name=secret,
        secret_namespace=namespace,
        scheduler_name=scheduler,
    )


def _check_readable(file: str, path: str) -> None:
    """A file the webhook serves with must be there when it starts: refused at load, with
    the key path, as ``ksched simulate --config`` validates a configuration offline."""
    try:
        with open(file, "rb"):
            pass
    except OSError as err:
        raise ConfigError(f"{path}: cannot read {file}: {err.strerror or err}") from None


def parse_leader_election(obj: Any) -> LeaderElectionConfig:
    path = "leaderElection"
    le = check_keys(
        obj,
        path,
        ("leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceName", "resourceNamespace"),
    )
    leader_elect = as_bool(le.get("leaderElect", LeaderElectionConfig.leader_elect), f"{path}.leaderElect")
    out = LeaderElectionConfig(
        leader_elect=leader_elect,
        lease_duration_s=duration_at(le, "leaseDuration", LeaderElectionConfig.lease_duration_s, path),
        renew_deadline_s=duration_at(le, "renewDeadline", LeaderElectionConfig.renew_deadline_s, path),
        retry_period_s=duration_at(le, "retryPeriod", LeaderElectionConfig.retry_period_s, path),
        resource_name=as_str(
            le.get("resourceName", LeaderElectionConfig.resource_name), f"{path}.resourceName"
        ),
        resource_namespace=as_str(
            le.get("resourceNamespace", LeaderElectionConfig.resource_namespace), f"{path}.resourceNamespace"
        ),
    )
    # Upstream's validation: the lease must outlast the renew deadline, which must outlast the retry period.
    if not out.lease_duration_s > out.renew_deadline_s:
        raise ConfigError(f"{path}.leaseDuration: must be greater than renewDeadline")
    if out.lease_duration_s != int(out.lease_duration_s):
        raise ConfigError(f"{path}.leaseDuration: must be whole seconds (a Lease stores seconds)")
    # The client's leaderelection also wants whole-second periods and 20 % jitter room.
    if out.retry_period_s < 1:
        raise ConfigError(f"{path}.retryPeriod: must be at least 1s")
    if not out.renew_deadline_s > LEADER_JITTER * out.retry_period_s:
        raise ConfigError(f"{path}.renewDeadline: must be greater than {LEADER_JITTER} x retryPeriod")
    return out


def parse_sharding(obj: Any, leader_election: LeaderElectionConfig) -> ShardingConfig:
    path = "sharding"
    sh = check_keys(obj, path, ("enabled", "leaseDuration", "renewDeadline", "retryPeriod", "readDeadline"))
    out = ShardingConfig(
        enabled=as_bool(sh.get("enabled", ShardingConfig.enabled), f"{path}.enabled"),
        lease_duration_s=duration_at(sh, "leaseDuration", ShardingConfig.lease_duration_s, path),
        renew_deadline_s=duration_at(sh, "renewDeadline", ShardingConfig.renew_deadline_s, path),
        retry_period_s=duration_at(sh, "retryPeriod", ShardingConfig.retry_period_s, path),
        read_deadline_s=duration_at(sh, "readDeadline", ShardingConfig.read_deadline_s, path),
    )
    if out.lease_duration_s != int(out.lease_duration_s) or out.lease_duration_s < 1:
        raise ConfigError(
            f"{path}.leaseDuration: must be whole seconds, at least 1s (a Lease stores seconds)"
        )
    if not out.retry_period_s > 0:
        raise ConfigError(f"{path}.retryPeriod: must be positive")
    # A replica that still binds renewed within renewDeadline, and every other replica read
    # the Leases within retryPeriod after that: neither counts it gone before leaseDuration.
    if not out.renew_deadline_s + out.retry_period_s < out.lease_duration_s:
        raise ConfigError(f"{path}.leaseDuration: must be greater than renewDeadline + retryPeriod")
    if not out.renew_deadline_s > out.retry_period_s:
        raise ConfigError(f"{path}.renewDeadline: must be greater than retryPeriod")
    # A replica reads every retry period: a deadline of one would stop it between two readings.
    if not out.read_deadline_s >= 2 * out.retry_period_s:
        raise ConfigError(f"{path}.readDeadline: must be at least 2 x retryPeriod")
    if out.enabled and not leader_election.leader_elect:
        # The steering marks and the rebalancer run on one replica: the elected leader.
        raise ConfigError(f"{path}.enabled: needs leaderElection.leaderElect (one replica leads the rest)")
    return out


def parse_client_connection(obj: Any) -> ClientConnectionConfig:
    path = "clientConnection"
    cc = check_keys(obj, path, ("qps", "burst"))
    qps = as_float(cc.get("qps", ClientConnectionConfig.qps), f"{path}.qps")
    if not qps > 0:
        raise ConfigError(f"{path}.qps: {qps!r} must be positive")
    return ClientConnectionConfig(
        qps=qps, burst=as_int(cc.get("burst", ClientConnectionConfig.burst), f"{path}.burst", 1, 1_000_000)
    )
