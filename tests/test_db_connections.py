"""The scheduler's and the worker's database connections: one a thread, kept from one call
to the next (``common.connections.keep_connections``, called by ``manage.py runscheduler``
and ``runworker``), not one a call."""
from __future__ import annotations

import pytest
from django.db import connection, connections

from charts.models import Chart
from common.connections import keep_connections
from fairsched.engine.store import db
from tests.factories import make_org, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)  # outside a test's transaction: connections close


@pytest.fixture
def max_age():
    """The kept connection closed after the test (tests/conftest.py puts the settings' CONN_MAX_AGE back)."""
    yield
    connection.close()


def _backend() -> int:
    """The server process behind this thread's connection."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def test_the_scheduler_keeps_its_connection_from_one_call_to_the_next(max_age):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's case (SQLite's backend keeps its connections already)")
    chart = Chart.objects.create(org=make_org("Acme"), workflow=make_workflow("code"))
    db.read_for_start([chart.pk])
    first = _backend()
    db.read_for_start([chart.pk])
    assert _backend() != first  # the settings' default (the web's): a new connection each call

    keep_connections()
    db.read_for_start([chart.pk])
    kept = _backend()
    assert db.read_for_start([chart.pk])[chart.pk].row.id == chart.pk
    db.mark_running([(chart.pk, 1, "run-1", 1_800_000_000.0)])
    assert _backend() == kept
    assert Chart.objects.get(pk=chart.pk).state == "running"


def test_sqlite_settings_are_left_alone(max_age):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's case")
    before = connections.settings["default"]["CONN_MAX_AGE"]
    keep_connections()
    assert connections.settings["default"]["CONN_MAX_AGE"] == before
