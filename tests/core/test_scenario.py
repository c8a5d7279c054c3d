"""scenario.py: the JSON contract, refusals one line naming field and value."""
from __future__ import annotations

import copy

import pytest

from fairsched.scenario import ScenarioError, parse_scenario, plan, simulate

from .helpers import NOW, seed_scenario

TS = "2026-11-29T11:00:00+00:00"


def mutate(fn):
    s = seed_scenario()
    fn(s)
    return s


def _set(path, value):
    def fn(s):
        obj = s
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value
    return fn


def _del(path):
    def fn(s):
        obj = s
        for k in path[:-1]:
            obj = obj[k]
        del obj[path[-1]]
    return fn


BAD_SCENARIOS = [
    ("unknown-org", _set(["queued", 3, "org"], "9"), "queued[3].org: unknown org '9'"),
    ("duplicate-id", _set(["queued", 2, "id"], "A"), "queued[2].id: duplicate id 'A'"),
    ("duplicate-id-running-queued",
     lambda s: s["running"].append({"id": "A", "org": "1", "workflow": "code", "started_at": TS}),
     "queued[0].id: duplicate id 'A'"),
    ("negative-weight", _set(["orgs", 1, "weight"], -1), "orgs[1].weight: must be >= 0, got -1"),
    ("negative-budget", _set(["budget"], -2), "budget: must be >= 0, got -2"),
    ("cost-zero", _set(["costs"], [{"org": "1", "workflow": "code", "cost": 0}]),
     "costs[0].cost: must be >= 1, got 0"),
    ("running-cost-zero",
     lambda s: s["running"].append({"id": "R", "org": "1", "workflow": "code", "started_at": TS,
                                    "cost": 0}), "running[0].cost: must be >= 1, got 0"),
    ("unparseable-timestamp", _set(["queued", 0, "created_at"], "yesterday"),
     "queued[0].created_at: unparseable timestamp 'yesterday'"),
    ("timestamp-without-offset", _set(["now"], "2026-11-29T12:00:00"),
     "now: timestamp without offset '2026-11-29T12:00:00'"),
    ("missing-now", _del(["now"]), "now: missing required field"),
    ("missing-budget", _del(["budget"]), "budget: missing required field"),
    ("missing-orgs", _del(["orgs"]), "orgs: missing required field"),
    ("missing-queued-org", _del(["queued", 4, "org"]), "queued[4].org: missing required field"),
    ("missing-created-at", _del(["queued", 1, "created_at"]),
     "queued[1].created_at: missing required field"),
    ("missing-weight", _del(["orgs", 0, "weight"]), "orgs[0].weight: missing required field"),
    ("bool-is-not-int-budget", _set(["budget"], True), "budget: expected an integer, got true"),
    ("bool-is-not-int-weight", _set(["orgs", 0, "weight"], False),
     "orgs[0].weight: expected an integer, got false"),
    ("float-budget", _set(["budget"], 2.5), "budget: expected an integer, got 2.5"),
    ("int-id", _set(["queued", 0, "id"], 7), "queued[0].id: expected a string, got 7"),
    ("string-priority", _set(["queued", 0, "priority"], "yes"),
     "queued[0].priority: expected true or false, got 'yes'"),
    ("queued-not-list", _set(["queued"], {}), "queued: expected a list, got {}"),
    ("org-not-object", _set(["orgs", 0], "1"), "orgs[0]: expected an object, got '1'"),
    ("unknown-org-in-costs", _set(["costs"], [{"org": "x", "workflow": "code", "cost": 2}]),
     "costs[0].org: unknown org 'x'"),
    ("duplicate-org", lambda s: s["orgs"].append({"id": "1", "weight": 1}),
     "orgs[3].id: duplicate org '1'"),
    ("negative-round", _set(["queued", 0, "round"], -1), "queued[0].round: must be >= 0, got -1"),
    ("bad-front-at", _set(["queued", 0, "front_at"], "soon"),
     "queued[0].front_at: unparseable timestamp 'soon'"),
]


@pytest.mark.parametrize("mut,message", [(m, msg) for _, m, msg in BAD_SCENARIOS],
                         ids=[i for i, _, _ in BAD_SCENARIOS])
def test_bad_scenario_is_refused_with_one_line(mut, message):
    with pytest.raises(ScenarioError) as ei:
        plan(mutate(mut))
    text = str(ei.value)
    assert "\n" not in text
    assert text == message


TRACE = {"budget": 2, "orgs": [{"id": "A", "weight": 1}],
         "arrivals": [{"id": "a1", "org": "A", "workflow": "w", "at_s": 0, "actual_s": 5}]}


BAD_TRACES = [
    ("missing-arrivals", lambda t: t.pop("arrivals"), "arrivals: missing required field"),
    ("unknown-org", lambda t: t["arrivals"][0].update(org="Z"), "arrivals[0].org: unknown org 'Z'"),
    ("duplicate-id", lambda t: t["arrivals"].append(dict(t["arrivals"][0])),
     "arrivals[1].id: duplicate id 'a1'"),
    ("missing-actual", lambda t: t["arrivals"][0].pop("actual_s"),
     "arrivals[0].actual_s: missing required field"),
    ("bool-at-s", lambda t: t["arrivals"][0].update(at_s=True),
     "arrivals[0].at_s: expected a number, got true"),
    ("negative-weight-event", lambda t: t.update(events=[{"at_s": 1, "set_weight": {"org": "A", "weight": -3}}]),
     "events[0].set_weight.weight: must be >= 0, got -3"),
    ("negative-budget-event", lambda t: t.update(events=[{"at_s": 1, "set_budget": -1}]),
     "events[0].set_budget: must be >= 0, got -1"),
    ("unknown-event", lambda t: t.update(events=[{"at_s": 1, "explode": True}]),
     "events[0]: expected exactly one of set_weight, set_budget, pause, resume, got [\"explode\"]"),
    ("unknown-org-event", lambda t: t.update(events=[{"at_s": 1, "set_weight": {"org": "Q", "weight": 1}}]),
     "events[0].set_weight.org: unknown org 'Q'"),
]


@pytest.mark.parametrize("mut,message", [(m, msg) for _, m, msg in BAD_TRACES],
                         ids=[i for i, _, _ in BAD_TRACES])
def test_bad_trace_is_refused_with_one_line(mut, message):
    t = copy.deepcopy(TRACE)
    mut(t)
    with pytest.raises(ScenarioError) as ei:
        simulate(t)
    assert str(ei.value) == message


def test_unknown_policy_is_refused():
    with pytest.raises(ScenarioError, match=r"^policy: unknown policy 'lottery'"):
        simulate(copy.deepcopy(TRACE), "lottery")


def test_optional_fields_default_and_z_suffix_is_an_offset():
    s = {"now": "2026-11-29T12:00:00Z", "budget": 1, "orgs": [{"id": "1", "weight": 1}]}
    assert plan(s) == {"order": [], "dispatch": [], "held": [], "paused": [], "blocked": [],
                       "etas": {}, "org_clear_s": {"1": 0.0}, "org_unplanned": {}, "clear_s": 0.0}
    p = parse_scenario(seed_scenario())
    assert p.queued[0].priority is False and p.queued[0].paused is False
    assert [c.seq for c in p.queued] == list(range(7))


def test_running_cost_defaults_to_the_pairs_current_cost():
    s = seed_scenario()
    s["costs"] = [{"org": "1", "workflow": "code", "cost": 2}]
    s["running"] = [{"id": "R", "org": "1", "workflow": "code", "started_at": NOW}]
    p = plan(s)
    # free = 3 - 2 = 1: A (cost 2) does not fit
    assert p["dispatch"] == []
    assert parse_scenario(s).running[0].cost == 2
