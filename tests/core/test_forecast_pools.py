"""The forecast ETA model with capacity pools (docs/scheduling.md, "ETAs: the forecast
model", with pools): the pools' lane walk fed the order and the phantoms."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling import Durations, QueuedChart, RunningChart
from scheduling.contract.pool_sim import simulate_pools
from scheduling.contract.scenario import simulate as simulate_json
from scheduling.contract.fields import ScenarioError
from scheduling.contract.simulator import Arrival, simulate
from tests.core.helpers import arrivals_and_events
from scheduling.forecast import Forecaster, ForecastParams
from scheduling.pools import Limit, Pools
from scheduling.queue import FairQueue

ORGS = ["A", "B", "C", "D"]
WFS = ["x", "y", "z"]


def _same(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = tuple(a[k]), tuple(b[k])
        if x != y and not all(u == v or (math.isnan(u) and math.isnan(v)) for u, v in zip(x, y)):
            return False
    return True


# ------------------------------------------------- one pool `default`: the one-budget pass
@st.composite
def states(draw):
    orgs = ORGS[:draw(st.integers(1, 4))]
    budget = draw(st.integers(1, 6))
    weights = {o: draw(st.sampled_from([0, 1, 1, 2, 3])) for o in orgs}
    costs = {(o, w): draw(st.integers(1, 4)) for o in orgs for w in WFS if draw(st.booleans())}
    avgs = {(o, w): float(draw(st.integers(5, 400))) for o in orgs for w in WFS if draw(st.booleans())}
    params = ForecastParams(fade_s=draw(st.sampled_from([600.0, 4500.0, 1e12])),
                            long_floor_s=draw(st.sampled_from([60.0, 900.0])),
                            max_phantoms=draw(st.sampled_from([5, 20000])))
    now = 1000.0
    arrivals = [(draw(st.sampled_from(orgs)), draw(st.sampled_from(WFS)), float(draw(st.integers(0, 1000))),
                 draw(st.integers(0, 9))) for _ in range(draw(st.integers(0, 40)))]
    finishes = [(draw(st.sampled_from(orgs)), draw(st.sampled_from(WFS)), float(draw(st.integers(1, 600))))
                for _ in range(draw(st.integers(0, 12)))]
    running = [(draw(st.sampled_from(orgs)), draw(st.sampled_from(WFS)), float(draw(st.integers(400, 1000))),
                draw(st.integers(1, 3))) for _ in range(draw(st.integers(0, 4)))]
    stop = draw(st.one_of(st.none(), st.integers(0, 39)))
    return orgs, budget, weights, costs, avgs, params, now, arrivals, finishes, running, stop


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(states())
def test_with_one_pool_default_the_pass_is_the_one_budget_forecast_pass(case):
    """The same queue, learned history and running charts, once with the one budget and once
    with the pools (only ``default``, each cost its units there): the same ETAs and
    clear-times, float for float, the phantoms included (a partial pass too)."""
    orgs, budget, weights, costs, avgs, params, now, arrivals, finishes, running, stop = case
    fc = Forecaster(Durations(avgs, 100.0), params)
    one = FairQueue(budget=budget, weights=weights, costs=costs)
    pools = Pools({"default": budget}, {k: (("default", c),) for k, c in costs.items()})
    pooled = FairQueue(budget=budget, weights=weights, costs=costs, pools=pools)
    ids = []
    for i, (o, w, at, kind) in enumerate(sorted(arrivals, key=lambda a: a[2])):
        fc.observe_arrival(o, w, at)
        if kind < 7:  # queued; the rest arrived and left
            c = QueuedChart(f"c{i}", o, w, at, i, priority=kind == 0)
            one.add(c)
            pooled.add(c)
            ids.append(c.id)
    for o, w, d in finishes:
        fc.observe_finish(o, w, d)
    run1 = [RunningChart(f"r{i}", o, w, at, c) for i, (o, w, at, c) in enumerate(running)]
    run2 = [RunningChart(f"r{i}", o, w, at, c, (("default", c),)) for i, (o, w, at, c) in enumerate(running)]
    stop_after = None if stop is None or not ids else {ids[stop % len(ids)]}
    a = fc.etas(one, run1, now, stop_after=stop_after)
    b = fc.etas(pooled, run2, now, stop_after=stop_after)
    assert _same(dict(a.etas), dict(b.etas))
    assert a.org_clear_s == b.org_clear_s and a.clear_s == b.clear_s


@st.composite
def traces(draw, orgs=("A", "B", "C")):
    return arrivals_and_events(draw, orgs, most=30, span=600)


FP = ForecastParams(fade_s=600.0, recent_tau_s=200.0, decay_s=300.0, long_floor_s=100.0)
ONE = dict(weights={"A": 1, "B": 2, "C": 1}, estimate=Durations({("A", "x"): 50.0, ("B", None): 120.0}, 90.0),
           eta_model="forecast", forecast_params=FP)
COSTS = {("A", "y"): 2, ("C", "x"): 2}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces())
def test_with_one_pool_default_the_simulation_is_the_one_budget_forecast(case):
    """``simulate_pools`` with one pool ``default`` under the forecast model: each chart's
    ETA and 90% bound at arrival are the one-budget ``simulate``'s, float for float."""
    arrivals, events = case
    a = simulate(arrivals, events, budget=2, costs=COSTS, **ONE)
    b = simulate_pools(arrivals, events, pools=Pools({"default": 2}, {k: (("default", c),) for k, c in COSTS.items()}),
                       **ONE)
    assert b.eta_model == "forecast"
    assert [(c.start_s, c.finish_s, c.eta_at_arrival_s, c.eta_p90_at_arrival_s) for c in a.charts] == \
        [(c.start_s, c.finish_s, c.eta_at_arrival_s, c.eta_p90_at_arrival_s) for c in b.charts]


# --------------------------------------------------------------------- no peeking, with pools
THREE = Pools({"default": 1, "llm": 2, "gpu": 1},
              {("A", "x"): (("llm", 1),), ("A", "y"): (("llm", 2), ("gpu", 1)), ("B", "x"): (("gpu", 1),),
               ("C", "y"): (("default", 1), ("llm", 1))})
KW3 = dict(pools=THREE, **ONE)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces(), st.data())
def test_no_peeking_pooled_forecast_at_arrival_uses_only_the_past(case, data):
    """As ``test_forecast.test_no_peeking_forecast_at_arrival_uses_only_the_past``, with three
    pools (one chart drawing on two): replaying the trace cut at a chart's arrival, with the
    unknown durations replaced by others that keep those charts unfinished at that instant,
    gives the same forecast and 90% bound."""
    arrivals, events = case
    target = data.draw(st.integers(0, len(arrivals) - 1))
    bump = data.draw(st.lists(st.integers(1, 10_000), min_size=len(arrivals), max_size=len(arrivals)))
    full = simulate_pools(arrivals, events, **KW3)
    x = arrivals[target]
    t = x.at_s
    by_id = {c.id: c for c in full.charts}
    cut = []
    for a, extra in zip(arrivals, bump):
        if a.at_s > t:
            continue
        c = by_id[a.id]
        if c.finish_s is not None and c.finish_s <= t:
            cut.append(a)
        elif c.start_s is not None and c.start_s <= t:
            cut.append(Arrival(a.id, a.org, a.workflow, a.at_s, (t - c.start_s) + extra * 0.5, a.priority))
        else:
            cut.append(Arrival(a.id, a.org, a.workflow, a.at_s, float(extra), a.priority))
    replay = simulate_pools(cut, [e for e in events if e.at_s <= t], **KW3)
    got = {c.id: c for c in replay.charts}
    assert got[x.id].eta_at_arrival_s == by_id[x.id].eta_at_arrival_s
    assert got[x.id].eta_p90_at_arrival_s == by_id[x.id].eta_p90_at_arrival_s


# ------------------------------------------------------------------------ the phantoms' rule
def _backlog(pools: Pools, weights: dict, queued: dict, senders: dict, fade_s: float = 1e12):
    """A queue of ``queued`` (org -> charts, all at 0) and a forecast that saw each of
    ``senders`` (org -> period) send one chart per period for an hour."""
    q = FairQueue(budget=pools.capacity["default"], weights=weights, pools=pools)
    fc = Forecaster(Durations({}, 600.0), ForecastParams(fade_s=fade_s))
    i = 0
    for org, (wf, n) in queued.items():
        for _ in range(n):
            q.add(QueuedChart(f"{org}{i}", org, wf, 0.0, i))
            fc.observe_arrival(org, wf, 0.0)
            i += 1
    for org, (wf, period) in senders.items():
        for k in range(int(3600 / period)):
            fc.observe_arrival(org, wf, k * period)
    return q, fc


def test_phantoms_of_an_org_on_another_pool_never_pass_a_chart():
    """A sends every 100 s on pool b; X's backlog draws on pool a: A's expected charts take
    rounds ahead of X's later charts, but draw on b only, so X's ETAs are the lane pass's."""
    pools = Pools({"default": 1, "a": 2, "b": 2}, {("X", "w"): (("a", 1),), ("A", "w"): (("b", 1),)})
    q, fc = _backlog(pools, {"X": 1, "A": 1}, {"X": ("w", 20)}, {"A": ("w", 100.0)})
    fore = fc.etas(q, [], 3600.0)
    lanes = q.etas([], 3600.0, estimate=fc.mean)
    assert {k: v for k, v in fore.etas.items()} == dict(lanes.etas)
    # the same org sending on X's pool does pass X's later charts, as in one budget
    pools2 = Pools({"default": 1, "a": 2, "b": 2}, {("X", "w"): (("a", 1),), ("A", "w"): (("a", 1),)})
    q2, fc2 = _backlog(pools2, {"X": 1, "A": 1}, {"X": ("w", 20)}, {"A": ("w", 100.0)})
    fore2 = fc2.etas(q2, [], 3600.0)
    assert [fore2.etas[f"X{i}"].start_s for i in range(6)] == [0, 0, 600, 1200, 1800, 2400]


def test_a_phantom_on_two_pools_waits_for_both_and_holds_each_pool_behind_it():
    """B's charts draw on a and b; while a is busy with X's backlog, B's expected charts are
    let in as a's walk reaches their arrivals (the latest of their pools' clocks) and then
    start when a frees: b's later charts (Y's) start behind them, head-of-line per pool."""
    pools = Pools({"default": 1, "a": 1, "b": 1},
                  {("X", "w"): (("a", 1),), ("B", "w"): (("a", 1), ("b", 1)), ("Y", "w"): (("b", 1),)})
    q, fc = _backlog(pools, {"X": 1, "B": 1, "Y": 1}, {"X": ("w", 4), "Y": ("w", 4)}, {"B": ("w", 600.0)})
    fore = fc.etas(q, [], 3600.0)
    lanes = q.etas([], 3600.0, estimate=fc.mean)
    # with no phantom Y's charts run back to back on b from 0
    assert [lanes.etas[f"Y{i}"].start_s for i in range(4, 8)] == [0, 600, 1200, 1800]
    # B's first phantom (one per 600 s) arrives at 300, is let in once the first round is
    # walked (a's and b's clocks at 600) in that round, so ahead of X's and Y's second
    # charts: it starts at 600, when both free, and holds a and b until 1200; so each round
    assert [fore.etas[f"X{i}"].start_s for i in range(4)] == [0, 1200, 2400, 3600]
    assert [fore.etas[f"Y{i}"].start_s for i in range(4, 8)] == [0, 1200, 2400, 3600]
    # no chart starts earlier than without the phantoms
    assert all(fore.etas[k].start_s >= lanes.etas[k].start_s for k in lanes.etas)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(states())
def test_phantoms_only_delay(case):
    """With three pools, each real chart's forecast start is at least its start with no
    phantoms (the same learned durations): the phantoms only add work ahead."""
    orgs, budget, weights, costs, avgs, params, now, arrivals, finishes, running, _ = case
    pools = Pools({"default": budget, "p": 2, "q": 1},
                  {(o, w): ((("p", 1 + c % 3 // 2),) if c % 2 else (("default", c), ("q", 1)))
                   for (o, w), c in costs.items()})
    fc = Forecaster(Durations(avgs, 100.0), params)
    q = FairQueue(budget=budget, weights=weights, pools=pools)
    for i, (o, w, at, kind) in enumerate(sorted(arrivals, key=lambda a: a[2])):
        fc.observe_arrival(o, w, at)
        if kind < 7:
            q.add(QueuedChart(f"c{i}", o, w, at, i, priority=kind == 0))
    for o, w, d in finishes:
        fc.observe_finish(o, w, d)
    run = [RunningChart(f"r{i}", o, w, at, 1) for i, (o, w, at, c) in enumerate(running)]
    with_ph = fc.etas(q, run, now).etas
    bare = Forecaster(fc.estimate, replace(params, phantoms=False))
    bare._pairs, bare._orgs = fc._pairs, fc._orgs
    without = bare.etas(q, run, now).etas
    assert with_ph.keys() == without.keys()
    for k, e in without.items():
        assert with_ph[k].start_s >= e.start_s or math.isnan(e.start_s)
    # and with no phantoms it is the pools' lane pass with the learned durations
    lanes = q.etas(run, now, estimate=fc.mean).etas
    assert _same(dict(without), {k: v for k, v in lanes.items()})


def test_with_limits_the_pass_refuses_and_the_contract_keeps_lanes():
    pools = Pools({"default": 2, "a": 2}, {("A", "w"): (("a", 1),)}, {("A", "a"): Limit(max=1)})
    q = FairQueue(budget=2, weights={"A": 1}, pools=pools)
    with pytest.raises(ValueError):
        Forecaster().etas(q, [], 0.0)
    trace = {"budget": 1, "orgs": [{"id": "A", "weight": 1}], "eta_model": "forecast",
             "pools": [{"id": "a", "capacity": 2}], "costs": [{"org": "A", "workflow": "w", "pools": {"a": 1}}],
             "arrivals": [{"id": "a1", "org": "A", "workflow": "w", "at_s": 0, "actual_s": 5}]}
    out = simulate_json(trace)
    assert out["eta_model"] == "forecast" and out["charts"][0]["eta_p90_at_arrival_s"] == 600.0
    assert out["charts"][0]["pools"] == {"a": 1}
    with pytest.raises(ScenarioError) as err:
        simulate_json({**trace, "limits": [{"org": "A", "pool": "a", "max": 1}]})
    assert str(err.value).startswith("eta_model: only lanes is defined with pools under backfill or with limits")
    with pytest.raises(ScenarioError):
        simulate_json({**trace, "dispatch": "backfill"})


def test_a_phantom_waits_for_its_own_pools_clock_not_the_busiest_pools():
    """Y sends on b every 400 s (300 s charts), Z has three 100 s charts queued on b, X six
    2000 s charts on a. X's first chart moves the walk's latest clock to 2000 s, but Y's
    phantoms arriving by then are let in only as b's own walk reaches their arrivals (else
    the one arriving at 200 s would take round 1 and start at 100 s, before it arrives):
    Z's ETAs are those of the same queue without X."""
    def z_etas(with_x: bool) -> list:
        pools = Pools({"default": 1, "a": 1, "b": 1},
                      {("X", "w"): (("a", 1),), ("Z", "w"): (("b", 1),), ("Y", "w"): (("b", 1),)})
        q = FairQueue(budget=1, weights={"X": 1, "Z": 1, "Y": 1}, pools=pools)
        fc = Forecaster(Durations({("X", "w"): 2000.0, ("Z", "w"): 100.0, ("Y", "w"): 300.0}, 600.0),
                        ForecastParams(fade_s=1e12))
        i = 0
        for org, n in (("X", 6 if with_x else 0), ("Z", 3)):
            for _ in range(n):
                q.add(QueuedChart(f"{org}{i}", org, "w", 0.0, i))
                fc.observe_arrival(org, "w", 0.0)
                i += 1
        for k in range(9):
            fc.observe_arrival("Y", "w", k * 400.0)
        etas = fc.etas(q, [], 3600.0).etas
        return [tuple(e) for k, e in etas.items() if k.startswith("Z")]
    # Y's phantom at 200 s is let in when Z's second chart frees b at 200 s, in a round after
    # Z's third chart's: Z's charts run back to back. (Let in at the latest clock, 2000 s,
    # it would take round 1, start at 100 s, before it arrives, and Z's would start at 0, 400
    # and 800 s.)
    assert z_etas(True) == z_etas(False) == [(0, 100), (100, 200), (200, 300)]
