"""The dispatcher: plan, start, commit. One dispatch, in three parts (:meth:`Dispatcher.dispatch`
runs them, the live loop calls it):

1. **plan**: the head of the fair order that fits the free budget
   (:meth:`LiveState.to_start`), checked against the rows just read: a row that moved
   meanwhile is applied first and the plan made again (:func:`moved`). :class:`StartBatch`
   (what one dispatch starts) also keeps each chart's place and round for the log line.
2. **start**: each chart's workflow through the Temporal port (a failed start arrives
   judged, as ``StartFailed``, and :class:`StartFailures` says what it means for the
   chart); :class:`StartResults` collects the answers (started, already closed, refused for
   good, to retry).
3. **commit**: the charts that started leave the order and hold their cost
   (:meth:`LiveState.commit_dispatch`), their rows move queued -> running by
   compare-and-set, with the round state, and each is watched, recorded or followed.

:func:`moved`, :class:`StartBatch` and :class:`StartResults` are the pure pieces: no I/O, no clock.
Recording, cancelling and watching are :mod:`~fairsched.engine.sync`'s;
the ETA recorded at dispatch is :mod:`~fairsched.engine.eta_passes`'.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from common import metrics
from fairsched.engine.eta_passes import EtaPasses
from fairsched.engine.host import Host, Part
from fairsched.engine.live_types import Effects, InFlight
from fairsched.engine.ports.temporal import PERMANENT, TRANSIENT, UNKNOWN, AlreadyStarted, WorkflowNotFound, classify, describe
from fairsched.engine.state import QUEUED, RUNNING, LiveState
from fairsched.engine.store.db import StartRow
from fairsched.engine.store.rows import ChartRow
from fairsched.engine.sync import Sync
from fairsched.temporal.client import Outcome
from fairsched.temporal.shared import ChartInput, split_temporal_type, workflow_id

log = logging.getLogger("fairsched.engine")


# ---------------------------------------------------------------- failed starts
MAX_UNKNOWN_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class Verdict:
    fail: bool        # fail the chart now (else it stays queued and is tried again)
    kind: str         # PERMANENT / TRANSIENT / UNKNOWN
    reason: str       # the chart's error if failed; the log line's cause otherwise
    attempts: int = 0  # failed attempts of the UNKNOWN kind so far


class StartFailures:
    """Failed start attempts per chart, and how long one chart may keep trying: :meth:`verdict`
    says which workflow-start errors a retry can cure (pure: no I/O, no clock). The Temporal
    port judges the error itself (:func:`fairsched.engine.ports.temporal.classify`): a failed
    start reaches the dispatcher as a ``StartFailed``. The rule, in the order it applies:

    1. **Refused for good** (:data:`PERMANENT`): Temporal says the request itself is
       wrong, so the same request fails the same way for ever. ``INVALID_ARGUMENT``
       (a payload over Temporal's blob limit, "Blob data size exceeds limit"; a
       malformed task queue or timeout), ``RESOURCE_EXHAUSTED`` about the *message
       size* ("received message larger than max"), and an input the data converter
       cannot serialise (``TypeError``/``ValueError``/...). The chart is failed at
       once with the reason in its ``error``; the order moves on.
    2. **Temporal unavailable** (:data:`TRANSIENT`): every status but those of 1. and 3.
       (``UNAVAILABLE``, ``DEADLINE_EXCEEDED``, ``CANCELLED``, ``INTERNAL``, ``UNKNOWN``,
       ``ABORTED``, ``DATA_LOSS``, ``UNIMPLEMENTED``, a rate limit: ``RESOURCE_EXHAUSTED``
       about anything else, ``FAILED_PRECONDITION``: a namespace not active in this
       cluster), the scheduler's own configuration (``NOT_FOUND``: no such namespace,
       ``PERMISSION_DENIED``, ``UNAUTHENTICATED``) and transport errors (``OSError``, a
       timeout). ``INTERNAL`` and ``UNKNOWN`` are what gRPC makes of a proxy in front of
       Temporal answering HTTP 500 or 502: Temporal may never have seen the request, and
       nothing says the chart is at fault. Every chart would fail the same way, so none is
       blamed and none is counted: dispatch backs off (0.5 s doubling to 10 s) and the chart
       keeps its place, for as long as it lasts.
    3. **Anything else** (:data:`UNKNOWN`): a status about the request that does not prove
       it bad for ever (``OUT_OF_RANGE``, an ``ALREADY_EXISTS`` that is not the
       already-started error) and any other exception (the SDK or this code tripping on
       this chart's input). Retried with the same backoff, but at most
       :data:`MAX_UNKNOWN_ATTEMPTS` times per chart; then the chart is failed with the
       last error. So no such chart holds the head of the order for more than 5 attempts
       (about 8 s of backoff).

    The counts live in the scheduler's memory: a restarted scheduler starts them
    afresh (a bound per process, never an unbounded loop).
    """

    def __init__(self, max_unknown: int = MAX_UNKNOWN_ATTEMPTS) -> None:
        self.max_unknown = max_unknown
        self.attempts: dict[int, int] = {}

    def verdict(self, chart_id: int, exc: BaseException) -> Verdict:
        kind = classify(exc)
        reason = describe(exc)
        if kind == PERMANENT:
            self.attempts.pop(chart_id, None)
            return Verdict(True, kind, f"cannot start: {reason}")
        if kind == TRANSIENT:
            return Verdict(False, kind, reason, self.attempts.get(chart_id, 0))
        n = self.attempts[chart_id] = self.attempts.get(chart_id, 0) + 1
        if n >= self.max_unknown:
            return Verdict(True, kind, f"cannot start: {n} attempts failed; the last: {reason}", n)
        return Verdict(False, kind, reason, n)

    def forget(self, chart_id: int) -> None:
        """The chart started, or left the queue: its count no longer matters."""
        self.attempts.pop(chart_id, None)


def moved(state: LiveState, planned: list[str], rows: dict[int, StartRow]) -> list[tuple[int, ChartRow | None]]:
    """The planned charts whose row no longer agrees with memory (gone, no longer queued,
    paused, priority, org or workflow changed): (chart id, row now) to apply before planning again."""
    out = []
    for cid in planned:
        s = rows.get(int(cid))
        q = state.queue.get(cid)
        if s is None or s.row.state != QUEUED or s.row.paused != q.paused or s.row.priority != q.priority \
                or s.row.org != int(q.org) or s.row.workflow != q.workflow:
            out.append((int(cid), s.row if s else None))
    return out


@dataclass
class StartBatch:
    """What one dispatch starts: the head of the order, in order, and the rows read for it."""

    charts: list[str]
    rows: dict[int, StartRow]
    before: dict[str, tuple[int | None, int | None]]  # chart -> (place, round) before the dispatch
    free_before: int

    @classmethod
    def of(cls, state: LiveState, planned: list[str], rows: dict[int, StartRow]) -> "StartBatch":
        before = {cid: (state.queue.position(cid), state.queue.round_of(cid)) for cid in planned}
        return cls(planned, rows, before, state.free)


@dataclass
class StartResults:
    """How the starts of one batch went."""

    run_ids: dict[str, str] = field(default_factory=dict)      # chart -> run id: started (or found)
    closed: dict[int, Outcome] = field(default_factory=dict)   # its workflow had already closed
    refused: dict[str, str] = field(default_factory=dict)      # chart -> its error: fail it, it can never start
    retry: list[str] = field(default_factory=list)             # failed, may start later: back dispatch off
    # seconds: the tick's steps before the dispatch, its plan and read, its starts on Temporal
    took: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def started(self, at: float) -> dict[str, tuple[str, float]]:
        """chart -> (run id, start time), for :meth:`LiveState.commit_dispatch`."""
        return {cid: (run_id, at) for cid, run_id in self.run_ids.items()}


class Dispatcher(Part):
    def __init__(self, host: Host, sync: Sync, etas: EtaPasses) -> None:
        super().__init__(host)
        self.sync, self.etas = sync, etas
        self.starts = 0  # workflows started by this process (bench, tests)
        self._start_failures = StartFailures()
        self._phases: tuple = (0, 0.0, 0.0, 0.0)  # the last dispatch: charts, plan, start, commit
        self._chained = False  # the last dispatch's commit was (phases())

    @property
    def start_failures(self) -> StartFailures:
        """The start errors counted against each chart (a chart is failed after
        ``max_unknown`` unknown ones in a row; :class:`StartFailures`)."""
        return self._start_failures

    # ---------------------------------------------------------------- plan
    async def dispatch(self) -> Effects:
        """Start the head of the order that fits, then record what started: plan, start,
        commit (:mod:`fairsched.engine.dispatcher`).

        A start that fails is judged by :class:`StartFailures`: refused for good
        (payload too large, invalid argument, an input that cannot be serialised or is
        not a JSON object) fails the chart at once, compare-and-set from queued, and the
        order moves on in this same pass; Temporal unavailable (a server-side status such
        as ``INTERNAL`` or ``UNKNOWN``, or a transport error) keeps the chart in place and
        backs dispatch off, however long it lasts; an error about the request that proves
        nothing does too, but a chart is failed after ``MAX_UNKNOWN_ATTEMPTS`` of those
        (unless Temporal shows its workflow after all). A chart whose workflow already ran
        but whose outcome cannot be read keeps its place too; the rest of the dispatch commits."""
        fx = Effects()
        clock = self.clock
        t0 = clock.monotonic()
        self._chained = False
        batch = await self._plan(fx)
        if batch is None:
            return fx
        t1 = clock.monotonic()
        starts = await self._start_all(batch)
        t2 = clock.monotonic()
        starts.took = (max(0.0, t0 - self.host.loop.tick_at), t1 - t0, t2 - t1)
        fx.merge(await self._commit(batch, starts))
        self._phases = (len(batch.charts), *starts.took[1:], clock.monotonic() - t2)
        return fx

    def phases(self) -> str:
        """Where the last dispatch's time went (the scheduler's slow-step line names it)."""
        n, plan, start, commit = self._phases
        return (f"{n} chart{'s' if n != 1 else ''}: plan and read {1000 * plan:.0f} ms, start on Temporal "
                f"{1000 * start:.0f} ms, commit {1000 * commit:.0f} ms"
                + (" (chained after the save in flight: written meanwhile)" if self._chained else ""))

    async def _plan(self, fx: Effects) -> StartBatch | None:
        """The head of the order that fits, its rows read and agreeing with memory (rows that
        moved are applied into ``fx`` and the plan made again). None: nothing to start now."""
        state = self.state
        for _ in range(self.PLAN_ATTEMPTS):
            planned = state.to_start(self.clock.time())
            if not planned:
                return None
            rows = await self.store.read_for_start([int(c) for c in planned])
            changed = moved(state, planned, rows)
            for chart_id, row in changed:
                fx.merge(state.apply_chart(chart_id, row))
            if not changed:
                return StartBatch.of(state, planned, rows)
        return None

    # ---------------------------------------------------------------- start
    async def _start_all(self, batch: StartBatch) -> StartResults:
        sem = asyncio.Semaphore(self.START_CONCURRENCY)
        starts = StartResults()
        results = await asyncio.gather(*(self._start_one(batch.rows[int(cid)], cid, sem, starts)
                                         for cid in batch.charts))
        starts.run_ids = {cid: run_id for cid, run_id in results if run_id is not None}
        return starts

    async def _start_one(self, s: StartRow, cid: str, sem: asyncio.Semaphore, starts: StartResults) -> tuple[str, str | None]:
        """Start one chart's workflow: (chart, run id), run id None if it did not start."""
        ttype, queue = split_temporal_type(s.temporal_type, self.host.task_queue)
        if not isinstance(s.payload, dict):  # written around the services: no workflow takes it
            starts.refused[cid] = f"cannot start: payload: must be a JSON object, got {type(s.payload).__name__}"
            return cid, None
        chart = ChartInput(chart_id=s.row.id, org=s.org_slug, org_id=s.row.org, workflow=s.row.workflow,
                           external_id=s.row.external_id, payload=s.payload)
        async with sem:
            try:
                run_id = await self.temporal.start(temporal_type=ttype, task_queue=queue, chart=chart,
                                                   execution_timeout_s=s.execution_timeout_s)
            except AlreadyStarted:
                # It ran before (a crash after starting, before recording): never again. Its real outcome:
                try:
                    outcome = await self.temporal.outcome(s.row.id)
                except Exception as exc:  # noqa: BLE001 - this chart only: the rest of the dispatch commits
                    # Temporal cannot say now: the chart keeps its place, and the next dispatch
                    # (after the backoff) is refused again and reads the outcome then.
                    starts.retry.append(cid)
                    log.warning("start of chart #%s: its workflow already ran, but its outcome cannot be read "
                                "(%s: %s); it keeps its place", cid, type(exc).__name__, exc)
                    return cid, None
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

    async def _judge_start_failure(self, chart_id: int, cid: str, what: str, exc: Exception, starts: StartResults) -> None:
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
        except WorkflowNotFound:
            return False
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
        return await self.sync.apply_rows(ids)

    # ---------------------------------------------------------------- commit
    async def _commit(self, batch: StartBatch, starts: StartResults) -> Effects:
        """What started leaves the order and holds its cost; rows move queued -> running
        (compare-and-set, with the round state, in one transaction); the refused fail.

        The round state's saves commit in the order they were made, one at a time. While
        the backfill runs (its chunks load the database) or another save is in flight (the
        backfill's chunk, written aside, or an earlier dispatch's commit), this commit is
        written as a task of its own (:meth:`_commit_later`), chained after the save in
        flight, and the loop goes on: the next chart whose turn comes starts meanwhile. Until its row is written the chart is ``committing``: a read of
        its row as still queued is behind memory, not the truth (``LiveState._chart_queued``)."""
        fx = Effects()
        at = self.clock.time()
        started = starts.started(at)
        planned = batch.charts
        if starts.retry:
            self.host.loop.backoff["dispatch"].fail(self.clock.monotonic())  # Temporal trouble: do not spin
        if starts.refused:
            fx.merge(await self._fail_unstartable(starts.refused))
            planned = [cid for cid in planned if cid not in starts.refused]  # still the head of the order
        if not started:
            return fx
        new = self.state.commit_dispatch(planned, started)
        save = self.host.rounds.next(self.state.queue)
        work = self.state.work_of(save[1]) if save is not None else None
        items = [(r.id, r.cost, r.run_id, at, *self.etas.eta_in_force(r, at)) for r in new if r.id not in starts.closed]
        held = {r.id: r.demand for r in new if r.demand is not None and r.id not in starts.closed}  # with pools
        before = self.host.loop.chunk
        if before is None and not self.host.rounds.backfilling:
            ran = await self.store.mark_running(items, (*save, work) if work else save, held or None)
            self.host.rounds.written(save)
            fx.merge(await self._after_commit(batch, starts, new, ran, at))
            return fx
        self.state.committing.update(r.id for r in new)
        for r in new:  # watched from now, not from the tick that follows the commit
            if r.id not in starts.closed:
                self.sync.watch(r.id)
        self._chained = True
        self.host.loop.chunk = asyncio.create_task(
            self._commit_later(before, self.state, batch, starts, new, items, save, work, at, held or None),
            name="dispatch-commit")
        return fx

    async def _commit_later(self, before: asyncio.Task | None, state, batch: StartBatch, starts: StartResults, new: list[InFlight],
                            items: list[tuple], save, work, at: float, held: dict[int, tuple] | None = None) -> None:
        """A dispatch's commit chained after the save in flight (``before``): its round
        state is the one the dispatch left. Of the charts' rounds it saw pending, those a
        save in between wrote are left out (the ones still pending are written with it,
        whatever later changed them: its round state needs them). What the write returned
        goes back to the loop (:meth:`finish_commits`), which follows it as an inline
        commit would."""
        me = asyncio.current_task()
        waited = self.clock.monotonic()
        try:
            if before is not None:
                await asyncio.wait({before})
            if self.host.state is not state:
                # stepped down and gave the lease up meanwhile (a step-down waits for the saves
                # in flight, for a while): never write after it, or a next leader's saves would
                # be overwritten; its load adopts these started workflows
                log.warning("commit of charts %s dropped: this scheduler stepped down", [r.id for r in new])
                return
            if save is not None:
                save, work = self.host.rounds.unwritten(save, work)
            ran = await self.store.mark_running(items, (*save, work) if work else save, held)
            self.host.rounds.written(save)
        except Exception as exc:  # noqa: BLE001 - its charts' rows stay queued: the resyncs follow them
            ran = None
            self.host.loop.backoff["dispatch"].fail(self.clock.monotonic())
            log.warning("commit of charts %s failed (%s: %s); their rows stay queued", [r.id for r in new],
                        type(exc).__name__, exc)
        finally:
            if self.host.loop.chunk is me:
                self.host.loop.chunk = None
        took = self.clock.monotonic() - waited
        if took >= self.host.STEP_SLOW_LOG_S:
            self.host.log_slow_step("dispatch-commit", took, "after the save in flight: the loop went on")
        if self.host.state is state:  # (stepped down meanwhile: the next leader's load reads the rows)
            self.host.loop.commits_done.append((batch, starts, new, ran, at))
            self.host.loop.wake.set()

    async def finish_commits(self) -> Effects:
        """In the tick: follow the commits written after the save in flight, in order."""
        fx = Effects()
        done = self.host.loop.commits_done
        while done and self.state is not None:
            batch, starts, new, ran, at = done.pop(0)
            self.state.committing.difference_update(r.id for r in new)
            if ran is not None:
                fx.merge(await self._after_commit(batch, starts, new, ran, at))
        return fx

    async def _after_commit(self, batch: StartBatch, starts: StartResults, new: list[InFlight], ran: dict, at: float) -> Effects:
        fx = Effects()
        metrics.charts_started([(r.org, batch.rows[r.id].row.created_at) for r in new if ran.get(r.id)], at)
        free = batch.free_before
        for r in new:
            free -= r.cost
            fx.merge(await self._committed(r, batch, starts, bool(ran.get(r.id)), free))
        return fx

    async def _committed(self, r: InFlight, batch: StartBatch, starts: StartResults, ran: bool, free: int) -> Effects:
        """One chart the dispatch started: recorded if its workflow had already closed,
        watched if its row moved to running, else its row (moved meanwhile) is followed."""
        if r.id in starts.closed:
            log.info("dispatch chart #%d skipped: workflow %s already closed as %s; recording it",
                     r.id, workflow_id(r.id), starts.closed[r.id].state)
            return await self.sync.record(r.id, starts.closed[r.id], "adopt")
        if ran:
            pos, rnd = batch.before.get(str(r.id), (None, None))
            log.info("dispatch chart #%d org=%d workflow=%s cost=%d round=%s pos=%s run=%s free=%d "
                     "(the tick before it %.0f ms, plan and read %.0f ms, start on Temporal %.0f ms)", r.id, r.org,
                     r.workflow, r.cost, rnd, pos, r.run_id, free, *(1000 * s for s in starts.took))
            self.sync.watch(r.id)
            return Effects(events=[{"kind": "dispatch", "chart": r.id, "org": r.org, "cost": r.cost}])
        # The row moved meanwhile: it is the truth.
        rows_now, _ = await self.store.read_charts({r.id}, known_orgs=self.state.orgs)
        row = rows_now.get(r.id)
        log.info("dispatch chart #%d: row is now %s; following it", r.id, row.state if row else "deleted")
        if row is None or row.state == "cancelled":
            await self.sync.cancel(r.id)
        fx = self.state.apply_chart(r.id, row)
        if row is not None and row.state == RUNNING:
            self.sync.watch(r.id)
        return fx
