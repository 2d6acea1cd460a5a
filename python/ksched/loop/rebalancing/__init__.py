"""Rebalancing inside ``ksched run``: hot nodes, moves, and the room held for their replacements.

:mod:`~ksched.loop.rebalancing.rebalancer` judges which nodes are hot
(:mod:`~ksched.loop.rebalancing.hot`), plans moves with the engine and evicts;
:mod:`~ksched.loop.rebalancing.reservations` holds each move's target for its replacement.
The scheduling cycle reads none of that directly: its one entry is
:class:`~ksched.loop.rebalancing.held.HeldRoom`, the room and load held for the replacements.
"""
