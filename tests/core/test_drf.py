"""Share "work" as dominant-resource fairness by virtual tags (docs/scheduling.md, "Share by
work"; issue 43 item 3): the order against an independent model, one pool against the
unpooled share, disjoint pools, and each org's dominant share over its weight's share."""
from __future__ import annotations

import math

from hypothesis import given, settings, strategies as st

from scheduling import Durations, QueuedChart
from scheduling.queue import FairQueue
from scheduling.pools import DEFAULT_POOL, Pools
from scheduling.contract.pool_sim import simulate_pools
from scheduling.contract.simulator import Arrival, budget_shares, jain, simulate

ORGS = ("a", "b", "c")


def model_order(charts, weights, work):
    """The rule written out on its own: per org, charts in arrival order; the first starts at
    virtual time 0 (its round its start), each later one at the org's finish so far (its
    round the floor of its midpoint); finish = start + work / weight. Sorted by (round,
    created, seq). Held orgs (weight 0) are out."""
    pos: dict = {}
    keyed = []
    for c in charts:
        w = weights[c.org]
        if w <= 0:
            continue
        x = work(c) / w
        if c.org not in pos:
            r = 0
            pos[c.org] = x
        else:
            r = math.floor(pos[c.org] + x / 2)
            pos[c.org] += x
        keyed.append(((r, c.created_at, c.seq), c.id))
    return [cid for _, cid in sorted(keyed)]


@settings(max_examples=150, deadline=None)
@given(picks=st.lists(st.tuples(st.sampled_from(ORGS), st.integers(1, 4), st.integers(1, 40)), min_size=1,
                      max_size=40),
       weights=st.tuples(*[st.integers(0, 3)] * 3))
def test_a_static_backlog_is_ordered_by_the_virtual_tags_of_the_model(picks, weights):
    w = dict(zip(ORGS, weights))
    wfs = {f"c{c}e{e}" for _, c, e in picks}
    costs = {(o, wf): int(wf[1]) for o in ORGS for wf in wfs}
    est = Durations({(None, wf): 15.0 * int(wf.split("e")[1]) for wf in wfs})
    charts = [QueuedChart(f"x{i}", o, f"c{c}e{e}", float(i // 2), i) for i, (o, c, e) in enumerate(picks)]
    q = FairQueue.from_backlog(charts, budget=4, weights=w, costs=costs, share="work", estimate=est)
    assert q.order() == model_order(charts, w, lambda c: costs[(c.org, c.workflow)] * est(c.org, c.workflow))


def _deep(orgs_kinds, kinds, hours=4.0):
    arrivals = [Arrival(f"{o}-{i}", o, k, 0.0, kinds[k][1]) for o, k in orgs_kinds.items()
                for i in range(int(hours * 3600 / kinds[k][1]))]
    est = Durations({(None, k): d for k, (_, d) in kinds.items()})
    return arrivals, est


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_with_one_pool_the_shares_are_the_unpooled_work_shares(data):
    """The pool "default" alone (the budget): a chart's work is its dominant share x the
    budget x its estimate = cost x estimate, so each org's budget share, while every org is
    backlogged, is the unpooled share's, and each is near its weight's share where its
    weight's share of the budget holds at least one of its charts (an org whose share is 2
    units and whose charts cost 3 holds 0 or 3 at any moment). Near, not within Jain 0.98: an
    org's virtual time may lead another's by one chart, and the window (until the first org
    runs out) can be as short as a few of the longest charts, whose lanes start in step: on
    150 random traces of this kind 6 fell between 0.96 and 0.98, and Hypothesis found one at
    0.939 (900 s charts at cost 2, budget 31; the unpooled share as well: the two are equal,
    start for start, which is this test's point). The bound here is 0.90; the 0.98 of issue 43
    is checked on the pools' own example below (test_drf_shares_by_the_dominant_pool)."""
    kinds = {f"k{c}": (c, float(data.draw(st.sampled_from([60, 300, 900])))) for c in range(1, 5)}
    orgs = {o: data.draw(st.sampled_from(sorted(kinds))) for o in ORGS}
    weights = {o: data.draw(st.integers(1, 3)) for o in ORGS}
    least = max(math.ceil(kinds[orgs[o]][0] * sum(weights.values()) / weights[o]) for o in ORGS)
    budget = data.draw(st.integers(max(4, least), max(12, least + 4)))
    arrivals, est = _deep(orgs, kinds)
    costs = {(o, k): kinds[k][0] for o in ORGS for k in kinds}
    plain = simulate(arrivals, budget=budget, weights=weights, costs=costs, estimate=est, share="work")
    pools = Pools({DEFAULT_POOL: budget}, {(o, k): ((DEFAULT_POOL, kinds[k][0]),) for o in ORGS for k in kinds})
    pooled = simulate_pools(arrivals, pools=pools, weights=weights, estimate=est, share="work")
    assert [c.start_s for c in pooled.charts] == [c.start_s for c in plain.charts]
    assert plain.summary["budget_jain"] >= 0.90, plain.summary


def test_two_orgs_on_disjoint_pools_each_get_their_whole_pool():
    """a draws only on gpu (2 units), b only on llm (3): neither waits for the other, each
    pool stays full while its org has charts, whatever the weights."""
    pools = Pools({DEFAULT_POOL: 1, "gpu": 2, "llm": 3}, {("a", "g"): (("gpu", 1),), ("b", "l"): (("llm", 1),)})
    arrivals = [Arrival(f"a{i}", "a", "g", 0.0, 100.0) for i in range(20)] + \
        [Arrival(f"b{i}", "b", "l", 0.0, 100.0) for i in range(30)]
    est = Durations({(None, "g"): 100.0, (None, "l"): 100.0})
    for weights in ({"a": 1, "b": 1}, {"a": 3, "b": 1}, {"a": 1, "b": 3}):
        r = simulate_pools(arrivals, pools=pools, weights=weights, estimate=est, share="work")
        fin = {o: max(c.finish_s for c in r.charts if c.org == o) for o in "ab"}
        assert fin == {"a": 1000.0, "b": 1000.0}  # 20 x 100 s over 2 units, 30 x 100 s over 3
        assert r.summary["pools"]["gpu"]["peak_in_use"] == 2 and r.summary["pools"]["llm"]["peak_in_use"] == 3


def test_drf_shares_by_the_dominant_pool():
    """Ghodsi et al.'s example, as budget-seconds: gpu 9, llm 18; a's charts draw (gpu 1,
    llm 4): dominant llm, 4/18; b's (gpu 3, llm 1): dominant gpu, 3/9. Every chart 100 s,
    weights 1: while both are backlogged each gets the same dominant share (DRF gives a 3
    charts at once and b 2: 12/18 = 6/9 = 2/3 each)."""
    pools = Pools({DEFAULT_POOL: 1, "gpu": 9, "llm": 18},
                  {("a", "x"): (("gpu", 1), ("llm", 4)), ("b", "y"): (("gpu", 3), ("llm", 1))})
    arrivals = [Arrival(f"a{i}", "a", "x", 0.0, 100.0) for i in range(300)] + \
        [Arrival(f"b{i}", "b", "y", 0.0, 100.0) for i in range(200)]
    est = Durations({(None, "x"): 100.0, (None, "y"): 100.0})
    r = simulate_pools(arrivals, pools=pools, weights={"a": 1, "b": 1}, estimate=est, share="work")
    t1 = min(max(c.finish_s for c in r.charts if c.org == o) for o in "ab") - 200.0
    got = budget_shares(r.charts, arrivals, {}, 0.0, t1)  # chart-seconds, one per chart
    dom = {"a": got["a"] * 4 / 18, "b": got["b"] * 3 / 9}
    assert jain(dom.values()) >= 0.98, dom
