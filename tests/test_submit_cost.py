"""What a submission costs the web process (docs/api.md, "The code, its tests and its figures"):
the queries of ``chart_submit`` and ``chart_submit_many``, the bulk insert they use, the
SQLite connections kept for the next connect, the notes and API counts sent by a thread of
their own, and the rate limit's leases. Each test fails without the change it names."""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time

import pytest
import redis
from django.db import connection, models, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from api import ratelimit
from charts import services
from charts.models import Chart
from common import bulk, metrics, notify
from tests.factories import make_org, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)

TX = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")


def statements(ctx: CaptureQueriesContext) -> list[str]:
    """The statements run, without the transaction's own (PostgreSQL logs none of them)."""
    return [q["sql"].split()[0].upper() for q in ctx.captured_queries if not q["sql"].upper().startswith(TX)]


# --- the services' queries ------------------------------------------------------------------


def test_chart_submit_reads_the_org_once_and_inserts_looking_the_workflow_up_in_the_insert(capture_notifications):
    """One read and the insert: the org's turnaround is the org's row read first, not read again;
    a workflow given by name is the insert's subquery (issue 44, goal 4: it was a read of its own)."""
    org, wf = make_org(), make_workflow()
    org.turnaround = timezone.timedelta(hours=2)
    org.save()
    with CaptureQueriesContext(connection) as ctx:
        chart = services.chart_submit(org=org, workflow=wf.name, payload={"a": 1})
    assert statements(ctx) == ["SELECT", "INSERT"]
    assert chart.workflow.name == wf.name and chart.workflow_id == wf.pk
    chart.refresh_from_db()
    assert chart.due_at == chart.created_at + org.turnaround and not chart.due_explicit
    assert capture_notifications == [{"kind": "chart", "id": chart.pk}]


def test_chart_submit_takes_the_turnaround_of_the_row_not_of_a_stale_instance():
    org = make_org()
    stale = type(org).objects.get(pk=org.pk)
    org.turnaround = timezone.timedelta(minutes=30)
    org.save()
    chart = services.chart_submit(org=stale, workflow=make_workflow().name)
    assert chart.due_at == chart.created_at + org.turnaround


def test_chart_submit_many_is_one_insert_a_thousand_and_one_note(capture_notifications):
    org, wf = make_org(), make_workflow()
    items = [{"org": org, "workflow": wf.name, "payload": {"i": i}, "external_id": f"x{i}"} for i in range(1000)]
    capture_notifications.clear()
    with CaptureQueriesContext(connection) as ctx:
        result = services.chart_submit_many(charts=items)
    # the org, the workflow, the external ids already there, one INSERT
    assert statements(ctx) == ["SELECT", "SELECT", "SELECT", "INSERT"]
    assert len(result.created) == 1000 and [n["kind"] for n in capture_notifications] == ["charts"]
    rows = dict(Chart.objects.filter(pk__in=result.created).values_list("pk", "external_id"))
    assert [rows[pk] for pk in result.created] == [f"x{i}" for i in range(1000)]  # pks in the items' order


# --- the bulk insert --------------------------------------------------------------------------


def _columns(pk: int) -> dict:
    row = Chart.objects.filter(pk=pk).values().get()
    return {k: v for k, v in row.items() if k not in ("id", "external_id", "updated_at")}


def test_insert_rows_writes_what_bulk_create_writes():
    org, wf = make_org(), make_workflow()
    now = timezone.now()

    def values(tag: str, i: int) -> dict:
        return {"org_id": org.pk, "workflow_id": wf.pk, "payload": {"n": [i, None, "é"]}, "external_id": f"{tag}{i}",
                "created_at": now, "priority": i % 2 == 0, "prioritized_at": now if i % 2 == 0 else None,
                "due_at": now + timezone.timedelta(seconds=i), "due_explicit": True}

    theirs = Chart.objects.bulk_create([Chart(**values("b", i)) for i in range(5)])
    with transaction.atomic():
        pks = bulk.insert_rows(Chart, [values("m", i) for i in range(5)])
    assert len(set(pks)) == 5 and list(Chart.objects.filter(pk__in=pks).order_by("pk")
                                       .values_list("external_id", flat=True)) == [f"m{i}" for i in range(5)]
    for a, b in zip(theirs, pks):
        assert _columns(a.pk) == _columns(b)
        assert Chart.objects.get(pk=b).updated_at is not None


def test_insert_rows_refuses_what_it_cannot_write_as_bulk_create_would():
    org, wf = make_org(), make_workflow()
    row = {"org_id": org.pk, "workflow_id": wf.pk}
    for bad in ({"updated_at": timezone.now()}, {"id": 5}, {"nope": 1}):
        with pytest.raises(ValueError, match="cannot be given"):
            bulk.insert_rows(Chart, [{**row, **bad}])
    with pytest.raises(ValueError, match="expression"):
        bulk.insert_rows(Chart, [{**row, "payload": models.Value("{}")}])
    assert not Chart.objects.exists()


def test_on_postgresql_a_chunk_is_one_array_a_column_not_a_placeholder_a_value():
    """``INSERT ... SELECT * FROM UNNEST(...)``: 32 parameters for any number of rows, where a
    ``VALUES`` list of 1,000 charts was 32,000 (320 ms a batch on PostgreSQL here, 125-170 ms
    unnested). The rows, their values and their order are the other tests' (they run here
    too); a single row stays a ``VALUES`` (nothing to gain)."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's UNNEST; SQLite takes the VALUES list")
    org, wf = make_org(), make_workflow()
    rows = [{"org_id": org.pk, "workflow_id": wf.pk, "payload": {"i": i}, "external_id": f"u{i}"} for i in range(3)]
    with CaptureQueriesContext(connection) as ctx, transaction.atomic():
        pks = bulk.insert_rows(Chart, rows)
        bulk.insert_rows(Chart, [{**rows[0], "external_id": "one"}])
    inserts = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith("INSERT")]
    assert len(inserts) == 2 and "SELECT * FROM UNNEST(" in inserts[0] and " VALUES " not in inserts[0]
    assert " VALUES " in inserts[1]
    assert [Chart.objects.get(pk=pk).payload for pk in pks] == [{"i": 0}, {"i": 1}, {"i": 2}]


def test_insert_rows_fits_the_databases_parameter_limit():
    """On SQLite the compiled limit (250,000 here), not Django's 999: one statement for 1,000 charts."""
    limit = bulk.max_params(connection)
    if connection.vendor == "sqlite":
        assert limit == connection.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    assert limit >= 32 * 1000  # the chart's columns for a batch of 1,000


# --- SQLite: the connections kept for the next connect --------------------------------------


@pytest.mark.skipif(not connection.settings_dict["ENGINE"].endswith("sqlite3"), reason="SQLite's backend")
def test_a_closed_sqlite_connection_is_kept_and_handed_to_the_next_connect():
    from common import pooled_sqlite3
    from common.pooled_sqlite3 import base

    assert connection.settings_dict["ENGINE"] == "common.pooled_sqlite3" and pooled_sqlite3
    connection.ensure_connection()
    raw = connection.connection
    connection.close()
    before = base.idle_connections()
    assert before >= 1
    connection.ensure_connection()
    assert connection.connection is raw and base.idle_connections() == before - 1
    with connection.cursor() as cursor:  # its PRAGMAs are still in force
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"
        cursor.execute("PRAGMA foreign_keys")
        assert cursor.fetchone()[0] == 1


@pytest.mark.skipif(not connection.settings_dict["ENGINE"].endswith("sqlite3"), reason="SQLite's backend")
def test_an_open_transaction_is_rolled_back_before_its_connection_is_kept():
    org = make_org()
    connection.ensure_connection()
    raw = connection.connection
    raw.execute("BEGIN")
    raw.execute("UPDATE orgs_org SET name = 'changed' WHERE id = ?", (org.pk,))
    connection.close()
    connection.ensure_connection()
    assert connection.connection is raw and not raw.in_transaction
    assert type(org).objects.get(pk=org.pk).name != "changed"


@pytest.mark.skipif(not connection.settings_dict["ENGINE"].endswith("sqlite3"), reason="SQLite's backend")
def test_a_connection_to_a_replaced_file_is_never_handed_out(tmp_path):
    from common.pooled_sqlite3.base import DatabaseWrapper, idle_connections

    path = tmp_path / "db.sqlite3"
    sqlite3.connect(path).close()
    db = DatabaseWrapper({**connection.settings_dict, "NAME": str(path)}, alias="replaced")
    db.ensure_connection()
    old = db.connection
    before = idle_connections()
    db.close()
    assert idle_connections() == before + 1  # kept for the next connect
    os.remove(path)
    sqlite3.connect(path).close()  # a new file at the same path
    db.ensure_connection()
    try:
        assert db.connection is not old
        with pytest.raises(sqlite3.ProgrammingError):  # and the old one was closed
            old.execute("SELECT 1")
    finally:
        db.close()


# --- the web's sender thread -------------------------------------------------------------------


@pytest.fixture
def in_background():
    with notify.uncaptured():  # these notes go to Redis, as in the web
        notify.send_in_background()
        try:
            yield
        finally:
            notify.flush()
            notify.send_in_background(False)


def test_in_the_web_notes_go_after_commit_in_order_from_a_thread_of_their_own(redis_url, in_background,
                                                                                 monkeypatch):
    sub = redis.Redis.from_url(redis_url).pubsub(ignore_subscribe_messages=True)
    sub.subscribe(notify.CHANNEL)
    sent_from: list[str] = []
    shared_client = notify.redis_client
    # each send takes the shared client once, on the thread that sends
    monkeypatch.setattr(notify, "redis_client",
                        lambda: (sent_from.append(threading.current_thread().name), shared_client())[1])
    org, wf = make_org(), make_workflow()
    first = services.chart_submit(org=org, workflow=wf.name)
    with pytest.raises(RuntimeError), transaction.atomic():
        services.chart_submit(org=org, workflow=wf.name)
        raise RuntimeError("rolled back: no note")
    second = services.chart_submit(org=org, workflow=wf.name)
    assert notify.flush()
    monkeypatch.setattr(notify, "redis_client", shared_client)
    got, deadline = [], time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        message = sub.get_message(timeout=1)
        if message:
            got.append(json.loads(message["data"]))
    assert got == [{"kind": "chart", "id": first.pk}, {"kind": "chart", "id": second.pk}]
    assert sent_from and set(sent_from) == {"notify-sender"}
    assert sub.get_message(timeout=0.3) is None


def test_api_requests_are_counted_by_the_writer_thread_summed(redis_url):
    for _ in range(300):
        metrics.api_request_done("POST /api/v1/charts", 201)
    metrics.api_request_done("POST /api/v1/charts", 429)
    assert metrics.flush()
    counts = redis.Redis.from_url(redis_url).hgetall(metrics.API_KEY)
    assert counts == {b"POST /api/v1/charts|201": b"300", b"POST /api/v1/charts|429": b"1"}
    assert metrics._summed([("k", "a", 1), ("k", "a", 2), ("k", "s", 0.5), ("k", "s", 0.25)]) == [
        ("k", "a", 3), ("k", "s", 0.75)]


# --- the rate limit's leases ---------------------------------------------------------------------


def _evalsha_calls(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def test_a_web_process_takes_a_leases_worth_of_tokens_in_one_round_trip(redis_url, settings):
    settings.FAIRSCHED_API_RATE, settings.FAIRSCHED_API_BURST = 1000.0, 2000
    ratelimit.drop_leases()
    client = redis.Redis.from_url(redis_url)
    assert ratelimit.take(7) is None  # registers the script
    client.config_resetstat()
    assert all(ratelimit.take(7) is None for _ in range(49 + 100))
    assert ratelimit.lease_size(1000.0, 2000) == 50
    assert _evalsha_calls(client) == 2  # 49 left of the first lease, then two more leases of 50


def test_leases_never_overdraw_the_bucket_whichever_process_spends_them(redis_url, settings, monkeypatch):
    monkeypatch.setattr(ratelimit, "LEASE_S", 10.0)  # 0.5/s x 10 s: a lease of the whole burst of 4
    settings.FAIRSCHED_API_RATE, settings.FAIRSCHED_API_BURST = 0.5, 4
    ratelimit.drop_leases()
    assert [ratelimit.take(8) for _ in range(4)] == [None] * 4  # one round trip, three spent here
    ratelimit.drop_leases()  # another web process: the bucket is empty for it
    wait = ratelimit.take(8)
    assert wait is not None and wait > 1


def test_an_unspent_lease_is_dropped_after_its_time(redis_url, settings, monkeypatch):
    settings.FAIRSCHED_API_RATE, settings.FAIRSCHED_API_BURST = 1000.0, 2000
    ratelimit.drop_leases()
    assert ratelimit.take(9) is None
    assert ratelimit.leased(9) == 49
    monkeypatch.setattr(ratelimit.time, "monotonic", lambda: time.monotonic_ns() / 1e9 + ratelimit.LEASE_TTL_S + 1)
    assert ratelimit.leased(9) == 0
    assert ratelimit.take(9) is None
    assert ratelimit.leased(9) == 49  # a new lease: the old one's token not spent, its 49 dropped


# --- SQLite: the writer's turn, a queue instead of the busy handler's sleeps --------------------


sqlite_only = pytest.mark.skipif(not connection.settings_dict["ENGINE"].endswith("sqlite3"), reason="SQLite's backend")


def _file_is_locked() -> bool:
    """Whether another open file description (another process, as far as flock goes) would wait."""
    import fcntl

    from common.pooled_sqlite3 import writer

    fd = os.open(writer.lock_path(str(connection.settings_dict["NAME"])), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@sqlite_only
def test_a_write_transaction_holds_the_writer_turn_until_it_ends():
    from common.pooled_sqlite3 import writer

    org = make_org()
    assert writer.held() == 0 and not _file_is_locked()
    with transaction.atomic():
        assert writer.held() == 1 and _file_is_locked()
        with transaction.atomic():  # a savepoint: the same turn
            type(org).objects.filter(pk=org.pk).update(name="x")
            assert writer.held() == 1
    assert writer.held() == 0 and not _file_is_locked()
    with pytest.raises(RuntimeError), transaction.atomic():
        raise RuntimeError("rolled back")
    assert writer.held() == 0 and not _file_is_locked()
    with transaction.atomic():
        connection.close()  # closed inside the block: its end still gives the turn back
    assert writer.held() == 0 and not _file_is_locked()


@sqlite_only
def test_a_begin_that_fails_gives_the_turn_back():
    """Another writer (the sqlite3 shell, say) holds SQLite's own lock: the BEGIN fails as before."""
    from common.pooled_sqlite3 import writer

    make_org()
    blocker = sqlite3.connect(connection.settings_dict["NAME"], timeout=0)
    blocker.execute("BEGIN IMMEDIATE")
    connection.close()
    timeout = connection.settings_dict["OPTIONS"]["timeout"]
    connection.settings_dict["OPTIONS"]["timeout"] = 0.2
    try:
        with pytest.raises(Exception, match="locked"), transaction.atomic():
            pass
        assert writer.held() == 0 and not _file_is_locked()
    finally:
        blocker.rollback()
        blocker.close()
        connection.settings_dict["OPTIONS"]["timeout"] = timeout
        connection.close()


@sqlite_only
def test_a_writer_waits_for_the_turn_not_in_sqlites_busy_handler_and_goes_when_it_is_given_back(monkeypatch):
    from common.pooled_sqlite3 import writer

    org = make_org()
    inside, release, order = threading.Event(), threading.Event(), []
    real_acquire = writer.acquire

    def acquire(database, timeout):
        name = threading.current_thread().name
        order.append(f"{name} asks")
        got = real_acquire(database, timeout)
        order.append(f"{name} has it")
        return got

    monkeypatch.setattr(writer, "acquire", acquire)

    def first() -> None:
        with transaction.atomic():
            type(org).objects.filter(pk=org.pk).update(name="first")
            inside.set()
            release.wait(10)
            order.append("first commits")
        connection.close()

    def second() -> None:
        inside.wait(10)
        with transaction.atomic():
            type(org).objects.filter(pk=org.pk).update(name="second")
        connection.close()

    threads = [threading.Thread(target=first, name="first"), threading.Thread(target=second, name="second")]
    for t in threads:
        t.start()
    inside.wait(10)
    deadline = time.monotonic() + 10
    while "second asks" not in order and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    assert order == ["first asks", "first has it", "second asks"]  # waiting in the queue
    release.set()
    for t in threads:
        t.join(30)
    assert order == ["first asks", "first has it", "second asks", "first commits", "second has it"]
    assert type(org).objects.get(pk=org.pk).name == "second"


@sqlite_only
def test_a_forked_child_starts_without_the_parents_turn():
    from common.pooled_sqlite3 import writer

    make_org()
    with transaction.atomic():
        assert writer.held() == 1
        pid = os.fork()
        if pid == 0:  # the child: no turn, and the parent's flock is not its to give back
            os._exit(0 if writer.held() == 0 and writer._locked is None and not writer._files else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert _file_is_locked()  # still the parent's
    assert not _file_is_locked()


@sqlite_only
def test_a_turn_another_process_holds_past_the_timeout_is_a_locked_database_and_the_turn_is_free_again():
    """Another process (the sqlite3 shell's own writer, a second scheduler) holds the writer's
    file lock past the timeout: the write fails as SQLite's own wait would, with "database is
    locked", not with an error of the turn's lock given back twice; and once it lets go, the
    next write of this process goes through (the turn is free again)."""
    import subprocess
    import sys

    from django.db import OperationalError

    from common.pooled_sqlite3 import writer

    make_org()
    path = writer.lock_path(str(connection.settings_dict["NAME"]))
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({path!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "sys.stdin.readline()\n")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        connection.close()
        timeout = connection.settings_dict["OPTIONS"]["timeout"]
        connection.settings_dict["OPTIONS"]["timeout"] = 0.2
        try:
            for _ in range(2):  # twice: the first failure gave the turn back
                with pytest.raises(OperationalError, match="database is locked"), transaction.atomic():
                    make_org()
            assert writer.held() == 0
        finally:
            connection.settings_dict["OPTIONS"]["timeout"] = timeout
            connection.close()
    finally:
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(10)
    with transaction.atomic():  # the other process let go: this one writes
        make_org()
    assert writer.held() == 0 and not _file_is_locked()


@sqlite_only
def test_a_turn_not_had_within_the_timeout_is_a_locked_database():
    """As SQLite's own wait would end: a writer of this process has held it all that time."""
    from django.db import OperationalError

    from common.pooled_sqlite3 import writer

    make_org()
    held, done = threading.Event(), threading.Event()

    def holder() -> None:
        with transaction.atomic():
            held.set()
            done.wait(10)
        connection.close()

    t = threading.Thread(target=holder)
    t.start()
    held.wait(10)
    connection.close()
    timeout = connection.settings_dict["OPTIONS"]["timeout"]
    connection.settings_dict["OPTIONS"]["timeout"] = 0.2
    try:
        started = time.monotonic()
        with pytest.raises(OperationalError, match="database is locked"), transaction.atomic():
            pass
        assert time.monotonic() - started < 5 and writer.held() == 1  # the holder's
    finally:
        done.set()
        t.join(10)
        connection.settings_dict["OPTIONS"]["timeout"] = timeout
        connection.close()
    assert writer.held() == 0


@sqlite_only
def test_close_idle_closes_the_kept_connections_so_the_database_can_be_taken_alone():
    """Each kept connection is really closed (an open one, idle or not, keeps
    ``locking_mode=EXCLUSIVE`` from being had). Checked on the connections themselves: a
    lock taken on the file would also meet the other processes of the suite that keep the
    test database open (the shared worker), whatever this process does."""
    from common.pooled_sqlite3.base import close_idle, idle_connections

    make_org()
    kept = connection.connection
    connection.close()
    n = idle_connections()
    assert n >= 1  # this one among them
    assert close_idle() >= n and idle_connections() == 0
    with pytest.raises(sqlite3.ProgrammingError):
        kept.execute("SELECT 1")


@sqlite_only
def test_destroying_a_test_database_removes_its_lock_file(tmp_path):
    from common.pooled_sqlite3 import base, writer

    path = tmp_path / "test_x.sqlite3"
    sqlite3.connect(path).close()
    lock = writer.lock_path(str(path))
    open(lock, "w").close()
    base.DatabaseCreation(connection)._destroy_test_db(str(path), verbosity=0)
    assert not path.exists() and not os.path.exists(lock)
