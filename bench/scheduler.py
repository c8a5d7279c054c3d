#!/usr/bin/env python
"""Figures for the live scheduler: refill latency, dispatch throughput, create -> dispatched.

Starts its own Redis and Temporal dev server (``fairsched.runtime.embedded``), a fresh
SQLite database in a temporary directory, one ``runworker`` and one
``runscheduler`` (subprocesses, as in production), then measures with
Temporal's own start and close times:

1. refill latency: budget 1, a chain of short charts; for each, the next
   chart's start minus this one's close (goal: p95 under 1 s);
2. create -> dispatched: budget free, charts created one by one through the
   ORM; Temporal start time minus ``created_at`` (goal: under 1 s);
3. dispatch throughput: a large budget and many short charts submitted at once;
   starts per second between the first and the last start.

Usage: ``python bench/scheduler.py [--chain 40] [--creates 20] [--many 400]``
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._stack import live_stack  # noqa: E402


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chain", type=int, default=40, help="charts in the refill chain (budget 1)")
    parser.add_argument("--creates", type=int, default=20, help="charts created one by one")
    parser.add_argument("--many", type=int, default=400, help="charts submitted at once for throughput")
    args = parser.parse_args()

    with live_stack("fairsched-bench-") as stack:
        run(args, stack.spawn, stack.temporal_url)

def run(args, spawn, temporal_url: str) -> None:
    from temporalio.client import Client

    from charts.models import Chart, ChartState
    from charts.services import chart_submit, chart_submit_many
    from control.services import budget_set, scheduler_settings_set
    from orgs.models import Org, Workflow

    loop = asyncio.new_event_loop()
    client = loop.run_until_complete(Client.connect(temporal_url))

    def times(ids: list[int]) -> dict[int, tuple[float, float | None]]:
        async def go():
            out = {}
            for i in range(0, len(ids), 100):
                part = ids[i:i + 100]
                query = " OR ".join(f'WorkflowId = "chart-{c}"' for c in part)
                async for wf in client.list_workflows(query):
                    out[int(wf.id.split("-")[1])] = (wf.start_time.timestamp(),
                                                     wf.close_time.timestamp() if wf.close_time else None)
            return out
        return loop.run_until_complete(go())

    def wait(ids: list[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while Chart.objects.filter(pk__in=ids, state__in=[ChartState.QUEUED, ChartState.RUNNING]).exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out: charts not finished after {timeout:.0f} s")
            time.sleep(0.2)

    def wait_visible(ids: list[int], closed: bool = True) -> dict:
        for _ in range(100):
            t = times(ids)
            if len(t) == len(ids) and (not closed or all(c for _, c in t.values())):
                return t
            time.sleep(0.2)
        return times(ids)

    org = Org.objects.create(name="Bench", weight=1)
    wf = Workflow.objects.create(name="code", temporal_type="DemoChart")
    scheduler_settings_set(budget=1, eta_interval_s=3.0, reconcile_interval_s=5.0)
    spawn("runworker")
    spawn("runscheduler")

    # 1. refill latency
    ids = chart_submit_many(charts=[{"org": org.pk, "workflow": wf.pk, "payload": {"seconds": 0.2}}
                                    for _ in range(args.chain)]).created
    wait(ids, 60 + args.chain * 2)
    t = wait_visible(ids)
    chain = sorted(ids, key=lambda c: t[c][0])
    refill = [t[b][0] - t[a][1] for a, b in zip(chain, chain[1:])]
    print(f"refill latency (workflow closed -> next chart started), {len(refill)} refills, budget 1: "
          f"p50 {pct(refill, 50) * 1000:.0f} ms, p95 {pct(refill, 95) * 1000:.0f} ms, "
          f"max {max(refill) * 1000:.0f} ms  (goal p95 < 1000 ms)")

    # 2. submit (chart_submit, which notifies on commit) -> dispatched, budget free
    budget_set(budget=100)
    time.sleep(1.0)
    created: dict[int, float] = {}
    for _ in range(args.creates):
        c = chart_submit(org=org, workflow=wf, payload={"seconds": 0.1})
        created[c.pk] = c.created_at.timestamp()
        time.sleep(0.25)
    wait(list(created), 60)
    t = wait_visible(list(created), closed=False)
    lat = [t[c][0] - created[c] for c in created]
    print(f"submit -> started on Temporal, {len(lat)} charts, budget free: "
          f"p50 {pct(lat, 50) * 1000:.0f} ms, p95 {pct(lat, 95) * 1000:.0f} ms, max {max(lat) * 1000:.0f} ms  "
          f"(goal < 1000 ms)")

    # 3. throughput: many short charts, large budget
    budget_set(budget=10_000)
    time.sleep(1.0)
    t0 = time.time()
    ids = chart_submit_many(charts=[{"org": org.pk, "workflow": wf.pk, "payload": {"seconds": 1}}
                                    for _ in range(args.many)]).created
    wait(ids, 300)
    t = wait_visible(ids, closed=False)
    starts = sorted(s for s, _ in t.values())
    span = starts[-1] - starts[0]
    print(f"dispatch throughput, {len(ids)} charts submitted at once, budget 10000: "
          f"{(len(starts) - 1) / span if span > 0 else float('inf'):.0f} starts/s "
          f"(first start {(starts[0] - t0) * 1000:.0f} ms after the submit, last {starts[-1] - t0:.2f} s)")
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()


if __name__ == "__main__":
    main()
