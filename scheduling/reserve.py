"""Conservative backfill (policy ``dispatch = "backfill"``, docs/scheduling.md).

Walk the order; each chart gets the earliest **reservation**: the earliest time from
which its cost fits the budget for its estimated duration, given the running charts'
estimated finishes and the reservations of every chart before it. A chart whose
reservation is now starts now. Guard: a chart reserved *ahead* of an earlier chart (it
would start before an earlier chart's reservation) must fit for its 90% bound too
(``bound``, :data:`P90_RATIO` x its estimate unless the caller knows better), so that
running long it still ends before the reservation it would otherwise delay. The guard's
window (from the estimate's end to the bound's end) then stays held for every later chart
reserved ahead (:meth:`Profile.clear_of_guards`), while the chart is queued, running or
done (the queue's holds, :meth:`Profile.hold`), until its end, which is a step of the
profile: so the next dispatch walks the same reservations (docs/scheduling.md, "Backfill").
A window ends on a one-second grid of absolute time (:func:`window_end`), so the windows
ending within the same second are one step, however many are held.

Only the first ``depth`` charts of the order are reserved this way (Slurm's
``bf_max_job_test``; :data:`DEFAULT_DEPTH`); the charts after them take the strict lane
walk (:func:`.lanes.lane_pass`) from the lanes the reservations leave (each budget unit
from the time it is free for good): never backfilled, never earlier than the
reservations allow. A reservation made ahead of an earlier one holds its units in those
lanes until its 90% bound, not its estimate: the guard's window. A chart past the depth
placed in that window would make the guard fail at the next dispatch and push the
reservation it protects back (found by ``tests/core/test_policies.py``: a chart then
started later than under strict). Dispatch and the ETA pass walk the same reservations
with the same depth, so dispatch starts exactly the charts whose ETA starts now.

Times are seconds from now (0 is now), as in every ETA pass. The profile is the free
budget over time, a step function: ``times[i]`` (sorted, ``times[0] == 0``) and
``free[i]`` on ``[times[i], times[i + 1])``, the last step for ever. It may be negative
(a budget lowered under running work). A reservation is O(P) in the profile's steps
P <= 3 x depth + running charts + the windows held, so a walk is O(depth x P), whatever
the backlog; a chart reserved ahead is checked against the windows it meets, O(P x G)
for G of them (few: only charts started ahead under their guard have one).
"""
from __future__ import annotations

import math
from bisect import bisect_left
from typing import Iterable, Sequence

DEFAULT_DEPTH = 100
"""How many charts of the order are reserved (the rest take the strict lane walk)."""

P90_RATIO = 1.5
"""A chart's 90% bound when the caller gives none: 1.5 x its estimate (a log-normal run
time with sigma 0.4 has its 90th percentile at 1.54 x its mean)."""


WINDOW_GRID_S = 1.0
"""A guard's window ends on this grid of absolute time (its bound's end rounded up): windows
ending within the same second end together, one step of the profile for all of them, not
one each (``bench/backfill_holds.py``). Held at most this much longer than its bound."""


def window_end(at: float) -> float:
    """A guard's window's end for a bound ending at ``at`` (absolute): up to the grid."""
    return math.ceil(at / WINDOW_GRID_S) * WINDOW_GRID_S


OVERRUN_S = 1e-6
"""When a running chart past its estimate frees its cost, in a profile: not now (it still
holds it, so nothing is started in its place), but at once after."""


class Profile:
    """The free budget from now on (see the module's docstring)."""

    __slots__ = ("times", "free", "budget", "guards", "origin")

    def __init__(self, budget: int, running: Iterable[tuple[float, int]], origin: float = 0.0) -> None:
        """``running``: (remaining seconds, cost) of each running chart. ``origin``: now, in
        absolute time (the guards' windows end on :data:`WINDOW_GRID_S`'s grid of it)."""
        self.origin = origin
        ends: dict[float, int] = {}
        used = 0
        for rem, cost in running:
            used += cost
            if rem <= 0.0:
                rem = OVERRUN_S  # past its estimate: it holds its cost now, frees any moment
            ends[rem] = ends.get(rem, 0) + cost
        free = budget - used
        self.times = [0.0]
        self.free = [free]
        for t in sorted(ends):
            free += ends[t]
            self.times.append(t)
            self.free.append(free)
        self.budget = budget
        self.guards: list[tuple[float, float, int]] = []  # (estimated end, bound's end, cost) of guarded reservations

    def fits(self, i: int, c: int, length: float, start: float | None = None) -> int:
        """-1 if ``c`` fits from ``start`` (default ``times[i]``; a time within step ``i``)
        for ``length`` seconds, else the index of the first step in that window where it
        does not."""
        times, free = self.times, self.free
        end = (times[i] if start is None else start) + length
        n = len(times)
        j = i
        while j < n and times[j] < end:
            if free[j] < c:
                return j
            j += 1
        return -1

    def hold(self, holds: Iterable[tuple[float, float, float, int]], now: float) -> None:
        """Add the guards' windows of charts that were started ahead (``holds``: start,
        estimated end, bound's end, cost; absolute times) to this profile from ``now``:
        each holds until its bound's end, running or not (see :meth:`clear_of_guards`)."""
        for s, e, b, c in holds:
            if b > now:
                b = window_end(b) - now  # (on the grid already when this queue recorded it)
                self.guards.append((e - now, b, c))
                self._split(b)

    def _split(self, t: float) -> None:
        """Make ``t`` a step's start (the free budget unchanged): the end of a guard's
        window, where a chart reserved ahead may start (:meth:`earliest` tries steps' starts)."""
        times = self.times
        j = bisect_left(times, t)
        if j == len(times) or times[j] != t:
            times.insert(j, t)
            self.free.insert(j, self.free[j - 1])

    def clear_of_guards(self, i: int, c: int, d: float, start: float | None = None) -> int:
        """-1 if ``c`` started at ``start`` (default ``times[i]``; a time within step ``i``) for ``d`` seconds (a chart reserved ahead)
        leaves every guard its window (a guarded reservation's units from its estimated end
        to its bound's end), else the index of the first step where it does not.

        Were it in a window, the walk would not be the same at the next dispatch: the
        guarded chart, still queued, finds it running there and its guard fails (its
        reservation, and the one it guards, pushed back); or, started since, it no longer
        guards, and the chart moves earlier than its ETA. So the windows stay held for
        every chart reserved ahead, until the bound's end, whether the guarded chart is
        queued, running or done (the queue remembers the holds of those it started); a
        chart that is not ahead starts after every guarded chart before it and may use
        them, as before."""
        t = self.times[i] if start is None else start
        later = [g for g in self.guards if g[0] < t + d and g[1] > t]
        if not later:
            return -1
        times, free = self.times, self.free
        end = t + d
        n = len(times)
        j = i
        while j < n and times[j] < end:
            step_start = times[j] if times[j] > t else t
            step_end = times[j + 1] if j + 1 < n else float("inf")
            held = sum(gc for g_end, g_bound, gc in later if step_start < g_bound and step_end > g_end)
            if held and free[j] - held < c:
                return j
            j += 1
        return -1

    def earliest(self, c: int, d: float, bound: float, frontier: float) -> int:
        """The index of the earliest step from which ``c`` fits for ``d`` seconds (and
        for ``bound`` seconds if it starts before ``frontier``, the latest reservation
        start of the charts before it, and clear of the guards' windows: see
        :meth:`clear_of_guards`). -1 if ``c`` never fits (above the budget)."""
        if c > self.budget:
            return -1
        times, free = self.times, self.free
        n = len(times)
        i = 0
        while i < n:
            if free[i] < c:
                i += 1
                continue
            ahead = times[i] < frontier
            window = bound if ahead and bound > d else d
            j = self.fits(i, c, window)
            if j < 0 and ahead and self.guards:
                j = self.clear_of_guards(i, c, window)
            if j < 0:
                return i
            if ahead:
                # a start before the frontier failed the guard; from the frontier on,
                # the window is the estimate's only
                i = min(j + 1, max(i + 1, bisect_left(times, frontier)))
            else:
                i = j + 1
        return -1  # unreachable: the last step has the whole budget free

    def reserve(self, i: int, c: int, d: float, bound: float | None = None) -> float:
        """Take ``c`` from step ``i``'s start for ``d`` seconds; returns the finish.
        ``bound``: a reservation made ahead of an earlier one, guarded by its 90% bound,
        holds ``c`` in the lanes until that bound's end (:meth:`lanes`)."""
        times, free = self.times, self.free
        end = times[i] + d
        if bound is not None and bound > d:
            origin = self.origin
            bound_end = window_end(origin + times[i] + bound) - origin
            self.guards.append((end, bound_end, c))
            self._split(bound_end)
        j = i
        n = len(times)
        while j < n and times[j] < end:
            free[j] -= c
            j += 1
        if j == n or times[j] != end:  # split the step the finish falls in
            times.insert(j, end)
            free.insert(j, free[j - 1] + c)
        return end

    def now_free(self) -> int:
        """The budget free now (step 0)."""
        return self.free[0]

    def guarded_steps(self) -> tuple[list[float], list[int]]:
        """The profile with each guarded reservation held until its bound."""
        if not self.guards:
            return self.times, self.free
        # One sweep over the steps and the windows' ends, O((P + G) log(P + G)): walking
        # each window's steps was O(P x G), 0.26 s of a dispatch with 1,000 windows held.
        delta: dict[float, int] = {}
        for end, bound_end, c in self.guards:
            end = max(end, 0.0)  # a window begun before now holds from now
            delta[end] = delta.get(end, 0) - c
            delta[bound_end] = delta.get(bound_end, 0) + c
        steps, own = self.times, self.free
        last = len(steps) - 1
        times: list[float] = []
        free: list[int] = []
        held = 0
        i = 0
        for t in sorted(delta.keys() | set(steps)):
            while i < last and steps[i + 1] <= t:
                i += 1
            held += delta.get(t, 0)
            times.append(t)
            free.append(own[i] + held)
        return times, free

    def free_for_good(self) -> int:
        """The budget free from now on, for good (the guards' windows held): what the
        strict walk after the reserved charts may start now."""
        return min(self.guarded_steps()[1])

    def lanes(self, cap: int) -> list[float]:
        """The lanes the reservations leave, sorted (a heap): for each unit k = 1..cap
        of the budget, the time from which at least k units are free for good (a guarded
        reservation's units from its bound's end)."""
        times, free = self.guarded_steps()
        out: list[float] = []
        k = 1
        # suffix minima, from the end: the free budget for good from each step
        n = len(times)
        suffix = [0] * n
        m = free[-1]
        for i in range(n - 1, -1, -1):
            if free[i] < m:
                m = free[i]
            suffix[i] = m
        i = 0
        while k <= cap:
            while i < n and suffix[i] < k:
                i += 1
            if i == n:
                break  # k above the budget: no such lane
            out.append(times[i])
            k += 1
        return out


def reserve_walk(items: Sequence[tuple[int, float, float]], profile: Profile,
                 ) -> tuple[list[float | None], list[float | None]]:
    """Reserve ``items`` (cost, estimate, 90% bound), in order, in ``profile``.
    Returns parallel starts and finishes (None: the cost exceeds the budget)."""
    starts: list = []
    fins: list = []
    frontier = 0.0
    times = profile.times
    for c, d, b in items:
        i = profile.earliest(c, d, b, frontier)
        if i < 0:
            starts.append(None)
            fins.append(None)
            continue
        t = times[i]
        starts.append(t)
        fins.append(profile.reserve(i, c, d, b if t < frontier else None))
        if t > frontier:
            frontier = t
    return starts, fins


def startable_now(items: Iterable[tuple[int, float, float]], profile: Profile,
                  guarded: list[int] | None = None) -> list[int]:
    """The indexes of ``items`` (cost, estimate, 90% bound), in order, whose reservation is
    now: what dispatch starts. Stops as soon as nothing more can start now (no budget free
    now), so a dispatch with little free budget walks a few charts only. ``guarded``
    collects those of them started ahead under their guard (their holds)."""
    out = []
    frontier = 0.0
    times = profile.times
    for n, (c, d, b) in enumerate(items):
        if profile.now_free() < 1:
            break
        i = profile.earliest(c, d, b, frontier)
        if i < 0:
            continue
        t = times[i]
        profile.reserve(i, c, d, b if t < frontier else None)
        if i == 0:
            out.append(n)
            if guarded is not None and t < frontier and b > d:
                guarded.append(n)
        if t > frontier:
            frontier = t
    return out
