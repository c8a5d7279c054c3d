"""The forecast ETA pass with capacity pools against the lanes pass with pools, in the same
run (issue 43, item 5; figures, never pass/fail).

Run from the repo root: ``.venv/bin/python bench/forecast_pools.py [--n 100000] [--repeat 3]``.

``bench/pools.py``'s backlog (``--n`` charts of 50 orgs, five pools, each pair drawing on
one to three of them) in a live :class:`FairQueue` with the pools, the pools busy but for 3
units each. The forecast has seen the backlog arrive evenly over the last 6 hours (so every
org has a rate and the pass lets in its expected arrivals, up to ``max_phantoms``) and no
finish (its durations are the prior, the backlog's estimates). Timed, best of ``--repeat``:

- five pools: the lanes pass (``FairQueue.etas``, the pools' lane walk with floors, with
  the backlog's ``Durations``, as live; the forecast's durations are the same numbers, as
  nothing has finished) against the forecast's pass (``Forecaster.etas``: the same walk fed
  the order and the phantoms), and the forecast's pass with no phantoms (``phantoms=False``:
  the walk and its generator alone);
- one pool (the same backlog on the budget, each pair's cost): the same three, for the
  ratio the forecast has always had against the lane pass.
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.pools import POOLS, backlog  # noqa: E402
from scheduling.forecast import Forecaster, ForecastParams  # noqa: E402
from scheduling.lanes import Durations  # noqa: E402
from scheduling.pools import Pools  # noqa: E402
from scheduling.queue import FairQueue  # noqa: E402
from scheduling.types import QueuedChart, RunningChart  # noqa: E402

NOW = 100_000.0


def best(fns: dict, repeat: int) -> dict:
    """Each of ``fns``' best of ``repeat`` calls, seconds; the calls take turns."""
    t = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            gc.collect()
            t0 = time.perf_counter()
            fn()
            t[name] = min(t[name], time.perf_counter() - t0)
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    charts, demands, costs, est = backlog(a.n)
    weights = {o: 1 + i % 3 for i, o in enumerate(sorted({o for o, _ in charts}))}
    durations = Durations(dict(est), 600.0)
    fc = Forecaster(durations, ForecastParams())
    span = 6 * 3600.0
    for i, (o, wf) in enumerate(charts):
        fc.observe_arrival(o, wf, NOW - span + i * span / a.n)
    busy = {p: cap - 3 for p, cap in POOLS.items()}
    bare = Forecaster(durations, replace(fc.params, phantoms=False))
    bare._orgs, bare._first_at = fc._orgs, fc._first_at

    def queue(pools):
        q = FairQueue(budget=POOLS["default"], weights=weights, costs=costs, pools=pools)
        for i, (o, wf) in enumerate(charts):
            q.add(QueuedChart(f"c{i}", o, wf, NOW - span + i * span / a.n, i))
        return q

    rows = []
    for name, pools, run in (
        ("five pools", Pools(dict(POOLS), demands),
         [RunningChart(f"r-{p}", "running", None, NOW - 60.0, 0, ((p, busy[p]),)) for p in POOLS]),
        ("one pool", None, [RunningChart("r", "running", None, NOW - 60.0, POOLS["default"] - 3)]),
    ):
        q = queue(pools)
        t = best({"lanes": lambda: q.etas(run, NOW, estimate=durations),
                  "forecast": lambda: fc.etas(q, run, NOW),
                  "no phantoms": lambda: bare.etas(q, run, NOW)}, a.repeat)
        # how many phantoms a pass lets in: the ETAs it gives past the order's own
        rep = fc.etas(q, run, NOW)
        lanes = q.etas(run, NOW, estimate=durations)
        later = sum(1 for k, e in lanes.etas.items() if rep.etas[k].start_s > e.start_s)
        rows.append((name, t, later, rep.clear_s, lanes.clear_s))
    print(f"{a.n:,} queued, 50 orgs, pools {POOLS}; best of {a.repeat}; the forecast saw the backlog arrive "
          f"over 6 h (up to {fc.params.max_phantoms:,} phantoms a pass)")
    for name, t, later, c_fc, c_lanes in rows:
        print(f"{name:>10}: lanes pass {t['lanes'] * 1e3:7.1f} ms, forecast pass {t['forecast'] * 1e3:7.1f} ms "
              f"({t['forecast'] / t['lanes']:.2f}x), without phantoms {t['no phantoms'] * 1e3:7.1f} ms "
              f"({t['no phantoms'] / t['lanes']:.2f}x); charts the phantoms delay {later:,}, clear-time "
              f"{c_lanes / 3600:.1f} h -> {c_fc / 3600:.1f} h")
    f5, f1 = rows[0][1], rows[1][1]
    print(f"forecast / lanes: five pools {f5['forecast'] / f5['lanes']:.2f}x, one pool "
          f"{f1['forecast'] / f1['lanes']:.2f}x; five pools' forecast / one pool's {f5['forecast'] / f1['forecast']:.2f}x")


if __name__ == "__main__":
    main()
