"""The static plan (docs/scheduling.md) on literal cases."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling import Durations, Eta, QueuedChart, RunningChart, plan, plan_dispatch
from scheduling.queue import FairQueue
from scheduling.contract.scenario import plan as plan_json

from .helpers import qc, seed_scenario


def test_worked_example_order_dispatch_and_clear_time():
    p = plan_json(seed_scenario())
    assert p["order"] == ["A", "B", "C", "F", "D", "E", "G"]
    assert p["dispatch"] == ["A", "B", "C"]
    assert p["clear_s"] == pytest.approx(1800.0)
    assert p["org_clear_s"] == {"1": 1800.0, "2": 1200.0, "3": 1200.0}
    assert p["etas"]["F"] == {"start_s": 600.0, "finish_s": 1200.0}
    assert p["held"] == p["paused"] == p["blocked"] == []
    assert set(p) == {"order", "dispatch", "held", "paused", "blocked", "etas",
                      "org_clear_s", "org_unplanned", "clear_s"}


def test_classification_held_paused_blocked_precedence():
    q = [qc("h", "H", 1, paused=True), qc("p", "A", 2, paused=True), qc("b", "A", 3, workflow="big"),
         qc("ok", "A", 4), qc("pb", "A", 5, workflow="big", paused=True)]
    p = plan(q, budget=2, weights={"A": 1, "H": 0}, costs={("A", "big"): 3})
    assert p.held == ["h"]
    assert p.paused == ["p", "pb"]
    assert p.blocked == ["b"]
    assert p.order == ["ok"]
    assert "b" not in p.etas and "h" not in p.etas


def test_priority_tier_fifo_by_prioritized_at_then_created_at():
    q = [qc("n1", "A", 1), qc("p1", "A", 5, priority=True, prioritized_at=20.0),
         qc("p2", "B", 6, priority=True), qc("p3", "B", 7, priority=True, prioritized_at=6.0),
         qc("n2", "B", 2)]
    p = plan(q, budget=1, weights={"A": 1, "B": 1})
    # p2: key 6 (created), p3: key 6 (prioritized) then created 7, p1: 20
    assert p.order == ["p2", "p3", "p1", "n1", "n2"]
    assert p.dispatch == ["p2"]


def test_equal_created_at_ties_go_to_arrival():
    q = [qc("x", "A", 5, seq=0), qc("y", "B", 5, seq=1), qc("z", "A", 5, seq=2)]
    assert plan(q, budget=1, weights={"A": 1, "B": 1}).order == ["x", "y", "z"]
    q2 = [qc("y", "B", 5, seq=0), qc("x", "A", 5, seq=1), qc("z", "A", 5, seq=2)]
    assert plan(q2, budget=1, weights={"A": 1, "B": 1}).order == ["y", "x", "z"]


def test_dispatch_is_head_of_line():
    q = [qc("a", "A", 1, workflow="big"), qc("b", "B", 2), qc("c", "C", 3)]
    costs = {("A", "big"): 3}
    running = [RunningChart("r", "B", "w", 0.0, 1)]
    # free = 3 - 1 = 2 < 3: the cheap ones behind the head do not skip ahead
    p = plan(q, running, budget=3, weights={"A": 1, "B": 1, "C": 1}, costs=costs, now=0.0)
    assert p.order == ["a", "b", "c"]
    assert p.dispatch == []
    assert plan_dispatch([3, 1, 1], 4, int) == [3, 1]
    assert plan_dispatch([1], -1, int) == []


def test_lanes_with_running_costs_and_multi_lane_charts():
    d = Durations({("A", "w"): 100.0, ("A", None): 50.0}, default_avg_s=10.0)
    running = [RunningChart("r1", "A", "w", -30.0, 2),   # 70 s left on 2 lanes
               RunningChart("r2", "B", "x", -500.0, 1)]  # default 10 s: overdue -> 0
    q = [qc("a", "A", 1, workflow="w", seq=0), qc("b", "A", 2, workflow="other", seq=1),
         qc("c", "B", 3, workflow="x", seq=2)]
    p = plan(q, running, budget=4, weights={"A": 1, "B": 1}, costs={("A", "w"): 3},
             estimate=d, now=0.0)
    assert p.etas["r1"] == Eta(0.0, 70.0)
    assert p.etas["r2"] == Eta(0.0, 0.0)
    # lanes [0, 0, 70, 70]; order a (A r0), c (B r0), b (A r1)
    assert p.order == ["a", "c", "b"]
    assert p.etas["a"] == Eta(70.0, 170.0)     # cost 3 starts at lanes[2]
    assert p.etas["c"] == Eta(70.0, 80.0)      # lanes now [70, 170, 170, 170]
    assert p.etas["b"] == Eta(80.0, 130.0)     # org average 50 s
    assert p.org_clear_s == {"A": 170.0, "B": 80.0}
    assert p.clear_s == 170.0


def test_budget_lowered_under_running_work_keeps_largest_lanes():
    running = [RunningChart("r1", "A", "w", 0.0, 1), RunningChart("r2", "A", "w", -500.0, 1),
               RunningChart("r3", "A", "w", -200.0, 2)]
    q = [qc("a", "A", 1)]
    # remaining: r1 600, r2 100, r3 400 x2 -> lanes [100, 400, 400, 600]; budget 2 keeps [400, 600]
    p = plan(q, running, budget=2, weights={"A": 1}, now=0.0)
    assert p.etas["a"] == Eta(400.0, 1000.0)
    assert p.dispatch == []
    assert p.clear_s == 1000.0


def test_budget_zero_blocks_everything_and_no_etas():
    p = plan([qc("a", "A", 1)], budget=0, weights={"A": 1})
    assert p.blocked == ["a"] and p.order == [] and p.etas == {} and p.clear_s == 0.0
    # scenario contract v2: no clear-time for work that will never start (was 0.0: "clear")
    assert p.org_clear_s == {"A": None}
    assert p.org_unplanned == {"A": 1}


def test_given_rounds_are_used_only_when_every_normal_chart_has_one():
    q = [qc("a", "A", 1, round=5), qc("b", "B", 2, round=3), qc("c", "A", 3, round=3)]
    assert plan(q, budget=1, weights={"A": 1, "B": 1}).order == ["b", "c", "a"]
    q[1] = qc("b", "B", 2)  # one missing: computed rounds, given ones ignored
    assert plan(q, budget=1, weights={"A": 1, "B": 1}).order == ["a", "b", "c"]


def test_front_at_takes_the_orgs_next_turn_and_moves_nobody_else():
    q = [qc("a1", "A", 1), qc("b1", "B", 2), qc("a2", "A", 3), qc("b2", "B", 4),
         qc("a3", "A", 5, front_at=100.0)]
    p = plan(q, budget=1, weights={"A": 1, "B": 1})
    assert p.order == ["b1", "a3", "a1", "b2", "a2"]
    # most recent move first
    q.append(qc("a4", "A", 6, front_at=200.0))
    assert plan(q, budget=1, weights={"A": 1, "B": 1}).order == ["b1", "a4", "b2", "a3", "a1", "a2"]
    # the live queue agrees
    fq = FairQueue.from_backlog(q[:5], budget=1, weights={"A": 1, "B": 1})
    assert fq.order() == ["b1", "a3", "a1", "b2", "a2"]
    fq.move_to_front("a2", 300.0)
    assert fq.order() == ["b1", "a2", "b2", "a3", "a1"]


def test_weighted_rounds():
    q = [qc(f"a{i}", "A", i, seq=i) for i in range(5)] + [qc(f"b{i}", "B", 10 + i, seq=10 + i)
                                                        for i in range(3)]
    p = plan(q, budget=1, weights={"A": 3, "B": 1})
    assert p.order == ["a0", "a1", "a2", "b0", "a3", "a4", "b1", "b2"]
    assert p.rounds == {"a0": 0, "a1": 0, "a2": 0, "a3": 1, "a4": 1, "b0": 0, "b1": 1, "b2": 2}


def test_plan_etas_and_rounds_read_like_dicts_without_building_them_up_front():
    from scheduling import ById

    running = [RunningChart("r1", "A", "wf", 0.0, 1)]
    queued = [QueuedChart(c, "A" if c.startswith("a") else "B", "wf", float(i), i)
              for i, c in enumerate(["a0", "a1", "b0", "a2"])]
    p = plan(queued, running, budget=2, weights={"A": 1, "B": 1}, estimate=Durations({}, 10.0), now=0.0)
    assert isinstance(p.etas, ById) and not p.etas.indexed          # nothing hashed yet
    assert list(p.etas) == ["r1", *p.order]                             # running first, then the order
    assert [k for k, _ in p.etas.items()] == ["r1", *p.order] and not p.etas.indexed
    assert p.etas["a0"] == Eta(0.0, 10.0) and p.etas["b0"] == Eta(10.0, 20.0) and p.etas["r1"] == Eta(0.0, 10.0)
    assert "a2" in p.etas and "nope" not in p.etas and p.etas.get("nope") is None
    with pytest.raises(KeyError):
        p.etas["nope"]
    as_dict = dict(p.etas.items())
    assert p.etas == as_dict and as_dict == p.etas and len(p.etas) == 5
    assert p.etas != {**as_dict, "a2": Eta(0.0, 0.0)}
    assert p.rounds == {"a0": 0, "b0": 0, "a1": 1, "a2": 2} and p.rounds["a1"] == 1


def test_a_budget_of_a_billion_builds_lanes_for_the_charts_not_the_budget(monkeypatch):
    """Budget 10**9 with three charts (one running): the lane list holds the 1 + 2 + 1 + 1
    lanes those charts can use, not 10**9, and every chart starts at once."""
    import importlib

    plan_module = importlib.import_module("scheduling.plan")  # the module, not the function
    queue_module = importlib.import_module("scheduling.queue.etas")  # the live order's ETA passes

    sizes: list[int] = []
    real = plan_module.lane_pass

    def measuring(cost_est, lanes):
        sizes.append(len(lanes))
        return real(cost_est, lanes)

    monkeypatch.setattr(plan_module, "lane_pass", measuring)
    monkeypatch.setattr(queue_module, "lane_pass", measuring)
    q = [qc("a", "A", 1), qc("b", "B", 2, workflow="big"), qc("c", "A", 3)]
    running = [RunningChart("r", "B", "w", -10.0, 1)]
    costs = {("B", "big"): 2}
    p = plan(q, running, budget=10**9, weights={"A": 1, "B": 1}, costs=costs, now=0.0)
    assert p.dispatch == ["a", "b", "c"]
    assert [p.etas[c].start_s for c in ("a", "b", "c")] == [0.0, 0.0, 0.0]
    live = FairQueue.from_backlog(q, budget=10**9, weights={"A": 1, "B": 1}, costs=costs)
    report = live.etas(running, 0.0)
    assert dict(report.etas) == dict(p.etas)
    assert sizes == [5, 5]  # 1 running + 2 + 1 + 1 ordered


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.integers(0, 5), max_size=40))
def test_the_sort_that_carries_its_items_is_a_stable_sort_by_the_keys(keys):
    """plan._sorted_by: the items in the order of their keys, equal keys in list order; the
    same with the index sort it falls back to if sorted() ever asked for keys out of order."""
    import importlib

    P = importlib.import_module("scheduling.plan")
    items = [f"c{i}" for i in range(len(keys))]
    want = [items[i] for i in sorted(range(len(keys)), key=lambda i: (keys[i], i))]
    assert P._KEYS_IN_ORDER and P._sorted_by(items, keys) == want
    P._KEYS_IN_ORDER = False
    try:
        assert P._sorted_by(items, keys) == want
    finally:
        P._KEYS_IN_ORDER = True
