#!/usr/bin/env python
"""A first start's time to its first dispatch decision, share ``charts`` against ``work``
(docs/scheduling.md, "The live scheduler and the policies"): figures, never pass/fail.

No round state is saved (a first start). Under ``charts`` the scheduler dispatches from
the head of the backlog (each org's first charts by rank, ``db.read_head``) while the rest
loads; under ``work`` it reads and ranks the whole backlog first (``db.read_world``). This
times, in one process on one seeded database, what each reads before it can dispatch and
the ``LiveState`` built from it, up to a dispatch decision (best of 3, alternating), and,
for reference, the whole backlog's read under ``charts`` (what it then does meanwhile).
The backlog is bench/scale.py's (50 orgs of Zipf-like sizes, three workflows). Not timed:
the scheduler's own start-up (Django, Temporal, Redis), the same under both shares.

Usage::

    python bench/first_start.py                     # 100,000 charts, SQLite
    python bench/first_start.py --size 100000 --postgres postgres://postgres@127.0.0.1:5432/postgres
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

from bench.scale import database_url, seed  # noqa: E402

TIMING = """
import django, gc, time
django.setup()
from control.models import SchedulerSettings
from fairsched.engine.store import db
from fairsched.engine.scheduler import Scheduler
from fairsched.engine.state import LiveState

def share(value):
    s = SchedulerSettings.get(); s.share = value; s.save()

def first_dispatch(value):
    share(value)
    gc.collect()
    t0 = time.perf_counter()
    head = db.read_head(Scheduler.HEAD_PER_ORG)
    if head is None:  # the whole backlog first
        state = LiveState(db.read_world(), observe_arrivals=False)
    else:
        state = LiveState(head.world, observe_arrivals=False, horizon=head.horizon, truncated=head.truncated)
    state.queue.peek(1)
    return time.perf_counter() - t0, len(state.queue), head is None

def whole(value):
    share(value)
    gc.collect()
    t0 = time.perf_counter()
    state = LiveState(db.read_world(), observe_arrivals=False)
    state.queue.peek(1)
    return time.perf_counter() - t0, len(state.queue)

best = {}
for _ in range(3):
    for key, fn in (("charts", lambda: first_dispatch("charts")), ("work", lambda: first_dispatch("work")),
                    ("charts whole", lambda: whole("charts"))):
        got = fn()
        if key not in best or got[0] < best[key][0]:
            best[key] = got
c, w, cw = best["charts"], best["work"], best["charts whole"]
assert not c[2] and w[2], (c, w)
print(f"RESULT charts head: {c[0]:.2f} s to the first dispatch decision ({c[1]:,} charts loaded)")
print(f"RESULT work whole:  {w[0]:.2f} s to the first dispatch decision ({w[1]:,} charts loaded) = "
      f"{w[0] / c[0]:.1f}x charts")
print(f"RESULT (charts: the whole backlog, read meanwhile: {cw[0]:.2f} s)")
"""


def drop(admin_url: str, url: str) -> None:
    """Drop the run's PostgreSQL database."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}"')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000, help="queued charts (default 100000)")
    parser.add_argument("--postgres", default="", help="a PostgreSQL URL (a database is created for the run)")
    args = parser.parse_args()
    if args.size < 1:
        print("size: must be at least 1", file=sys.stderr)
        raise SystemExit(2)
    with tempfile.TemporaryDirectory() as tmp:
        url = database_url(args.postgres or "sqlite", Path(tmp), args.size)
        env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings"}
        seeded = seed(env, args.size)
        print(f"{args.size:,} queued charts, 50 orgs (largest {seeded['largest_n']:,}), "
              f"{'PostgreSQL' if args.postgres else 'SQLite'}; seeded in {seeded['seed_s']:.1f} s")
        try:
            out = subprocess.run([sys.executable, "-c", TIMING], env=env, cwd=ROOT, capture_output=True, text=True)
        finally:
            if args.postgres:
                drop(args.postgres, url)
        if out.returncode:
            raise SystemExit(f"timing failed:\n{out.stderr[-3000:]}")
        for line in out.stdout.splitlines():
            if line.startswith("RESULT "):
                print(line[len("RESULT "):])


if __name__ == "__main__":
    main()
