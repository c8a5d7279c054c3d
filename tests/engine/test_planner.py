"""The capacity planner (fairsched.engine.planner) against brute force on small scenarios:
every budget from 1 to the bound applied as the live queue applies it (``set_budget``) and
measured, the smallest that meets the goal; the answers when no budget would do; its search
alone, with any monotone goal and any guesses; and the scheduler's side (a plan waits as long
as its web request, in a task of its own)."""
from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings, strategies as st

from common import previews
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
        ok = (report.clear_s <= clear_by - T) if clear_by is not None else planner.late_charts(cap, report.etas, T) == 0
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
        assert want == got.budget, (got, want)


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


async def test_a_plan_is_given_its_own_wait_and_a_preview_never_waits_behind_it(monkeypatch, tmp_path):
    # A plan takes several passes: the scheduler computes it as long as its web request waits
    # (the request's "wait"), in a task of its own; a preview asked meanwhile is answered first.
    # The plan's child goes on only once the preview is answered (a file the answer leaves; 30 s
    # at most): a preview that waited behind the plan would leave it there, and fail the order.
    host = FakeHost(budget=1, charts=6, weights=(1, 1))
    await host.load()
    real = planner.plan_budget
    answered = tmp_path / "preview-answered"

    def slow(*args, **kw):  # (in the forked child)
        until = time.time() + 30
        while not answered.exists() and time.time() < until:
            time.sleep(0.02)
        return real(*args, **kw)
    monkeypatch.setattr(planner, "plan_budget", slow)
    now = time.time()
    plan = {"kind": "plan", "clear_by": now + 10 ** 7, "meet_due": False}
    requests = [json.dumps({"id": "plan", "at": now - 5, "wait": 60, "change": plan}),  # 5 s old, within its wait
                json.dumps({"id": "stale", "at": now - 5, "wait": 3, "change": {"kind": "budget", "value": 2}}),
                json.dumps({"id": "preview", "at": now, "wait": 60, "change": {"kind": "budget", "value": 2}})]
    order: list[str] = []

    class Port:
        async def next_request(self, timeout_s):
            if requests:
                return requests.pop(0)
            host.leading = False
            return None

        async def answer(self, rid, body):
            order.append(rid)
            if rid == "preview":
                answered.touch()
            if rid == "plan":
                assert json.loads(body)["budget"] == 1
    await Previews(host, Port()).serve()
    assert order == ["preview", "plan"]  # the stale preview dropped; the plan answered once the preview was


def test_a_requests_deadline_is_its_time_plus_its_wait_or_its_kinds_default():
    assert Previews.deadline_of({"at": 100.0, "wait": 20, "change": {"kind": "plan"}}) == 120.0
    assert Previews.deadline_of({"at": 100.0, "change": {"kind": "plan"}}) == 100.0 + previews.PLAN_WAIT_S
    assert Previews.deadline_of({"at": 100.0, "change": {"kind": "budget"}}) == 100.0 + previews.WAIT_S
    assert Previews.deadline_of({"at": 100.0, "wait": "x", "change": {}}) == 100.0 + previews.WAIT_S
    assert Previews.deadline_of({"at": 100.0, "wait": 10 ** 6}) == 100.0 + Previews.MAX_WAIT_S


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 50), st.integers(0, 400), st.integers(1, 400), st.data())
def test_the_search_finds_the_boundary_of_any_monotone_goal_whatever_its_guesses_say(lo, over, span, data):
    # The guesses only place the probes: with a monotone goal the answer is the boundary,
    # and the probes stay in range, are never repeated and stay within a few per halving.
    bound, threshold = lo + span, lo + over  # the smallest budget that does (past bound: none)
    needs = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-10, 1000).map(float)
    seen: list[int] = []

    def probe(b):
        assert lo <= b <= bound and b not in seen
        seen.append(b)
        return b >= threshold, data.draw(needs)
    got = planner.search(probe, lo, bound, data.draw(needs))
    assert got == (threshold if threshold <= bound else None)
    assert len(seen) <= planner.GUIDED + 2 * (bound - lo + 1).bit_length() + 2, seen


def test_a_few_probes_when_the_clear_time_goes_as_the_work_over_the_budget():
    # The shape of a real backlog (clear-time = work / budget + a tail): the first guess and
    # the secant land next to the answer.
    def probe(b):
        clear = 9.3e6 / b + 300.0
        return clear <= 120_000, b * clear / 120_000
    assert planner.search(probe, 2, 100_000, 9.3e6 / 120_000) == 78  # 9.3e6 / 78 + 300 <= 120,000 < 9.3e6 / 77 + 300
    probes = []
    planner.search(lambda b: probes.append(b) or probe(b), 2, 100_000, 9.3e6 / 120_000)
    assert len(probes) <= 3, probes


@pytest.mark.parametrize("meet_due", [False, True])
def test_the_lane_models_answer_is_brute_forces_at_a_larger_budget(meet_due):
    # 1,500 charts whose answer is a few dozen lanes (durations of 300 and 500 s: the
    # clear-time moves in steps), against every budget up to 100.
    spec = [(i % 3, i % 2, False, False, None if i % 5 else 4000.0 + 9 * i) for i in range(1500)]
    kw = {"meet_due": True} if meet_due else {"clear_by": T + 14_000}
    bound = 100
    got = planner.plan_budget(state_of(spec, budget=1, model="lanes", turnaround=None), T, bound=bound, **kw)
    want = None
    for b in range(1, bound + 1):
        state = state_of(spec, budget=1, model="lanes", turnaround=None)
        state.queue.set_budget(b)
        cap = state.capture()
        report = cap.eta_report(T)
        if (report.clear_s <= kw["clear_by"] - T) if not meet_due else planner.late_charts(cap, report.etas, T) == 0:
            want = b
            break
    assert want is not None and 3 < want < bound  # the search has work to do
    assert got.budget == want and got.probes <= 8, got


@pytest.mark.parametrize("hint_at", [1, 60, 68, 100, 10 ** 6])
def test_the_last_passs_clear_time_is_only_a_first_guess(hint_at):
    # The scheduler hands the planner its last pass (a budget and the clear-time there): a guess
    # that saves a pass at 100k queued (bench/whatif.py), and that changes no answer.
    spec = [(i % 3, i % 2, False, False, None) for i in range(600)]
    kw = {"clear_by": T + 6000}
    plain = planner.plan_budget(state_of(spec, budget=1, model="lanes", turnaround=None), T, bound=100, **kw)
    at = state_of(spec, budget=1, model="lanes", turnaround=None)
    at.queue.set_budget(hint_at)
    hint = (hint_at, T + at.capture().eta_report(T).clear_s)
    got = planner.plan_budget(state_of(spec, budget=1, model="lanes", turnaround=None), T, bound=100, hint=hint, **kw)
    assert (got.budget, got.clear_s) == (plain.budget, plain.clear_s) and 3 < got.budget < 100
