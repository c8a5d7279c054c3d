"""The contract's version 3 (docs/scheduling.md, "Pools"): the worked example as the
docs compute it, version 2's plan unchanged by an empty ``pools``, and bad input named."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from scheduling.contract.fields import ScenarioError
from scheduling.contract.scenario import plan

EXAMPLE = json.loads((Path(__file__).resolve().parents[2] / "examples" / "pools_example.json").read_text())


def test_the_worked_example_as_the_docs_compute_it():
    p = plan(copy.deepcopy(EXAMPLE))
    assert p["order"] == ["A1", "B1", "C1", "A2", "C2"]
    assert p["dispatch"] == ["A1", "B1", "C1"]
    assert {c: (e["start_s"], e["finish_s"]) for c, e in p["etas"].items()} == {
        "B0": (0.0, 180.0), "A1": (0.0, 600.0), "B1": (0.0, 300.0), "C1": (0.0, 300.0),
        "A2": (600.0, 1200.0), "C2": (600.0, 900.0)}
    assert p["org_clear_s"] == {"A": 1200.0, "B": 300.0, "C": 900.0} and p["clear_s"] == 1200.0
    assert p["waiting"] == {"A2": {"reason": "pool", "pool": "gpu"}, "C2": {"reason": "ceiling", "pool": "llm"}}
    assert p["pools"]["llm"] == {"capacity": 2, "in_use": 0, "starting": 2, "blocked_by": "A2"}
    assert p["pools"]["default"] == {"capacity": 2, "in_use": 1, "starting": 1, "blocked_by": None}


def test_a_pool_at_zero_and_a_ceiling_below_a_chart_block_with_their_reason():
    s = copy.deepcopy(EXAMPLE)
    s["pools"][1]["capacity"] = 0            # gpu at 0: A's audits never start
    s["limits"][0]["max"] = 0                # C's ceiling 0 in llm: C's summaries never start
    p = plan(s)
    assert p["blocked"] == ["A1", "A2", "C1", "C2"] and p["order"] == ["B1"]
    assert p["waiting"]["A1"] == {"reason": "capacity", "pool": "gpu"}
    assert p["waiting"]["C2"] == {"reason": "ceiling", "pool": "llm"}
    assert p["org_clear_s"]["A"] is None and p["org_unplanned"] == {"A": 2, "C": 2}


_V2_KEYS = ("order", "dispatch", "held", "paused", "blocked", "etas", "org_clear_s", "org_unplanned", "clear_s")


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.lists(st.tuples(st.sampled_from("ab"), st.integers(1, 3), st.booleans()), max_size=12),
       st.integers(0, 3))
def test_version_2_is_one_pool(budget, charts, n_running):
    """The same scenario with ``"pools": []`` (so read as version 3, one pool ``default``
    of capacity ``budget``) plans the same order, dispatch and ETAs as version 2."""
    s = {"now": "2026-12-07T09:00:00+00:00", "budget": budget,
         "orgs": [{"id": "a", "weight": 2}, {"id": "b", "weight": 1}],
         "costs": [{"org": "a", "workflow": "x", "cost": 2}, {"org": "b", "workflow": "x", "cost": 3}],
         "averages": [{"org": "a", "workflow": "x", "avg_s": 300}, {"org": "b", "workflow": None, "avg_s": 120}],
         "running": [{"id": f"r{i}", "org": "a", "workflow": "y", "started_at": "2026-12-07T08:58:00+00:00"}
                     for i in range(n_running)],
         "queued": [{"id": f"q{i}", "org": o, "workflow": "x" if x else "y",
                     "created_at": f"2026-12-07T08:{10 + i:02d}:00+00:00", "paused": c == 3 and not x}
                    for i, (o, c, x) in enumerate(charts)]}
    v2 = plan(copy.deepcopy(s))
    v3 = plan({**copy.deepcopy(s), "pools": []})
    assert {k: v3[k] for k in _V2_KEYS} == v2


@pytest.mark.parametrize("change, message", [
    (lambda s: s["costs"][0]["pools"].update(gpu2=1), "costs[0].pools.gpu2: unknown pool 'gpu2'"),
    (lambda s: s["limits"].append({"org": "Z", "pool": "llm", "max": 1}), "limits[1].org: unknown org 'Z'"),
    (lambda s: s["limits"].append({"org": "A", "pool": "tpu", "max": 1}), "limits[1].pool: unknown pool 'tpu'"),
    (lambda s: s["pools"].append({"id": "default", "capacity": 3}), "pools[2].id: 'default' is the budget's pool"),
    (lambda s: s["pools"].append({"id": "llm", "capacity": 3}), "pools[2].id: duplicate pool 'llm'"),
    (lambda s: s["pools"].__setitem__(0, {"id": "llm", "capacity": -1}), "pools[0].capacity: must be >= 0"),
    (lambda s: s["costs"][0].update(cost=2), "costs[0]: expected exactly one of cost, pools"),
    (lambda s: s["costs"][0].update(pools={}), "costs[0].pools: expected at least one pool"),
    (lambda s: s["costs"][0].update(pools={"llm": 0}), "costs[0].pools.llm: must be >= 1"),
    (lambda s: s["limits"][0].update(min=2), "limits[0].min: must be <= max (1), got 2"),
    (lambda s: s["limits"].append({"org": "A", "pool": "llm"}), "limits[1]: expected max, min or both"),
    (lambda s: s["running"][0].update(pools={"nope": 1}), "running[0].pools.nope: unknown pool 'nope'"),
])
def test_bad_input_names_the_field(change, message):
    s = copy.deepcopy(EXAMPLE)
    change(s)
    with pytest.raises(ScenarioError) as e:
        plan(s)
    assert str(e.value).startswith(message)


def _trace(arrivals, **extra) -> dict:
    return {"budget": 3, "orgs": [{"id": "a", "weight": 2}, {"id": "b", "weight": 1}, {"id": "c", "weight": 1}],
            "costs": [{"org": "a", "workflow": "x", "cost": 2}], "default_avg_s": 60,
            "arrivals": [{"id": f"c{i}", "org": o, "workflow": wf, "at_s": at, "actual_s": d}
                         for i, (o, wf, at, d) in enumerate(arrivals)], **extra}


arrival_lists = st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from(["x", "y"]), st.integers(0, 200),
                                   st.sampled_from([10, 60, 90])), max_size=12)


@settings(max_examples=60, deadline=None)
@given(arrival_lists)
def test_simulate_version_2_is_one_pool(arrivals):
    from scheduling.contract.scenario import simulate
    v2 = simulate(_trace(arrivals))
    v3 = simulate(_trace(arrivals, pools=[]))
    strip = [{k: v for k, v in c.items() if k != "pools"} for c in v3["charts"]]
    assert strip == v2["charts"]


@settings(max_examples=60, deadline=None)
@given(arrival_lists, st.integers(0, 3), st.integers(1, 3))
def test_simulate_never_goes_past_a_pool_or_a_ceiling(arrivals, gpu_at_100, a_max):
    """Three pools, a ceiling and a capacity change mid-run: at every start, each pool the
    chart draws on has its units in use, the chart's included (by the simulated start and
    finish times), within its capacity then, and a's within its ceiling in llm. (A pool
    lowered under running work stops nothing: it is over until they finish, and nothing
    that draws on it starts meanwhile.)"""
    from scheduling.contract.scenario import simulate
    t = _trace(arrivals, pools=[{"id": "llm", "capacity": 3}, {"id": "gpu", "capacity": 2}],
               limits=[{"org": "a", "pool": "llm", "max": a_max}],
               events=[{"at_s": 100, "set_pool": {"pool": "gpu", "capacity": gpu_at_100}}])
    t["costs"] = [{"org": "a", "workflow": "x", "pools": {"llm": 1, "gpu": 1}},
                  {"org": "b", "workflow": "x", "pools": {"gpu": 2}},
                  {"org": "c", "workflow": "y", "pools": {"llm": 2, "default": 1}}]
    out = simulate(t)
    ran = [c for c in out["charts"] if c["start_s"] is not None]
    cap = {"default": 3, "llm": 3, "gpu": 2}
    for c in ran:
        at = c["start_s"]
        live = [r for r in ran if r["start_s"] <= at < r["finish_s"] or r is c]
        gpu = cap["gpu"] if at < 100 else gpu_at_100
        for pool, limit in (("default", 3), ("llm", 3), ("gpu", gpu)):
            if pool in c["pools"]:
                assert sum(r["pools"].get(pool, 0) for r in live) <= limit
        if c["org"] == "a" and "llm" in c["pools"]:
            assert sum(r["pools"].get("llm", 0) for r in live if r["org"] == "a") <= a_max
    assert out["summary"]["pools"]["llm"]["peak_in_use"] <= 3


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from(["x", "y", "z"]), st.booleans()), max_size=14),
       st.integers(0, 3), st.integers(0, 4), st.booleans(), st.data())
def test_the_live_order_with_pools_plans_as_the_contract(charts, n_running, gpu, with_limits, data):
    """FairQueue given the pools (the live order's own dispatch and ETA pass with pools)
    gives the contract's plan of the same backlog: order, dispatch, blocked and ETAs."""
    from scheduling.contract.pool_scenario import parse_pools
    from scheduling.contract.scenario import parse_scenario
    from scheduling.queue import FairQueue

    s = {"now": "2026-12-07T09:00:00+00:00", "budget": 3,
         "pools": [{"id": "llm", "capacity": 3}, {"id": "gpu", "capacity": gpu}],
         "orgs": [{"id": "a", "weight": 2}, {"id": "b", "weight": 1}, {"id": "c", "weight": 0}],
         "costs": [{"org": "a", "workflow": "x", "pools": {"llm": 1, "gpu": 1}},
                   {"org": "b", "workflow": "x", "pools": {"gpu": 2}},
                   {"org": "b", "workflow": "y", "pools": {"llm": 2, "default": 1}},
                   {"org": "a", "workflow": "z", "cost": 2}],
         "averages": [{"org": None, "workflow": "x", "avg_s": 300}, {"org": None, "workflow": "y", "avg_s": 120}],
         "running": [{"id": f"r{i}", "org": "a", "workflow": "x", "started_at": "2026-12-07T08:58:00+00:00"}
                     for i in range(n_running)],
         "queued": [{"id": f"q{i}", "org": o, "workflow": wf, "created_at": f"2026-12-07T08:{10 + i:02d}:00+00:00",
                     "paused": p and wf == "z"} for i, (o, wf, p) in enumerate(charts)]}
    if with_limits:
        s["limits"] = [{"org": "a", "pool": "llm", "max": data.draw(st.integers(1, 3))},
                       {"org": "b", "pool": "gpu", "min": 1}]
    want = plan(copy.deepcopy(s))
    sc = parse_scenario(copy.deepcopy(s))
    pools = parse_pools(s, sc.weights, sc.budget)
    q = FairQueue.from_backlog(sc.queued, budget=sc.budget, weights=sc.weights, pools=pools, estimate=sc.durations)
    got = q.plan(sc.running, sc.now, sc.durations)
    assert list(got.order) == want["order"] and list(got.dispatch) == want["dispatch"]
    assert sorted(got.blocked) == sorted(want["blocked"])
    assert {c: (e.start_s, e.finish_s) for c, e in got.etas.items()} == {
        c: (e["start_s"], e["finish_s"]) for c, e in want["etas"].items()}
