"""What one submission costs the database, end to end through the view (issue 44, goal 4):
the statements of ``POST /api/v1/charts`` with and without an ``Idempotency-Key``, counted
as Django sends them (``BEGIN``, ``SAVEPOINT`` and ``COMMIT`` included: each is a round trip
on PostgreSQL), and the kept connection's health check without ``SELECT 1``
(``common.quiet_check``). The guarantees they must keep (exactly once, the cap, idempotency)
are tests/api/test_api_races.py's and test_api.py's."""
from __future__ import annotations

import time

import pytest
from django.db import close_old_connections, connection, connections
from django.test.utils import CaptureQueriesContext

from charts.models import Chart
from common import quiet_check
from tests.factories import make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


def kinds(ctx: CaptureQueriesContext) -> list[str]:
    """Each statement's first word, and the table of a SELECT, INSERT or UPDATE."""
    out = []
    for q in ctx.captured_queries:
        words = q["sql"].replace('"', "").split()
        verb = words[0].upper()
        if verb in ("SELECT", "INSERT", "UPDATE"):
            table = words[words.index("INTO") + 1] if verb == "INSERT" else (
                words[1] if verb == "UPDATE" else words[words.index("FROM") + 1])
            out.append(f"{verb} {table}")
        else:
            out.append(verb)
    return out


def test_a_single_submission_is_the_key_and_one_insert(acme):
    """Eight statements before (the key, BEGIN, the org again, the workflow, SAVEPOINT, INSERT,
    RELEASE, COMMIT): the key's read brings its org, the insert looks the workflow up by its
    name, and an org without a cap needs no transaction around the one INSERT."""
    acme.post("/charts", {"workflow": "code"})  # the key's last use is written once a minute
    with CaptureQueriesContext(connection) as ctx:
        r = acme.post("/charts", {"workflow": "code", "payload": {"n": 1}})
    assert r.status_code == 201, r.content
    assert kinds(ctx) == ["SELECT dashboard_orgtoken", "INSERT charts_chart"]
    assert r.json()["workflow"] == "code"
    chart = Chart.objects.select_related("workflow").get(pk=r.json()["id"])
    assert chart.payload == {"n": 1} and chart.workflow.name == "code"


def test_an_unknown_workflow_is_refused_naming_it_and_nothing_is_written(acme):
    for body in ({"workflow": "nope"}, {"workflow": "nope", "external_id": "u-1"}, {"workflow": 10**6}):
        r = acme.post("/charts", body)
        assert r.status_code == 422, r.content
        assert "workflow" in r.json()["errors"] and "unknown workflow" in r.content.decode()
    assert not Chart.objects.exists()
    make_workflow("review")
    assert acme.post("/charts", {"workflow": "review", "external_id": "u-1"}).status_code == 201
    other = acme.post("/charts", {"workflow": "code", "external_id": "u-1"})  # the id is taken, by another workflow
    assert other.status_code == 422 and "external_id" in other.json()["errors"]
    unknown = acme.post("/charts", {"workflow": "nope", "external_id": "u-1"})  # taken, and an unknown workflow
    assert unknown.status_code == 422 and "workflow" in unknown.json()["errors"]
    assert Chart.objects.count() == 1


def test_a_new_external_id_is_inserted_without_a_look_up_and_a_repeat_read_after(acme):
    """The unique (org, external_id) answers in the insert (ON CONFLICT DO NOTHING / INSERT OR
    IGNORE): a new one is one statement; a repeat finds it and reads the chart, 200, nothing written."""
    with CaptureQueriesContext(connection) as ctx:
        first = acme.post("/charts", {"workflow": "code", "external_id": "x-1"})
    assert first.status_code == 201, first.content
    assert kinds(ctx)[-1] == "INSERT charts_chart" and "SELECT charts_chart" not in kinds(ctx)
    with CaptureQueriesContext(connection) as ctx:
        again = acme.post("/charts", {"workflow": "code", "external_id": "x-1"})
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert kinds(ctx) == ["SELECT dashboard_orgtoken", "INSERT charts_chart", "SELECT charts_chart"]
    other = acme.post("/charts", {"workflow": "code", "external_id": "x-1", "payload": {"n": 2}})
    assert other.status_code == 422 and "external_id" in other.json()["errors"]
    assert Chart.objects.count() == 1


def test_with_an_idempotency_key_on_postgresql_the_key_is_claimed_in_one_insert(acme):
    """17 statements before, 9 now: the key claimed by one INSERT ... ON CONFLICT DO NOTHING
    (not a read, BEGIN, INSERT, COMMIT), the org not read again, the workflow and the external
    id not looked up."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite reads the key first: an insert waits for its one writer")
    acme.post("/charts", {"workflow": "code"})  # the key's last use is written once a minute
    with CaptureQueriesContext(connection) as ctx:
        r = acme.post("/charts", {"workflow": "code", "external_id": "e-1"}, **{"Idempotency-Key": "k-1"})
    assert r.status_code == 201, r.content
    assert kinds(ctx) == ["SELECT dashboard_orgtoken", "INSERT api_idempotencykey", "BEGIN",
                          "SELECT api_idempotencykey", "SAVEPOINT", "INSERT charts_chart",
                          "RELEASE", "UPDATE api_idempotencykey", "COMMIT"]
    replay = acme.post("/charts", {"workflow": "code", "external_id": "e-1"}, **{"Idempotency-Key": "k-1"})
    assert replay["Idempotent-Replayed"] == "true" and replay.content == r.content
    reused = acme.post("/charts", {"workflow": "code", "external_id": "e-2"}, **{"Idempotency-Key": "k-1"})
    assert reused.status_code == 422
    assert Chart.objects.count() == 2  # the warm-up's and this one's


def test_a_capped_org_still_counts_in_the_transaction_that_writes(acme):
    acme.org.max_queued = 1
    acme.org.save()
    with CaptureQueriesContext(connection) as ctx:
        assert acme.post("/charts", {"workflow": "code"}).status_code == 201
    assert "BEGIN" in kinds(ctx) and kinds(ctx)[-4:] == ["SAVEPOINT", "INSERT charts_chart", "RELEASE", "COMMIT"]
    assert acme.post("/charts", {"workflow": "code"}).status_code == 429
    assert Chart.objects.count() == 1


# --- the kept connection's health check -------------------------------------------------------


@pytest.fixture
def kept(settings):
    """The test's PostgreSQL connection, kept from one request to the next as the tier keeps its
    own (CONN_MAX_AGE), with Django's health checks on (the settings')."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's kept connections (SQLite opens a file)")
    wrapper = connections["default"]
    wrapper.ensure_connection()
    was = wrapper.close_at, wrapper.health_check_enabled
    wrapper.close_at, wrapper.health_check_enabled = None, True
    yield wrapper
    wrapper.close_at, wrapper.health_check_enabled = was


def _request_starts() -> None:
    """What a request's start does to the connection: Django's reset of its check, then ours."""
    close_old_connections()
    quiet_check.check_quietly()


def test_a_quiet_kept_connection_is_used_without_select_1(kept, monkeypatch):
    checks = []
    real = type(kept).is_usable
    monkeypatch.setattr(type(kept), "is_usable", lambda self: checks.append(1) or real(self))
    for _ in range(3):
        _request_starts()
        assert Chart.objects.count() == 0
    assert checks == []
    close_old_connections()  # without ours, Django's SELECT 1
    Chart.objects.count()
    assert checks == [1]


def test_a_connection_the_server_ended_is_still_replaced_before_use(kept):
    """pg_terminate_backend (a restart, an idle timeout): the server's goodbye is on the socket,
    so Django's own check runs, finds it dead and the request opens a new one; no error."""
    import psycopg

    pid = kept.connection.info.backend_pid
    dsn = kept.connection.info.dsn
    with psycopg.connect(dsn, password=kept.settings_dict.get("PASSWORD") or None, autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone()[0]
    deadline = time.monotonic() + 5
    while quiet_check.socket_is_quiet(kept.connection) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not quiet_check.socket_is_quiet(kept.connection)
    _request_starts()
    assert Chart.objects.count() == 0
    assert kept.connection.info.backend_pid != pid
