#!/usr/bin/env python
"""Where the test suite's time goes: CPU by kind of process over one pass of ``make test``.

The suite waits on real services (Temporal's dev server, Redis, daphne, Chromium, the
scheduler and worker processes the integration tests start), so its wall time on a small
machine is bounded by the CPU all of them spend, not by the tests' own Python. This runs one
pass (``--pass sqlite`` or ``postgres``, as ``make test`` runs it, ``-n`` workers) and samples
every process's CPU from ``/proc`` twice a second, summed by kind (the pytest workers,
Chromium, runscheduler, runworker, daphne, Temporal, Redis, PostgreSQL, ...); then prints
each kind's CPU seconds, the wall time, and the floor that CPU sets on the wall time
(CPU / cores). A process that lives less than half a second is partly missed (the sampler
reads it at most once): the figures are a lower bound.

Usage: ``python bench/suite_cpu.py [--pass sqlite] [-n 4] [-- extra pytest args]``
(run it on a quiet machine: other work's processes are counted under "other").
"""
from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HZ = os.sysconf("SC_CLK_TCK")
KINDS = ("chrom", "temporal", "redis", "postgres", "daphne", "gunicorn", "rqworker", "runscheduler", "runworker",
         "prometheus", "schemathesis", "node")


def kind(pid: str) -> str:
    try:
        cmd = (Path("/proc") / pid / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if "exec(eval(sys.stdin.readline()))" in cmd:
        return "pytest workers (xdist)"
    if "pytest" in cmd:
        return "pytest (controller)"
    if "tests/zygote.py" in cmd:  # what the integration tests' zygote forked (and the zygote itself)
        return "runscheduler, runworker, daphne (forked by tests/zygote.py)"
    for k in KINDS:
        if k in cmd:
            return k
    if "manage.py" in cmd or "django.setup()" in cmd:
        return "other Django processes"
    return "other"


def scan() -> dict[tuple[str, str], int]:
    """Each process's CPU ticks so far, by (pid, start time): a reused pid is a new process."""
    out = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                fields = (Path("/proc") / pid / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[(pid, fields[19])] = int(fields[11]) + int(fields[12])
    return out


def sample(stop: threading.Event, seen: dict[tuple[str, str], int], totals: collections.Counter) -> None:
    """Adds each process's CPU since it was last seen to its kind's total (``seen``: what ran
    before the pass, counted from then on, under its own kind)."""
    names: dict[tuple[str, str], str] = {}
    while not stop.is_set():
        for key, ticks in scan().items():
            if key not in names:
                names[key] = kind(key[0])
            totals[names[key]] += (ticks - seen.get(key, 0)) / HZ
            seen[key] = ticks
        stop.wait(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pass", dest="which", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("-n", type=int, default=None, help="xdist workers (make test's: 4 SQLite, 3 PostgreSQL)")
    parser.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432/fairsched_suite_cpu",
                        help="the PostgreSQL pass's database URL")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    workers = args.n or (4 if args.which == "sqlite" else 3)
    env = dict(os.environ, FAIRSCHED_TEST_PASS=args.which,
               DATABASE_URL="" if args.which == "sqlite" else args.postgres)
    totals: collections.Counter = collections.Counter()
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(stop, scan(), totals), daemon=True)
    t0 = time.monotonic()
    sampler.start()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", str(workers), "--dist", "worksteal",
                           *args.pytest_args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    wall = time.monotonic() - t0
    stop.set()
    sampler.join()
    log = ROOT / "var" / f"suite_cpu-{args.which}.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text(proc.stdout)
    print(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "(no output)")
    print(f"pytest's whole output: {log.relative_to(ROOT)}")
    total = sum(v for k, v in totals.items() if k != "gone")
    cores = os.cpu_count() or 1
    print(f"{args.which} pass, {workers} workers: wall {wall:.0f} s; CPU {total:.0f} s over {cores} cores "
          f"= a floor of {total / cores:.0f} s of wall time")
    for k, v in totals.most_common():
        if v >= 1 and k != "gone":
            print(f"  {v:7.0f} s  {100 * v / total:4.1f}%  {k}")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
