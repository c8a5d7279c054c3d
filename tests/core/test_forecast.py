"""The forecasting ETA model (simulate.md v2, "ETA models")."""
from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling import Durations, QueuedChart
from scheduling.queue import FairQueue
from scheduling.forecast import Forecaster, ForecastParams
from scheduling.contract.simulator import Arrival, simulate
from tests.core.helpers import arrivals_and_events
from scheduling.contract.fields import ScenarioError
from scheduling.contract.scenario import simulate as simulate_json


def test_phantom_arrivals_of_a_small_org_take_rounds_ahead_of_a_big_backlog():
    # A has 20 charts queued at once; B has been sending one chart every 100 s.
    # The lane simulation gives A's 20th chart its place as if B sent nothing more;
    # the forecast lets B's expected charts take a turn in each round before it.
    q = FairQueue(budget=2, weights={"A": 1, "B": 1})
    fc = Forecaster(Durations({}, 600.0), ForecastParams(fade_s=1e12))
    for i in range(20):
        q.add(QueuedChart(f"a{i}", "A", "w", 0.0, i))
        fc.observe_arrival("A", "w", 0.0)
    for i in range(36):
        fc.observe_arrival("B", "w", i * 100.0)
    lanes = q.etas([], 3600.0)
    fore = fc.etas(q, [], 3600.0)
    assert [lanes.etas[f"a{i}"].start_s for i in range(6)] == [0, 0, 600, 600, 1200, 1200]
    # B arrives every 100 s (long-run rate 36 / 3600 s): one B per round from its first phantom
    assert [fore.etas[f"a{i}"].start_s for i in range(6)] == [0, 0, 600, 1200, 1800, 2400]
    assert fore.etas["a19"].finish_s > lanes.etas["a19"].finish_s + 3000


def test_without_any_other_org_the_forecast_is_the_lane_simulation():
    q = FairQueue(budget=3, weights={"A": 2})
    fc = Forecaster(Durations({("A", "w"): 90.0}, 600.0))
    for i in range(10):
        q.add(QueuedChart(f"a{i}", "A", "w", 0.0, i))
        fc.observe_arrival("A", "w", 0.0)
    # A's own phantoms are younger than all of its queued charts: never ahead of them
    assert fc.etas(q, [], 50.0).etas == q.etas([], 50.0, estimate=fc.estimate).etas


def test_learned_durations_shrink_towards_the_prior():
    fc = Forecaster(Durations({("A", "w"): 100.0}, 600.0), ForecastParams(prior_n=5.0))
    assert fc.mean("A", "w") == 100.0
    for _ in range(5):
        fc.observe_finish("A", "w", 300.0)
    assert fc.mean("A", "w") == pytest.approx(200.0)  # (5 x 100 + 5 x 300) / 10
    assert fc.mean("B", None) == 600.0                 # unknown pair: the prior's default


def test_log_normal_fit_gives_median_below_mean_and_p90_above():
    fc = Forecaster(Durations({}, 100.0), ForecastParams(prior_n=0.0))
    for d in (50.0, 100.0, 200.0, 100.0, 50.0, 200.0):
        fc.observe_finish("A", "w", d)
    s = fc.log_sigma("A", "w")
    assert s == pytest.approx(math.log(2) * math.sqrt(4 / 5), rel=1e-6)
    assert fc.median("A", "w") < fc.mean("A", "w") < fc.p90("A", "w")


def test_a_held_org_sends_no_phantoms():
    q = FairQueue(budget=1, weights={"A": 1, "B": 0})
    fc = Forecaster(Durations({}, 60.0), ForecastParams(fade_s=1e12))
    for i in range(5):
        q.add(QueuedChart(f"a{i}", "A", "w", 0.0, i))
        fc.observe_arrival("A", "w", 0.0)
    for i in range(100):
        fc.observe_arrival("B", "w", i * 1.0)
    assert fc.etas(q, [], 100.0).etas == q.etas([], 100.0, estimate=fc.estimate).etas


def test_p90_finish_from_the_duration_spread_then_from_how_late_charts_finished():
    fc = Forecaster(Durations({}, 100.0), ForecastParams(prior_n=0.0))
    for d in (50.0, 200.0) * 5:
        fc.observe_finish("A", "w", d)
    eta = (30.0, 155.0)  # start, finish
    assert fc.p90_finish("A", "w", eta) == pytest.approx(30.0 + fc.p90("A", "w"))
    # 20 charts finished, promised 100 s ahead at t=0, finishing at 100 .. 290 s: the 90th
    # percentile of actual / promised is 2.7, so the bound stretches the ETA by it
    for i in range(20):
        fc.record_eta(f"c{i}", 0.0, 100.0)
        fc.record_eta(f"c{i}", 0.0, 999.0)  # only the first ETA counts
        fc.observe_finish("A", "w", 10.0, chart_id=f"c{i}", finished_at=100.0 + 10 * i)
    assert fc.p90_finish("A", "w", eta) == pytest.approx(max(30.0 + fc.p90("A", "w"), 155.0 * 2.7))



def test_p90_finish_counts_the_promises_already_late_with_their_ratio_so_far():
    # 30 charts promised at t=0 to finish 100 s later, none finished yet: the bound has no
    # finished chart to learn from, but at t=300 each is known to take at least 3x its
    # promise, so the bound stretches an ETA by 3 (a wave of late charts is seen as it
    # happens, not hours later when they finish)
    fc = Forecaster(Durations({}, 100.0), ForecastParams(prior_n=0.0))
    eta = (30.0, 155.0)
    own = 30.0 + fc.p90("A", "w")
    for i in range(30):
        fc.record_eta(f"c{i}", 0.0, 100.0)
    assert fc.p90_finish("A", "w", eta, now=50.0) == pytest.approx(max(own, 155.0))  # none late yet
    assert fc.p90_finish("A", "w", eta, now=300.0) == pytest.approx(155.0 * 3.0)
    assert fc.p90_finisher(300.0)("A", "w", eta) == pytest.approx(155.0 * 3.0)
    # without ``now``: the latest instant the forecast has seen (an arrival here)
    fc.observe_arrival("A", "w", 300.0)
    assert fc.p90_finish("A", "w", eta) == pytest.approx(155.0 * 3.0)
    # once they finish, on time after all or cancelled, they count as finished or not at all
    for i in range(30):
        if i < 25:
            fc.observe_finish("A", "w", 10.0, chart_id=f"c{i}", finished_at=300.0)
        else:
            fc.forget(f"c{i}")
    assert fc.p90_finish("A", "w", eta, now=400.0) == pytest.approx(155.0 * 3.0)  # 25 finished at 3x
    # and a copy learns the same
    assert fc.copy().p90_finish("A", "w", eta, now=400.0) == fc.p90_finish("A", "w", eta, now=400.0)


# --------------------------------------------------------------- the simulator
def _trace_args(arrivals, budget=2):
    orgs = sorted({a.org for a in arrivals})
    return dict(budget=budget, weights={o: 1 for o in orgs}, estimate=Durations({}, 100.0))


def test_simulate_dispatch_does_not_depend_on_the_eta_model():
    arr = [Arrival(f"{o}{i}", o, "w", float(i * 7 % 50 + (o == "B") * 3), 60.0 + i * 11 % 70)
           for o in "ABC" for i in range(15)]
    lanes = simulate(arr, budget=3, weights={"A": 1, "B": 2, "C": 1}, eta_model="lanes")
    fore = simulate(arr, budget=3, weights={"A": 1, "B": 2, "C": 1}, eta_model="forecast")
    assert [(c.start_s, c.finish_s) for c in lanes.charts] == [(c.start_s, c.finish_s) for c in fore.charts]
    assert [c.eta_at_arrival_s for c in lanes.charts] != [c.eta_at_arrival_s for c in fore.charts]
    assert fore.eta_model == "forecast"


def test_simulate_json_eta_model_field():
    trace = {"budget": 1, "orgs": [{"id": "A", "weight": 1}], "eta_model": "forecast",
             "arrivals": [{"id": "a1", "org": "A", "workflow": "w", "at_s": 0, "actual_s": 5}]}
    out = simulate_json(trace)
    assert out["eta_model"] == "forecast"
    assert out["charts"][0]["eta_at_arrival_s"] == 600.0
    assert out["charts"][0]["eta_p90_at_arrival_s"] == 600.0  # no spread known yet
    lanes = simulate_json({**trace, "eta_model": "lanes"})
    assert lanes["eta_model"] == "lanes" and "eta_p90_at_arrival_s" not in lanes["charts"][0]
    del trace["eta_model"]
    assert simulate_json(trace)["eta_model"] == "lanes"


@pytest.mark.parametrize("value,message", [
    ("psychic", "eta_model: unknown ETA model 'psychic' (expected one of lanes, forecast)"),
    (3, "eta_model: expected a string, got 3"),
], ids=["unknown", "not-a-string"])
def test_simulate_json_refuses_a_bad_eta_model(value, message):
    trace = {"budget": 1, "orgs": [{"id": "A", "weight": 1}], "eta_model": value, "arrivals": []}
    with pytest.raises(ScenarioError) as err:
        simulate_json(trace)
    assert str(err.value) == message


# --------------------------------------------------------------- no peeking
@st.composite
def traces(draw):
    arrivals, events = arrivals_and_events(draw, ["A", "B", "C"], most=14, span=400)
    n = len(arrivals)
    target = draw(st.integers(0, n - 1))
    bump = draw(st.lists(st.integers(1, 10_000), min_size=n, max_size=n))
    return arrivals, events, target, bump


KW = dict(budget=2, weights={"A": 1, "B": 2, "C": 1}, costs={("A", "y"): 2, ("C", "x"): 2},
          estimate=Durations({("A", "x"): 50.0, ("B", None): 120.0}, 90.0),
          eta_model="forecast", forecast_params=ForecastParams(fade_s=600.0, recent_tau_s=200.0, decay_s=300.0,
                                                               long_floor_s=100.0))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces())
def test_no_peeking_forecast_at_arrival_uses_only_the_past(case):
    """simulate.md v2: replaying the trace cut at a chart's arrival, with the
    unknown durations replaced by others that keep those charts unfinished at
    that instant, gives the same forecast."""
    arrivals, events, target, bump = case
    full = simulate(arrivals, events, **KW)
    x = arrivals[target]
    t = x.at_s
    by_id = {c.id: c for c in full.charts}
    cut = []
    for a, extra in zip(arrivals, bump):
        if a.at_s > t:
            continue  # later arrivals: unknown at t
        c = by_id[a.id]
        if c.finish_s is not None and c.finish_s <= t:
            cut.append(a)  # finished by t: its duration is known
        elif c.start_s is not None and c.start_s <= t:
            # running at t: any duration that keeps it unfinished at t
            cut.append(Arrival(a.id, a.org, a.workflow, a.at_s, (t - c.start_s) + extra * 0.5, a.priority))
        else:
            cut.append(Arrival(a.id, a.org, a.workflow, a.at_s, float(extra), a.priority))  # not started
    replay = simulate(cut, [e for e in events if e.at_s <= t], **KW)
    got = {c.id: c for c in replay.charts}
    assert got[x.id].eta_at_arrival_s == by_id[x.id].eta_at_arrival_s
    assert got[x.id].eta_p90_at_arrival_s == by_id[x.id].eta_p90_at_arrival_s
    # and the check can fail: the forecast does read durations that are known
    assert [c.start_s for c in replay.charts if c.start_s is not None and c.start_s <= t] == \
        [by_id[c.id].start_s for c in replay.charts if c.start_s is not None and c.start_s <= t]


def _bench_eta():
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("bench_eta", Path(__file__).resolve().parents[2] / "bench" / "eta.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_told_the_true_arrivals_and_exact_durations_the_forecast_pass_is_exact():
    """``bench/eta.py``'s foresight (the pass's ``expected_arrivals`` replaced by the real
    future arrivals) is the forecast's limit: with every duration equal to its estimate,
    each ETA at arrival is the chart's actual finish; the forecast, which cannot know the
    arrivals, is not. So what separates the two on a trace is the arrivals alone."""
    eta = _bench_eta()
    trace = eta.make_trace(seed=11, n_orgs=4, hours=1.0, budget=6, sigma=0.0, tail_hours=0.5)
    avg = {(a["org"], a["workflow"]): a["avg_s"] for a in trace["averages"]}
    for a in trace["arrivals"]:
        a["actual_s"] = avg[(a["org"], a["workflow"])]

    def worst(model):
        charts = eta.run_model(trace, model)
        errs = [abs(c["eta"] - c["finish_s"]) for c in charts if c["eta"] is not None]
        assert len(errs) == len(trace["arrivals"]) == 38
        return max(errs)

    assert worst("foresight") < 1e-6
    assert worst("forecast") > 600.0


def test_bench_sampled_futures_draw_other_arrivals_of_the_same_process():
    """``bench/eta.py``'s bounds: ``make_trace(future_seed=)`` keeps the trace's process (its
    orgs, their duration factors, the waves' spells, so the rates) and draws other arrivals;
    the waves keep the overload's mean load."""
    eta = _bench_eta()
    kw = dict(seed=5, n_orgs=5, hours=2.0, tail_hours=0.5, budget=8, waves=0.6)
    a, b = eta.make_trace(**kw), eta.make_trace(**kw, future_seed=99)
    assert a["averages"] == b["averages"] and a["_rate"] == b["_rate"]
    assert [x["at_s"] for x in a["arrivals"]] != [x["at_s"] for x in b["arrivals"]]
    assert eta.make_trace(**kw)["arrivals"] == a["arrivals"]  # a seed is one trace
    spells = a["_rate"]["spells"][:-1]
    assert spells[0][0] == 0.0 and spells[-1][1] == 2 * 3600.0
    assert {sc for _, _, sc in spells} == {0.4, 1.6}
    # the charts come 4x as densely in the high spells as in the low (1.6 against 0.4), bursts
    # included, over 20 draws
    per_s = {0.4: [0, 0.0], 1.6: [0, 0.0]}
    for sd in range(20):
        at = [x["at_s"] for x in eta.make_trace(**kw, future_seed=sd)["arrivals"]]
        for b0, e0, sc in spells:
            per_s[sc][0] += sum(b0 <= t < e0 for t in at)
            per_s[sc][1] += e0 - b0
    density = {sc: n / t for sc, (n, t) in per_s.items()}
    assert 3.0 < density[1.6] / density[0.4] < 5.5
