"""scenario.py: the JSON contract, refusals one line naming field and value."""
from __future__ import annotations

import copy

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scheduling.contract.fields import ScenarioError
from scheduling.contract.scenario import parse_scenario, plan, simulate

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
     "events[0]: expected exactly one of set_weight, set_budget, set_pool, pause, resume, got [\"explode\"]"),
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


def test_v2_estimate_falls_back_to_the_workflow_over_all_orgs_before_the_org():
    """A new tenant's first audit is estimated from audits elsewhere (org null), not from
    its own reviews (its org average); a pair's own average still comes first."""
    s = {"now": "2026-11-29T12:00:00Z", "budget": 1,
         "orgs": [{"id": "acme", "weight": 1}, {"id": "cedar", "weight": 1}],
         "averages": [{"org": "acme", "workflow": None, "avg_s": 23.0},
                      {"org": None, "workflow": "audit", "avg_s": 120.0},
                      {"org": "cedar", "workflow": "audit", "avg_s": 90.0}],
         "queued": [{"id": "a", "org": "acme", "workflow": "audit", "created_at": "2026-11-29T11:00:00Z"},
                    {"id": "r", "org": "acme", "workflow": "review", "created_at": "2026-11-29T11:01:00Z"},
                    {"id": "c", "org": "cedar", "workflow": "audit", "created_at": "2026-11-29T11:02:00Z"}]}
    p = plan(s)
    assert p["etas"]["a"] == {"start_s": 0.0, "finish_s": 120.0}   # workflow over all orgs (was 23: the org's)
    assert p["etas"]["c"]["finish_s"] - p["etas"]["c"]["start_s"] == 90.0  # the pair's own
    assert p["etas"]["r"]["finish_s"] - p["etas"]["r"]["start_s"] == 23.0  # no audit figure: the org's


@pytest.mark.parametrize("item, message", [
    ({"org": None, "workflow": None, "avg_s": 1.0}, "averages[0]: org and workflow are both null"),
    ({"org": "9", "workflow": "audit", "avg_s": 1.0}, "averages[0].org: unknown org '9'"),
], ids=["both-null", "unknown-org"])
def test_bad_averages_are_refused_naming_the_field(item, message):
    s = {"now": "2026-11-29T12:00:00Z", "budget": 1, "orgs": [{"id": "1", "weight": 1}], "averages": [item]}
    with pytest.raises(ScenarioError) as err:
        plan(s)
    assert str(err.value).startswith(message)
# --- the fast path of queued charts gives what the field-by-field checks give -----------------

def _mostly(valid, *invalid):
    """Mostly valid values, so that several valid charts (and duplicates) are common."""
    return st.one_of(st.sampled_from(valid), st.sampled_from(valid), st.sampled_from(valid),
                     st.sampled_from(list(invalid)))


_required = {
    "id": _mostly(["a", "b", "c"], 3, None),
    "org": _mostly(["A", "B"], "Z", 1, None),
    "workflow": _mostly(["code", None], 5),
    "created_at": _mostly(["2026-01-01T00:00:00+00:00", "2026-01-01T00:00:01.5+02:00"],
                          "2026-01-01T00:00:00", "yesterday", 7, None),
}
_optional = {
    "priority": _mostly([True, False], 1, "yes", None),
    "paused": _mostly([True, False], 0, None),
    "prioritized_at": _mostly([None], "2026-01-01T00:00:00+00:00", "bad"),
    "front_at": _mostly([None], "2026-01-01T00:00:00+00:00"),
    "round": _mostly([None], 0, 2, -1, "x"),
}
_chart = st.one_of(
    st.fixed_dictionaries(_required, optional=_optional),
    st.fixed_dictionaries({}, optional={**_required, **_optional}),  # fields missing
)


def _slow_only(d: dict):
    """parse_scenario with every queued chart through the field-by-field checks."""
    from scheduling.contract import fields, scenario as sc

    ids: set[str] = set()

    def new_id(v, path):
        v = fields.as_str(v, path)
        if v in ids:
            raise fields.ScenarioError(path, f"duplicate id {fields.show(v)}")
        ids.add(v)
        return v

    weights = {o["id"]: o["weight"] for o in d["orgs"]}
    return [sc.parse_queued_chart(c, i, new_id, weights) for i, c in enumerate(d["queued"])]


_OK = {"id": "a", "org": "A", "workflow": "code", "created_at": "2026-01-01T00:00:00+00:00"}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_chart, st.sampled_from([[], "x", None])), max_size=6))
@example([_OK, {**_OK, "created_at": "2026-01-01T00:00:01+00:00"}])  # duplicate id
@example([{**_OK, "priority": 1}])
@example([{**_OK, "paused": 0}])
@example([{**_OK, "created_at": "2026-01-01T00:00:00"}])
@example([{**_OK, "prioritized_at": "2026-01-01T00:00:00+00:00", "priority": True}])
@example([{**_OK, "front_at": "2026-01-01T00:00:00+00:00"}, {**_OK, "id": "b", "round": 3}])
def test_the_fast_path_of_queued_charts_equals_the_checked_path(charts):
    d = {"now": "2026-01-01T01:00:00+00:00", "budget": 2,
         "orgs": [{"id": "A", "weight": 1}, {"id": "B", "weight": 2}], "queued": charts}
    try:
        expected = _slow_only(d)
    except ScenarioError as exc:
        with pytest.raises(ScenarioError) as got:
            parse_scenario(d)
        assert str(got.value) == str(exc)
        return
    assert parse_scenario(d).queued == expected


def _charts(*specs):
    return [{"id": cid, "org": org, "workflow": "code", "created_at": f"2026-01-01T00:00:0{i}+00:00", **extra}
            for i, (cid, org, extra) in enumerate(specs)]


@pytest.mark.parametrize("queued, extra, message", [
    (_charts(("a", "A", {}), ("b", "A", {}), ("a", "B", {})), {}, "queued[2].id: duplicate id 'a'"),
    (_charts(("a", "H", {}), ("b", "A", {}), ("a", "H", {})), {}, "queued[2].id: duplicate id 'a'"),  # both held
    (_charts(("a", "A", {}), ("a", "A", {"paused": True})), {}, "queued[1].id: duplicate id 'a'"),
    (_charts(("a", "A", {"paused": True}), ("a", "H", {})), {}, "queued[1].id: duplicate id 'a'"),
    (_charts(("r", "A", {}),), {}, "queued[0].id: duplicate id 'r'"),  # a running chart's id
    (_charts(("a", "A", {}), ("a", "B", {})), {"share": "work"}, "queued[1].id: duplicate id 'a'"),
    (_charts(("a", "A", {}), ("a", "B", {})), {"share": "bogus"}, "queued[1].id: duplicate id 'a'"),  # before it
], ids=["ordered", "held", "paused-and-ordered", "paused-and-held", "running", "policies", "before-policies"])
def test_a_repeated_id_is_refused_wherever_the_charts_end_up(queued, extra, message):
    """plan() checks the ids on its output, not while parsing: the same refusal as the
    field-by-field parse, wherever the two charts are (ordered, set aside, running)."""
    d = {"now": "2026-01-01T01:00:00+00:00", "budget": 2, "queued": queued, **extra,
         "orgs": [{"id": "A", "weight": 1}, {"id": "B", "weight": 2}, {"id": "H", "weight": 0}],
         "running": [{"id": "r", "org": "A", "workflow": "code", "started_at": "2026-01-01T00:30:00+00:00"}]}
    with pytest.raises(ScenarioError) as err:
        plan(d)
    assert str(err.value) == message
    with pytest.raises(ScenarioError) as err:
        parse_scenario(d)
    assert str(err.value) == message


def test_the_plan_leaves_no_young_collection_behind_and_never_thaws_a_freeze():
    """``plan()`` pauses the collector, then moves what it built out of the young
    generation (``gc_paused(age_out=True)``): no collection walks its million-item
    containers on the way out. A caller that froze objects on purpose (the live
    scheduler's backlog) keeps them frozen."""
    import gc
    import threading

    s = seed_scenario()
    s["queued"] = [dict(s["queued"][0], id=f"x{i}") for i in range(3000)]
    collections: list[int] = []
    me = threading.get_ident()

    def seen(phase, info):  # this thread's only: another test's leftover thread may collect meanwhile
        if phase == "start" and threading.get_ident() == me:
            collections.append(info["generation"])

    gc.unfreeze()  # what an earlier test in this process froze (the scheduler's start-up freezes its backlog)
    gc.collect()
    gc.callbacks.append(seen)
    try:
        out = plan(s)
    finally:
        gc.callbacks.remove(seen)
    assert len(out["etas"]) >= 3000 and gc.isenabled()
    assert collections == []  # without the age-out: one young collection, of all of it
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        plan(s)
        # a thaw moves every frozen object back (the count falls to 0); another thread of
        # this worker (an earlier test's) may free a frozen object meanwhile (333,221
        # against 333,222 once, in a PostgreSQL pass): that is no thaw
        assert gc.get_freeze_count() > frozen * 0.99 and gc.isenabled()
    finally:
        gc.unfreeze()
