"""Backfill with pools and orgs' limits (scheduling.pool_reserve, docs/scheduling.md "Backfill
with limits"): a ceiling is one more profile per (org, pool), a minimum's charts are reserved
first. Against an independent model written over intervals from the docs; no reservation and
no start takes a pool or an org's ceiling past its limit at any moment; dispatch starts what
the ETA pass starts now; without limits, today's backfill exactly."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from scheduling.contract.scenario import plan, simulate
from scheduling.pool_reserve import PoolProfiles, reserve_walk
from scheduling.pools import Limit, Pools, demand_of
from scheduling.queue import FairQueue
from scheduling.types import QueuedChart, RunningChart
# the world of the live order below: tests/core/test_pool_backfill.py's, with limits
from tests.core.test_pool_backfill import CAP, EST, ORGS as WEIGHTS, PAIRS, _trace, arrivals

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pools_backfill_limits_example.json"
POOLS = ("default", "gpu", "llm")
ORGS = ("a", "b", "c")


# ------------------------------------------------------------ the worked example
def test_the_worked_example_as_the_docs_compute_it():
    s = json.loads(EXAMPLE.read_text())
    out = plan(s)
    assert out["order"] == ["A1", "B1", "C1", "A2", "C2"]
    assert out["dispatch"] == ["C1", "C2"]
    assert {c: (e["start_s"], e["finish_s"]) for c, e in out["etas"].items()} == {
        "A0": (0.0, 100.0), "A9": (0.0, 300.0), "C1": (0.0, 200.0), "A1": (100.0, 400.0),
        "B1": (300.0, 900.0), "A2": (400.0, 700.0), "C2": (0.0, 200.0)}
    assert out["waiting"] == {"A1": {"reason": "ceiling", "pool": "llm"}, "B1": {"reason": "reserved", "pool": "llm"},
                              "A2": {"reason": "ceiling", "pool": "llm"}}
    assert out["pools"]["llm"]["blocked_by"] == "B1"
    # at 100 s (A0 ended, C1 and C2 running): B1 and A2 sooner than their ETAs above
    later = {**s, "now": "2026-12-07T09:01:40+00:00",
             "running": [r for r in s["running"] if r["id"] != "A0"]
             + [{"id": c, "org": "C", "workflow": "summary", "started_at": "2026-12-07T09:00:00+00:00"}
                for c in ("C1", "C2")],
             "queued": [q for q in s["queued"] if q["id"] not in ("C1", "C2")]}
    out = plan(later)
    assert out["dispatch"] == ["A1"]
    assert (out["etas"]["B1"]["start_s"], out["etas"]["A2"]["start_s"]) == (100.0, 200.0)
    strict = plan({**s, "dispatch": "strict"})
    assert strict["dispatch"] == ["C1"]
    assert {c: strict["etas"][c]["start_s"] for c in ("A1", "B1", "A2", "C2")} == {
        "A1": 100.0, "B1": 300.0, "A2": 400.0, "C2": 200.0}


# ------------------------------------------------------------ the model
def model_reservations(items, orgs, running, capacity, limits):
    """The rule as the docs state it, from intervals (no profile, no shared code).

    A chart's reservation: the earliest candidate time (now, a frontier, any interval's end
    or start) from which, in every pool it draws on, its units fit under the capacity, and,
    where its org has a ceiling, under the ceiling counting only that org's intervals, at
    every instant of its window (its bound if it starts before the latest frontier of its
    pools, the latest start of the reservations held there; then also with the guards'
    windows counted as held, each where its chart drew). First, in order, each chart of an
    org with a minimum in a pool it draws on takes the earliest such time at which its org
    holds less than that minimum there; then, in order, each chart takes its reservation,
    a chart reserved in the first pass giving its own back first and keeping the earlier
    of the two. Times are integers."""
    mins = {k: v.min for k, v in limits.items() if v.min}
    maxs = {k: v.max for k, v in limits.items() if v.max is not None}
    busy = {p: [] for p in capacity}  # pool -> [(start, end, units, org, chart)]
    guards = {p: [] for p in capacity}
    starts = {p: [] for p in capacity}
    for rem, dem, org in running:
        for p, u in dem:
            busy[p].append((0.0, rem if rem > 0 else 1e-6, u, org, None))
    out = [(None, None)] * len(items)
    was_ahead = {}

    def earliest(i, below_min):
        dem, d, b = items[i]
        org = orgs[i]
        if any(u > capacity[p] or u > maxs.get((org, p), u) for p, u in dem):
            return None
        front = max(max(starts[p], default=0.0) for p, _ in dem)
        cands = {0.0, front}
        for p, _ in dem:
            for iv in busy[p] + guards[p]:
                cands.update(iv[:2])
        for s in sorted(x for x in cands if x >= 0):
            if below_min and not any(sum(iv[2] for iv in busy[p] if iv[3] == org and iv[0] <= s < iv[1]) < mins[(org, p)]
                                     for p, _ in dem if (org, p) in mins):
                continue
            ahead = s < front
            w = max(d, b) if ahead else d

            def fits(p, u):
                g = guards[p] if ahead else []
                if not _fits(busy[p], g, capacity[p], u, s, s + w):
                    return False
                m = maxs.get((org, p))
                return m is None or _fits([x for x in busy[p] if x[3] == org], [x for x in g if x[3] == org],
                                          m, u, s, s + w)
            if all(fits(p, u) for p, u in dem):
                return s, ahead
        return None

    def take(i, s, ahead):
        dem, d, b = items[i]
        for p, u in dem:
            busy[p].append((s, s + d, u, orgs[i], i))
            if ahead and b > d:
                guards[p].append((s + d, math.ceil(s + b), u, orgs[i], i))
            starts[p].append(s)
        out[i] = (s, s + d)
        was_ahead[i] = ahead

    def give_back(i):
        for p, _ in items[i][0]:
            busy[p] = [iv for iv in busy[p] if iv[4] != i]
            guards[p] = [iv for iv in guards[p] if iv[4] != i]
            starts[p].remove(out[i][0])

    for i in range(len(items)):
        if any((orgs[i], p) in mins for p, _ in items[i][0]):
            r = earliest(i, True)
            if r is not None:
                take(i, *r)
    for i in range(len(items)):
        prio = out[i][0]
        if prio is not None:
            give_back(i)
        r = earliest(i, False)
        if r is None or (prio is not None and r[0] >= prio):
            if prio is not None:
                take(i, prio, was_ahead[i])
            continue
        take(i, *r)
    return out


def _fits(busy, guards, cap, u, s, e):
    points = {s} | {x for iv in busy + guards for x in iv[:2] if s < x < e}
    for x in points:
        used = sum(iv[2] for iv in busy + guards if iv[0] <= x < iv[1])
        if used + u > cap:
            return False
    return True


demands = st.dictionaries(st.sampled_from(POOLS), st.integers(1, 3), min_size=1, max_size=3).map(demand_of)
items = st.tuples(demands, st.integers(1, 60).map(float), st.integers(0, 90).map(float))
limit = st.one_of(st.tuples(st.integers(1, 4), st.just(0)), st.tuples(st.none(), st.integers(1, 3)),
                  st.tuples(st.integers(1, 4), st.integers(1, 4)).map(lambda t: (max(t), min(t))))
limits_st = st.dictionaries(st.tuples(st.sampled_from(ORGS), st.sampled_from(POOLS)),
                            limit.map(lambda t: Limit(*t)), max_size=4)
running_st = st.lists(st.tuples(st.integers(-5, 80).map(float), demands, st.sampled_from(ORGS)), max_size=5)
order_st = st.lists(st.tuples(items, st.sampled_from(ORGS)), max_size=10)
capacity_st = st.fixed_dictionaries({p: st.integers(1, 4) for p in POOLS})


@settings(max_examples=400, deadline=None)
@given(capacity=capacity_st, running=running_st, order=order_st, limits=limits_st)
def test_reservations_are_the_models(capacity, running, order, limits):
    its, orgs = [o[0] for o in order], [o[1] for o in order]
    got = reserve_walk(its, PoolProfiles(capacity, running, limits=limits), orgs)
    assert list(zip(*got)) == model_reservations(its, orgs, running, capacity, limits) if order else got == ([], [])


@settings(max_examples=200, deadline=None)
@given(capacity=capacity_st, running=running_st, order=order_st, limits=limits_st)
def test_with_ceilings_no_chart_moves_an_earlier_ones_reservation(capacity, running, order, limits):
    """Ceilings only: the reservations of the first k charts are the same whatever comes
    after them (a later chart never moves an earlier one's reservation; with a minimum a
    later chart of an org below it does go first, by design)."""
    limits = {k: Limit(v.max) for k, v in limits.items() if v.max is not None}
    its, orgs = [o[0] for o in order], [o[1] for o in order]
    s, f = reserve_walk(its, PoolProfiles(capacity, running, limits=limits), orgs)
    for k in range(len(its)):
        s2, f2 = reserve_walk(its[:k], PoolProfiles(capacity, running, limits=limits), orgs[:k])
        assert (s2, f2) == (s[:k], f[:k])


@settings(max_examples=300, deadline=None)
@given(capacity=capacity_st, running=running_st, order=order_st)
def test_without_limits_the_reservations_are_todays(capacity, running, order):
    its, orgs = [o[0] for o in order], [o[1] for o in order]
    today = reserve_walk(its, PoolProfiles(capacity, [r[:2] for r in running]))
    assert reserve_walk(its, PoolProfiles(capacity, running, limits={}), orgs) == today
    assert reserve_walk(its, PoolProfiles(capacity, running, limits={}), None) == today


@settings(max_examples=300, deadline=None)
@given(capacity=capacity_st, running=running_st, order=order_st, limits=limits_st)
def test_no_moment_over_a_pool_or_a_ceiling(capacity, running, order, limits):
    """With the running charts (each until its estimated finish), the reservations never
    hold more than a pool's capacity, nor an org more than its ceiling, at any moment (for
    their estimates; the ceiling also for the running charts added only if it was not
    already over), and every chart that can ever start has a reservation."""
    its, orgs = [o[0] for o in order], [o[1] for o in order]
    starts, fins = reserve_walk(its, PoolProfiles(capacity, running, limits=limits), orgs)
    ivs = [(0.0, max(rem, 1e-6), dem, org) for rem, dem, org in running]
    res = [(s, f, it[0], o) for s, f, it, o in zip(starts, fins, its, orgs) if s is not None]
    for i, (dem, _, _) in enumerate(its):
        never = any(u > capacity[p] or u > (limits.get((orgs[i], p)) or Limit()).max if
                    (limits.get((orgs[i], p)) or Limit()).max is not None else u > capacity[p] for p, u in dem)
        assert (starts[i] is None) == never
    for x in {s for s, *_ in res}:
        live = [iv for iv in ivs + res if iv[0] <= x < iv[1]]
        for p, cap in capacity.items():
            if any(p in dict(iv[2]) for iv in res if iv[0] == x):
                run_only = sum(dict(iv[2]).get(p, 0) for iv in ivs if iv[0] <= x < iv[1])
                assert sum(dict(iv[2]).get(p, 0) for iv in live) <= max(cap, run_only)
        for (org, p), lim in limits.items():
            if lim.max is None or not any(iv[3] == org and p in dict(iv[2]) for iv in res if iv[0] == x):
                continue
            mine = [iv for iv in live if iv[3] == org]
            assert sum(dict(iv[2]).get(p, 0) for iv in mine) <= lim.max


# ------------------------------------------------------------ the live order
LIMITS = st.sampled_from([
    {("a", "llm"): Limit(1)},
    {("a", "llm"): Limit(2, 1), ("c", "gpu"): Limit(1)},
    {("b", "gpu"): Limit(None, 2)},
    {("a", "gpu"): Limit(1), ("c", "default"): Limit(None, 1), ("b", "llm"): Limit(2)},
])


def _use(running):
    pool: dict = {}
    org: dict = {}
    for r in running:
        for p, u in r.demand:
            pool[p] = pool.get(p, 0) + u
            org[(r.org, p)] = org.get((r.org, p), 0) + u
    return pool, org


@settings(max_examples=150, deadline=None)
@given(charts=st.lists(st.sampled_from(sorted(PAIRS)), max_size=16), depth=st.sampled_from([2, 5, 100]),
       limits=LIMITS, steps=st.lists(st.tuples(st.sampled_from([0.0, 10.0, 50.0, 130.0]),
                                               st.sampled_from([0.6, 1.0, 1.4])), min_size=1, max_size=6))
def test_dispatch_starts_what_the_eta_pass_starts_now_and_keeps_every_limit(charts, depth, limits, steps):
    """At each step: the charts dispatch starts are those whose ETA starts now (the strict
    walk with limits after the depth included), and the running charts never hold more than
    a pool's capacity, nor an org more than its ceiling; peek is dispatch."""
    pools = Pools(dict(CAP), {k: demand_of(v) for k, v in PAIRS.items()}, dict(limits))
    est = lambda o, w: EST[(o, w)]  # noqa: E731
    q = FairQueue(budget=CAP["default"], weights=WEIGHTS, dispatch="backfill", depth=depth, pools=pools,
                  estimate=est)
    for i, (o, w) in enumerate(charts):
        q.add(QueuedChart(f"c{i}", o, w, float(i), i))
    running: dict[str, tuple[RunningChart, float]] = {}
    t = 0.0
    for dt, slow in steps:
        run = [r for r, _ in running.values()]
        rep = q.etas(run, t, estimate=est)
        now = [cid for cid in q.order() if rep.etas[cid].start_s == 0.0]
        peeked = q.peek(0, run, t, est)
        started = q.dispatch(0, run, t, est)
        assert [c.id for c in started] == now == peeked
        for c in started:
            k = (c.org, c.workflow)
            running[c.id] = (RunningChart(c.id, c.org, c.workflow, t, 1, demand_of(PAIRS[k])), t + EST[k] * slow)
        pool, org = _use(r for r, _ in running.values())
        assert all(pool[p] <= CAP[p] for p in pool)
        assert all(org.get(k, 0) <= lim.max for k, lim in limits.items() if lim.max is not None)
        t += dt
        running = {cid: v for cid, v in running.items() if v[1] > t}


@settings(max_examples=60, deadline=None)
@given(arrivals, LIMITS)
def test_simulate_never_goes_past_a_pool_or_a_ceiling(arrivals, limits):
    """Run times that miss their estimates: at every start, each pool the chart draws on,
    and its org's ceiling there, hold within their limits (the chart included)."""
    out = simulate(_trace(arrivals, exact=False, limits=limits))
    ran = [c for c in out["charts"] if c["start_s"] is not None]
    assert len(ran) == len(arrivals)
    for c in ran:
        live = [r for r in ran if r["start_s"] <= c["start_s"] < r["finish_s"] or r is c]
        for p in c["pools"]:
            assert sum(r["pools"].get(p, 0) for r in live) <= CAP[p]
            lim = limits.get((c["org"], p))
            if lim is not None and lim.max is not None:
                assert sum(r["pools"].get(p, 0) for r in live if r["org"] == c["org"]) <= lim.max


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(sorted(PAIRS)), max_size=14), LIMITS.filter(
    lambda lim: not any(v.min for v in lim.values())))
def test_with_ceilings_a_static_backlog_with_exact_estimates_finishes_at_its_etas(charts, limits):
    """Every chart arrives at 0 and runs exactly its estimate, ceilings only: each finishes at
    its ETA at arrival (the reservations are kept over time)."""
    out = simulate(_trace([(k, 0, 1.0) for k in charts], exact=True, limits=limits))
    for c in out["charts"]:
        assert c["finish_s"] == pytest.approx(c["eta_at_arrival_s"])


def test_a_restart_keeps_the_guards_windows_under_a_ceiling():
    """A chart started ahead under its guard holds its window in its pools and under its
    org's ceiling (a triple [pool, units, org] in the hold); saved as JSON and restored, the
    next dispatch and ETAs are the same as without the restart."""
    from dataclasses import replace

    from scheduling.types import RoundState

    pools = Pools({"default": 1, "llm": 4, "gpu": 1},
                  {("a", "x"): demand_of({"gpu": 1, "llm": 1}), ("a", "y"): demand_of({"llm": 1}),
                   ("a", "z"): demand_of({"llm": 1})},
                  {("a", "llm"): Limit(1)})
    ests = {"x": 600.0, "y": 300.0, "z": 100.0}
    est = lambda o, w: ests[w]  # noqa: E731
    charts = [QueuedChart(c, "a", w, float(i), i) for i, (c, w) in enumerate([("T1", "x"), ("C1", "y"), ("C2", "z")])]
    kw = dict(budget=1, weights={"a": 1}, dispatch="backfill", estimate=est, pools=pools)
    live = FairQueue.from_backlog(charts, **kw)
    g0 = RunningChart("G0", "a", "x", 0.0, 1, demand_of({"gpu": 1}))
    assert [c.id for c in live.dispatch(0, [g0], 0.0, est)] == ["C1"]  # ahead of T1 (gpu from 600 s), guarded
    saved = live.export_rounds()
    assert [h[3] for h in saved.holds] == [[["llm", 1], ["llm", 1, "a"]]]
    state = RoundState(saved.head, saved.budget, saved.orgs, saved.share,
                       tuple(tuple(h) for h in json.loads(json.dumps([list(h) for h in saved.holds]))))
    again = FairQueue.restore([replace(live.get(c), round=live.round_of(c)) for c in live.order()], state=state, **kw)
    forgot = FairQueue.restore([replace(live.get(c), round=live.round_of(c)) for c in live.order()],
                               state=replace(state, holds=()), **kw)
    # C2 (ahead of T1, which takes a's unit at 600 s) waits for C1's window under a's
    # ceiling: from 450 s, not 300 s (what the holds prevent)
    assert again.etas([g0], 300.0, estimate=est).etas["C2"].start_s == 150.0
    assert forgot.etas([g0], 300.0, estimate=est).etas["C2"].start_s == 0.0
    c1 = RunningChart("C1", "a", "y", 0.0, 1, demand_of({"llm": 1}))
    for t in (0.0, 100.0, 300.0, 400.0, 450.0):
        run = [g0, c1] if t < 300 else [g0]
        assert again.etas(run, t, estimate=est).etas == live.etas(run, t, estimate=est).etas
        assert again.peek(0, run, t, est) == live.peek(0, run, t, est)
