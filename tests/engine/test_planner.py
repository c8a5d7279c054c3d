"""The capacity planner (fairsched.engine.planner) against brute force on small scenarios:
every budget from 1 to the bound applied as the live queue applies it (``set_budget``) and
measured, the smallest that meets the goal; and the answers when no budget would do."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from fairsched.engine import planner
from fairsched.engine.previews import Previews
from tests.engine.fakes import FakeHost
from tests.engine.test_whatif import T, state_of

BOUND = 12
spec_st = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1), st.just(False) | st.booleans(),
                             st.just(False), st.none() | st.floats(0, 4000)), min_size=1, max_size=25)


def brute(spec, model, dispatch, *, clear_by=None, meet_due=False):
    for b in range(1, BOUND + 1):
        state = state_of(spec, budget=1, model=model, dispatch=dispatch)
        state.queue.set_budget(b)
        cap = state.capture()
        if cap.queue.blocked:
            continue
        report = cap.eta_report(T)
        ok = (report.clear_s <= clear_by - T) if clear_by is not None else planner._late(cap, report.etas, T) == 0
        if ok:
            return b
    return None


@settings(max_examples=80, deadline=None)
@given(spec_st, st.integers(0, 2), st.floats(300, 6000), st.booleans())
def test_the_lane_models_answer_is_brute_forces(spec, dispatch, horizon, meet_due):
    kw = {"meet_due": True} if meet_due else {"clear_by": T + horizon}
    got = planner.plan_budget(state_of(spec, budget=1, model="lanes", dispatch=dispatch), T, bound=BOUND, **kw)
    assert got.budget == brute(spec, "lanes", dispatch, **kw), got


@settings(max_examples=60, deadline=None)
@given(spec_st, st.integers(0, 2), st.floats(300, 6000), st.booleans())
def test_the_forecasts_answer_meets_the_goal_and_one_less_does_not(spec, dispatch, horizon, meet_due):
    kw = {"meet_due": True} if meet_due else {"clear_by": T + horizon}
    got = planner.plan_budget(state_of(spec, budget=1, model="forecast", dispatch=dispatch), T, bound=BOUND, **kw)
    want = brute(spec, "forecast", dispatch, **kw)
    if got.budget is None:
        assert want is None
    else:
        assert want is not None and want <= got.budget
        assert want == got.budget or "not monotone" in got.why, (got, want)


def test_no_budget_would_do_says_so():
    spec = [(0, 0, False, False, None)] * 5
    got = planner.plan_budget(state_of(spec, model="lanes"), T, clear_by=T + 10, bound=BOUND)
    assert got.budget is None and "no budget up to 12 clears the backlog by then" in got.why
    late = planner.plan_budget(state_of([(1, 0, False, False, -50.0)], model="lanes"), T, meet_due=True, bound=BOUND)
    assert late.budget is None and "keeps every due time" in late.why  # due before any chart can finish


def test_held_and_paused_charts_are_left_out_and_counted():
    spec = [(0, 0, True, False, None), (1, 0, False, False, None), (1, 0, False, False, None)]
    got = planner.plan_budget(state_of(spec, model="lanes", weights=(1, 1, 0)), T, clear_by=T + 10_000, bound=BOUND)
    assert got.budget == 1 and got.set_aside == 1 and "held or paused" in got.why


def test_one_goal_exactly():
    with pytest.raises(ValueError):
        planner.plan_budget(state_of([(0, 0, False, False, None)]), T)


async def test_the_scheduler_plans_in_a_forked_child_and_keeps_its_budget():


    host = FakeHost(budget=1, charts=6, weights=(1, 1))
    state = await host.load()
    order = list(state.queue)
    previews = Previews(host, None)
    now = host.clock.time()
    out = await previews.preview({"kind": "plan", "clear_by": now + 10 ** 7, "meet_due": False})
    assert out["budget"] == 1 and out["goal"] == "clear_by" and out["current"] == 1
    soon = await previews.preview({"kind": "plan", "clear_by": None, "meet_due": False})
    assert soon["param"] == "clear_by"
    assert state.queue.budget == 1 and list(state.queue) == order
