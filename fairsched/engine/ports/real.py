"""The real clock, store and publisher of the live scheduler (the ports:
:mod:`fairsched.engine.ports.protocols`).

* :class:`SystemClock`: :func:`time.monotonic`, :func:`time.time`, real sleeps.
* :class:`DbStore`: the database functions of :mod:`fairsched.engine.store.db`, each run in
  the one database thread (``sync_to_async(thread_sensitive=True)``), as the scheduler
  always has; the round writes and the background reads in threads of their own.
* :class:`LivePublisher`: :mod:`common.snapshot` in Redis and the dashboards' live updates.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterable
from typing import Any

import redis
import redis.asyncio as aredis
from asgiref.sync import sync_to_async

from common import live_updates
from common import snapshot as snapshot_store
from scheduling import RoundState
from fairsched.engine.store import db, pg_statistics
from fairsched.engine.store.rows import World

log = logging.getLogger("fairsched.engine")


class SystemClock:
    """The real clock: :func:`time.monotonic` and :func:`time.time`, real sleeps."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def sleep_blocking(self, seconds: float) -> None:
        time.sleep(seconds)

    async def wait(self, event: asyncio.Event, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(event.wait(), timeout=timeout_s)
        except asyncio.TimeoutError:
            return False
        return True

    async def wait_tasks(self, tasks: Iterable[asyncio.Future], timeout_s: float) -> bool:
        tasks = set(tasks)
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        return not pending

    async def wait_for(self, awaitable: Any, timeout_s: float) -> Any:
        return await asyncio.wait_for(awaitable, timeout=timeout_s)


def _in_db_thread(name: str) -> Callable:
    """A method running ``db.<name>`` in the one database thread (looked up at call time)."""

    async def method(self, *args, **kwargs):
        return await sync_to_async(getattr(db, name), thread_sensitive=True)(*args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"``db.{name}`` in the database thread."
    return method


_BACKGROUND_DB: list[ThreadPoolExecutor] = []
_ROUNDS_DB: list[ThreadPoolExecutor] = []


def _background_db() -> ThreadPoolExecutor:
    """One thread (so one database connection) for the scheduler's bulk writes that dispatch
    must not wait behind: the first ETAs."""
    if not _BACKGROUND_DB:
        _BACKGROUND_DB.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="fairsched-db-bulk"))
    return _BACKGROUND_DB[0]


def _rounds_db() -> ThreadPoolExecutor:
    """One thread (so one database connection) for the backfill's chunks, which the loop
    does not wait for (``Scheduler.backfill_step``); one at a time."""
    if not _ROUNDS_DB:
        _ROUNDS_DB.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="fairsched-db-rounds"))
    return _ROUNDS_DB[0]


def in_daemon_thread(fn: Callable[..., Any], *args: Any, name: str = "fairsched-loader", **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a new daemon thread; an awaitable of its result. Daemon:
    a stop never waits for it (the executor's threads are joined at exit, and a million-chart
    read or build takes seconds). The result is dropped if nobody awaits it any more."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(result: Any, exc: BaseException | None) -> None:
        if not future.done():
            (future.set_exception(exc) if exc is not None else future.set_result(result))

    def run() -> None:
        try:
            result, exc = fn(*args, **kwargs), None
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting loop
            result, exc = None, e
        try:
            loop.call_soon_threadsafe(settle, result, exc)
        except RuntimeError:  # the loop is closed: the process is stopping
            pass

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def _save_rounds_swept(state: RoundState, changes: dict[str, int | None], work: Any,
                       orgs: list[int] | None = None, firsts: dict[int, tuple[float, float]] | None = None) -> None:
    """A backfill's chunk written (with the first ETAs it carries), then the index entries
    its rows left dead swept (``pg_statistics.sweep_unrounded_heads``: a restart's head
    read skips them)."""
    db.save_rounds(state, changes, work, firsts)
    pg_statistics.sweep_unrounded_heads(orgs)


def _vacuum_after_backfill() -> bool:
    from django.db import connection

    try:
        return pg_statistics.vacuum_after_backfill()
    finally:
        connection.close()  # this thread's own connection, which nothing else will use


class DbStore:
    """The real store: :mod:`fairsched.engine.store.db`, one call at a time in the database thread,
    but for the start-up's streamed read (a thread and a connection of its own)."""

    read_world = _in_db_thread("read_world")

    async def read_streamed(self, per_org: int, on_head: Callable[[db.Head | None], bool]) -> World | None:
        """``db.read_streamed`` in a thread of its own: ``on_head`` is called there with the
        head of the order (None: none to start from); it says whether the whole backlog
        must be read too (else this returns None)."""
        return await in_daemon_thread(db.read_streamed, per_org, on_head)

    def start_vacuum_after_backfill(self) -> None:
        """``pg_statistics.vacuum_after_backfill`` in a daemon thread and connection of its own,
        not awaited: seconds at 1M, which neither dispatch nor a warm stop waits for (a stop
        ends the thread; PostgreSQL drops the vacuum with its connection)."""
        threading.Thread(target=_vacuum_after_backfill, name="fairsched-vacuum", daemon=True).start()

    recent_arrivals = _in_db_thread("recent_arrivals")
    recent_durations = _in_db_thread("recent_durations")
    recent_promises = _in_db_thread("recent_promises")
    recorded_first_etas = _in_db_thread("recorded_first_etas")

    async def record_first_etas(self, etas: dict[int, tuple[float, float]]) -> int:
        """``db.record_first_etas`` in a thread and connection of its own: a first start
        records a million first ETAs, and dispatch must not queue behind them on the
        database thread (on PostgreSQL they never meet; on SQLite a dispatch's write waits
        at most for the one short write in flight)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_background_db(), db.record_first_etas, etas)

    async def save_rounds_aside(self, state: RoundState, changes: dict[str, int | None],
                                work: dict[str, tuple[float | None, float | None]] | None = None,
                                orgs: Iterable[int] | None = None,
                                firsts: dict[int, tuple[float, float]] | None = None) -> None:
        """``db.save_rounds`` in a thread and connection of its own: a backfill's chunk (100-230
        ms on PostgreSQL at 1M charts), which the loop's reads, and the starts they lead to,
        need not wait behind on the database thread. The loop makes every other round-state
        write after it has committed (``Scheduler.rounds_settled``). Then the index entries it
        left dead are swept, for the chunk's ``orgs`` (None: every org). ``firsts``: the
        first ETAs the chunk carries (``EtaPasses.carried_firsts``)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_rounds_db(), _save_rounds_swept, state, changes, work,
                                          None if orgs is None else sorted(orgs), firsts)

    async def record_due_alerts(self, levels: dict[int, int], rose: list[int], at: float) -> int:
        """``db.record_due_alerts`` beside the first ETAs (few rows: the warnings that moved)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_background_db(), db.record_due_alerts, levels, rose, at)
    read_config = _in_db_thread("read_config")
    read_orgs = _in_db_thread("read_orgs")
    read_costs = _in_db_thread("read_costs")
    read_changes = _in_db_thread("read_changes")
    read_active_chunk = _in_db_thread("read_active_chunk")
    read_charts = _in_db_thread("read_charts")
    read_for_start = _in_db_thread("read_for_start")
    mark_running = _in_db_thread("mark_running")
    fail_start = _in_db_thread("fail_start")
    record_outcomes = _in_db_thread("record_outcomes")
    requeue = _in_db_thread("requeue")
    deployment = _in_db_thread("deployment")
    legacy_active = _in_db_thread("legacy_active")
    save_rounds = _in_db_thread("save_rounds")


class LivePublisher:
    """The real publisher: :mod:`common.snapshot` in Redis, and the live updates to open
    pages (:mod:`common.live_updates`, the one send path). It confirms the snapshot with
    an asyncio Redis client of its own (made on first use, in the loop)."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url
        self._client: aredis.Redis | None = None
        self._store_client: tuple[int, redis.Redis] | None = None  # (pid, client) the passes store with

    def _redis(self) -> aredis.Redis:
        if self._client is None:
            self._client = aredis.Redis.from_url(self.redis_url, socket_timeout=2, socket_connect_timeout=1)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    def store_snapshot(self, snap: dict, rows: list[dict], per_org: dict) -> int:
        return snapshot_store.store(snap, rows, per_org, client=self._client_here())

    def _client_here(self) -> redis.Redis:
        """A Redis client made in this process, for the pass: a forked child makes its own
        after the fork. The shared client (``common.notify``) sits behind a lock that
        the database thread takes to notify; a fork while it held it left the lock held
        in the child for ever, and the pass hung until it was killed."""
        pid = os.getpid()
        if self._store_client is None or self._store_client[0] != pid:
            self._store_client = (pid, redis.Redis.from_url(self.redis_url, socket_timeout=2,
                                                            socket_connect_timeout=1, health_check_interval=30))
        return self._store_client[1]

    async def snapshot_stored(self, seq: int) -> None:
        await live_updates.asend(live_updates.SnapshotStored(seq=seq))

    async def confirm_snapshot(self, seq: int, at: float) -> None:
        try:
            await self._redis().set(snapshot_store.CURRENT_KEY, snapshot_store.current_value(seq, at),
                                    ex=snapshot_store.TTL_S)
        except (redis.RedisError, OSError) as exc:
            log.debug("cannot confirm the snapshot: %s", exc)

    async def event(self, event: dict, counters: dict) -> None:
        """One of the scheduler's events (a wire dict of :mod:`common.live_updates`); one
        that does not parse is logged and dropped: a page hiccup never stops the scheduler."""
        try:
            typed = live_updates.event_from_wire(event)
        except ValueError as exc:
            log.warning("live update not sent: %s", exc)
            return
        await live_updates.asend(typed, counters)
