"""Sync: what the loop learns from the database and Temporal, as effects on the state.

- **notes**: the rows a batch of notifications names (:class:`~fairsched.engine.notes.Reads`),
  re-read (the row is the truth);
- **resyncs**: the incremental one (rows whose ``updated_at`` moved) and the full one, a
  chunk per tick (the safety net for raw writes);
- **finish**: the result watchers report closed workflows; :meth:`Sync.record` writes
  an outcome and frees its budget;
- **reconcile**: Temporal is the truth for what is in flight (closed workflows, rows
  Temporal does not know, workflows whose row was never marked running);
- **cancels**: cancel a chart's workflow, and terminate one that ignores it for
  ``CANCEL_GRACE_S``.

Each step reads the host's state and returns :class:`~fairsched.engine.live_types.Effects`;
Temporal's errors arrive as the port's (:mod:`fairsched.engine.ports.temporal`).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from datetime import timedelta
from types import MappingProxyType

from common import metrics
from common.notify import Note
from fairsched.engine.host import Backoff, Host, Part
from fairsched.engine.notes import Reads
from fairsched.engine.ports.temporal import TemporalError, WorkflowNotFound
from fairsched.engine.state import FINAL, QUEUED
from fairsched.engine.live_types import Effects
from fairsched.temporal.client import Outcome
from fairsched.temporal.shared import CANCELLED, FAILED, workflow_id

def _span(seconds: float) -> str:
    """A duration for a reason: "3.0 days", "5.2 h", "40 min", "12 s"."""
    for unit, size in (("days", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


log = logging.getLogger("fairsched.engine")

CANCEL_NOT_HONOURED = "cancel not honoured"  # the reason a workflow is terminated with


class Sync(Part):
    def __init__(self, host: Host) -> None:
        super().__init__(host)
        self._watchers: dict[int, asyncio.Task] = {}
        self._cancel_sent_at: dict[int, float] = {}  # chart -> monotonic time its cancel was sent
        self._watermark = None  # when the last incremental read began (a datetime)
        # an incremental resync under way, a chunk a tick: (since, where the next chunk
        # begins, when its first chunk was read: the next watermark)
        self._resync_chunks: tuple | None = None
        self._full_resync: tuple[int, set[int]] | None = None  # (last pk read, charts seen) while one runs
        self._full_resync_due = self.clock.monotonic() + self.FULL_RESYNC_S
        self._full_resync_started = 0.0
        self.legacy_active = True  # may a queued or running chart keep its legacy id (chart-<pk>)?

    @property
    def watching(self) -> Mapping[int, asyncio.Task]:
        """The result watches (:meth:`watch`), by chart: read-only."""
        return MappingProxyType(self._watchers)

    @property
    def cancels_sent(self) -> Mapping[int, float]:
        """The charts whose cancel was sent, by chart: when (monotonic; terminated
        ``CANCEL_GRACE_S`` after, :meth:`escalate_cancels`). Read-only."""
        return MappingProxyType(self._cancel_sent_at)

    @property
    def watermark(self):
        """When the last incremental read began (a datetime): the next reads what changed
        since (less ``RESYNC_OVERLAP_S``). None before the first, or after :meth:`restart_resync`."""
        return self._watermark

    @property
    def resync_under_way(self) -> bool:
        """An incremental resync is under way, a chunk a tick (a bulk change)."""
        return self._resync_chunks is not None

    @property
    def full_resync_read(self) -> tuple[int, set[int]] | None:
        """The full resync under way, a chunk a tick (:meth:`full_resync_step`): (the last pk
        read, the charts seen); None if none."""
        return self._full_resync

    @property
    def full_resync_due(self) -> float:
        """When the next full resync begins (monotonic)."""
        return self._full_resync_due

    def request_full_resync(self) -> None:
        """The next full resync is due now (the next :meth:`full_resync_wanted` begins it)."""
        self._full_resync_due = min(self._full_resync_due, self.clock.monotonic())

    def full_resync_after(self, took: float) -> None:
        """A full read (a full resync, a whole load) took ``took`` s: the next one comes
        ``FULL_RESYNC_S`` later, or ``FULL_RESYNC_COST_FACTOR`` times that, if longer (rare
        whatever the backlog: at most 1/FULL_RESYNC_COST_FACTOR of the time on it)."""
        self._full_resync_due = self.clock.monotonic() + max(self.FULL_RESYNC_S, self.FULL_RESYNC_COST_FACTOR * took)

    def unwatch(self, chart_id: int) -> None:
        task = self._watchers.pop(chart_id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    def stop_watching(self) -> list[asyncio.Task]:
        """Cancel every result watch (a step down); the tasks, to wait for."""
        tasks = list(self._watchers.values())
        for task in tasks:
            task.cancel()
        self._watchers = {}
        return tasks

    # ================================================================ notes and resyncs
    async def apply_rows(self, ids: set[int]) -> Effects:
        rows, orgs = await self.store.read_charts(ids, known_orgs=self.state.orgs)  # (the others': new to it)
        fx = self.state.apply_orgs(orgs) if orgs else Effects()
        for chart_id in sorted(ids):
            fx.merge(self.state.apply_chart(chart_id, rows.get(chart_id)))
        return fx

    async def apply_notes(self) -> Effects:
        notes = self.host.loop.take_notes()
        try:
            return await self._apply_note_batch(notes)
        except Exception:
            self.host.loop.put_back_notes(notes)
            raise

    async def _apply_note_batch(self, notes: list[Note]) -> Effects:
        state = self.state
        fx = Effects()
        reads = Reads.of(notes)
        if reads.resync:
            self.host.loop.resync_requested = True
        if reads.settings:
            config = await self.store.read_config()
            fx.merge(state.apply_config(config))
        if reads.orgs:
            fx.merge(state.apply_orgs(await self.store.read_orgs(reads.orgs)))
        if reads.costs:
            fx.merge(state.apply_costs(await self.store.read_costs()))
        if reads.charts:
            fx.merge(await self.apply_rows(reads.charts))
        return fx

    def restart_resync(self) -> None:
        """The next incremental resync reads everything changed since the state's load
        (a new state: the whole backlog's take-over), from its first chunk."""
        self._watermark = None
        self._resync_chunks = None

    async def resync(self) -> Effects:
        """Incremental resync: the charts whose ``updated_at`` moved since the last read
        (less ``RESYNC_OVERLAP_S``, for clocks that disagree and transactions that
        committed late), and the small tables whole. O(changes), not O(backlog): at most
        ``RESYNC_CHUNK`` charts a call; with more, the next tick reads the next chunk
        (after its dispatch: a chart whose turn has come never waits for 100,000 rows
        changed by a bulk import or written before a take-over), and the watermark moves
        once the last chunk is read."""
        self.host.loop.resync_requested = False
        if self._resync_chunks is None:
            marks = [m for m in (self._watermark, self.state.loaded_at) if m is not None]
            since = max(marks) if marks else None
            if since is not None:
                since -= timedelta(seconds=self.RESYNC_OVERLAP_S)
            self._resync_chunks = (since, None, None)
        since, after, first_read_at = self._resync_chunks
        changes = await self.store.read_changes(since, after, self.RESYNC_CHUNK)
        state = self.state
        fx = state.apply_settings(changes.config, changes.orgs, changes.costs, changes.averages)
        for row in changes.charts:
            fx.merge(state.apply_chart(row.id, row))
        first_read_at = first_read_at or changes.read_at
        if changes.more is not None:
            self._resync_chunks = (since, changes.more, first_read_at)
            self.host.loop.request_resync()
        else:
            self._resync_chunks = None
            self._watermark = first_read_at
        self._log_resync("resync", fx)
        return fx

    def _log_resync(self, what: str, fx: Effects) -> None:
        changes = [e for e in fx.events if e["kind"] not in ("budget", "weight", "cost")]
        if changes:
            log.info("%s: %d change(s) without a notification applied (%s)", what, len(changes),
                     ", ".join(f"{e['kind']} #{e.get('chart', e.get('org'))}" for e in changes[:10]))

    def full_resync_wanted(self, now: float) -> bool:
        """A full resync is under way (one chunk per tick), or due: then it begins."""
        if self._full_resync is None and now >= self._full_resync_due:
            self._full_resync = (0, set())
            self._full_resync_started = now
        return self._full_resync is not None

    async def full_resync_step(self) -> Effects:
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
            self.host.loop.wake.set()  # the next chunk at once
        else:
            unseen = state.known_ids() - seen
            if unseen:
                fx.merge(await self.apply_rows(unseen))
            self._full_resync = None
            self.full_resync_after(self.clock.monotonic() - self._full_resync_started)
        self._log_resync("full resync", fx)
        return fx

    # ================================================================ cancels
    async def cancel(self, chart_id: int) -> None:
        r = self.state.running.get(chart_id)
        try:
            await self.temporal.cancel(chart_id)
        except WorkflowNotFound:
            pass
        except TemporalError as exc:
            log.warning("cancel of chart #%d failed (%s); will retry", chart_id, exc)
            return
        if r is not None:
            r.cancel_sent = True
            self._cancel_sent_at.setdefault(chart_id, self.clock.monotonic())
        log.info("cancel chart #%d: cancellation requested for workflow %s", chart_id, workflow_id(chart_id))

    async def escalate_cancels(self) -> Effects:
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
            except WorkflowNotFound:  # (any other Temporal trouble: the step backs off and tries again)
                del self._cancel_sent_at[chart_id]  # closed on its own meanwhile
                continue
            del self._cancel_sent_at[chart_id]
            log.info("cancel chart #%d: workflow %s did not close within %g s of the cancel; terminated",
                     chart_id, workflow_id(chart_id), self.CANCEL_GRACE_S)
            outcome = await self.temporal.outcome(chart_id)
            if outcome is not None:
                fx.merge(await self.record(chart_id, outcome, "escalation"))
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
    def watch(self, chart_id: int) -> None:
        if not self.host.watch_results or chart_id in self._watchers:
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
                self.host.loop.report_finished(chart_id, outcome)
                return
            except asyncio.CancelledError:
                raise
            except WorkflowNotFound:
                return  # reconciliation decides
            except TemporalError:
                await self.clock.sleep(backoff.fail(self.clock.monotonic()))
            except Exception as exc:  # noqa: BLE001
                log.debug("watch of chart #%d: %s", chart_id, exc)
                await self.clock.sleep(backoff.fail(self.clock.monotonic()))

    async def record_finished(self) -> Effects:
        """Record the workflows the result watches saw close, all of them in one write (a
        tick's finishes, as a dispatch's starts); each leaves the inbox once written."""
        fx = Effects()
        finished = self.host.loop.finished
        while finished:
            batch = list(finished)
            fx.merge(await self.record_many(batch, "result"))
            del finished[:len(batch)]
        return fx

    async def record(self, chart_id: int, outcome: Outcome, source: str) -> Effects:
        """Write a closed workflow's outcome (idempotent) and free its budget."""
        return await self.record_many([(chart_id, outcome)], source)

    async def record_many(self, closed: list[tuple[int, Outcome]], source: str) -> Effects:
        """Write closed workflows' outcomes (idempotent; one transaction), free their budget
        and follow their rows, re-read in the same call of the database thread."""
        closed = [(chart_id, self._as_escalated(outcome)) for chart_id, outcome in closed]
        done = await self.store.record_outcomes(
            [(chart_id, o.state, o.error, o.started_at, o.finished_at, o.run_id) for chart_id, o in closed],
            known_orgs=self.state.orgs)
        fx = Effects()
        for (chart_id, outcome), wrote in zip(closed, done.wrote):
            fx.merge(self._freed(chart_id, outcome, wrote, source))
        if done.orgs:
            fx.merge(self.state.apply_orgs(done.orgs))
        for chart_id in sorted({chart_id for chart_id, _ in closed}):
            fx.merge(self.state.apply_chart(chart_id, done.rows.get(chart_id)))
        return fx

    def _freed(self, chart_id: int, outcome: Outcome, wrote: bool, source: str) -> Effects:
        """A closed workflow's cost is free (its outcome written by ``wrote``: this scheduler)."""
        r = self.state.running.get(chart_id)
        seconds = ((outcome.finished_at - outcome.started_at).total_seconds()
                   if outcome.finished_at and outcome.started_at else None)
        fx = self.state.finished(chart_id, outcome.state, seconds,
                                 outcome.finished_at.timestamp() if outcome.finished_at else None)
        if r is not None:  # its cost is free: the turn of the charts it makes room for (docs/metrics.md)
            metrics.budget_freed(outcome.finished_at.timestamp() if outcome.finished_at else self.clock.time())
        took = (f" after {(outcome.finished_at - outcome.started_at).total_seconds():.1f} s"
                if outcome.finished_at and outcome.started_at else "")
        if wrote and source not in ("result", "escalation"):
            log.info("reconcile: chart #%d closed as %s in Temporal%s; row corrected%s", chart_id, outcome.state,
                     took, f" (error: {outcome.error})" if outcome.error else "")
        elif r is not None or wrote:
            log.info("finish chart #%d %s%s (%s), cost %d freed%s", chart_id, outcome.state, took,
                     "recorded by the scheduler" if wrote else "recorded by the workflow",
                     r.cost if r else 0, f"; error: {outcome.error}" if outcome.error else "")
        return fx

    # ================================================================ reconcile
    async def reconcile(self) -> Effects:
        """Temporal is the truth for what is in flight.

        One listing of this deployment's running workflows, then each running chart is
        described (its workflow asked whether it closed, or is unknown) unless both say it
        still runs: Temporal lists it running and its result watch is alive, which reports
        its close (a watch that ended, on a workflow Temporal does not know, or never ran:
        described). The listing lags a close by a moment (the next reconcile, or the watch,
        sees it). At 400 charts in flight that is one call, not 400 describes a reconcile."""
        fx = Effects()
        listed = await self._listed_running()
        sem = asyncio.Semaphore(self.DESCRIBE_CONCURRENCY)

        async def describe(chart_id: int) -> tuple[int, Outcome | None | str]:
            async with sem:
                try:
                    return chart_id, await self.temporal.outcome(chart_id)
                except WorkflowNotFound:
                    return chart_id, "unknown"

        results = await asyncio.gather(*(describe(c) for c in list(self.state.running)
                                         if not (c in listed and self._watched(c))))
        for chart_id, result in results:
            r = self.state.running.get(chart_id)
            if r is None:
                continue
            if result == "unknown":
                if r.cancel_requested:
                    outcome = Outcome("cancelled", "cancelled before Temporal knew the workflow", None, None, "")
                    fx.merge(await self.record(chart_id, outcome, "reconcile"))
                    continue
                fx.merge(await self._unknown_to_temporal(r))
            elif result is not None:
                fx.merge(await self.record(chart_id, result, "reconcile"))
        fx.merge(await self._adopt_orphans(listed))
        return fx

    def _watched(self, chart_id: int) -> bool:
        """Its result watch runs (it reports the workflow's close)."""
        task = self._watchers.get(chart_id)
        return task is not None and not task.done()

    async def _listed_running(self) -> dict[int, str]:
        """This deployment's running workflows as Temporal lists them: chart -> run id (while
        a queued or running chart keeps its legacy id, ``chart-<pk>`` ones too)."""
        ids = self.host.ids
        legacy = self.legacy_active
        if legacy:  # until no queued or running chart keeps its legacy id, then never again
            self.legacy_active = legacy = await self.store.legacy_active(ids)
        listed: dict[int, str] = {}
        async for wf_id, run_id in self.temporal.running(legacy=legacy):
            chart_id = ids.chart_of(wf_id)
            if chart_id is not None:
                listed[chart_id] = run_id
        return listed

    async def _unknown_to_temporal(self, r) -> Effects:
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
        except TemporalError as exc:
            log.warning("reconcile: chart #%d: Temporal does not know workflow %s, and the namespace's "
                        "retention cannot be read (%s); decided at the next reconcile", chart_id, wf, exc)
            return Effects()
        age = self.clock.time() - r.started_at
        if retention is not None and age < retention:
            reason = f"Temporal does not know workflow {wf}"
            if await self.store.requeue(chart_id, reason):
                log.info("reconcile: chart #%d requeued: %s", chart_id, reason)
            fx = self.state.finished(chart_id, "requeued")  # Temporal holds nothing for it
            fx.merge(await self.apply_rows({chart_id}))
            return fx
        kept = f"the namespace's retention of {_span(retention)}" if retention is not None else "its retention"
        reason = (f"outcome lost: Temporal no longer knows workflow {wf}, dispatched {_span(age)} ago, longer than "
                  f"{kept}; it may have run, so it is not run again (re-run it if it must run)")
        log.warning("reconcile: chart #%d failed: %s", chart_id, reason)
        return await self.record(chart_id, Outcome(FAILED, reason, None, None, ""), "reconcile")

    async def _adopt_orphans(self, listed: Mapping[int, str]) -> Effects:
        """Running workflows of this deployment (``chart-<deployment>-<pk>``, or
        ``chart-<pk>`` for a chart that keeps its legacy id) whose row is still queued (a
        crash between start and compare-and-set) are adopted; those of final rows hold their
        cost until they close; those of cancelled rows are cancelled. Another deployment's
        workflows on the same namespace are never touched."""
        fx = Effects()
        found = {chart_id: run_id for chart_id, run_id in listed.items() if chart_id not in self.state.running}
        if not found:
            return fx
        rows, _ = await self.store.read_charts(found, known_orgs=self.state.orgs)
        adopt = []
        for chart_id, row in rows.items():
            if row.state == QUEUED:
                adopt.append((chart_id, self.state.queue.cost_of(str(row.org), row.workflow), found[chart_id],
                              self.clock.time()))
                continue
            if row.state in FINAL and not await self._closed_now(chart_id):
                # Recorded by its last activity, but Temporal still runs it (a worker died between
                # recording and closing, and this scheduler started since): it holds its cost until
                # it closes, or Temporal would see more than the budget. (The listing may lag a
                # close by a moment: _closed_now asks the workflow itself.) That includes a row
                # never marked running (a crash between start and compare-and-set), which its
                # workflow recorded from queued: it has no dispatched cost, and holds its pair's.
                fx.merge(self.state.hold_closing(row))
            if row.state == "cancelled":
                await self.cancel(chart_id)
        if adopt:
            await self.store.mark_running(adopt)
            for chart_id, cost, run_id, _ in adopt:
                log.info("reconcile: chart #%d adopted: workflow %s (run %s) runs but its row was queued",
                         chart_id, workflow_id(chart_id), run_id)
            fx.merge(await self.apply_rows({a[0] for a in adopt}))
        return fx

    async def _closed_now(self, chart_id: int) -> bool:
        try:
            return await self.temporal.outcome(chart_id) is not None
        except TemporalError:
            return False
