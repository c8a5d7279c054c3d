"""Capacity pools against one pool, in the same run (issue 43's speed figures; figures,
never pass/fail).

Run from the repo root: ``.venv/bin/python bench/pools.py [--n 100000] [--repeat 5]``.

One backlog of ``--n`` charts of 50 orgs in the fair order, measured twice: once on one
pool (``default``, today's budget: ``rules.head_of_line`` and ``lanes.lane_pass``, the
baseline) and once on five pools (``default``, ``llm``, ``llm2``, ``gpu``, ``api``; each
pair draws on one to three of them: ``pools.dispatch_walk`` and ``pools.pool_etas``). A
pair's demand is one shared tuple, as ``Pools.demand`` hands it out.

- a dispatch decision: the head-of-line walk from the head with every pool busy but for
  3 units (what the live scheduler decides each time capacity frees), ``--calls`` calls
  per sample (one call is a few microseconds: a single call's timing is mostly the
  timer's); the usage each call takes is built before the clock starts. It also prints
  how many charts each walk reads: one pool stops at the first chart that does not fit,
  five pools only once every pool is blocked;
- the live decision: what the scheduler asks its queue each time capacity frees
  (``FairQueue.peek``, :meth:`LiveState.to_start`'s call), on a queue of the same backlog:
  one pool (``peek(free)``, the budget's head-of-line stop) against five
  (``peek(0, running, ...)``: the usage of the running charts, then ``pools.starts_now``),
  and per chart read: five pools must read until every pool is blocked, one pool stops at
  the first chart that does not fit;
- the live decision in the live loop: the oldest running chart finishes, the decision is
  asked as ``LiveState.to_start`` asks it (one pool: the free budget summed from the running
  charts, then ``peek(free)``; five: ``peek(0, running)``), its charts are dispatched (not
  timed); from nothing running, once the pools are full. Unlike the line above, the state
  changes before each decision (a chart less running, the last decision's charts started);
- the ETA pass: every chart's start and finish; ``lane_pass`` again with each chart's
  cost the sum of its five-pool units (the same units, in one pool: what touching several
  heaps costs beyond drawing more units); and the floor of the five pools' walk, the heap
  replaces alone (one per unit a chart draws, no read, no floor, no result) against the
  same on one pool;
- the memory per queued chart (``tracemalloc``): the items each pass walks, (cost,
  estimate) for ``lane_pass`` and (org, demand, estimate) for ``pool_etas``, and those
  items plus the pass's peak (its starts and finishes, its lanes).

Each figure is the best of ``--repeat`` runs; the ratio is five pools over one.
"""
from __future__ import annotations

import argparse
import gc
import random
import sys
import time
import tracemalloc
from heapq import heapify, heapreplace
from operator import itemgetter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling.lanes import lane_pass  # noqa: E402
from scheduling.pool_lanes import RunningUse, pool_etas  # noqa: E402
from scheduling.pools import DEFAULT_POOL, Pools, Usage, demand_of, dispatch_walk  # noqa: E402
from scheduling.queue import FairQueue  # noqa: E402
from scheduling.types import QueuedChart, RunningChart  # noqa: E402
from scheduling.rules import head_of_line  # noqa: E402

N_ORGS = 50
POOLS = {"default": 200, "llm": 80, "llm2": 60, "gpu": 16, "api": 40}
WORKFLOWS = ("review", "audit", "summary", "extract")


def backlog(n: int, seed: int = 1):
    rnd = random.Random(seed)
    orgs = [f"org{i}" for i in range(N_ORGS)]
    demands = {}
    costs = {}
    for o in orgs:
        for wf in WORKFLOWS:
            k = rnd.randint(1, 3)
            pools = rnd.sample(sorted(POOLS), k)
            demands[(o, wf)] = demand_of({p: rnd.randint(1, 3) for p in pools})
            costs[(o, wf)] = rnd.randint(1, 4)
    est = {pair: rnd.choice([120.0, 300.0, 900.0, 2400.0]) for pair in demands}
    charts = [(rnd.choice(orgs), rnd.choice(WORKFLOWS)) for _ in range(n)]
    return charts, demands, costs, est


def best(fns: dict, repeat: int, calls: int = 1) -> dict:
    """Each of ``fns``' best of ``repeat`` samples of ``calls`` calls of ``fn(i)``, seconds
    per call. The samples take turns (one of each, ``repeat`` times), so a load that comes
    and goes on a shared machine weighs on each alike."""
    t_best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            gc.collect()
            t0 = time.perf_counter()
            for i in range(calls):
                fn(i)
            t_best[name] = min(t_best[name], (time.perf_counter() - t0) / calls)
    return t_best


def mem(build, n: int, run=None) -> tuple[float, float]:
    """Bytes per chart of what ``build()`` returns, and of that plus the peak of ``run(it)``."""
    gc.collect()
    tracemalloc.start()
    x = build()
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    out = run(x) if run is not None else None
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del x, out
    return size / n, peak / n


def live_decision(charts, costs, five: Pools, busy: dict, a) -> tuple[float, float]:
    """Seconds a call of ``FairQueue.peek`` on the backlog, one pool and five (the queues are
    dropped after, not to weigh on the passes' garbage collections)."""
    weights = {o: 1 + i % 3 for i, o in enumerate(sorted({o for o, _ in charts}))}

    def queue(pools):
        q = FairQueue(budget=POOLS["default"], weights=weights, costs=costs, pools=pools)
        for i, (o, wf) in enumerate(charts):
            q.add(QueuedChart(f"c{i}", o, wf, float(i), i))
        return q

    q1, q5 = queue(None), queue(five)
    run5 = [RunningChart(f"r-{p}", "running", None, 0.0, 0, ((p, busy[p]),)) for p in POOLS]
    t = best({"one": lambda i: q1.peek(3), "five": lambda i: q5.peek(0, run5)}, a.repeat, a.calls)
    return t["one"], t["five"], live_loop(q1, q5, costs, five, a)


def live_loop(q1: FairQueue, q5: FairQueue, costs, five: Pools, a) -> tuple[float, float]:
    """Seconds a decision of the live loop, one pool and five: the oldest running chart
    finishes, the decision is asked as :meth:`LiveState.to_start` asks it (one pool: the
    free budget summed from the running charts, then ``peek(free)``; five: ``peek(0,
    running)``), and what it gives starts (``dispatch_ids``, not timed). From nothing
    running: the first ``--calls`` decisions fill the pools (not counted), then the best of
    ``--repeat`` samples of ``--calls`` decisions each, a chart or a few freed before each."""
    from collections import deque
    budget = POOLS["default"]
    run1: deque = deque()
    run5: deque = deque()

    def one() -> float:
        if run1:
            run1.popleft()
        t0 = time.perf_counter()
        ids = q1.peek(budget - sum(c for _, c in run1))
        dt = time.perf_counter() - t0
        for c in q1.dispatch_ids(ids):
            run1.append((c.id, costs.get((c.org, c.workflow), 1)))
        return dt

    def five_() -> float:
        if run5:
            run5.popleft()
        running = list(run5)
        t0 = time.perf_counter()
        ids = q5.peek(0, running)
        dt = time.perf_counter() - t0
        for c in q5.dispatch_ids(ids):
            run5.append(RunningChart(c.id, c.org, c.workflow, 0.0, 0, five.demand(c.org, c.workflow)))
        return dt

    for _ in range(a.calls):
        one(), five_()
    t1 = t5 = float("inf")
    for _ in range(a.repeat):
        gc.collect()
        t1 = min(t1, sum(one() for _ in range(a.calls)) / a.calls)
        gc.collect()
        t5 = min(t5, sum(five_() for _ in range(a.calls)) / a.calls)
    return t1, t5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--calls", type=int, default=2000, help="dispatch decisions per sample")
    a = ap.parse_args()
    charts, demands, costs, est = backlog(a.n)
    one = Pools({DEFAULT_POOL: POOLS["default"]})
    five = Pools(dict(POOLS), demands)
    one_dem = {pair: ((DEFAULT_POOL, c),) for pair, c in costs.items()}  # shared, as Pools.demand's
    cost_est = [(costs[c], est[c]) for c in charts]
    items1 = [(o, one_dem[(o, wf)], est[(o, wf)]) for o, wf in charts]
    items5 = [(o, demands[(o, wf)], est[(o, wf)]) for o, wf in charts]
    busy = {p: cap - 3 for p, cap in POOLS.items()}  # a few units free in each pool

    def uses(pools: Pools) -> list[Usage]:
        out = []
        for _ in range(a.calls):
            u = Usage()
            for p in pools.capacity:
                u.take("running", ((p, busy[p]),))
            out.append(u)
        return out

    def walk(items, pools):
        us = uses(pools)
        return lambda i: dispatch_walk(((o, d) for o, d, _ in items), pools, us[i])

    t = best({"hol": lambda i: head_of_line((c for c, _ in cost_est), 3), "walk1": walk(items1, one),
              "walk5": walk(items5, five)}, a.repeat, a.calls)
    t_hol, t_walk1, t_walk5 = t["hol"], t["walk1"], t["walk5"]
    n_hol = head_of_line((c for c, _ in cost_est), 3) + 1
    s5, w5 = dispatch_walk(((o, d) for o, d, _ in items5), five, uses(five)[0])
    n_walk5 = len(s5) + len(w5)

    t_q1, t_q5, (t_l1, t_l5) = live_decision(charts, costs, five, busy, a)
    read = {"one": n_hol, "five": n_walk5}

    def lanes_today(_i=0):
        lanes = [0.0] * POOLS["default"]
        heapify(lanes)
        return lane_pass(cost_est, lanes)

    run = [RunningUse("running", ((p, busy[p]),), 300.0) for p in POOLS]
    units_est = [(sum(u for _, u in d), e) for _, d, e in items5]  # one pool, each chart's units all in it

    def lanes_units(_i=0):
        lanes = [0.0] * POOLS["default"]
        return lane_pass(units_est, lanes)

    t = best({"lanes": lanes_today, "eta1": lambda i: pool_etas(items1, run[:1], one),
              "eta5": lambda i: pool_etas(items5, run, five), "units": lanes_units}, a.repeat)
    t_lanes, t_eta1, t_eta5, t_units = t["lanes"], t["eta1"], t["eta5"], t["units"]

    def heaps(parts_of, caps):  # the heap replaces alone: one per unit a chart draws
        def go(_i=0):
            lanes = {p: [0.0] * c for p, c in caps.items()}
            parts = {d: tuple((lanes[p], u) for p, u in d) for d in set(parts_of)}
            hr = heapreplace
            for d, e in zip(parts_of, map(itemgetter(2), items5)):
                for ln, u in parts[d]:
                    for _ in range(u):
                        hr(ln, e)
        return go

    t = best({"heaps1": heaps([one_dem[c] for c in charts], {DEFAULT_POOL: POOLS["default"]}),
              "heaps5": heaps([demands[c] for c in charts], POOLS), "lanes": lanes_today}, a.repeat)
    t_heaps1, t_heaps5, t_lanes2 = t["heaps1"], t["heaps5"], t["lanes"]

    def lanes_run(items):
        lanes = [0.0] * POOLS["default"]
        return lane_pass(items, lanes)

    m1, p1 = mem(lambda: [(costs[c], est[c]) for c in charts], a.n, lanes_run)
    m5, p5 = mem(lambda: [(o, demands[(o, wf)], est[(o, wf)]) for o, wf in charts], a.n,
                 lambda items: pool_etas(items, run, five))
    print(f"{a.n:,} queued, {N_ORGS} orgs, pools {POOLS}; best of {a.repeat}")
    print(f"dispatch decision ({a.calls} calls a sample): one pool head_of_line {t_hol * 1e6:6.2f} us "
          f"({n_hol} charts read), dispatch_walk one pool {t_walk1 * 1e6:6.2f} us, five pools {t_walk5 * 1e6:6.2f} us "
          f"({n_walk5} charts read)  (five / head_of_line {t_walk5 / t_hol:.2f}x; per chart read "
          f"{(t_walk5 / n_walk5) / (t_hol / n_hol):.2f}x)")
    print(f"live decision (FairQueue.peek, {a.calls} calls a sample): one pool {t_q1 * 1e6:6.2f} us, five pools "
          f"{t_q5 * 1e6:6.2f} us  (five / one {t_q5 / t_q1:.2f}x; per chart read "
          f"{(t_q5 / read['five']) / (t_q1 / read['one']):.2f}x)")
    print(f"  in the live loop (a running chart finishes, the decision, its charts dispatched; {a.calls} "
          f"decisions a sample): one pool {t_l1 * 1e6:6.2f} us, five pools {t_l5 * 1e6:6.2f} us  (five / one "
          f"{t_l5 / t_l1:.2f}x)")
    print(f"ETA pass: lane_pass (today) {t_lanes * 1e3:7.1f} ms, pool_etas one pool {t_eta1 * 1e3:7.1f} ms, "
          f"five pools {t_eta5 * 1e3:7.1f} ms  (five / lane_pass {t_eta5 / t_lanes:.2f}x, one / lane_pass "
          f"{t_eta1 / t_lanes:.2f}x)")
    u1 = sum(c for c, _ in cost_est) / a.n
    u5 = sum(sum(u for _, u in d) for _, d, _ in items5) / a.n
    print(f"  lane_pass with each chart's cost its five-pool units (all in one pool) {t_units * 1e3:7.1f} ms "
          f"(five / that {t_eta5 / t_units:.2f}x)")
    print(f"  its floor, the heap replaces alone: one pool {t_heaps1 * 1e3:7.1f} ms ({u1:.2f} units a chart), "
          f"five pools {t_heaps5 * 1e3:7.1f} ms ({u5:.2f} units over "
          f"{sum(len(d) for _, d, _ in items5) / a.n:.2f} pools a chart)  (five / one {t_heaps5 / t_heaps1:.2f}x, "
          f"five / lane_pass {t_heaps5 / t_lanes2:.2f}x)")
    print(f"memory per queued chart: the walked items, one pool (cost, estimate) {m1:.1f} B, five pools "
          f"(org, demand, estimate) {m5:.1f} B ({m5 / m1:.2f}x); with the pass's peak {p1:.1f} B, {p5:.1f} B "
          f"({p5 / p1:.2f}x)")


if __name__ == "__main__":
    main()
