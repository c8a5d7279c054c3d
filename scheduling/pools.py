"""Capacity pools (docs/scheduling.md, "Pools: capacity is several things"): the rules of
dispatch and the ETAs when a chart draws on several pools, and orgs have ceilings
(``max``) and guaranteed minimums (``min``) in a pool.

- A **pool** has a name and a capacity in units. The budget is the pool ``default``.
- A chart's **demand** is what its (org, workflow) draws on, ``{pool: units}``: a plain
  cost ``c`` is ``{"default": c}``. It starts only when every pool it draws on has room.
- :func:`dispatch_walk`, the head-of-line rule per pool. Walk the order; for each chart:

  1. **ceiling**: if its org holds ``max`` or would go past it in a pool it draws on (or
     an earlier chart of its org waits at that ceiling), it waits there; it blocks no pool.
  2. **behind**: else if a pool it draws on is blocked, it waits, and blocks every pool
     it draws on.
  3. **starts** if it fits in every pool it draws on;
  4. **pool**: else it waits, and blocks every pool it draws on.

  So a chart that cannot start blocks the later charts that share a pool with it, and
  never those that draw only on other pools. With one pool this is the head-of-line stop
  of :func:`.rules.head_of_line` exactly.
- **Minimums**: while an org holds less than its ``min`` in a pool its chart draws on,
  that chart is walked first: :func:`dispatch_walk` makes a pass over those charts alone
  (the same four steps), then the pass above over the rest, with the pools blocked by the
  first pass still blocked (the freed units go to the org below its minimum first).
- :func:`pool_etas`, the ETAs: the walk above fast-forwarded through the running charts'
  and then each started chart's estimated finishes. Without limits, the lane walk per
  pool with a floor per pool (a chart starts no earlier than any earlier chart that
  shares a pool with it), O(n log capacity); with limits, event by event, a walk per
  finish: O(n x charts walked), quadratic in the order with a minimum (see
  :func:`_event_walk`).

No Django, no I/O; every time is in seconds from the caller's ``now``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from heapq import heappop, heappush, heapreplace
from operator import itemgetter
from typing import Iterable, Mapping, NamedTuple, Sequence

from .lanes import lane_pass

DEFAULT_POOL = "default"
"""The pool of a plain cost: the budget."""

Demand = tuple  # ((pool, units), ...), sorted by pool: what one chart draws on

# Why a chart waits (the reason of a :class:`Wait`)
CEILING, BEHIND, POOL = "ceiling", "behind", "pool"
# Why a chart never starts under the current settings (:meth:`Pools.never`)
CAPACITY = "capacity"


class Wait(NamedTuple):
    """Why a chart of the order did not start: ``reason`` :data:`CEILING` (its org is at
    its ceiling in ``pool``), :data:`BEHIND` (an earlier chart blocks ``pool``) or
    :data:`POOL` (``pool`` has no room for it: it blocks the pools it draws on)."""

    reason: str
    pool: str


@dataclass(frozen=True, slots=True)
class Limit:
    """An org's ceiling (``max``, None: none) and guaranteed minimum (``min``) in a pool."""

    max: int | None = None
    min: int = 0


def demand_of(units: Mapping[str, int]) -> Demand:
    """``{pool: units}`` as a :data:`Demand` (sorted; pools of 0 units left out)."""
    return tuple(sorted((p, int(u)) for p, u in units.items() if u))


@dataclass(slots=True)
class Pools:
    """The pools, what each (org, workflow) draws on, and the orgs' limits.

    ``capacity``: pool -> units (``default`` included); ``demands``: (org, workflow) ->
    :data:`Demand` (a pair not listed draws 1 unit of ``default``); ``limits``: (org,
    pool) -> :class:`Limit`."""

    capacity: dict[str, int]
    demands: dict[tuple, Demand] = field(default_factory=dict)
    limits: dict[tuple[str, str], Limit] = field(default_factory=dict)

    def demand(self, org: str, workflow: str | None) -> Demand:
        d = self.demands.get((org, workflow))
        return ((DEFAULT_POOL, 1),) if d is None else d

    @property
    def has_limits(self) -> bool:
        return bool(self.limits)

    def ceiling(self, org: str, pool: str) -> int | None:
        lim = self.limits.get((org, pool))
        return None if lim is None else lim.max

    def never(self, org: str, demand: Demand) -> Wait | None:
        """Why a chart of ``org`` drawing ``demand`` can never start under these settings
        (None: it can): a pool it draws on is smaller than its units (``capacity``), or its
        org's ceiling there is (``ceiling``). Such a chart is blocked: out of the order,
        it blocks nobody (docs/scheduling.md, "1. Classify")."""
        for p, u in demand:
            if u > self.capacity.get(p, 0):
                return Wait(CAPACITY, p)
            m = self.ceiling(org, p)
            if m is not None and u > m:
                return Wait(CEILING, p)
        return None

    def dominant_share(self, demand: Demand) -> float:
        """The largest of the chart's shares of a pool, units / capacity (DRF's dominant
        share; inf if a pool it draws on has no capacity)."""
        best = 0.0
        for p, u in demand:
            cap = self.capacity.get(p, 0)
            s = u / cap if cap > 0 else math.inf
            if s > best:
                best = s
        return best


class Usage:
    """Units in use: per pool (``pool``) and per (org, pool) (``org``)."""

    __slots__ = ("pool", "org")

    def __init__(self) -> None:
        self.pool: dict[str, int] = {}
        self.org: dict[tuple[str, str], int] = {}

    def take(self, org: str, demand: Demand, sign: int = 1) -> None:
        pool, by_org = self.pool, self.org
        for p, u in demand:
            pool[p] = pool.get(p, 0) + sign * u
            k = (org, p)
            by_org[k] = by_org.get(k, 0) + sign * u

    def copy(self) -> "Usage":
        u = Usage()
        u.pool, u.org = dict(self.pool), dict(self.org)
        return u


class _Walk:
    """One dispatch walk's state: the free units, the blocked pools and the (org, pool)
    ceilings met (see :func:`dispatch_walk`)."""

    __slots__ = ("pools", "use", "free", "blocked", "capped", "n_pools")

    def __init__(self, pools: Pools, use: Usage) -> None:
        self.pools, self.use = pools, use
        self.free = {p: c - use.pool.get(p, 0) for p, c in pools.capacity.items()}
        self.blocked: set[str] = set()
        self.capped: set[tuple[str, str]] = set()
        self.n_pools = len(self.free)

    def step(self, org: str, demand: Demand) -> Wait | None:
        """The four steps for one chart: None if it starts (its units taken), else why not."""
        limits = self.pools.limits
        wait = None
        if limits:
            for p, u in demand:
                k = (org, p)
                if k in self.capped:
                    wait = Wait(CEILING, p)
                    continue
                lim = limits.get(k)
                if lim is not None and lim.max is not None and self.use.org.get(k, 0) + u > lim.max:
                    self.capped.add(k)
                    wait = Wait(CEILING, p)
            if wait is not None:
                return wait
        blocked, free = self.blocked, self.free
        for p, u in demand:
            if p in blocked:
                wait = Wait(BEHIND, p)
                break
            if wait is None and free.get(p, 0) < u:
                wait = Wait(POOL, p)
        if wait is not None:
            blocked.update(p for p, _ in demand)
            return wait
        for p, u in demand:
            free[p] -= u
        self.use.take(org, demand)
        return None

    def below_min(self, org: str, demand: Demand) -> bool:
        """True if ``org`` holds less than its minimum in a pool ``demand`` draws on."""
        limits, held = self.pools.limits, self.use.org
        for p, _ in demand:
            lim = limits.get((org, p))
            if lim is not None and lim.min and held.get((org, p), 0) < lim.min:
                return True
        return False

    @property
    def all_blocked(self) -> bool:
        return len(self.blocked) >= self.n_pools


def dispatch_walk(charts: Iterable[tuple[str, Demand]], pools: Pools, use: Usage, *,
                  whole: bool = False) -> tuple[list[int], dict[int, Wait]]:
    """The charts of the order that start now, given what is in ``use`` (updated with
    what starts): ``charts`` are (org, demand) from the head. Returns the started charts'
    indices, in order, and why each other chart walked did not start. The walk stops once
    every pool is blocked (nothing after can start), unless ``whole``: then every chart
    gets its reason. See the module's docstring for the rule."""
    if not pools.limits:
        return _walk_free(charts, pools, use, whole)
    w = _Walk(pools, use)
    started: list[int] = []
    waits: dict[int, Wait] = {}
    if any(lim.min for lim in pools.limits.values()):
        charts = list(charts)
        for i, (org, d) in enumerate(charts):  # the whole order: a ceiling met here holds in the next pass
            if w.below_min(org, d):
                why = w.step(org, d)
                if why is None:
                    started.append(i)
        done = set(started)
        for i, (org, d) in enumerate(charts):
            if i in done:
                continue
            if w.all_blocked and not whole:
                break
            why = w.step(org, d)
            if why is None:
                started.append(i)
            else:
                waits[i] = why
        started.sort()
        return started, waits
    for i, (org, d) in enumerate(charts):
        if w.all_blocked and not whole:
            break
        why = w.step(org, d)
        if why is None:
            started.append(i)
        else:
            waits[i] = why
    return started, waits


_WAITS: dict[str, dict[str, Wait]] = {CEILING: {}, BEHIND: {}, POOL: {}}
"""One :class:`Wait` per reason and pool, shared (a tuple: immutable): a walk of a few
charts would spend more building its reasons than walking."""


def _wait(reason: str, pool: str) -> Wait:
    w = _WAITS[reason].get(pool)
    if w is None:
        w = _WAITS[reason][pool] = Wait(reason, pool)
    return w


def _walk_free(charts, pools: Pools, use: Usage, whole: bool):
    """:func:`dispatch_walk` without limits (no ceiling to meet, no minimum to serve
    first): steps 2 to 4 inline, a demand of one pool without a loop. The same result as
    :meth:`_Walk.step` chart by chart (the Hypothesis property of tests/core/test_pools.py)."""
    pool_use, org_use = use.pool, use.org
    free = {p: c - pool_use.get(p, 0) for p, c in pools.capacity.items()}
    stop = math.inf if whole else len(free)  # every pool blocked: nothing after can start
    blocked: set[str] = set()
    started: list[int] = []
    waits: dict[int, Wait] = {}
    behind, short = _WAITS[BEHIND], _WAITS[POOL]
    for i, (org, d) in enumerate(charts):
        if len(blocked) >= stop:
            break
        if len(d) == 1:
            p, u = d[0]
            if p in blocked:
                waits[i] = behind.get(p) or _wait(BEHIND, p)
                continue
            if free.get(p, 0) < u:
                blocked.add(p)
                waits[i] = short.get(p) or _wait(POOL, p)
                continue
            free[p] -= u
            pool_use[p] = pool_use.get(p, 0) + u
            k = (org, p)
            org_use[k] = org_use.get(k, 0) + u
            started.append(i)
            continue
        wait = None
        for p, u in d:
            if p in blocked:
                wait = behind.get(p) or _wait(BEHIND, p)
                break
            if wait is None and free.get(p, 0) < u:
                wait = short.get(p) or _wait(POOL, p)
        if wait is not None:
            for p, _ in d:
                blocked.add(p)
            waits[i] = wait
            continue
        for p, u in d:
            free[p] -= u
            pool_use[p] = pool_use.get(p, 0) + u
            k = (org, p)
            org_use[k] = org_use.get(k, 0) + u
        started.append(i)
    return started, waits


# --------------------------------------------------------------------- ETAs
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
    estimates (see :func:`_lane_walk`); a demand of one pool without a loop to find its
    start. The ``u``-th earliest lane is read off the heap's top for u <= 2 (the second is a
    child of the root), by :func:`_nth_earliest` else."""
    starts: list = []
    fins: list = []
    sa, fa = starts.append, fins.append
    hreplace, nth = heapreplace, _nth_earliest
    for sp, est in zip(parts_of, ests):
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
    walk of :func:`dispatch_walk` over the charts not started yet; the started ones run
    for their estimates.

    Its cost: O(events x charts walked), the events at most the running charts plus
    ``n``. A walk stops once every pool is blocked, but walks past the charts waiting at
    a ceiling, and with a minimum its first pass walks every chart not started yet (and
    the list of those is rebuilt at each moment something starts): then the pass is
    quadratic in the order. bench/pools.py's backlog, 5 pools and 50 orgs, 2026-12-07 on a
    loaded machine: one ceiling 42 us a chart at 1k, 68 us at 4k; one minimum 242 us a
    chart at 1k, 732 us at 4k (without limits 1.4-2.9 us). Fine for a plan of thousands;
    at 100k with a minimum, not yet."""
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
    pending = list(range(n))
    t = 0.0
    while pending:
        while heap and heap[0][0] <= t:  # what has finished by t frees its units (at now too)
            _, _, org, demand = heappop(heap)
            use.take(org, demand, -1)
        started, _ = dispatch_walk(((order[i][0], order[i][1]) for i in pending), pools, use)
        for k in started:
            i = pending[k]
            org, demand, est = order[i]
            starts[i], fins[i] = t, t + est
            heappush(heap, (t + est, seq, org, demand))
            seq += 1
        if started:
            gone = set(started)
            pending = [i for k, i in enumerate(pending) if k not in gone]
        if not heap:
            break  # nothing runs and nothing can start: the rest never do
        if heap[0][0] > t:
            t = heap[0][0]
    return starts, fins


__all__ = ["BEHIND", "CAPACITY", "CEILING", "DEFAULT_POOL", "POOL", "Demand", "Limit", "Pools", "RunningUse",
           "Usage", "Wait", "demand_of", "dispatch_walk", "pool_etas"]

