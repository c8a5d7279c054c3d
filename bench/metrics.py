"""Benchmark of the Prometheus scrape, ``/metrics``, at 100k queued charts.

Run from the repo root: ``.venv/bin/python bench/metrics.py [--charts 100000] [--orgs 60] [--scrapes 200]``.

A temporary SQLite database gets ``--charts`` queued charts over ``--orgs`` orgs (half of
them in one big org), a few thousand finished ones (through the services, so the
finished counter counts them) and running ones; an embedded Redis gets the snapshot the
scheduler would publish (``dashboard.simulate.store_from_db``: the scheduler's reader and
ETA pass) and a histogram observation per org and per chart started. Each figure is over
``--scrapes`` requests through Django's test client (the whole view: auth, the reads, the
rendering), with the snapshot confirmed live as the scheduler does every second:

- **live**: what a scrape costs while the scheduler runs (the snapshot's per-org counts);
- **stale**: the same scrape while the scheduler is down (the database's GROUP BY over the
  queued and running charts, the fallback);
- **naive**: what counting the rows on each scrape would cost (``COUNT(*)`` per org and state
  of the charts, finished ones included), the design this avoids;
- **baseline**: ``/healthz`` in the same run (the cost of any request through the stack).

Prints p50/p95 and the ratio of each p95 to the baseline's. No figure is asserted.
"""
from __future__ import annotations

import argparse
import gc
import os
import signal
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def timed(fn, n: int, before_each=None) -> list[float]:
    times = []
    for _ in range(n):
        if before_each is not None:
            before_each()
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--charts", type=int, default=100_000, help="queued charts")
    parser.add_argument("--orgs", type=int, default=60, help="orgs (above FAIRSCHED_METRICS_MAX_ORGS=50: some are 'other')")
    parser.add_argument("--finished", type=int, default=5_000, help="finished charts")
    parser.add_argument("--scrapes", type=int, default=200, help="requests per figure")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fairsched-bench-metrics-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still stops its Redis
    from fairsched.runtime import embedded

    redis_service = embedded.start_redis(log=tmp / "redis.log")
    try:
        os.environ.update(DATABASE_URL=f"sqlite:///{tmp / 'bench.sqlite3'}", FAIRSCHED_CHANNEL_LAYER="memory",
                          DJANGO_SETTINGS_MODULE="config.settings", REDIS_URL=redis_service.url)
        run(args)
    finally:
        redis_service.stop()


def run(args) -> None:
    import django

    django.setup()
    import redis
    from django.core.management import call_command
    from django.db.models import Count
    from django.test import Client
    from django.utils import timezone

    from charts import lifecycle, services
    from charts.models import Chart
    from common import metrics
    from common import snapshot as snap
    from dashboard import selectors
    from dashboard.simulate import store_from_db
    from orgs.models import Org, Workflow

    call_command("migrate", interactive=False, verbosity=0)
    orgs = [Org.objects.create(name=f"Org {i:03d}") for i in range(args.orgs)]
    wf = Workflow.objects.create(name="code", temporal_type="DemoChart")
    start = timezone.now() - timedelta(days=1)
    t0 = time.perf_counter()
    batch = []
    total = args.charts + args.finished + 20
    for i in range(total):
        org = orgs[0] if i % 2 == 0 else orgs[i % args.orgs]
        batch.append(Chart(org=org, workflow=wf, external_id=f"mrn-{i}", created_at=start + timedelta(seconds=i)))
        if len(batch) == 5000:
            Chart.objects.bulk_create(batch)
            batch = []
    Chart.objects.bulk_create(batch)
    ids = list(Chart.objects.order_by("id").values_list("id", flat=True))
    now = timezone.now()
    for cid in ids[:20]:
        lifecycle.chart_mark_running(chart_id=cid, cost=1, at=now)
    for n, cid in enumerate(ids[20:20 + args.finished]):
        if n % 3 == 0:
            services.chart_cancel(chart=cid)
        else:
            lifecycle.chart_mark_running(chart_id=cid, cost=1, at=now)
            lifecycle.chart_record_outcome(chart_id=cid, state="succeeded" if n % 10 else "failed")
    queued = Chart.objects.filter(state="queued").count()
    print(f"{queued:,} queued, {Chart.objects.filter(state='running').count()} running and "
          f"{args.finished:,} finished charts over {args.orgs} orgs written in {time.perf_counter() - t0:.1f} s")
    metrics.budget_freed(time.time() - 5)
    metrics.charts_started([(o.pk, time.time() - 600) for o in orgs for _ in range(3)], at=time.time())
    for _ in range(50):
        metrics.eta_pass_done(1.5)
        metrics.api_request_done("charts.create", 201)
    metrics.flush()

    t0 = time.perf_counter()
    store_from_db()
    print(f"snapshot (the scheduler's reader and ETA pass) built and stored in {time.perf_counter() - t0:.1f} s")
    s = snap.read_snapshot()
    r = redis.Redis.from_url(os.environ["REDIS_URL"])

    def confirm() -> None:  # as the live scheduler does every second
        r.set(snap.CURRENT_KEY, snap.current_value(s["seq"], time.time()), ex=snap.TTL_S)

    def stale() -> None:
        r.set(snap.CURRENT_KEY, snap.current_value(s["seq"], time.time() - 3600), ex=snap.TTL_S)

    client = Client(HTTP_HOST="localhost", REMOTE_ADDR="127.0.0.1")

    def scrape() -> bytes:
        resp = client.get("/metrics")
        assert resp.status_code == 200, resp.status_code
        return resp.content

    def health() -> None:
        assert client.get("/healthz").status_code == 200

    def naive() -> None:
        list(Chart.objects.values_list("org_id", "state").annotate(n=Count("id")).order_by())

    confirm()
    body = scrape()
    assert b'fairsched_scheduler_up 1.0' in body, "the snapshot is not live"
    lines = body.count(b"\n")
    print(f"/metrics: {len(body):,} bytes, {lines:,} lines")
    figures = {
        "baseline /healthz": timed(health, args.scrapes),
        "live (the snapshot)": timed(scrape, args.scrapes, confirm),
    }
    stale()
    selectors.clear_caches()
    assert b'fairsched_scheduler_up 0.0' in scrape()
    figures["stale (the database's GROUP BY)"] = timed(scrape, args.scrapes, stale)
    figures["naive COUNT(*) per org and state"] = timed(naive, args.scrapes)
    base = pct(figures["baseline /healthz"], 95)
    print(f"/metrics at {queued:,} queued (SQLite, Django's test client, {args.scrapes} requests each):")
    for label, times in figures.items():
        p95 = pct(times, 95)
        print(f"  {label:36s} p50 {statistics.median(times) * 1000:6.1f} ms  p95 {p95 * 1000:6.1f} ms"
              f"  ({p95 / base:.1f}x the baseline's p95)")


if __name__ == "__main__":
    main()
