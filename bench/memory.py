#!/usr/bin/env python
"""The scheduler's memory per queued chart: a backlog loaded the way ``runscheduler`` loads it.

For each size, in a fresh child process: rows made by the database reader's own row
conversion (``fairsched.engine.store.db._row``), a :class:`LiveState` built from them (a first
start: every chart takes its round), the rows dropped, the first ETAs taken as recorded,
the collector run and the heap frozen, as the scheduler does. Prints the RSS over the
same process before the load, per chart, and what Python's small-object allocator holds
in empty pools (heap holes: memory freed by the load that the process keeps). The
smallest size is the baseline of the ratios. Usage::

    python bench/memory.py                       # 100k and 1M
    python bench/memory.py --sizes 10000,100000
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The backlog, built as ``runscheduler`` builds it: the database reader's own rows of
# ``n`` queued charts over 50 orgs of Zipf sizes, then a LiveState (a first start: every
# chart takes its round). ``{turnaround}``: each org's turnaround, an expression of ``i``.
# bench/child_memory.py builds the same.
BACKLOG = r"""
rng = random.Random(7)
orgs = [OrgRow(i, f"Org {{i}}", f"org-{{i}}", 1 + (i % 3 == 0), {turnaround}) for i in range(1, 51)]
org_of = rng.choices(range(1, 51), [1 / i for i in range(1, 51)], k=n)
t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
gc.disable()  # read as the database read gives them (db._active_rows): batches of tuples, as columns
rows = db.chart_columns([(i + 1, org_of[i], ("review", "code", "audit")[i % 3], "queued", t0 + timedelta(milliseconds=i),
                          False, None, False, None, False, f"bl-{{i}}", None, None, None, None, None, False, "", None, None)
                         for i in range(b, min(n, b + 20_000))] for b in range(0, n, 20_000))
gc.enable()
costs = {{(str(o.id), wf): 2 for o in orgs for wf in ("review", "code", "audit")}}
world = World(Config(budget=11), orgs, costs, {{}}, rows)
del rows
state = LiveState(world, observe_arrivals=False)
del world
"""

CHILD = r"""
import gc, json, os, random, sys
sys.path.insert(0, {root!r})
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
import django; django.setup()
import psutil
from datetime import datetime, timedelta, timezone
from fairsched.engine.store import db
from fairsched.engine.state import LiveState
from fairsched.engine.store.rows import Config, OrgRow, World
n = {n}
rss = lambda: psutil.Process().memory_info().rss
before = rss()
""" + BACKLOG + r"""
state.unpromised = set()  # the first ETAs recorded
gc.collect(); gc.freeze()
after = rss()
print("MEM", json.dumps({{"rss_mb": after / 2**20, "per_chart_b": (after - before) / n}}))
sys._debugmallocstats()  # to the C stderr: the parent reads it
"""


def measure(n: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), n=n, turnaround="None")], capture_output=True, text=True,
                         cwd=ROOT)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    fig = json.loads(out.stdout.split("MEM", 1)[1])
    holes = re.search(r"(\d+) unused pools \* (\d+) bytes", out.stderr)
    fig["holes_mb"] = int(holes[1]) * int(holes[2]) / 2**20 if holes else float("nan")
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = [(n, measure(n)) for n in sizes]
    base = results[0][1]["per_chart_b"]
    for n, r in results:
        print(f"{n:>9,} queued: RSS {r['rss_mb']:7.0f} MB, {r['per_chart_b']:5.0f} B per chart "
              f"({r['per_chart_b'] / base:.2f}x the {sizes[0]:,} figure), heap holes {r['holes_mb']:.0f} MB")


if __name__ == "__main__":
    main()
