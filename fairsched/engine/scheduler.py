"""The live scheduler loop (``manage.py runscheduler``).

One asyncio loop owns all state (:class:`fairsched.engine.state.LiveState`).
Other tasks only *report*: the notification listener appends messages from
Redis, the result watchers append workflows that closed, the lease keeper
says whether we may dispatch. Each :meth:`Scheduler.tick` then, in order:

1. records workflows that closed (result watchers: sub-second refill),
2. re-reads the rows named by notifications (the row is the truth),
3. resyncs incrementally every ``RESYNC_INTERVAL_S`` (rows whose ``updated_at`` moved:
   bulk writes, lost messages),
4. reconciles against Temporal every ``reconcile_interval_s`` (closed workflows,
   rows Temporal does not know, workflows whose row was never marked running),
5. cancels the workflows of charts whose cancel was requested, and terminates those
   still running ``cancel_grace_s`` after the request (a workflow that ignores
   cancellation must not hold its budget for ever; the chart ends cancelled),
6. dispatches whenever budget is free (head-of-line down the fair order; a chart
   whose start no retry can cure is failed with the reason, see
   :mod:`fairsched.engine.starts`, so it never holds the head),
7. then does one chunk of the long jobs, so that no dispatch waits behind one in its
   tick: the full resync, everything every ``FULL_RESYNC_S`` (raw SQL and
   ``QuerySet.update()`` calls that leave ``updated_at`` alone), and a first start's
   rounds (:mod:`fairsched.core.backfill`),
8. starts the ETA pass soon after a change (at once after a budget, weight or cost
   change; with nothing changing, every ``eta_interval_s`` or ``ETA_IDLE_COST_FACTOR``
   times its cost): the pass, the snapshot and its publication run in a forked child
   (:mod:`fairsched.engine.forked`; or a thread, on a copy taken on the loop) while the
   loop goes on dispatching. The lease is renewed from a thread of its own.

Crash safety rests on workflow ids and compare-and-set, not on the lease:
a chart is started as workflow ``chart-<deployment>-<pk>`` (REJECT_DUPLICATE + USE_EXISTING)
*before* its row moves queued -> running. A crash in between leaves a queued
row whose workflow runs: the next reconcile (run before the first dispatch
after a start) adopts it, and were it missed, starting it again returns the
same execution; if it already closed, the start is refused and its real
outcome recorded. So nothing runs twice and nothing is lost.

A warm stop (:meth:`Scheduler.stop`, SIGTERM) leaves running workflows alone: the
current step (a dispatch: after ``STOP_GRACE_S``) is cancelled at its next await
(a database call in flight is abandoned: ``runscheduler`` exits without joining
its thread); the background tasks are cancelled, the lease released (if still
ours), and "scheduler stopped" logged. Because a kill at any point is safe
(above), so is a cancel at any await, and so is the forced exit that
``runscheduler`` makes when the warm stop overruns its bound
(``fairsched.runtime.shutdown``; the lease is released there too, with a synchronous
client, by the same compare-and-delete).
"""
from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import logging
import math
import threading
import time
from array import array
from collections.abc import Callable, Coroutine, Iterable
from itertools import islice
from datetime import datetime, timedelta
from typing import Any

import redis
import redis.asyncio as aredis
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from common import live_updates
from fairsched.core import Eta, NeedsWholeBacklog, RoundSaver, RoundState
from fairsched.core.plan import gc_paused
from fairsched.engine import db, forked
from fairsched.engine.db import StartRow
from fairsched.engine.dispatch import Plan, Starts, moved
from fairsched.engine.lease import Lease, release_now
from fairsched.engine.notes import Reads
from fairsched.engine.ports import (
    Clock,
    DbStore,
    LivePublisher,
    Publisher,
    Store,
    SystemClock,
    TemporalClient,
    TemporalPort,
    in_daemon_thread,
)
from fairsched.engine.publish import build_snapshot
from fairsched.engine.starts import UNKNOWN, StartFailures
from fairsched.engine.state import FINAL, QUEUED, RUNNING, Effects, LiveState, PassInput, Running, World
from common.notify import CHANNEL
from fairsched.temporal.client import Outcome
from fairsched.temporal.shared import (
    CANCELLED,
    FAILED,
    ChartInput,
    WorkflowIds,
    split_temporal_type,
    use_workflow_ids,
    workflow_id,
)

log = logging.getLogger("fairsched.engine")


CANCEL_NOT_HONOURED = "cancel not honoured"  # the reason a workflow is terminated with


def _span(seconds: float) -> str:
    """A duration for a reason: "3.0 days", "5.2 h", "40 min", "12 s"."""
    for unit, size in (("days", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


# One step of a tick: (backoff name, is it due at ``now``?, the step, what to do after it ran).
Step = tuple[str, Callable[[float], bool], Callable[[], Any], Callable[[], None] | None]


class LeaseLost(Exception):
    """Another scheduler holds the lease: step down to standby."""


class Backoff:
    """Capped exponential backoff for one kind of operation."""

    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = low, high
        self.delay = 0.0
        self.not_before = 0.0
        self.failures = 0

    def ready(self, now: float) -> bool:
        return now >= self.not_before

    def fail(self, now: float) -> float:
        self.failures += 1
        self.delay = min(self.high, self.delay * 2 if self.delay else self.low)
        self.not_before = now + self.delay
        return self.delay

    def ok(self) -> None:
        self.delay, self.not_before, self.failures = 0.0, 0.0, 0


def _same_rounds(whole: RoundState, head: RoundState, truncated: frozenset[str]) -> bool:
    """The whole backlog's round state after the replay is the head's (never expected
    otherwise), but for the cursors of the orgs a first start's head cut short."""
    if whole == head:
        return True
    if not truncated or (whole.head, whole.budget, whole.orgs.keys()) != (head.head, head.budget, head.orgs.keys()):
        return False
    return all(w == h if org not in truncated else (w.in_head, w.weight) == (h.in_head, h.weight)
               for org, w, h in ((o, whole.orgs[o], head.orgs[o]) for o in whole.orgs))


def _freeze_backlog() -> None:
    """Move what the load built (the backlog: several objects per chart) out of the cyclic
    garbage collector's sight: its full collections would otherwise walk them all, again
    and again, while the scheduler idles. They stay collectable by reference counting."""
    gc.collect()
    gc.freeze()


@dataclasses.dataclass(frozen=True)
class EtaColumns:
    """Many charts' ETAs as three columns. From a forked child they come back as three
    buffers: a dict of a million ``Eta`` tuples would hold the loop's GIL for a second or
    more while it is unpickled (in one C call), and the loop reads these a chunk at a time."""

    ids: array    # 'q': chart ids
    start: array  # 'd': Eta.start_s
    finish: array  # 'd': Eta.finish_s

    @classmethod
    def of(cls, etas: dict[str, Eta], ids: Iterable[str]) -> EtaColumns:
        picked = [(cid, etas[cid]) for cid in ids if cid in etas]
        return cls(array("q", [int(cid) for cid, _ in picked]), array("d", [e[0] for _, e in picked]),
                   array("d", [e[1] for _, e in picked]))

    def __len__(self) -> int:
        return len(self.ids)

    def part(self, lo: int, hi: int) -> dict[str, Eta]:
        return {str(cid): Eta(s, f) for cid, s, f in zip(self.ids[lo:hi], self.start[lo:hi], self.finish[lo:hi])}


@dataclasses.dataclass(frozen=True)
class PassOut:
    """What an ETA pass gives back to the loop (from a forked child, pickled)."""

    seq: int                 # the snapshot it published
    head: dict[str, Eta]     # the ETAs of the head of the order (:attr:`Scheduler.ETAS_KEPT`)
    first: EtaColumns        # the ETAs of the charts that had no first ETA


class Scheduler:
    LEASE_TTL_S: float = 5.0          # a standby takes over at most this long after the leader dies
    LEASE_RENEW_S: float = 1.0
    STANDBY_POLL_S: float = 0.5
    RESYNC_INTERVAL_S: float = 3.0    # incremental re-read: charts changed since the last one
    RESYNC_OVERLAP_S: float = 10.0    # each incremental read goes this far before the last one began
    FULL_RESYNC_S: float = 300.0      # full re-read (in chunks), the safety net for raw writes
    FULL_RESYNC_CHUNK: int = 1000     # charts per chunk of the full re-read (one per tick, after its dispatch)
    FULL_RESYNC_COST_FACTOR: float = 100.0  # ... and at most every this many times its own duration
    HEAD_PER_ORG: int = 250           # a restart loads first this many charts per org (the head of the order)
    HEAD_ROUNDLESS_MAX: int = 10_000  # ... unless more charts than this have no saved round (then all first)
    BACKFILL_MIN: int = 20_000        # more new rounds than this at a load are written a chunk at a time ...
    BACKFILL_CHUNK: int = 1000        # ... this many per write (one per tick, after its dispatch)
    MAX_SLEEP_S: float = 1.0          # the loop wakes at least this often
    BACKOFF_MIN_S: float = 0.5
    BACKOFF_MAX_S: float = 10.0
    START_CONCURRENCY: int = 32       # workflow starts in flight at once
    DESCRIBE_CONCURRENCY: int = 16    # reconcile RPCs in flight at once
    MAX_EVENTS_PER_TICK: int = 50     # more are summarised in one "batch" event
    ETA_SOON_MIN_GAP_S: float = 0.2   # after a change, publish this soon after the last pass ...
    ETA_SOON_COST_FACTOR: float = 2.0  # ... or this many times the last pass's cost, if larger
    ETA_IDLE_COST_FACTOR: float = 60.0  # with nothing changing, a pass at most every this many times its cost
    FIRST_ETAS_PER_WRITE: int = 2000   # first ETAs recorded per database write
    ETAS_KEPT: int = 10_000            # the last pass's ETAs kept for dispatch: this far into the order
    ETA_SLOW_LOG_S: float = 1.0        # log the passes that take longer than this
    ETA_PASS_TIMEOUT_MIN_S: float = 600.0  # a pass in a child is killed after this long ...
    ETA_PASS_TIMEOUT_FACTOR: float = 10.0  # ... or this many times the last pass's cost, if longer
    ETA_PASS_NICE: int = 10            # a pass in a child yields the CPU to dispatch (and the database, Temporal)
    PLAN_ATTEMPTS: int = 3            # re-plans of one dispatch when rows changed underneath
    CANCEL_GRACE_S: float = 60.0      # a cancel not honoured this long escalates to terminate
    STOP_GRACE_S: float = 1.0         # a stop lets a dispatch in flight finish this long, then cancels it
    STOP_WAIT_S: float = 1.0          # then waits this long for cancelled tasks, the lease release, ...

    def __init__(
        self,
        *,
        temporal_address: str,
        namespace: str,
        task_queue: str,
        redis_url: str,
        watch_results: bool = True,
        lease_ttl_s: float | None = None,
        resync_interval_s: float | None = None,
        full_resync_s: float | None = None,
        cancel_grace_s: float | None = None,
        clock: Clock | None = None,
        store: Store | None = None,
        publisher: Publisher | None = None,
        temporal: TemporalPort | None = None,
        eta_pass_in: str = "thread",
    ) -> None:
        """``clock``, ``store``, ``publisher``, ``temporal``: the ports (:mod:`fairsched.engine.ports`),
        the real ones unless given (tests give fakes). ``eta_pass_in``: where the ETA pass
        runs, ``"process"`` (a forked child, off the loop's GIL: :mod:`fairsched.engine.forked`;
        ``runscheduler``'s default) or ``"thread"`` (in this process: a fake publisher
        sees what the pass publishes)."""
        if eta_pass_in not in ("process", "thread"):
            raise ValueError(f"eta_pass_in: 'process' or 'thread', not {eta_pass_in!r}")
        if eta_pass_in == "process" and not forked.available():
            eta_pass_in = "thread"
        self.eta_pass_in = eta_pass_in
        self.temporal_address = temporal_address
        self.namespace = namespace
        self.task_queue = task_queue
        self.redis_url = redis_url
        self.watch_results = watch_results
        if lease_ttl_s is not None:
            self.LEASE_TTL_S = lease_ttl_s
            self.LEASE_RENEW_S = max(0.2, lease_ttl_s / 5)
        if resync_interval_s is not None:
            self.RESYNC_INTERVAL_S = resync_interval_s
        if full_resync_s is not None:
            self.FULL_RESYNC_S = full_resync_s
        if cancel_grace_s is not None:
            self.CANCEL_GRACE_S = cancel_grace_s
        self.clock: Clock = clock or SystemClock()
        self.store: Store = store or DbStore()
        self.publisher: Publisher = publisher or LivePublisher(lambda: self.redis)
        self.temporal: TemporalPort = temporal or TemporalClient(temporal_address, namespace)

        self.state: LiveState | None = None
        self.redis: aredis.Redis | None = None
        self.lease: Lease | None = None
        self.leading = False
        self.starts = 0  # workflows started by this process (bench, tests)
        self.phase = "starting"  # what the loop is doing, for the stop's log lines
        self._stop_requested: tuple[float, str] | None = None  # (monotonic time, phase) of the stop request
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._notes: list[dict[str, Any]] = []
        self._finished: list[tuple[int, Outcome]] = []
        self._watchers: dict[int, asyncio.Task] = {}
        self._tasks: list[asyncio.Task] = []
        self._lease_ok_until = 0.0
        self._lease_gen = 0  # the lease keeper thread of this generation renews; others end
        # The keeper's renewal and the final release take turns under this lock, and the
        # keeper renews only while the lease is not closed: a renewal that had passed its
        # checks when the stop released the lease could otherwise take it back (its SET NX).
        self._lease_lock = threading.Lock()
        self._lease_closed = False
        self._lost_lease = False
        self._resync_due = 0.0
        self._reconcile_due = 0.0
        self._eta_due = 0.0
        self._eta_now = True
        self._eta_last_end = 0.0   # monotonic time the last ETA pass ended
        self._eta_last_cost = 0.0  # seconds the last ETA pass (with publication) took
        self._eta_task: asyncio.Task | None = None  # the ETA pass in flight (in a thread)
        self._eta_changes = 0  # ticks that changed something (a pass in flight compares)
        self._published_seq: int | None = None  # the last snapshot published
        self._confirmed_at = 0.0
        self._resync_requested = False
        self.ids: WorkflowIds | None = None  # this deployment's workflow ids (at take-over)
        self._legacy_active = True  # may a queued or running chart have a legacy id (chart-<pk>)?
        self._watermark: datetime | None = None  # when the last incremental read began
        self._full_resync: tuple[int, set[int]] | None = None  # (last pk read, charts seen) while one runs
        self._full_resync_due = self.clock.monotonic() + self.FULL_RESYNC_S
        self._full_resync_started = 0.0
        self._load_started = 0.0
        self._last_report = None                 # (ETAs of the head of the order, now) of the last ETA pass
        self._backoff = {k: Backoff(self.BACKOFF_MIN_S, self.BACKOFF_MAX_S)
                         for k in ("finish", "notes", "resync", "reconcile", "dispatch", "eta", "cancel",
                                   "rounds")}
        self._rounds = RoundSaver(None)          # what of the round state is written, and when
        self._whole_ready: tuple | None = None  # (state, prepared backfill, world, replay?) built while dispatching from the head
        self._start_failures = StartFailures()
        self._cancel_sent_at: dict[int, float] = {}  # chart -> monotonic time its cancel was sent

    # ================================================================ lifecycle
    def stop(self, *, requested_at: float | None = None, during: str | None = None) -> None:
        """Warm stop: leave running work alone, release the lease (see the module docstring).
        ``requested_at`` / ``during``: when the signal came and what the loop did then, if earlier."""
        if self._stop_requested is None:
            self._stop_requested = (requested_at or self.clock.monotonic(), during or self.phase)
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Stand by until holding the lease, then lead until stopped or the lease is lost."""
        self.redis = aredis.Redis.from_url(self.redis_url, socket_timeout=2, socket_connect_timeout=1)
        self.lease = Lease(self.redis, self.LEASE_TTL_S)
        try:
            while not self._stop.is_set():
                self.phase = "standby"
                if not await self._until_stopped(self._acquire_lease(), grace_s=0.0):
                    break
                try:
                    await self._until_stopped(self._lead(), grace_s=self.STOP_GRACE_S)
                except LeaseLost:
                    log.warning("lease lost to %s: stepping down to standby", await self._lease_holder())
                finally:
                    self.phase = "stepping down"
                    await self._step_down()
        finally:
            self.phase = "releasing the lease"
            for closing in (asyncio.to_thread(self._close_lease, self.STOP_WAIT_S), self.redis.aclose()):
                try:
                    await asyncio.wait_for(closing, timeout=self.STOP_WAIT_S)
                except (redis.RedisError, OSError, asyncio.TimeoutError):
                    pass
            self.phase = "stopped"
            if self._stop_requested is not None:
                at, during = self._stop_requested
                log.info("scheduler stopped %.2f s after the stop request (during: %s)", self.clock.monotonic() - at, during)
            else:
                log.info("scheduler stopped")

    def release_lease_now(self) -> None:
        """Release the lease synchronously if still ours: for a forced exit, whatever the loop is doing."""
        self._close_lease(1.0)

    def _close_lease(self, timeout_s: float) -> None:
        """Release the lease for good (blocking; the last thing a stop does with it): no renewal
        starts after this, and one in flight finishes first (up to ``timeout_s``), so the
        lease is gone when this returns, unless Redis itself does not answer."""
        self._lease_closed = True
        if self.lease is None:
            return
        locked = self._lease_lock.acquire(timeout=timeout_s)
        try:
            release_now(self.redis_url, self.lease.token, self.lease.key, timeout_s=timeout_s)
        finally:
            if locked:
                self._lease_lock.release()

    async def _until_stopped(self, work: Coroutine[Any, Any, Any], *, grace_s: float) -> Any:
        """``await work``, unless a stop comes first: then cancel it (safe at any await: see the
        module docstring), a dispatch after ``grace_s``. None if it did not finish."""
        task = asyncio.create_task(work)
        stopping = asyncio.create_task(self._stop.wait(), name="stopping")
        try:
            await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done() and self.phase == "dispatch":  # spare the next leader an adoption
                await asyncio.wait({task}, timeout=grace_s)
            if not task.done():
                if grace_s:
                    log.info("stop: cancelling the current step (%s)", self.phase)
                task.cancel()
                await asyncio.wait({task}, timeout=self.STOP_WAIT_S)
        finally:
            stopping.cancel()
            if not task.done():
                task.cancel()  # run() itself was cancelled, or the step ignores cancellation: leave it
        if task.done() and not task.cancelled():
            return task.result()  # LeaseLost (or a bug) surfaces here
        return None

    async def _lease_holder(self) -> str | None:
        try:
            return await self.lease.holder()
        except (redis.RedisError, OSError):
            return None

    async def _acquire_lease(self) -> bool:
        backoff = Backoff(self.BACKOFF_MIN_S, self.BACKOFF_MAX_S)
        announced = False
        while not self._stop.is_set():
            try:
                if await self.lease.acquire():
                    self._lease_ok_until = self.clock.monotonic() + self.LEASE_TTL_S
                    log.info("lease %s acquired: this scheduler is active", self.lease.token)
                    return True
                backoff.ok()
                if not announced:
                    log.info("standby: the lease is held by %s", await self._lease_holder())
                    announced = True
                delay = self.STANDBY_POLL_S
            except (redis.RedisError, OSError) as exc:
                delay = backoff.fail(self.clock.monotonic())
                log.warning("Redis unreachable while taking the lease (%s); retrying in %.1f s", exc, delay)
            await self._sleep(delay)
        return False

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            pass

    async def _lead(self) -> None:
        self.leading = True
        self._lost_lease = False
        self._tasks = [asyncio.create_task(self._keep_lease(), name="lease"),
                       asyncio.create_task(self._listen(), name="notifications")]
        if not await self._take_over():
            return
        while not self._stop.is_set():
            if self._lost_lease:
                raise LeaseLost()
            await self.tick()
            await self._wait_for_work()

    async def _take_over(self) -> bool:
        """Connect to Temporal, load the backlog and reconcile: ready to tick (False: stopped)."""
        self.phase = "connecting to Temporal"
        await self.temporal.connect()
        self.phase = "loading the backlog"
        await self._use_deployment()  # before any call naming a workflow
        await self._load()
        if self._stop.is_set():
            return False
        # Adopt what a crashed predecessor started but never recorded, before dispatching anything.
        await self._guarded("reconcile", self._reconcile)
        now = self.clock.monotonic()
        self._reconcile_due = now + self.state.config.reconcile_interval_s
        self._resync_due = now + self.RESYNC_INTERVAL_S
        return True

    async def _use_deployment(self) -> None:
        """This deployment's workflow ids (``chart-<deployment>-<pk>``; the legacy cut fixed
        on the first lead of this version), for every call to Temporal and every log line."""
        self.ids = await self.store.deployment()
        use_workflow_ids(self.ids)
        self.temporal.ids = self.ids
        self._legacy_active = await self.store.legacy_active(self.ids)

    async def _step_down(self) -> None:
        self.leading = False
        tasks = self._tasks + list(self._watchers.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=self.STOP_WAIT_S)  # one that ignores its cancel is left behind
        self._tasks, self._watchers = [], {}
        self.state = None
        self._whole_ready = None
        self._notes.clear()
        self._finished.clear()

    async def _load(self) -> None:
        """Load the backlog. At a restart (a round state was saved) the head of the saved
        order comes first (:func:`fairsched.engine.db.read_head`): dispatch starts from it
        while the whole backlog is read, in the same database snapshot, and built in a
        thread; the whole then takes over (:meth:`_take_over_whole`). A first start (no
        round state saved) does the same from the head of the backlog, each org's first
        charts by rank (``FairQueue.first_head``). A head that cannot resume alone loads
        the whole backlog before dispatching."""
        backoff = Backoff(self.BACKOFF_MIN_S, self.BACKOFF_MAX_S)
        loop = asyncio.get_running_loop()
        self._load_started = self.clock.monotonic()
        while not self._stop.is_set():
            heads: asyncio.Queue = asyncio.Queue()

            def on_head(head: db.Head | None) -> bool:  # in the reading thread
                loop.call_soon_threadsafe(heads.put_nowait, head)
                return head is None or head.whole_wanted

            reading = asyncio.ensure_future(self.store.read_streamed(self.HEAD_PER_ORG, self.HEAD_ROUNDLESS_MAX,
                                                                     on_head))
            got_head = asyncio.ensure_future(heads.get())
            try:
                done, _ = await asyncio.wait({reading, got_head}, return_when=asyncio.FIRST_COMPLETED)
                if got_head in done:
                    head = got_head.result()
                elif reading.exception() is None and reading.result() is None:
                    head = await got_head  # the head is the whole backlog: it is on its way
                else:
                    head = None
                if head is not None and head.whole_wanted and self._start_from_head(head):
                    self._tasks.append(asyncio.create_task(self._load_whole(reading), name="load-whole"))
                    return
                world = await reading
                if world is None:  # the head was the whole backlog
                    world = head.world
                break
            except Exception as exc:  # noqa: BLE001 - database down: retry
                delay = backoff.fail(self.clock.monotonic())
                log.warning("cannot load the backlog (%s); retrying in %.1f s", exc, delay)
                await self._sleep(delay)
            finally:
                got_head.cancel()
        else:
            return
        self.state = LiveState(world, observe_arrivals=False)  # learn_history below
        self._rounds = RoundSaver(world.rounds)
        self._notes.clear()  # the load read everything they could name
        await self._loaded(world)

    def _start_from_head(self, head: db.Head) -> bool:
        """Become a partial state over the head of the saved order (False: it cannot resume alone)."""
        try:
            state = LiveState(head.world, observe_arrivals=False, horizon=head.horizon, truncated=head.truncated)
        except NeedsWholeBacklog as exc:
            log.info("loading the whole backlog before dispatching: %s", exc)
            return False
        self.state = state
        self._rounds = RoundSaver(head.world.rounds)
        if head.truncated:
            # A first start: the head's rounds are written first (each org a prefix of its
            # order, its cursor after it), and the whole backlog's then go on after them.
            self._rounds.start_backfill(state.queue, tuple, 1, keep_written=True)
        self._notes.clear()  # the read covers them; the take-over's resync covers what came later
        log.info("loaded the head of the %s: %d queued (%d in the order), %d running; dispatching from it "
                 "while the whole backlog loads", "backlog (a first start)" if head.truncated else "order",
                 len(state.queue), state.queue.order_len, len(state.running))
        for chart_id in state.running:
            self._watch(chart_id)
        return True

    async def _load_whole(self, reading: asyncio.Future) -> None:
        """The rest of a streamed start: the whole backlog (read in the head's snapshot) is
        built in a thread; the next tick takes over with it. If the read fails, dispatch
        stops and the whole backlog is read again plainly (it then holds everything the
        head dispatched and saved)."""
        try:
            world = await reading
            prepare = None
            if self.state.truncated:  # a first start: the million rounds' backfill is prepared in the thread too
                written, saved, charts = dict(self._rounds.written_rounds or {}), self._rounds.saved, world.charts
                had = lambda: {str(c.id) for c in charts if c.round is not None and c.state == QUEUED}  # noqa: E731
                prepare = lambda state: RoundSaver.prepare(state.queue, had, self.BACKFILL_MIN,  # noqa: E731
                                                           written, saved)
            self._whole_ready = (*(await self._build(world, prepare)), world, True)
        except Exception as exc:  # noqa: BLE001 - database down: a plain load, without the head
            log.warning("cannot read the whole backlog (%s): dispatch waits for a plain load", exc)
            self.state.queue.close_horizon(everything=True)
            backoff = Backoff(self.BACKOFF_MIN_S, self.BACKOFF_MAX_S)
            while not self._stop.is_set():
                try:
                    world = await self.store.read_world()
                    self._whole_ready = (*(await self._build(world)), world, False)
                    break
                except Exception as exc2:  # noqa: BLE001
                    delay = backoff.fail(self.clock.monotonic())
                    log.warning("cannot load the backlog (%s); retrying in %.1f s", exc2, delay)
                    await self._sleep(delay)
        self._wake.set()

    @staticmethod
    async def _build(world: World, prepare: Callable[[LiveState], Any] | None = None) -> tuple[LiveState, Any]:
        """The whole backlog's state, built in a thread while the loop dispatches from the
        head, and what ``prepare`` makes of it there (None without)."""
        def build() -> tuple[LiveState, Any]:
            state = LiveState(world, observe_arrivals=False)
            return state, (prepare(state) if prepare is not None else None)
        return await in_daemon_thread(build, name="fairsched-build")

    async def _take_over_whole(self) -> None:
        """In the tick (nothing in flight): the whole backlog's state replaces the partial one."""
        whole, prepared, world, replay = self._whole_ready
        self._whole_ready = None
        head = self.state
        backfill = None
        if replay:
            if prepared is not None:  # before the replay: what the head dispatched extends its org's written part
                backfill = self._rounds.adopt(whole.queue, prepared)
            taken = whole.take_over_from(head)
            if not _same_rounds(whole.queue.export_rounds(), head.queue.export_rounds(), head.truncated):
                log.error("the whole backlog's round state differs from the head's after the replay")
            log.info("the whole backlog takes over from the head (%d dispatched or removed meanwhile)", len(taken))
        else:
            whole.running = head.running
            self._rounds = RoundSaver(world.rounds)
        self.state = whole
        self._watermark = None  # the next resync reads everything changed since the whole read
        self._resync_requested = True
        self._eta_now = True
        await self._loaded(world, backfill)

    async def _loaded(self, world: World, backfill: int | None = None) -> None:
        """The whole backlog is in memory: the forecast's history, then the log line. The
        load was a full read: the first full resync comes as long after it as after one."""
        took = self.clock.monotonic() - self._load_started
        self._full_resync_due = self.clock.monotonic() + max(self.FULL_RESYNC_S, self.FULL_RESYNC_COST_FACTOR * took)
        try:
            self.state.learn_history(await self.store.recent_arrivals(), await self.store.recent_durations(),
                                     await self.store.recent_promises())
            self.state.unpromised -= {str(c) for c in await self.store.recorded_first_etas()}
        except Exception as exc:  # noqa: BLE001 - the ETAs only: never stop the load for them
            log.warning("cannot read recent arrivals, durations or recorded ETAs (%s); learning from now on", exc)
        self._last_report = None
        charts = world.charts
        n = backfill if backfill is not None else self._rounds.start_backfill(
            self.state.queue, lambda: {str(c.id) for c in charts if c.round is not None and c.state == QUEUED},
            self.BACKFILL_MIN)
        if n:
            log.info("writing %d charts' rounds %d at a time between dispatches (the head of the order first)",
                     n, self.BACKFILL_CHUNK)
        del world
        _freeze_backlog()
        log.info("loaded backlog: %d queued (%d in the order), %d running (cost %d of budget %d), %d orgs",
                 len(self.state.queue), self.state.queue.order_len, len(self.state.running), self.state.used,
                 self.state.budget, len(self.state.orgs))
        for chart_id in self.state.running:
            if chart_id not in self._watchers:
                self._watch(chart_id)

    async def _wait_for_work(self) -> None:
        self.phase = "waiting for work"
        if self._notes or self._finished:
            return
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=self._idle_for())
        except asyncio.TimeoutError:
            pass

    def _idle_for(self) -> float:
        """Seconds until the next timed step is due (at most ``MAX_SLEEP_S``). A partial
        state runs no resync and no ETA pass: their due times, left in the past, must not
        wake it (the loop spun, and starved the thread reading the whole backlog)."""
        now = self.clock.monotonic()
        due = min(self._reconcile_due, now + self.MAX_SLEEP_S)
        if not (self.state is not None and self.state.partial):
            due = min(due, self._resync_due, self._eta_due)
        return max(0.0, due - now)

    # ================================================================ the step
    async def tick(self) -> None:
        """One pass of the loop (see the module docstring). Never raises on I/O errors."""
        self._wake.clear()
        if self.state is None:
            return
        if self._whole_ready is not None:
            await self._take_over_whole()
        fx = Effects()
        now = self.clock.monotonic()
        await self._run_due(self._catch_up_steps(), now, fx)
        await self._carry_out(fx)
        await self._run_due(self._cancel_steps(), now, fx)
        if self.may_dispatch() and self._backoff["dispatch"].ready(now):
            dfx = await self._guarded("dispatch", self._dispatch) or Effects()
            await self._carry_out(dfx)
            fx.merge(dfx)
        cfx = Effects()
        await self._run_due(self._chunk_steps(), now, cfx)
        if cfx:
            await self._carry_out(cfx)
            fx.merge(cfx)
            self._wake.set()  # what the chunk changed may start something: the next tick dispatches
        if not self.state.partial:  # ETAs, snapshots and live counters need the whole order
            self._schedule_eta(fx, now)
        if self.leading and self.state is not None:
            await self._guarded("rounds", self._save_rounds)
        await self._confirm_snapshot()
        if fx.events and not self.state.partial:
            await self._broadcast(fx.events)

    def _catch_up_steps(self) -> tuple[Step, ...]:
        """What a tick catches up on before dispatching, in order: (backoff name, is it due
        at ``now``?, the step, what to do after it ran)."""
        return (
            ("finish", lambda now: bool(self._finished), self._record_finished, None),
            ("notes", lambda now: bool(self._notes), self._apply_notes, None),
            # (a partial state leaves the resyncs to the whole backlog's, which takes over)
            ("resync", lambda now: not self.state.partial and (self._resync_requested or now >= self._resync_due),
             self._resync, self._resync_done),
            ("reconcile", lambda now: now >= self._reconcile_due, self._reconcile, self._reconcile_done),
        )

    def _chunk_steps(self) -> tuple[Step, ...]:
        """The long jobs done a chunk per tick, after the tick's dispatch: a chart whose turn
        has come never waits for a chunk of them in its own tick (only for one already in
        flight). Each chunk sets the wake-up while more remain."""
        return (
            ("resync", lambda now: not self.state.partial and self._full_resync_wanted(now),
             self._full_resync_step, None),
            ("rounds", lambda now: bool(self._rounds.backfilling) and self.leading, self._backfill_step, None),
        )

    def _cancel_steps(self) -> tuple[Step, ...]:
        return (("cancel", lambda now: bool(self._cancel_sent_at), self._escalate_cancels, None),)

    async def _run_due(self, steps: tuple[Step, ...], now: float, fx: Effects) -> None:
        """Run each step that is due and not backing off (:meth:`_guarded`), merging its effects."""
        for name, due, step, then in steps:
            if due(now) and self._backoff[name].ready(now):
                fx.merge(await self._guarded(name, step) or Effects())
                if then is not None:
                    then()

    def _resync_done(self) -> None:
        self._resync_due = self.clock.monotonic() + self.RESYNC_INTERVAL_S

    def _reconcile_done(self) -> None:
        self._reconcile_due = self.clock.monotonic() + self.state.config.reconcile_interval_s

    def _full_resync_wanted(self, now: float) -> bool:
        """A full resync is under way (one chunk per tick), or due: then it begins."""
        if self._full_resync is None and now >= self._full_resync_due:
            self._full_resync = (0, set())
            self._full_resync_started = now
        return self._full_resync is not None

    def _schedule_eta(self, fx: Effects, now: float) -> None:
        """Bring the next ETA pass forward after a change, and start it when due."""
        if fx.events:
            # Something changed (arrival, dispatch, finish, control): publish soon, coalesced, so
            # a dashboard sees it well within a second; the gap grows with the pass's own cost
            # so a large backlog under constant change keeps a core at most a third busy with it.
            # (A pass in flight schedules the next one itself when it ends.)
            self._eta_changes += 1
            if self._eta_task is None:
                self._eta_due = min(self._eta_due, self._eta_last_end + self._eta_soon_gap())
        if fx.eta_now:
            self._eta_now = True
        if (self._eta_now or self.clock.monotonic() >= self._eta_due) and self._eta_task is None \
                and self._backoff["eta"].ready(now):
            self._start_eta_pass()

    async def _guarded(self, name: str, step: Callable[[], Any]) -> Any:
        """Run one step; on failure log it and back off that step (the loop keeps going).

        A step may also report a partial failure itself (``_dispatch`` when some starts
        failed: ``self._backoff[name].fail()``); that backoff stands. Only a step that
        ran without any failure resets it, or a failing start would be retried at once,
        tens of times a second."""
        self.phase = name
        backoff = self._backoff[name]
        failures = backoff.failures
        try:
            result = await step()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - per-step error handling, the loop must survive
            delay = self._backoff[name].fail(self.clock.monotonic())
            if name == "notes":
                self._resync_requested = True
            log.warning("%s failed (%s: %s); retrying in %.1f s", name, type(exc).__name__, exc, delay)
            return None
        if backoff.failures == failures:
            backoff.ok()
        return result if result is not None else True

    def may_dispatch(self) -> bool:
        return self.leading and self.clock.monotonic() < self._lease_ok_until and not self._stop.is_set()

    # ================================================================ applying changes
    async def _apply_rows(self, ids: set[int]) -> Effects:
        rows, orgs = await self.store.read_charts(ids)
        fx = self.state.apply_orgs(orgs) if any(o.id not in self.state.orgs for o in orgs) else Effects()
        for chart_id in sorted(ids):
            fx.merge(self.state.apply_chart(chart_id, rows.get(chart_id)))
        return fx

    async def _apply_notes(self) -> Effects:
        notes, self._notes = self._notes, []
        try:
            return await self._apply_note_batch(notes)
        except Exception:
            self._notes = notes + self._notes
            raise

    async def _apply_note_batch(self, notes: list[dict]) -> Effects:
        state = self.state
        fx = Effects()
        reads = Reads.of(notes)
        if reads.resync:
            self._resync_requested = True
        if reads.settings:
            config = await self.store.read_config()
            fx.merge(state.apply_config(config))
        if reads.orgs:
            fx.merge(state.apply_orgs(await self.store.read_orgs(reads.orgs)))
        if reads.costs:
            fx.merge(state.apply_costs(await self.store.read_costs()))
        if reads.charts:
            fx.merge(await self._apply_rows(reads.charts))
        return fx

    async def _resync(self) -> Effects:
        """Incremental resync: the charts whose ``updated_at`` moved since the last read
        (less ``RESYNC_OVERLAP_S``, for clocks that disagree and transactions that
        committed late), and the small tables whole. O(changes), not O(backlog)."""
        self._resync_requested = False
        marks = [m for m in (self._watermark, self.state.loaded_at) if m is not None]
        since = max(marks) if marks else None
        if since is not None:
            since -= timedelta(seconds=self.RESYNC_OVERLAP_S)
        changes = await self.store.read_changes(since)
        state = self.state
        fx = state.apply_settings(changes.config, changes.orgs, changes.costs, changes.averages)
        for row in changes.charts:
            fx.merge(state.apply_chart(row.id, row))
        self._watermark = changes.read_at
        self._log_resync("resync", fx)
        return fx

    def _log_resync(self, what: str, fx: Effects) -> None:
        changes = [e for e in fx.events if e["kind"] not in ("budget", "weight", "cost")]
        if changes:
            log.info("%s: %d change(s) without a notification applied (%s)", what, len(changes),
                     ", ".join(f"{e['kind']} #{e.get('chart', e.get('org'))}" for e in changes[:10]))

    async def _full_resync_step(self) -> Effects:
        """One chunk of the full resync, the safety net for writes that left ``updated_at``
        alone (raw SQL, ``QuerySet.update()`` outside the services) and lost rows: every
        ``FULL_RESYNC_S`` the queued and running charts are re-read by pk, one chunk of
        ``FULL_RESYNC_CHUNK`` per tick (dispatch runs between chunks); at the end, the charts
        in memory that no chunk returned are re-read by id (gone, final, or changed state)."""
        after, seen = self._full_resync
        rows = await self.store.read_active_chunk(after, self.FULL_RESYNC_CHUNK)
        state = self.state
        fx = Effects()
        for row in rows:
            seen.add(row.id)
            fx.merge(state.apply_chart(row.id, row))
        if len(rows) == self.FULL_RESYNC_CHUNK:
            self._full_resync = (rows[-1].id, seen)
            self._wake.set()  # the next chunk at once
        else:
            unseen = state.known_ids() - seen
            if unseen:
                fx.merge(await self._apply_rows(unseen))
            self._full_resync = None
            # Rare whatever the backlog: at most 1/FULL_RESYNC_COST_FACTOR of the time on it.
            took = self.clock.monotonic() - self._full_resync_started
            self._full_resync_due = self.clock.monotonic() + max(self.FULL_RESYNC_S, self.FULL_RESYNC_COST_FACTOR * took)
        self._log_resync("full resync", fx)
        return fx

    async def _carry_out(self, fx: Effects) -> None:
        for chart_id in fx.unwatch:
            task = self._watchers.pop(chart_id, None)
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        for chart_id in fx.watch:
            if chart_id in self.state.running:
                self._watch(chart_id)
        for chart_id in fx.cancel:
            await self._cancel(chart_id)

    async def _cancel(self, chart_id: int) -> None:
        r = self.state.running.get(chart_id)
        try:
            await self.temporal.cancel(chart_id)
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                log.warning("cancel of chart #%d failed (%s); will retry", chart_id, exc)
                return
        if r is not None:
            r.cancel_sent = True
            self._cancel_sent_at.setdefault(chart_id, self.clock.monotonic())
        log.info("cancel chart #%d: cancellation requested for workflow %s", chart_id, workflow_id(chart_id))

    async def _escalate_cancels(self) -> Effects:
        """Terminate the workflows still running ``CANCEL_GRACE_S`` after their cancel was sent.

        The chart ends cancelled, its error saying so (see :meth:`_as_escalated`), and its
        budget is free at once. A workflow that closed meanwhile is left to the result watch."""
        fx = Effects()
        now = self.clock.monotonic()
        for chart_id, sent in list(self._cancel_sent_at.items()):
            if chart_id not in self.state.running:
                del self._cancel_sent_at[chart_id]
                continue
            if now - sent < self.CANCEL_GRACE_S:
                continue
            try:
                await self.temporal.terminate(chart_id, self._escalation_reason())
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise  # Temporal trouble: the step backs off and tries again
                del self._cancel_sent_at[chart_id]  # closed on its own meanwhile
                continue
            del self._cancel_sent_at[chart_id]
            log.info("cancel chart #%d: workflow %s did not close within %g s of the cancel; terminated",
                     chart_id, workflow_id(chart_id), self.CANCEL_GRACE_S)
            outcome = await self.temporal.outcome(chart_id)
            if outcome is not None:
                fx.merge(await self._record(chart_id, outcome, "escalation"))
        return fx

    def _escalation_reason(self) -> str:
        return f"{CANCEL_NOT_HONOURED} within {self.CANCEL_GRACE_S:g} s"

    @staticmethod
    def _as_escalated(outcome: Outcome) -> Outcome:
        """A workflow we terminated because it ignored a cancel ends *cancelled*, whichever path
        reads its outcome first (this scheduler, the result watch, or a successor's reconcile
        after a crash), with ``error`` "cancel not honoured within 60 s: terminated"."""
        prefix = f"terminated: {CANCEL_NOT_HONOURED}"
        if outcome.state == FAILED and outcome.error.startswith(prefix):
            reason = outcome.error[len("terminated: "):].split(" <- ")[0]
            return dataclasses.replace(outcome, state=CANCELLED, error=f"{reason}: terminated")
        return outcome

    # ================================================================ finishing
    def _watch(self, chart_id: int) -> None:
        if not self.watch_results or chart_id in self._watchers:
            return
        self._watchers[chart_id] = asyncio.create_task(self._watch_result(chart_id), name=f"watch-{chart_id}")

    async def _watch_result(self, chart_id: int) -> None:
        """Wait for a workflow to close (any type, ours or a user's) and report its outcome."""
        backoff = Backoff(self.BACKOFF_MIN_S, self.BACKOFF_MAX_S)
        while True:
            try:
                await self.temporal.wait_closed(chart_id)
                outcome = await self.temporal.outcome(chart_id)
                if outcome is None:
                    continue
                self._finished.append((chart_id, outcome))
                self._wake.set()
                return
            except asyncio.CancelledError:
                raise
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    return  # reconciliation decides
                await asyncio.sleep(backoff.fail(self.clock.monotonic()))
            except Exception as exc:  # noqa: BLE001
                log.debug("watch of chart #%d: %s", chart_id, exc)
                await asyncio.sleep(backoff.fail(self.clock.monotonic()))

    async def _record_finished(self) -> Effects:
        fx = Effects()
        while self._finished:
            chart_id, outcome = self._finished[0]
            fx.merge(await self._record(chart_id, outcome, "result"))
            self._finished.pop(0)
        return fx

    async def _record(self, chart_id: int, outcome: Outcome, source: str) -> Effects:
        """Write a closed workflow's outcome (idempotent) and free its budget."""
        outcome = self._as_escalated(outcome)
        wrote = await self.store.record_outcome(chart_id, outcome.state, outcome.error, outcome.started_at,
                                             outcome.finished_at, outcome.run_id)
        r = self.state.running.get(chart_id)
        seconds = ((outcome.finished_at - outcome.started_at).total_seconds()
                   if outcome.finished_at and outcome.started_at else None)
        fx = self.state.finished(chart_id, outcome.state, seconds,
                                 outcome.finished_at.timestamp() if outcome.finished_at else None)
        took = (f" after {(outcome.finished_at - outcome.started_at).total_seconds():.1f} s"
                if outcome.finished_at and outcome.started_at else "")
        if wrote and source not in ("result", "escalation"):
            log.info("reconcile: chart #%d closed as %s in Temporal%s; row corrected%s", chart_id, outcome.state,
                     took, f" (error: {outcome.error})" if outcome.error else "")
        elif r is not None or wrote:
            log.info("finish chart #%d %s%s (%s), cost %d freed%s", chart_id, outcome.state, took,
                     "recorded by the scheduler" if wrote else "recorded by the workflow",
                     r.cost if r else 0, f"; error: {outcome.error}" if outcome.error else "")
        fx.merge(await self._apply_rows({chart_id}))
        return fx

    # ================================================================ reconcile
    async def _reconcile(self) -> Effects:
        """Temporal is the truth for what is in flight."""
        fx = Effects()
        sem = asyncio.Semaphore(self.DESCRIBE_CONCURRENCY)

        async def describe(chart_id: int) -> tuple[int, Outcome | None | str]:
            async with sem:
                try:
                    return chart_id, await self.temporal.outcome(chart_id)
                except RPCError as exc:
                    if exc.status == RPCStatusCode.NOT_FOUND:
                        return chart_id, "unknown"
                    raise

        results = await asyncio.gather(*(describe(c) for c in list(self.state.running)))
        for chart_id, result in results:
            r = self.state.running.get(chart_id)
            if r is None:
                continue
            if result == "unknown":
                if r.cancel_requested:
                    outcome = Outcome("cancelled", "cancelled before Temporal knew the workflow", None, None, "")
                    fx.merge(await self._record(chart_id, outcome, "reconcile"))
                    continue
                fx.merge(await self._unknown_to_temporal(r))
            elif result is not None:
                fx.merge(await self._record(chart_id, result, "reconcile"))
        fx.merge(await self._adopt_orphans())
        return fx

    async def _unknown_to_temporal(self, r: Running) -> Effects:
        """A running row whose workflow Temporal does not know.

        Dispatched less than the namespace's retention ago, its workflow cannot have closed
        and been deleted since: Temporal lost it (its data, another cluster), so nothing
        holds or ran it to the end: the chart is requeued and keeps its place. Dispatched
        longer ago (or the retention unknown), it may have run and closed, and its record
        aged out of Temporal: running it again could run it twice, so it is failed, the
        reason saying so; an operator re-runs it if it must run (docs/architecture.md)."""
        chart_id, wf = r.id, workflow_id(r.id)
        try:
            retention = await self.temporal.retention_s()
        except RPCError as exc:
            log.warning("reconcile: chart #%d: Temporal does not know workflow %s, and the namespace's "
                        "retention cannot be read (%s); decided at the next reconcile", chart_id, wf, exc)
            return Effects()
        age = self.clock.time() - r.started_at
        if retention is not None and age < retention:
            reason = f"Temporal does not know workflow {wf}"
            if await self.store.requeue(chart_id, reason):
                log.info("reconcile: chart #%d requeued: %s", chart_id, reason)
            fx = self.state.finished(chart_id, "requeued")  # Temporal holds nothing for it
            fx.merge(await self._apply_rows({chart_id}))
            return fx
        kept = f"the namespace's retention of {_span(retention)}" if retention is not None else "its retention"
        reason = (f"outcome lost: Temporal no longer knows workflow {wf}, dispatched {_span(age)} ago, longer than "
                  f"{kept}; it may have run, so it is not run again (re-run it if it must run)")
        log.warning("reconcile: chart #%d failed: %s", chart_id, reason)
        return await self._record(chart_id, Outcome(FAILED, reason, None, None, ""), "reconcile")

    async def _adopt_orphans(self) -> Effects:
        """Running workflows of this deployment (``chart-<deployment>-<pk>``, or
        ``chart-<pk>`` for a chart that keeps its legacy id) whose row is still queued (a
        crash between start and compare-and-set) are adopted; those of final rows hold their
        cost until they close; those of cancelled rows are cancelled. Another deployment's
        workflows on the same namespace are never touched."""
        fx = Effects()
        found: dict[int, str] = {}
        legacy = self._legacy_active
        if legacy:
            self._legacy_active = legacy = await self.store.legacy_active(self.ids)
        async for wf_id, run_id in self.temporal.running(legacy=legacy):
            chart_id = self.ids.chart_of(wf_id)
            if chart_id is not None and chart_id not in self.state.running:
                found[chart_id] = run_id
        if not found:
            return fx
        rows, _ = await self.store.read_charts(found)
        adopt = []
        for chart_id, row in rows.items():
            if row.state == QUEUED:
                adopt.append((chart_id, self.state.queue.cost_of(str(row.org), row.workflow), found[chart_id],
                              self.clock.time()))
                continue
            if row.state in FINAL and row.dispatched_cost and not await self._closed_now(chart_id):
                # Recorded by its last activity, but Temporal still runs it (a worker died between
                # recording and closing, and this scheduler started since): it holds its cost until
                # it closes, or Temporal would see more than the budget. (The listing may lag a
                # close by a moment: _closed_now asks the workflow itself.)
                fx.merge(self.state.hold_closing(row))
            if row.state == "cancelled":
                await self._cancel(chart_id)
        if adopt:
            await self.store.mark_running(adopt)
            for chart_id, cost, run_id, _ in adopt:
                log.info("reconcile: chart #%d adopted: workflow %s (run %s) runs but its row was queued",
                         chart_id, workflow_id(chart_id), run_id)
            fx.merge(await self._apply_rows({a[0] for a in adopt}))
        return fx

    async def _closed_now(self, chart_id: int) -> bool:
        try:
            return await self.temporal.outcome(chart_id) is not None
        except RPCError:
            return False

    # ================================================================ dispatch
    async def _dispatch(self) -> Effects:
        """Start the head of the order that fits, then record what started: plan, start,
        commit (:mod:`fairsched.engine.dispatch`).

        A start that fails is judged by :mod:`fairsched.engine.starts`: refused for good
        (payload too large, invalid argument, an input that cannot be serialised or is
        not a JSON object) fails the chart at once, compare-and-set from queued, and the
        order moves on in this same pass; Temporal unreachable keeps the chart in place
        and backs dispatch off; any other error does too, but a chart is failed after
        ``MAX_UNKNOWN_ATTEMPTS`` of those (unless Temporal shows its workflow after all)."""
        fx = Effects()
        plan = await self._plan(fx)
        if plan is None:
            return fx
        starts = await self._start_all(plan)
        fx.merge(await self._commit(plan, starts))
        return fx

    # ---------------------------------------------------------------- plan
    async def _plan(self, fx: Effects) -> Plan | None:
        """The head of the order that fits, its rows read and agreeing with memory (rows that
        moved are applied into ``fx`` and the plan made again). None: nothing to start now."""
        state = self.state
        for _ in range(self.PLAN_ATTEMPTS):
            planned = state.to_start()
            if not planned:
                return None
            rows = await self.store.read_for_start([int(c) for c in planned])
            changed = moved(state, planned, rows)
            for chart_id, row in changed:
                fx.merge(state.apply_chart(chart_id, row))
            if not changed:
                return Plan.of(state, planned, rows)
        return None

    # ---------------------------------------------------------------- start
    async def _start_all(self, plan: Plan) -> Starts:
        sem = asyncio.Semaphore(self.START_CONCURRENCY)
        starts = Starts()
        results = await asyncio.gather(*(self._start_one(plan.rows[int(cid)], cid, sem, starts)
                                         for cid in plan.charts))
        starts.run_ids = {cid: run_id for cid, run_id in results if run_id is not None}
        return starts

    async def _start_one(self, s: StartRow, cid: str, sem: asyncio.Semaphore, starts: Starts) -> tuple[str, str | None]:
        """Start one chart's workflow: (chart, run id), run id None if it did not start."""
        ttype, queue = split_temporal_type(s.temporal_type, self.task_queue)
        if not isinstance(s.payload, dict):  # written around the services: no workflow takes it
            starts.refused[cid] = f"cannot start: payload: must be a JSON object, got {type(s.payload).__name__}"
            return cid, None
        chart = ChartInput(chart_id=s.row.id, org=s.org_slug, org_id=s.row.org, workflow=s.row.workflow,
                           external_id=s.row.external_id, payload=s.payload)
        async with sem:
            try:
                run_id = await self.temporal.start(temporal_type=ttype, task_queue=queue, chart=chart,
                                                   execution_timeout_s=s.execution_timeout_s)
            except WorkflowAlreadyStartedError:
                # It ran before (a crash after starting, before recording): never again. Its real outcome:
                outcome = await self.temporal.outcome(s.row.id)
                if outcome is None:  # raced with a start that is still running: adopt that run
                    return cid, ""
                starts.closed[s.row.id] = outcome
                return cid, outcome.run_id
            except Exception as exc:  # noqa: BLE001 - judged below, never fatal to the loop
                await self._judge_start_failure(s.row.id, cid, f"{ttype} on {queue}", exc, starts)
                return cid, None
        self._start_failures.forget(s.row.id)
        self.starts += 1
        return cid, run_id

    async def _judge_start_failure(self, chart_id: int, cid: str, what: str, exc: Exception, starts: Starts) -> None:
        """Refused for good: fail the chart; else it keeps its place (and dispatch backs off)."""
        verdict = self._start_failures.verdict(chart_id, exc)
        if verdict.fail and verdict.kind == UNKNOWN and await self._workflow_known(chart_id):
            verdict = None  # it started after all: the next attempt finds that run
            self._start_failures.forget(chart_id)
        if verdict is not None and verdict.fail:
            starts.refused[cid] = verdict.reason
            return
        starts.retry.append(cid)
        log.warning("start of chart #%s (%s) failed (%s%s): %s; it keeps its place",
                    cid, what, verdict.kind if verdict else "started meanwhile",
                    f", attempt {verdict.attempts} of {self._start_failures.max_unknown}"
                    if verdict and verdict.kind == UNKNOWN else "", exc)

    async def _workflow_known(self, chart_id: int) -> bool:
        """Does Temporal know the chart's workflow? (True when it cannot say: never fail a
        chart whose start may have gone through.)"""
        try:
            await self.temporal.describe(chart_id)
        except RPCError as exc:
            return exc.status != RPCStatusCode.NOT_FOUND
        except Exception:  # noqa: BLE001
            return True
        return True

    async def _fail_unstartable(self, refused: dict[str, str]) -> Effects:
        """Fail charts that can never start (compare-and-set from queued: a row that moved
        meanwhile is followed instead) and take them out of the order."""
        ids = set()
        for cid, reason in refused.items():
            chart_id = int(cid)
            self._start_failures.forget(chart_id)
            if await self.store.fail_start(chart_id, reason):
                log.warning("chart #%d failed: %s", chart_id, reason)
            ids.add(chart_id)
        return await self._apply_rows(ids)

    # ---------------------------------------------------------------- commit
    async def _commit(self, plan: Plan, starts: Starts) -> Effects:
        """What started leaves the order and holds its cost; rows move queued -> running
        (compare-and-set, with the round state, in one transaction); the refused fail."""
        fx = Effects()
        at = self.clock.time()
        started = starts.started(at)
        planned = plan.charts
        if starts.retry:
            self._backoff["dispatch"].fail(self.clock.monotonic())  # Temporal trouble: do not spin
        if starts.refused:
            fx.merge(await self._fail_unstartable(starts.refused))
            planned = [cid for cid in planned if cid not in starts.refused]  # still the head of the order
        if not started:
            return fx
        new = self.state.commit_dispatch(planned, started)
        save = self._rounds.next(self.state.queue)
        ran = await self.store.mark_running([(r.id, r.cost, r.run_id, at, *self._eta_in_force(r, at))
                                             for r in new if r.id not in starts.closed], save)
        self._rounds.written(save)
        free = plan.free_before
        for r in new:
            free -= r.cost
            fx.merge(await self._committed(r, plan, starts, bool(ran.get(r.id)), free))
        return fx

    async def _committed(self, r: Running, plan: Plan, starts: Starts, ran: bool, free: int) -> Effects:
        """One chart the dispatch started: recorded if its workflow had already closed,
        watched if its row moved to running, else its row (moved meanwhile) is followed."""
        if r.id in starts.closed:
            log.info("dispatch chart #%d skipped: workflow %s already closed as %s; recording it",
                     r.id, workflow_id(r.id), starts.closed[r.id].state)
            return await self._record(r.id, starts.closed[r.id], "adopt")
        if ran:
            pos, rnd = plan.before.get(str(r.id), (None, None))
            log.info("dispatch chart #%d org=%d workflow=%s cost=%d round=%s pos=%s run=%s free=%d",
                     r.id, r.org, r.workflow, r.cost, rnd, pos, r.run_id, free)
            self._watch(r.id)
            return Effects(events=[{"kind": "dispatch", "chart": r.id, "org": r.org, "cost": r.cost}])
        # The row moved meanwhile: it is the truth.
        rows_now, _ = await self.store.read_charts({r.id})
        row = rows_now.get(r.id)
        log.info("dispatch chart #%d: row is now %s; following it", r.id, row.state if row else "deleted")
        if row is None or row.state == "cancelled":
            await self._cancel(r.id)
        fx = self.state.apply_chart(r.id, row)
        if row is not None and row.state == RUNNING:
            self._watch(r.id)
        return fx

    # ================================================================ round state
    async def _backfill_step(self) -> Effects:
        """One chunk of the backfill (:mod:`fairsched.core.backfill`): the next charts in
        round order, with each org's cursor after them, in one transaction."""
        self._rounds.chunk(self.BACKFILL_CHUNK)
        await self._save_rounds()
        if self._rounds.backfilling:
            self._wake.set()  # the next chunk at once, after this tick's dispatch
        elif self.state.partial:
            log.info("the rounds of the head of the backlog are written")
        else:
            log.info("every chart's round is written")
        return Effects()

    async def _save_rounds(self) -> None:
        """Arrivals and re-ranks change rounds without a dispatch: write them too, so a
        new scheduler resumes exactly this order (one transaction, O(changes))."""
        save = self._rounds.next(self.state.queue)
        if save is not None:
            await self.store.save_rounds(*save)
            self._rounds.written(save)

    # ================================================================ publishing
    def _eta_soon_gap(self) -> float:
        return max(self.ETA_SOON_MIN_GAP_S, self.ETA_SOON_COST_FACTOR * self._eta_last_cost)

    def _start_eta_pass(self) -> None:
        """Start an ETA pass in the background while the loop goes on dispatching: the pass
        computes the ETAs, builds the snapshot, encodes and stores it page by page. In a
        forked child (``eta_pass_in="process"``), which sees the state as it was at the
        fork; or in a thread, on a copy the loop takes first (:meth:`LiveState.capture`,
        milliseconds)."""
        self._eta_now = False
        now = self.clock.time()
        captured = self.state.capture() if self.eta_pass_in == "thread" else None
        self._eta_due = math.inf  # the pass sets the next one when it ends
        self._eta_task = asyncio.create_task(self._run_eta_pass(captured, now, self._eta_changes),
                                             name="eta-pass")
        self._tasks.append(self._eta_task)

    async def _run_eta_pass(self, captured: PassInput | None, now: float, changes: int) -> None:
        started = self.clock.monotonic()
        queued = len(self.state.queue)
        try:
            await self._guarded("eta", lambda: self._eta_pass(captured, now))
        finally:
            end = self.clock.monotonic()
            self._eta_last_end, self._eta_last_cost = end, end - started
            if self._eta_last_cost > self.ETA_SLOW_LOG_S:
                log.info("ETA pass over %d queued charts took %.1f s (in its %s; dispatch went on)",
                         queued, self._eta_last_cost, self.eta_pass_in)
            # A static backlog needs no new pass every few seconds: the published ETAs are
            # absolute times and stay true until something changes (which brings the next
            # pass forward, see tick). Between changes the interval grows with the pass's
            # own cost, so an idle scheduler spends at most ~1/ETA_IDLE_COST_FACTOR on it.
            if self._eta_changes != changes:  # changed while the pass ran: the next one soon
                interval = self._eta_soon_gap()
            else:
                interval = max(self.state.config.eta_interval_s if self.state else 3.0,
                               self.ETA_IDLE_COST_FACTOR * self._eta_last_cost)
            self._eta_due = end + interval
            task = self._eta_task
            self._eta_task = None
            if task in self._tasks:
                self._tasks.remove(task)
            self._wake.set()

    async def _eta_pass(self, captured: PassInput | None, now: float) -> bool:
        if captured is None:
            state = self.state
            timeout = max(self.ETA_PASS_TIMEOUT_MIN_S, self.ETA_PASS_TIMEOUT_FACTOR * self._eta_last_cost)
            out = await forked.run_forked(lambda: self._pass_in_child(state, now), name="ETA pass",
                                          timeout_s=timeout, nice=self.ETA_PASS_NICE)
        else:
            out = await asyncio.to_thread(self._compute_and_publish, captured, now)
        if self.state is None:
            return True
        self._published_seq = out.seq
        # Kept for the charts dispatched before the next pass (:meth:`_eta_in_force`), from
        # now on (the first ETAs below may take a while): the head of the order, not a
        # million ETAs (~200 MB at 1M).
        self._last_report = (out.head, now)
        await self.publisher.snapshot_stored(out.seq)
        # after publishing: the dashboards do not wait for this write
        await self._record_first_etas(out.first, now)
        return True

    def _pass_in_child(self, state: LiveState, now: float) -> PassOut:
        """The pass in the forked child: the state as it was at the fork is its own."""
        return self._compute_and_publish(state.capture(), now)

    def _compute_and_publish(self, captured: PassInput, now: float) -> PassOut:
        """The ETA pass, the snapshot and its publication, on a copy: in a forked child or a
        worker thread. Without the cyclic collector: the pass allocates several acyclic
        objects per chart, and a full collection triggered by them would stop the loop (in
        a thread, it holds the GIL) for as long as it walks them. Returns the ETAs the
        loop needs (a few, but every one at a first start: no chart has a first ETA)."""
        with gc_paused():
            report = captured.eta_report(now)
            snap, rows, per_org = build_snapshot(captured, report, now, p90=captured.forecast.p90_finisher())
            snap["eta_model"] = captured.eta_model
            seq = self.publisher.store_snapshot(snap, rows, per_org)
            etas = report.etas
            head = {cid: etas[cid] for cid in islice(captured.queue, self.ETAS_KEPT) if cid in etas}
            return PassOut(seq, head, EtaColumns.of(etas, captured.unpromised))

    async def _confirm_snapshot(self) -> None:
        """Say, about once a second, that the last published snapshot is this live
        scheduler's latest: readers keep showing it (it stays true while nothing changes,
        and a pass is on its way when something did, however long a large backlog's pass
        takes); only a scheduler that stopped lets it turn stale."""
        seq = self._published_seq
        if seq is None or not self.leading or self.clock.monotonic() - self._confirmed_at < 1.0:
            return
        self._confirmed_at = self.clock.monotonic()
        await self.publisher.confirm_snapshot(seq, self.clock.time())

    def _eta_in_force(self, r, at: float) -> tuple[float, float]:
        """The ETA published for a chart by the last pass and its 90% bound (absolute), else
        those a pass would give it now that it starts: ``at`` plus its expected duration."""
        fc = self.state.forecast
        org = str(r.org)
        if self._last_report is not None:
            etas, then = self._last_report
            eta = etas.get(str(r.id))
            if eta is not None:
                return then + eta.finish_s, then + fc.p90_finish(org, r.workflow, eta)
        eta = Eta(0.0, fc.mean(org, r.workflow))
        return at + eta.finish_s, at + fc.p90_finish(org, r.workflow, eta)

    async def _record_first_etas(self, first: EtaColumns, now: float) -> None:
        """The first ETA of each chart that has none yet (``first``: the pass's ETAs of the
        charts that had none when it began), in short writes from the bulk-write thread
        (:class:`~fairsched.engine.ports.DbStore`): dispatch never waits behind them."""
        for lo in range(0, len(first), self.FIRST_ETAS_PER_WRITE):
            state = self.state
            if state is None:
                return
            etas = first.part(lo, lo + self.FIRST_ETAS_PER_WRITE)
            chunk = [cid for cid in etas if cid in state.unpromised]  # since promised at dispatch
            if chunk:
                await self.store.record_first_etas(state.first_etas(etas, now, chunk))
                state.unpromised.difference_update(chunk)
        if self.state is not None and len(first) > 10 * len(self.state.unpromised):
            # a set never gives back its table as it empties: 32 MB after a first start at 1M
            self.state.unpromised = set(self.state.unpromised)

    async def _broadcast(self, events: list[dict]) -> None:
        counters = self.state.counters()
        if len(events) > self.MAX_EVENTS_PER_TICK:
            events = [live_updates.Batch(count=len(events)).to_wire()]
        for event in events:
            await self.publisher.event(event, counters)

    # ================================================================ background reporters
    async def _keep_lease(self) -> None:
        """Renew the lease from a thread of its own: a busy loop (a large resync, a slow
        database call) can never make it miss a renewal; dispatch checks the lease by
        monotonic time (:meth:`may_dispatch`)."""
        loop = asyncio.get_running_loop()
        self._lease_gen += 1
        gen = self._lease_gen
        try:
            await asyncio.to_thread(self._keep_lease_blocking, loop, gen)
        finally:
            self._lease_gen += 1  # cancelled (step down): the thread ends at its next renewal

    def _keep_lease_blocking(self, loop: asyncio.AbstractEventLoop, gen: int) -> None:
        client = redis.Redis.from_url(self.redis_url, socket_timeout=2, socket_connect_timeout=1)
        warned = False
        try:
            while not self._stop.is_set() and gen == self._lease_gen:
                time.sleep(self.LEASE_RENEW_S)
                try:
                    with self._lease_lock:
                        if self._lease_closed or self._stop.is_set() or gen != self._lease_gen:
                            return
                        ok = self.lease.acquire_sync(client)
                except (redis.RedisError, OSError) as exc:
                    if not warned:
                        log.warning("cannot renew the lease (%s); dispatch pauses %.1f s after the last renewal",
                                    exc, self.LEASE_TTL_S)
                        warned = True
                    continue
                if not ok:
                    self._lost_lease = True
                    loop.call_soon_threadsafe(self._wake.set)
                    return
                if warned or self.clock.monotonic() >= self._lease_ok_until:
                    log.info("lease renewed again: dispatch resumes (after a resync)")
                    self._resync_requested = True
                    loop.call_soon_threadsafe(self._wake.set)
                warned = False
                self._lease_ok_until = self.clock.monotonic() + self.LEASE_TTL_S
        except RuntimeError:  # the loop closed under us: the scheduler is gone
            return
        finally:
            client.close()

    async def _listen(self) -> None:
        """Append scheduler notifications from Redis; after a reconnect ask for a resync."""
        backoff = Backoff(self.BACKOFF_MIN_S, self.BACKOFF_MAX_S)
        client = aredis.Redis.from_url(self.redis_url, socket_connect_timeout=1, health_check_interval=5)
        first = True
        try:
            while True:
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                try:
                    await pubsub.subscribe(CHANNEL)
                    if not first:
                        log.info("notifications: subscribed again; resyncing what was missed")
                        self._resync_requested = True
                        self._wake.set()
                    first = False
                    backoff.ok()
                    while True:
                        message = await pubsub.get_message(timeout=1.0)
                        if message is None or message.get("type") != "message":
                            continue
                        try:
                            note = json.loads(message["data"])
                        except (TypeError, ValueError):
                            note = {"kind": "resync"}
                        self._notes.append(note if isinstance(note, dict) else {"kind": "resync"})
                        self._wake.set()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - Redis down: back off, reconnect
                    delay = backoff.fail(self.clock.monotonic())
                    if backoff.failures == 1:
                        log.warning("notifications: Redis unreachable (%s); the resync covers; retrying", exc)
                    await asyncio.sleep(delay)
                finally:
                    try:
                        await pubsub.aclose()
                    except Exception:  # noqa: BLE001
                        pass
        finally:
            await client.aclose()
