"""What-if previews, the pure part (fairsched.engine.whatif) and the scheduler's side
(fairsched.engine.previews) with fakes: the change made as the live queue makes it, the
counts as the ETA pass counts them, a change that changes nothing, and the loop's state
untouched."""
from __future__ import annotations

import dataclasses
import json
import time

import pytest
from hypothesis import given, settings, strategies as st

from fairsched.engine import whatif
from fairsched.engine.due_states import due_pass
from fairsched.engine.eta_passes import EtaPasses
from fairsched.engine.previews import Previews
from fairsched.engine.store.rows import ChartRow, Config, OrgRow, World
from fairsched.engine.live_types import Effects
from fairsched.engine.state import LiveState
from tests.engine.fakes import FakeHost

T = 1_800_000_000.0
WFS = ("code", "audit")


def state_of(spec, *, budget=3, weights=(1, 2, 1), model="lanes", dispatch=0, turnaround=3600.0):
    """``spec``: (org index, workflow index, paused, priority, own due offset or None) per chart."""
    orgs = [OrgRow(i + 1, f"O{i + 1}", f"o{i + 1}", w, turnaround if i == 0 else None)
            for i, w in enumerate(weights)]
    charts = []
    for n, (o, wf, paused, prio, due) in enumerate(spec, start=1):
        charts.append(ChartRow(n, 1 + o % len(weights), WFS[wf], "queued", T - 5000 + 10 * n, priority=prio,
                               prioritized_at=T - 100 if prio else None, paused=paused,
                               due_at=None if due is None else T + due, due_explicit=due is not None))
    costs = {("2", "audit"): 2, ("3", "audit"): 3}
    avg = {(str(o.id), wf): 300.0 + 200 * (wf == "audit") for o in orgs for wf in WFS}
    state = LiveState(World(Config(budget, eta_model=model), orgs, costs, avg, charts))
    if dispatch:  # some dispatched: the persistent rounds differ from a fresh rank
        planned = state.to_start()[:dispatch]
        state.commit_dispatch(planned, {cid: ("run", T - 60) for cid in planned})
    return state


charts_st = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1), st.booleans() | st.just(False),
                               st.booleans().map(lambda b: b and False) | st.just(True),
                               st.none() | st.floats(-600, 9000)), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(charts_st, st.integers(1, 8), st.integers(1, 8), st.integers(0, 3))
def test_rerank_all_gives_the_keys_set_budget_gives(spec, budget, new_budget, dispatch):
    bulk, one_by_one = state_of(spec, budget=budget, dispatch=dispatch), state_of(spec, budget=budget, dispatch=dispatch)
    whatif.apply_change(bulk, whatif.Change("budget", new_budget))
    one_by_one.queue.set_budget(new_budget)
    assert list(bulk.queue) == list(one_by_one.queue)
    for kind in ("held", "paused", "blocked"):
        assert sorted(getattr(bulk.queue, kind)) == sorted(getattr(one_by_one.queue, kind))
    assert [bulk.queue.round_of(c) for c in bulk.queue] == [one_by_one.queue.round_of(c) for c in one_by_one.queue]


@settings(max_examples=40, deadline=None)
@given(charts_st, st.sampled_from(["lanes", "forecast"]))
def test_the_at_risk_counts_are_the_due_passs(spec, model):
    state = state_of(spec, model=model)
    cap = state.capture()
    report = cap.eta_report(T)
    p90 = cap.forecast.p90_finisher()
    due = due_pass(cap, report.etas, T, p90)
    want = {str(o): c["at_risk"] + c["late"] for o, c in due.orgs.items() if c["at_risk"] + c["late"]}
    assert whatif.at_risk_counts(cap, report.etas, T, p90) == want


@pytest.mark.parametrize("model", ["lanes", "forecast"])
def test_a_change_that_changes_nothing_previews_no_difference(model):
    spec = [(i % 3, i % 2, False, False, None if i % 4 else 1200.0) for i in range(24)]
    for change in (whatif.Change("weight", 2, org=2), whatif.Change("budget", 3),
                   whatif.Change("cost", 2, org=2, workflow="audit")):
        state = state_of(spec, model=model, dispatch=2)
        before = whatif.before_of(state, T)
        out = whatif.answer(change, before, whatif.after_of(state, change, T))
        assert out["clear_before"] == out["clear_after"] is not None
        for row in out["orgs"].values():
            assert (row["clear_before"], row["at_risk_before"]) == (row["clear_after"], row["at_risk_after"])
        assert out["at_risk_before"] > 0  # the first org's turnaround and own due times count


def test_a_budget_raise_a_hold_and_a_weight_move_clear_times_the_right_way():
    spec = [(i % 3, 0, False, False, None) for i in range(30)]
    state = state_of(spec, budget=2)
    before = whatif.before_of(state, T)
    raised = whatif.answer(whatif.Change("budget", 6), before, whatif.after_of(state_of(spec, budget=2),
                                                                               whatif.Change("budget", 6), T))
    assert raised["clear_after"] < raised["clear_before"]
    held = whatif.answer(whatif.Change("weight", 0, org=1), before,
                         whatif.after_of(state_of(spec, budget=2), whatif.Change("weight", 0, org=1), T))
    assert held["orgs"]["1"]["clear_after"] is None  # held: no clear-time, not "clear"
    assert held["orgs"]["2"]["clear_after"] < held["orgs"]["2"]["clear_before"]  # the others go sooner
    assert held["orgs"]["1"]["at_risk_after"] == 10  # its charts, due in an hour, have no ETA now
    heavier = whatif.answer(whatif.Change("weight", 5, org=3), before,
                            whatif.after_of(state_of(spec, budget=2), whatif.Change("weight", 5, org=3), T))
    assert heavier["orgs"]["3"]["clear_after"] < heavier["orgs"]["3"]["clear_before"]


def test_a_change_naming_no_known_org_is_refused_naming_the_parameter():
    with pytest.raises(whatif.ChangeError, match="^org:"):
        whatif.apply_change(state_of([(0, 0, False, False, None)]), whatif.Change("weight", 1, org=99))
    with pytest.raises(whatif.ChangeError, match="^kind:"):
        whatif.Change.from_json({"kind": "nope", "value": 1})


class FakePort:
    def __init__(self, requests):
        self.requests = list(requests)
        self.answers: dict[str, dict] = {}

    async def next_request(self, timeout_s):
        return self.requests.pop(0) if self.requests else None

    async def answer(self, rid, body):
        self.answers[rid] = json.loads(body)


async def test_the_scheduler_answers_in_forked_children_and_its_state_is_untouched():
    host = FakeHost(budget=1, charts=6, weights=(1, 1))
    state = await host.load()
    order, weights, budget = list(state.queue), dict(state.queue.weights), state.queue.budget
    now = time.time()
    # a, b and c wait 60 s (a loaded machine forks three pairs of children in more than a preview's
    # default 3 s: c was once dropped so); "old" waited its default 3 s a minute ago
    port = FakePort([json.dumps({"id": "a", "at": now, "wait": 60, "change": {"kind": "budget", "value": 3}}),
                     json.dumps({"id": "old", "at": now - 60, "change": {"kind": "budget", "value": 3}}),
                     json.dumps({"id": "b", "at": now, "wait": 60, "change": {"kind": "weight", "value": 1, "org": 42}}),
                     json.dumps({"id": "c", "at": now, "wait": 60, "change": {"kind": "weight", "value": 0, "org": 1}})])
    previews = Previews(host, port)

    async def stop_when_drained(timeout_s):
        if not port.requests:
            host.leading = False
            return None
        return port.requests.pop(0)
    port.next_request = stop_when_drained
    await previews.serve()
    assert set(port.answers) == {"a", "b", "c"}  # the old one: nobody waited for it any more
    a = port.answers["a"]
    assert a["change"] == {"kind": "budget", "value": 3}
    assert a["clear_after"] < a["clear_before"]
    assert port.answers["b"]["param"] == "org"
    assert port.answers["c"]["orgs"]["1"]["clear_after"] is None
    assert (list(state.queue), dict(state.queue.weights), state.queue.budget) == (order, weights, budget)


async def test_the_preview_and_the_planner_wait_for_their_children_through_the_clock():
    host = FakeHost(budget=1, charts=4, weights=(1, 1))
    await host.load()
    asked: list[float] = []
    wait_for = host.clock.wait_for

    async def recording(awaitable, timeout_s):
        asked.append(timeout_s)
        return await wait_for(awaitable, timeout_s)
    host.clock.wait_for = recording
    previews = Previews(host, FakePort([]))
    assert "clear_after" in await previews.preview({"kind": "budget", "value": 2})
    assert "error" not in await previews.preview({"kind": "plan", "clear_by": None, "meet_due": True})
    assert asked == [Previews.MAX_WAIT_S, Previews.MAX_WAIT_S]  # the wait given (None: the most)


async def _host_after_a_pass(**kw):
    host = FakeHost(budget=1, charts=8, weights=(1, 1), **kw)
    state = await host.load()
    host.etas = EtaPasses(host)
    host.etas.schedule_eta(Effects(), host.clock.monotonic())
    await host.etas.pass_in_flight
    return host, state


async def test_a_preview_of_the_state_the_last_pass_measured_reuses_its_before_and_answers_as_both_would():
    host, state = await _host_after_a_pass()
    host.clock.advance(5.0)  # the pass was at then; nothing changed since
    then = host.etas.last_measured().now
    previews = Previews(host, None)
    change = {"kind": "weight", "org": 2, "value": 3}
    got = await previews.preview(change)
    assert previews.reused == 1
    twin = await FakeHost(budget=1, charts=8, weights=(1, 1)).load()  # the same state, measured both sides at then
    want = whatif.answer(whatif.Change.from_json(change), whatif.before_of(twin, then),
                         whatif.after_of(twin, whatif.Change.from_json(change), then))
    assert got == want and got["orgs"]["2"]["clear_after"] < got["orgs"]["2"]["clear_before"]
    nothing = await previews.preview({"kind": "budget", "value": 1})
    assert nothing["clear_before"] == nothing["clear_after"] and previews.reused == 2

    host.clock.advance(host.PREVIEW_REUSE_MAX_AGE_S)  # too old: both sides again, at now
    assert host.etas.measured_now() is None
    late = await previews.preview(change)
    assert previews.reused == 2 and late["now"] > got["now"]


@pytest.mark.parametrize("what", ["event", "turnaround", "own due time", "averages", "config"])
async def test_any_change_since_the_pass_means_both_sides_are_computed_again(what):
    host, state = await _host_after_a_pass()
    assert host.etas.measured_now() is not None
    if what == "event":  # an arrival, a dispatch, a finish, a control: the loop counts them
        host.etas.schedule_eta(Effects(events=[{"kind": "queued", "chart": 9}]), host.clock.monotonic())
    elif what == "turnaround":  # no event: the org's row changes
        org = state.orgs[1]
        state.apply_orgs([dataclasses.replace(org, turnaround_s=3600.0)])
    elif what == "own due time":
        row = ChartRow(1, 1, "code", "queued", T, due_at=T + 60, due_explicit=True)
        state.due.apply(1, row)
    elif what == "averages":
        state.apply_averages({("1", "code"): 1234.0})
    else:
        other = "lanes" if state.config.eta_model == "forecast" else "forecast"
        state.config = dataclasses.replace(state.config, eta_model=other)
    assert host.etas.measured_now() is None
    previews = Previews(host, None)
    await previews.preview({"kind": "weight", "org": 2, "value": 3})
    assert previews.reused == 0
