"""``KschedConfiguration``: profiles, plugin weights and args, metric definitions.

Shaped like ``KubeSchedulerConfiguration`` (profiles with ``plugins.multiPoint``
and ``pluginConfig``) plus ksched's ``metrics`` and ``batch``. Every unknown
key and bad value is rejected when the file is loaded, with the key path and
the allowed values; a missing file section takes upstream's default.

This module reads the document and its top-level keys; each part has its own
module: :mod:`~ksched.config.profiles` (plugins and their args),
:mod:`~ksched.config.metrics` (its ``estimate``: :mod:`~ksched.config.estimate`),
:mod:`~ksched.config.rebalance`, :mod:`~ksched.config.steering`,
:mod:`~ksched.config.sections` (batch, leader
election, sharding, client connection, Prometheus, webhook, hand-off, shadow, outcomes) and
:mod:`~ksched.config.values` (the readers of one value they share), with
:mod:`~ksched.config.names` (Kubernetes' grammar for keys, names and label values).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ksched.config.documents import decode, load_document, read_bounded
from ksched.config.estimate import EstimateConfig
from ksched.config.metrics import Band, MetricConfig, parse_metric
from ksched.config.profiles import DEFAULT_PROFILE, ProfileConfig, parse_profile
from ksched.config.rebalance import RebalanceConfig, RebalanceMetric, RebalanceThreshold, parse_rebalance
from ksched.config.sections import (
    BatchConfig,
    ClientConnectionConfig,
    HandoffConfig,
    LeaderElectionConfig,
    OutcomesConfig,
    PrometheusConfig,
    ShadowConfig,
    ShardingConfig,
    WebhookConfig,
    parse_batch,
    parse_client_connection,
    parse_handoff,
    parse_leader_election,
    parse_outcomes,
    parse_prometheus,
    parse_shadow,
    parse_sharding,
    parse_webhook,
)
from ksched.config.steering import SteeringConfig, parse_steering
from ksched.config.values import as_list, as_str, check_keys, parse_duration
from ksched.errors import ConfigError
from ksched.objects import Obj

__all__ = [
    "API_VERSION",
    "KIND",
    "Band",
    "BatchConfig",
    "ClientConnectionConfig",
    "Config",
    "EstimateConfig",
    "HandoffConfig",
    "LeaderElectionConfig",
    "MetricConfig",
    "OutcomesConfig",
    "ProfileConfig",
    "PrometheusConfig",
    "RebalanceConfig",
    "RebalanceMetric",
    "RebalanceThreshold",
    "ShadowConfig",
    "ShardingConfig",
    "SteeringConfig",
    "WebhookConfig",
    "load_config",
    "parse_config",
    "parse_duration",
]

API_VERSION = "ksched.io/v1alpha1"
KIND = "KschedConfiguration"
# A configuration is a few kilobytes; a file past this is a mistaken path.
MAX_CONFIG_BYTES = 16 * 1024 * 1024
_KEYS = (
    "apiVersion",
    "kind",
    "profiles",
    "metrics",
    "batch",
    "leaderElection",
    "sharding",
    "clientConnection",
    "prometheus",
    "webhook",
    "handoff",
    "shadow",
    "rebalance",
    "steering",
    "outcomes",
)


@dataclass(frozen=True)
class Config:
    profiles: tuple[ProfileConfig, ...] = (ProfileConfig(),)
    metrics: tuple[MetricConfig, ...] = ()
    batch: BatchConfig = field(default_factory=BatchConfig)
    leader_election: LeaderElectionConfig = field(default_factory=LeaderElectionConfig)
    client_connection: ClientConnectionConfig = field(default_factory=ClientConnectionConfig)
    prometheus: PrometheusConfig = field(default_factory=PrometheusConfig)
    webhook: WebhookConfig = field(default_factory=WebhookConfig)
    handoff: HandoffConfig = field(default_factory=HandoffConfig)
    shadow: ShadowConfig = field(default_factory=ShadowConfig)
    rebalance: RebalanceConfig = field(default_factory=RebalanceConfig)
    steering: SteeringConfig = field(default_factory=SteeringConfig)
    outcomes: OutcomesConfig = field(default_factory=OutcomesConfig)
    sharding: ShardingConfig = field(default_factory=ShardingConfig)

    def profile(self, scheduler_name: str) -> ProfileConfig | None:
        for p in self.profiles:
            if p.scheduler_name == scheduler_name:
                return p
        return None


def parse_config(obj: Obj) -> Config:
    """Validate a decoded configuration document."""
    check_keys(obj, "", _KEYS, ("apiVersion", "kind"))
    as_str(obj["apiVersion"], "apiVersion", (API_VERSION,))
    as_str(obj["kind"], "kind", (KIND,))
    profiles = tuple(
        parse_profile(p, f"profiles[{i}]")
        for i, p in enumerate(
            as_list(obj.get("profiles") or [{"schedulerName": DEFAULT_PROFILE}], "profiles")
        )
    )
    names = [p.scheduler_name for p in profiles]
    if len(set(names)) != len(names):
        raise ConfigError(f"profiles: duplicate schedulerName in {names}")
    metrics = tuple(
        parse_metric(m, f"metrics[{i}]") for i, m in enumerate(as_list(obj.get("metrics") or [], "metrics"))
    )
    if len({m.name for m in metrics}) != len(metrics):
        raise ConfigError("metrics: duplicate metric name")
    _check_profile_metrics(profiles, metrics)
    batch = parse_batch(obj.get("batch") or {})
    prometheus = parse_prometheus(obj.get("prometheus") or {})
    for i, m in enumerate(metrics):
        if m.estimate is not None and m.estimate.pod_query is not None and prometheus.url is None:
            raise ConfigError(f"metrics[{i}].estimate.podQuery: needs prometheus.url, which is not set")
    leader_election = parse_leader_election(obj.get("leaderElection") or {})
    return Config(
        profiles,
        metrics,
        batch,
        leader_election,
        parse_client_connection(obj.get("clientConnection") or {}),
        prometheus,
        parse_webhook(obj.get("webhook") or {}, names, leader_election.resource_namespace),
        parse_handoff(obj.get("handoff") or {}),
        parse_shadow(obj.get("shadow") or {}, names),
        parse_rebalance(obj.get("rebalance") or {}, names, metrics),
        parse_steering(obj.get("steering") or {}, metrics),
        parse_outcomes(obj.get("outcomes") or {}),
        parse_sharding(obj.get("sharding") or {}, leader_election),
    )


def _check_profile_metrics(profiles: tuple[ProfileConfig, ...], metrics: tuple[MetricConfig, ...]) -> None:
    """Each profile's ``metrics`` names only metrics the configuration defines."""
    defined = [m.name for m in metrics]
    for i, p in enumerate(profiles):
        for j, name in enumerate(p.metrics or ()):
            if name not in defined:
                raise ConfigError(
                    f"profiles[{i}].metrics[{j}]: {name!r} is not a metric "
                    f"(metrics: {', '.join(defined) or 'none defined'})"
                )


def load_config(path: str | Path | None) -> Config:
    """Read a configuration file; None gives the default (one profile named ``ksched``)."""
    if path is None:
        return Config()
    data = read_bounded(path, MAX_CONFIG_BYTES, "configuration", ConfigError)
    return parse_config(load_document(decode(data, str(path), ConfigError), str(path), ConfigError))
