"""The live queue's dispatch decision with pools (``FairQueue.peek``/``dispatch`` under strict
dispatch, no limits: ``QueueDispatch._pool_keys``) starts exactly the charts of the
from-scratch walk (``pools.starts_now`` over the order, each chart's demand its pair's, from
the units the running charts leave), over random orders, demands (1-3 pools, 1-4 units),
capacities (0 included) and running charts, and along sequences of arrivals, starts,
finishes, charts run elsewhere, cancellations, pauses, priorities, moves to the front and
changes of the pools, with Hypothesis."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from scheduling.pools import DEFAULT_POOL, Pools, demand_of, starts_keyed, starts_now
from scheduling.queue import FairQueue
from scheduling.types import QueuedChart, RunningChart

POOLS = ("default", "gpu", "llm", "api")
ORGS = ("a", "b", "c")
WORKFLOWS = ("w1", "w2", "w3", "w4")
ONE = ((DEFAULT_POOL, 1),)

demands = st.dictionaries(st.sampled_from(POOLS), st.integers(1, 4), min_size=1, max_size=3).map(demand_of)
capacities = st.fixed_dictionaries({p: st.integers(0, 6) for p in POOLS})


def reference(order_pairs, demand_table, capacity, running) -> list:
    """Today's walk from scratch, written as it was before the decision's fast path: the
    running charts' units summed per pool, the free units of each pool listed, then
    ``starts_now`` over (index, demand) of the order."""
    used: dict[str, int] = {}
    for d in running:
        for p, u in d:
            used[p] = used.get(p, 0) + u
    free = {p: c - used.get(p, 0) for p, c in capacity.items()}
    return starts_now([(i, demand_table.get(pair, ONE)) for i, pair in enumerate(order_pairs)], free)


# ------------------------------------------------------------ the walk alone
@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(POOLS + ("tpu",)), st.integers(-3, 6), min_size=1),
       st.dictionaries(st.tuples(st.sampled_from(ORGS), st.sampled_from(WORKFLOWS)),
                       st.dictionaries(st.sampled_from(POOLS + ("tpu",)), st.integers(1, 4), min_size=1,
                                       max_size=3).map(demand_of)),
       st.lists(st.tuples(st.sampled_from(ORGS), st.sampled_from(WORKFLOWS)), max_size=16))
def test_starts_keyed_is_starts_now(free, table, pairs):
    """Any free units (negative, or a pool no chart draws on), any demands (a pool not in
    ``free`` included), any order: the same charts start."""
    keys = [(i, pair) for i, pair in enumerate(pairs)]
    want = starts_now([(k, table.get(k[1], ONE)) for k in keys], dict(free))
    assert starts_keyed(iter(keys), table, dict(free), 1) == want


# ------------------------------------------------------------ the live queue
def _queue(capacity, table, charts) -> FairQueue:
    q = FairQueue(budget=capacity[DEFAULT_POOL], weights={o: 1 + i for i, o in enumerate(ORGS)},
                  pools=Pools(dict(capacity), dict(table)))
    for i, (org, wf) in enumerate(charts):
        q.add(QueuedChart(f"c{i}", org, wf, float(i), i))
    return q


def _check(q: FairQueue, capacity, table, running) -> list[str]:
    keys = list(q.keys())
    want = [keys[i].id for i in reference([k.pair for k in keys], table, capacity,
                                          [r.demand if r.demand is not None else table.get((r.org, r.workflow), ONE)
                                           for r in running])]
    got = q.peek(0, running)
    assert got == want
    return got


pairs = st.tuples(st.sampled_from(ORGS), st.sampled_from(WORKFLOWS))
steps = st.lists(st.one_of(
    st.tuples(st.just("arrive"), pairs),
    st.tuples(st.sampled_from(["start", "start", "peek"]), st.none()),
    st.tuples(st.just("start some"), st.integers(0, 7)),
    st.tuples(st.sampled_from(["finish", "finish", "finish", "finish all"]), st.integers(0, 20)),
    st.tuples(st.just("run"), st.tuples(pairs, demands)),  # a chart running that no decision gave
    st.tuples(st.sampled_from(["cancel", "pause", "prioritize", "front"]), st.integers(0, 15)),
    st.tuples(st.just("capacity"), capacities),
), max_size=30)


def _run(capacity, table, charts, running, steps):
    q = _queue(capacity, table, charts)
    run = [RunningChart(f"r{i}", o, wf, 0.0, 1, d) for i, (o, wf, d) in enumerate(running)]
    n = len(charts)
    for op, arg in steps:
        if op == "arrive":
            q.add(QueuedChart(f"c{n}", arg[0], arg[1], float(n), n))
            n += 1
        elif op in ("start", "start some"):
            ids = _check(q, capacity, table, run)
            if op == "start":
                started = q.dispatch(0, run)
                assert [c.id for c in started] == ids
            else:  # what really started on Temporal: a part of it (commit_dispatch's dispatch_ids)
                started = q.dispatch_ids([cid for j, cid in enumerate(ids) if arg >> (j % 3) & 1])
            run += [RunningChart(c.id, c.org, c.workflow, 0.0, 1, table.get((c.org, c.workflow), ONE))
                    for c in started]
        elif op == "finish" and run:
            run.pop(arg % len(run))
        elif op == "finish all":
            run = []
        elif op == "run":
            run.append(RunningChart(f"x{len(run)}", arg[0][0], arg[0][1], 0.0, 1, arg[1]))
        elif op in ("cancel", "pause", "prioritize", "front"):
            head = [k.id for k in q.keys()][:16]  # a chart near the head: what the decision read
            if head:
                cid = head[arg % len(head)]
                {"cancel": lambda: q.remove(cid), "pause": lambda: q.pause(cid),
                 "prioritize": lambda: q.prioritize(cid, float(arg)),
                 "front": lambda: q.move_to_front(cid, float(arg))}[op]()
        elif op == "capacity":
            capacity = dict(arg)
            q.set_budget(capacity[DEFAULT_POOL])
            q.set_pools(Pools(dict(capacity), dict(table)))
        _check(q, capacity, table, run)


runnings = st.lists(st.tuples(st.sampled_from(ORGS), st.sampled_from(WORKFLOWS), st.none() | demands
                              | st.just((("tpu", 2),))), max_size=4)


@settings(max_examples=300, deadline=None)
@given(capacities, st.dictionaries(pairs, demands), st.lists(pairs, max_size=20), runnings, steps)
def test_the_decision_is_the_walk_from_scratch(capacity, table, charts, running, steps):
    """Along arrivals, starts (what the decision gives, dispatched, or a part of it),
    finishes, cancellations, pauses, priorities, moves to the front and capacity changes,
    each decision starts what the walk from scratch starts. A running chart draws on its
    own demand, else its pair's now (one may hold a pool not listed)."""
    _run(capacity, table, charts, running, steps)


@settings(max_examples=500, deadline=None)
@given(st.fixed_dictionaries({p: st.integers(1, 5) for p in POOLS}),
       st.fixed_dictionaries({(o, w): demands for o in ORGS for w in WORKFLOWS}),
       st.lists(pairs, min_size=12, max_size=40), runnings, steps)
def test_the_decision_is_the_walk_from_scratch_every_pool_blocked(capacity, table, charts, running, steps):
    """The same with a backlog that blocks every pool (no pool at 0, every pair listed, a
    dozen charts or more): the states where the walk stops before the end of the order."""
    _run(capacity, table, charts, running, steps)
