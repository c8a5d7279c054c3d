"""The ``chart.finished`` sweep pages through a burst of finishes, however many share a second.

Issue 21, item 1: 12,000 charts of one org reached a final state in the same second.
The sweep made 5,000 deliveries, set its cursor to the last one's ``updated_at`` and
started the next sweep 60 s before it: the same 5,000 rows, for ever. ``SWEEP_LIMIT``
is lowered here so that a burst of a few dozen charts is more than a page.
"""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from charts.models import Chart, ChartState
from charts.services import chart_cancel
from jobs import webhooks
from jobs.models import WebhookDelivery
from tests.factories import make_chart, make_org, make_workflow

pytestmark = pytest.mark.django_db

LIMIT = 10


@pytest.fixture
def org(monkeypatch):
    monkeypatch.setattr(webhooks, "SWEEP_LIMIT", LIMIT)
    org = make_org("Burst")
    org.webhook_url, org.webhook_secret = "https://hooks.example.com/in", "s3cret"
    org.save()
    return org


def _queued(org, n: int) -> list[Chart]:
    wf = make_workflow("code")
    return [make_chart(org, wf) for _ in range(n)]


def _delivered() -> set[int]:
    return {int(k.split(":")[1]) for k in WebhookDelivery.objects.values_list("dedupe_key", flat=True)}


def test_a_burst_in_one_second_larger_than_a_page_is_swept_whole(org):
    """A bulk cancel: one statement, one ``updated_at`` for every row (ties broken by id)."""
    start = timezone.now()
    webhooks.sweep_finished_charts(start)  # the cursor exists before the burst
    charts = _queued(org, 3 * LIMIT + 4)
    at = start + timedelta(seconds=1)
    Chart.objects.filter(pk__in=[c.pk for c in charts]).update(state=ChartState.CANCELLED, finished_at=at,
                                                               updated_at=at)
    made = [webhooks.sweep_finished_charts(at + timedelta(seconds=2 + i)) for i in range(6)]
    assert made == [LIMIT, LIMIT, LIMIT, 4, 0, 0]
    assert _delivered() == {c.pk for c in charts}


def test_finishes_spread_over_a_second_larger_than_a_page_are_swept_whole(org):
    """One cancel after another (each its own ``updated_at``, all within the overlap)."""
    webhooks.sweep_finished_charts(timezone.now())
    charts = _queued(org, 2 * LIMIT + 5)
    for chart in charts:
        chart_cancel(chart=chart)
    now = timezone.now()
    made = [webhooks.sweep_finished_charts(now + timedelta(seconds=i)) for i in range(5)]
    assert made == [LIMIT, LIMIT, 5, 0, 0]
    assert _delivered() == {c.pk for c in charts}


def test_a_row_committed_late_within_the_overlap_is_still_found(org):
    """The overlap's purpose: a transaction stamps ``updated_at`` and commits seconds later,
    after a sweep has paged past that time. A later sweep still finds it."""
    t0 = timezone.now()
    webhooks.sweep_finished_charts(t0)
    early, late = _queued(org, 2)
    stamp = t0 + timedelta(seconds=1)
    Chart.objects.filter(pk=early.pk).update(state=ChartState.SUCCEEDED, finished_at=stamp, updated_at=stamp)
    assert webhooks.sweep_finished_charts(t0 + timedelta(seconds=5)) == 1
    # committed now, stamped before the cursor: behind the page, inside the overlap
    Chart.objects.filter(pk=late.pk).update(state=ChartState.FAILED, finished_at=stamp, updated_at=stamp)
    assert webhooks.sweep_finished_charts(t0 + timedelta(seconds=10)) == 1
    assert _delivered() == {early.pk, late.pk}


def test_the_page_and_the_overlap_are_read_in_keyset_order_from_an_index(org):
    """Both reads order by ``(updated_at, id)``: the index ``chart_updated_id`` gives that
    order, so the database reads a page's rows and stops, instead of sorting every final
    chart after the cursor on each sweep (PostgreSQL's index on ``updated_at`` alone left
    ties in no order: a sort). Forced here (the test tables are too small for the planner
    to prefer it): SQLite's ``INDEXED BY``, PostgreSQL with sorts and other scans off."""
    at = timezone.now()
    webhooks.sweep_finished_charts(at)
    charts = _queued(org, 3)
    Chart.objects.filter(pk__in=[c.pk for c in charts]).update(state=ChartState.CANCELLED, finished_at=at,
                                                               updated_at=at + timedelta(seconds=1))
    with CaptureQueriesContext(connection) as queries:
        webhooks.sweep_finished_charts(at + timedelta(seconds=2))
    reads = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('SELECT "charts_chart"."id"')]
    assert len(reads) == 2 and all('ORDER BY "charts_chart"."updated_at" ASC, "charts_chart"."id" ASC' in sql
                                   for sql in reads), reads
    for sql in reads:
        with connection.cursor() as cur:
            if connection.vendor == "sqlite":
                cur.execute("EXPLAIN QUERY PLAN " + sql.replace('FROM "charts_chart"',
                                                                'FROM "charts_chart" INDEXED BY chart_updated_id', 1))
                plan = " | ".join(str(row[-1]) for row in cur.fetchall())
                assert "USING INDEX chart_updated_id" in plan and "TEMP B-TREE" not in plan, plan
            else:
                with transaction.atomic():
                    for knob in ("seqscan", "bitmapscan", "sort", "incremental_sort"):
                        cur.execute(f"SET LOCAL enable_{knob} = off")
                    cur.execute("EXPLAIN " + sql)
                    plan = "\n".join(row[0] for row in cur.fetchall())
                assert "chart_updated_id" in plan and "Sort" not in plan, plan


def test_a_late_due_warning_behind_a_burst_larger_than_a_page_is_still_sent(org, monkeypatch):
    """The due-state sweep (``jobs.due_webhooks``) re-reads the ``SWEEP_OVERLAP`` before its
    position for rises committed late. It read that window's first page, delivered or not:
    behind a burst of one ETA pass larger than a page (every rise stamped with the pass's
    time), a late rise was never read, however many sweeps ran."""
    from fairsched.engine.store import db
    from jobs import due_webhooks

    monkeypatch.setattr(due_webhooks, "SWEEP_LIMIT", LIMIT)
    t0 = timezone.now()
    due_webhooks.sweep_due_states(t0)  # the cursor exists before the burst
    *burst, late = _queued(org, LIMIT + 3)
    db.record_due_alerts({c.pk: 1 for c in burst}, [c.pk for c in burst], t0.timestamp() + 1)
    assert due_webhooks.sweep_due_states(t0 + timedelta(seconds=2)) == LIMIT  # a full page
    assert due_webhooks.sweep_due_states(t0 + timedelta(seconds=3)) == 2      # the rest: the position moves on
    # stamped after the burst and before the position, committed now: only the overlap finds it
    db.record_due_alerts({late.pk: 1}, [late.pk], t0.timestamp() + 1.5)
    made = [due_webhooks.sweep_due_states(t0 + timedelta(seconds=4 + i)) for i in range(3)]
    assert made == [1, 0, 0]
    keys = WebhookDelivery.objects.filter(event=due_webhooks.EVENT).values_list("dedupe_key", flat=True)
    assert {int(k.split(":")[1]) for k in keys} == {c.pk for c in burst} | {late.pk}


def test_a_writer_whose_clock_lags_the_sweeper_s_is_still_sent(org):
    """Suspected in issue 41 (section 4), confirmed: a short page moved the cursor to the
    sweeper's own clock, so a writer (the scheduler, a worker, on another machine) whose clock
    lagged it by more than ``SWEEP_OVERLAP`` stamped its finishes behind the cursor and out of
    the overlap: never sent. The cursor now moves only to the stamps the writers gave."""
    lag = webhooks.SWEEP_OVERLAP + timedelta(seconds=30)
    base = timezone.now()  # the sweeper's clock; the writer's reads base - lag
    first, second, third = _queued(org, 3)
    Chart.objects.update(updated_at=base - lag)  # everything so far written by the lagging writer
    webhooks.sweep_finished_charts(base)  # the cursor exists before the finishes
    for i, (chart, swept) in enumerate([(first, 5), (second, 15), (third, 25)]):
        stamp = base + timedelta(seconds=swept - 4) - lag
        Chart.objects.filter(pk=chart.pk).update(state=ChartState.SUCCEEDED, finished_at=stamp, updated_at=stamp)
        assert webhooks.sweep_finished_charts(base + timedelta(seconds=swept)) == 1, i
    assert webhooks.sweep_finished_charts(base + timedelta(seconds=40)) == 0
    assert _delivered() == {first.pk, second.pk, third.pk}
