"""Shared fixtures.

Real services, started once per test session on free ports (never the machine's
own Redis or Temporal): ``redis_url`` and ``temporal_address``. Unit tests use the
in-memory channel layer and capture scheduler notifications instead of sending them.
"""
from __future__ import annotations

import gc
import itertools
import os
import time

os.environ.setdefault("FAIRSCHED_CHANNEL_LAYER", "memory")
# A fast password hash for this process and every server a test starts (see config/settings.py).
os.environ["FAIRSCHED_FAST_PASSWORD_HASH"] = "1"

from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from urllib.parse import quote  # noqa: E402

import pytest  # noqa: E402

from django.conf import settings as django_settings  # noqa: E402

from fairsched.runtime import embedded  # noqa: E402

from common import notify

# pytest-django configured Django before this file ran, so the variable above came too late for
# this process's own settings: set the same hasher here.
django_settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# The processes' logs of the tests, for a failure's post-mortem. Each pass of ``make test``
# keeps its own (``FAIRSCHED_TEST_PASS``: sqlite/, postgres/): the PostgreSQL pass runs the
# same integration tests again and overwrote what the SQLite pass left of a failure.
ARTIFACTS = Path(__file__).resolve().parent.parent / "var" / "test-artifacts" / os.environ.get("FAIRSCHED_TEST_PASS", "")


def _delete_instead_of_truncate() -> None:
    """PostgreSQL, test runs only: empty the tables after a transactional test with one
    ``DELETE`` each instead of one ``TRUNCATE`` of them all. A TRUNCATE makes new files for
    every table, which on tables holding a few rows costs far more than deleting them (the
    suite's ~300 transactional tests spent 2 minutes in it). Django's foreign keys are
    DEFERRABLE INITIALLY DEFERRED and the flush runs in one transaction, so the order of the
    deletes does not matter."""
    if not django_settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        return
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or not tables:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        # The charts first: the one writer that may outlive a test, the shared worker
        # recording an outcome, locks its chart row before the statistics rows.
        ordered = sorted(tables, key=lambda table: table != "charts_chart")
        return ["SET CONSTRAINTS ALL DEFERRED;"] + [
            f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(table))};" for table in ordered]

    execute = DatabaseOperations.execute_sql_flush

    def execute_sql_flush(self, sql_list):
        """Retried on a deadlock (the flush is one transaction, rolled back whole). The shared
        worker (tests/integration/conftest.py) goes on finishing the workflows a test left
        running, and its outcome's transaction (chart row, then statistics rows) met the
        flush's deletes once in CI: "couldn't be flushed", and the next test on that worker
        found the last test's 30,000 charts still there."""
        from django.db import OperationalError

        for attempt in range(5):
            try:
                return execute(self, sql_list)
            except OperationalError as exc:
                if "deadlock detected" not in str(exc) or attempt == 4:
                    raise
                time.sleep(0.2)

    DatabaseOperations.sql_flush = sql_flush
    DatabaseOperations.execute_sql_flush = execute_sql_flush


_delete_instead_of_truncate()

# Written by the migrations' post_migrate handlers and only read by the tests.
KEPT_BY_THE_FLUSH = frozenset({"django_content_type", "auth_permission"})


def _flush_keeps_content_types_and_permissions() -> None:
    """Test runs only: the flush after a transactional test (``manage.py flush``, from Django's
    TransactionTestCase) keeps the content types and permissions and sends no post_migrate
    signal. Django's flush empties every table and then has the post_migrate handlers write
    those two back, the same rows under new ids, some 60 queries a test: 60 ms a test on
    SQLite, 160 ms on PostgreSQL, after each of the suite's ~500 transactional tests. No
    project app listens to post_migrate, and no test writes either table (tests only read
    permissions: tests/factories.py)."""
    from django.core.management.commands import flush

    tables: dict[str, list[str]] = {}  # the schema does not change once migrated: listed once

    def sql_flush(style, connection, reset_sequences=True, allow_cascade=False):
        if connection.alias not in tables:
            tables[connection.alias] = [t for t in connection.introspection.django_table_names(
                only_existing=True, include_views=False) if t not in KEPT_BY_THE_FLUSH]
        return connection.ops.sql_flush(style, tables[connection.alias], reset_sequences=reset_sequences,
                                        allow_cascade=allow_cascade)

    flush.sql_flush = sql_flush
    flush.emit_post_migrate_signal = lambda *args, **kwargs: None


_flush_keeps_content_types_and_permissions()


@pytest.fixture(autouse=True)
def _gc_unfrozen_after_the_test() -> Iterator[None]:
    """A test that ran the scheduler's start-up in this process left its backlog frozen out of
    the collector's sight (``gc.freeze``, ``fairsched/engine/startup.py``), and every later
    test of the worker ran with it: the core's plan then skips moving its own objects out of
    the young generation (``scheduling.plan.gc_paused``, which leaves a freeze it did not make
    alone), and the Hypothesis state machine that plans at each step took 60-208 s in the suite
    against 1.3 s alone. What a test froze is given back after it."""
    frozen = gc.get_freeze_count()
    yield
    if frozen == 0 and gc.get_freeze_count():
        gc.unfreeze()


@pytest.fixture
def capture_notifications(django_capture_on_commit_callbacks) -> Iterator[list[dict]]:
    """Scheduler notifications sent on commit, as a list of dicts (Zulip's capture_send_event_calls)."""
    sent: list[dict] = []
    with notify.capture(sent.append), django_capture_on_commit_callbacks(execute=True):
        yield sent


@pytest.fixture(autouse=True)
def _in_memory_channel_layer(settings) -> None:
    """Every test's own Channels layer is in memory (channels resets its layers on the
    setting change). The environment variable above reaches subprocesses only: pytest-django
    has imported the settings before this file runs. Tests that start daphne or the
    scheduler as subprocesses give them the Redis layer explicitly."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    # The machine's own Redis (6379) is never used by accident: a test that needs Redis asks
    # for the redis_url fixture, which points this at the session's own server.
    settings.REDIS_URL = "redis://127.0.0.1:9/0"


@pytest.fixture(autouse=True)
def _workflow_ids(request) -> Iterator[None]:
    """In-process code names charts' workflows ``chart-test-<pk>``; an integration test reads
    them from the database, as the scheduler it runs does. No test leaves its ids to the next."""
    from control import deployment
    from fairsched.temporal.shared import WorkflowIds, use_workflow_ids

    use_workflow_ids(None if request.node.get_closest_marker("integration") else WorkflowIds("test"))
    deployment.forget()
    yield
    use_workflow_ids(None)
    deployment.forget()


@pytest.fixture(autouse=True)
def _connection_settings_restored() -> Iterator[None]:
    """A command run in this process (``call_command``) may set what its own process keeps
    (``common.connections.keep_connections``: ``CONN_MAX_AGE``); the next test gets the
    settings' value back. (``runworker`` refusing a deployment once left it for the rest
    of an xdist worker, and two later tests failed on it.)"""
    from django.db import connections

    before = {alias: connections.settings[alias].get("CONN_MAX_AGE") for alias in connections}
    yield
    for alias, value in before.items():
        connections.settings[alias]["CONN_MAX_AGE"] = value


@pytest.fixture(autouse=True)
def _no_real_notifications(request) -> Iterator[None]:
    """Outside integration tests, notifications never leave the process. In every test this
    process sends them itself, at the commit: a test that imported ``config.asgi`` (which
    hands them to a sender thread, as the web does) does not change that for the next."""
    notify.send_in_background(False)
    if request.node.get_closest_marker("integration"):
        yield
        return
    with notify.capture([].append):
        yield


@pytest.fixture(scope="session")
def redis_service() -> Iterator[embedded.Service]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    service = embedded.start_redis(log=ARTIFACTS / "redis.log")
    yield service
    service.stop()


@pytest.fixture
def redis_url(redis_service, settings) -> str:
    """A real Redis on a free port; settings.REDIS_URL points at it for the test."""
    import redis

    redis.Redis.from_url(redis_service.url).flushall()
    settings.REDIS_URL = redis_service.url
    settings.RQ_QUEUES = {"default": {"URL": redis_service.url, "DEFAULT_TIMEOUT": 600}}
    return redis_service.url


@pytest.fixture(scope="session")
def temporal_service() -> Iterator[embedded.Service]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    service = embedded.start_temporal(log=ARTIFACTS / "temporal.log")
    yield service
    service.stop()


@pytest.fixture
def temporal_address(temporal_service, settings) -> str:
    settings.TEMPORAL_ADDRESS = temporal_service.url
    return temporal_service.url


def _database_url(settings_dict: dict) -> str:
    engine = settings_dict["ENGINE"]
    if engine.endswith("sqlite3"):
        return f"sqlite:///{settings_dict['NAME']}"
    user = quote(settings_dict.get("USER") or "")
    password = quote(settings_dict.get("PASSWORD") or "")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or 5432
    return f"postgres://{auth}{host}:{port}/{settings_dict['NAME']}"


@pytest.fixture(scope="session")
def test_db_url(django_db_setup, django_db_blocker) -> str:
    """``DATABASE_URL`` of the test database, for a subprocess (daphne, an rq worker) to share it."""
    from django.db import connection

    with django_db_blocker.unblock():
        return _database_url(connection.settings_dict)


@pytest.fixture(scope="session")
def django_db_setup(request, django_db_setup, django_db_blocker) -> None:
    """The test database as migrated, less the deployment row its migration writes on a
    database with no chart (``charts/migrations/0014``: no legacy cut). A transactional test's
    flush empties that table, so without this the first test of a worker would see the row and
    the others not; every test starts without it, as a database from before deployment ids
    (``tests/test_deployment.py`` runs the migration's step itself)."""
    from control.models import Deployment

    if not any(uses_the_database(item) for item in request.session.items):
        return  # pytest-django made no test database: the connection is not one to write to
    with django_db_blocker.unblock():
        Deployment.objects.all().delete()


@pytest.fixture(scope="session", autouse=True)
def _no_stray_sessions_at_teardown(django_db_setup, django_db_blocker) -> Iterator[None]:
    """Before the test database is dropped: end the PostgreSQL sessions that processes the
    tests started still hold (one SIGKILLed a moment ago may not have been reaped yet), or
    ``DROP DATABASE`` fails and the database is left behind."""
    yield
    from django.db import connection

    with django_db_blocker.unblock():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                               "WHERE datname = current_database() AND pid <> pg_backend_pid()")


def pytest_sessionfinish(session, exitstatus) -> None:
    """SQLite's WAL sidecars of the destroyed test database outlive it when a subprocess still had
    it open (a killed worker's orphan): remove them with it."""
    from django.conf import settings

    name = settings.DATABASES["default"].get("TEST", {}).get("NAME") or ""
    if name.endswith(".sqlite3") and not Path(name).exists():
        for suffix in ("-wal", "-shm", "-journal"):
            Path(name + suffix).unlink(missing_ok=True)


SLOW_DEFAULT_S = 20.0


def _slow_seconds(item) -> float | None:
    """``@pytest.mark.slow(seconds)``: about how long the test takes while the suite runs here."""
    mark = item.get_closest_marker("slow")
    if mark is None:
        return None
    return float(mark.args[0]) if mark.args else SLOW_DEFAULT_S


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """(xdist, in the controller) Tell each worker how the tests are handed out: the order
    below depends on it, and a worker's own ``--dist`` option reads ``no``."""
    node.workerinput["fairsched_dist"] = node.config.option.dist


# Fixtures that give a test the test database (pytest-django's; ``live_server`` and the
# clients through ``transactional_db`` or ``db``). Not ``django_db_setup``: every test's
# closure holds it (``_no_stray_sessions_at_teardown``), and alone it grants no access.
DATABASE_FIXTURES = frozenset({"db", "transactional_db", "django_db_reset_sequences",
                               "django_db_serialized_rollback"})


def uses_the_database(item) -> bool:
    """Does this test reach the test database: a ``django_db`` mark or a database fixture?
    (pytest-django refuses any database access to a test with neither.) The tests that
    start processes on the test database (``live``) are all marked."""
    return item.get_closest_marker("django_db") is not None or bool(DATABASE_FIXTURES & set(item.fixturenames))


# Tests that do the same on either database, run in the PostgreSQL pass of ``make test``
# (not the SQLite one) to balance the two passes' times: ``make run``'s own (its stack runs
# on SQLite whatever the suite's database; 8 tests, 40-53 s for the longest) and the pure
# core's (no database at all; its Hypothesis state machines, about 55 worker-seconds). A
# test under these paths that does reach the database still runs in both. (From a fresh
# clone on 2026-12-08 the SQLite pass took 4:24-4:33 with the core, the PostgreSQL one 3:53
# without: the SQLite pass is bound by CPU, the PostgreSQL one waits more than it computes.)
IN_THE_POSTGRES_PASS = ("tests/test_make_run.py", "tests/core/")
# The browser tests run once, in the SQLite pass but for these, the admin's half of the axe-core
# test: the pages are the same whatever the database (tests/browser/test_axe_browser.py runs on
# both). All of the axe-core test in the PostgreSQL pass made it the longer by a minute
# (4:24 against 3:14 on 2026-12-08, bench/suite_cpu.py).
BROWSER_IN_THE_POSTGRES_PASS = ("tests/browser/test_axe_browser.py::test_the_pages_have_no_accessibility_violation[admin",)


def _in_this_pass(item, this_pass: str) -> bool:
    """``make test`` runs every test at least once over its two passes (``FAIRSCHED_TEST_PASS``,
    set by the Makefile when a PostgreSQL pass follows the SQLite one):

    - the tests that reach the database (:func:`uses_the_database`) run in both, but the
      browser tests: they check the pages in Chromium, the same whatever the database under
      them (the views' own tests, which run on both, check what the database gives them),
      and run in the SQLite pass, but for :data:`BROWSER_IN_THE_POSTGRES_PASS`;
    - the others (the pure logic, its Hypothesis properties) do the same on either and run
      in one pass: the SQLite one, but for those under :data:`IN_THE_POSTGRES_PASS`.

    ``FAIRSCHED_TEST_EVERY_PASS=1``, or a run without ``FAIRSCHED_TEST_PASS`` (``pytest``
    itself, ``make test-sqlite`` alone), runs every test."""
    if item.get_closest_marker("browser") is not None:
        in_postgres = item.nodeid.startswith(BROWSER_IN_THE_POSTGRES_PASS)
        return in_postgres if this_pass == "postgres" else not in_postgres
    balanced = item.nodeid.startswith(IN_THE_POSTGRES_PASS) and not uses_the_database(item)
    if this_pass == "postgres":
        return balanced or (uses_the_database(item) and item.get_closest_marker("browser") is None)
    return not balanced  # "sqlite", with a PostgreSQL pass to follow


def _once_per_make_test(config, items) -> None:
    """Keep the tests of this pass of ``make test`` (:func:`_in_this_pass`)."""
    this_pass = os.environ.get("FAIRSCHED_TEST_PASS", "")
    if this_pass not in ("sqlite", "postgres") or os.environ.get("FAIRSCHED_TEST_EVERY_PASS") == "1":
        return
    kept, dropped = [], []
    for item in items:
        (kept if _in_this_pass(item, this_pass) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_collection_modifyitems(config, items) -> None:
    """The tests of this pass of ``make test`` (:func:`_once_per_make_test`).

    The slow tests (``@pytest.mark.slow``, tens of seconds each) first, so that with
    several workers (``make test`` runs ``-n 3``) they start at once instead of one of them
    ending the run alone.

    ``--dist worksteal`` hands each worker a consecutive run of the collection (the first
    ``N // workers`` tests to one, and so on) and balances the ends by stealing from the
    back of a queue. With every slow test at the front they all went to one worker, one
    after the other (3 minutes of the suite's 5 on one of three workers): here each run
    starts with its share of them, balanced by their seconds, then the fast ones."""
    _once_per_make_test(config, items)
    slow = [item for item in items if _slow_seconds(item) is not None]
    rest = [item for item in items if _slow_seconds(item) is None]
    workerinput = getattr(config, "workerinput", {})
    workers = int(workerinput.get("workercount", 0))
    if workers < 2 or workerinput.get("fairsched_dist") != "worksteal":
        items[:] = slow + rest
        return
    sizes, left = [], len(items)
    for k in range(workers):  # as WorkStealingScheduling.check_schedule splits the collection
        sizes.append(left // (workers - k))
        left -= sizes[-1]
    runs: list[list] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for item in sorted(slow, key=_slow_seconds, reverse=True):  # the longest first, to the least loaded
        k = min(range(workers), key=lambda k: (load[k], len(runs[k])))
        runs[k].append(item)
        load[k] += _slow_seconds(item)
    fast = iter(rest)
    for k in range(workers):
        runs[k].extend(itertools.islice(fast, max(0, sizes[k] - len(runs[k]))))
    items[:] = [item for run in runs for item in run] + list(fast)
