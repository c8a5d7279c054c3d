"""The arrival rules: the round a chart takes when it arrives, under each share
(docs/scheduling.md, "Over time: the persistent round-robin" and "Share by work").

- :func:`arrival_round`: the share ``charts``, a turn is ``weight`` charts.
- :func:`arrival_tag`: the share ``work``, dominant-resource fairness by virtual tags: a
  chart of work ``x`` (budget-seconds: its dominant share x the budget x its estimate; with
  one pool its cost x estimate) advances its org's virtual time by ``x / weight``, and its
  round is a tick of virtual time (:data:`TICK_S`) between its virtual start and finish.
- :func:`arrival_turn`: the deficit round-robin ``work`` was until issue 43 (a turn of
  ``weight x quantum_s`` budget-seconds); kept as the reference the tests compare with.

:class:`scheduling.queue.FairQueue` keeps each org's ``last`` round and ``used`` and calls
these as charts arrive (``FairQueue._place``); the forecast pass calls
:func:`arrival_round` for its expected arrivals.
"""
from __future__ import annotations

import math
from math import ceil


def arrival_round(head: int, last: int | None, used: int, weight: int) -> tuple[int, int]:
    """The arrival rule of the persistent round-robin: a chart of an org whose highest
    assigned round is ``last`` (None: none), held by ``used`` of its charts, takes
    round ``r = max(head, last)``, or ``r + 1`` if ``r == last`` and ``used >= weight``.
    Returns ``(r, used)``: the round and how many of the org's charts hold it now."""
    if last is None:
        return head, 1
    r = last if last > head else head
    if r == last:
        if used < weight:
            return r, used + 1
        r += 1
    return r, 1


DEFAULT_QUANTUM_S = 600.0
"""``quantum_s``'s default: one cost-1 chart of the default estimate (600 s), so a turn of
weight w is w such charts, and with the default estimate ``work`` gives the ``charts``
order exactly (docs/scheduling.md, "Share by work")."""
MIN_EST_S = 0.001
"""A chart's work counts at least this many seconds (an estimate of 0 still takes a turn)."""
_EPS = 1e-9


def arrival_turn(head: int, last: int | None, used: float, turn: float, work: float
                 ) -> tuple[int, float, float]:
    """The arrival rule under the share ``work``, deficit round-robin: an org's turn in
    each round is ``turn`` (weight x quantum_s) budget-seconds; a chart of ``work``
    budget-seconds takes the first round in which the org's allowance, counted from where
    it entered, covers its work. ``used`` is the work counted in round ``last``.

    Where the org counts from: ``head`` if it has no round or fell behind the head (an
    org that empties starts afresh, no saved credit); the next round if ``last`` is full
    (``used >= turn``); else round ``last``, with ``used`` already counted. Returns
    ``(r, used, share)``: the round, the work counted in it now, and the chart's part of
    it. With ``work == 1`` and ``turn == weight`` this is :func:`arrival_round`."""
    if last is None or last < head:
        base, total = head, work
    elif used >= turn:
        base, total = last + 1, work
    else:
        base, total = last, used + work
    n = ceil(total / turn - _EPS)
    if n < 1:
        n = 1
    used_now = total - (n - 1) * turn
    return base + n - 1, used_now, (work if work < used_now else used_now)


TICK_S = 1.0
"""Under the share ``work``, a round is this much virtual time: one budget-second of work
per unit of weight (docs/scheduling.md, "Share by work"). Fine enough that an org's charts
rarely share a round, so the order follows the virtual tags, not the charts' ages."""


def arrival_tag(head: int, last: int | None, used: float, turn: float, work: float
                ) -> tuple[int, float, float]:
    """The arrival rule under the share ``work`` (docs/scheduling.md, "Share by work"):
    weighted fair queueing by virtual tags, counted in rounds of :data:`TICK_S`.

    The org's virtual time is ``pos = last + used / turn`` rounds (``turn``: weight x
    TICK_S budget-seconds, so a chart of ``work`` budget-seconds moves it by
    ``work / turn``). A chart's virtual start is ``pos``, or ``head`` (the system's virtual
    time) when the org is behind it (``last`` None or ``pos < head``: new, emptied or
    behind: it starts afresh, no saved credit); its virtual finish is start +
    work / turn. Its round is ``floor`` of its start for an org starting afresh, of its
    midpoint (start + work / (2 turn)) otherwise: between two charts of an org lie the mean
    of their works over its weight, never more than the larger.

    Returns ``(r, used, share)``: the round, the org's virtual finish past round ``r`` in
    budget-seconds (``last = r``, ``used``: ``pos`` is the finish), and the chart's part of
    it (what its dispatch counts in round ``r``; with the parts before it in ``r``, the
    org's ``used`` there)."""
    pos = last + used / turn if last is not None else None
    if pos is None or pos < head:
        start, key = float(head), float(head)
    else:
        start = pos
        key = pos + work / (2 * turn)
    fin = start + work / turn
    r = math.floor(key)
    if r < head:
        r = head
    used_now = (fin - r) * turn
    before = (start - r) * turn if last == r and start > r else 0.0
    return r, used_now, used_now - before
