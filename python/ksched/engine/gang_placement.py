"""Gangs placed all-or-nothing (scheduler-plugins coscheduling) within one batch.

Owns the order that keeps each gang's members together in the queue, and the
reruns that drop a gang whose placed members plus bound ones fall short of its
minMember: no partial gang is ever placed, and no later pod sees a placement
that is undone. What a gang is (its label, its PodGroup) is :mod:`ksched.engine.gangs`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ksched import _core
from ksched.core_types import Outcome
from ksched.engine.batch import Batch, Parsed
from ksched.engine.gangs import GangStatus
from ksched.engine.inputs import Row
from ksched.engine.requirements import PodRequirements


def gang_order(parsed: list[Parsed]) -> list[Parsed]:
    """Each gang's members moved together to the place of its first member, so two
    gangs competing for the same room are never interleaved (the first placed whole
    wins instead of both stopping short: the deadlock of one-pod-at-a-time schedulers)."""
    members: dict[str, list[Parsed]] = {}
    for t in parsed:
        group = t[2].group if isinstance(t[2], PodRequirements) else None
        if group is not None:
            members.setdefault(group, []).append(t)
    if not members:
        return parsed
    out = []
    for t in parsed:
        group = t[2].group if isinstance(t[2], PodRequirements) else None
        if group is None:
            out.append(t)
        elif group in members:
            out.extend(members.pop(group))
    return out


def place_whole_gangs(
    batch: Batch, groups: Mapping[str, GangStatus], run: Callable[[], tuple[Outcome, list[str]]]
) -> tuple[Outcome, list[str]]:
    """Run the engine on the batch (``run``) until every gang left in it reaches minMember.

    Gangs that cannot are taken out and the batch placed again without them:
    no partial gang is ever placed, and no later pod sees a placement that is
    undone. Returns the last run's output and the keys of its evictable pods."""
    if not groups:
        return run()  # no gang: a pod of a PodGroup gets a row only when groups holds it
    while True:
        out, victim_keys = run()
        short = _short_gangs(batch.rows, out["nodes"], groups)
        if not short:
            return out, victim_keys
        batch.drop_gangs(short)


def _short_gangs(rows: Sequence[Row], nodes: Any, groups: Mapping[str, GangStatus]) -> dict[str, str | None]:
    """Gangs in ``rows`` whose placed members plus bound ones fall short of minMember -> why
    (None: the decision deadline cut the gang short, so it is retried, not reported)."""
    placed: dict[str, int] = {}
    pending: dict[str, int] = {}
    cut: set[str] = set()
    for j, r in enumerate(rows):
        if r.req.group is not None:
            pending[r.req.group] = pending.get(r.req.group, 0) + 1
            placed[r.req.group] = placed.get(r.req.group, 0) + (int(nodes[j]) >= 0)
            if int(nodes[j]) == _core.NOT_ATTEMPTED:
                cut.add(r.req.group)
    short: dict[str, str | None] = {}
    for group, n in placed.items():
        status = groups[group]
        if n + status.bound < status.min_member:
            short[group] = (
                None
                if group in cut
                else (
                    f'pod group "{group}": {n + status.bound} of minMember {status.min_member} members '
                    f"can be placed together ({status.bound} bound, {n} of {pending[group]} pending placeable); "
                    "none of the gang is bound until enough fit"
                )
            )
    return short
