"""Dispatch stays a constant-time slice whatever the backlog: the ETA pass runs on a
copy in a thread, the lease is renewed from its own thread, the resync is incremental
(with a chunked full pass as safety net), and the order is published in pages."""
from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from charts.models import Chart
from common import snapshot
from fairsched.engine.store import db
from fairsched.engine.publish import build_snapshot
from fairsched.engine.scheduler import Scheduler
from fairsched.engine.store.rows import ChartRow, Config, OrgRow, World
from fairsched.engine.state import LiveState
from tests.factories import make_chart, make_org, make_workflow

T0 = 1_800_000_000.0


def q(pk: int, org: int, **kw) -> ChartRow:
    return ChartRow(pk, org, kw.pop("workflow", "code"), "queued", T0 + pk, **kw)


def world(n: int, *, budget: int = 3) -> World:
    orgs = [OrgRow(1, "Acme", "acme", 2), OrgRow(2, "Beta", "beta", 1), OrgRow(3, "Held", "held", 0)]
    charts = [q(i, 1 + i % 3, paused=(i % 17 == 0), priority=(i % 53 == 0),
                prioritized_at=T0 + i if i % 53 == 0 else None, external_id=f"x-{i}") for i in range(1, n + 1)]
    charts.append(ChartRow(n + 1, 1, "code", "running", T0, started_at=T0 + 10, dispatched_cost=1, run_id="r"))
    return World(Config(budget, 1.0, 2.0), orgs, {("2", "big"): 9}, {}, charts)


def scheduler(**kw) -> Scheduler:
    return Scheduler(temporal_address="127.0.0.1:1", namespace="default", task_queue="q",
                     redis_url=kw.pop("redis_url", "redis://127.0.0.1:1"), **kw)


# --- the ETA pass reads a copy ---------------------------------------------------------


@pytest.mark.parametrize("model", ["forecast", "lanes"])
def test_a_captured_pass_is_unchanged_by_what_the_loop_does_meanwhile(model):
    w = world(300)
    w = World(Config(3, 1.0, 2.0, model), w.orgs, w.costs, w.averages, w.charts)
    live, twin = LiveState(w), LiveState(w)
    now = T0 + 500
    captured = live.capture()
    # The loop goes on while the pass runs: dispatch, arrivals, pause, priority, weight, finish.
    planned = live.to_start()
    live.commit_dispatch(planned, {cid: ("run", now) for cid in planned})
    for pk in range(1000, 1010):
        live.apply_chart(pk, q(pk, 2))
    live.apply_chart(5, q(5, 3 - 1, paused=True))
    live.apply_chart(7, q(7, 2, priority=True, prioritized_at=T0 + 400))
    live.apply_orgs([OrgRow(2, "Beta", "beta", 5)])
    live.finished(301, "succeeded", 30.0)
    assert build_snapshot(captured, captured.eta_report(now), now) == \
        build_snapshot(twin, twin.capture().eta_report(now), now)


# --- pages ---------------------------------------------------------------------------------


def test_a_published_page_equals_the_same_slice_of_the_full_order(redis_url):
    live = LiveState(world(1234))
    now = T0 + 500
    snap, rows, per_org = build_snapshot(live, live.capture().eta_report(now), now)
    snapshot.store(snap, rows, per_org)
    rows = json.loads(json.dumps(rows, default=list))  # as stored (Rows: made dicts as read)
    per_org = json.loads(json.dumps(per_org, default=list))
    for offset, limit in [(0, 100), (450, 100), (499, 2), (500, 500), (1100, 500), (1234, 10), (5000, 10)]:
        total, page = snapshot.read_order(offset, limit)
        assert total == len(rows)
        assert page == rows[offset:offset + limit], (offset, limit)
    for org, data in per_org.items():
        charts = data["charts"]
        assert snapshot.read_org(int(org))["charts"] == charts
        for offset, limit in [(0, 50), (300, 250), (len(charts) - 3, 100)]:
            got = snapshot.read_org(int(org), offset, limit)
            assert got["total"] == len(charts)
            assert got["charts"] == charts[offset:offset + limit], (org, offset, limit)
    # A page read fetches a page, never the whole order as one value.
    import redis

    client = redis.Redis.from_url(redis_url)
    key = snapshot.read_snapshot()["pages"]["key"]
    assert max(len(v) for v in client.hvals(key)) < 200_000
    assert client.hlen(key) > 3


def test_a_large_snapshot_is_stored_in_writes_bounded_in_bytes_and_reads_back_whole(redis_url, monkeypatch):
    """Each HSET of a snapshot's pages stops at the first field that brings it to
    ``_BYTES_PER_WRITE``: at a million charts, 1,000 fields of the order's pages were 120 MB
    in one command, held twice while it was sent. An org's flagged charts are stored in
    pages too (they were one field of 37 MB), and read back whole or their first ``limit``."""
    import redis

    w = world(3000)
    due_soon = [OrgRow(1, "Acme", "acme", 2, 60.0), OrgRow(2, "Beta", "beta", 1, 60.0), w.orgs[2]]
    live = LiveState(World(w.config, due_soon, w.costs, w.averages, w.charts))
    now = T0 + 5000
    snap, rows, per_org = build_snapshot(live, live.capture().eta_report(now), now)
    flagged = {org: json.loads(json.dumps(list(data["flagged"]))) for org, data in per_org.items()}
    assert max(map(len, flagged.values())) > 2 * snapshot.PAGE_ROWS  # encoded in three pages or more
    bound = 100_000
    monkeypatch.setattr(snapshot, "_BYTES_PER_WRITE", bound)
    writes: list[list[int]] = []
    real_hset = redis.Redis.hset

    def hset(self, name, key=None, value=None, mapping=None, items=None):
        writes.append([len(v) for v in mapping.values()])
        return real_hset(self, name, key, value, mapping, items)

    monkeypatch.setattr(redis.Redis, "hset", hset)
    snapshot.store(snap, rows, per_org)
    assert len(writes) > 5
    for fields in writes:
        assert sum(fields[:-1]) < bound and len(fields) <= snapshot._FIELDS_PER_WRITE, fields
    for org, want in flagged.items():
        assert snapshot.read_due(int(org)) == want
        for limit in (3, snapshot.PAGE_ROWS, snapshot.PAGE_ROWS + 7):
            assert snapshot.read_due(int(org), limit=limit) == want[:limit]
    whole = json.loads(json.dumps(rows, default=list))
    assert snapshot.read_order(0, len(whole)) == (len(whole), whole)
    # a snapshot stored by a scheduler before the pages: the whole list in d:<org> (and an
    # older reader, which reads d:<org>, finds nothing in a newer one rather than a dict)
    org, want = max(flagged.items(), key=lambda kv: len(kv[1]))
    key = snapshot.read_snapshot()["pages"]["key"]
    client = redis.Redis.from_url(redis_url)
    assert client.hget(key, f"d:{org}") is None
    client.hdel(key, f"due:{org}")
    real_hset(client, key, f"d:{org}", json.dumps(want))
    assert snapshot.read_due(int(org)) == want and snapshot.read_due(int(org), limit=5) == want[:5]


def test_a_newer_snapshot_replaces_the_pages_and_the_old_ones_expire(redis_url):
    import redis

    live = LiveState(world(50))
    first = snapshot.store(*build_snapshot(live, live.capture().eta_report(T0), T0))
    old = snapshot.read_snapshot()
    second = snapshot.store(*build_snapshot(live, live.capture().eta_report(T0 + 1), T0 + 1))
    assert second == first + 1
    client = redis.Redis.from_url(redis_url)
    assert 0 < client.ttl(old["pages"]["key"]) <= snapshot.OLD_PAGES_TTL_S
    client.delete(old["pages"]["key"])  # expired: a reader holding the old snapshot gets the latest
    assert snapshot.read_order(0, 5, snapshot=old)[1] == snapshot.read_order(0, 5)[1] != []


# --- the lease is renewed whatever the loop does ---------------------------------------------


def test_the_lease_is_renewed_while_the_loop_is_blocked(redis_url):
    """A loop busy with CPU work (a big resync) for longer than the lease term used to
    lose the lease ("lease renewed again: dispatch resumes"): the keeper is a thread now."""
    s = scheduler(redis_url=redis_url, lease_ttl_s=1.0)

    async def go() -> tuple[bool, bool]:
        lease = s.leadership.lease  # the Redis lease port
        assert await lease.acquire()
        s.leading = True
        s.leadership.ok_until = time.monotonic() + s.LEASE_TTL_S
        keeper = asyncio.create_task(s.leadership.keep_lease())
        await asyncio.sleep(0.05)
        time.sleep(3 * s.LEASE_TTL_S)  # the loop is blocked: no task runs
        may = s.may_dispatch()
        held = await lease.holder() == lease.token
        keeper.cancel()
        await asyncio.gather(keeper, return_exceptions=True)
        await lease.aclose()
        return may, held

    may, held = asyncio.run(go())
    assert held and may
    assert not s.leadership.lost


def test_a_renewal_in_flight_when_the_stop_releases_the_lease_cannot_take_it_back(redis_url, monkeypatch):
    """CI saw the lease outlive a stopped scheduler: the keeper had passed its checks, the
    stop released the lease, then the keeper's renewal found it gone and took it again
    (``acquire_sync``'s SET NX). The keeper is held inside its renewal here while the
    stop releases; the lease must be gone once both are done."""
    import threading

    import redis

    from fairsched.engine.ports.lease import Lease

    s = scheduler(redis_url=redis_url, lease_ttl_s=1.0)
    s.leadership.started = True  # as run() does: there is a lease to release
    lease = s.leadership.lease.lease  # the Lease behind the Redis lease port
    assert lease.acquire_sync(redis.Redis.from_url(redis_url))
    in_renewal, go_on = threading.Event(), threading.Event()
    real = Lease.acquire_sync

    def held_renewal(self, client):
        in_renewal.set()
        assert go_on.wait(10)
        return real(self, client)

    monkeypatch.setattr(Lease, "acquire_sync", held_renewal)

    async def go() -> None:
        keeper = asyncio.create_task(s.leadership.keep_lease())
        assert await asyncio.to_thread(in_renewal.wait, 10)
        threading.Timer(0.3, go_on.set).start()   # the renewal goes on while the stop releases
        await asyncio.to_thread(s.leadership.close_lease, 5.0)
        s.leadership.gen += 1
        keeper.cancel()
        await asyncio.gather(keeper, return_exceptions=True)

    asyncio.run(go())
    time.sleep(2 * s.LEASE_RENEW_S)   # a keeper still running would renew by now
    assert redis.Redis.from_url(redis_url).get(lease.key) is None


# --- incremental resync and its safety net ---------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_incremental_resync_reads_changes_and_the_full_pass_catches_raw_writes():
    org = make_org("Acme")
    wf = make_workflow("code")
    ids = [make_chart(org, wf, external_id=f"c{i}").pk for i in range(8)]
    s = scheduler()
    s.RESYNC_OVERLAP_S = 0.0  # no overlap: what the watermark alone misses
    s.FULL_RESYNC_CHUNK = 3
    s.state = LiveState(db.read_world())
    assert len(s.state.queue) == 8

    # A bulk ORM update that sets updated_at (as every service does): the next incremental read has it.
    Chart.objects.filter(pk__in=ids[:2]).update(paused=True, updated_at=timezone.now())
    asyncio.run(s.sync.resync())
    assert set(s.state.queue.paused) == {str(ids[0]), str(ids[1])}

    # QuerySet.update() leaves auto_now alone, and so does raw SQL: the incremental read misses
    # them (by design: O(changes)); the chunked full pass is the safety net.
    Chart.objects.filter(pk=ids[2]).update(priority=True, prioritized_at=timezone.now())
    with connection.cursor() as cur:
        cur.execute("UPDATE charts_chart SET state = 'cancelled' WHERE id = %s", [ids[3]])
        cur.execute("DELETE FROM charts_chart WHERE id = %s", [ids[4]])
    asyncio.run(s.sync.resync())
    assert str(ids[3]) in s.state.queue and str(ids[4]) in s.state.queue
    s.sync.request_full_resync()
    steps = 0
    while s.sync.full_resync_wanted(s.clock.monotonic()):
        asyncio.run(s.sync.full_resync_step())
        steps += 1
    assert steps == 3  # 6 active charts, 3 per chunk, then the last (short) read
    assert str(ids[3]) not in s.state.queue and str(ids[4]) not in s.state.queue
    assert s.state.queue.get(str(ids[2])).priority
    assert s.state.queue.order()[0] == str(ids[2])


def assert_searches_updated_id(queries) -> None:
    """The charts' query among ``queries`` searches the ``chart_updated_id`` index, never
    the whole table."""
    sql, = [q["sql"] for q in queries.captured_queries if 'FROM "charts_chart"' in q["sql"]]
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute(f"EXPLAIN QUERY PLAN {sql}")
            plan = " ".join(str(row[-1]) for row in cur.fetchall())
            assert "USING INDEX chart_updated_id" in plan and "SCAN charts_chart" not in plan, plan
        else:  # a test table is tiny: a sequential scan would win on cost alone
            with transaction.atomic():
                cur.execute("SET LOCAL enable_seqscan = off")
                cur.execute(f"EXPLAIN {sql}")
                plan = " ".join(row[0] for row in cur.fetchall())
            assert "chart_updated_id" in plan, plan


@pytest.mark.django_db
def test_the_incremental_resync_reads_in_chunks_every_changed_chart_once_through_the_updated_at_index():
    """A resync after a bulk import or at a take-over reads a chunk a tick: keyset
    pagination by ``(updated_at, id)``, ties included (a bulk write gives many rows one
    ``updated_at``), each chart exactly once, through the index."""
    from django.test.utils import CaptureQueriesContext

    org, wf = make_org("Acme"), make_workflow("code")
    ids = [make_chart(org, wf).pk for _ in range(7)]
    Chart.objects.filter(pk__in=ids[2:6]).update(updated_at=timezone.now())  # four rows tie
    since = timezone.now() - timedelta(minutes=1)
    got, after, chunks = [], None, 0
    while True:
        with CaptureQueriesContext(connection) as queries:
            changes = db.read_changes(since, after, 3)
        got += [r.id for r in changes.charts]
        chunks += 1
        if changes.more is None:
            break
        after = changes.more
    assert sorted(got) == ids and len(got) == len(set(got)) and chunks == 3  # 3 + 3 + 1
    assert_searches_updated_id(queries)


@pytest.mark.django_db
def test_the_incremental_resync_searches_the_updated_at_index_never_the_whole_table():
    """Every few seconds, even with nothing changing: at a million charts a scan of the
    table was most of an idle scheduler's CPU (SQLite chose it for ``ORDER BY id``)."""
    from django.test.utils import CaptureQueriesContext

    org, wf = make_org("Acme"), make_workflow("code")
    for _ in range(3):
        make_chart(org, wf)
    with CaptureQueriesContext(connection) as queries:
        changes = db.read_changes(timezone.now() - timedelta(minutes=1))
    assert len(changes.charts) == 3
    assert_searches_updated_id(queries)


# --- worker concurrency follows the budget ------------------------------------------------------


def test_worker_concurrency_comes_from_the_setting(temporal_address, settings):
    """temporalio's default (100 activities) left charts past the 100th of a budget holding
    budget while their activity waited for a slot."""
    from temporalio.client import Client

    from fairsched.temporal.worker import build_worker

    settings.FAIRSCHED_WORKER_CONCURRENCY = 321

    async def go() -> int:
        client = await Client.connect(temporal_address)
        worker = build_worker(client, "q-concurrency")
        return worker._config["max_concurrent_activities"]

    assert asyncio.run(go()) == 321


def test_a_bad_worker_concurrency_is_refused_naming_the_variable():
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env["FAIRSCHED_WORKER_CONCURRENCY"] = "0"
    out = subprocess.run([sys.executable, "manage.py", "check"], cwd=Path(__file__).resolve().parent.parent,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "FAIRSCHED_WORKER_CONCURRENCY: must be at least 1, got 0" in out.stderr


# --- scheduler-owned columns are written in one prepared statement -----------------------------


@pytest.mark.django_db(transaction=True)
def test_first_etas_and_rounds_are_written_where_due():
    from datetime import datetime, timezone as tz

    from scheduling import RoundState

    org = make_org("Acme")
    wf = make_workflow("code")
    a, b, c = (make_chart(org, wf).pk for _ in range(3))
    earlier = datetime(2026, 1, 1, tzinfo=tz.utc)
    Chart.objects.filter(pk=b).update(eta_first_at=earlier)
    assert db.record_first_etas({a: (T0, T0 + 10), b: (T0 + 1, T0 + 11), c: (T0 + 2.5, T0 + 12.5)}) == 2
    got = dict(Chart.objects.filter(pk__in=[a, b, c]).values_list("pk", "eta_first_at"))
    assert got == {a: datetime.fromtimestamp(T0, tz.utc), b: earlier, c: datetime.fromtimestamp(T0 + 2.5, tz.utc)}
    p90 = dict(Chart.objects.filter(pk__in=[a, b, c]).values_list("pk", "eta_p90_at"))
    assert p90[a] == datetime.fromtimestamp(T0 + 10, tz.utc) and p90[c] == datetime.fromtimestamp(T0 + 12.5, tz.utc)
    assert p90[b] is None  # a bound is recorded with its first ETA only, never beside an earlier one
    db.save_rounds(RoundState(3, 2, {}), {str(a): 4, str(b): None, str(c): 7})
    assert dict(Chart.objects.filter(pk__in=[a, b, c]).values_list("pk", "fair_round")) == {a: 4, b: None, c: 7}


def test_a_snapshot_the_live_scheduler_confirms_stays_live(redis_url):
    """A static backlog is not re-published every few seconds; the scheduler confirms its
    latest snapshot each second instead, and only a stopped scheduler's turns stale."""
    import redis

    from charts import selectors

    live = LiveState(world(20))
    old = time.time() - 600
    seq = snapshot.store(*build_snapshot(live, live.capture().eta_report(old), old))
    assert selectors.read_snapshot_with_age()[2] is True  # ten minutes old: stale
    client = redis.Redis.from_url(redis_url)
    client.set(snapshot.CURRENT_KEY, snapshot.current_value(seq - 1, time.time()))  # another snapshot's
    assert selectors.read_snapshot_with_age()[2] is True
    client.set(snapshot.CURRENT_KEY, snapshot.current_value(seq, time.time()))
    s, age, stale = selectors.read_snapshot_with_age()
    assert not stale and age < 60 and s["seq"] == seq


# --- the admin chart list does not scan the table ------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["", "?state__exact=queued", "?org__id__exact=1&state__exact=queued"],
                         ids=["all", "state", "org-and-state"])
def test_the_admin_chart_list_never_counts_or_scans_every_row(admin_client, query):
    from django.test.utils import CaptureQueriesContext

    org = make_org("Acme")
    wf = make_workflow("code")
    for _ in range(3):
        make_chart(org, wf)
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(f"/admin/charts/chart/{query}", secure=True)
    assert response.status_code == 200
    charts = [q["sql"] for q in queries.captured_queries if '"charts_chart"' in q["sql"]]
    counts = [sql for sql in charts if "COUNT(" in sql]
    assert counts and all("LIMIT 10000" in sql for sql in counts), counts
    assert not [sql for sql in charts if "DISTINCT" in sql or "MIN(" in sql], charts  # no date drill-down


@pytest.mark.django_db
def test_the_full_pass_chunks_walk_every_active_chart_once_in_pk_order():
    """Chunks of the full resync: queued and running charts interleaved by pk, final ones
    skipped; the chunks together give each active chart once, in pk order."""
    org, wf = make_org("Acme"), make_workflow("code")
    states = ["queued", "running", "succeeded", "queued", "queued", "running", "failed", "running", "queued"] * 3
    charts = [make_chart(org, wf, state=s) for s in states]
    active = [c.pk for c in charts if c.state in ("queued", "running")]
    seen, after = [], 0
    while chunk := db.read_active_chunk(after, 4):
        assert len(chunk) <= 4
        seen += [r.id for r in chunk]
        after = chunk[-1].id
    assert seen == active


def random_charts(seed: int, extra) -> None:
    """60 charts in three orgs, with ties of creation times, paused, priority, running and
    finished ones; ``extra(rng, i, t0)``: more fields of chart ``i``."""
    import random

    rng = random.Random(seed)
    orgs, wf = [make_org(f"Org {i}") for i in range(3)], make_workflow("code")
    t0 = timezone.now() - timedelta(hours=1)
    for i in range(60):
        make_chart(rng.choice(orgs), wf, created_at=t0 + timedelta(seconds=rng.randint(0, 20)),
                   state=rng.choice(["queued"] * 6 + ["running", "succeeded"]),
                   priority=rng.random() < 0.1, paused=rng.random() < 0.1, **extra(rng, i, t0))


@pytest.mark.django_db
@pytest.mark.parametrize("per_org", [1, 3, 100])
def test_the_head_read_from_the_database_is_what_the_core_picks(per_org):
    """``db.read_head`` (a few indexed queries per org) returns the very charts, horizon and
    truncated orgs that ``head_of_backlog`` picks from the whole backlog: priority charts,
    charts moved to the front without a round, each org's first ``per_org`` with a round by
    (round, created_at, id) and first ``per_org`` without one by (created_at, id), with ties
    of rounds and of creation times, paused charts and running ones."""
    from scheduling import RoundState, head_of_backlog

    random_charts(per_org, lambda rng, i, t0: {
        "fair_round": rng.choice([None, None, 0, 1, 1, 2, 3, 5]),
        "moved_to_front_at": t0 + timedelta(seconds=i) if rng.random() < 0.05 else None})
    assert db.read_head(per_org) is None  # no round state saved, yet charts hold rounds: the whole first
    db.save_rounds(RoundState(0, 1, {}), {})
    head = db.read_head(per_org)
    world = db.read_world()
    queued = [r.queued_chart(with_round=True) for r in world.charts if r.state == "queued"]
    want, horizon, truncated = head_of_backlog(queued, per_org)
    assert sorted(r.id for r in head.world.charts if r.state == "queued") == sorted(int(c.id) for c in want)
    assert [r.id for r in head.world.charts if r.state == "running"] == \
        [r.id for r in world.charts if r.state == "running"]
    assert head.horizon == horizon and head.truncated == truncated
    assert (horizon is None and not truncated) == (per_org == 100) == (not head.whole_wanted)


@pytest.mark.django_db
@pytest.mark.parametrize("per_org", [1, 3, 100])
def test_a_first_starts_head_read_from_the_database_is_what_the_core_picks(per_org):
    """No round state saved: ``db.read_head`` returns the charts ``first_head_of_backlog``
    picks from the whole backlog (priority charts, charts moved to the front, each org's
    first ``per_org`` others by (created_at, id), with ties of creation times, paused and
    running charts) and the orgs cut short. A queued chart that holds a round anyway (a
    round state deleted by hand) makes it rank the whole backlog instead."""
    from scheduling import first_head_of_backlog

    random_charts(per_org, lambda rng, i, t0: {
        "moved_to_front_at": t0 + timedelta(seconds=i) if rng.random() < 0.05 else None})
    head = db.read_head(per_org)
    world = db.read_world()
    want, truncated = first_head_of_backlog([r.queued_chart() for r in world.charts if r.state == "queued"], per_org)
    assert head.world.rounds is None and head.horizon is None
    assert sorted(r.id for r in head.world.charts if r.state == "queued") == sorted(int(c.id) for c in want)
    assert [r.id for r in head.world.charts if r.state == "running"] == \
        [r.id for r in world.charts if r.state == "running"]
    assert head.truncated == truncated and head.whole_wanted == (per_org != 100)
    Chart.objects.filter(state="queued", priority=False).update(fair_round=3)
    assert db.read_head(per_org) is None


@pytest.mark.django_db(transaction=True)
def test_the_streamed_read_is_one_snapshot_and_never_blocks_a_writer():
    """While the start-up read is between the head and the whole backlog, another
    connection creates a chart and dispatches one (a write each, at once: no write lock is
    held by the read); the whole backlog read then is still the snapshot the head was read
    from (neither write is in it)."""
    import threading as th

    from scheduling import RoundState

    org, wf = make_org("Acme"), make_workflow("code")
    a, b = make_chart(org, wf), make_chart(org, wf)
    db.save_rounds(RoundState(0, 1, {}), {})
    wrote: dict[str, float] = {}

    def write_elsewhere():
        from django.db import connection as conn
        try:
            t = time.monotonic()
            make_chart(org, wf)
            Chart.objects.filter(pk=a.pk).update(state="running")
            wrote["s"] = time.monotonic() - t
        finally:
            conn.close()

    def on_head(head):
        assert [r.id for r in head.world.charts] == [a.pk] and head.truncated == {str(org.pk)}  # 1 an org
        t = th.Thread(target=write_elsewhere)
        t.start()
        t.join(20)
        return True  # the whole backlog too

    result: dict = {}

    def read():
        result["world"] = db.read_streamed(1, on_head)

    reader = th.Thread(target=read)  # a thread of its own, as the scheduler runs it
    reader.start()
    reader.join(30)
    assert wrote["s"] < 2.0  # not the 30 s busy timeout: the read took no write lock
    world = result["world"]
    assert {(r.id, r.state) for r in world.charts} == {(a.pk, "queued"), (b.pk, "queued")}
    assert Chart.objects.count() == 3 and Chart.objects.get(pk=a.pk).state == "running"


def charts_updated() -> int:
    """(PostgreSQL) Row versions the charts' table has been updated by, this backend's now."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")  # (PostgreSQL 15+)
        cursor.execute("SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'charts_chart'::regclass")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_a_backfills_chunk_writes_the_first_etas_it_carries_in_the_update_of_the_rounds():
    """A first start's backfill carries its charts' first ETAs (EtaPasses.carried_firsts):
    the UPDATE that writes a chart's round sets its first ETA and bound too, where none is
    recorded (one new row version a chart on PostgreSQL, not two); a chart that has one
    keeps it and its bound, a chart the chunk carries none for keeps none."""
    from datetime import datetime, timezone as tz

    from scheduling import RoundState

    org, wf = make_org("Acme"), make_workflow("code")
    pks = [make_chart(org, wf).pk for _ in range(50)]
    promised = pks[0]
    db.record_first_etas({promised: (T0, T0 + 30)})
    before = charts_updated() if connection.vendor == "postgresql" else 0
    db.save_rounds(RoundState(0, 1, {}), {str(pk): 7 for pk in pks}, None,
                   {pk: (T0 + pk, T0 + pk + 60) for pk in pks[:40]})
    at = lambda s: datetime.fromtimestamp(s, tz=tz.utc)  # noqa: E731
    rows = {pk: rest for pk, *rest in Chart.objects.values_list("pk", "fair_round", "eta_first_at", "eta_p90_at")}
    assert rows[promised] == [7, at(T0), at(T0 + 30)]
    assert all(rows[pk] == [7, at(T0 + pk), at(T0 + pk + 60)] for pk in pks[1:40]), rows
    assert all(rows[pk] == [7, None, None] for pk in pks[40:]), rows
    if connection.vendor == "postgresql":
        assert charts_updated() - before == 50


@pytest.mark.django_db(transaction=True)
def test_a_first_eta_and_its_bound_are_written_as_one_new_version_of_each_row():
    """A first start at 1M records a million first ETAs beside the backfill's rounds: both
    columns in one UPDATE, one new row version a chart (two made twice the writes)."""
    if connection.vendor != "postgresql":
        pytest.skip("row versions counted by PostgreSQL's statistics")
    org, wf = make_org("Acme"), make_workflow("code")
    pks = [make_chart(org, wf).pk for _ in range(50)]
    updated = charts_updated
    before = updated()
    assert db.record_first_etas({pk: (T0 + pk, T0 + pk + 60) for pk in pks}) == 50
    assert updated() - before == 50
    assert db.record_first_etas({pk: (T0, T0) for pk in pks}) == 0  # recorded already: no new version
    assert updated() - before == 50


@pytest.mark.django_db(transaction=True)
def test_the_rounds_and_the_first_etas_written_at_once_never_deadlock():
    """A first start writes its rounds (the scheduler's connection) while the first ETAs
    are recorded (a thread and connection of their own), over the same rows. On
    PostgreSQL each took its row locks in its own order and deadlocked; both now update in
    id order. (SQLite serialises writers: nothing to see there.)"""
    import random
    import threading

    from django.db import connections

    from scheduling import RoundState

    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL only")
    org, wf = make_org("Acme"), make_workflow("code")
    Chart.objects.bulk_create([Chart(org=org, workflow=wf, external_id=f"d{i}") for i in range(3000)])
    ids = list(Chart.objects.order_by("pk").values_list("pk", flat=True))
    rng = random.Random(3)
    parts = [ids[i:i + 600] for i in range(0, 3000, 600)]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def rounds():
        try:
            for part in parts:
                barrier.wait(timeout=30)
                db.save_rounds(RoundState(0, 1, {}), {str(pk): 1 for pk in rng.sample(part, len(part))})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    def first_etas():
        try:
            for part in parts:
                barrier.wait(timeout=30)
                db.record_first_etas({pk: (T0, T0 + 60) for pk in reversed(part)})
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=rounds), threading.Thread(target=first_etas)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert Chart.objects.filter(fair_round=1, eta_first_at__isnull=False).count() == 3000
