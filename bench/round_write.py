#!/usr/bin/env python
"""The first-ever start's round write: every queued chart's fair round, in one transaction.

A scheduler that finds no saved round state (a new installation) builds the whole order
and writes each queued chart's round with its first dispatch (a crash right after must
not reshuffle; docs/architecture.md). This times that write, ``db.save_rounds`` with
every chart's round, against a baseline measured on the same database in the same run:
one plain ``UPDATE`` that sets the same column on every row.

    python bench/round_write.py --sizes 100000
    python bench/round_write.py --sizes 100000 --postgres postgres://postgres@127.0.0.1:5432/postgres
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

CHILD = """
import django, os, time
django.setup()
from django.db import connection, transaction
from fairsched.engine.store import db
from fairsched.engine.state import LiveState
from charts.models import Chart
from control.models import OrgRoundState, RoundState

state = LiveState(db.read_world())
queue = state.queue
changes = queue.take_round_changes()
rounds = queue.export_rounds()
table = connection.ops.quote_name(Chart._meta.db_table)
n = len(changes)

def timed(fn):
    t0 = time.perf_counter(); fn(); return time.perf_counter() - t0

def baseline():
    with transaction.atomic(), connection.cursor() as c:
        c.execute(f"UPDATE {table} SET fair_round = id % 7 WHERE state = 'queued'")

def ours():
    db.save_rounds(rounds, changes)

def reset():
    with transaction.atomic(), connection.cursor() as c:
        c.execute(f"UPDATE {table} SET fair_round = NULL WHERE fair_round IS NOT NULL")
    OrgRoundState.objects.all().delete(); RoundState.objects.all().delete()
    with connection.cursor() as c:  # Django's autocommit: outside any transaction
        c.execute(f"VACUUM {table}" if connection.vendor == "postgresql" else "VACUUM")

print("RESULT", n, flush=True)
for name, fn in (("save_rounds", ours), ("baseline", baseline))[:int(os.environ.get("ROUND_WRITE_STEPS", "2"))]:
    reset()
    print(f"{name}={timed(fn):.3f}", flush=True)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000")
    ap.add_argument("--postgres", help="also on this PostgreSQL server (a database is created and dropped)")
    ap.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    args = ap.parse_args()
    kinds = ([] if args.no_sqlite else ["sqlite"]) + ([args.postgres] if args.postgres else [])
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            for size in [int(s) for s in args.sizes.split(",")]:
                env = {**os.environ, "DATABASE_URL": database_url(kind, Path(tmp), size),
                       "DJANGO_SETTINGS_MODULE": "config.settings"}
                fig = seed(env, size)
                out = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=ROOT, capture_output=True, text=True)
                if out.returncode:
                    raise SystemExit(f"failed:\n{out.stderr[-3000:]}")
                n, *pairs = out.stdout.split("RESULT", 1)[1].split()  # save_rounds first: the seeded table
                times = {}
                for p in pairs:
                    k, v = p.split("=")
                    times.setdefault(k, []).append(float(v))
                base, ours = min(times["baseline"]), min(times["save_rounds"])
                label = "sqlite" if kind == "sqlite" else "postgresql"
                print(f"{label:10} {size:>9,} queued (seeded in {fig['seed_s']:.0f} s): {n} rounds; "
                      f"plain UPDATE {base:.2f} s, save_rounds {ours:.2f} s ({ours / base:.1f}x)", flush=True)


if __name__ == "__main__":
    main()
