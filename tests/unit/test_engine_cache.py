"""The engine keeps its class and signature caches from one call to the next
(``Engine(reuse=True)``, the default): no batch may be placed differently for it,
whatever changed since the last batch (placements committed or not, pods bound
or deleted behind its back, metric values, node labels, a fresh snapshot)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from ksched.config import Config, MetricConfig
from ksched.engine import Engine, Placement, commit_placements
from ksched.engine.snapshot import apply_bound_pods, build_snapshot, remove_usage
from tests.conftest import node, pod

PRICE = MetricConfig(
    name="price", source="annotation", annotation="ksched.io/price", prefer="lower", weight=2.0
)
ZONES = ("a", "b", "c")


def _nodes(count: int) -> list[dict[str, Any]]:
    return [
        node(
            f"n{i}",
            cpu=str(2 + i % 3),
            memory=f"{4 + 2 * (i % 2)}Gi",
            pods=str(3 + i % 4),
            labels={"topology.kubernetes.io/zone": ZONES[i % 3]},
        )
        for i in range(count)
    ]


def _pending(rng: random.Random, count: int, prefix: str) -> list[dict[str, Any]]:
    out = []
    for i in range(count):
        shape = rng.randrange(4)
        p = pod(f"{prefix}-{i}", cpu=("100m", "250m", "500m", "1")[shape], memory=("128Mi", "1Gi")[shape % 2])
        if shape == 3:
            p["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": rng.choice(ZONES)}
        out.append(p)
    return out


def _verdicts(placements: list[Placement]) -> list[tuple[str, str | None, float | None, str | None, int]]:
    return [(p.pod, p.node, p.score, p.message, p.feasible_nodes) for p in placements]


def test_a_pod_bound_behind_the_engines_back_is_seen_by_the_next_batch() -> None:
    snapshot = build_snapshot([node("big", cpu="8"), node("small", cpu="2")], [])
    values = np.zeros((2, 1))
    engine = Engine(Config(metrics=(PRICE,)))
    first = engine.schedule(snapshot, [pod("p1", cpu="1")], values, metrics=(PRICE,)).placements
    assert first[0].node == "big"
    snapshot = commit_placements(snapshot, first)
    # Someone else binds a pod that fills the big node: the kept evaluation of
    # "big" (room for 6 more cpus) must not serve the next pod of the same shape.
    apply_bound_pods(snapshot, [pod("other", cpu="7", node_name="big")])
    second = engine.schedule(snapshot, [pod("p2", cpu="1")], values, metrics=(PRICE,)).placements
    assert second[0].node == "small"


def test_a_metric_value_that_moved_rescores_every_kept_signature() -> None:
    snapshot = build_snapshot([node("n0"), node("n1")], [])
    engine = Engine(Config(metrics=(PRICE,)))
    cheap_n0 = np.array([[1.0], [9.0]])
    assert engine.schedule(snapshot, [pod("p1")], cheap_n0, metrics=(PRICE,)).placements[0].node == "n0"
    cheap_n1 = np.array([[9.0], [1.0]])
    assert engine.schedule(snapshot, [pod("p2")], cheap_n1, metrics=(PRICE,)).placements[0].node == "n1"


def test_batches_after_every_kind_of_change_place_as_a_fresh_engine() -> None:
    rng = random.Random(7)
    nodes = _nodes(40)
    snapshot = build_snapshot(nodes, [])
    values = np.array([[float(i * 37 % 17)] for i in range(len(nodes))])
    kept = Engine(Config(metrics=(PRICE,)), seed=3)
    assert kept.cache is not None
    bound: list[tuple[str, int, Any]] = []
    for step in range(24):
        change = step % 6
        if change == 1:  # pods bound by someone else
            extra = [pod(f"x{step}-{k}", cpu="300m", node_name=f"n{rng.randrange(40)}") for k in range(3)]
            apply_bound_pods(snapshot, extra)
        elif change == 2:  # pods deleted
            for key, index, requests in bound[:3]:
                remove_usage(snapshot, index, requests)
                snapshot.pods.remove(key)
            del bound[:3]
        elif change == 3:  # metrics moved
            values = values.copy()
            values[rng.randrange(40), 0] = float(rng.randrange(20))
        elif change == 4:  # a node relabelled: a fresh snapshot, as after a node update
            nodes[rng.randrange(40)]["metadata"]["labels"]["topology.kubernetes.io/zone"] = rng.choice(ZONES)
            snapshot = build_snapshot(nodes, [])
            bound.clear()
        pending = _pending(rng, rng.randrange(5, 30), f"s{step}")
        result = kept.schedule(snapshot, pending, values, metrics=(PRICE,))
        fresh = Engine(Config(metrics=(PRICE,)), seed=3, reuse=False).schedule(
            snapshot, pending, values, metrics=(PRICE,)
        )
        assert _verdicts(result.placements) == _verdicts(fresh.placements), f"step {step}"
        # change 5: every other bind fails (its placement is not committed)
        committed = [p for k, p in enumerate(result.placements) if change != 5 or k % 2]
        snapshot = commit_placements(snapshot, committed)
        for p in committed:
            if p.node is not None and p.requirements is not None:
                bound.append((p.pod, snapshot.index[p.node], p.requirements))
    assert kept.cache.signatures > 0, "the engine kept its signatures"
