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
from typing import Any, Iterable, Mapping, NamedTuple


DEFAULT_POOL = "default"
"""The pool of a plain cost: the budget."""

Demand = tuple  # ((pool, units), ...), sorted by pool: what one chart draws on

# Why a chart waits (the reason of a :class:`Wait`); under backfill, RESERVED (its
# reservation per pool is later: scheduling.pool_reserve)
CEILING, BEHIND, POOL, RESERVED = "ceiling", "behind", "pool", "reserved"
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

    def held(self, running: Any) -> Demand:
        """What a running chart holds: the demand it started with (``running.demand``, kept
        across restarts in ``Chart.dispatched_pools``), else its pair's now (``org``,
        ``workflow``; the org an id or its text)."""
        d = running.demand
        return self.demand(str(running.org), running.workflow) if d is None else d

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


class Walk:
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
    w = Walk(pools, use)
    started: list[int] = []
    waits: dict[int, Wait] = {}
    done: set[int] = set()
    if any(lim.min for lim in pools.limits.values()):
        charts = list(charts)
        for i, (org, d) in enumerate(charts):  # the whole order: a ceiling met here holds in the next pass
            if w.below_min(org, d) and w.step(org, d) is None:
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
    if done:
        started.sort()
    return started, waits


def starts_now(charts: Iterable[tuple[object, Demand]], free: dict[str, int]) -> list:
    """The charts that start now: ``charts`` are (chart, demand) of the order from the head,
    ``free`` the units free per pool (updated with what starts); returns the started charts
    (the first of each pair), in order. :func:`dispatch_walk` without limits, its reasons and
    its usage: what the live queue asks each time capacity frees. It reads the order until
    every pool is blocked: with several pools, more charts than the one budget's walk, which
    stops at the first chart that does not fit (docs/scheduling.md, "What a walk reads")."""
    n = len(free)
    blocked: set[str] = set()
    out: list = []
    for chart, d in charts:
        if len(d) == 1:
            p, u = d[0]
            if p in blocked:
                continue
            if free.get(p, 0) < u:
                blocked.add(p)
                if len(blocked) >= n:
                    break
                continue
            free[p] -= u
            out.append(chart)
            continue
        for p, u in d:
            if p in blocked or free.get(p, 0) < u:
                blocked.update(q for q, _ in d)
                break
        else:
            for p, u in d:
                free[p] -= u
            out.append(chart)
            continue
        if len(blocked) >= n:
            break
    return out


_ONE = ((DEFAULT_POOL, 1),)  # the demand of a pair not listed (:meth:`Pools.demand`)
_SHUT = -math.inf  # a blocked pool's free units in :func:`starts_keyed`: no chart fits in it


def starts_keyed(keys: Iterable[tuple], demands: Mapping[tuple, Demand], free: dict[str, int],
                 at: int) -> list:
    """:func:`starts_now` over ``keys`` of the order from the head, each key's demand
    ``demands.get(key[at])`` (a pair not listed: 1 unit of ``default``): the live queue's
    walk, read from its keys with no (chart, demand) pair built per chart. The same charts
    start (the Hypothesis property of tests/core/test_pool_decision.py). ``free`` is used up:
    a blocked pool's entry is set to -inf (so one test per pool reads both "blocked" and
    "too small"), a started chart's units are taken."""
    get, one, shut = demands.get, _ONE, _SHUT
    n = len(free)
    shut_n = 0  # pools blocked
    out: list = []
    for k in keys:
        d = get(k[at], one)
        if len(d) == 1:
            p, u = d[0]
            f = free.get(p, 0)
            if f < u:
                if f != shut:
                    free[p] = shut
                    shut_n += 1
                    if shut_n >= n:
                        break
                continue
            free[p] = f - u
            out.append(k)
            continue
        for p, u in d:
            if free.get(p, 0) < u:
                for q, _ in d:
                    if free.get(q, 0) != shut:
                        free[q] = shut
                        shut_n += 1
                break
        else:
            for p, u in d:
                free[p] -= u
            out.append(k)
            continue
        if shut_n >= n:
            break
    return out


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
    :meth:`Walk.step` chart by chart (the Hypothesis property of tests/core/test_pools.py)."""
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


__all__ = ["BEHIND", "CAPACITY", "CEILING", "DEFAULT_POOL", "POOL", "RESERVED", "Demand", "Limit", "Pools", "Usage", "Wait",
           "Walk", "demand_of", "dispatch_walk", "starts_keyed", "starts_now"]

