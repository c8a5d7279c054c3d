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
backfill's exactly (a Hypothesis property). Orgs' limits (ceilings, minimums) are not
defined with backfill: the callers refuse them or dispatch strict.

Times are seconds from now. A guard's hold is (start, estimated end, bound's end, units),
absolute times; its units an int for ``{"default": units}`` (the one-pool form, saved as
it always was), else a mapping or pairs of pool -> units.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Iterable, Iterator, Mapping, Sequence

from .pools import DEFAULT_POOL, Demand
from .reserve import Profile

_INF = float("inf")


def hold_units(demand: Demand) -> int | dict:
    """A demand as a hold records it: an int for the pool ``default`` alone (as the
    one-pool backfill saves it), else ``{pool: units}``."""
    if len(demand) == 1 and demand[0][0] == DEFAULT_POOL:
        return demand[0][1]
    return dict(demand)


def units_of(units) -> Iterator[tuple[str, int]]:
    """The (pool, units) of a hold's units (an int, a mapping, or pairs read back from JSON)."""
    if isinstance(units, int):
        return iter(((DEFAULT_POOL, units),))
    if isinstance(units, Mapping):
        return iter(units.items())
    return ((p, u) for p, u in units)


class PoolProfiles:
    """One :class:`.reserve.Profile` per pool, and each pool's frontier."""

    __slots__ = ("profiles", "frontier")

    def __init__(self, capacity: Mapping[str, int], running: Iterable[tuple[float, Demand]],
                 origin: float = 0.0) -> None:
        """``running``: (remaining seconds, demand) of each running chart; a pool it draws
        on that is gone has capacity 0. ``origin``: now, in absolute time."""
        per: dict[str, list[tuple[float, int]]] = {p: [] for p in capacity}
        for rem, demand in running:
            for p, u in demand:
                per.setdefault(p, []).append((rem, u))
        self.profiles = {p: Profile(capacity.get(p, 0), run, origin) for p, run in per.items()}
        self.frontier = dict.fromkeys(self.profiles, 0.0)

    def hold(self, holds: Iterable[tuple], now: float) -> None:
        """The guards' windows of the charts started ahead, each in the pools it drew on."""
        for s, e, b, units in holds:
            for p, u in units_of(units):
                pr = self.profiles.get(p)
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
        if ahead of ``front``), None if it never fits. One pool: :meth:`.Profile.earliest`."""
        profiles = self.profiles
        if len(demand) == 1:
            p, u = demand[0]
            pr = profiles.get(p)
            if pr is None:
                return None
            i = pr.earliest(u, d, bound, front)
            return None if i < 0 else pr.times[i]
        t = 0.0
        moved = True
        while moved:  # the earliest time every pool agrees on (each moves it only later)
            moved = False
            for p, u in demand:
                pr = profiles.get(p)
                s = None if pr is None else earliest_from(pr, u, d, bound, front, t)
                if s is None:
                    return None
                if s > t:
                    t, moved = s, True
        return t

    def reserve(self, t: float, demand: Demand, d: float, bound: float | None) -> float:
        """Take ``demand`` from ``t`` for ``d`` seconds in each of its pools (``bound``: a
        reservation ahead, its window held); each pool's frontier moves to ``t``. Returns
        the finish."""
        end = t + d
        for p, u in demand:
            pr = self.profiles[p]
            times = pr.times
            i = bisect_left(times, t)
            if i == len(times) or times[i] != t:
                pr._split(t)
            end = pr.reserve(i, u, d, bound)
            if t > self.frontier[p]:
                self.frontier[p] = t
        return end

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


def reserve_walk(items: Sequence[tuple[Demand, float, float]], prof: PoolProfiles,
                 ) -> tuple[list[float | None], list[float | None]]:
    """Reserve ``items`` (demand, estimate, 90% bound), in order: parallel starts and
    finishes (None: it never fits). :func:`.reserve.reserve_walk` per pool."""
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


def startable_now(items: Iterable[tuple[Demand, float, float]], prof: PoolProfiles,
                  guarded: list[int] | None = None) -> list[int]:
    """The indexes of ``items`` whose reservation is now (what dispatch starts), stopping
    once no pool has a unit free now; ``guarded`` collects those started ahead under their
    guard. :func:`.reserve.startable_now` per pool."""
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


__all__ = ["PoolProfiles", "earliest_from", "hold_units", "reserve_walk", "startable_now", "strict_now", "units_of"]
