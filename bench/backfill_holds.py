#!/usr/bin/env python
"""Backfill's dispatch decision with the guards' windows held (docs/scheduling.md, "Backfill").

A chart started ahead of an earlier reservation under its guard leaves its window held
until its bound's end, and each window held is a step of the profile that every
reservation of the walk crosses. This times one dispatch decision (``FairQueue.peek``,
what the live scheduler's dispatch plans with) at budget 1,000, 20,000 queued, 995
running, with 0, 100, 1,000 and 3,000 windows held; the ratios are against none, in the
same run. Usage::

    python bench/backfill_holds.py
"""
from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling import Durations, QueuedChart, RunningChart  # noqa: E402
from scheduling.queue import FairQueue  # noqa: E402


def main() -> None:
    rnd = random.Random(1)
    budget = 1000
    orgs = {f"o{i}": 1 for i in range(20)}
    costs = {(o, w): c for o in orgs for w, c in (("s", 1), ("m", 2), ("l", 8))}
    est = Durations({(None, "s"): 60.0, (None, "m"): 300.0, (None, "l"): 1800.0})
    q = FairQueue(budget=budget, weights=orgs, costs=costs, dispatch="backfill", estimate=est)
    for i in range(20_000):
        q.add(QueuedChart(f"c{i}", rnd.choice(list(orgs)), rnd.choice(["s", "m", "l"]), float(i), i))
    running = [RunningChart(f"r{i}", "o0", "s", -rnd.uniform(0, 50), 1) for i in range(budget - 5)]
    base = None
    for n in (0, 100, 1000, 3000):
        # windows of cost-1 charts started ahead at 0, ending between 90 s and 120 s
        q._guard_holds = [(0.0, 60.0 + k * 0.01, 90.0 + k * 0.01, 1) for k in range(n)]
        reps = 5
        t = time.perf_counter()
        for _ in range(reps):
            q.peek(5, running, 10.0, est)
        ms = 1000 * (time.perf_counter() - t) / reps
        base = base or ms
        print(f"{n:>5} windows held: one dispatch decision {ms:7.1f} ms = {ms / base:5.1f}x none")


if __name__ == "__main__":
    main()
