"""Backfill with capacity pools (scheduling.pool_reserve, docs/scheduling.md "Backfill with
pools"): one reservation profile per pool. With one pool it is the one-pool backfill
exactly; with several, against an independent model of the rule written from the docs;
dispatch starts what the ETA pass starts now; no start takes a pool past its capacity."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from scheduling.contract.scenario import plan, simulate
from scheduling.pool_reserve import PoolProfiles, reserve_walk
from scheduling.pools import DEFAULT_POOL, Pools, demand_of
from scheduling.queue import FairQueue
from scheduling.types import QueuedChart, RunningChart

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pools_backfill_example.json"
POOLS = ("default", "gpu", "llm")


# ------------------------------------------------------------ the worked example
def test_the_worked_example_as_the_docs_compute_it():
    out = plan(json.loads(EXAMPLE.read_text()))
    assert out["dispatch"] == ["C1", "D1"]
    assert {c: (e["start_s"], e["finish_s"]) for c, e in out["etas"].items()} == {
        "G0": (0.0, 600.0), "R0": (0.0, 300.0), "T1": (600.0, 1200.0), "C1": (0.0, 300.0),
        "D1": (0.0, 300.0), "X1": (1200.0, 1600.0), "D2": (300.0, 600.0)}
    assert out["waiting"] == {"T1": {"reason": "reserved", "pool": "gpu"},
                              "X1": {"reason": "reserved", "pool": "default"},
                              "D2": {"reason": "reserved", "pool": "default"}}
    strict = plan({**json.loads(EXAMPLE.read_text()), "dispatch": "strict"})
    assert strict["dispatch"] == ["D1"] and strict["etas"]["C1"]["start_s"] == 600.0


def test_the_worked_example_with_a_ceiling():
    """A's ceiling of 1 in llm (tests/core/test_pool_backfill_limits.py has the rule): X1
    (llm 2) never starts; C1 waits at A's ceiling while R0 runs, and then may not run into
    T1's unit of A's ceiling at 600 s: it is reserved after T1."""
    s = json.loads(EXAMPLE.read_text())
    s["limits"] = [{"org": "A", "pool": "llm", "max": 1}]
    out = plan(s)
    assert out["dispatch"] == ["D1"] and out["blocked"] == ["X1"]
    assert {c: (e["start_s"], e["finish_s"]) for c, e in out["etas"].items()} == {
        "G0": (0.0, 600.0), "R0": (0.0, 300.0), "T1": (600.0, 1200.0), "C1": (1200.0, 1500.0),
        "D1": (0.0, 300.0), "D2": (300.0, 600.0)}
    assert out["waiting"]["C1"] == {"reason": "ceiling", "pool": "llm"}


# ------------------------------------------------------------ one pool: today's backfill
ORGS = {"a": 1, "b": 2, "c": 1}
WFS = ("x", "y", "z")

steps = st.lists(st.tuples(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from(WFS)), max_size=4),
                           st.sampled_from([0.0, 5.0, 30.0, 61.0, 200.0])), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(budget=st.integers(1, 6), cost=st.lists(st.integers(1, 4), min_size=9, max_size=9),
       est=st.lists(st.sampled_from([10.0, 30.0, 60.0, 100.0]), min_size=9, max_size=9),
       slow=st.lists(st.sampled_from([0.5, 1.0, 1.3, 2.0]), min_size=9, max_size=9),
       depth=st.sampled_from([1, 3, 100]), work=st.booleans(), steps=steps)
def test_one_pool_is_todays_backfill(budget, cost, est, slow, depth, work, steps):
    """FairQueue(pools=Pools({"default": budget})) under backfill starts the same charts and
    gives the same ETAs as FairQueue(budget), step by step as charts arrive, start and
    finish (running long or short of their estimates)."""
    pairs = [(o, w) for o in ORGS for w in WFS]
    costs = dict(zip(pairs, cost))
    ests = dict(zip(pairs, est))
    estimate = lambda o, w: ests[(o, w)]  # noqa: E731
    share = "work" if work else "charts"
    plain = FairQueue(budget=budget, weights=ORGS, costs=costs, dispatch="backfill", estimate=estimate,
                      depth=depth, share=share)
    pooled = FairQueue(budget=budget, weights=ORGS, costs=costs, dispatch="backfill", estimate=estimate,
                       depth=depth, share=share,
                       pools=Pools({DEFAULT_POOL: budget}, {p: ((DEFAULT_POOL, c),) for p, c in costs.items()}))
    running: dict[str, tuple[RunningChart, float]] = {}
    t, seq = 0.0, 0
    for arrivals, dt in steps:
        for org, wf in arrivals:
            c = QueuedChart(f"c{seq}", org, wf, t, seq)
            plain.add(c)
            pooled.add(c)
            seq += 1
        run = [r for r, _ in running.values()]
        assert pooled.etas(run, t, estimate=estimate).etas == plain.etas(run, t, estimate=estimate).etas
        free = budget - sum(r.cost for r in run)
        assert pooled.peek(free, run, t, estimate) == plain.peek(free, run, t, estimate)
        a = [c.id for c in plain.dispatch(free, run, t, estimate)]
        b = pooled.dispatch(free, run, t, estimate)
        assert [c.id for c in b] == a
        for c in b:
            k = (c.org, c.workflow)
            running[c.id] = (RunningChart(c.id, c.org, c.workflow, t, costs[k], ((DEFAULT_POOL, costs[k]),)),
                             t + ests[k] * slow[pairs.index(k)])
        t += dt
        running = {cid: v for cid, v in running.items() if v[1] > t}


# ------------------------------------------------------------ the model
def model_reservations(items, running, capacity):
    """The rule as the docs state it, from intervals (no profile, no shared code): each
    chart, in order, at the earliest candidate time (now, a frontier, any interval's end
    or start) from which, in every pool it draws on, its units fit under the capacity at
    every instant of its window (its bound if it starts before the latest frontier of its
    pools; then also with the guards' windows, from a guarded chart's estimated end to its
    bound's end, counted as held). Times are integers, so a window's end is on the grid."""
    busy = {p: [] for p in capacity}  # pool -> [(start, end, units)]
    guards = {p: [] for p in capacity}
    frontier = dict.fromkeys(capacity, 0.0)
    for rem, dem in running:
        for p, u in dem:
            busy[p].append((0.0, rem if rem > 0 else 1e-6, u))
    out = []
    for dem, d, b in items:
        front = max(frontier[p] for p, _ in dem)
        if any(u > capacity[p] for p, u in dem):
            out.append((None, None))
            continue
        cands = {0.0, front}
        for p, _ in dem:
            for s, e, _u in busy[p] + guards[p]:
                cands.update((s, e))
        for s in sorted(x for x in cands if x >= 0):
            ahead = s < front
            w = max(d, b) if ahead else d
            if all(_fits(busy[p], guards[p] if ahead else [], capacity[p], u, s, s + w) for p, u in dem):
                break
        else:
            raise AssertionError("no candidate fits")
        for p, u in dem:
            busy[p].append((s, s + d, u))
            if ahead and b > d:
                guards[p].append((s + d, math.ceil(s + b), u))
            frontier[p] = max(frontier[p], s)
        out.append((s, s + d))
    return out


def _fits(busy, guards, cap, u, s, e):
    points = {s} | {x for iv in busy + guards for x in iv[:2] if s < x < e}
    for x in points:
        used = sum(c for a, z, c in busy + guards if a <= x < z)
        if used + u > cap:
            return False
    return True


demands = st.dictionaries(st.sampled_from(POOLS), st.integers(1, 3), min_size=1, max_size=3).map(demand_of)
items = st.tuples(demands, st.integers(1, 60).map(float), st.integers(0, 90).map(float))


@settings(max_examples=400, deadline=None)
@given(capacity=st.fixed_dictionaries({p: st.integers(1, 4) for p in POOLS}),
       running=st.lists(st.tuples(st.integers(-5, 80).map(float), demands), max_size=5),
       order=st.lists(items, max_size=10))
def test_reservations_are_the_models(capacity, running, order):
    got = reserve_walk(order, PoolProfiles(capacity, running))
    assert list(zip(*got)) == model_reservations(order, running, capacity) if order else got == ([], [])


# ------------------------------------------------------------ the live order
CAP = {"default": 3, "llm": 3, "gpu": 2}
PAIRS = {("a", "x"): {"llm": 1, "gpu": 1}, ("b", "x"): {"gpu": 2}, ("b", "y"): {"llm": 2, "default": 1},
         ("c", "x"): {"default": 1}, ("a", "y"): {"llm": 1}, ("c", "y"): {"gpu": 1}}
EST = {("a", "x"): 300.0, ("b", "x"): 120.0, ("b", "y"): 90.0, ("c", "x"): 60.0, ("a", "y"): 200.0, ("c", "y"): 45.0}


def _pooled_queue(depth):
    pools = Pools(dict(CAP), {k: demand_of(v) for k, v in PAIRS.items()})
    return FairQueue(budget=CAP["default"], weights=ORGS, dispatch="backfill", depth=depth, pools=pools,
                     estimate=lambda o, w: EST[(o, w)])


@settings(max_examples=150, deadline=None)
@given(charts=st.lists(st.sampled_from(sorted(PAIRS)), max_size=16), depth=st.sampled_from([2, 5, 100]),
       steps=st.lists(st.tuples(st.sampled_from([0.0, 10.0, 50.0, 130.0]),
                                st.sampled_from([0.6, 1.0, 1.4])), min_size=1, max_size=6))
def test_dispatch_starts_what_the_eta_pass_starts_now_and_never_overfills(charts, depth, steps):
    """At each step: the charts dispatch starts are those whose ETA starts now (the tail's
    strict walk included), and the running charts never hold more than a pool's capacity."""
    q = _pooled_queue(depth)
    est = lambda o, w: EST[(o, w)]  # noqa: E731
    for i, (o, w) in enumerate(charts):
        q.add(QueuedChart(f"c{i}", o, w, float(i), i))
    running: dict[str, tuple[RunningChart, float]] = {}
    t = 0.0
    for dt, slow in steps:
        run = [r for r, _ in running.values()]
        rep = q.etas(run, t, estimate=est)
        now = [cid for cid in q.order() if rep.etas[cid].start_s == 0.0]
        started = q.dispatch(0, run, t, est)
        assert [c.id for c in started] == now
        for c in started:
            k = (c.org, c.workflow)
            running[c.id] = (RunningChart(c.id, c.org, c.workflow, t, 1, demand_of(PAIRS[k])), t + EST[k] * slow)
        use: dict[str, int] = {}
        for r, _ in running.values():
            for p, u in r.demand:
                use[p] = use.get(p, 0) + u
        assert all(use[p] <= CAP[p] for p in use)
        t += dt
        running = {cid: v for cid, v in running.items() if v[1] > t}


def _trace(arrivals, exact, limits=None):
    """The world above as a contract v3 trace, under backfill, with ``limits`` ({(org, pool):
    Limit}: tests/core/test_pool_backfill_limits.py) if given."""
    orgs = [{"id": o, "weight": w} for o, w in ORGS.items()]
    costs = [{"org": o, "workflow": w, "pools": p} for (o, w), p in PAIRS.items()]
    avgs = [{"org": o, "workflow": w, "avg_s": s} for (o, w), s in EST.items()]
    trace = {"budget": CAP["default"], "dispatch": "backfill", "orgs": orgs, "costs": costs, "averages": avgs}
    if limits is not None:
        trace["limits"] = [{"org": o, "pool": p, **({"max": v.max} if v.max is not None else {}),
                            **({"min": v.min} if v.min else {})} for (o, p), v in limits.items()]
    return {**trace, "pools": [{"id": "llm", "capacity": CAP["llm"]}, {"id": "gpu", "capacity": CAP["gpu"]}],
            "arrivals": [{"id": f"c{i}", "org": o, "workflow": w, "at_s": at,
                          "actual_s": EST[(o, w)] * (1.0 if exact else f)}
                         for i, ((o, w), at, f) in enumerate(arrivals)]}


arrivals = st.lists(st.tuples(st.sampled_from(sorted(PAIRS)), st.integers(0, 300), st.sampled_from([0.5, 1.0, 1.6])),
                    max_size=14)


@settings(max_examples=60, deadline=None)
@given(arrivals)
def test_simulate_with_backfill_never_goes_past_a_pool(arrivals):
    """Run times that miss their estimates: at every start, each pool the chart draws on
    has its units in use (the chart's included) within its capacity."""
    out = simulate(_trace(arrivals, exact=False))
    ran = [c for c in out["charts"] if c["start_s"] is not None]
    assert len(ran) == len(arrivals)
    for c in ran:
        live = [r for r in ran if r["start_s"] <= c["start_s"] < r["finish_s"] or r is c]
        for p in c["pools"]:
            assert sum(r["pools"].get(p, 0) for r in live) <= CAP[p]
    for p, row in out["summary"]["pools"].items():
        assert row["peak_in_use"] <= CAP[p]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(sorted(PAIRS)), max_size=14))
def test_a_static_backlog_with_exact_estimates_finishes_at_its_etas(charts):
    """Every chart arrives at 0 and runs exactly its estimate: each finishes at its ETA at
    arrival (the reservations are kept: dispatch and the ETA pass agree over time)."""
    out = simulate(_trace([(k, 0, 1.0) for k in charts], exact=True))
    for c in out["charts"]:
        assert c["finish_s"] == pytest.approx(c["eta_at_arrival_s"])



@settings(max_examples=150, deadline=None)
@given(charts=st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from(WFS)), min_size=1, max_size=16),
       table=st.lists(demands, min_size=9, max_size=9),
       est=st.lists(st.sampled_from([10, 45, 60, 200]), min_size=9, max_size=9),
       cap=st.fixed_dictionaries({p: st.integers(1, 4) for p in POOLS}))
def test_a_static_backlog_starts_no_chart_later_than_strict(charts, table, est, cap):
    """Every chart arrives at 0 and runs exactly its estimate: under backfill with pools no
    chart starts later than under strict (as in one pool, "Backfill"), and each finishes at
    its ETA at arrival."""
    pairs = [(o, w) for o in ORGS for w in WFS]
    trace = {"budget": cap["default"], "orgs": [{"id": o, "weight": w} for o, w in ORGS.items()],
             "pools": [{"id": p, "capacity": cap[p]} for p in POOLS if p != DEFAULT_POOL],
             "costs": [{"org": o, "workflow": w, "pools": dict(d)} for (o, w), d in zip(pairs, table)],
             "averages": [{"org": o, "workflow": w, "avg_s": e} for (o, w), e in zip(pairs, est)],
             "arrivals": [{"id": f"c{i}", "org": o, "workflow": w, "at_s": 0, "actual_s": est[pairs.index((o, w))]}
                          for i, (o, w) in enumerate(charts)]}
    strict = simulate({**trace, "dispatch": "strict"})
    backfill = simulate({**trace, "dispatch": "backfill"})
    for b, s in zip(backfill["charts"], strict["charts"]):
        if s["start_s"] is None:  # a demand above a pool: blocked under both
            assert b["start_s"] is None
            continue
        assert b["start_s"] <= s["start_s"]
        assert b["finish_s"] == pytest.approx(b["eta_at_arrival_s"])


def test_a_restart_keeps_the_guards_windows_of_each_pool():
    """The holds of charts started ahead record their pools' units; saved as JSON (as the
    round state is) and restored, the next dispatch and ETAs are the same as without the
    restart (the window in llm still kept clear for a chart reserved ahead)."""
    from dataclasses import replace

    from scheduling.types import RoundState

    pools = Pools({"default": 1, "llm": 2, "gpu": 1}, {("a", "x"): demand_of({"gpu": 1, "llm": 1}),
                                                       ("a", "y"): demand_of({"llm": 1}),
                                                       ("a", "z"): demand_of({"llm": 2, "default": 1}),
                                                       ("a", "w"): demand_of({"llm": 2})})
    ests = {"x": 600.0, "y": 300.0, "z": 400.0, "w": 100.0}
    est = lambda o, w: ests[w]  # noqa: E731
    charts = [QueuedChart(c, "a", w, float(i), i) for i, (c, w) in enumerate([("T1", "x"), ("C1", "y"), ("X1", "z"),
                                                                                    ("D1", "w")])]
    live = FairQueue.from_backlog(charts, budget=1, weights={"a": 1}, dispatch="backfill", estimate=est, pools=pools)
    g0 = RunningChart("G0", "a", "x", 0.0, 1, demand_of({"gpu": 1}))
    assert [c.id for c in live.dispatch(0, [g0], 0.0, est)] == ["C1"]  # ahead of T1, under its guard
    saved = live.export_rounds()
    assert [h[3] for h in saved.holds] == [{"llm": 1}]
    state = RoundState(saved.head, saved.budget, saved.orgs, saved.share,
                       tuple(tuple(h) for h in json.loads(json.dumps([list(h) for h in saved.holds]))))
    again = FairQueue.restore([replace(live.get(c), round=live.round_of(c)) for c in live.order()], state=state,
                              budget=1, weights={"a": 1}, dispatch="backfill", estimate=est, pools=pools)
    forgot = FairQueue.restore([replace(live.get(c), round=live.round_of(c)) for c in live.order()],
                               state=replace(state, holds=()), budget=1, weights={"a": 1}, dispatch="backfill",
                               estimate=est, pools=pools)
    rep = again.etas([g0], 300.0, estimate=est).etas
    assert rep["X1"] == (900.0, 1300.0)
    assert rep["D1"] == (150.0, 250.0)  # both units of llm only once C1's window ends, at 450 s
    assert forgot.etas([g0], 300.0, estimate=est).etas["D1"] == (0.0, 100.0)  # (what the holds prevent)
    c1 = RunningChart("C1", "a", "y", 0.0, 1, demand_of({"llm": 1}))
    for t in (0.0, 300.0, 400.0, 450.0):  # C1 finished on time at 300 s: its window in llm holds to 450 s
        run = [g0, c1] if t < 300 else [g0]
        assert again.etas(run, t, estimate=est).etas == live.etas(run, t, estimate=est).etas
        assert again.peek(0, run, t, est) == live.peek(0, run, t, est)
    assert again.peek(0, [g0], 450.0, est) == ["D1"]
