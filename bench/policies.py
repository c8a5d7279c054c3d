"""The four policy combinations (share charts|work x dispatch strict|backfill) on bursty
traces: figures, never pass/fail (docs/scheduling.md, "The policies").

Run from the repo root: ``.venv/bin/python bench/policies.py [--quick]``.

Each trace: bursts of arrivals, costs 1-4, skewed tenants (Zipf volumes), log-normal run
times around each pair's estimate (so estimates are right on average, never exactly).
Per combination: the budget used while charts wait, Jain's index of budget share over
weight share (until the first org drains), wait p50/p95 of the biggest and the smallest
tenant (and then of every tenant, a table), and the ETA at arrival's mean absolute error
against a naive ETA (arrival + the chart's estimate, as if it started at once). Then how often, and by how much, a
chart starts later under backfill than under strict (the guard's cost), and the ETA pass
at 100k queued under backfill against strict, measured in the same run.
"""
from __future__ import annotations

import gc
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling import Durations, QueuedChart, RunningChart  # noqa: E402
from scheduling.queue import FairQueue  # noqa: E402
from scheduling.contract.simulator import Arrival, simulate  # noqa: E402

COMBOS = [("charts", "strict"), ("charts", "backfill"), ("work", "strict"), ("work", "backfill")]


def trace(seed: int, *, n: int, n_orgs: int, costs_of: list[int], sigma: float, budget: int, load: float = 0.9):
    """Bursts of 5-60 charts of one kind from one tenant (Zipf-weighted), at random times
    such that the offered work is ``load`` x the budget on average."""
    rnd = random.Random(seed)
    orgs = [f"t{i}" for i in range(n_orgs)]
    vol = [1.0 / (i + 1) for i in range(n_orgs)]
    weights = {o: rnd.choice([1, 1, 2, 3]) for o in orgs}
    kinds = {"xs": (1, 120.0), "s": (2, 300.0), "m": (3, 900.0), "l": (4, 2400.0)}
    kinds = {k: v for k, v in kinds.items() if v[0] in costs_of}
    costs = {(o, k): c for o in orgs for k, (c, _) in kinds.items()}
    est = Durations({(None, k): d for k, (_, d) in kinds.items()})
    arrivals = []
    t = 0.0
    mean_work = sum(c * d for c, d in kinds.values()) / len(kinds)
    gap = 32.5 * mean_work / (load * budget)  # a burst's mean work over the budget offered
    while len(arrivals) < n:
        t += rnd.expovariate(1 / gap)
        org = rnd.choices(orgs, weights=vol)[0]
        kind = rnd.choice(list(kinds))
        for _ in range(min(rnd.randint(5, 60), n - len(arrivals))):
            d = kinds[kind][1]
            actual = d * math.exp(rnd.gauss(-sigma * sigma / 2, sigma))  # mean = the estimate
            arrivals.append(Arrival(f"c{len(arrivals)}", org, kind, t + rnd.random() * 30, actual))
    arrivals.sort(key=lambda a: a.at_s)
    return arrivals, weights, costs, est, budget, orgs


def figures(arrivals, weights, costs, est, budget, share, dispatch):
    r = simulate(arrivals, budget=budget, weights=weights, costs=costs, estimate=est, share=share,
                 dispatch=dispatch)
    by = {a.id: a for a in arrivals}
    err = [abs(c.eta_at_arrival_s - c.finish_s) for c in r.charts if c.eta_at_arrival_s is not None]
    naive = [abs(c.arrive_s + est(c.org, by[c.id].workflow) - c.finish_s) for c in r.charts]
    return r, sum(err) / len(err), sum(naive) / len(naive)


def later_than_strict(strict, backfill) -> tuple[float, float, float]:
    """The share of the charts that start later under backfill than under strict, and the
    p50 and p95 of how much later (nearest rank)."""
    s = {c.id: c.start_s for c in strict.charts}
    late = sorted(c.start_s - s[c.id] for c in backfill.charts if c.start_s > s[c.id] + 1e-6)

    def q(p):
        return late[max(0, math.ceil(p * len(late)) - 1)] if late else 0.0
    return len(late) / len(backfill.charts), q(0.5), q(0.95)


def run_shape(name: str, **kw) -> None:
    arrivals, weights, costs, est, budget, orgs = trace(7, **kw)
    big, small = orgs[0], orgs[-1]
    print(f"\n{name}: {len(arrivals):,} charts, {len(orgs)} tenants, budget {budget}, costs {kw['costs_of']}, "
          f"log-normal sigma {kw['sigma']}")
    print(f"{'share':<7}{'dispatch':<9}{'budget use':>11}{'Jain':>7}{'window h':>9}"
          f"{'wait p50/p95 ' + big + ' min':>22}{'wait p50/p95 ' + small + ' min':>22}{'ETA MAE min':>12}{'naive':>8}")
    res = {}
    for share, dispatch in COMBOS:
        r, mae, naive = figures(arrivals, weights, costs, est, budget, share, dispatch)
        res[(share, dispatch)] = r
        s = r.summary
        po = s["policy_orgs"]

        def w(o):
            p = po.get(o, {})
            if p.get("wait_p50_s") is None:
                return "-"
            return f"{p['wait_p50_s'] / 60:.0f}/{p['wait_p95_s'] / 60:.0f}"
        jain = "-" if s["budget_jain"] is None else f"{s['budget_jain']:.3f}"
        win = "-" if s["budget_window_s"] is None else f"{s['budget_window_s'] / 3600:.1f}"
        print(f"{share:<7}{dispatch:<9}{s['budget_use_while_waiting']:>11.1%}{jain:>7}{win:>9}"
              f"{w(big):>22}{w(small):>22}{mae / 60:>12.1f}{naive / 60:>8.1f}")
    print("  wait p50/p95 per tenant, minutes (t0 has the most charts; its weight after the name):")
    print("  " + f"{'':<16}" + "".join(f"{f'{o} w{weights[o]}':>10}" for o in orgs))
    for share, dispatch in COMBOS:
        po = res[(share, dispatch)].summary["policy_orgs"]
        cells = []
        for o in orgs:
            p = po.get(o, {})
            cells.append("-" if p.get("wait_p50_s") is None else f"{p['wait_p50_s'] / 60:.0f}/{p['wait_p95_s'] / 60:.0f}")
        print("  " + f"{share + ' ' + dispatch:<16}" + "".join(f"{c:>10}" for c in cells))
    for share in ("charts", "work"):
        frac, p50, p95 = later_than_strict(res[(share, "strict")], res[(share, "backfill")])
        print(f"  {share}: under backfill {frac:.1%} of the charts start later than under strict "
              f"(by p50 {p50 / 60:.1f} min, p95 {p95 / 60:.1f} min): estimates that ran long, and a different history")


def deep_backlog(hours: float) -> None:
    """Issue 23's six orgs, every one backlogged: Jain's index of budget share over weight share."""
    kinds = {"audit": (4, 2400.0), "code": (2, 900.0), "review": (1, 300.0)}
    orgs = {"A1": "audit", "A2": "audit", "C1": "code", "C2": "code", "R1": "review", "R2": "review"}
    costs = {(o, k): kinds[k][0] for o, k in orgs.items()}
    est = Durations({(o, k): kinds[k][1] for o, k in orgs.items()})
    arrivals = [Arrival(f"{o}-{i}", o, k, 0.0, kinds[k][1]) for o, k in orgs.items()
                for i in range(int(hours * 3600 / kinds[k][1]))]
    print(f"\nissue 23's deep backlog (budget 12, {hours:.0f} h of each org's work, exact estimates): "
          f"budget share / weight share")
    for share, dispatch in COMBOS:
        s = simulate(arrivals, budget=12, weights=dict.fromkeys(orgs, 1), costs=costs, estimate=est,
                     share=share, dispatch=dispatch).summary
        ratios = " ".join(f"{o} {v['budget_share'] / v['weight_share']:.2f}" for o, v in s["policy_orgs"].items())
        print(f"  {share:<7}{dispatch:<9} Jain {s['budget_jain']:.3f}  budget use {s['budget_use_while_waiting']:.1%}"
              f"  {ratios}")


def eta_pass_speed(n: int) -> None:
    rnd = random.Random(3)
    orgs = [f"o{i}" for i in range(60)]
    weights = {o: rnd.choice([1, 1, 2, 3]) for o in orgs}
    wfs = ["a", "b", "c", "d"]
    costs = {(o, w): i + 1 for o in orgs for i, w in enumerate(wfs)}
    est = Durations({(None, w): 300.0 * (i + 1) for i, w in enumerate(wfs)})
    queued = [QueuedChart(f"c{i}", rnd.choice(orgs), rnd.choice(wfs), float(i), i) for i in range(n)]
    running = [RunningChart(f"r{i}", rnd.choice(orgs), "a", n - rnd.random() * 300, 1) for i in range(40)]
    now = float(n)
    qs = {d: FairQueue.from_backlog(queued, budget=200, weights=weights, costs=costs, estimate=est, dispatch=d)
          for d in ("strict", "backfill")}
    best = dict.fromkeys(qs, math.inf)
    for _ in range(5):
        for d, q in qs.items():
            gc.collect()
            t0 = time.perf_counter()
            q.etas(running, now, estimate=est)
            best[d] = min(best[d], time.perf_counter() - t0)
    disp = {}
    for d, q in qs.items():
        t0 = time.perf_counter()
        for _ in range(200):
            q.peek(3, running, now, est)
        disp[d] = (time.perf_counter() - t0) / 200
    print(f"\nETA pass over {n:,} queued (budget 200, costs 1-4, 40 running): strict {best['strict'] * 1e3:.0f} ms, "
          f"backfill {best['backfill'] * 1e3:.0f} ms = {best['backfill'] / best['strict']:.2f}x strict (max 3x)")
    print(f"one dispatch decision (free 3): strict {disp['strict'] * 1e6:.0f} us, backfill "
          f"{disp['backfill'] * 1e6:.0f} us (depth {qs['backfill'].depth}, whatever the backlog)")


def main() -> None:
    quick = "--quick" in sys.argv
    n = 1500 if quick else 6000
    run_shape("bursty, costs 1-4", n=n, n_orgs=8, costs_of=[1, 2, 3, 4], sigma=0.5, budget=12)
    run_shape("bursty, every cost 1 (backfill cannot gain: the head always fits a free unit)",
              n=n, n_orgs=8, costs_of=[1], sigma=0.5, budget=12)
    run_shape("bursty, costs 1-4, budget 40 (wide charts rarely wait for room)",
              n=n, n_orgs=8, costs_of=[1, 2, 3, 4], sigma=0.5, budget=40)
    deep_backlog(4 if quick else 8)
    eta_pass_speed(20_000 if quick else 100_000)


if __name__ == "__main__":
    main()
