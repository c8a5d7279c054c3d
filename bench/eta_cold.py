#!/usr/bin/env python
"""The demo's first ETAs from a cold start, before and after declared durations.

Run from the repo root: ``.venv/bin/python bench/eta_cold.py [--seeds 7,8,9] [--minutes 10]``.

What ``make run`` does, on a simulated clock through the live scheduler's own
:class:`FairQueue` and ETA models: ``seed_demo``'s backlog (1,118 charts, budget 12, one
org held) arrives at once, then ``demo_load`` submits 6 charts a minute for ``--minutes``.
No workflow has any history: the estimates are learned as charts finish, exactly as
``DurationStat`` keeps them (decaying means per pair, per org and per workflow over all
orgs, with counts) and read through :class:`Durations` (pair, workflow, declared, org,
default 600 s). Each chart's **first ETA** is the one given when it arrived (what the
dashboard shows first; the scheduler records it as ``eta_first_at``); its error is that
ETA minus the chart's actual finish (positive: the ETA was late). In both live models:
``forecast`` (the default: it also learns each finish and shrinks towards the estimate)
and ``lanes``; and with two configurations:

- before: no declared durations;
- after: each workflow's declared duration, as ``seed_demo`` sets it (review 12 s, code
  40 s, audit 120 s).

Printed per model and configuration: the median and mean error and the mean and 90th
percentile of the absolute error, for the seeded backlog, for its charts that finished
within the first ``--minutes``, and for the charts ``demo_load`` submitted in that time.
``no-phantoms`` is the forecast without its expected arrivals (``ForecastParams(phantoms=
False)``), to tell how much of the forecast's error the seeding burst's projected
arrivals make: the seed's 1,118 charts at once read as a rate of about 75 a minute.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
from collections import defaultdict
from heapq import heappop, heappush
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from charts.models import DurationStat  # noqa: E402
from scheduling import ORDERED, Durations, QueuedChart, RunningChart  # noqa: E402
from scheduling.queue import FairQueue  # noqa: E402
from scheduling.forecast import Forecaster, ForecastParams  # noqa: E402
from scheduling.contract.simulator import Arrival  # noqa: E402
from fairsched.management.commands.seed_demo import DEMO_BUDGET, ORGS, WORKFLOWS, demo_chart  # noqa: E402

LOAD_RATE_PER_MIN = 6.0  # demo_load's default (settings.FAIRSCHED_DEMO_RATE)
ALPHA = DurationStat.DECAY_ALPHA


def trace(seed: int, minutes: float) -> tuple[list[Arrival], dict, dict, set]:
    """The seeded backlog at t=0 and demo_load's arrivals, as seed_demo and demo_load make them."""
    rng = random.Random(seed)
    arrivals, weights, costs = [], {}, {}
    for spec in ORGS:
        weights[spec.name] = 0 if spec.held else spec.weight
        for wf in WORKFLOWS:
            costs[(spec.name, wf.name)] = wf.cost + spec.cost_bump
        for i in range(spec.charts):
            item = demo_chart(rng, spec.name, spec.mix, f"{spec.name[:2]}-{i}", priority=i < spec.priority)
            arrivals.append(Arrival(f"s{len(arrivals)}", spec.name, item["workflow"], 0.0,
                                    item["payload"]["seconds"], item["priority"]))
    # demo_load: Poisson arrivals over the orgs not held, the first (largest) getting half
    live = [o for o in ORGS if not o.held]
    org_weights = [len(live) if i == 0 else 1 for i in range(len(live))]
    loaded, t = set(), rng.expovariate(LOAD_RATE_PER_MIN / 60.0)
    while t < minutes * 60.0:
        spec = rng.choices(live, weights=org_weights)[0]
        item = demo_chart(rng, spec.name, spec.mix, "load")
        cid = f"l{len(loaded)}"
        arrivals.append(Arrival(cid, spec.name, item["workflow"], t, item["payload"]["seconds"]))
        loaded.add(cid)
        t += rng.expovariate(LOAD_RATE_PER_MIN / 60.0)
    return arrivals, weights, costs, loaded


class Stats:
    """What ``DurationStat`` keeps: per (org, workflow), (org, None) and (None, workflow) the
    decaying mean (``max(alpha, 1/count)`` of each gap) and the count."""

    def __init__(self) -> None:
        self.count: dict = defaultdict(int)
        self.mean: dict = defaultdict(float)

    def add(self, org: str, workflow: str, seconds: float) -> None:
        for k in ((org, workflow), (org, None), (None, workflow)):
            n = self.count[k] + 1
            self.mean[k] += (seconds - self.mean[k]) * max(ALPHA, 1.0 / n)
            self.count[k] = n

    def durations(self, declared: dict[str, float]) -> Durations:
        return Durations(dict(self.mean), 600.0, declared, dict(self.count))


def errors(seed: int, minutes: float, model: str, declared: dict[str, float]) -> dict[str, list[float]]:
    arrivals, weights, costs, loaded = trace(seed, minutes)
    arrivals.sort(key=lambda a: a.at_s)  # stable: the backlog first, in its order
    q = FairQueue(budget=DEMO_BUDGET, weights=weights, costs=costs)
    stats = Stats()
    est = [stats.durations(declared)]  # the estimates in force (the scheduler re-reads them)
    fc = None if model == "lanes" else Forecaster(lambda org, wf: est[0](org, wf),
                                                  ForecastParams(phantoms=model == "forecast"))
    running: dict[str, RunningChart] = {}
    finishing: list[tuple[float, int, str]] = []
    finish_at: dict[str, float] = {}
    first: dict[str, float] = {}
    by_id = {a.id: a for a in arrivals}
    ai, t = 0, 0.0
    while True:
        while finishing and finishing[0][0] <= t:  # 1. finishes teach the statistics
            fin, _, cid = heappop(finishing)
            r = running.pop(cid)
            stats.add(r.org, r.workflow, by_id[cid].actual_s)
            est[0] = stats.durations(declared)
            if fc is not None:
                fc.observe_finish(r.org, r.workflow, by_id[cid].actual_s, chart_id=cid, finished_at=fin)
        arrived = []
        while ai < len(arrivals) and arrivals[ai].at_s <= t:  # 2. arrivals
            a = arrivals[ai]
            q.add(QueuedChart(a.id, a.org, a.workflow, a.at_s, ai, priority=a.priority))
            if fc is not None:
                fc.observe_arrival(a.org, a.workflow, a.at_s)
            arrived.append(a.id)
            ai += 1
        free = DEMO_BUDGET - sum(r.cost for r in running.values())
        for c in q.dispatch(free):  # 3. dispatch
            running[c.id] = RunningChart(c.id, c.org, c.workflow, t, q.cost_of(c.org, c.workflow))
            finish_at[c.id] = t + by_id[c.id].actual_s
            heappush(finishing, (finish_at[c.id], len(finish_at), c.id))
        want = {cid for cid in arrived if cid in running or q.state_of(cid) == ORDERED}
        if want:  # 4. the first ETA of each chart that arrived now
            rep = (fc.etas(q, running.values(), t, stop_after=want) if fc is not None
                   else q.etas(running.values(), t, estimate=est[0], stop_after=want))
            for cid in want:
                first[cid] = t + rep.etas[cid].finish_s
                if fc is not None:
                    fc.record_eta(cid, t, first[cid])
        nxt = [x for x in (finishing[0][0] if finishing else None,
                           arrivals[ai].at_s if ai < len(arrivals) else None) if x is not None]
        if not nxt:
            break
        t = min(nxt)
    out: dict[str, list[float]] = {"backlog": [], "backlog, finished in the window": [], "demo_load": []}
    for cid, eta in first.items():
        err = eta - finish_at[cid]
        if cid in loaded:
            out["demo_load"].append(err)
        else:
            out["backlog"].append(err)
            if finish_at[cid] <= minutes * 60.0:
                out["backlog, finished in the window"].append(err)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="7,8,9", help="seed_demo seeds (seed_demo's default: 7)")
    ap.add_argument("--minutes", type=float, default=10.0, help="the window after make run")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    declared = {wf.name: float(wf.expected_s) for wf in WORKFLOWS}
    priors = {"before": {}, "after": declared}
    print(f"Demo cold start, seeds {seeds}, first {args.minutes:g} min; declared {declared}")
    print("first ETA - actual finish, seconds (positive: the ETA was late); n = charts over all seeds")
    print(f"{'model':13}{'prior':8}{'charts':34}{'n':>6}{'median':>9}{'mean':>9}{'mean|e|':>9}{'p90|e|':>9}")
    for model in ("forecast", "lanes", "no-phantoms"):
        for name, prior in priors.items():
            pooled: dict[str, list[float]] = {}
            for seed in seeds:
                for k, v in errors(seed, args.minutes, model, prior).items():
                    pooled.setdefault(k, []).extend(v)
            for k, v in pooled.items():
                if not v:
                    continue
                a = sorted(abs(x) for x in v)
                print(f"{model:13}{name:8}{k:34}{len(v):>6}{statistics.median(v):>9.0f}{statistics.fmean(v):>9.0f}"
                      f"{statistics.fmean(a):>9.0f}{a[int(0.9 * (len(a) - 1))]:>9.0f}")


if __name__ == "__main__":
    main()
