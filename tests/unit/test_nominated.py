"""Nominated pods through ``Engine.schedule``, as upstream: the nominated node first."""

from __future__ import annotations

from typing import Any

import pytest

from ksched.config import Config
from ksched.engine import Engine
from ksched.engine.snapshot import build_snapshot
from tests.conftest import node, pod


def nominated(name: str, to: str | None, cpu: str = "1", priority: int = 0) -> dict[str, Any]:
    p = pod(name, cpu=cpu, priority=priority)
    if to is not None:
        p["status"] = {"nominatedNodeName": to}
    return p


# "busy" has 3 of 4 cpus requested, so LeastAllocated prefers "idle".
NODES = [node("idle"), node("busy"), node("full")]
EXISTING = [pod("load", cpu="3", node_name="busy"), pod("fill", cpu="3500m", node_name="full")]


@pytest.mark.parametrize(
    ("name", "pending", "nominees", "want"),
    [
        ("no nomination: best score", [nominated("p", None)], [], {"default/p": ("idle", True)}),
        (
            "nominated node fits: taken without scoring",
            [nominated("p", "busy")],
            [],
            {"default/p": ("busy", False)},
        ),
        (
            "nominated node does not fit: every node evaluated",
            [nominated("p", "full")],
            [],
            {"default/p": ("idle", True)},
        ),
        (
            "nominated node unknown: every node evaluated",
            [nominated("p", "gone")],
            [],
            {"default/p": ("idle", True)},
        ),
        (
            "room held there by a higher-priority nominee: every node evaluated",
            [nominated("p", "busy")],
            [nominated("vip", "busy", priority=100)],
            {"default/p": ("idle", True)},
        ),
        (
            "a lower-priority nominee holds nothing",
            [nominated("p", "busy", priority=5)],
            [nominated("low", "busy", priority=1)],
            {"default/p": ("busy", False)},
        ),
    ],
)
def test_nominated_node_first(
    name: str,
    pending: list[dict[str, Any]],
    nominees: list[dict[str, Any]],
    want: dict[str, tuple[str, bool]],
) -> None:
    snapshot = build_snapshot(NODES, EXISTING)
    placements = Engine(Config()).schedule(snapshot, pending, nominated=nominees).placements
    got = {p.pod: (p.node, p.score is not None) for p in placements}
    assert got == want, f"{name}: want {want}, got {got}"
