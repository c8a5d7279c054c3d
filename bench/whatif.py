"""What a what-if preview and the capacity planner cost at a large backlog, against an ETA
pass of the same state measured in the same run.

A 50-org backlog (skewed: org i has weight 1 or 2 and a share ~1/i of the charts; three
workflows, cost 1 or 2; half the orgs promise a 24 h turnaround), built in memory as the
scheduler loads it (``LiveState``). Measured, each the median of ``--repeat`` runs:

- **ETA pass**: the configured model's pass over a capture, its 90% bounds and due states
  (``due_pass``): what the scheduler computes before each snapshot (the baseline);
- **preview**: ``Previews``' two paths. When nothing changed since the last ETA pass, its
  per-org figures are the *before* (the pass gives them at no extra cost) and one forked
  child makes the change (a budget: a re-rank of every org; a weight: one org) and measures
  it at the pass's ``now`` ("after only"); else the loop forks two children back to back
  (``run_forked_pair``), one measures the state, the other the changed state ("both
  sides"). Wall time seen by the loop, and the loop's own share (the forks);
- **planner**: ``plan_budget`` for a clear-by time 80% of the current clear-time away
  (it must search), with the scheduler's last pass as its first guess (as the scheduler
  asks it) and without (``manage.py plan --live``), and for "keep every due time", each on
  a fresh state (it re-ranks).

The machine's load drifts over a run, so each row is compared with an ETA pass of the same
state measured just before it.

    .venv/bin/python bench/whatif.py                      # 100k queued, forecast model
    .venv/bin/python bench/whatif.py --charts 20000 --model lanes
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from fairsched.engine import forked, planner, whatif  # noqa: E402
from fairsched.engine.due_states import due_pass  # noqa: E402
from fairsched.engine.store.rows import ChartRow, Config, OrgRow, World  # noqa: E402
from fairsched.engine.state import LiveState  # noqa: E402

WFS = ("review", "code", "audit")


def build(n: int, model: str, budget: int) -> LiveState:
    rng = random.Random(7)
    orgs = [OrgRow(i, f"Org {i}", f"org-{i}", 1 + (i % 3 == 0), 24 * 3600.0 if i % 2 else None) for i in range(1, 51)]
    org_of = rng.choices(range(1, 51), [1 / i for i in range(1, 51)], k=n)
    t0 = time.time() - 3600
    rows = [ChartRow(i + 1, org_of[i], WFS[i % 3], "queued", t0 + i * 0.01) for i in range(n)]
    costs = {(str(o.id), wf): 1 + (wf == "audit") for o in orgs for wf in WFS}
    avg = {(str(o.id), wf): 60.0 + 30 * (wf == "audit") for o in orgs for wf in WFS}
    return LiveState(World(Config(budget=budget, eta_model=model), orgs, costs, avg, rows))


def timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def eta_pass(state: LiveState, now: float):
    cap = state.capture()
    report = cap.eta_report(now)
    p90 = cap.forecast.p90_finisher()
    due = due_pass(cap, report.etas, now, p90)
    risky = {str(o): c["at_risk"] + c["late"] for o, c in due.orgs.items()}
    whatif.measured(cap, report, risky, now)  # what the pass hands a preview (engine/eta_passes.py)
    return report


def preview(state: LiveState, change: whatif.Change, now: float, both: bool):
    async def go():
        t = time.perf_counter()
        if both:
            run = forked.run_forked_pair(lambda: whatif.before_of(state, now), lambda: whatif.after_of(state, change, now),
                                         name="bench preview", timeout_s=120)
        else:
            run = forked.run_forked(lambda: whatif.after_of(state, change, now), name="bench preview", timeout_s=120)
        task = asyncio.ensure_future(run)
        await asyncio.sleep(0)  # the forks happen in the task's first step
        forks = time.perf_counter() - t
        out = await task
        return forks, out
    return asyncio.run(go())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--charts", type=int, default=100_000)
    ap.add_argument("--model", choices=("forecast", "lanes"), default="forecast")
    ap.add_argument("--budget", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    t = time.perf_counter()
    state = build(a.charts, a.model, a.budget)
    print(f"{a.charts:,} queued, 50 orgs, budget {a.budget}, ETA model {a.model} (built in {time.perf_counter() - t:.1f} s)")
    now = time.time()
    # The machine is shared and its load drifts over a run: each row is compared with an ETA
    # pass of the same state measured just before it.
    base, report = timed(lambda: eta_pass(state, now), a.repeat)
    print(f"{'':<36} {'time':>9}   {'ETA pass':>9}   ratio")
    print(f"{'ETA pass (model, bounds, due states)':<36} {base:7.3f} s   {base:7.3f} s   1.00x")

    def row(label: str, took: float, near: float, note: str = "") -> None:
        print(f"{label:<36} {took:7.3f} s   {near:7.3f} s   {took / near:4.2f}x   {note}")
    for label, change, both in (
            (f"preview: budget {a.budget}->{a.budget + 10}, after only", whatif.Change("budget", a.budget + 10), False),
            ("preview: weight 1->3, after only", whatif.Change("weight", 3, org=1), False),
            (f"preview: budget {a.budget}->{a.budget + 10}, both sides", whatif.Change("budget", a.budget + 10), True),
            ("preview: weight 1->3, both sides", whatif.Change("weight", 3, org=1), True)):
        near, _ = timed(lambda: eta_pass(state, now), a.repeat)
        walls, forks = [], []
        for _ in range(a.repeat):
            t = time.perf_counter()
            f, _ = preview(state, change, now, both)
            walls.append(time.perf_counter() - t)
            forks.append(f)
        row(label, statistics.median(walls), near, f"(the loop's own part, the forks: {statistics.median(forks) * 1000:.0f} ms)")
    clear_by = now + 0.8 * report.clear_s

    def fresh_plan(**kw):
        s = build(a.charts, a.model, a.budget)
        t = time.perf_counter()
        out = planner.plan_budget(s, now, **kw)
        return time.perf_counter() - t, out
    hint = (a.budget, now + report.clear_s)  # the scheduler's last pass, its first guess for a clear-by time
    for label, kw in (("planner: clear by 80% of now's", {"clear_by": clear_by, "hint": hint}),
                      ("planner: clear by, no pass to start", {"clear_by": clear_by}),
                      ("planner: every due time", {"meet_due": True})):
        near, _ = timed(lambda: eta_pass(state, now), a.repeat)
        runs = [fresh_plan(**kw) for _ in range(a.repeat)]
        out = runs[0][1]
        row(label, statistics.median(t for t, _ in runs), near, f"budget {out.budget} in {out.probes} passes: {out.why}")

if __name__ == "__main__":
    main()
