"""What the pooled setups beyond plain ksched add to its configuration, for one pool.

Owns the configuration overlays of the setups that need their pool or their namespace:

- ``ksched-steer``: the load-aware configuration with steering on, its marks limited to its own
  pool (``steering.nodeSelector``: ksched sees every pool, and a mark on another setup's node
  would steer that setup's kube-scheduler pods);
- ``oracle-steer``: ``ksched-steer`` whose pods, both schedulers', carry what they will really
  use (as the oracle's, :data:`~ksched.bench.quality.scenarios.ORACLE`): what placement and
  steering together reach where every estimate is right, the reference a steering setup's gap
  is measured to (:mod:`.gap`);
- ``ksched-steer-rebalance``: the rebalancer's configuration with the same steering, and
  default-scheduler's pods of its own namespace opted in to be moved
  (``rebalance.otherSchedulers``), which the rebalancer does only off a marked node;
- ``shadow``: kube-scheduler places the pool's pods while a ``ksched run`` in shadow mode over
  that namespace, with the load-aware configuration, records where it would have placed each
  and estimates the hot node-minutes it would have avoided (:mod:`.shadow_estimate`). Its
  outcomes' horizon is stretched to the observation window (``outcomes.margin``), so that its
  hot node-minutes cover the span the measured ones do. :func:`read_outcomes` reads what it
said at the end of the round.
"""

from __future__ import annotations

import copy
import json
import time
import urllib.request

from ksched.bench.quality.figures import ShadowOutcomes
from ksched.bench.quality.scenarios import DEFAULT_SCHEDULER, ORACLE
from ksched.config import parse_config
from ksched.loop.scheduling.outcomes import window_of
from ksched.objects import Obj

KSCHED_STEER = "ksched-steer"
KSCHED_STEER_REBALANCE = "ksched-steer-rebalance"
ORACLE_STEER = "oracle-steer"
# The setups that mark their pool's hot nodes (their marks are read back, :mod:`.marks`).
STEERING = (KSCHED_STEER, KSCHED_STEER_REBALANCE, ORACLE_STEER)
# The setups whose pods carry what they will use (every pod of the pool, whichever scheduler
# places it).
KNOWING = (ORACLE, ORACLE_STEER)
SHADOW = "shadow"
# The shadow's looks at the nodes it judges: a few a scrape (15 s), so a node's hot spell is
# counted to within a few seconds of what the samples show.
SHADOW_LOOK_S = 5.0
POLL_S = 2.0


def pool_config(config: Obj, label: str, pool: dict[str, str], namespace: str, observe_s: float) -> Obj:
    """``config`` (the label's ksched configuration document) with what ``label`` adds on the
    pool whose nodes carry the labels ``pool`` and whose pods are in ``namespace``; a label
    this module does not own is returned unchanged."""
    out = copy.deepcopy(config)
    if steers(label, out):
        out["steering"] = {**(out.get("steering") or {}), "enabled": True, "nodeSelector": dict(pool)}
    if label == KSCHED_STEER_REBALANCE:
        rebalance = out.setdefault("rebalance", {})
        rebalance["otherSchedulers"] = {"schedulerNames": [DEFAULT_SCHEDULER], "namespaces": [namespace]}
    if label == SHADOW:
        out["shadow"] = {"enabled": True, "namespaces": [namespace]}
        margin = max(0.0, observe_s - horizon_window_s(out))
        out["outcomes"] = {"margin": f"{margin:g}s", "interval": f"{SHADOW_LOOK_S:g}s"}
    return out


def steers(label: str, config: Obj | None) -> bool:
    """Whether a setup steers: a steering setup, or a configuration of its own
    (``--quality-config``) that turns steering on. Either way its marks are limited to its
    pool (:func:`pool_config`), and its marks' timeline is judged."""
    if label == SHADOW:
        return False  # shadow mode never marks
    return label in STEERING or bool(((config or {}).get("steering") or {}).get("enabled"))


def horizon_window_s(config: Obj) -> float:
    """The part of the outcomes' horizon the metrics set: the longest window of a metric with
    a filter line (the horizon is that plus ``outcomes.margin``)."""
    metrics = parse_config(config).metrics
    return max((window_of(m) for m in metrics if m.above is not None or m.below is not None), default=0.0)


def read_outcomes(port: int, within_s: float) -> ShadowOutcomes:
    """The shadow's outcomes once every decision it made has a verdict, or after ``within_s``
    (the rest are left out: their horizon had not ended)."""
    deadline = time.monotonic() + within_s
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/shadow", timeout=10) as r:
            outcomes = ShadowOutcomes.of(json.loads(r.read()))
        if outcomes.judged >= outcomes.decisions or time.monotonic() >= deadline:
            return outcomes
        time.sleep(POLL_S)
