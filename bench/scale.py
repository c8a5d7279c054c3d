#!/usr/bin/env python
"""Figures for the live system at scale: a large static backlog, and what it costs.

For each backlog size (a small baseline first, then the sizes asked for), in one run:

1. seeds the backlog straight into a fresh database (50 orgs, Zipf-like sizes, three
   workflows); every backlog workflow costs 2 and the budget is 11, so five backlog
   charts run (for an hour) and one unit stays free: the head of the order needs 2,
   so nothing else starts and the backlog is static;
2. starts ``runworker`` and ``runscheduler`` (subprocesses, real Temporal dev server
   and Redis) and times start-up: the "loaded backlog" log line and the first start
   on Temporal, from the scheduler's spawn;
3. idle cost: the scheduler's CPU (share of one core, with its ETA passes' forked
   children) and RSS over a quiet window (``--window`` seconds, after ``--settle`` seconds
   for the start-up passes);
4. dispatch latency: priority probe charts of a cost-1 workflow, created one by one,
   alternately through ``chart_submit`` and a producer's plain ``Chart.objects.create``
   (``dispatch_service_ms``, ``dispatch_orm_ms``: each way's p50 and p95); each goes to the
   head and fits the free unit at once. Created -> started on Temporal, p50 and p95. ``peak_mb``: the scheduler's RSS plus its
   children's own memory (USS), at its highest from the idle window to the last probe
   (``peak_at``: its two parts, and when it was, from the window's start).
   ``probe_run_max_ms``: the longest probe's run on Temporal, start to close;
   ``finish_seen_max_ms``: the longest from a probe's close on Temporal to the
   scheduler's ``finish chart`` line (a probe waits for the last one's finish when the
   budget has one unit free); each probe's in ``probes-<size>.json``, with where its
   latency went (p50 and p95 as ``probe_*_ms``): the tick's steps before its dispatch,
   the dispatch's plan and read, its start on Temporal, and the rest (the new chart's
   note on its way to the scheduler, the wait for the loop);
5. web, against the running scheduler's snapshot:
   ``/orgs/<largest>/status.json``, the org page, ``/dashboard/order.json`` at
   several offsets and the admin chart list, through Django's test client in this
   process (p50 and p95 of a few requests each).
6. a restart (the usual case: the round state is saved): the scheduler is stopped and
   started again with a priority probe created at once; from the new scheduler's spawn
   to that probe's start on Temporal ("restart to first dispatch");

Ratios are against the small-backlog figures of the same run (these machines are
noisy). Usage::

    python bench/scale.py --sizes 100000            # SQLite
    python bench/scale.py --sizes 100000,1000000 --postgres postgres://postgres@127.0.0.1:5432/postgres
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._stack import drop_postgres, fresh_postgres  # noqa: E402

ORGS = 50
BUDGET = 11
PROBES = 20


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def database_url(kind: str, tmp: Path, size: int) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp / f'scale-{size}.sqlite3'}"
    return fresh_postgres(kind, f"fairsched_scale_{os.getpid()}_{size}")


def drop_database(kind: str, url: str) -> None:
    """The size's PostgreSQL database, dropped once measured (at 1M, 0.8 GB each run)."""
    if kind != "sqlite":
        drop_postgres(kind, url)


def seed(env: dict, size: int) -> dict:
    """Migrate and bulk-insert the backlog in a child process (a fresh Django per database)."""
    code = f"""
import django, random, time
django.setup()
from datetime import timedelta
from django.core.management import call_command
from django.utils import timezone
call_command("migrate", interactive=False, verbosity=0)
from charts.models import Chart
from orgs.models import Org, Workflow, WorkflowCost
from control.models import SchedulerSettings
rng = random.Random(7)
orgs = [Org.objects.create(name=f"Org {{i:02d}}", weight=1 + (i % 3 == 0)) for i in range({ORGS})]
wfs = [Workflow.objects.create(name=n, temporal_type="DemoChart") for n in ("review", "code", "audit")]
probe = Workflow.objects.create(name="probe", temporal_type="DemoChart")
WorkflowCost.objects.bulk_create([WorkflowCost(org=o, workflow=w, cost=2) for o in orgs for w in wfs])
s = SchedulerSettings.get(); s.budget = {BUDGET}; s.eta_interval_s = 3.0; s.reconcile_interval_s = 5.0; s.save()
weights = [1 / (i + 1) for i in range({ORGS})]
t0 = timezone.now() - timedelta(days=1)
rows, start = [], time.monotonic()
for i in range({size}):
    rows.append(Chart(org=rng.choices(orgs, weights)[0], workflow=wfs[i % 3], payload={{"seconds": 3600}},
                      external_id=f"bl-{{i}}", created_at=t0 + timedelta(milliseconds=i)))
    if len(rows) == 5000:
        Chart.objects.bulk_create(rows); rows = []
Chart.objects.bulk_create(rows)
largest = Chart.objects.values("org__slug").annotate(n=django.db.models.Count("id")).order_by("-n")[0]
print("SEEDED", time.monotonic() - start, largest["org__slug"], largest["n"], probe.pk, orgs[0].pk)
"""
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"seeding failed:\n{out.stderr[-3000:]}")
    took, slug, n, probe, org = out.stdout.split("SEEDED", 1)[1].split()
    return {"seed_s": float(took), "largest_slug": slug, "largest_n": int(n), "probe_wf": int(probe),
            "probe_org": int(org)}


class Stack:
    """runworker + runscheduler for one database, with their logs."""

    def __init__(self, env: dict, tmp: Path, tag: str) -> None:
        self.env, self.tmp, self.tag = env, tmp, tag
        self.procs: dict[str, subprocess.Popen] = {}

    def spawn(self, cmd: str) -> float:
        out = open(self.tmp / f"{cmd}-{self.tag}.log", "ab")
        self.procs[cmd] = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), cmd], env=self.env, cwd=ROOT,
                                           stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return time.time()

    def log(self, cmd: str) -> str:
        return (self.tmp / f"{cmd}-{self.tag}.log").read_text(errors="replace")

    def stop(self) -> None:
        for p in self.procs.values():
            p.terminate()
        for p in self.procs.values():
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


async def first_start(temporal_url: str, since: float, timeout: float) -> float | None:
    from temporalio.client import Client

    client = await Client.connect(temporal_url)
    deadline = time.time() + timeout
    while time.time() < deadline:
        starts = [wf.start_time.timestamp() async for wf in client.list_workflows('WorkflowId STARTS_WITH "chart-"')
                  if wf.start_time.timestamp() >= since]
        if starts:
            return min(starts)
        await asyncio.sleep(0.5)
    return None


async def start_times(temporal_url: str, ids: list[int], timeout: float = 30.0,
                      closes: dict[int, float] | None = None) -> dict[int, float]:
    """Each chart's workflow start on Temporal; ``closes``, if given, gets each one's close
    (Temporal's ``close_time``) once all have started."""
    from temporalio.client import Client

    client = await Client.connect(temporal_url)
    out: dict[int, float] = {}
    deadline = time.time() + timeout
    wanted = set(ids)
    while time.time() < deadline:
        # ids are chart-<deployment>-<pk> (docs/architecture.md, "Workflow ids name their
        # deployment"); the backlog is static, so Temporal holds only a few dozen of them
        async for wf in client.list_workflows('WorkflowId STARTS_WITH "chart-"'):
            pk = int(wf.id.rsplit("-", 1)[1])
            if pk in wanted:
                out[pk] = wf.start_time.timestamp()
                if closes is not None and wf.close_time is not None:
                    closes[pk] = wf.close_time.timestamp()
        if len(out) == len(ids) and (closes is None or len(closes) == len(ids)):
            break
        await asyncio.sleep(0.3)
    return out


def dispatch_lines(log: str) -> dict[int, tuple[float, float, float]]:
    """Each chart's dispatch, from its ``dispatch chart #N`` line: (the tick's steps before
    the dispatch, its plan and read, its start on Temporal), in milliseconds."""
    return {int(m.group(1)): (float(m.group(2)), float(m.group(3)), float(m.group(4))) for m in re.finditer(
        r"dispatch chart #(\d+) .*\(the tick before it (\d+) ms, plan and read (\d+) ms, start on Temporal (\d+) ms\)",
        log)}


def finish_lines(log: str) -> dict[int, float]:
    """When the scheduler recorded each chart's finish: its ``finish chart #N`` log line's time."""
    out = {}
    for m in re.finditer(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+) \S+ \S+ finish chart #(\d+) ", log, re.M):
        at = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").astimezone()
        out[int(m.group(2))] = at.timestamp()
    return out


def busy_s(proc) -> float:
    """CPU seconds of the scheduler and of its ETA passes' children (once reaped)."""
    t = proc.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


class PeakMemory:
    """The peak, sampled twice a second, of the scheduler's RSS plus its children's own
    memory (USS: the pages a forked ETA pass copied or allocated, not those it shares)."""

    def __init__(self, proc) -> None:
        import threading

        self.proc, self.peak, self._done = proc, 0.0, threading.Event()
        self.at = ""  # the peak's parts: the parent's RSS, the children's USS, and when
        self._began = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psutil

        while not self._done.wait(0.5):
            try:
                parent = total = self.proc.memory_info().rss
                for child in self.proc.children():
                    try:
                        total += child.memory_full_info().uss
                    except psutil.Error:
                        pass
            except psutil.Error:
                return
            if total / 2**20 > self.peak:
                self.peak = total / 2**20
                self.at = (f"parent {parent / 2**20:.0f} MB + children {(total - parent) / 2**20:.0f} MB, "
                           f"{time.monotonic() - self._began:.0f} s in")

    def stop(self) -> float:
        self._done.set()
        self._thread.join()
        return self.peak


def create_probe(env: dict, fig: dict, name: str) -> int:
    """One priority probe chart (cost 1) submitted as a producer does (``chart_submit``: it
    notifies the scheduler on commit); its pk."""
    code = f"""
import django
django.setup()
from charts.services import chart_submit
c = chart_submit(org={fig['probe_org']}, workflow={fig['probe_wf']}, payload={{"seconds": 0.2}},
                 priority=True, external_id="{name}")
print("PROBE", c.pk)
"""
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"probe failed:\n{out.stderr[-3000:]}")
    return int(out.stdout.split("PROBE", 1)[1])


def measure(kind: str, size: int, tmp: Path, redis_url: str, temporal_url: str, settle_s: float = 10.0,
            window_s: float = 20.0, probes: int = PROBES) -> dict:
    import psutil

    url = database_url(kind, tmp, size)
    queue = f"scale-{size}"
    env = {**os.environ, "DATABASE_URL": url, "REDIS_URL": redis_url, "TEMPORAL_ADDRESS": temporal_url,
           "FAIRSCHED_TASK_QUEUE": queue, "FAIRSCHED_CHANNEL_LAYER": "memory",
           "DJANGO_SETTINGS_MODULE": "config.settings", "PYTHONUNBUFFERED": "1", "DJANGO_DEBUG": "0",
           "DJANGO_SECRET_KEY": "bench-only-" + "x" * 50, "DJANGO_ALLOWED_HOSTS": "testserver,127.0.0.1"}
    fig: dict = {"size": size}
    fig.update(seed(env, size))
    import redis as redis_lib

    redis_lib.Redis.from_url(redis_url).flushall()
    stack = Stack(env, tmp, str(size))
    try:
        stack.spawn("runworker")
        t_spawn = stack.spawn("runscheduler")
        got = asyncio.run(first_start(temporal_url, t_spawn - 1, timeout=600))
        fig["first_dispatch_s"] = (got - t_spawn) if got else None
        for _ in range(600):
            m = re.search(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+).*loaded backlog", stack.log("runscheduler"))
            if m:
                break
            time.sleep(0.5)
        time.sleep(settle_s)  # let the first passes settle
        sched = psutil.Process(stack.procs["runscheduler"].pid)
        peak = PeakMemory(sched)
        cpu0, t0 = busy_s(sched), time.monotonic()
        time.sleep(window_s)
        fig["idle_cpu_pct"] = 100 * (busy_s(sched) - cpu0) / (time.monotonic() - t0)
        fig["rss_mb"] = sched.memory_info().rss / 2**20

        # dispatch latency: priority probes of a cost-1 workflow, one by one
        probe_code = f"""
import django, time, json
django.setup()
from charts.models import Chart
from charts.services import chart_submit
out = {{}}
for i in range({probes}):
    if i % 2:  # a producer's plain ORM create: its save notifies (charts/signals.py)
        c = Chart.objects.create(org_id={fig['probe_org']}, workflow_id={fig['probe_wf']},
                                 payload={{"seconds": 0.2}}, priority=True, external_id=f"probe-{{i}}")
    else:
        c = chart_submit(org={fig['probe_org']}, workflow={fig['probe_wf']}, payload={{"seconds": 0.2}},
                         priority=True, external_id=f"probe-{{i}}")
    out[c.pk] = [c.created_at.timestamp(), "orm" if i % 2 else "service"]
    time.sleep(1.0)
print("PROBES", json.dumps(out))
"""
        out = subprocess.run([sys.executable, "-c", probe_code], env=env, cwd=ROOT, capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(f"probes failed:\n{out.stderr[-3000:]}")
        import json

        made = {int(k): v for k, v in json.loads(out.stdout.split("PROBES", 1)[1]).items()}
        created = {c: at for c, (at, _) in made.items()}
        closed: dict[int, float] = {}
        started = asyncio.run(start_times(temporal_url, list(created), closes=closed))
        lat = [started[c] - created[c] for c in created if c in started]
        log_text = stack.log("runscheduler")
        seen, steps = finish_lines(log_text), dispatch_lines(log_text)

        def ms(a, b):
            return round((b - a) * 1000, 1) if a is not None and b is not None else None

        # each probe's chart id, creation and latency; its run on Temporal (start to close)
        # and how long after the close the scheduler recorded the finish (a probe's finish
        # frees the budget the next probe waits for)
        (tmp / f"probes-{size}.json").write_text(json.dumps(
            {c: {"created": created[c], "via": made[c][1], "ms": ms(created[c], started[c]),
                 **dict(zip(("tick_before_ms", "plan_ms", "start_ms"), steps.get(c, (None,) * 3))),
                 "run_ms": ms(started[c], closed.get(c)), "seen_ms": ms(closed.get(c), seen.get(c))}
             for c in created if c in started}, indent=1))
        # where a probe's latency went: the tick's steps before its dispatch, the dispatch's
        # plan and read, its start on Temporal, and the rest (the note's way to the scheduler
        # and the wait for the loop to wake)
        parts = {"tick_before": [], "plan": [], "start": [], "rest": []}
        for c in created:
            if c in started and c in steps:
                tick, plan_, start_ = steps[c]
                for k, v in zip(parts, (tick, plan_, start_, (started[c] - created[c]) * 1000 - tick - plan_ - start_)):
                    parts[k].append(v)
        for k, xs in parts.items():
            fig[f"probe_{k}_ms"] = (pct(xs, 50), pct(xs, 95)) if xs else None
        seen_lag = [seen[c] - closed[c] for c in created if c in seen and c in closed]
        fig["finish_seen_max_ms"] = max(seen_lag) * 1000 if seen_lag else None
        runs = [closed[c] - started[c] for c in created if c in closed and c in started]
        fig["probe_run_max_ms"] = max(runs) * 1000 if runs else None
        fig["probes_started"] = f"{len(lat)}/{len(created)}"
        fig["dispatch_p50_ms"] = pct(lat, 50) * 1000 if lat else None
        fig["dispatch_p95_ms"] = pct(lat, 95) * 1000 if lat else None
        fig["dispatch_max_ms"] = max(lat) * 1000 if lat else None
        for via in ("service", "orm"):  # chart_submit's probes and the plain ORM creates'
            xs = [started[c] - created[c] for c in created if c in started and made[c][1] == via]
            fig[f"dispatch_{via}_ms"] = (pct(xs, 50) * 1000, pct(xs, 95) * 1000) if xs else None
        fig["peak_mb"] = peak.stop()
        fig["peak_at"] = peak.at

        # web, against this scheduler's published snapshot (after the restart below, the
        # pages would read the database fallback until the new scheduler publishes)
        fig.update(web(env, fig["largest_slug"]))

        # a restart: the round state is saved; a probe waits at the head from the spawn on
        sched_proc = stack.procs["runscheduler"]
        sched_proc.terminate()
        sched_proc.wait(30)
        t_respawn = stack.spawn("runscheduler")
        probe = create_probe(env, fig, "probe-restart")
        started = asyncio.run(start_times(temporal_url, [probe], timeout=600))
        fig["restart_first_dispatch_s"] = (started[probe] - t_respawn) if probe in started else None
    finally:
        stack.stop()
        drop_database(kind, url)
    return fig


def web(env: dict, slug: str) -> dict:
    """Page timings through Django's test client in a child process (against this size's database)."""
    code = f"""
import django, time, json
django.setup()
from django.contrib.auth import get_user_model
from django.test import Client
u = get_user_model().objects.create_superuser("scale", "s@example.com", "x")
c = Client(); c.force_login(u)
def t(url, n=20):
    assert c.get(url, secure=True).status_code == 200, url  # warm-up: this client's first request pays
    xs = []                                                 # for imports and caches, not the page
    for _ in range(n):
        s = time.perf_counter(); r = c.get(url, secure=True); xs.append(time.perf_counter() - s)
        assert r.status_code == 200, (url, r.status_code)
    xs.sort(); return xs[len(xs) // 2] * 1000, xs[int(0.95 * (len(xs) - 1))] * 1000
out = {{}}
out["status_json"] = t("/orgs/{slug}/status.json")
out["org_page"] = t("/orgs/{slug}/")
out["order_offset_0"] = t("/dashboard/order.json?offset=0")
out["order_offset_deep"] = t("/dashboard/order.json?offset=90000")
out["admin_chart_list"] = t("/admin/charts/chart/", n=5)
print("WEB", json.dumps(out))
"""
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        return {"web_error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    import json

    return {f"{k}_ms": v for k, v in json.loads(out.stdout.split("WEB", 1)[1]).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000", help="comma-separated backlog sizes (default 100000)")
    parser.add_argument("--baseline", type=int, default=1000, help="the small backlog the ratios are against")
    parser.add_argument("--postgres", default="", help="a PostgreSQL URL (a database is created per size)")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after the load before the idle window")
    parser.add_argument("--window", type=float, default=20.0, help="seconds of the idle CPU window")
    parser.add_argument("--probes", type=int, default=PROBES,
                        help="priority probe charts, one a second (each one's latency: probes-<size>.json in the logs)")
    args = parser.parse_args()
    sizes = [args.baseline] + [int(s) for s in args.sizes.split(",") if s]
    kind = args.postgres or "sqlite"

    tmp = Path(tempfile.mkdtemp(prefix="fairsched-scale-"))
    from fairsched.runtime import embedded

    redis = embedded.start_redis(log=tmp / "redis.log")
    results = []
    try:
        for size in sizes:
            # A Temporal server per size: chart ids restart at 1 in each size's database, and a
            # closed workflow's id is never started again (REJECT_DUPLICATE), so one shared
            # server would refuse the next size's first charts as already run.
            temporal = embedded.start_temporal(log=tmp / f"temporal-{size}.log")
            try:
                results.append(measure(kind, size, tmp, redis.url, temporal.url, args.settle, args.window, args.probes))
            finally:
                temporal.stop()
    finally:
        redis.stop()
    base = results[0]
    print(f"database: {'PostgreSQL' if args.postgres else 'SQLite'}; budget {BUDGET}, {ORGS} orgs; logs in {tmp}")
    keys = [k for k in results[-1] if k not in ("size", "largest_slug", "probe_wf", "probe_org")]
    for r in results:
        print(f"\nbacklog {r['size']:,} (largest org {r['largest_n']:,} charts)")
        for k in keys:
            v, b = r.get(k), base.get(k)
            if isinstance(v, tuple) or isinstance(v, list):
                ratio = f"  ({v[1] / b[1]:.1f}x baseline p95)" if b and r is not base and b[1] else ""
                print(f"  {k:<24} p50 {v[0]:8.1f}  p95 {v[1]:8.1f}{ratio}")
            elif isinstance(v, float):
                ratio = f"  ({v / b:.1f}x baseline)" if isinstance(b, float) and b and r is not base else ""
                print(f"  {k:<24} {v:10.1f}{ratio}")
            else:
                print(f"  {k:<24} {v}")


if __name__ == "__main__":
    main()
