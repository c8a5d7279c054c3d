"""Benchmark of the pages about one queued chart: ``/charts/<id>/`` and
``status.json?external_id=``, before and after they read the chart's own published fields.

Run from the repo root: ``.venv/bin/python bench/chart_page.py [--charts 100000] [--probes 20]``.

A temporary SQLite database gets ``--charts`` queued charts (half in one big org, the rest
over 9 others), an embedded Redis gets the snapshot the scheduler would publish
(``dashboard.simulate.store_from_db``: the scheduler's reader and ETA pass). Each figure is
the median of ``--probes`` requests through Django's test client, for a chart near the end
of the order (and of the big org's slice). "Before" is the same request with the lookup the
pages used until issue 21 put back in place in this process: the chart page's
``selectors.order_rows`` (every order page, parsed under the process-wide lock; "cold" is
the first request after each new snapshot, "warm" the next ones on the same snapshot, whose
parsed rows it kept), and ``status.json``'s read of every page of the org. Ratios are
against the dashboard's first order page (``order.json``), measured in the same run.
It also prints what the per-chart fields add to the snapshot: fields, bytes and the store
time. No figure is asserted.
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
CONFIRM = lambda: None  # noqa: E731 - set once the snapshot is stored


def median_ms(fn, probes: int, before_each=None) -> float:
    times = []
    for _ in range(probes):
        CONFIRM()
        if before_each is not None:
            before_each()
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--charts", type=int, default=100_000, help="queued charts")
    parser.add_argument("--probes", type=int, default=20, help="requests per figure (the median is shown)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fairsched-bench-chart-page-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still stops its Redis
    from fairsched.runtime import embedded

    redis_service = embedded.start_redis(log=tmp / "redis.log")
    try:
        os.environ.update(DATABASE_URL=f"sqlite:///{tmp / 'bench.sqlite3'}", FAIRSCHED_CHANNEL_LAYER="memory",
                          DJANGO_SETTINGS_MODULE="config.settings", REDIS_URL=redis_service.url)
        run(args, tmp)
    finally:
        redis_service.stop()


def run(args, tmp: Path) -> None:
    import django

    django.setup()
    import redis
    from django.core.management import call_command
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.utils import timezone

    from charts.models import Chart
    from common import snapshot as snap
    from dashboard import history, selectors
    from dashboard.simulate import store_from_db
    from fairsched.engine.reader import snapshot_from_db
    from orgs.models import Org, Workflow
    from tests.factories import make_user

    setup_test_environment()  # responses carry their template context (the page's position and ETA)
    call_command("migrate", interactive=False, verbosity=0)
    big = Org.objects.create(name="Big")
    others = [Org.objects.create(name=f"Org {i}") for i in range(9)]
    wf = Workflow.objects.create(name="code", temporal_type="DemoChart")
    start = timezone.now() - timedelta(days=1)
    t0 = time.perf_counter()
    batch = []
    for i in range(args.charts):
        org = big if i % 2 == 0 else others[i % 9]
        batch.append(Chart(org=org, workflow=wf, external_id=f"mrn-{i}", created_at=start + timedelta(seconds=i)))
        if len(batch) == 5000:
            Chart.objects.bulk_create(batch)
            batch = []
    Chart.objects.bulk_create(batch)
    print(f"{args.charts:,} queued charts written in {time.perf_counter() - t0:.1f} s")

    built = snapshot_from_db()
    real_fields = snap.page_fields
    snap.page_fields = lambda *a: ((f, v) for f, v in real_fields(*a) if not f.startswith("x:"))
    t0 = time.perf_counter()
    snap.store(*built)  # without the external-id index, as before (for its cost only)
    stored_before = time.perf_counter() - t0
    snap.page_fields = real_fields
    t0 = time.perf_counter()
    snap.store(*built)
    stored = time.perf_counter() - t0
    print(f"snapshot store without / with the external-id index: {stored_before:.2f} / {stored:.2f} s "
          f"= {stored / stored_before:.2f}x")
    s = snap.read_snapshot()
    client_r = redis.Redis.from_url(os.environ["REDIS_URL"])

    def confirm() -> None:
        """Say the snapshot is still current, as the scheduler does every second: the pages
        would otherwise call it stale a few seconds on and fall back to the database."""
        client_r.set(snap.CURRENT_KEY, snap.current_value(s["seq"], time.time()), ex=snap.TTL_S)
    global CONFIRM
    CONFIRM = confirm
    key = s["pages"]["key"]
    fields = client_r.hlen(key)
    index = [(f, v) for f, v in client_r.hscan_iter(key, match="x:*", count=5000)]
    index_bytes = sum(len(f) + len(v) for f, v in index)
    place_bytes = sum(len(f) + len(v) for f, v in client_r.hscan_iter(key, match="c:*", count=5000))
    used = client_r.memory_usage(key) or 0
    print(f"snapshot stored in {stored:.2f} s: {fields:,} fields, {used / 1e6:.1f} MB in Redis; "
          f"the external-id index {len(index):,} fields, {index_bytes / 1e6:.2f} MB of field names and values "
          f"(c:<id> with start_s: {place_bytes / 1e6:.2f} MB)")

    order_bytes = sum(len(v) for f, v in client_r.hscan_iter(key, match="o:*", count=5000))
    whole = median_ms(lambda: snap.read_order_all(s), 5)
    print(f"the whole order (what the chart page read): {order_bytes / 1e6:.1f} MB of JSON, "
          f"read and parsed in {whole:.0f} ms")
    total = s["pages"]["order"]
    chart_id = snap.read_order(total - 10, 1, snapshot=s)[1][0]["id"]  # near the end of the order
    big_rows = snap.read_org(big.pk, snapshot=s)["charts"]
    ext = big_rows[-10]["external_id"]  # near the end of the big org's slice
    print(f"probe: chart #{chart_id} at position {total - 10:,} of {total:,}; external id {ext!r}, "
          f"row {len(big_rows) - 10:,} of the big org's {len(big_rows):,}")

    member = make_user("bench-member")
    big.members.add(member)
    client = Client(HTTP_HOST="localhost")
    client.force_login(member)
    staff = Client(HTTP_HOST="localhost")
    staff.force_login(make_user("bench-root", superuser=True))

    def get(c, path, params=None):
        resp = c.get(path, params or {})
        assert resp.status_code == 200, (path, resp.status_code)
        return resp

    chart_page = lambda: get(client, f"/charts/{chart_id}/")  # noqa: E731
    status = lambda: get(client, f"/orgs/{big.slug}/status.json", {"external_id": ext})  # noqa: E731
    baseline = median_ms(lambda: get(staff, "/dashboard/order.json"), args.probes)

    after_page = median_ms(chart_page, args.probes)
    after_status = median_ms(status, args.probes)
    confirm()
    shown_after = chart_page().context["prediction"]["live"]
    answer_after = status().json()
    assert shown_after is not None and answer_after["source"] == "scheduler", "the snapshot went stale"
    answer_after = answer_after["charts"]

    # Before: the lookups as they were, put back in this process.
    real_read_charts, real_by_ext = snap.read_charts, snap.read_org_external_id

    def old_read_charts(ids, snapshot=None):
        index = selectors.order_rows(snapshot)[1]
        return {i: index[i] for i in ids if i in index}

    def old_by_ext(org_id, external_id, snapshot=None):
        data = snap.read_org(org_id, snapshot=snapshot)
        return None if data is None else {**data, "charts": [r for r in data["charts"]
                                                             if r.get("external_id") == external_id]}
    history.snap.read_charts = old_read_charts
    snap.read_org_external_id = old_by_ext
    try:
        before_cold = median_ms(chart_page, max(3, args.probes // 4), before_each=selectors.clear_caches)
        chart_page()
        before_warm = median_ms(chart_page, args.probes)
        before_status = median_ms(status, args.probes)
        confirm()
        shown_before = chart_page().context["prediction"]["live"]
        answer_before = status().json()["charts"]
    finally:
        history.snap.read_charts, snap.read_org_external_id = real_read_charts, real_by_ext
    assert shown_after == shown_before, (shown_after, shown_before)  # the same position, start and ETA
    assert answer_after == answer_before and len(answer_after) == 1

    print(f"order.json page 1 (staff):               {baseline:8.1f} ms (baseline)")
    print(f"/charts/<id>/ before, each new snapshot: {before_cold:8.1f} ms = {before_cold / baseline:6.1f}x")
    print(f"/charts/<id>/ before, same snapshot:     {before_warm:8.1f} ms = {before_warm / baseline:6.1f}x")
    print(f"/charts/<id>/ after:                     {after_page:8.1f} ms = {after_page / baseline:6.1f}x "
          f"({before_cold / after_page:.0f}x faster than a new snapshot's first)")
    print(f"status.json?external_id= before:         {before_status:8.1f} ms = {before_status / baseline:6.1f}x")
    print(f"status.json?external_id= after:          {after_status:8.1f} ms = {after_status / baseline:6.1f}x "
          f"({before_status / after_status:.0f}x faster)")
    print(f"(database and Redis log in {tmp})")


if __name__ == "__main__":
    main()
