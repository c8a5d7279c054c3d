"""ETA error of the demo's first audits of its large tenant, before and after the v2 estimate.

Run from the repo root: ``.venv/bin/python bench/eta_fallback.py [--seed 7]``.

The demo backlog (``manage.py seed_demo``: Acme Health with 1,000 charts, five small
orgs, reviews of 5-20 s, code of 20-60 s, audits of 1-3 min, budget 12, one org held)
runs through the live scheduler's own :class:`FairQueue` on a simulated clock, from an
empty statistics table, learning durations as charts finish, exactly as
``DurationStat`` does. Two estimators are compared:

- before: the all-time mean, falling back pair -> org -> 600 s default;
- after (scenario contract v2): the decaying mean (alpha 0.04), falling back
  pair -> the workflow over all orgs -> org -> default.

For Acme's first five audits it prints the duration estimate each got when it
started, the ETA error (predicted finish minus actual finish) at its start and
averaged over every ETA pass while it waited or ran, and how far Acme's clear-time
jumped when its first audit finished (the estimate of every queued audit changes then).
"""
from __future__ import annotations

import argparse
import os
import random
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from charts.models import DurationStat  # noqa: E402
from scheduling import Durations, QueuedChart, RunningChart  # noqa: E402
from scheduling.queue import FairQueue  # noqa: E402
from fairsched.management.commands.seed_demo import DEMO_BUDGET, ORGS, WORKFLOWS, demo_chart  # noqa: E402

TRACKED = 5  # Acme's first audits
ACME = "Acme Health"
ALPHA = DurationStat.DECAY_ALPHA


class OldDurations:
    """Before: the pair, else the org's average, else the default (no workflow-wide figure)."""

    def __init__(self, averages: dict, default_avg_s: float = 600.0) -> None:
        self.averages, self.default_avg_s = averages, default_avg_s

    def __call__(self, org: str, workflow: str | None) -> float:
        v = self.averages.get((org, workflow))
        if v is None:
            v = self.averages.get((org, None))
        return self.default_avg_s if v is None else v


class Stats:
    """What ``DurationStat`` keeps, per (org, workflow), (org, None) and (None, workflow)."""

    def __init__(self, decaying: bool, workflow_wide: bool) -> None:
        self.decaying, self.workflow_wide = decaying, workflow_wide
        self.count: dict = defaultdict(int)
        self.mean: dict = defaultdict(float)

    def add(self, org: str, workflow: str, seconds: float) -> None:
        keys = [(org, workflow), (org, None)] + ([(None, workflow)] if self.workflow_wide else [])
        for k in keys:
            n = self.count[k] + 1
            step = max(ALPHA, 1.0 / n) if self.decaying else 1.0 / n
            self.mean[k] += (seconds - self.mean[k]) * step
            self.count[k] = n

    def estimate(self):
        averages = {k: v for k, v in self.mean.items() if self.count[k]}
        return Durations(averages, 600.0) if self.workflow_wide else OldDurations(averages, 600.0)


def backlog(seed: int):
    """The seeded demo: charts, their true durations, weights and costs."""
    rng = random.Random(seed)
    charts, actual, weights, costs = [], {}, {}, {}
    seq = 0
    for spec in ORGS:
        weights[spec.name] = 0 if spec.held else spec.weight
        for wf in WORKFLOWS:
            costs[(spec.name, wf.name)] = wf.cost + spec.cost_bump
        for i in range(spec.charts):
            item = demo_chart(rng, spec.name, spec.mix, f"{spec.name[:2]}-{i}", priority=i < spec.priority)
            cid = f"c{seq}"
            charts.append(QueuedChart(cid, spec.name, item["workflow"], float(seq) * 1e-3, seq,
                                      priority=item["priority"]))
            actual[cid] = item["payload"]["seconds"]
            seq += 1
    return charts, actual, weights, costs


def run(seed: int, *, new: bool) -> dict:
    charts, actual, weights, costs = backlog(seed)
    q = FairQueue.from_backlog(charts, budget=DEMO_BUDGET, weights=weights, costs=costs)
    stats = Stats(decaying=new, workflow_wide=new)
    by_id = {c.id: c for c in charts}
    # within one org charts start oldest first (Acme has no priority charts)
    tracked = [c.id for c in charts if c.org == ACME and c.workflow == "audit"][:TRACKED]
    running: dict[str, RunningChart] = {}
    ends: dict[str, float] = {}
    eta_log: dict[str, list[float]] = defaultdict(list)  # predicted absolute finish, per ETA pass
    at_start: dict[str, tuple[float, float]] = {}  # id -> (estimate, predicted finish) when it started
    jump = None
    t = 0.0
    while len(q) or running:
        # 1. finishes due now free their cost and teach the statistics
        for cid in [c for c, e in ends.items() if e <= t]:
            r = running.pop(cid)
            del ends[cid]
            if r.org == ACME and r.workflow == "audit" and jump is None:
                before = q.etas(list(running.values()), t, estimate=stats.estimate()).org_clear_s[ACME]
                stats.add(r.org, r.workflow, actual[cid])
                after = q.etas(list(running.values()), t, estimate=stats.estimate()).org_clear_s[ACME]
                jump = (after or 0.0) - (before or 0.0)
            else:
                stats.add(r.org, r.workflow, actual[cid])
        # 2. dispatch
        free = DEMO_BUDGET - sum(r.cost for r in running.values())
        est = stats.estimate()
        for c in q.dispatch(free):
            cost = q.cost_of(c.org, c.workflow)
            running[c.id] = RunningChart(c.id, c.org, c.workflow, t, cost)
            ends[c.id] = t + actual[c.id]
            if c.id in tracked:
                at_start[c.id] = (est(c.org, c.workflow), t + est(c.org, c.workflow))
        # 3. the ETA pass
        rep = q.etas(list(running.values()), t, estimate=est)
        for cid in tracked:
            e = rep.etas.get(cid)
            if e is not None:
                eta_log[cid].append(t + e.finish_s)
        if not ends:
            break
        t = min(ends.values())
    out = []
    for cid in tracked:
        c = by_id[cid]
        true_end = at_start[cid][1] - at_start[cid][0] + actual[cid]  # started + actual
        preds = eta_log[cid]
        out.append({"id": cid, "workflow": c.workflow, "actual_s": actual[cid], "estimate_s": at_start[cid][0],
                    "err_at_start_s": at_start[cid][1] - true_end,
                    "mean_abs_err_s": sum(abs(p - true_end) for p in preds) / len(preds)})
    return {"charts": out, "jump_s": jump}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=7, help="the demo's seed (seed_demo's default: 7)")
    seed = ap.parse_args().seed
    res = {name: run(seed, new=new) for name, new in (("before", False), ("after", True))}
    print(f"Demo (seed {seed}): {ACME}'s first {TRACKED} audits, duration estimate and ETA error")
    print(f"{'':8} {'chart':>7} {'actual':>8} {'estimate':>9} {'err@start':>10} {'mean|err|':>10}")
    for name, r in res.items():
        for c in r["charts"]:
            print(f"{name:8} {c['id']:>7} {c['actual_s']:>7.1f}s {c['estimate_s']:>8.1f}s "
                  f"{c['err_at_start_s']:>+9.1f}s {c['mean_abs_err_s']:>9.1f}s")
    for name, r in res.items():
        cs = r["charts"]
        mae_start = sum(abs(c["err_at_start_s"]) for c in cs) / len(cs)
        mae_all = sum(c["mean_abs_err_s"] for c in cs) / len(cs)
        print(f"{name:8} mean |ETA error| at start {mae_start:7.1f} s; over every ETA pass {mae_all:7.1f} s; "
              f"{ACME}'s clear-time moved {r['jump_s']:+.0f} s when its first audit finished")
    b, a = res["before"]["charts"], res["after"]["charts"]
    ratio = (sum(c["mean_abs_err_s"] for c in a) / sum(c["mean_abs_err_s"] for c in b))
    print(f"after / before, mean |ETA error| over every pass: {ratio:.2f}")


if __name__ == "__main__":
    main()
