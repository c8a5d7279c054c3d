"""The ETA pass with capacity pools (docs/scheduling.md, "Pools", "ETAs"): the order
fast-forwarded through the pools from now, each chart starting when the dispatch rule of
:mod:`scheduling.pools` would start it.

- Without limits, :func:`_lane_walk`: the lane walk per pool with a floor per pool,
  O(n log capacity).
- With limits (ceilings, minimums), :func:`_event_walk`: event by event, at now and at each
  estimated finish the dispatch walk over the charts not started yet, by streams (below).
"""
from __future__ import annotations

from bisect import bisect_right
from heapq import heapify, heappop, heappush, heapreplace
from operator import itemgetter
from typing import Iterable, Mapping, NamedTuple, Sequence

from .lanes import lane_pass
from .pools import Demand, Pools, Usage, Walk

class RunningUse(NamedTuple):
    """A running chart as the ETA pass sees it: its org, demand and remaining seconds."""

    org: str
    demand: Demand
    remaining_s: float


def pool_etas(order: Sequence[tuple[str, Demand, float]], running: Iterable[RunningUse], pools: Pools,
              ) -> tuple[list[float | None], list[float | None]]:
    """Each chart's start and finish (seconds from now) when the order (org, demand,
    estimate) is fast-forwarded through the pools from now, the ``running`` charts
    freeing their units at their estimated finishes. A chart that never starts gets None
    (the caller classifies those out first: :meth:`Pools.never`)."""
    running = list(running)
    if not pools.has_limits:
        return _lane_walk(order, running, pools)
    return _event_walk(order, running, pools)


def _lane_walk(order, running, pools: Pools):
    """Without limits: per pool the lanes at now (each unit free from some time on, the
    units lowered under running work left out), and a floor per pool, the latest start of
    a chart that drew on it. A chart starts at the latest of its pools' floors and of the
    time the ``u``-th earliest lane of each pool frees, finishes its estimate later, and
    takes those lanes until then; its start becomes the floor of every pool it draws on.
    The exact equivalent of :func:`_event_walk` with no limits (a Hypothesis property).

    Each distinct demand is read once into its pools' lanes (:func:`_parts`), and the
    walk (:func:`_walk_parts`) reads those per chart. When every chart draws 1 unit or
    more of one and the same pool and no estimate is negative, this is
    :func:`.lanes.lane_pass` on that pool's lanes, which is called: then a start is never
    below that pool's floor (each chart takes the earliest lanes and holds them past its
    start), so the floor changes nothing."""
    if not isinstance(order, (list, tuple)):
        order = list(order)
    dems = set(map(itemgetter(1), order))
    most: dict[str, int] = {}  # per pool, the most units a chart draws on it
    for d in dems:
        for p, u in d:
            if u > most.get(p, 0):
                most[p] = u
    lanes = _pool_lanes(running, pools, {p: len(order) * u for p, u in most.items()})
    return walk_lanes(order, lanes, dems)


def walk_lanes(order: Sequence[tuple[str, Demand, float]], lanes: dict[str, list[float]],
               dems: set | None = None) -> tuple[list[float | None], list[float | None]]:
    """The lane walk per pool with floors (see :func:`_lane_walk`) of ``order`` (org,
    demand, estimate) from each pool's ``lanes`` (sorted; taken as they are walked); the
    floors start at 0. Backfill's strict walk after its reserved charts calls it with the
    lanes the reservations leave (:mod:`.pool_reserve`)."""
    if dems is None:
        dems = set(map(itemgetter(1), order))
    if all(len(d) == 1 for d in dems):
        one = _one_pool(order, dems, lanes)
        if one is not None:
            return one
    index = {p: k for k, p in enumerate(lanes)}
    table = {d: _parts(d, lanes, index) for d in dems}
    return _walk_parts(map(table.__getitem__, map(itemgetter(1), order)), map(itemgetter(2), order),
                       [0.0] * len(index))


def _pool_lanes(running, pools: Pools, drawn: Mapping[str, int]) -> dict[str, list[float]]:
    """Each pool's lanes at now (a sorted list, so a heap): the running charts' remaining
    seconds, the ``capacity`` largest kept if there are more, else padded with zeros, but
    to no more lanes than the running units and ``drawn[pool]`` (at least the units the
    order draws on it) together: as in :func:`.lanes.lane_count`, the zero lanes left out
    are never reached (there are always enough untouched ones left for each chart), so the
    results are the same, and a pool of capacity 10**9 builds a few lanes, not 10**9."""
    busy: dict[str, list[float]] = {p: [] for p in pools.capacity}
    for r in running:
        rem = r.remaining_s if r.remaining_s > 0.0 else 0.0
        for p, u in r.demand:
            busy.setdefault(p, []).extend([rem] * u)
    lanes: dict[str, list[float]] = {}
    for p, cap in pools.capacity.items():
        b = sorted(busy.get(p, ()))
        pad = min(cap, len(b) + drawn.get(p, 0)) - len(b)
        lanes[p] = b[len(b) - cap:] if len(b) > cap else [0.0] * pad + b
        if cap <= 0:
            lanes[p] = []
    return lanes


def _one_pool(order, dems, lanes):
    """:func:`.lanes.lane_pass` on the lanes of the one pool every chart draws on, if they
    all draw on the same one, 1 unit or more, and no estimate is negative (else None)."""
    pool = {d[0][0] for d in dems}
    if len(pool) != 1 or min(d[0][1] for d in dems) < 1:
        return None
    est = itemgetter(2)
    total = sum(map(est, order))
    if not (min(map(est, order), default=0.0) >= 0.0 and total == total):  # (a NaN fails the second)
        return None
    ln = lanes.get(pool.pop())
    if ln is None:
        return [None] * len(order), [None] * len(order)
    units = map(itemgetter(1), map(itemgetter(0), map(itemgetter(1), order)))  # each demand's ((pool, u),)
    return lane_pass(zip(units, map(est, order)), ln)


def _parts(demand, lanes, index):
    """A demand as the walk reads it: None if it never fits (a pool unknown or smaller
    than its units), else per pool it draws on ``(lanes, k, u, (None,) * u)``: its lanes,
    its floor's place ``k`` in the list of floors, its units, and a tuple of ``u`` to loop
    over (no ``range`` to build per chart)."""
    parts = []
    for p, u in demand:
        ln = lanes.get(p)
        if ln is None or u > len(ln):
            return None
        parts.append((ln, index[p], u, (None,) * u))
    return tuple(parts)


def _walk_parts(parts_of, ests, floor: list[float]):
    """The lane walk per pool with floors over the charts' parts (:func:`_parts`) and
    estimates (see :func:`_lane_walk`): :func:`walk_items` of the two zipped."""
    return walk_items(zip(parts_of, ests), floor)


def walk_items(items, floor: list[float]):
    """The lane walk per pool with floors over ``(parts, estimate)`` items (:func:`_parts`,
    see :func:`_lane_walk`); a demand of one pool without a loop to find its start. The
    ``u``-th earliest lane is read off the heap's top for u <= 2 (the second is a child of
    the root), by :func:`_nth_earliest` else. ``items`` may be a generator: each item is
    read after the previous one has taken its lanes and set its floors (``floor`` and the
    lanes are changed in place), so a caller can read them before it yields the next (the
    forecast pass with pools does, to let expected arrivals in)."""
    starts: list = []
    fins: list = []
    sa, fa = starts.append, fins.append
    hreplace, nth = heapreplace, _nth_earliest
    for sp, est in items:
        if sp is None:
            sa(None)
            fa(None)
            continue
        if len(sp) == 1:
            ln, k, u, reps = sp[0]
            if u == 1:
                s = ln[0]
            elif u == 2 and len(ln) >= 3:
                s = ln[1]
                a = ln[2]
                if a < s:
                    s = a
            else:
                s = nth(ln, u)
            f = floor[k]  # >= 0, so s is not below 0 either (as the loop below starting at 0)
            if f > s:
                s = f
            fin = s + est
            for _ in reps:
                hreplace(ln, fin)
            floor[k] = s
        else:
            s = 0.0
            for ln, k, u, _ in sp:
                f = floor[k]
                if f > s:
                    s = f
                if u == 1:
                    t = ln[0]
                elif u == 2 and len(ln) >= 3:
                    t = ln[1]
                    a = ln[2]
                    if a < t:
                        t = a
                else:
                    t = nth(ln, u)
                if t > s:
                    s = t
            fin = s + est
            for ln, k, _, reps in sp:
                for _ in reps:
                    hreplace(ln, fin)
                floor[k] = s
        sa(s)
        fa(fin)
    return starts, fins


def _nth_earliest(heap: list[float], n: int) -> float:
    """The ``n``-th smallest of a heap (1-based), leaving the heap as it was: for n <= 3
    read off the heap's top levels (as :func:`.lanes.lane_pass` does), else popped and
    pushed back."""
    if n <= 1:
        return heap[0]
    size = len(heap)
    if n == 2 and size >= 3:
        a, b = heap[1], heap[2]
        return a if a < b else b
    if n == 3 and size >= 7:
        a, b = heap[1], heap[2]
        if a <= b:  # the second earliest is heap[1]; the third: heap[2] or heap[1]'s children
            t, x, y = b, heap[3], heap[4]
        else:
            t, x, y = a, heap[5], heap[6]
        return min(t, x, y)
    popped = [heappop(heap) for _ in range(n - 1)]
    t = heap[0]
    for x in popped:
        heappush(heap, x)
    return t


def _event_walk(order, running, pools: Pools):
    """With limits: event by event. At each moment (now, then each estimated finish) the
    walk of :func:`.pools.dispatch_walk` over the charts not started yet, made by
    :class:`_Streams`; the started ones run for their estimates. O(events x (starts + streams)
    x log streams): the charts an org's ceiling holds back are not walked one by one."""
    n = len(order)
    use = Usage()
    heap: list = []
    seq = 0
    for r in running:
        use.take(r.org, r.demand)
        heappush(heap, (max(0.0, r.remaining_s), seq, r.org, r.demand))
        seq += 1
    starts: list = [None] * n
    fins: list = [None] * n
    streams = _Streams(order, pools)
    left = n
    t = 0.0
    while left:
        while heap and heap[0][0] <= t:  # what has finished by t frees its units (at now too)
            _, _, org, demand = heappop(heap)
            use.take(org, demand, -1)
        for i in streams.walk(use):
            org, demand, est = order[i]
            starts[i], fins[i] = t, t + est
            heappush(heap, (t + est, seq, org, demand))
            seq += 1
            left -= 1
        if not heap:
            break  # nothing runs and nothing can start: the rest never do
        if heap[0][0] > t:
            t = heap[0][0]
    return starts, fins


class _Streams:
    """The charts not started yet as **streams**, one per (org, demand), each the indices of
    its charts in order; what has started is always a prefix of a stream (within a walk a
    stream yields its front charts until one does not start), so ``pos`` marks it.

    A walk (:meth:`walk`) takes the streams' fronts in order from a heap and steps each
    (:class:`.pools.Walk`, the rule itself); a front that waits drops its stream for the rest
    of the walk. Its later charts would wait too (at the same ceiling, or behind the pools
    its front blocked), and would block nothing new: all they could still do is meet their
    org's ceiling in a pool as its use grows, capping it for its org's later charts. That is
    made up exactly before each chart of that org is stepped (:meth:`_catch_up`): its use is
    constant between two of its charts stepped, so a dropped stream with a chart between
    them caps what that chart would have capped. The minimums' first pass walks the streams
    below a minimum only (usage grows within a walk: a stream that is no longer below stays
    so)."""

    def __init__(self, order, pools: Pools) -> None:
        self.pools = pools
        index: dict[tuple, int] = {}
        self.org: list[str] = []
        self.dem: list[Demand] = []
        self.idx: list[list[int]] = []
        for i, (org, demand, _) in enumerate(order):
            s = index.get((org, demand))
            if s is None:
                s = index[(org, demand)] = len(self.idx)
                self.org.append(org)
                self.dem.append(demand)
                self.idx.append([])
            self.idx[s].append(i)
        self.pos = [0] * len(self.idx)
        self.has_min = any(lim.min for lim in pools.limits.values())

    def walk(self, use: Usage) -> list[int]:
        """The charts that start now (their indices), ``use`` taken: :func:`.pools.dispatch_walk`."""
        w = Walk(self.pools, use)
        started: list[int] = []
        if self.has_min:
            self._pass(w, started, True)
        self._pass(w, started, False)
        return started

    def _pass(self, w: Walk, started: list[int], below_min: bool) -> None:
        idx, pos = self.idx, self.pos
        heap = [(idx[s][pos[s]], s) for s in range(len(idx)) if pos[s] < len(idx[s])]
        heapify(heap)
        last: dict[str, int] = {}        # org -> its last chart stepped in this pass
        dropped: dict[str, list] = {}    # org -> its streams dropped in this pass
        while heap:
            if not below_min and w.all_blocked:
                return  # nothing after can start (dispatch_walk's stop)
            i, s = heappop(heap)
            org, demand = self.org[s], self.dem[s]
            if below_min and not w.below_min(org, demand):
                continue  # its charts are not walked in this pass, nor will be
            if org in dropped:
                self._catch_up(w, org, last.get(org, -1), i, dropped[org], below_min)
            last[org] = i
            if w.step(org, demand) is None:
                started.append(i)
                pos[s] += 1
                if pos[s] < len(idx[s]):
                    heappush(heap, (idx[s][pos[s]], s))
            else:
                dropped.setdefault(org, []).append(s)

    def _catch_up(self, w: Walk, org: str, after: int, before: int, dropped: list[int], below_min: bool) -> None:
        """What the charts of ``org``'s dropped streams between its charts ``after`` and
        ``before`` would have done when walked: cap a pool whose ceiling they would pass."""
        limits, held = self.pools.limits, w.use.org
        for s in dropped:
            ix = self.idx[s]
            j = bisect_right(ix, after, self.pos[s] + 1)
            if j >= len(ix) or ix[j] >= before:
                continue
            if below_min and not w.below_min(org, self.dem[s]):
                continue
            for p, u in self.dem[s]:
                k = (org, p)
                lim = limits.get(k)
                if lim is not None and lim.max is not None and k not in w.capped and held.get(k, 0) + u > lim.max:
                    w.capped.add(k)


__all__ = ["RunningUse", "pool_etas", "walk_items", "walk_lanes"]
