"""How long ``manage.py runscheduler`` takes to start, before it reads anything: from its
spawn to its ``scheduler starting`` line (the interpreter, Django's setup, the scheduler's
imports), against a bare process that only sets Django up, spawned alternately in the same
run (the limit: what any Django process of this project pays).

    .venv/bin/python bench/process_start.py [--runs 9]

A restart's first dispatch (``bench/scale.py``'s ``restart_first_dispatch_s``) is this plus
the scheduler's own start (the lease, the head of the order, the first start on Temporal).
Needs no service: the scheduler is killed at its first line, before it connects to any.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def spawn_until(argv: list[str], marker: str, env: dict) -> float:
    """Seconds from the spawn to the first output line holding ``marker``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:
            if marker in line:
                return time.perf_counter() - t0
        raise SystemExit(f"{argv[1:]} ended without {marker!r}")
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fairsched-bench-start-"))
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "PYTHONUNBUFFERED": "1",
           "DATABASE_URL": f"sqlite:///{tmp / 'start.sqlite3'}", "FAIRSCHED_CHANNEL_LAYER": "memory",
           # nothing listens there: the scheduler is killed before it connects
           "REDIS_URL": "redis://127.0.0.1:1/0", "TEMPORAL_ADDRESS": "127.0.0.1:1"}
    python = sys.executable
    bare = [python, "-c", "import django; django.setup(); print('set up', flush=True)"]
    scheduler = [python, str(ROOT / "manage.py"), "runscheduler"]
    times: dict[str, list[float]] = {"bare": [], "scheduler": []}
    for _ in range(args.runs):
        times["bare"].append(spawn_until(bare, "set up", env))
        times["scheduler"].append(spawn_until(scheduler, "scheduler starting", env))
    b, s = statistics.median(times["bare"]), statistics.median(times["scheduler"])
    print(f"{args.runs} runs each, alternating (cpus: {os.cpu_count()}, load {os.getloadavg()[0]:.1f})")
    print(f"  a process that sets Django up (the limit)   median {b * 1000:6.0f} ms  "
          f"min {min(times['bare']) * 1000:6.0f} ms")
    print(f"  runscheduler to 'scheduler starting'        median {s * 1000:6.0f} ms  "
          f"min {min(times['scheduler']) * 1000:6.0f} ms  = {s / b:.2f}x")


if __name__ == "__main__":
    main()
