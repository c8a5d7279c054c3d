"""A warm stop always stops: SIGTERM ends ``runscheduler`` / ``runworker`` within the
bound (``FAIRSCHED_STOP_TIMEOUT_S``, 10 s by default), whatever they are doing.

Every SIGTERM here is checked the same way (:func:`assert_stopped`): the process exits
(waited for generously: ``EXIT_WAIT_S``, the bound plus the forced exit's own second or
two, on a machine shared by the whole suite), with status 0, "scheduler stopped" in its
log and no traceback; the lease key is gone from Redis (a standby takes over at once,
not after the lease runs out); and the rows are consistent (every chart still there,
none running without its workflow in Temporal).
"""
from __future__ import annotations

import os
import random
import re
import signal
import sqlite3
import subprocess
import time
from contextlib import contextmanager
from datetime import timedelta

import pytest
import redis
from django.db import connection
from django.utils import timezone

from charts.models import Chart, ChartState
from fairsched.runtime import embedded
from fairsched.engine.ports.lease import LEASE_KEY
from control.models import SchedulerSettings
from orgs.models import Org, Workflow
from fairsched.temporal.shared import workflow_id
from tests.integration.conftest import Proc, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

EXIT_WAIT_S = 15.0
BACKLOG = 30_000
STOPPED = re.compile(r"scheduler stopped (?:([\d.]+) s after the stop request \(during: ([^)]*)\)|"
                     r"\(forced after ([\d.]+) s: [^;]*; stop requested during: ([^)]*)\))")


def configure(budget: int, *, eta: float = 0.2, reconcile: float = 1.0) -> None:
    s = SchedulerSettings.get()
    s.budget, s.eta_interval_s, s.reconcile_interval_s = budget, eta, reconcile
    s.save()


def seed_backlog(n: int, seconds: float = 0.3) -> int:
    """``n`` queued charts over five orgs (bulk: a second or two for tens of thousands)."""
    orgs = [Org.objects.create(name=f"Org {i}", weight=1 + i % 3) for i in range(5)]
    wf, _ = Workflow.objects.get_or_create(name="code", defaults={"temporal_type": "DemoChart"})
    start = timezone.now() - timedelta(hours=1)
    Chart.objects.bulk_create([Chart(org=orgs[i % 5], workflow=wf, created_at=start + timedelta(milliseconds=i),
                                     payload={"seconds": seconds}) for i in range(n)], batch_size=2000)
    return n


def sigterm_and_wait(proc: Proc) -> float:
    """SIGTERM; the seconds until the process exited (fails the test past EXIT_WAIT_S)."""
    sent = time.monotonic()
    proc.proc.send_signal(signal.SIGTERM)
    try:
        proc.proc.wait(EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.proc.send_signal(signal.SIGKILL)
        proc.proc.wait(10)
        pytest.fail(f"{proc.name} still running {EXIT_WAIT_S:g} s after SIGTERM; its log ends:\n{proc.log()[-4000:]}")
    return time.monotonic() - sent


def assert_stopped(proc: Proc, redis_url: str, temporal, charts: int) -> tuple[str, float]:
    """The checks of every stop (module docstring); returns (phase, seconds) from the log."""
    log = proc.log()
    assert proc.proc.returncode == 0, f"exit status {proc.proc.returncode}:\n{log[-4000:]}"
    assert "Traceback" not in log, log[-4000:]
    found = STOPPED.search(log)
    assert found, f"no 'scheduler stopped' in the log:\n{log[-4000:]}"
    assert redis.Redis.from_url(redis_url).get(LEASE_KEY) is None, "the lease outlived the scheduler"
    assert Chart.objects.count() == charts
    running = list(Chart.objects.filter(state=ChartState.RUNNING).values_list("pk", flat=True))
    assert all(temporal.exists(workflow_id(pk)) for pk in running), "a row runs without its workflow"
    if found.group(1):
        return found.group(2), float(found.group(1))
    return f"{found.group(4)} (forced)", float(found.group(3))


@pytest.mark.slow(34)
def test_sigterm_at_random_moments_always_stops_within_the_bound(live, temporal, redis_url):
    """6 SIGTERMs into one 30k backlog: mid-load, just after it, and anywhere in the
    first seconds of leading (reconcile, dispatch, ETA pass, resync, finishing, the whole
    backlog loading behind the head), the last two with a bound so short that the stop may
    be forced. (12 took 85 s of the suite, 8 took 43-64 s; the moments are random, so each
    run of the suite tries 6 new ones.) A start dispatches from a head of 250 charts an org read in
    milliseconds, so "mid-load" starts read a head that holds the whole backlog: a load
    on the loop, as when more than 10,000 charts have no round."""
    seed = int(os.environ.get("FAIRSCHED_TEST_SEED") or time.time())
    rnd = random.Random(seed)
    configure(budget=6)
    charts = seed_backlog(BACKLOG)
    live.shared_worker()
    moments = ["mid-load", "after the load", "anywhere", "mid-load"] + ["mid-load", "anywhere"]
    seen: list[tuple[str, str, float]] = []
    for i, moment in enumerate(moments):
        forced = i >= len(moments) - 2
        env = {"FAIRSCHED_STOP_TIMEOUT_S": "0.3"} if forced else None
        if moment == "mid-load":
            sched = live.faulty_scheduler("--head-per-org", str(BACKLOG), env=env)
        else:
            sched = live.scheduler(env=env, name=f"sched{i}")
        if moment == "mid-load":
            sched.saw("acquired", timeout=60)
            time.sleep(rnd.uniform(0.0, 0.8))
        elif moment == "after the load":
            sched.saw("loaded backlog", timeout=60)
            time.sleep(rnd.uniform(0.0, 1.0))
        else:
            sched.saw("scheduler starting", timeout=60)
            time.sleep(rnd.uniform(0.5, 5.0))
        took = sigterm_and_wait(sched)
        phase, logged = assert_stopped(sched, redis_url, temporal, charts)
        seen.append((moment, phase, took))
    report = "\n".join(f"  {m:<15} during {p:<30} exited {t:5.2f} s after SIGTERM" for m, p, t in seen)
    print(f"\nwarm stops (seed {seed}):\n{report}")
    assert any(p == "loading the backlog" for _, p, _ in seen), report


def test_sigterm_while_temporal_is_unreachable(live, temporal, redis_url):
    """The scheduler holds the lease and retries Temporal (a dead port): a SIGTERM ends the
    retries at once, without a traceback."""
    configure(budget=2)
    charts = seed_backlog(50)
    rnd = random.Random()
    for i in range(3):
        sched = live.scheduler(env={"TEMPORAL_ADDRESS": f"127.0.0.1:{embedded.free_port()}"}, name=f"sched{i}")
        sched.saw("unreachable", timeout=30)
        time.sleep(rnd.uniform(0.0, 2.5))  # in a retry's sleep or in a connection attempt
        sigterm_and_wait(sched)
        phase, _ = assert_stopped(sched, redis_url, temporal, charts)
        assert phase == "connecting to Temporal"


def test_sigterm_after_temporal_went_away_under_a_leading_scheduler(live, redis_url, tmp_path):
    """Temporal dies while the scheduler leads (RPCs time out and are retried; watchers poll
    a dead server): the stop still comes within the bound."""
    from tests.integration.conftest import TemporalFacade

    own = embedded.start_temporal(log=live.artifacts / "own-temporal.log")
    try:
        configure(budget=4)
        charts = seed_backlog(2_000, seconds=30)
        sched = live.scheduler(env={"TEMPORAL_ADDRESS": own.url})
        sched.saw("dispatch chart #", timeout=60)
        wait_until(lambda: Chart.objects.filter(state=ChartState.RUNNING).count() == 4, timeout=30,
                   what="the budget in use")
        facade = TemporalFacade(own.url)
        running = list(Chart.objects.filter(state=ChartState.RUNNING).values_list("pk", flat=True))
        assert all(facade.exists(workflow_id(pk)) for pk in running)
        facade.close()
        own.proc.send_signal(signal.SIGKILL)
        own.proc.wait(10)
        time.sleep(1.5)  # reconcile and the watchers now fail against the dead server
        sigterm_and_wait(sched)
        log = sched.log()
        assert sched.proc.returncode == 0 and "Traceback" not in log, log[-4000:]
        assert STOPPED.search(log), log[-4000:]
        assert redis.Redis.from_url(redis_url).get(LEASE_KEY) is None
        assert Chart.objects.count() == charts
        assert set(Chart.objects.filter(state=ChartState.RUNNING).values_list("pk", flat=True)) == set(running)
    finally:
        own.stop()


@contextmanager
def database_locked(live, tmp_path):
    """Every query of the processes ``live`` starts next waits (SQLite: its busy timeout, 30 s;
    PostgreSQL: for ever). On SQLite they get a copy of the test database, locked EXCLUSIVE:
    in WAL mode every open connection to a file keeps that lock from being taken, and the
    browser tests' daphne keeps one open to the test database for the whole session."""
    if connection.vendor == "sqlite":
        copy = tmp_path / "locked.sqlite3"
        source, target = sqlite3.connect(connection.settings_dict["NAME"]), sqlite3.connect(copy)
        source.backup(target)
        source.close()
        target.close()
        live.env["DATABASE_URL"] = f"sqlite:///{copy}"
        locker = sqlite3.connect(copy, isolation_level=None)
        locker.execute("PRAGMA locking_mode=EXCLUSIVE")
        locker.execute("BEGIN EXCLUSIVE")
        locker.execute("UPDATE charts_chart SET priority = priority WHERE id = -1")
    else:
        import psycopg

        s = connection.settings_dict
        locker = psycopg.connect(dbname=s["NAME"], user=s["USER"] or None, password=s.get("PASSWORD") or None,
                                 host=s.get("HOST") or "127.0.0.1", port=s.get("PORT") or 5432)
        locker.execute("LOCK TABLE charts_chart, fairsched_schedulersettings IN ACCESS EXCLUSIVE MODE")
    try:
        yield
    finally:
        locker.rollback() if connection.vendor != "sqlite" else locker.execute("ROLLBACK")
        locker.close()


def test_sigterm_while_the_backlog_load_waits_on_a_locked_database(live, temporal, redis_url, tmp_path):
    """The load waits on the database (a lock held elsewhere): the stop does not wait with it."""
    configure(budget=2)
    charts = seed_backlog(50)
    with database_locked(live, tmp_path):
        sched = live.scheduler()
        sched.saw("acquired", timeout=60)
        time.sleep(1.0)  # connected to Temporal; the load's first query now waits on the lock
        sigterm_and_wait(sched)
    phase, _ = assert_stopped(sched, redis_url, temporal, charts)
    assert phase == "loading the backlog"


@pytest.mark.slow(25)
def test_runworker_sigterm_with_activities_in_flight_and_while_temporal_is_unreachable(live, temporal, redis_url):
    """In-flight activities get their grace, then are cancelled; the worker exits within the
    bound, and Temporal runs the cut-short charts again on the next worker, once each."""
    configure(budget=3)
    charts = seed_backlog(3, seconds=5)  # still running at the SIGTERM (1 s in) and past the 2 s grace
    worker = live.worker()
    sched = live.scheduler()
    wait_until(lambda: Chart.objects.filter(state=ChartState.RUNNING).count() == 3, timeout=60,
               what="three charts running")
    # A row runs once its workflow started, which may be before this worker polls (CI: the
    # SIGTERM came 1 ms before "polling", on a machine where the worker took 2 s to start).
    worker.saw("worker polling", timeout=60)
    time.sleep(1.0)  # their activities are running on the worker
    sigterm_and_wait(worker)
    log = worker.log()
    assert worker.proc.returncode == 0 and "Traceback" not in log, log[-4000:]
    assert re.search(r"worker stopped [\d.]+ s after the stop request \(during: polling\)", log), log[-4000:]

    unreachable = live.worker(env={"TEMPORAL_ADDRESS": f"127.0.0.1:{embedded.free_port()}"})
    unreachable.saw("unreachable", timeout=30)
    time.sleep(random.uniform(0.0, 2.5))
    sigterm_and_wait(unreachable)
    log = unreachable.log()
    assert unreachable.proc.returncode == 0 and "Traceback" not in log, log[-4000:]
    assert "during: connecting to Temporal" in log, log[-4000:]

    live.worker()
    ids = list(Chart.objects.values_list("pk", flat=True))
    wait_until(lambda: Chart.objects.filter(state=ChartState.SUCCEEDED).count() == charts, timeout=90,
               what="every chart succeeded after the restart")
    assert all(len(temporal.executions(workflow_id(pk))) == 1 for pk in ids)
    assert sched.alive()
