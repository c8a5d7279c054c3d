"""Backfill's free-budget profile (scheduling.reserve): the guards' windows held, as the
strict walk after the reserved charts sees them, against the plain definition."""
from __future__ import annotations

from bisect import bisect_left

from hypothesis import given, settings, strategies as st

from scheduling.reserve import WINDOW_GRID_S, Profile, reserve_walk, window_end


def held_by_definition(profile: Profile) -> tuple[list[float], list[int]]:
    """Each window's ends made steps, then each step inside a window loses its cost: one
    window at a time (O(P x G), what the profile did before its sweep)."""
    times, free = list(profile.times), list(profile.free)
    for end, bound_end, c in profile.guards:
        end = max(end, 0.0)
        for t in (end, bound_end):
            j = bisect_left(times, t)
            if j == len(times) or times[j] != t:
                times.insert(j, t)
                free.insert(j, free[j - 1])
        j = bisect_left(times, end)
        while j < len(times) and times[j] < bound_end:
            free[j] -= c
            j += 1
    return times, free


seconds = st.integers(0, 40).map(float)
charts = st.tuples(st.integers(1, 4), st.integers(1, 30).map(float), st.integers(0, 30).map(float))


@settings(max_examples=300, deadline=None)
@given(budget=st.integers(1, 8),
       running=st.lists(st.tuples(st.integers(-5, 40).map(float), st.integers(1, 3)), max_size=6),
       items=st.lists(charts, max_size=12),
       holds=st.lists(st.tuples(st.integers(-20, 30).map(float), seconds, st.integers(1, 3)), max_size=8))
def test_the_guards_windows_held_are_the_definitions(budget, running, items, holds):
    profile = Profile(budget, running)
    # windows of charts started ahead earlier (some begun before now, some over), then the walk's own
    profile.hold([(-30.0, 100.0 + e, 100.0 + e + extra, c) for e, extra, c in holds], 100.0)
    reserve_walk([(c, d, d + extra) for c, d, extra in items], profile)
    times, free = held_by_definition(profile)
    assert profile.guarded_steps() == (times, free)
    assert profile.free_for_good() == min(free)
    for cap in (1, budget):
        assert profile.lanes(cap) == Profile.lanes(_Fixed(times, free), cap)


class _Fixed(Profile):
    """A profile whose guarded steps are given (the definition's), for :meth:`Profile.lanes`."""

    def __init__(self, times: list[float], free: list[int]) -> None:
        self.times, self.free, self.guards = times, free, []


def test_windows_ending_within_the_same_second_end_together_never_before_their_bound():
    now = 1_800_000_000.25
    holds = [(now - 10, now + 20.0 + k / 1000, now + 90.0 + k / 1000, 1) for k in range(500)]  # ends 90.0-90.5 s on
    profile = Profile(4, [], now)
    profile.hold(holds, now)
    ends = {b for _, b, _ in profile.guards}
    assert len(ends) == 1 and profile.times == [0.0, *ends]  # one step for the 500 windows
    (end,) = ends
    assert all(now + end >= h[2] for h in holds) and now + end - max(h[2] for h in holds) < WINDOW_GRID_S
    # a reservation made ahead now, in a walk, ends its window on the same grid
    walk = Profile(4, [], now)
    walk.reserve(0, 1, 30.0, 90.3)
    assert walk.guards == [(30.0, window_end(now + 90.3) - now, 1)] and window_end(now + 90.3) - now == end
