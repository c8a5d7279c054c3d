"""Durations: the order in which an estimate is looked for, a workflow's declared duration
(before any history, then blended out as finished charts come) and where each came from."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling import DECLARED_AS_N, Durations, EstimateSource
from scheduling.contract.fields import ScenarioError
from scheduling.contract.scenario import dump_scenario, parse_scenario, plan
from scheduling.lanes import SOURCES

ORGS = ["a", "b"]
WORKFLOWS = ["w", "x", None]


def old_rule(averages: dict, default: float, org: str, workflow: str | None) -> float:
    """The estimate before declared durations: pair, the workflow over all orgs, the org, default."""
    for key in ((org, workflow), (None, workflow) if workflow is not None else None, (org, None)):
        if key is not None and key in averages:
            return averages[key]
    return default


def test_each_source_in_its_order():
    d = Durations({("a", "w"): 100.0, (None, "x"): 50.0, ("a", None): 7.0}, 600.0, {"w": 30.0, "x": 40.0, "y": 20.0})
    assert d.source("a", "w") == EstimateSource("pair", 100.0)      # no count: the average as it is
    assert d.source("b", "x") == EstimateSource("workflow", 50.0)   # another org's x, before the declared 40
    assert d.source("a", "y") == EstimateSource("declared", 20.0, None, 20.0)  # before the org's 7
    assert d.source("a", "z") == EstimateSource("org", 7.0)
    assert d.source("b", "z") == EstimateSource("default", 600.0)
    assert [d(o, w) for o, w in (("a", "w"), ("b", "x"), ("a", "y"), ("a", "z"), ("b", "z"))] == \
        [100.0, 50.0, 20.0, 7.0, 600.0]


def test_the_declared_duration_weighs_as_five_finished_charts():
    d = Durations({("a", "w"): 60.0, (None, "w"): 90.0}, 600.0, {"w": 120.0}, {("a", "w"): 5, (None, "w"): 15})
    assert DECLARED_AS_N == 5
    assert d("a", "w") == (5 * 120.0 + 5 * 60.0) / 10 == 90.0  # the pair's own history, half and half
    assert d.source("a", "w") == EstimateSource("pair", 90.0, 5, 120.0)
    assert d("b", "w") == (5 * 120.0 + 15 * 90.0) / 20  # no history of b's own: the workflow's
    assert d.source("b", "w").kind == "workflow"


@settings(max_examples=200, deadline=None)
@given(declared=st.floats(1, 1e5), mean=st.floats(0, 1e5), n=st.integers(0, 10_000))
def test_the_declared_duration_fades_out_as_charts_finish(declared, mean, n):
    one = Durations({("a", "w"): mean}, 600.0, {"w": declared}, {("a", "w"): n})
    more = Durations({("a", "w"): mean}, 600.0, {"w": declared}, {("a", "w"): n + 1})
    assert abs(one("a", "w") - mean) <= abs(declared - mean) * DECLARED_AS_N / (DECLARED_AS_N + n) + 1e-6
    assert abs(more("a", "w") - mean) <= abs(one("a", "w") - mean) + 1e-6  # each finish moves it towards history
    if n == 0:
        assert one("a", "w") == pytest.approx(declared)


_keys = st.tuples(st.sampled_from(ORGS + [None]), st.sampled_from(WORKFLOWS)).filter(lambda k: k != (None, None))
_tables = st.dictionaries(_keys, st.floats(0, 1e4), max_size=6)


@settings(max_examples=300, deadline=None)
@given(averages=_tables, counts=st.dictionaries(_keys, st.integers(0, 50), max_size=6),
       expected=st.dictionaries(st.sampled_from(["w", "x"]), st.floats(1, 1e4), max_size=2),
       org=st.sampled_from(ORGS), workflow=st.sampled_from(WORKFLOWS))
def test_the_source_gives_the_estimate_and_without_declared_durations_the_rule_is_unchanged(
        averages, counts, expected, org, workflow):
    d = Durations(averages, 600.0, expected, counts)
    src = d.source(org, workflow)
    assert src.kind in SOURCES and src.seconds == d(org, workflow)
    plain = Durations(averages, 600.0, {}, counts)
    assert plain(org, workflow) == old_rule(averages, 600.0, org, workflow)
    if workflow in expected and (org, workflow) not in averages and (None, workflow) not in averages:
        assert src == EstimateSource("declared", expected[workflow], None, expected[workflow])


SCENARIO = {"now": "2026-11-29T12:00:00Z", "budget": 1, "orgs": [{"id": "1", "weight": 1}, {"id": "2", "weight": 1}],
            "averages": [{"org": "1", "workflow": "audit", "avg_s": 60.0, "count": 5},
                         {"org": "1", "workflow": None, "avg_s": 10.0}],
            "expected": [{"workflow": "audit", "expected_s": 120.0}, {"workflow": "scan", "expected_s": 30.0}],
            "queued": [{"id": "a", "org": "1", "workflow": "audit", "created_at": "2026-11-29T11:00:00Z"},
                       {"id": "b", "org": "2", "workflow": "audit", "created_at": "2026-11-29T11:01:00Z"},
                       {"id": "s", "org": "1", "workflow": "scan", "created_at": "2026-11-29T11:02:00Z"}]}


def test_a_scenario_declares_expected_durations_and_counts_its_averages():
    p = plan(SCENARIO)
    run = {cid: e["finish_s"] - e["start_s"] for cid, e in p["etas"].items()}
    assert run == {"a": 90.0, "b": 120.0, "s": 30.0}  # blended; declared (no history); declared before the org's 10


def test_a_dump_carries_the_declared_durations_and_counts():
    from scheduling.queue import FairQueue

    s = parse_scenario(SCENARIO)
    q = FairQueue.from_backlog(s.queued, budget=s.budget, weights=s.weights, costs=s.costs)
    dump = dump_scenario(q, running=[], now=s.now, durations=s.durations)
    assert dump["expected"] == SCENARIO["expected"]
    assert {"org": "1", "workflow": "audit", "avg_s": 60.0, "count": 5} in dump["averages"]
    assert {"org": "1", "workflow": None, "avg_s": 10.0} in dump["averages"]
    assert parse_scenario(dump).durations == s.durations
    assert plan(dump)["etas"] == plan(SCENARIO)["etas"]


@pytest.mark.parametrize("change, message", [
    ({"expected": [{"workflow": None, "expected_s": 1}]}, "expected[0].workflow: expected a string, got null"),
    ({"expected": [{"workflow": "w", "expected_s": -1}]}, "expected[0].expected_s: must be >= 0, got -1"),
    ({"expected": [{"workflow": "w"}]}, "expected[0].expected_s: missing required field"),
    ({"expected": [{"workflow": "w", "expected_s": 1}, {"workflow": "w", "expected_s": 2}]},
     "expected[1].workflow: duplicate workflow 'w'"),
    ({"expected": {"w": 1}}, 'expected: expected a list, got {"w": 1}'),
    ({"averages": [{"org": "1", "workflow": "w", "avg_s": 1.0, "count": 1.5}]},
     "averages[0].count: expected an integer, got 1.5"),
    ({"averages": [{"org": "1", "workflow": "w", "avg_s": 1.0, "count": -1}]},
     "averages[0].count: must be >= 0, got -1"),
], ids=["null-workflow", "negative", "missing", "duplicate", "not-a-list", "float-count", "negative-count"])
def test_bad_declared_durations_and_counts_are_refused_naming_the_field(change, message):
    with pytest.raises(ScenarioError) as err:
        plan({**SCENARIO, **change})
    assert str(err.value) == message
