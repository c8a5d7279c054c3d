#!/usr/bin/env python
"""Figures for the live scheduler: refill latency, dispatch throughput, create -> dispatched.

Starts its own Redis and Temporal dev server (``fairsched.runtime.embedded``), a fresh
SQLite database in a temporary directory (``--postgres URL``: a fresh database on that
PostgreSQL server, dropped after), one ``runworker`` and one
``runscheduler`` (subprocesses, as in production), then measures with
Temporal's own start and close times:

1. refill latency: budget 1, a chain of short charts; for each, the next
   chart's start minus this one's close (goal: p95 under 1 s);
2. create -> dispatched: budget free, charts created one by one through the
   ORM; Temporal start time minus ``created_at`` (goal: under 1 s);
3. dispatch throughput: a large budget and many short charts submitted at once;
   starts per second between the first and the last start.

The baseline, in the same stack and run (issue 26's goal 1): a bare temporalio client
starts ``--many`` DemoChart workflows of the same payload on the same worker and task queue
at ``--bare-concurrency`` starts in flight (by default the scheduler's own) (no database, no scheduler; their chart ids
exist nowhere, so their outcome writes are no-ops): its starts per second (Temporal's start
times, as above) and its start latency (the ``start_workflow`` call, p50/p95), against which
the throughput (goal >= 0.95x) and the refill p95 (goal <= 1.5x the start latency's p95) are
given; and one at a time, ``--chain`` starts, the baseline of a refill (which starts one chart).
The two throughputs alternate ``--rounds`` times, the bare client first, each round on an
idle stack (the previous round's workflows closed).

Usage: ``python bench/scheduler.py [--chain 40] [--creates 20] [--many 400] [--rounds 5] [--postgres URL]``
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

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
    parser.add_argument("--bare-concurrency", type=int, default=None,
                        help="the bare client's starts in flight (default: the scheduler's, FAIRSCHED_START_CONCURRENCY)")
    parser.add_argument("--rounds", type=int, default=5, help="throughput rounds, bare client and Fairsched")
    parser.add_argument("--no-watch", action="store_true", help="the scheduler without result watchers")
    parser.add_argument("--py-spy", default="", metavar="OUT",
                        help="sample the scheduler with py-spy (on PATH) over Fairsched's rounds: raw folded "
                             "stacks to OUT.<round> (the thread holding the GIL: its Python's CPU)")
    parser.add_argument("--postgres", default="",
                        help="a PostgreSQL server's URL: the bench runs on a database of its own there")
    args = parser.parse_args()

    with live_stack("fairsched-bench-", postgres=args.postgres) as stack:
        print(f"database: {'PostgreSQL' if args.postgres else 'SQLite'}")
        run(args, stack.spawn, stack.temporal_url)


def run(args, spawn, temporal_url: str) -> None:
    from django.conf import settings
    from temporalio.client import Client

    from charts.models import Chart, ChartState
    from charts.services import chart_submit, chart_submit_many
    from control.services import budget_set, scheduler_settings_set
    from orgs.models import Org, Workflow

    if args.bare_concurrency is None:
        args.bare_concurrency = settings.FAIRSCHED_START_CONCURRENCY
    loop = asyncio.new_event_loop()
    client = loop.run_until_complete(Client.connect(temporal_url))

    def times(ids: list[int]) -> dict[int, tuple[float, float | None]]:
        from common.workflow_ids import workflow_id

        names = {c: workflow_id(c) for c in ids}  # (reads the deployment: not from the loop)

        async def go():
            out = {}
            for i in range(0, len(ids), 100):
                part = {names[c]: c for c in ids[i:i + 100]}
                query = " OR ".join(f'WorkflowId = "{w}"' for w in part)
                async for wf in client.list_workflows(query):
                    out[part[wf.id]] = (wf.start_time.timestamp(),
                                        wf.close_time.timestamp() if wf.close_time else None)
            return out
        return loop.run_until_complete(go())

    def bare(n: int, concurrency: int, tag: str) -> tuple[float, list[float]]:
        """A plain temporalio client starts ``n`` DemoCharts, ``concurrency`` in flight:
        (starts/s by Temporal's start times, each start call's latency in s)."""
        from temporalio.common import WorkflowIDReusePolicy

        from fairsched.temporal.shared import ChartInput

        async def go():
            sem, lat = asyncio.Semaphore(concurrency), []

            async def one(i: int) -> None:
                async with sem:
                    t0 = time.perf_counter()
                    await client.start_workflow(
                        "DemoChart", ChartInput(chart_id=10**12 + i, org="bare", org_id=0, workflow="code",
                                                payload={"seconds": 1}),
                        id=f"bare-{tag}-{i}", task_queue=settings.FAIRSCHED_TASK_QUEUE,
                        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE)
                    lat.append(time.perf_counter() - t0)
            await asyncio.gather(*(one(i) for i in range(n)))
            starts = []
            for _ in range(100):
                starts = [wf.start_time.timestamp()
                          async for wf in client.list_workflows(f'WorkflowId STARTS_WITH "bare-{tag}-"')]
                if len(starts) == n:
                    break
                await asyncio.sleep(0.2)
            starts.sort()
            # as Fairsched's round waits for its charts to finish: the next round starts on an idle stack
            for _ in range(600):
                running = [wf async for wf in client.list_workflows(
                    f'WorkflowId STARTS_WITH "bare-{tag}-" AND ExecutionStatus = "Running"')]
                if not running:
                    break
                await asyncio.sleep(0.5)
            return (len(starts) - 1) / (starts[-1] - starts[0]), lat
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
    scheduler = psutil.Process(spawn("runscheduler", *(["--no-watch"] if args.no_watch else [])).pid)

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
    _, one_by_one = bare(args.chain, 1, f"seq-{int(time.time())}")  # a refill starts one chart: its baseline
    print(f"the bare client's start call, one at a time ({len(one_by_one)}): p50 {pct(one_by_one, 50) * 1000:.0f} ms, "
          f"p95 {pct(one_by_one, 95) * 1000:.0f} ms")

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

    # 3. throughput: many short charts, large budget; the bare client first in each round
    budget_set(budget=10_000)
    time.sleep(1.0)
    ours, theirs, start_lat = [], [], []
    # what each side's starter spends, and how busy the machine's cores are, over each round
    # (the bare client: this process, its polling of Temporal's listing included; Fairsched:
    # the scheduler's process, its reading of the outcomes included)
    cpu: dict[str, list[float]] = {"bare_ms": [], "ours_ms": [], "kids_ms": [], "bare_busy": [], "ours_busy": []}

    def busy(before) -> float:
        after = psutil.cpu_times()
        total = sum(after) - sum(before)
        return 100.0 * (1 - (after.idle - before.idle) / total) if total > 0 else float("nan")

    for r in range(args.rounds):
        c0, m0 = time.process_time(), psutil.cpu_times()
        rate, lat = bare(args.many, args.bare_concurrency, f"{r}-{int(time.time())}")
        cpu["bare_ms"].append((time.process_time() - c0) * 1000 / args.many)
        cpu["bare_busy"].append(busy(m0))
        theirs.append(rate)
        start_lat += lat
        time.sleep(1.0)
        t0 = time.time()
        c0, m0 = sum(scheduler.cpu_times()[:2]), psutil.cpu_times()
        k0 = sum(scheduler.cpu_times()[2:4])
        spy = (subprocess.Popen(["py-spy", "record", "-p", str(scheduler.pid), "-f", "raw", "-r", "250", "--threads",
                                 "--gil", "--nonblocking", "-o", f"{args.py_spy}.{r + 1}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               if args.py_spy else None)
        ids = chart_submit_many(charts=[{"org": org.pk, "workflow": wf.pk, "payload": {"seconds": 1}}
                                        for _ in range(args.many)]).created
        wait(ids, 300)
        cpu["ours_ms"].append((sum(scheduler.cpu_times()[:2]) - c0) * 1000 / args.many)
        cpu["kids_ms"].append((sum(scheduler.cpu_times()[2:4]) - k0) * 1000 / args.many)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(30)
        cpu["ours_busy"].append(busy(m0))
        t = wait_visible(ids, closed=False)
        starts = sorted(s for s, _ in t.values())
        span = starts[-1] - starts[0]
        ours.append((len(starts) - 1) / span if span > 0 else float("inf"))
        time.sleep(1.0)
        print(f"round {r + 1}: bare client {rate:.0f} starts/s (start call p50 {pct(lat, 50) * 1000:.0f} ms, "
              f"p95 {pct(lat, 95) * 1000:.0f} ms); Fairsched {ours[-1]:.0f} starts/s = {ours[-1] / rate:.2f}x "
              f"(first start {(starts[0] - t0) * 1000:.0f} ms after the submit, last {starts[-1] - t0:.2f} s); "
              f"CPU a chart: the bare client {cpu['bare_ms'][-1]:.2f} ms, the scheduler {cpu['ours_ms'][-1]:.2f} ms "
              f"(+ {cpu['kids_ms'][-1]:.2f} ms in its forked ETA passes reaped)")
    ratios = [a / b for a, b in zip(ours, theirs)]
    print(f"dispatch throughput, {args.many} charts at once, budget 10000, {args.bare_concurrency} starts in flight: "
          f"median ratio {statistics.median(ratios):.2f}x; Fairsched "
          f"{', '.join(f'{x:.0f}' for x in ours)} starts/s against the bare client's "
          f"{', '.join(f'{x:.0f}' for x in theirs)} = {', '.join(f'{a / b:.2f}x' for a, b in zip(ours, theirs))} "
          f"(goal >= 0.95x)")
    print(f"CPU a chart, median: the bare client {statistics.median(cpu['bare_ms']):.2f} ms, the scheduler "
          f"{statistics.median(cpu['ours_ms']):.2f} ms (its finishes included; rounds "
          f"{', '.join(f'{x:.2f}' for x in cpu['ours_ms'])}, worst round's throughput "
          f"{min(ratios):.2f}x); the machine's cores busy over the "
          f"rounds {statistics.median(cpu['bare_busy']):.0f}% (bare) and {statistics.median(cpu['ours_busy']):.0f}% "
          f"(Fairsched), {os.cpu_count()} cores shared with Temporal's dev server and the worker")
    print(f"refill p95 {pct(refill, 95) * 1000:.0f} ms against the bare client's start call p95, one at a time "
          f"{pct(one_by_one, 95) * 1000:.0f} ms = {pct(refill, 95) / pct(one_by_one, 95):.2f}x, "
          f"{args.bare_concurrency} in flight {pct(start_lat, 95) * 1000:.0f} ms = "
          f"{pct(refill, 95) / pct(start_lat, 95):.2f}x (goal <= 1.5x)")
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()


if __name__ == "__main__":
    main()
