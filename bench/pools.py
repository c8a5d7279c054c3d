"""Capacity pools against one pool, in the same run (issue 43's speed figures; figures,
never pass/fail).

Run from the repo root: ``.venv/bin/python bench/pools.py [--n 100000] [--repeat 5]``.

One backlog of ``--n`` charts of 50 orgs in the fair order, measured twice: once on one
pool (``default``, today's budget: ``rules.head_of_line`` and ``lanes.lane_pass``) and
once on five pools (``default``, ``llm``, ``llm2``, ``gpu``, ``api``; each pair draws on
one to three of them: ``pools.dispatch_walk`` and ``pools.pool_etas``):

- a dispatch decision: the head-of-line walk from the head with the budget busy but for a
  few units (what the live scheduler decides each time capacity frees);
- the ETA pass: every chart's start and finish;
- the memory per queued chart of what the pass walks (``tracemalloc``).

Each figure is the best of ``--repeat`` runs; the ratio is five pools over one.
"""
from __future__ import annotations

import argparse
import gc
import random
import sys
import time
import tracemalloc
from heapq import heapify
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling.lanes import lane_pass  # noqa: E402
from scheduling.pools import DEFAULT_POOL, Pools, RunningUse, Usage, demand_of, dispatch_walk, pool_etas  # noqa: E402
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


def best(fn, repeat: int):
    t_best = float("inf")
    out = None
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        out = fn()
        t_best = min(t_best, time.perf_counter() - t0)
    return t_best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    charts, demands, costs, est = backlog(a.n)
    one = Pools({DEFAULT_POOL: POOLS["default"]})
    five = Pools(dict(POOLS), demands)
    cost_est = [(costs[c], est[c]) for c in charts]
    items1 = [(o, ((DEFAULT_POOL, costs[(o, wf)]),), est[(o, wf)]) for o, wf in charts]
    items5 = [(o, demands[(o, wf)], est[(o, wf)]) for o, wf in charts]
    busy = {p: cap - 3 for p, cap in POOLS.items()}  # a few units free in each pool

    def use_of(pools: Pools) -> Usage:
        u = Usage()
        for p in pools.capacity:
            u.take("running", ((p, busy[p]),))
        return u

    t_hol, _ = best(lambda: head_of_line((c for c, _ in cost_est), 3), a.repeat)
    t_walk1, _ = best(lambda: dispatch_walk(((o, d) for o, d, _ in items1), one, use_of(one)), a.repeat)
    t_walk5, _ = best(lambda: dispatch_walk(((o, d) for o, d, _ in items5), five, use_of(five)), a.repeat)

    def lanes_today():
        lanes = [0.0] * POOLS["default"]
        heapify(lanes)
        return lane_pass(cost_est, lanes)

    run = [RunningUse("running", ((p, busy[p]),), 300.0) for p in POOLS]
    t_lanes, _ = best(lanes_today, a.repeat)
    t_eta1, _ = best(lambda: pool_etas(items1, run[:1], one), a.repeat)
    t_eta5, _ = best(lambda: pool_etas(items5, run, five), a.repeat)

    def mem(build):
        gc.collect()
        tracemalloc.start()
        x = build()
        size = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        del x
        return size / a.n

    m1 = mem(lambda: [(o, ((DEFAULT_POOL, costs[(o, wf)]),), est[(o, wf)]) for o, wf in charts])
    m5 = mem(lambda: [(o, demands[(o, wf)], est[(o, wf)]) for o, wf in charts])
    print(f"{a.n:,} queued, {N_ORGS} orgs, pools {POOLS}; best of {a.repeat}")
    print(f"dispatch decision: one pool head_of_line {t_hol * 1e6:8.1f} us, dispatch_walk one pool "
          f"{t_walk1 * 1e6:8.1f} us, five pools {t_walk5 * 1e6:8.1f} us  (five / one walk {t_walk5 / t_walk1:.2f}x, "
          f"five / head_of_line {t_walk5 / t_hol:.2f}x)")
    print(f"ETA pass: lane_pass (today) {t_lanes * 1e3:7.1f} ms, pool_etas one pool {t_eta1 * 1e3:7.1f} ms, "
          f"five pools {t_eta5 * 1e3:7.1f} ms  (five / lane_pass {t_eta5 / t_lanes:.2f}x, five / one "
          f"{t_eta5 / t_eta1:.2f}x)")
    print(f"memory per queued chart of the walked items: one pool {m1:.1f} B, five pools {m5:.1f} B "
          f"({m5 / m1:.2f}x)")


if __name__ == "__main__":
    main()
