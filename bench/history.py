"""Benchmark of the cockpit's history pages: keyset pages cost the same at any depth.

Run from the repo root: ``.venv/bin/python bench/history.py [--charts 200000]``.
A temporary SQLite database gets ``--charts`` finished charts; each figure is the
time of one history page (the query and the template) deep in the history,
divided by the time of the first page measured in the same run. For comparison,
the same depth reached with OFFSET (what a page number would cost).
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def best(fn, repeat: int = 5) -> float:
    t_best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        t_best = min(t_best, time.perf_counter() - t0)
    return t_best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--charts", type=int, default=200_000, help="finished charts in the history")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fairsched-bench-history-"))
    os.environ.update(DATABASE_URL=f"sqlite:///{tmp / 'bench.sqlite3'}", FAIRSCHED_CHANNEL_LAYER="memory",
                      DJANGO_SETTINGS_MODULE="config.settings", REDIS_URL="redis://127.0.0.1:9/0")
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client
    from django.utils import timezone

    from charts.models import Chart, ChartState
    from dashboard import history
    from orgs.models import Org, Workflow
    from tests.factories import make_user

    call_command("migrate", interactive=False, verbosity=0)
    orgs = [Org.objects.create(name=f"Org {i}") for i in range(20)]
    wf = Workflow.objects.create(name="code", temporal_type="DemoChart")
    start = timezone.now() - timedelta(days=30)
    states = [ChartState.SUCCEEDED] * 8 + [ChartState.FAILED, ChartState.CANCELLED]
    t0 = time.perf_counter()
    batch = []
    for i in range(args.charts):
        at = start + timedelta(seconds=i * 10)
        batch.append(Chart(org=orgs[i % 20], workflow=wf, external_id=f"mrn-{i}", state=states[i % 10],
                           created_at=at - timedelta(minutes=5), started_at=at - timedelta(minutes=2), finished_at=at))
        if len(batch) == 5000:
            Chart.objects.bulk_create(batch)
            batch = []
    Chart.objects.bulk_create(batch)
    print(f"{args.charts:,} finished charts written in {time.perf_counter() - t0:.1f} s")

    client = Client(HTTP_HOST="localhost")
    client.force_login(make_user("bench", superuser=True))
    get = client.get

    def page(path: str, params: dict | None = None) -> None:
        resp = get(path, params or {})
        assert resp.status_code in (200, 302), (path, params, resp.status_code)
    deep = Chart.objects.order_by("finished_at", "id")[history.PAGE * 2]  # near the oldest end
    cursor = history.Cursor(deep.finished_at, deep.pk).text()
    depth = Chart.objects.filter(finished_at__gt=deep.finished_at).count()

    first = best(lambda: page("/dashboard/history/"))
    keyset = best(lambda: page("/dashboard/history/", {"after": cursor}))
    failed_first = best(lambda: page("/dashboard/history/", {"state": "failed"}))
    failed_deep = best(lambda: page("/dashboard/history/", {"state": "failed", "after": cursor}))
    offset = best(lambda: list(Chart.objects.filter(finished_at__isnull=False).select_related("org", "workflow")
                               .order_by("-finished_at", "-id")[depth:depth + history.PAGE]))
    offset_first = best(lambda: list(Chart.objects.filter(finished_at__isnull=False).select_related("org", "workflow")
                                     .order_by("-finished_at", "-id")[:history.PAGE]))
    search = best(lambda: page("/dashboard/search/", {"q": f"mrn-{args.charts // 2}"}))
    failures = best(lambda: page("/dashboard/failures/"))
    print(f"history page 1:                      {first * 1000:7.1f} ms (baseline)")
    print(f"history page at row {depth:,} (keyset): {keyset * 1000:7.1f} ms = {keyset / first:.2f}x page 1")
    print(f"failed only, page 1 / deep:          {failed_first * 1000:7.1f} / {failed_deep * 1000:.1f} ms "
          f"= {failed_deep / failed_first:.2f}x")
    print(f"the same depth by OFFSET (query only): {offset * 1000:7.1f} ms = {offset / offset_first:.1f}x its page 1")
    print(f"search by external id:               {search * 1000:7.1f} ms = {search / first:.2f}x history page 1")
    print(f"failures panel:                      {failures * 1000:7.1f} ms = {failures / first:.2f}x history page 1")
    print(f"(database in {tmp})")


if __name__ == "__main__":
    main()
