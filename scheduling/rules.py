"""The rules of docs/scheduling.md, one function each.

Every path that schedules (the static plan, :mod:`scheduling.plan`; the live
order, :class:`scheduling.queue.FairQueue`; the simulator; the forecast
pass) calls these; none has its own copy. The ordering keys (the round-robin
key and its tie-breaks) are in :mod:`scheduling.keys`.

- :func:`is_held`: auto-hold, an org of weight 0 is held.
- :func:`classify`: held, paused, blocked or in the order.
- :func:`arrival_round`: the round a chart takes when it arrives (persistent
  round-robin).
- :func:`arrival_turn`: the same rule under the share ``work`` (deficit round-robin).
- :func:`head_of_line`: the head-of-line stop (dispatch within the free budget).
- :func:`lane_pass`: the lane walk (ETAs).

The hot ones take whole sequences (the loop is inside the function): a call per
chart would cost more than the work it does on a backlog of 10**5 charts.
"""
from __future__ import annotations

from heapq import heappop, heappush, heapreplace
from math import ceil
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


def lane_pass(cost_est: Iterable[tuple[int, float]], lanes: list[float], finishes: bool = True,
              ) -> tuple[list[float | None], list[float | None]]:
    """The lane walk, in O(n log budget): for each (cost c, estimate) in order, the
    chart starts when the c-th earliest lane frees (``lanes[c-1]`` of the sorted
    lanes), finishes ``estimate`` later and holds those c lanes until then.
    ``lanes`` is a heap (a sorted list is one) and is consumed. Returns parallel
    lists of starts and finishes; a chart whose cost exceeds the lanes gets None.

    ``cost_est`` may be a generator: it is read one item at a time, each after the
    previous one has taken its lanes, so a caller can look at ``lanes[0]`` (the
    earliest free lane) before it yields the next chart (the forecast pass does,
    to let expected arrivals in first) or stop early (a partial pass).

    ``finishes=False``: no list of finishes (empty), for a caller that adds durations of
    its own to the starts (the forecast pass): a float per chart less to hold.

    With a heap: the c-th earliest lane is read off the heap's top levels for c <= 3
    (the second is a child of the root, the third a child of the root or of the second),
    and the c earliest are replaced by the finish one at a time (with an estimate >= 0
    the finish is never earlier than the start, so each replace takes the next earliest); else,
    pop c-1 lanes, the c-th is ``lanes[0]``, replace it by the finish and push c-1 more
    copies. The lanes hold the same times either way (only their places in the heap
    differ)."""
    starts: list = []
    fins: list = []
    sa = starts.append
    fa = fins.append if finishes else bool  # (bool: a C call that keeps nothing)
    nl = len(lanes)
    hreplace, hpop, hpush = heapreplace, heappop, heappush
    for c, est in cost_est:
        if c == 1 and nl:
            start = lanes[0]
            fin = start + est
            hreplace(lanes, fin)
        elif c == 2 and nl >= 3 and est >= 0.0:
            a = lanes[1]
            b = lanes[2]
            start = a if a < b else b
            fin = start + est
            hreplace(lanes, fin)
            hreplace(lanes, fin)
        elif c == 3 and nl >= 7 and est >= 0.0:
            a = lanes[1]
            b = lanes[2]
            if a <= b:  # the second earliest is lanes[1]; the third: lanes[2] or its children
                start, x, y = b, lanes[3], lanes[4]
            else:
                start, x, y = a, lanes[5], lanes[6]
            if x < start:
                start = x
            if y < start:
                start = y
            fin = start + est
            hreplace(lanes, fin)
            hreplace(lanes, fin)
            hreplace(lanes, fin)
        elif 1 < c <= nl:
            for _ in range(c - 1):
                hpop(lanes)
            start = lanes[0]
            fin = start + est
            hreplace(lanes, fin)
            for _ in range(c - 1):
                hpush(lanes, fin)
        else:
            start = fin = None
        sa(start)
        fa(fin)
    return starts, fins
