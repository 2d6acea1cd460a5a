"""HeldRoom: what the scheduling cycle sees of rebalancing, its one entry into it.

A rebalancing move holds its target for the evicted pod's replacement: until the replacement
shows up, its room and its load stay held there, so other pods fill neither; once it shows
up, it is offered the held target first; once it binds, anywhere, the hold ends. The cycle
asks one provider for all of it:

- the replacements not yet seen, as pending pods nominated to their targets
  (:meth:`HeldRoom.holding`, added to the engine's ``nominated``);
- the target a pending pod is steered to (:meth:`HeldRoom.steered_to`);
- "this pod bound on that node" (:meth:`HeldRoom.landed`);
- the held load, which the cycle adds through its load model
  (:class:`~ksched.loop.metrics.load_model.HeldLoad`, which this extends).

The rebalancer's :class:`~ksched.loop.rebalancing.reservations.Reservations` provides it;
shadow mode and a loop without rebalancing have none.
"""

from __future__ import annotations

from typing import Protocol

from ksched.loop.metrics.load_model import HeldLoad
from ksched.objects import Obj


class HeldRoom(HeldLoad, Protocol):
    """The room and load rebalancing holds for its moves' replacements, as the cycle reads it."""

    def holding(self) -> list[Obj]:
        """The replacements not yet seen, as pending pods nominated to their targets."""
        ...

    def steered_to(self, pod: Obj) -> str | None:
        """The target held for ``pod`` where it replaces a moved pod (the hold is this pod's
        from now on), else None."""
        ...

    def landed(self, pod: Obj, node: str) -> str | None:
        """``pod`` bound on ``node``: where it is a replacement, its hold ends and how
        (``on_target``, ``on_source`` or ``elsewhere``) is returned; else None."""
        ...
