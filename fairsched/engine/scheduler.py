"""The live scheduler loop (``manage.py runscheduler``).

One asyncio loop owns all state (:class:`fairsched.engine.state.LiveState`), and
:meth:`Scheduler.tick` is its only step. The work is done by five collaborators, each
reading the state and the ports through the scheduler (:mod:`fairsched.engine.host`)
and returning effects that the tick carries out:

- :mod:`~fairsched.engine.leadership`: the lease (standby, the keeper thread, the
  release) and the notification listener;
- :mod:`~fairsched.engine.startup`: the head-first load and the whole backlog's take-over;
- :mod:`~fairsched.engine.dispatcher`: plan, start, commit;
- :mod:`~fairsched.engine.eta_passes`: when a pass runs, in a forked child or a thread,
  what it publishes, the first ETAs, the snapshot's confirmation, the live updates;
- :mod:`~fairsched.engine.sync`: notes, resyncs, reconcile, finish (record), cancels.

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
   :class:`fairsched.engine.dispatcher.StartFailures`, so it never holds the head),
7. then does one chunk of the long jobs, so that no dispatch waits behind one in its
   tick: the full resync, everything every ``FULL_RESYNC_S`` (raw SQL and
   ``QuerySet.update()`` calls that leave ``updated_at`` alone), and a first start's
   rounds (:mod:`scheduling.backfill`; written aside while the loop goes on, see
   :meth:`Scheduler.backfill_step`),
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
import logging
import math
from collections.abc import Callable, Coroutine
from typing import Any

from scheduling import RoundSaver
from fairsched.engine import forked
from fairsched.engine.forked import EtaPassIn
from fairsched.engine.dispatcher import Dispatcher
from fairsched.engine.eta_passes import EtaPasses
from fairsched.engine.host import LoopState
from fairsched.engine.leadership import Leadership, LeaseLost
from fairsched.engine.ports.protocols import (Clock, LeasePort, NotificationSource, Publisher, Store, TemporalPort,
                                              Unavailable)
from fairsched.engine.ports.real import DbStore, LivePublisher, SystemClock
from fairsched.engine.ports.temporal import TemporalClient
from fairsched.engine.previews import PreviewPort, Previews
from fairsched.engine.ports.redis import RedisLease, RedisNotifications, RedisPreviews
from fairsched.engine.startup import Startup
from fairsched.engine.live_types import Effects
from fairsched.engine.state import LiveState
from fairsched.engine.sync import Sync
from fairsched.temporal.shared import WorkflowIds, use_workflow_ids

__all__ = ["Scheduler"]

log = logging.getLogger("fairsched.engine")


# One step of a tick: (backoff name, is it due at ``now``?, the step, what to do after it ran).
Step = tuple[str, Callable[[float], bool], Callable[[], Any], Callable[[], None] | None]


class Scheduler:
    # What the loop owns (set in __init__): the state, its round saver and the loop's shared
    # bookkeeping (fairsched.engine.host.LoopState), which the collaborators read through it.
    state: LiveState | None
    rounds: RoundSaver
    loop: LoopState

    LEASE_TTL_S: float = 5.0          # a standby takes over at most this long after the leader dies
    LEASE_RENEW_S: float = 1.0
    STANDBY_POLL_S: float = 0.5
    RESYNC_INTERVAL_S: float = 3.0    # incremental re-read: charts changed since the last one
    RESYNC_OVERLAP_S: float = 10.0    # each incremental read goes this far before the last one began
    RESYNC_CHUNK: int = 2000          # ... at most this many charts a tick (a bulk import: a chunk a tick)
    FULL_RESYNC_S: float = 300.0      # full re-read (in chunks), the safety net for raw writes
    FULL_RESYNC_CHUNK: int = 1000     # charts per chunk of the full re-read (one per tick, after its dispatch)
    FULL_RESYNC_COST_FACTOR: float = 100.0  # ... and at most every this many times its own duration
    HEAD_PER_ORG: int = 250           # a start loads first this many charts per org with a round, and without
    BACKFILL_MIN: int = 20_000        # more new rounds than this at a load are written a chunk at a time ...
    BACKFILL_CHUNK: int = 1000        # ... this many per write (one per tick, after its dispatch)
    MAX_SLEEP_S: float = 1.0          # the loop wakes at least this often
    BACKOFF_MIN_S: float = 0.5
    BACKOFF_MAX_S: float = 10.0
    START_CONCURRENCY: int = 64       # workflow starts in flight at once (FAIRSCHED_START_CONCURRENCY)
    DESCRIBE_CONCURRENCY: int = 16    # reconcile RPCs in flight at once
    MAX_EVENTS_PER_TICK: int = 50     # more are summarised in one "batch" event
    ETA_SOON_MIN_GAP_S: float = 0.2   # after a change, publish this soon after the last pass ...
    ETA_SOON_COST_FACTOR: float = 2.0  # ... or this many times the last pass's cost, if larger
    ETA_IDLE_COST_FACTOR: float = 60.0  # with nothing changing, a pass at most every this many times its cost
    FIRST_ETAS_PER_WRITE: int = 2000   # first ETAs recorded per database write ...
    FIRST_ETAS_WRITE_SHARE: float = 0.5  # ... paced: the writes take at most this share of the time
    ETAS_KEPT: int = 10_000            # the last pass's ETAs kept for dispatch: this far into the order
    GIVE_BACK_MIN_CHARTS: int = 10_000  # a pass over this many charts or more gives the C heap back after it
    FREEZE_MIN_CHARTS: int = 10_000   # a load of this many or more moves them out of the collector's sight
    ETA_SLOW_LOG_S: float = 1.0        # log the passes that take longer than this
    STEP_SLOW_LOG_S: float = 0.1       # and the loop's steps (a dispatch waits behind one) ...
    STEP_SLOW_LOG_EVERY_S: float = 10.0  # ... one line a step this often at most (a backfill's chunks)
    ETA_PASS_TIMEOUT_MIN_S: float = 10.0   # a pass in a child is killed after this long (a hung one: 12 charts, once in CI) ...
    ETA_PASS_TIMEOUT_FACTOR: float = 10.0  # ... or this many times the last pass's cost, if longer ...
    ETA_PASS_TIMEOUT_PER_CHART_S: float = 0.0006  # ... or this per chart queued or running (600 s at 1M)
    ETA_PASS_NICE: int = 10            # a pass in a child yields the CPU to dispatch (and the database, Temporal)
    PREVIEW_REUSE_MAX_AGE_S: float = 60.0  # a preview's "before" is the last pass's if nothing changed since, this recent
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
        start_concurrency: int | None = None,
        workflow_task_timeout_s: float | None = None,
        clock: Clock | None = None,
        store: Store | None = None,
        publisher: Publisher | None = None,
        temporal: TemporalPort | None = None,
        lease: LeasePort | None = None,
        notifications: NotificationSource | None = None,
        eta_pass_in: EtaPassIn | str = EtaPassIn.THREAD,
        previews: PreviewPort | None = None,
    ) -> None:
        """``clock``, ``store``, ``publisher``, ``temporal``, ``lease``, ``notifications``: the
        ports (:mod:`fairsched.engine.ports`), the real ones unless given (tests give fakes).
        ``eta_pass_in``: where the ETA pass runs, ``"process"`` (a forked child, off the loop's
        GIL: :mod:`fairsched.engine.forked`; ``runscheduler``'s default) or ``"thread"`` (in
        this process: a fake publisher sees what the pass publishes)."""
        try:
            eta_pass_in = EtaPassIn(eta_pass_in)
        except ValueError:
            raise ValueError(f"eta_pass_in: 'process' or 'thread', not {eta_pass_in!r}") from None
        if eta_pass_in is EtaPassIn.PROCESS and not forked.available():
            eta_pass_in = EtaPassIn.THREAD
        self.eta_pass_in = eta_pass_in
        self.temporal_address = temporal_address
        self.namespace = namespace
        self.task_queue = task_queue
        self.redis_url = redis_url
        self.watch_results = watch_results
        if start_concurrency is not None:
            self.START_CONCURRENCY = start_concurrency
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
        self.publisher: Publisher = publisher or LivePublisher(redis_url)
        self.temporal: TemporalPort = temporal or TemporalClient(temporal_address, namespace,
                                                                 task_timeout_s=workflow_task_timeout_s)

        # What the loop owns: the state, the round saver, the loop's shared bookkeeping
        # (what the reporters report to the next tick, the events, the backoffs: host.LoopState).
        self.state: LiveState | None = None
        self.rounds = RoundSaver(None)  # what of the round state is written, and when (install())
        self.loop = LoopState.new(self.BACKOFF_MIN_S, self.BACKOFF_MAX_S)
        self.leading = False
        self.phase = "starting"  # what the loop is doing, for the stop's log lines
        self.ids: WorkflowIds | None = None  # this deployment's workflow ids (at take-over)
        self._stop_requested: tuple[float, str] | None = None  # (monotonic time, phase) of the stop request
        self._slow_steps: dict[str, tuple[int, float, float]] = {}  # name -> (not logged, longest, logged at)
        self._resync_due = 0.0
        self._reconcile_due = 0.0
        self._backfill_chunk: asyncio.Task | None = None  # the backfill's own chunk in flight (one at a time)

        # The collaborators (each reads the state and the ports through this scheduler).
        self.leadership = Leadership(self, lease or RedisLease(redis_url, self.LEASE_TTL_S),
                                     notifications or RedisNotifications(redis_url))
        self.sync = Sync(self)
        self.etas = EtaPasses(self)
        self.dispatcher = Dispatcher(self, self.sync, self.etas)
        self.startup = Startup(self, self.sync, self.etas)
        self.previews = Previews(self, previews if previews is not None else RedisPreviews(redis_url))

    @property
    def starts(self) -> int:
        """Workflows started by this process (bench, tests)."""
        return self.dispatcher.starts

    def install(self, state: LiveState, rounds: RoundSaver) -> None:
        """The start-up built a state (and its round saver): from now on the loop's."""
        self.state = state
        self.rounds = rounds

    # ================================================================ lifecycle
    def stop(self, *, requested_at: float | None = None, during: str | None = None) -> None:
        """Warm stop: leave running work alone, release the lease (see the module docstring).
        ``requested_at`` / ``during``: when the signal came and what the loop did then, if earlier."""
        if self._stop_requested is None:
            self._stop_requested = (requested_at or self.clock.monotonic(), during or self.phase)
        self.loop.stop.set()
        self.loop.wake.set()

    def wake(self) -> None:
        self.loop.wake.set()

    async def run(self) -> None:
        """Stand by until holding the lease, then lead until stopped or the lease is lost."""
        leadership = self.leadership
        leadership.started = True
        try:
            while not self.loop.stop.is_set():
                self.phase = "standby"
                if not await self._until_stopped(leadership.acquire_lease(), grace_s=0.0):
                    break
                try:
                    await self._until_stopped(self._lead(), grace_s=self.STOP_GRACE_S)
                except LeaseLost:
                    log.warning("lease lost to %s: stepping down to standby", await leadership.lease_holder())
                finally:
                    self.phase = "stepping down"
                    await self.step_down()
        finally:
            self.phase = "releasing the lease"
            closing = [asyncio.to_thread(leadership.close_lease, self.STOP_WAIT_S), leadership.lease.aclose()]
            if hasattr(self.publisher, "aclose"):
                closing.append(self.publisher.aclose())
            for close in closing:
                try:
                    await self.clock.wait_for(close, self.STOP_WAIT_S)
                except (Unavailable, OSError, asyncio.TimeoutError):
                    pass
            self.phase = "stopped"
            if self._stop_requested is not None:
                at, during = self._stop_requested
                log.info("scheduler stopped %.2f s after the stop request (during: %s)", self.clock.monotonic() - at, during)
            else:
                log.info("scheduler stopped")

    def release_lease_now(self) -> None:
        """Release the lease synchronously if still ours: for a forced exit, whatever the loop is doing."""
        self.leadership.close_lease(1.0)

    async def _until_stopped(self, work: Coroutine[Any, Any, Any], *, grace_s: float) -> Any:
        """``await work``, unless a stop comes first: then cancel it (safe at any await: see the
        module docstring), a dispatch after ``grace_s``. None if it did not finish."""
        task = asyncio.create_task(work)
        stopping = asyncio.create_task(self.loop.stop.wait(), name="stopping")
        try:
            await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done() and self.phase == "dispatch":  # spare the next leader an adoption
                await self.clock.wait_tasks({task}, grace_s)
            if not task.done():
                if grace_s:
                    log.info("stop: cancelling the current step (%s)", self.phase)
                task.cancel()
                await self.clock.wait_tasks({task}, self.STOP_WAIT_S)
        finally:
            stopping.cancel()
            if not task.done():
                task.cancel()  # run() itself was cancelled, or the step ignores cancellation: leave it
        if task.done() and not task.cancelled():
            return task.result()  # LeaseLost (or a bug) surfaces here
        return None

    async def sleep(self, seconds: float) -> None:
        """Sleep, unless a stop comes first."""
        await self.clock.wait(self.loop.stop, seconds)

    async def _lead(self) -> None:
        self.leading = True
        self.leadership.lost = False
        self.loop.tasks = [asyncio.create_task(self.leadership.keep_lease(), name="lease"),
                           asyncio.create_task(self.leadership.listen(), name="notifications"),
                           asyncio.create_task(self.previews.serve(), name="previews")]
        if not await self.take_over():
            return
        while not self.loop.stop.is_set():
            if self.leadership.lost:
                raise LeaseLost()
            await self.tick()
            await self._wait_for_work()

    async def take_over(self) -> bool:
        """Connect to Temporal, load the backlog and reconcile: ready to tick (False: stopped).
        What a leader does first (``run()``, once it holds the lease); :meth:`step_down` undoes it."""
        self.phase = "connecting to Temporal"
        await self.temporal.connect()
        self.phase = "loading the backlog"
        await self._use_deployment()  # before any call naming a workflow
        await self.startup.load()
        if self.loop.stop.is_set():
            return False
        # Adopt what a crashed predecessor started but never recorded, before dispatching
        # anything; and watch them (and the final rows whose workflow still runs) to their
        # close, or their cost stays held until the next reconcile. (The first snapshot
        # shows them: the effects' events are not published.)
        fx = await self.guarded("reconcile", self.sync.reconcile)
        if isinstance(fx, Effects):
            await self._carry_out(fx)
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
        self.sync.legacy_active = await self.store.legacy_active(self.ids)

    async def step_down(self) -> None:
        """Stop leading (``run()``, when the lease is lost or at a stop): cancel the leader's
        tasks and the result watches, wait (``STOP_WAIT_S`` at most) for them and the round
        state's save in flight, and forget the state and what was reported for its ticks: a
        leader again loads its own (:meth:`take_over`)."""
        self.leading = False
        for task in self.loop.tasks:
            task.cancel()
        tasks = self.loop.tasks + self.sync.stop_watching()
        if self.loop.chunk is not None:  # its write ends before the lease goes (never after a next leader's)
            tasks.append(self.loop.chunk)
        if tasks:
            await self.clock.wait_tasks(tasks, self.STOP_WAIT_S)  # one that ignores its cancel is left behind
        self.loop.tasks = []
        self.etas.stepped_down()  # a leader again confirms only what its own passes store
        self.state = None
        self.startup.stepped_down()
        self.loop.forget_reports()

    async def _wait_for_work(self) -> None:
        self.phase = "waiting for work"
        if self.loop.has_news:
            return
        await self.clock.wait(self.loop.wake, self.idle_for())

    def idle_for(self) -> float:
        """Seconds until the next timed step is due (at most ``MAX_SLEEP_S``). A partial
        state runs no resync and no ETA pass: their due times, left in the past, must not
        wake it (the loop spun, and starved the thread reading the whole backlog)."""
        now = self.clock.monotonic()
        due = min(self._reconcile_due, now + self.MAX_SLEEP_S)
        if not (self.state is not None and self.state.partial):
            due = min(due, self._resync_due, self.etas.next_pass_due)
        if self.state is not None:  # backfill: a guard's window ends, a dispatch is due
            wall = self.clock.time()
            release = self.state.queue.next_release(wall)
            if release is not None:
                due = min(due, now + release - wall)
        return max(0.0, due - now)

    # ================================================================ the step
    async def tick(self) -> None:
        """One pass of the loop (see the module docstring). Never raises on I/O errors."""
        self.loop.wake.clear()
        self.loop.tick_at = self.clock.monotonic()
        if self.state is None:
            return
        if self.startup.whole_ready:
            await self.rounds_settled()
            await self.startup.take_over_whole()
        fx = Effects()
        if self.loop.commits_done:
            fx.merge(await self.guarded("commit", self.dispatcher.finish_commits) or Effects())
        now = self.clock.monotonic()
        await self._run_due(self._catch_up_steps(), now, fx)
        await self._carry_out(fx)
        await self._run_due(self._cancel_steps(), now, fx)
        if self.may_dispatch() and self.loop.backoff["dispatch"].ready(now):
            dfx = await self.guarded("dispatch", self.dispatcher.dispatch, detail=self.dispatcher.phases) or Effects()
            await self._carry_out(dfx)
            fx.merge(dfx)
        cfx = Effects()
        await self._run_due(self._chunk_steps(), now, cfx)
        if cfx:
            await self._carry_out(cfx)
            fx.merge(cfx)
            self.loop.wake.set()  # what the chunk changed may start something: the next tick dispatches
        if not self.state.partial:  # ETAs, snapshots and live counters need the whole order
            self.etas.schedule_eta(fx, now)
        if self.leading and self.state is not None:
            await self.guarded("rounds", self._save_rounds)
        await self.etas.confirm_snapshot()
        if fx.events and not self.state.partial:
            await self.etas.broadcast(fx.events)

    def _catch_up_steps(self) -> tuple[Step, ...]:
        """What a tick catches up on before dispatching, in order: (backoff name, is it due
        at ``now``?, the step, what to do after it ran)."""
        return (
            ("finish", lambda now: bool(self.loop.finished), self.sync.record_finished, None),
            ("notes", lambda now: bool(self.loop.notes), self.sync.apply_notes, None),
            # (a partial state leaves the resyncs to the whole backlog's, which takes over)
            ("resync", lambda now: not self.state.partial and (self.loop.resync_requested or now >= self._resync_due),
             self.sync.resync, self._resync_done),
            ("reconcile", lambda now: now >= self._reconcile_due, self.sync.reconcile, self._reconcile_done),
        )

    def _chunk_steps(self) -> tuple[Step, ...]:
        """The long jobs done a chunk per tick, after the tick's dispatch: a chart whose turn
        has come never waits for a chunk of them in its own tick (only for one already in
        flight). Each chunk sets the wake-up while more remain."""
        return (
            ("resync", lambda now: not self.state.partial and self.sync.full_resync_wanted(now),
             self.sync.full_resync_step, None),
            ("rounds", lambda now: bool(self.rounds.backfilling) and self.leading and self._backfill_chunk is None
             and not self.etas.first_pass_running, self.backfill_step, None),  # (the first ETAs' CPU first)
        )

    def _cancel_steps(self) -> tuple[Step, ...]:
        return (("cancel", lambda now: bool(self.sync.cancels_sent), self.sync.escalate_cancels, None),)

    async def _run_due(self, steps: tuple[Step, ...], now: float, fx: Effects) -> None:
        """Run each step that is due and not backing off (:meth:`guarded`), merging its effects."""
        for name, due, step, then in steps:
            if due(now) and self.loop.backoff[name].ready(now):
                fx.merge(await self.guarded(name, step) or Effects())
                if then is not None:
                    then()

    def _resync_done(self) -> None:
        self._resync_due = self.clock.monotonic() + self.RESYNC_INTERVAL_S

    def _reconcile_done(self) -> None:
        self._reconcile_due = self.clock.monotonic() + self.state.config.reconcile_interval_s

    async def guarded(self, name: str, step: Callable[[], Any], *, detail: Callable[[], str] | None = None,
                       loop_waits: bool = True) -> Any:
        """Run one step; on failure log it and back off that step (the loop keeps going).

        A step may also report a partial failure itself (``Dispatcher.dispatch`` when some starts
        failed: ``self.loop.backoff[name].fail()``); that backoff stands. Only a step that
        ran without any failure resets it, or a failing start would be retried at once,
        tens of times a second.

        A step of the loop that took ``STEP_SLOW_LOG_S`` or more is logged, with ``detail()``
        (where its time went); not one run from a task of its own (``loop_waits=False``:
        the ETA pass, which logs its own time)."""
        self.phase = name
        backoff = self.loop.backoff[name]
        failures = backoff.failures
        began = self.clock.monotonic()
        try:
            result = await step()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - per-step error handling, the loop must survive
            delay = self.loop.backoff[name].fail(self.clock.monotonic())
            if name == "notes":
                self.loop.resync_requested = True
            log.warning("%s failed (%s: %s); retrying in %.1f s", name, type(exc).__name__, exc, delay)
            return None
        if backoff.failures == failures:
            backoff.ok()
        took = self.clock.monotonic() - began
        if took >= self.STEP_SLOW_LOG_S and loop_waits:
            self.log_slow_step(name, took, detail=detail() if detail else "")
        return result if result is not None else True

    def log_slow_step(self, name: str, took: float, how: str = "the loop waited for it", detail: str = "") -> None:
        """One line a step per ``STEP_SLOW_LOG_EVERY_S`` at most, saying how many more were slow."""
        now = self.clock.monotonic()
        more, longest, logged_at = self._slow_steps.get(name, (0, 0.0, -math.inf))
        if now - logged_at < self.STEP_SLOW_LOG_EVERY_S:
            self._slow_steps[name] = (more + 1, max(longest, took), logged_at)
            return
        log.info("step %s took %.0f ms (%s)%s%s", name, 1000 * took, how, f": {detail}" if detail else "",
                 f"; {more} more since the last such line, the longest {1000 * longest:.0f} ms" if more else "")
        self._slow_steps[name] = (0, 0.0, now)

    def may_dispatch(self) -> bool:
        return self.leading and self.clock.monotonic() < self.leadership.ok_until and not self.loop.stop.is_set()

    async def _carry_out(self, fx: Effects) -> None:
        for chart_id in fx.unwatch:
            self.sync.unwatch(chart_id)
        for chart_id in fx.watch:
            if chart_id in self.state.running:
                self.sync.watch(chart_id)
        for chart_id in fx.cancel:
            await self.sync.cancel(chart_id)

    # ================================================================ round state
    async def backfill_step(self) -> Effects:
        """One chunk of the backfill (:mod:`scheduling.backfill`): the next charts in
        round order, with each org's cursor after them, in one transaction, written aside
        (a thread and connection of their own, :meth:`_write_chunk`) while the loop goes
        on: a chart whose turn comes meanwhile reads and starts at once (its commit, which
        carries the round state, is chained after the chunk: ``Dispatcher._commit_later``).
        A chunk made while a dispatch's commit is in flight is chained after it. Public: the
        fault harness of the integration tests holds it back (tests/integration/faulty_scheduler.py)."""
        before = self.loop.chunk
        self.rounds.chunk(self.BACKFILL_CHUNK)
        save = self.rounds.next(self.state.queue)
        if save is not None:
            self.loop.chunk = self._backfill_chunk = asyncio.create_task(
                self._write_chunk(save, self.state.work_of(save[1]), before), name="rounds-chunk")
        return Effects()

    async def _write_chunk(self, save, work, before: asyncio.Task | None = None) -> None:
        began, firsts = self.clock.monotonic(), {}
        orgs = {int(o) for o in map(self.state.queue.org_of, save[1]) if o is not None}  # (the sweep's)
        try:
            if before is not None:  # a commit in flight: written after it (what it wrote left out)
                await asyncio.wait({before})
                save, work = self.rounds.unwritten(save, work)
                began = self.clock.monotonic()
            firsts = self.etas.carried_firsts(save[1])  # a first start: its charts' first ETAs too
            await self.store.save_rounds_aside(*save, work, orgs=orgs, firsts=firsts)
        except Exception as exc:  # noqa: BLE001 - its charts stay pending: the next save writes them
            delay = self.loop.backoff["rounds"].fail(self.clock.monotonic())
            log.warning("rounds failed (%s: %s); retrying in %.1f s", type(exc).__name__, exc, delay)
            return
        finally:
            if self.loop.chunk is asyncio.current_task():
                self.loop.chunk = None
            if self._backfill_chunk is asyncio.current_task():
                self._backfill_chunk = None
            self.loop.wake.set()  # the next chunk (after the tick's dispatch), or the saves it held back
        self.rounds.written(save)
        self.etas.firsts_written(firsts)
        self.loop.backoff["rounds"].ok()
        took = self.clock.monotonic() - began
        if took >= self.STEP_SLOW_LOG_S:
            self.log_slow_step("rounds-chunk", took, "written aside: the loop went on")
        if self.rounds.backfilling or self.state is None:
            return
        if self.state.partial:
            log.info("the rounds of the head of the backlog are written")
        else:
            log.info("every chart's round is written")
            # PostgreSQL: the chunks' dead row versions slow a restart's head read until a
            # vacuum (pg_statistics.vacuum_after_backfill); it runs beside the loop
            self.store.start_vacuum_after_backfill()

    async def rounds_settled(self) -> None:
        """Wait for the round state's saves in flight, if any (the backfill's chunk, the
        commits chained after it): every other use of the round saver (a save, the whole
        backlog's take-over) comes after them, as if they had been written in the tick
        (the saves commit in the order they were made); then follow the chained commits."""
        while self.loop.chunk is not None:
            await asyncio.wait({self.loop.chunk})
        if self.loop.commits_done and self.state is not None:
            await self._carry_out(await self.dispatcher.finish_commits())

    async def _save_rounds(self) -> None:
        """Arrivals and re-ranks change rounds without a dispatch: write them too, so a
        new scheduler resumes exactly this order (one transaction, O(changes))."""
        if self.loop.chunk is not None:
            return  # after the chunk in flight: its end wakes the loop, whose next tick saves
        save = self.rounds.next(self.state.queue)
        if save is not None:
            work = self.state.work_of(save[1])  # share "work": estimates at arrival and shares
            await self.store.save_rounds(*save, work) if work else await self.store.save_rounds(*save)
            self.rounds.written(save)
