"""Capacity pools (scheduling.pools): the head-of-line rule per pool, ceilings and
minimums, and the ETAs, against an independent model written from docs/scheduling.md
("Pools: capacity is several things"), with Hypothesis."""
from __future__ import annotations

from heapq import heapify

from hypothesis import given, settings, strategies as st

from scheduling.lanes import initial_lanes, lane_pass
from scheduling.pool_lanes import RunningUse, pool_etas
from scheduling.pools import (BEHIND, CEILING, DEFAULT_POOL, POOL, Limit, Pools, Usage, Wait,
                              demand_of, dispatch_walk, starts_now)
from scheduling.rules import head_of_line
from scheduling.types import RunningChart

POOLS = ("default", "gpu", "llm")
ORGS = ("a", "b", "c")


# ------------------------------------------------------------ the model
def model_walk(order, capacity, limits, in_use, org_use):
    """The rule as the docs state it, chart by chart, no shared code: returns the indices
    that start (mutating in_use and org_use) and each other chart's reason."""
    free = {p: capacity[p] - in_use.get(p, 0) for p in capacity}
    blocked, capped, started, why = set(), set(), [], {}

    def under_min(org, dem):
        return any(org_use.get((org, p), 0) < limits.get((org, p), (None, 0))[1] for p, _ in dem)

    def one(i, org, dem):
        over = [p for p, u in dem if (org, p) in capped
                or (limits.get((org, p), (None, 0))[0] is not None
                    and org_use.get((org, p), 0) + u > limits[(org, p)][0])]
        if over:
            capped.update((org, p) for p in over)
            return Wait(CEILING, over[-1])
        behind = [p for p, _ in dem if p in blocked]
        short = [p for p, u in dem if free[p] < u]
        if behind or short:
            blocked.update(p for p, _ in dem)
            return Wait(BEHIND, behind[0]) if behind else Wait(POOL, short[0])
        for p, u in dem:
            free[p] -= u
            in_use[p] = in_use.get(p, 0) + u
            org_use[(org, p)] = org_use.get((org, p), 0) + u
        started.append(i)
        return None

    if any(m for _, m in limits.values()):
        for i, (org, dem) in enumerate(order):
            if under_min(org, dem):
                one(i, org, dem)
    for i, (org, dem) in enumerate(order):
        if i in started:
            continue
        w = one(i, org, dem)
        if w is not None:
            why[i] = w
    return sorted(started), why


def model_etas(order, running, capacity, limits):
    """Event by event from now: at each moment the walk over every chart not started,
    then time moves to the next estimated finish."""
    in_use, org_use, fin_at = {}, {}, []
    for org, dem, rem in running:
        for p, u in dem:
            in_use[p] = in_use.get(p, 0) + u
            org_use[(org, p)] = org_use.get((org, p), 0) + u
        fin_at.append((max(0.0, rem), org, dem))
    starts = [None] * len(order)
    t = 0.0
    pending = list(range(len(order)))
    while pending:
        for f in [f for f in fin_at if f[0] <= t]:  # what has finished by t frees its units
            fin_at.remove(f)
            for p, u in f[2]:
                in_use[p] -= u
                org_use[(f[1], p)] -= u
        got, _ = model_walk([(order[i][0], order[i][1]) for i in pending], capacity, limits, in_use, org_use)
        for k in got:
            i = pending[k]
            starts[i] = t
            fin_at.append((t + order[i][2], order[i][0], order[i][1]))
        pending = [i for k, i in enumerate(pending) if k not in set(got)]
        if got:
            continue  # the same moment again: a chart of 0 s has already finished
        if not fin_at:
            break
        t = min(f[0] for f in fin_at)
    return starts


# ------------------------------------------------------------ strategies
demands = st.dictionaries(st.sampled_from(POOLS), st.integers(1, 3), min_size=1, max_size=3).map(demand_of)
charts = st.tuples(st.sampled_from(ORGS), demands, st.sampled_from([0.0, 5.0, 10.0, 30.0, 60.0]))
capacities = st.fixed_dictionaries({p: st.integers(1, 6) for p in POOLS})


@st.composite
def limit_tables(draw, with_limits=True):
    if not with_limits:
        return {}
    table = {}
    for key in draw(st.lists(st.tuples(st.sampled_from(ORGS), st.sampled_from(POOLS)), max_size=4, unique=True)):
        mx = draw(st.none() | st.integers(1, 4))
        mn = draw(st.integers(0, 3 if mx is None else mx))
        if mx is None and not mn:
            mn = 1
        table[key] = (mx, mn)
    return table


def _pools(capacity, limits):
    return Pools(dict(capacity), {}, {k: Limit(mx, mn) for k, (mx, mn) in limits.items()})


def _startable(order, capacity, limits):
    """Drop the charts that can never start (a demand above a pool or a ceiling): the
    plan classifies them out as blocked before the walk."""
    p = _pools(capacity, limits)
    return [c for c in order if p.never(c[0], c[1]) is None]


@settings(max_examples=300, deadline=None)
@given(capacities, st.lists(charts, max_size=14), st.lists(charts, max_size=4), limit_tables())
def test_dispatch_walk_is_the_rule(capacity, order, running, limits):
    order = _startable(order, capacity, limits)
    in_use, org_use = {}, {}
    use = Usage()
    for org, dem, _ in running:
        use.take(org, dem)
        for p, u in dem:
            in_use[p] = in_use.get(p, 0) + u
            org_use[(org, p)] = org_use.get((org, p), 0) + u
    got, why = dispatch_walk([(o, d) for o, d, _ in order], _pools(capacity, limits), use, whole=True)
    want, want_why = model_walk([(o, d) for o, d, _ in order], capacity, limits, in_use, org_use)
    assert got == want
    assert {i: w.reason for i, w in why.items()} == {i: w.reason for i, w in want_why.items()}
    assert use.pool == {p: u for p, u in in_use.items()}


@settings(max_examples=300, deadline=None)
@given(capacities, st.lists(charts, max_size=14), st.lists(charts, max_size=4))
def test_starts_now_is_the_rule_without_limits(capacity, order, running):
    """The live queue's decision (``starts_now``: no limits, no reasons) starts what the
    model does, and leaves in ``free`` what the model's walk leaves."""
    order = _startable(order, capacity, {})
    in_use, org_use = {}, {}
    for org, dem, _ in running:
        for p, u in dem:
            in_use[p] = in_use.get(p, 0) + u
    free = {p: capacity[p] - in_use.get(p, 0) for p in capacity}
    got = starts_now([(i, d) for i, (_, d, _) in enumerate(order)], free)
    want, _ = model_walk([(o, d) for o, d, _ in order], capacity, {}, in_use, org_use)
    assert got == want
    assert free == {p: capacity[p] - in_use.get(p, 0) for p in capacity}


@settings(max_examples=300, deadline=None)
@given(capacities, st.lists(charts, max_size=14), st.lists(charts, max_size=4), st.booleans(), st.data())
def test_pool_etas_are_the_event_model(capacity, order, running, with_limits, data):
    limits = data.draw(limit_tables(with_limits))
    order = _startable(order, capacity, limits)
    starts, fins = pool_etas(order, [RunningUse(o, d, r) for o, d, r in running], _pools(capacity, limits))
    assert starts == model_etas(order, running, capacity, limits)
    assert all(f == s + e for s, f, (_, _, e) in zip(starts, fins, order) if s is not None)
    assert None not in starts  # every chart the plan keeps in the order starts some day


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 8), st.lists(st.tuples(st.integers(1, 4), st.sampled_from([0.0, 3.0, 10.0])), max_size=12),
       st.lists(st.tuples(st.integers(1, 3), st.floats(-5, 20)), max_size=4))
def test_one_pool_is_todays_budget(budget, order, running):
    """One pool and no limits: the head-of-line stop and the lane walk of today exactly,
    whether the pass hands the order to ``lane_pass`` or walks it per pool."""
    order = [(c, e) for c, e in order if c <= budget]
    pools = Pools({DEFAULT_POOL: budget})
    use = Usage()
    for c, _ in running:
        use.take("a", ((DEFAULT_POOL, c),))
    got, _ = dispatch_walk([("a", ((DEFAULT_POOL, c),)) for c, _ in order], pools, use)
    n = head_of_line([c for c, _ in order], budget - sum(c for c, _ in running))
    assert got == list(range(n))
    rs = [RunningChart(f"r{i}", "a", None, 0.0, c) for i, (c, _) in enumerate(running)]
    rem = {r.id: max(0.0, rr[1]) for r, rr in zip(rs, running)}
    lanes = initial_lanes(rs, 0.0, budget, lambda o, w, _it=iter(rem.values()): next(_it), {})
    heapify(lanes)
    want, _ = lane_pass(list(order), lanes)
    starts, _ = pool_etas([("a", ((DEFAULT_POOL, c),), e) for c, e in order],
                          [RunningUse("a", ((DEFAULT_POOL, c),), r) for c, r in running], pools)
    assert starts == want
    # the same through the walk per pool (pool_etas hands an order of one pool to lane_pass):
    # a last chart on another pool changes no earlier start
    two = Pools({DEFAULT_POOL: budget, "gpu": 1})
    starts, _ = pool_etas([("a", ((DEFAULT_POOL, c),), e) for c, e in order] + [("a", (("gpu", 1),), 1.0)],
                          [RunningUse("a", ((DEFAULT_POOL, c),), r) for c, r in running], two)
    assert starts[:-1] == want


def test_the_worked_example_of_two_pools():
    """llm 2, gpu 1, a's chart {llm 1, gpu 1} running. b's {gpu 1} cannot start and
    blocks gpu; c's {gpu 1, llm 1} waits behind it and so blocks llm too: d's {llm 1}
    waits although llm has a unit free. Without c, d starts: it draws only on llm."""
    pools = Pools({"llm": 2, "gpu": 1})
    use = Usage()
    use.take("a", (("gpu", 1), ("llm", 1)))
    order = [("b", (("gpu", 1),)), ("c", (("gpu", 1), ("llm", 1))), ("d", (("llm", 1),))]
    got, why = dispatch_walk(order, pools, use, whole=True)
    assert got == []
    assert why == {0: Wait(POOL, "gpu"), 1: Wait(BEHIND, "gpu"), 2: Wait(BEHIND, "llm")}
    # without C, D starts: B blocks gpu only, and D draws only on llm
    use2 = Usage()
    use2.take("a", (("gpu", 1), ("llm", 1)))
    got, why = dispatch_walk([order[0], order[2]], pools, use2, whole=True)
    assert got == [1] and why == {0: Wait(POOL, "gpu")}


def test_a_ceiling_blocks_only_its_org_in_that_pool():
    pools = Pools({"llm": 4}, {}, {("a", "llm"): Limit(max=1)})
    order = [("a", (("llm", 1),)), ("a", (("llm", 1),)), ("b", (("llm", 1),)), ("a", (("llm", 1),))]
    got, why = dispatch_walk(order, pools, Usage(), whole=True)
    assert got == [0, 2]
    assert why == {1: Wait(CEILING, "llm"), 3: Wait(CEILING, "llm")}


def test_a_minimum_takes_freed_units_first():
    """b is below its minimum of 2 in llm: the one free unit goes to b's chart although
    a's is ahead of it in the order, and a's chart waits behind it."""
    pools = Pools({"llm": 3}, {}, {("b", "llm"): Limit(min=2)})
    use = Usage()
    use.take("a", (("llm", 2),))
    got, why = dispatch_walk([("a", (("llm", 1),)), ("b", (("llm", 1),))], pools, use, whole=True)
    assert got == [1] and why == {0: Wait(POOL, "llm")}
