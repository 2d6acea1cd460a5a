"""Offline scheduling of a cluster file: every pending pod, profile by profile.

Owns the offline metric values (``--metrics``: a mapping of node name to
``{metric: number}``, beside the annotation metrics read from the nodes) and
:func:`run_simulation`, which schedules a :class:`~ksched.engine.cluster_file.ClusterFile`
on one snapshot shared by the profiles, each seeing the placements of those before it.
``ksched simulate``, ``ksched explain`` (offline and live) and the tests run it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import yaml

from ksched.config import Config, MetricConfig
from ksched.engine.cluster_file import ClusterFile
from ksched.engine.gangs import GangStatus, pod_group_of
from ksched.engine.placements import BatchResult, commit_placements
from ksched.engine.scheduler import Engine
from ksched.engine.snapshot import (
    Snapshot,
    annotation_column,
    build_snapshot,
    drop_unusable,
    dropped_note,
    to_number,
)
from ksched.errors import KschedError
from ksched.objects import Obj, scheduler_name, without_hand_over

log = logging.getLogger(__name__)


def metric_matrix(
    snapshot: Snapshot, metrics: tuple[MetricConfig, ...], offline: dict[str, Any] | None
) -> npt.NDArray[np.float64]:
    """Node x metric values: annotation metrics from the nodes, the rest from ``--metrics``.
    A value that is not finite or is past the metric limit is missing on its node, as the
    running scheduler has it (:func:`~ksched.engine.snapshot.drop_unusable`), with a warning."""
    values = np.full((snapshot.count, len(metrics)), np.nan, dtype=np.float64)
    for j, m in enumerate(metrics):
        if m.source == "annotation" and m.annotation:
            values[:, j] = annotation_column(snapshot, m.annotation)
        for i, node in enumerate(snapshot.node_names):
            given = (offline or {}).get(node) or {}
            if m.name in given:
                values[i, j] = to_number(given[m.name])
        column = values[:, j].copy()
        dropped = drop_unusable(column)
        values[:, j] = column
        if dropped:
            log.warning("metric %s: %s", m.name, dropped_note(dropped))
    return values


def load_offline_metrics(path: str | Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise KschedError(f"cannot read metrics file {path}: {err}") from None
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise KschedError(f"{path}: expected a mapping of node name to {{metric: number}}")
    return doc


def run_simulation(
    cluster: ClusterFile,
    config: Config,
    offline: dict[str, Any] | None,
    seed: int,
    explain: str | None = None,
) -> tuple[list[BatchResult], Snapshot]:
    """Schedule every pending pod, profile by profile, on one shared snapshot."""
    snapshot = build_snapshot(cluster.nodes, cluster.existing, config.steering.own_marks)
    snapshot.namespaces = cluster.namespaces
    snapshot.spread_selectors = cluster.spread_selectors
    snapshot.budgets = cluster.budgets
    snapshot.storage = cluster.storage
    values = metric_matrix(snapshot, config.metrics, offline)
    bound: dict[str, int] = {}
    for pod in cluster.existing:
        group = pod_group_of(pod)
        if group is not None:
            bound[group] = bound.get(group, 0) + 1
    groups = {g.key: GangStatus(g.min_member, bound.get(g.key, 0)) for g in cluster.pod_groups}
    results = []
    by_profile: dict[str, list[Obj]] = {}
    for pod in cluster.pending:
        # A sharded replica's hand-over only routes the pod: placed as the owner would.
        by_profile.setdefault(scheduler_name(pod), []).append(without_hand_over(pod))
    for profile in config.profiles:
        pods = by_profile.get(profile.scheduler_name, [])
        if not pods:
            continue
        engine = Engine(config, profile.scheduler_name, seed=seed)
        result = engine.schedule(snapshot, pods, values, explain=explain, groups=groups)
        results.append(result)
        snapshot = commit_placements(snapshot, result.placements)
    return results, snapshot
