"""The rules of docs/scheduling.md, one function each.

Every path that schedules (the static plan, :mod:`scheduling.plan`; the live
order, :class:`scheduling.queue.FairQueue`; the simulator; the forecast
pass) calls these; none has its own copy. The ordering keys (the round-robin
key and its tie-breaks) are in :mod:`scheduling.keys`.

- :func:`is_held`: auto-hold, an org of weight 0 is held.
- :func:`classify`: held, paused, blocked or in the order.
- :func:`head_of_line`: the head-of-line stop (dispatch within the free budget).

The arrival rules (the round a chart takes) are in :mod:`scheduling.share`; the lane
walk and the lanes at ``now`` (ETAs) in :mod:`scheduling.lanes`.

The hot ones take whole sequences (the loop is inside the function): a call per
chart would cost more than the work it does on a backlog of 10**5 charts.
"""
from __future__ import annotations

from typing import Iterable

ORDERED, HELD, PAUSED, BLOCKED = "ordered", "held", "paused", "blocked"

HELD_WEIGHT = 0
"""The weight that holds an org (for database filters, which cannot call :func:`is_held`)."""


def is_held(weight: int | None) -> bool:
    """Auto-hold: an org of weight 0 is held. Its charts stay visible and never start."""
    return weight == HELD_WEIGHT


def classify(weight: int, paused: bool, cost: int, budget: int) -> str:
    """What a queued chart is, checked in this order (docs/scheduling.md, "1. Classify"):
    ``HELD`` (its org's ``weight`` holds it, :func:`is_held`), ``PAUSED``,
    ``BLOCKED`` (its ``cost`` exceeds the whole ``budget``), else ``ORDERED``."""
    if is_held(weight):
        return HELD
    if paused:
        return PAUSED
    if cost > budget:
        return BLOCKED
    return ORDERED


def head_of_line(costs: Iterable[int], free: int) -> int:
    """The head-of-line stop: walk ``costs`` (of the order, from the head) within
    ``free`` budget (which may be negative); each cost that fits starts and takes
    its share, the first that does not fit stops the walk. Returns how many start."""
    n = 0
    for c in costs:
        if c > free:
            break
        free -= c
        n += 1
    return n
