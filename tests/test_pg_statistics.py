"""fairsched.engine.pg_statistics: a start refreshes stale planner statistics of the charts."""
from __future__ import annotations

import pytest
from django.db import connection

from charts.models import Chart
from fairsched.engine import db, pg_statistics
from tests.factories import make_org, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


def _stats() -> tuple[int, object]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")  # this backend's counts, now (PostgreSQL 15+)
        cursor.execute("SELECT n_mod_since_analyze, coalesce(last_analyze, last_autoanalyze) "
                       "FROM pg_stat_user_tables WHERE relid = 'charts_chart'::regclass")
        return cursor.fetchone()


def _analyzed() -> None:
    """Fresh statistics to start from (the flushes between tests count as changed rows too)."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE charts_chart")


def _bulk(n: int) -> None:
    org, wf = make_org(f"Org {Chart.objects.count()}"), make_workflow("code")
    Chart.objects.bulk_create([Chart(org=org, workflow=wf) for _ in range(n)], batch_size=1000)


def test_sqlite_has_nothing_to_refresh():
    if connection.vendor == "postgresql":
        pytest.skip("SQLite's case")
    _bulk(50)
    assert pg_statistics.analyze_if_stale(min_rows=10) is False


def test_a_bulk_load_is_analyzed_once_then_left_alone(caplog):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: planner statistics")
    _analyzed()
    _bulk(300)
    changed, _ = _stats()
    assert changed >= 300
    assert pg_statistics.analyze_if_stale(min_rows=100) is True
    changed, analyzed_at = _stats()
    assert analyzed_at is not None and changed == 0
    assert "ANALYZE charts_chart" in caplog.text
    assert pg_statistics.analyze_if_stale(min_rows=100) is False  # fresh: no second ANALYZE
    _bulk(50)  # 50 more of 350: under the stale share
    assert pg_statistics.analyze_if_stale(min_rows=10) is False


def test_fewer_changed_rows_than_the_minimum_wait_for_autovacuum():
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: planner statistics")
    _analyzed()
    _bulk(300)
    _stats()
    assert pg_statistics.analyze_if_stale(min_rows=10_000) is False


def test_the_start_up_read_refreshes_them_before_its_snapshot(monkeypatch):
    """``db.read_streamed`` (a start) runs it before its read-only snapshot, where ANALYZE
    could not run."""
    called = []
    monkeypatch.setattr(pg_statistics, "analyze_if_stale", lambda *a, **k: called.append(1) or False)
    db.read_streamed(250, lambda head: False)
    assert called == [1]


def test_the_end_of_a_backfill_vacuums_away_the_chunks_dead_row_versions(caplog):
    """Each backfill chunk's UPDATE leaves a dead version of its rows; the vacuum at the end
    of the backfill removes them (and refreshes the statistics), from a thread and a
    connection of its own, as the scheduler runs it (``DbStore.start_vacuum_after_backfill``)."""
    if connection.vendor != "postgresql":
        assert pg_statistics.vacuum_after_backfill() is False  # SQLite: nothing to do
        return
    import threading

    from fairsched.engine.ports import DbStore

    _bulk(400)
    Chart.objects.update(fair_round=3)  # what the chunks do: every row again
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'charts_chart'::regclass")
        assert cursor.fetchone()[0] >= 400
    before = {t.ident for t in threading.enumerate()}
    DbStore().start_vacuum_after_backfill()
    vacuum = [t for t in threading.enumerate() if t.ident not in before and t.name == "fairsched-vacuum"]
    assert vacuum and vacuum[0].daemon
    vacuum[0].join(30)
    with connection.cursor() as cursor:
        cursor.execute("SELECT n_dead_tup, last_vacuum, last_analyze FROM pg_stat_user_tables "
                       "WHERE relid = 'charts_chart'::regclass")
        dead, vacuumed, analyzed = cursor.fetchone()
    assert dead == 0 and vacuumed is not None and analyzed is not None
    assert "VACUUM (ANALYZE) charts_chart after the first start's backfill" in caplog.text
