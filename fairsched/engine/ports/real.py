"""What the live scheduler (:mod:`fairsched.engine.scheduler`) talks to, as six small ports.

The scheduler takes each in its constructor; the defaults here are the real ones, so
``runscheduler`` builds exactly what it always ran. Tests hand it fakes instead
(``tests/test_tick.py``: no Temporal, no Redis, a clock they move by hand).

* :class:`Clock`: ``monotonic()`` for every interval, deadline and backoff; ``time()``
  (epoch seconds) for what is written down or published; and every wait: ``sleep()``,
  ``sleep_blocking()`` (in a thread), ``wait()`` (an event, at most so long).
* :class:`Store`: the database functions of :mod:`fairsched.engine.db` the scheduler
  calls. :class:`DbStore` runs each in the one database thread
  (``sync_to_async(thread_sensitive=True)``), as the scheduler always has.
* :class:`Publisher`: the snapshot store (store a pass's snapshot, confirm the last one
  is current) and the dashboards' live updates (a snapshot was stored, an event).
* :class:`TemporalPort`: the Temporal calls, by chart id: start, outcome (describe),
  describe, cancel, terminate, wait for the result, list the running chart workflows.
  Errors are the port's own (:mod:`fairsched.engine.temporal_port`, which classifies
  Temporal's): ``WorkflowNotFound``, ``AlreadyStarted``, ``TemporalError``, ``StartFailed``.
* :class:`LeasePort`: the one-active-scheduler lease (acquire, renew from the keeper's
  thread, release for good, who holds it).
* :class:`NotificationSource`: the scheduler's notifications (:mod:`common.notify`), one
  subscription at a time.

The lease and the notifications are Redis (:mod:`fairsched.engine.redis_ports`); a port
that cannot reach its service raises :class:`Unavailable`.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import AsyncIterator, Callable, Container, Iterable
from datetime import datetime
from typing import Any, Protocol

import redis
import redis.asyncio as aredis
from asgiref.sync import sync_to_async

from common import live_updates
from common.notify import Note
from common import snapshot as snapshot_store
from fairsched.core import RoundState
from fairsched.engine import db, pg_statistics
from fairsched.engine.rows import ChartRow, Config, OrgRow, World
from fairsched.temporal.client import Outcome
from fairsched.temporal.shared import ChartInput, WorkflowIds

log = logging.getLogger("fairsched.engine")


# ==================================================================== clock
class Clock(Protocol):
    def monotonic(self) -> float: ...
    def time(self) -> float: ...
    async def sleep(self, seconds: float) -> None: ...
    def sleep_blocking(self, seconds: float) -> None:
        """Sleep in a thread of its own (the lease keeper)."""
    async def wait(self, event: asyncio.Event, timeout_s: float) -> bool:
        """Wait for ``event``, at most ``timeout_s``: True if it was set."""
    async def wait_tasks(self, tasks: Iterable[asyncio.Future], timeout_s: float) -> bool:
        """Wait for ``tasks`` to end, at most ``timeout_s``: True if they all did."""
    async def wait_for(self, awaitable: Any, timeout_s: float) -> Any:
        """``await awaitable``, at most ``timeout_s`` (``asyncio.TimeoutError`` past it)."""


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


class Unavailable(Exception):
    """A port's service (Redis) does not answer: retry later."""


# ==================================================================== store
class Store(Protocol):
    async def read_world(self) -> World: ...
    async def read_streamed(self, per_org: int, on_head: Callable[[db.Head | None], bool]) -> World | None: ...
    async def recent_arrivals(self) -> list[tuple[str, str, float]]: ...
    async def recent_durations(self) -> list[tuple[str, str, float]]: ...
    async def recent_promises(self) -> list[tuple[float, float, float]]: ...
    async def recorded_first_etas(self) -> set[int]: ...
    async def record_first_etas(self, etas: dict[int, tuple[float, float]]) -> int: ...
    async def record_due_alerts(self, levels: dict[int, int], rose: list[int], at: float) -> int: ...
    async def read_config(self) -> Config: ...
    async def read_orgs(self, ids: Iterable[int] | None = None) -> list[OrgRow]: ...
    async def read_costs(self) -> dict[tuple[str, str], int]: ...
    async def read_changes(self, since: datetime | None, after: tuple[datetime, int] | None = None,
                           limit: int | None = None) -> db.Changes: ...
    async def read_active_chunk(self, after_pk: int, limit: int) -> list[ChartRow]: ...
    async def read_charts(self, ids: Iterable[int], known_orgs: Container[int] = ()) -> tuple[dict[int, ChartRow], list[OrgRow]]: ...
    async def read_for_start(self, ids: Iterable[int]) -> dict[int, db.StartRow]: ...
    async def mark_running(self, items: list[tuple], rounds: Any = None) -> dict[int, bool]: ...
    async def fail_start(self, chart_id: int, error: str) -> bool: ...
    async def record_outcome(self, chart_id: int, state: str, error: str, started_at: datetime | None,
                             finished_at: datetime | None, run_id: str) -> bool: ...
    async def requeue(self, chart_id: int, reason: str) -> bool: ...
    async def deployment(self) -> WorkflowIds:
        """This deployment's workflow ids (the legacy cut fixed once: the scheduler leads)."""
    async def legacy_active(self, ids: WorkflowIds) -> bool:
        """Is a queued or running chart one that keeps its legacy id ``chart-<pk>``?"""
    async def save_rounds(self, state: RoundState, changes: dict[str, int | None],
                          work: dict[str, tuple[float | None, float | None]] | None = None) -> None: ...
    async def save_rounds_aside(self, state: RoundState, changes: dict[str, int | None],
                                work: dict[str, tuple[float | None, float | None]] | None = None,
                                orgs: Iterable[int] | None = None,
                                firsts: dict[int, tuple[float, float]] | None = None) -> None: ...
    def start_vacuum_after_backfill(self) -> None: ...


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
    does not wait for (``Scheduler._backfill_step``); one at a time."""
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
    """The real store: :mod:`fairsched.engine.db`, one call at a time in the database thread,
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
    record_outcome = _in_db_thread("record_outcome")
    requeue = _in_db_thread("requeue")
    deployment = _in_db_thread("deployment")
    legacy_active = _in_db_thread("legacy_active")
    save_rounds = _in_db_thread("save_rounds")


# ==================================================================== publisher
class Publisher(Protocol):
    def store_snapshot(self, snap: dict, rows: list[dict], per_org: dict) -> int:
        """Store a pass's snapshot (called in the pass's thread); its sequence number."""
    async def snapshot_stored(self, seq: int) -> None:
        """Tell the dashboards a new snapshot is stored."""
    async def confirm_snapshot(self, seq: int, at: float) -> None:
        """Say snapshot ``seq`` is still this live scheduler's latest (``at``: epoch seconds)."""
    async def event(self, event: dict, counters: dict) -> None:
        """One live-update event, with the current counters."""


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
            typed = live_updates.from_wire(event)
        except ValueError as exc:
            log.warning("live update not sent: %s", exc)
            return
        await live_updates.asend(typed, counters)


# ==================================================================== Temporal
class TemporalPort(Protocol):
    async def connect(self) -> None:
        """Connect (retrying until it can); called when the scheduler starts leading."""
    async def start(self, *, temporal_type: str, task_queue: str, chart: ChartInput,
                    execution_timeout_s: int) -> str:
        """Start (or find: USE_EXISTING) the chart's workflow (``ids.of``); its run id. Raises
        ``AlreadyStarted`` if it already closed (REJECT_DUPLICATE), ``StartFailed`` (judged)
        if it did not start."""
    async def outcome(self, chart_id: int) -> Outcome | None:
        """How the chart's workflow ended, None while it runs (``WorkflowNotFound``: unknown)."""
    async def describe(self, chart_id: int) -> None:
        """Raises ``WorkflowNotFound`` when Temporal does not know the workflow, ``TemporalError``."""
    async def cancel(self, chart_id: int) -> None:
        """Request cancellation (``WorkflowNotFound``: no such workflow, ``TemporalError``)."""
    async def terminate(self, chart_id: int, reason: str) -> None:
        """Terminate the workflow (``WorkflowNotFound``: it closed already, ``TemporalError``)."""
    async def wait_closed(self, chart_id: int) -> None:
        """Return when the chart's workflow closes, whichever way."""
    def running(self, legacy: bool = False) -> AsyncIterator[tuple[str, str]]:
        """(workflow id, run id) of this deployment's running chart workflows (at least: the
        caller keeps only ``ids.chart_of``'s); ``legacy``: also those named ``chart-<pk>``."""
    async def retention_s(self) -> float | None:
        """The namespace's retention: how long Temporal keeps a closed workflow (None: unknown)."""

    ids: WorkflowIds | None  # this deployment's workflow ids, set by the scheduler before any call


# ==================================================================== lease and notifications
class LeaseKeeper(Protocol):
    """The lease keeper's own connection (used from its thread only)."""

    def renew(self) -> bool:
        """Renew (or take again, if free) the lease; False: another scheduler holds it. Raises Unavailable."""
    def close(self) -> None: ...


class LeasePort(Protocol):
    """One active scheduler: a lease with a time to live, renewed while alive."""

    token: str

    async def acquire(self) -> bool:
        """Take the lease if free (or ours already); raises :class:`Unavailable`."""
    async def holder(self) -> str | None:
        """Who holds it (its token), None if nobody; raises :class:`Unavailable`."""
    def keeper(self) -> LeaseKeeper:
        """A connection for the keeper's thread."""
    def release_now(self, timeout_s: float) -> None:
        """Release it, only if still ours, synchronously (a stop, a forced exit); raises Unavailable."""
    async def aclose(self) -> None: ...


class Subscription(Protocol):
    async def next_note(self, timeout_s: float) -> Note | None:
        """The next notification, parsed (one this version cannot read is a
        :class:`~common.notify.Resync`: :func:`fairsched.engine.notes.read_note`), None if
        none came within ``timeout_s``; raises :class:`Unavailable`."""
    async def aclose(self) -> None: ...


class NotificationSource(Protocol):
    """The scheduler's notifications (:mod:`common.notify`)."""

    async def subscribe(self) -> Subscription:
        """Subscribe (raises :class:`Unavailable`); a message sent before this is not seen."""
    async def aclose(self) -> None: ...
