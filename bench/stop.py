#!/usr/bin/env python
"""Figures for the warm stop: how long ``runscheduler`` takes to exit after SIGTERM, by phase.

Starts its own Redis and Temporal dev server (``fairsched.runtime.embedded``), a fresh SQLite
database in a temporary directory (or ``DATABASE_URL``), seeds a backlog of queued
charts with ``bulk_create``, runs one ``runworker``, then starts ``runscheduler`` again
and again and sends each a SIGTERM at a random moment: during the backlog's load, or
some seconds after it (reconcile, dispatch, ETA pass, resync). Each stop's phase is read
from the scheduler's own log line (``scheduler stopped 0.31 s after the stop request
(during: eta)``); the exit time is measured from outside. Also checked each time: the
lease key is gone from Redis.

Prints min / median / max per phase, and the slowest as a fraction of the bound
(``FAIRSCHED_STOP_TIMEOUT_S``, 10 s).

Usage: ``python bench/stop.py [--charts 100000] [--trials 14] [--budget 20] [--seed N]``
"""
from __future__ import annotations

import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STOPPED = re.compile(r"scheduler stopped (?:[\d.]+ s after the stop request \(during: ([^)]*)\)|"
                     r"\(forced after [\d.]+ s: [^;]*; stop requested during: ([^)]*)\))")


def seed(n: int) -> None:
    from django.utils import timezone

    from charts.models import Chart
    from control.models import SchedulerSettings
    from orgs.models import Org, Workflow

    orgs = [Org.objects.create(name=f"Org {i}", weight=1 + i % 3) for i in range(10)]
    wf = Workflow.objects.create(name="code", temporal_type="DemoChart")
    start = timezone.now() - timedelta(hours=5)
    Chart.objects.bulk_create([Chart(org=orgs[i % 10], workflow=wf, created_at=start + timedelta(milliseconds=i),
                                     payload={"seconds": 1}) for i in range(n)], batch_size=5000)
    s = SchedulerSettings.get()
    s.eta_interval_s, s.reconcile_interval_s = 1, 2
    s.save()


def wait_for(path: Path, text: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise SystemExit(f"{path.name} never logged {text!r}")
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--charts", type=int, default=100_000, help="queued charts in the backlog")
    parser.add_argument("--trials", type=int, default=14, help="SIGTERMs (one scheduler each)")
    parser.add_argument("--budget", type=int, default=20)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    rnd = random.Random(args.seed)

    tmp = Path(tempfile.mkdtemp(prefix="fairsched-stop-"))
    from fairsched.runtime import embedded

    redis_service = embedded.start_redis(log=tmp / "redis.log")
    temporal = embedded.start_temporal(log=tmp / "temporal.log")
    env = {**os.environ, "DATABASE_URL": os.environ.get("DATABASE_URL") or f"sqlite:///{tmp / 'bench.sqlite3'}",
           "REDIS_URL": redis_service.url, "TEMPORAL_ADDRESS": temporal.url, "FAIRSCHED_TASK_QUEUE": "bench",
           "FAIRSCHED_CHANNEL_LAYER": "redis", "DJANGO_SETTINGS_MODULE": "config.settings",
           "PYTHONUNBUFFERED": "1"}
    os.environ.update(env)
    worker = None
    try:
        import django

        django.setup()
        import redis
        from django.core.management import call_command

        from fairsched.engine.ports.lease import LEASE_KEY
        from control.models import SchedulerSettings

        call_command("migrate", interactive=False, verbosity=0)
        seed(args.charts)
        s = SchedulerSettings.get()
        s.budget = args.budget
        s.save()
        bound = float(os.environ.get("FAIRSCHED_STOP_TIMEOUT_S") or 10)
        worker = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "runworker"], env=env, cwd=ROOT,
                                  stdout=open(tmp / "worker.log", "ab"), stderr=subprocess.STDOUT)
        lease = redis.Redis.from_url(redis_service.url)
        by_phase: dict[str, list[float]] = {}
        for i in range(args.trials):
            log = tmp / f"scheduler{i}.log"
            proc = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "runscheduler"], env=env, cwd=ROOT,
                                    stdout=open(log, "wb"), stderr=subprocess.STDOUT)
            if i % 2 == 0:
                wait_for(log, "acquired")
                time.sleep(rnd.uniform(0.0, 2.0))  # mostly mid-load
            else:
                wait_for(log, "loaded backlog")
                time.sleep(rnd.uniform(0.0, 12.0))
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise SystemExit(f"scheduler{i} did not exit within 60 s of SIGTERM (log: {log})") from None
            took = time.monotonic() - sent
            found = STOPPED.search(log.read_text(errors="replace"))
            phase = (found.group(1) or f"{found.group(2)} (forced)") if found else "NOT LOGGED"
            held = lease.get(LEASE_KEY)
            by_phase.setdefault(phase, []).append(took)
            print(f"  trial {i:2d}: {took:6.2f} s  during {phase}{'  LEASE STILL HELD' if held else ''}", flush=True)
            lease.delete(LEASE_KEY)
        print(f"\nstop times after SIGTERM, {args.charts} queued charts, bound {bound:g} s:")
        for phase, times in sorted(by_phase.items()):
            print(f"  {phase:<28} n={len(times):2d}  min {min(times):5.2f}  median {statistics.median(times):5.2f}"
                  f"  max {max(times):5.2f} s")
        slowest = max(t for times in by_phase.values() for t in times)
        print(f"slowest / bound: {slowest / bound:.2f}")
        print(f"(logs and database in {tmp})")
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(20)
        redis_service.stop()
        temporal.stop()


if __name__ == "__main__":
    main()
