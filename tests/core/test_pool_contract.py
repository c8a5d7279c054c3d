"""The contract's version 3 (docs/scheduling.md, "Pools"): the worked example as the
docs compute it, version 2's plan unchanged by an empty ``pools``, and bad input named."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from scheduling.fields import ScenarioError
from scheduling.scenario import plan

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
    (lambda s: s.update(share="work", dispatch="backfill"), "dispatch: backfill is not defined with pools yet"),
])
def test_bad_input_names_the_field(change, message):
    s = copy.deepcopy(EXAMPLE)
    change(s)
    with pytest.raises(ScenarioError) as e:
        plan(s)
    assert str(e.value).startswith(message)
