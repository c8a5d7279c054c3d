#!/usr/bin/env python
"""The forked ETA pass's own memory: what the child adds to the scheduler's, by what it reads.

For each size and each way of reading, in a fresh process: a backlog built as
``bench/memory.py`` builds it (the reader's rows, a :class:`LiveState`, the collector run
and the heap frozen, as the scheduler does), then one ETA pass in a forked child as the
scheduler runs it (``eta_report``, the 90% bounds, the due states, ``build_snapshot``),
reading either a copy (``capture()``, what a pass in a thread needs) or the state itself
(``capture(copy=False)``, what the child reads: its memory is a copy already). Prints the
parent's RSS, the child's USS (the pages it copied or allocated: what it adds to the
machine's memory) at the pass's peak and after each step (the last ones sampled: the
snapshot stored, with ``--redis``, and what the child sends back pickled, its first ETAs and
due warnings),
and the pass's time; the copy's figures are the baseline of the ratios. The first pass after
a load (every chart to promise its first ETA, every due warning new), then a later one: the
first ran in a child that sent its due warnings back, the parent applied them and recorded the
first ETAs, as the scheduler does (the warnings in force are then the parent's, and none
rises). With ``--redis URL``, the child also stores the snapshot there as the scheduler does
(``common.snapshot.store``), its USS sampled while it stores (the encoded pages in flight),
and the keys deleted after. Last, a child that only
walks the order's keys, as the pass does, and keeps nothing: each object it reads has its
reference count written, so the page it lies on is copied (the floor of what any pass over
the parent's objects costs; only the backlog held in columns, not objects, lowers it).
Usage::

    python bench/child_memory.py                       # 100k and 1M
    python bench/child_memory.py --sizes 100000
    python bench/child_memory.py --sizes 1000000 --redis redis://127.0.0.1:6379/15
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory import BACKLOG  # noqa: E402  (the same backlog as bench/memory.py)

CHILD = r"""
import gc, json, multiprocessing, os, pickle, random, sys, threading, time
sys.path.insert(0, {root!r})
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
import django; django.setup()
import psutil
from datetime import datetime, timedelta, timezone
from scheduling.plan import gc_paused
from fairsched.engine.store import db
from fairsched.engine.due_states import due_pass
from fairsched.engine import forked
from fairsched.engine.eta_passes import EtaColumns  # (imported here, as the scheduler has it: not in the child)
from fairsched.engine.publish import build_snapshot
import redis
from common import snapshot as snapshot_store
from fairsched.engine.state import LiveState
from fairsched.engine.store.rows import Config, OrgRow, World
n, copy, walk_only, later, redis_url = {n}, {copy}, {walk_only}, {later}, {redis_url!r}


def uss():  # the pages this process has of its own (private), from the kernel's summary
    with open("/proc/self/smaps_rollup") as f:
        return 1024 * sum(int(line.split()[1]) for line in f if line.startswith(("Private_Clean", "Private_Dirty")))
""" + BACKLOG + r"""
if later:  # a later pass: the first one ran in a child, and the parent applied what it sent back
    r, w = os.pipe()
    if os.fork() == 0:
        with gc_paused():
            first = state.capture(copy=False)
            report = first.eta_report(time.time())
            levels = due_pass(first, report.etas, time.time(), first.forecast.p90_finisher()).levels
        os.write(w, pickle.dumps(levels)); os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as got:
        levels = pickle.loads(got.read())
    os.wait()
    state.due.set_levels(levels, state.known_ids())  # the warnings now in force
    state.unpromised = set()  # the first ETAs recorded
    del levels
gc.collect(); gc.freeze()
parent = psutil.Process().memory_info().rss
r, w = os.pipe()
from_child, to_parent = multiprocessing.Pipe(duplex=False)  # the result, as forked.run_forked sends it
pid = os.fork()
if pid == 0:
    os.close(r)
    stages = {{}}
    began, now = time.perf_counter(), time.time()
    with gc_paused():
        captured = state.capture(copy=copy)
        stages["capture"] = uss()
        if walk_only:  # the order's keys walked as the pass walks them, nothing kept
            for _ in captured.queue.walk():
                pass
            stages["walk"] = uss()
            os.write(w, json.dumps({{"uss": stages["walk"], "stages": stages, "s": time.perf_counter() - began}}).encode())
            os._exit(0)
        report = captured.eta_report(now)
        p90 = captured.forecast.p90_finisher()
        stages["eta_report"] = uss()
        due = due_pass(captured, report.etas, now, p90)
        stages["due_pass"] = uss()
        snapshot = build_snapshot(captured, report, now, p90=p90, due=due)  # alive: the pass's peak
        stages["build_snapshot"] = uss()
        took = time.perf_counter() - began
        # the pass's last steps, the USS sampled meanwhile: the snapshot stored as the
        # scheduler stores it (with --redis), then what the child sends back (the first ETAs,
        # the due warnings moved) pickled, as the scheduler's child does
        peak, done = [uss()], threading.Event()

        def sample():
            while not done.wait(0.02):
                peak[0] = max(peak[0], uss())

        sampler = threading.Thread(target=sample)
        sampler.start()
        if redis_url:
            client = redis.Redis.from_url(redis_url)
            t0 = time.perf_counter()
            seq = snapshot_store.store(*snapshot, client=client)
            stored_s = time.perf_counter() - t0
            stages["store (peak)"] = max(peak[0], uss())
            client.delete(snapshot_store.PAGES_KEY.format(seq), snapshot_store.SNAPSHOT_KEY)
        peak[0] = 0
        del snapshot  # stored: freed before the first ETAs are gathered, as the scheduler's child does
        forked.send_result(to_parent, (EtaColumns.of(report.etas, captured.unpromised), due.levels, due.rose))
        done.set()
        sampler.join()
        stages["result sent (peak)"] = max(peak[0], uss())
    out = {{"uss": max(stages.values()), "stages": stages, "s": took}}
    if redis_url:
        out["store_s"] = stored_s
    os.write(w, json.dumps(out).encode())
    os._exit(0)
os.close(w)
to_parent.close()
rss_peak, receiving = [parent], threading.Event()

def sample_parent():
    while not receiving.wait(0.02):
        rss_peak[0] = max(rss_peak[0], psutil.Process().memory_info().rss)

sampler = threading.Thread(target=sample_parent)
sampler.start()
if not walk_only:
    got = forked.receive_result(from_child, [])  # the child's result, read as the scheduler reads it
receiving.set()
sampler.join()
out = b""
while chunk := os.read(r, 65536):
    out += chunk
os.waitpid(pid, 0)
print("MEM", json.dumps({{"parent": parent, "parent_receiving": rss_peak[0], **json.loads(out)}}))
"""


def measure(n: int, copy: bool, walk_only: bool = False, later: bool = False, redis_url: str | None = None) -> dict:
    code = CHILD.format(root=str(ROOT), n=n, copy=copy, walk_only=walk_only, later=later, redis_url=redis_url,
                        turnaround="24 * 3600.0 if i % 2 else None")  # half the orgs due
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, cwd=ROOT)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.split("MEM", 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--redis", metavar="URL", help="also store each snapshot there (a database the bench may "
                        "write to: its keys are deleted after), the child's USS sampled while it stores")
    args = parser.parse_args()
    mb = 2**20
    for n in (int(s) for s in args.sizes.split(",")):
        copied, own, later = (measure(n, True, redis_url=args.redis), measure(n, False, redis_url=args.redis),
                              measure(n, False, later=True, redis_url=args.redis))
        for label, r in (("a copy (capture())", copied), ("the state itself (capture(copy=False))", own),
                         ("the state, a later pass", later)):
            print(f"{n:>9,} queued, the child reads {label:40} parent RSS {r['parent'] / mb:6.0f} MB "
                  f"({r['parent_receiving'] / mb:.0f} MB at most while it read the child's result), "
                  f"child USS {r['uss'] / mb:6.0f} MB ({r['uss'] / copied['uss']:.2f}x), "
                  f"parent + child {(r['parent'] + r['uss']) / mb:6.0f} MB, pass {r['s']:.2f} s"
                  + (f", store {r['store_s']:.2f} s" if "store_s" in r else ""))
            print(" " * 12 + "the child's USS after each step: " + ", ".join(
                f"{step} {uss / mb:.0f} MB" for step, uss in r["stages"].items()))
        walk = measure(n, False, walk_only=True)
        print(" " * 12 + f"a child that only walks the order's keys: USS {walk['uss'] / mb:.0f} MB "
              f"({walk['uss'] / own['uss']:.0%} of the pass's): the parent's pages its reference counts "
              "copied, which no output format saves")


if __name__ == "__main__":
    main()
