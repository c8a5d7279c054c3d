#!/usr/bin/env python
"""PostgreSQL start-up right after a bulk load: what each query of the head read costs,
its plan, and what ``ANALYZE`` changes. Figures, never pass/fail.

A scheduler's start dispatches from the head of the backlog (``db.read_head``): a few
indexed queries per org. On PostgreSQL right after a bulk load (an import, a restore)
they ran far slower than on SQLite (3.7 s against 0.24 s at 1M). This seeds bench/scale.py's
backlog (50 orgs of Zipf-like sizes) into a database of its own, then, in one child:

1. the first start's head read (no round state saved), each query timed;
2. ``EXPLAIN (ANALYZE, BUFFERS)`` of the slowest of them;
3. ``ANALYZE`` of the charts' table, then the same read again and the same plan;

and the same three steps for a restart's head read (a round written for every chart, as
after the first start's backfill: one ``UPDATE`` of them all just before), then a fourth:
the ``VACUUM`` a scheduler runs when its backfill ends (``pg_statistics.vacuum_after_backfill``),
and the same read again. Last, a restart amid a backfill written as the scheduler writes it:
three fifths of the charts' rounds in chunks of 1,000, each chunk's dead index entries swept
after it (``pg_statistics.sweep_unrounded_heads``), then the head read.

Usage::

    python bench/pg_startup.py --postgres postgres://postgres@127.0.0.1:5432/postgres [--size 1000000]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.first_start import drop  # noqa: E402
from bench.scale import database_url, seed  # noqa: E402

TIMING = r"""
import django, time
django.setup()
from django.db import connection
from fairsched.engine.store import db, pg_statistics
from fairsched.engine.scheduler import Scheduler

class Timer:
    def __init__(self): self.calls = []
    def __call__(self, execute, sql, params, many, context):
        t0 = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.calls.append((time.perf_counter() - t0, sql, params))

def head_read(label):
    timer = Timer()
    t0 = time.perf_counter()
    with connection.execute_wrapper(timer):
        head = db.read_head(Scheduler.HEAD_PER_ORG)
    took = time.perf_counter() - t0
    assert head is not None
    slow = sorted(timer.calls, key=lambda c: -c[0])
    n = len(timer.calls)
    print(f"RESULT {label}: {took:.2f} s, {n} queries ({sum(c[0] for c in timer.calls):.2f} s in them); "
          f"the slowest {slow[0][0] * 1000:.0f} ms, the 5 slowest {sum(c[0] for c in slow[:5]) * 1000:.0f} ms")
    return slow[0]

def explain(label, call):
    _, sql, params = call
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        plan = [row[0] for row in cursor.fetchall()]
    print(f"RESULT   {label}: {sql % tuple(repr(p) for p in params)}"[:400])
    for line in plan:
        print(f"RESULT     {line}")

def stats_age():
    with connection.cursor() as cursor:
        cursor.execute("SELECT n_live_tup, n_mod_since_analyze, last_analyze, last_autoanalyze, last_autovacuum "
                       "FROM pg_stat_user_tables WHERE relname = 'charts_chart'")
        print("RESULT   statistics: live %s, modified since analyze %s, analyzed %s, autoanalyzed %s, "
              "autovacuumed %s" % cursor.fetchone())

def first_charts_orders():
    # The largest org's first-charts query of a first start, ordered as before this round
    # (created_at, id) and as now (fair_round, created_at, id; NULL in every row).
    from django.db.models import Count
    from charts.models import Chart, ChartState
    org = Chart.objects.values("org_id").annotate(n=Count("id")).order_by("-n")[0]["org_id"]
    base = Chart.objects.filter(org_id=org, state=ChartState.QUEUED, priority__in=[False], fair_round__isnull=True,
                                moved_to_front_at__isnull=True).values_list("id")
    for label, qs in (("by (created_at, id), before", base.order_by("created_at", "id")[:251]),
                      ("by (fair_round, created_at, id), now", base.order_by("fair_round", "created_at", "id")[:251])):
        sql, params = qs.query.sql_with_params()
        t0 = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            cursor.fetchall()
        took = time.perf_counter() - t0
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + sql, params)
            plan = " / ".join(row[0].strip() for row in cursor.fetchall()[:3])
        print(f"RESULT   largest org's first 251 {label}: {took * 1000:.1f} ms; {plan[:200]}")

def refresh_statistics():
    t0 = time.perf_counter()
    ran = pg_statistics.analyze_if_stale()
    print(f"RESULT pg_statistics.analyze_if_stale(): {'ANALYZE ran' if ran else 'nothing to do'}, {time.perf_counter() - t0:.2f} s")

import sys
phase = sys.argv[1]
if phase == "first":
    stats_age()
    first_charts_orders()
    slow = head_read("first start, right after the load")
    explain("its slowest query", slow)
    refresh_statistics()
    head_read("first start, after ANALYZE")
    explain("the same query", slow)
    first_charts_orders()
else:
    t0 = time.perf_counter()
    from control.models import RoundState
    from charts.models import Chart
    RoundState.objects.update_or_create(pk=1, defaults={"head": 0, "budget": 100, "share": "charts"})
    with connection.cursor() as cursor:  # every chart a round, as the first start's backfill leaves them
        cursor.execute("UPDATE charts_chart SET fair_round = (id % 4000) + 1 WHERE state = 'queued'")
    print(f"RESULT rounds written for every chart in {time.perf_counter() - t0:.1f} s")
    stats_age()
    slow = head_read("restart, right after the rounds")
    explain("its slowest query", slow)
    refresh_statistics()
    head_read("restart, after ANALYZE")
    explain("the same query", slow)
    t0 = time.perf_counter()
    ran = pg_statistics.vacuum_after_backfill()
    print(f"RESULT pg_statistics.vacuum_after_backfill(): {'VACUUM ran' if ran else 'nothing to do'}, "
          f"{time.perf_counter() - t0:.2f} s")
    head_read("restart, after VACUUM")
    explain("the same query", slow)
    # A backfill's chunks as the scheduler writes them: each one's rows' index entries
    # without a round swept after it (pg_statistics.sweep_unrounded_heads); the restart's
    # head read then meets none of them
    with connection.cursor() as cursor:
        cursor.execute("UPDATE charts_chart SET fair_round = NULL WHERE state = 'queued'")
    ids = list(Chart.objects.filter(state="queued").order_by("created_at", "id").values_list("id", flat=True))
    pg_statistics.vacuum_after_backfill()  # from no round and no dead version, as after a first load
    swept = []
    t0 = time.perf_counter()
    for lo in range(0, len(ids) * 3 // 5, 1000):  # three fifths written, 1,000 charts a chunk
        with connection.cursor() as cursor:
            cursor.execute("UPDATE charts_chart SET fair_round = (id %% 4000) + 1 WHERE id = ANY(%s)",
                           [ids[lo:lo + 1000]])
        t1 = time.perf_counter()
        pg_statistics.sweep_unrounded_heads()
        swept.append(time.perf_counter() - t1)
    swept.sort()
    print(f"RESULT {len(swept)} chunks of 1,000 rounds written, each swept after it, in {time.perf_counter() - t0:.1f} s; "
          f"a sweep p50 {swept[len(swept) // 2] * 1000:.1f} ms, max {swept[-1] * 1000:.1f} ms")
    slow = head_read("restart amid a backfill that swept after each chunk")
    explain("its slowest query", slow)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="queued charts (default 1000000)")
    parser.add_argument("--postgres", required=True, help="a PostgreSQL URL (a database is created for the run)")
    args = parser.parse_args()
    if args.size < 1:
        print("size: must be at least 1", file=sys.stderr)
        raise SystemExit(2)
    with tempfile.TemporaryDirectory() as tmp:
        url = database_url(args.postgres, Path(tmp), args.size)
        env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings"}
        try:
            seeded = seed(env, args.size)
            print(f"{args.size:,} queued charts, 50 orgs (largest {seeded['largest_n']:,}), PostgreSQL; "
                  f"seeded in {seeded['seed_s']:.1f} s")
            for phase in ("first", "restart"):
                out = subprocess.run([sys.executable, "-c", TIMING, phase], env=env, cwd=ROOT,
                                     capture_output=True, text=True)
                if out.returncode:
                    raise SystemExit(f"timing failed:\n{out.stderr[-3000:]}")
                for line in out.stdout.splitlines():
                    if line.startswith("RESULT "):
                        print(line[len("RESULT "):])
        finally:
            drop(args.postgres, url)


if __name__ == "__main__":
    main()
