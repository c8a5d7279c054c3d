"""Conservative backfill with capacity pools (policy ``dispatch = "backfill"`` with pools,
docs/scheduling.md, "Pools", "Backfill with pools"): the one-pool backfill of
:mod:`.reserve` with one reservation profile per pool.

- Each pool has its :class:`.reserve.Profile` (its capacity, the running charts' units in
  it until their estimated finishes, the guards' windows held in it).
- Walk the first ``depth`` charts of the order; a chart's **reservation** is the earliest
  time from which every pool it draws on has its units free for its estimated duration
  (for its 90% bound if it is reserved *ahead*), given the running charts and the
  reservations of every chart before it; its units are then taken in each of those pools.
  A chart starts now if its reservation is now.
- **Ahead** is per pool: each pool has a frontier, the latest reservation start of the
  charts before it that draw on that pool; a chart is ahead if it starts before the
  latest frontier of its pools (it could delay an earlier chart that shares a pool with
  it). A chart reserved ahead must fit for its bound, and clear of the guards' windows, in
  every pool it draws on; its own window is held in each of them.
- After the reserved charts, the strict walk per pool (:func:`.pool_lanes.walk_lanes`)
  from the lanes the reservations leave in each pool (each unit from the time it is free
  for good, the guards' windows held).

With one pool (``default``) every step is :mod:`.reserve`'s, so the result is the one-pool
backfill's exactly (a Hypothesis property).

**Orgs' limits** (docs/scheduling.md, "Backfill with limits"), given as ``limits`` and each
chart's org (``orgs``); without them every step above is unchanged:

- A **ceiling** (``max``) of an org in a pool is one more profile, of capacity ``max``, in
  which only that org's charts draw: its running charts in that pool until their estimated
  finishes, and its reservations there. A chart of that org drawing on that pool must fit
  in it too (:meth:`PoolProfiles.expand`), for its window (its bound if ahead, clear of the
  guards' windows held in it). So a chart at its ceiling reserves nothing until its org's
  use there leaves it room, blocks no one meanwhile, and no reservation ever takes an org
  past its ceiling at any moment of its window.
- A **minimum** (``min``): first, in order, each chart of an org with a minimum in a pool
  it draws on gets a priority reservation, the earliest time it fits at which its org
  holds less than that minimum there; then, in order, every chart its reservation, one
  with a priority reservation giving it back first and keeping the earlier of the two
  (:func:`_limited_walk`). "Before" (the frontiers, ahead) is the reservations held at
  each step: a frontier is the latest start of those held in its pool.
- After the reserved charts, the strict walk *with limits* (:func:`.pools.dispatch_walk`,
  fast-forwarded by :func:`.pool_lanes.pool_etas`) from what the reservations leave, each
  unit of a pool and of an org's ceiling from the time it is free for good
  (:func:`tail_running`).

Times are seconds from now. A guard's hold is (start, estimated end, bound's end, units),
absolute times; its units an int for ``{"default": units}`` (the one-pool form, saved as
it always was), else a mapping or pairs of pool -> units.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Iterable, Iterator, Mapping, Sequence

from .pools import DEFAULT_POOL, Demand, Limit
from .reserve import Profile, window_end

_INF = float("inf")


def hold_units(demand: Demand) -> int | dict | list:
    """A demand as a hold records it: an int for the pool ``default`` alone (as the
    one-pool backfill saves it), else ``{pool: units}``; a demand expanded with ceilings
    (:meth:`PoolProfiles.expand`) as ``[[pool, units], ..., [pool, units, org], ...]``, a
    triple for each org's ceiling it holds units under."""
    if any(not isinstance(p, str) for p, _ in demand):
        return [[p, u] if isinstance(p, str) else [p[1], u, p[0]] for p, u in demand]
    if len(demand) == 1 and demand[0][0] == DEFAULT_POOL:
        return demand[0][1]
    return dict(demand)


def units_of(units) -> Iterator[tuple]:
    """The (pool, units) of a hold's units (an int, a mapping, or pairs read back from
    JSON); a triple [pool, units, org] is (``(org, pool)``, units): that org's ceiling."""
    if isinstance(units, int):
        return iter(((DEFAULT_POOL, units),))
    if isinstance(units, Mapping):
        return iter(units.items())
    return ((x[0], x[1]) if len(x) == 2 else ((x[2], x[0]), x[1]) for x in units)


class PoolProfiles:
    """One :class:`.reserve.Profile` per pool, and each pool's frontier; with limits, one
    per (org, pool) with a limit (``virtual``: of capacity its ``max``, else the pool's),
    the org's units in that pool, and ``held``, its running charts' units there."""

    __slots__ = ("profiles", "frontier", "limits", "virtual", "held", "_by", "_starts")

    def __init__(self, capacity: Mapping[str, int], running: Iterable[tuple],
                 origin: float = 0.0, limits: Mapping[tuple[str, str], Limit] | None = None) -> None:
        """``running``: (remaining seconds, demand) of each running chart, or (remaining
        seconds, demand, org) (with ``limits``: an org's running charts count under its
        limits); a pool it draws on that is gone has capacity 0. ``origin``: now, in
        absolute time. ``limits``: (org, pool) -> :class:`.pools.Limit`."""
        lim = {k: v for k, v in (limits or {}).items() if v.max is not None or v.min}
        per: dict[str, list[tuple[float, int]]] = {p: [] for p in capacity}
        org_per: dict[tuple, list[tuple[float, int]]] = {k: [] for k in lim}
        for r in running:
            rem, demand = r[0], r[1]
            for p, u in demand:
                per.setdefault(p, []).append((rem, u))
                if lim:
                    k = (r[2] if len(r) > 2 else None, p)
                    if k in org_per:
                        org_per[k].append((rem, u))
        self.profiles = {p: Profile(capacity.get(p, 0), run, origin) for p, run in per.items()}
        self.frontier = dict.fromkeys(self.profiles, 0.0)
        self.limits = lim
        self.virtual = {k: Profile(v.max if v.max is not None else capacity.get(k[1], 0), org_per[k], origin)
                        for k, v in lim.items()}
        self.held = {k: sum(u for _, u in run) for k, run in org_per.items()}
        self._by = {**self.profiles, **self.virtual} if lim else self.profiles
        self._starts: dict[str, list[float]] = {}  # with limits: each pool's reservations' starts

    def expand(self, org, demand: Demand) -> Demand:
        """``demand`` with, for each pool it draws on where ``org`` has a limit, the same
        units in that org's profile there (keyed ``(org, pool)``): what a reservation takes."""
        virtual = self.virtual
        if not virtual:
            return demand
        extra = tuple(((org, p), u) for p, u in demand if (org, p) in virtual)
        return demand + extra if extra else demand

    def hold(self, holds: Iterable[tuple], now: float) -> None:
        """The guards' windows of the charts started ahead, each in the pools it drew on
        (and under the ceilings it drew under)."""
        by = self._by
        for s, e, b, units in holds:
            for p, u in units_of(units):
                pr = by.get(p)
                if pr is not None:
                    pr.hold([(s, e, b, u)], now)

    def any_free_now(self) -> bool:
        """True if some pool has a unit free now (else nothing can start now)."""
        return any(pr.free[0] >= 1 for pr in self.profiles.values())

    def front(self, demand: Demand) -> float:
        """The latest frontier of the pools ``demand`` draws on."""
        fr = self.frontier
        return max((fr.get(p, 0.0) for p, _ in demand), default=0.0)

    def earliest(self, demand: Demand, d: float, bound: float, front: float) -> float | None:
        """The reservation's start of a chart drawing ``demand`` for ``d`` seconds (``bound``
        if ahead of ``front``), None if it never fits. One pool: :meth:`.Profile.earliest`.
        ``demand`` may be expanded (:meth:`expand`): it then fits under the ceilings too."""
        profiles = self._by
        if len(demand) == 1:
            p, u = demand[0]
            pr = profiles.get(p)
            if pr is None:
                return None
            i = pr.earliest(u, d, bound, front)
            return None if i < 0 else pr.times[i]
        return self._earliest_from(demand, d, bound, front, 0.0)

    def reserve(self, t: float, demand: Demand, d: float, bound: float | None) -> float:
        """Take ``demand`` from ``t`` for ``d`` seconds in each of its pools (``bound``: a
        reservation ahead, its window held); each pool's frontier moves to ``t``. Returns
        the finish. ``demand`` may be expanded (:meth:`expand`)."""
        end = t + d
        by, fr = self._by, self.frontier
        for p, u in demand:
            pr = by[p]
            times = pr.times
            i = bisect_left(times, t)
            if i == len(times) or times[i] != t:
                pr._split(t)
            end = pr.reserve(i, u, d, bound)
            if p in fr:
                if t > fr[p]:
                    fr[p] = t
                if self.limits:
                    self._starts.setdefault(p, []).append(t)
        return end

    def release(self, t: float, demand: Demand, d: float, bound: float | None) -> None:
        """Give back a reservation :meth:`reserve` made (the same arguments): its units, its
        guard's window, and its start from each pool's frontier (with limits only)."""
        by, fr = self._by, self.frontier
        for p, u in demand:
            pr = by[p]
            pr.reserve(bisect_left(pr.times, t), -u, d)
            if bound is not None and bound > d:
                pr.guards.remove((t + d, window_end(pr.origin + t + bound) - pr.origin, u))
            if p in fr:
                st = self._starts[p]
                st.remove(t)
                fr[p] = max(st, default=0.0)

    def earliest_below_min(self, demand: Demand, d: float, bound: float, front: float,
                           mins: Sequence[tuple[Profile, int]]) -> float | None:
        """The earliest time ``demand`` (expanded) fits, as :meth:`earliest`, at which its
        org holds less than ``min`` in one of ``mins`` (its profile per (org, pool), of
        capacity ``budget``: it holds ``budget - free``). None: never."""
        t0 = 0.0
        while True:
            t = self._earliest_from(demand, d, bound, front, t0)
            if t is None:
                return None
            nxt = _INF
            for pr, m in mins:
                times, free = pr.times, pr.free
                i = bisect_right(times, t) - 1
                if pr.budget - free[i] < m:
                    return t
                for j in range(i + 1, len(times)):
                    if pr.budget - free[j] < m:
                        nxt = min(nxt, times[j])
                        break
            if nxt == _INF:
                return None
            t0 = nxt

    def _earliest_from(self, demand: Demand, d: float, bound: float, front: float, t: float) -> float | None:
        """:meth:`earliest` from ``t`` on: the earliest time every pool agrees on (each moves it
        only later)."""
        profiles = self._by
        moved = True
        while moved:
            moved = False
            for p, u in demand:
                pr = profiles.get(p)
                s = None if pr is None else earliest_from(pr, u, d, bound, front, t)
                if s is None:
                    return None
                if s > t:
                    t, moved = s, True
        return t

    def free_for_good(self) -> dict[str, int]:
        """Per pool, the units free from now on for good (the guards' windows held)."""
        return {p: pr.free_for_good() for p, pr in self.profiles.items()}

    def lanes(self, drawn: Mapping[str, int]) -> dict[str, list[float]]:
        """Per pool the lanes the reservations leave (:meth:`.Profile.lanes`), as many as
        ``drawn`` (the units the later charts draw on it) and the capacity allow: the
        lanes past them are never reached (each is no earlier than those kept)."""
        return {p: pr.lanes(min(max(pr.budget, 0), drawn.get(p, 0))) for p, pr in self.profiles.items()}


def earliest_from(pr: Profile, c: int, d: float, bound: float, front: float, t0: float) -> float | None:
    """The earliest time from ``t0`` on at which ``c`` fits in ``pr`` for ``d`` seconds (for
    ``bound``, and clear of the guards' windows, if it is before ``front``): the rule of
    :meth:`.Profile.earliest` from any time. None: never."""
    if c > pr.budget:
        return None
    times, free = pr.times, pr.free
    n = len(times)
    s = t0
    i = bisect_right(times, s) - 1
    while True:
        nxt = times[i + 1] if i + 1 < n else _INF
        if free[i] >= c:
            ahead = s < front
            w = bound if ahead and bound > d else d
            j = pr.fits(i, c, w, s)
            if j < 0 and ahead and pr.guards:
                j = pr.clear_of_guards(i, c, w, s)
            if j < 0:
                return s
            # any start before the step after j still meets step j, unless it is past the
            # frontier (its window shrinks to the estimate there)
            nxt = times[j + 1] if j + 1 < n else _INF
            if ahead and front < nxt:
                nxt = front
        if nxt == _INF:
            return None
        s = nxt
        i = bisect_right(times, s) - 1


def _limited_walk(items: Sequence[tuple[Demand, float, float]], prof: PoolProfiles, orgs: Sequence,
                  ) -> tuple[list[float | None], list[float | None], list[int]]:
    """The reservations with limits (see the module's docstring): starts, finishes, and the
    indexes of the charts reserved ahead under their guard.

    1. **Minimums first**: in order, each chart of an org with a ``min`` in a pool it draws
       on gets its *priority* reservation: the earliest time it fits (as any reservation:
       its pools, its org's ceilings, ahead or not) at which its org holds less than that
       minimum there (the running charts until their estimated finishes and the
       reservations so far counted at that instant: a unit its org frees goes to it first).
    2. **Then the order**: each chart in order gets its reservation; a chart with a
       priority reservation gives it back first and keeps the earlier of the two (so a
       minimum never makes a chart later than it would be without it)."""
    n = len(items)
    starts: list = [None] * n
    fins: list = [None] * n
    ahead: list = [False] * n
    dems = [prof.expand(orgs[i], items[i][0]) for i in range(n)]
    mins = {k: v.min for k, v in prof.limits.items() if v.min}
    if mins:
        _minimums_first(items, prof, orgs, dems, mins, starts, fins, ahead)
    for i in range(n):
        dem, d, b = items[i]
        tp = starts[i]
        if tp is not None:
            prof.release(tp, dems[i], d, b if ahead[i] else None)
        front = prof.front(dem)
        t = prof.earliest(dems[i], d, b, front)
        if t is None or (tp is not None and t >= tp):
            if tp is not None:  # its priority reservation again, as it was
                prof.reserve(tp, dems[i], d, b if ahead[i] else None)
            continue
        ahead[i] = t < front
        starts[i], fins[i] = t, prof.reserve(t, dems[i], d, b if ahead[i] else None)
    guarded = [i for i in range(n) if starts[i] is not None and ahead[i] and items[i][2] > items[i][1]]
    return starts, fins, guarded


def _minimums_first(items, prof: PoolProfiles, orgs: Sequence, dems: list, mins: dict,
                    starts: list, fins: list, ahead: list) -> None:
    """Step 1 of :func:`_limited_walk`: each chart of an org with a minimum in a pool it draws
    on gets its priority reservation (set in ``starts``, ``fins`` and ``ahead``), in order."""
    for i, (dem, d, b) in enumerate(items):
        keys = [(orgs[i], p) for p, _ in dem if (orgs[i], p) in mins]
        if not keys:
            continue
        front = prof.front(dem)
        t = prof.earliest_below_min(dems[i], d, b, front, [(prof.virtual[k], mins[k]) for k in keys])
        if t is None:
            continue
        ahead[i] = t < front
        starts[i], fins[i] = t, prof.reserve(t, dems[i], d, b if ahead[i] else None)


def reserve_walk(items: Sequence[tuple[Demand, float, float]], prof: PoolProfiles,
                 orgs: Sequence | None = None) -> tuple[list[float | None], list[float | None]]:
    """Reserve ``items`` (demand, estimate, 90% bound), in order: parallel starts and
    finishes (None: it never fits). :func:`.reserve.reserve_walk` per pool. With limits
    (``orgs``: each chart's org), :func:`_limited_walk`."""
    if orgs is not None and prof.limits:
        return _limited_walk(items, prof, orgs)[:2]
    starts: list = []
    fins: list = []
    for dem, d, b in items:
        front = prof.front(dem)
        t = prof.earliest(dem, d, b, front)
        if t is None:
            starts.append(None)
            fins.append(None)
            continue
        starts.append(t)
        fins.append(prof.reserve(t, dem, d, b if t < front else None))
    return starts, fins


def startable_now(items: Sequence[tuple[Demand, float, float]], prof: PoolProfiles,
                  guarded: list[int] | None = None, orgs: Sequence | None = None) -> list[int]:
    """The indexes of ``items`` whose reservation is now (what dispatch starts), stopping
    once no pool has a unit free now; ``guarded`` collects those started ahead under their
    guard. :func:`.reserve.startable_now` per pool. With limits (``orgs``: each chart's
    org), the whole walk of :func:`_limited_walk` (at most ``depth`` charts)."""
    if orgs is not None and prof.limits:
        if not prof.any_free_now():
            return []
        starts, _, ahead = _limited_walk(items, prof, orgs)
        out = [i for i, t in enumerate(starts) if t == 0.0]
        if guarded is not None:
            guarded.extend(i for i in ahead if starts[i] == 0.0)
        return out
    out = []
    for n, (dem, d, b) in enumerate(items):
        if not prof.any_free_now():
            break
        front = prof.front(dem)
        t = prof.earliest(dem, d, b, front)
        if t is None:
            continue
        prof.reserve(t, dem, d, b if t < front else None)
        if t == 0.0:
            out.append(n)
            if guarded is not None and t < front and b > d:
                guarded.append(n)
    return out


NOBODY = ("", "(the reservations)")
"""The org of :func:`tail_running`'s pseudo charts holding a pool's units (no limits)."""


def tail_running(prof: PoolProfiles) -> list[tuple]:
    """What the reservations leave, as running charts for the strict walk with limits after
    them (:func:`.pools.dispatch_walk`, :func:`.pool_lanes.pool_etas`): (org, demand,
    remaining seconds), each unit of a pool in use until it is free for good (the guards'
    windows held), under :data:`NOBODY`; each unit of an org's limited (org, pool) the same
    under that org, with as many units taken back from the pool under :data:`NOBODY` (so
    the pool counts it once). The entries at 0 are free now."""
    out: list[tuple] = []
    for key, pr in prof._by.items():
        times, free = pr.guarded_steps()
        n = len(times)
        suffix = [0] * n  # the units free for good from each step on
        m = free[-1]
        for i in range(n - 1, -1, -1):
            if free[i] < m:
                m = free[i]
            suffix[i] = m
        steps = [(0.0, pr.budget - suffix[0])]  # in use now, freed over time below
        for i in range(1, n):
            if suffix[i] > suffix[i - 1]:
                steps.append((times[i], suffix[i] - suffix[i - 1]))
        busy = steps[0][1]
        frees = steps[1:]
        if busy <= 0 and not frees:
            continue
        if isinstance(key, str):
            for t, u in frees:
                out.append((NOBODY, ((key, u),), t))
            if busy > sum(u for _, u in frees):  # (the last step has the whole budget free: never)
                out.append((NOBODY, ((key, busy - sum(u for _, u in frees)),), float("inf")))
        else:
            org, p = key
            for t, u in frees:
                out.append((org, ((p, u),), t))
                out.append((NOBODY, ((p, -u),), t))
    return out


def strict_now(demands: Iterable[Demand], free: Mapping[str, int]) -> list[int]:
    """The strict walk per pool after the reserved charts, now: the indexes of the charts
    that start within ``free`` (each pool's units free for good), a chart that does not fit
    blocking the pools it draws on. Stops once every pool with a unit free is blocked or
    full."""
    free = dict(free)
    blocked: set[str] = set()
    open_ = {p for p, f in free.items() if f >= 1}
    out = []
    for i, dem in enumerate(demands):
        if not open_:
            break
        if any(p in blocked or free.get(p, 0) < u for p, u in dem):
            for p, _ in dem:
                blocked.add(p)
                open_.discard(p)
            continue
        for p, u in dem:
            free[p] -= u
            if free[p] < 1:
                open_.discard(p)
        out.append(i)
    return out


__all__ = ["NOBODY", "PoolProfiles", "earliest_from", "hold_units", "reserve_walk", "startable_now", "strict_now",
           "tail_running", "units_of"]
