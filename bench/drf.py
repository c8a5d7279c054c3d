"""Share "work" (DRF by virtual tags) against "charts" on a demo-like trace: figures, never
pass/fail (docs/scheduling.md, "Share by work"). Run from the repo root:
``.venv/bin/python bench/drf.py [--seeds N]``.

Trace (seeded): budget 12, orgs A B C D of weights 3/2/1/1, workflows review (cost 1, 12 s),
code (2, 40 s), audit (3, 120 s), deep (4, 90 s) in the mix 5:3:1:1 for every org, actual run
times 0.4-1.6 x the estimate; a backlog of 400/200/80/80 at 0 and about 5 charts a minute
after. Per run: each org's longest wait without a start (a chart of it waiting in the order,
none of it starting), Jain's index of budget share over weight share while every org is
backlogged, and for the live switch from charts to work at 1,800 s, how long each org with
work waiting then took to start something.
"""
from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling import Durations  # noqa: E402
from scheduling.contract.simulator import Arrival, SimChart, Sim, policy_figures  # noqa: E402

KINDS = {"review": (1, 12.0), "code": (2, 40.0), "audit": (3, 120.0), "deep": (4, 90.0)}
ORGS = {"A": 3, "B": 2, "C": 1, "D": 1}


def demo_trace(seed: int, n0=(400, 200, 80, 80), rate=0.08, horizon=3600.0):
    rnd = random.Random(seed)
    costs = {(o, k): c for o in ORGS for k, (c, _) in KINDS.items()}
    est = Durations({(None, k): d for k, (_, d) in KINDS.items()})
    arr: list[Arrival] = []

    def one(o, t):
        k = rnd.choices(list(KINDS), weights=[5, 3, 1, 1])[0]
        arr.append(Arrival(f"c{len(arr)}", o, k, t, KINDS[k][1] * rnd.uniform(0.4, 1.6)))
    for o, n in zip(ORGS, n0):
        for _ in range(n):
            one(o, 0.0)
    t = 0.0
    while True:
        t += rnd.expovariate(rate)
        if t > horizon:
            break
        one(rnd.choices(list(ORGS), weights=[3, 2, 1, 1])[0], t)
    arr.sort(key=lambda a: a.at_s)
    return arr, costs, est


def run(arr, costs, est, share, switch_at=None, budget=12):
    """The simulator's loop (scheduling.simulator.simulate), with FairQueue.set_policies
    (share "work") at ``switch_at`` when given."""
    sim = Sim(arr, [], budget=budget, weights=ORGS, costs=costs, estimate=est, policy="wrr", forecaster=None,
               share=share)
    pending = switch_at
    while True:
        t = sim.next_instant()
        if pending is not None and (t is None or t >= pending):
            t, pending = pending, None
            sim.account(t)
            sim.finish(t)
            sim.q.set_policies(share="work")
        elif t is None:
            break
        else:
            sim.account(t)
            sim.finish(t)
        sim.apply_events(t)
        sim.arrive(t)
        sim.dispatch(t)
        sim.backlogged(t)
    charts = [SimChart(a.id, a.org, float(a.at_s), sim.start.get(a.id), sim.finish_at.get(a.id), None) for a in arr]
    fig = policy_figures(charts, arr, sim.cost_at_start, dict(ORGS), budget, sim.used_while_waiting, sim.window)
    return charts, fig


def longest_wait_without_a_start(charts, t0=0.0):
    """Per org: the longest time from ``t0`` on with a chart of it waiting and none starting."""
    out = {}
    for o in ORGS:
        cs = [c for c in charts if c.org == o and c.start_s is not None]
        starts = sorted({c.start_s for c in cs})
        best, prev = 0.0, -math.inf
        for s in starts:
            waiting = [c.arrive_s for c in cs if c.start_s >= s and c.arrive_s < s]
            if waiting:
                best = max(best, s - max(prev, min(waiting), t0))
            prev = s
        out[o] = best
    return out


def first_start_after(charts, t):
    """Per org with a chart waiting at ``t``: how long until its next start."""
    out = {}
    for o in ORGS:
        if any(c.org == o and c.arrive_s <= t and (c.start_s is None or c.start_s > t) for c in charts):
            out[o] = min(c.start_s for c in charts if c.org == o and c.start_s is not None and c.start_s > t) - t
    return out


def fmt(d):
    return " ".join(f"{o} {v:5.0f}" for o, v in d.items())


def main(seeds=(1, 2, 3)) -> None:
    print("longest wait without a start (s) per org, Jain while every org is backlogged")
    above, late = 0, 0
    for seed in seeds:
        arr, costs, est = demo_trace(seed)
        longest = {}
        for share in ("charts", "work"):
            charts, fig = run(arr, costs, est, share)
            g = longest[share] = longest_wait_without_a_start(charts)
            print(f"seed {seed} {share:6}  {fmt(g)}  max {max(g.values()):5.0f}  jain {fig['budget_jain']:.3f}")
        above += max(longest["work"].values()) > max(longest["charts"].values())
        charts, fig = run(arr, costs, est, "charts", switch_at=1800.0)
        plain, _ = run(arr, costs, est, "charts")
        first = first_start_after(charts, 1800.0)
        late += max(first.values()) > 60.0
        print(f"seed {seed} switch charts->work at 1,800 s: first start after it {fmt(first)}"
              f"  (charts throughout: {fmt(first_start_after(plain, 1800.0))});"
              f" longest wait after it {fmt(longest_wait_without_a_start(charts, 1800.0))}")
    print(f"over {len(seeds)} seeds: work's longest wait (the largest over the orgs) above charts' on {above};"
          f" an org with work waiting started nothing in the 60 s after the switch on {late}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="seeds 1 to N (default 3)")
    main(range(1, ap.parse_args().seeds + 1))
