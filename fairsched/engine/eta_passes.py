"""The ETA passes: when one runs, where (a forked child or a thread), what it publishes,
and what the loop keeps of it.

:meth:`EtaPasses.schedule_eta` brings the next pass forward after a change and starts
it when due; the pass (:meth:`EtaPasses._compute_and_publish`: the ETAs, the snapshot and
its publication) runs in a forked child (:mod:`fairsched.engine.forked`) or a thread while
the loop goes on dispatching. The loop keeps the ETAs of the head of the order (for the
ETA recorded at dispatch, :meth:`EtaPasses.eta_in_force`), records the first ETAs of new
charts (:meth:`EtaPasses.record_first_etas`), confirms the last snapshot about once a
second (:meth:`EtaPasses.confirm_snapshot`) and sends the live updates
(:meth:`EtaPasses.broadcast`).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from itertools import chain, compress, islice

from common import live_updates, metrics
from scheduling import Eta, WalkEtas, eta_reader
from scheduling.plan import gc_paused
from fairsched.engine import forked, heap, whatif
from fairsched.engine.forked import EtaPassIn
from fairsched.engine.host import Host, Part
from fairsched.engine.due_states import due_pass
from fairsched.engine.publish import build_snapshot
from fairsched.engine.live_types import Effects, PassInput
from fairsched.engine.state import LiveState

log = logging.getLogger("fairsched.engine")


@dataclasses.dataclass(frozen=True)
class EtaColumns:
    """Many charts' ETAs as three columns. From a forked child they come back as three
    buffers: a dict of a million ``Eta`` tuples would hold the loop's GIL for a second or
    more while it is unpickled (in one C call), and the loop reads these a chunk at a time."""

    ids: array    # 'q': chart ids
    start: array  # 'd': Eta.start_s
    finish: array  # 'd': Eta.finish_s

    @classmethod
    def of(cls, etas: Mapping[str, Eta], ids: Set[str]) -> EtaColumns:
        """The ETAs in ``etas`` of the charts ``ids``. A pass's :class:`WalkEtas` is walked
        (a lookup by id would build its index: a dict of every chart), a dict looked up."""
        if isinstance(etas, WalkEtas):
            # The walk's columns selected in place (a bool each), never a tuple per chart: at a
            # first start every chart is picked, and (id, Eta) pairs were 170 MB at 1M in the
            # pass's child, beside its snapshot
            head = [(cid, e) for cid, e in etas.head.items() if cid in ids]
            finish = etas.finish
            keep = bytearray(cid in ids and f == f for cid, f in zip(etas.ids, finish))  # (f == f: an ETA)
            return cls(array("q", chain([int(cid) for cid, _ in head], map(int, compress(etas.ids, keep)))),
                       array("d", chain([e[0] for _, e in head], compress(etas.start, keep))),
                       array("d", chain([e[1] for _, e in head], compress(finish, keep))))
        picked = [(cid, etas[cid]) for cid in ids if cid in etas]
        return cls(array("q", [int(cid) for cid, _ in picked]), array("d", [e[0] for _, e in picked]),
                   array("d", [e[1] for _, e in picked]))

    def __len__(self) -> int:
        return len(self.ids)

    def __reduce_ex__(self, protocol: int) -> tuple:
        # the columns as they lie in memory, out of band from a forked child (forked.py)
        return forked.columns_reduce(self, protocol, _eta_columns, self.ids, self.start, self.finish)

    def part(self, lo: int, hi: int) -> dict[str, Eta]:
        return {str(cid): Eta(s, f) for cid, s, f in zip(self.ids[lo:hi], self.start[lo:hi], self.finish[lo:hi])}

    def by_id(self) -> EtaColumns:
        """The same ETAs in chart id order, which :meth:`lookup` needs. Sorted in the pass's
        child, by an index (1M ids: about a second there, and tens of MB after its snapshot
        is freed), never a tuple per chart."""
        ids = self.ids
        if all(a < b for a, b in zip(ids, islice(ids, 1, None))):
            return self
        order = sorted(range(len(ids)), key=ids.__getitem__)
        return EtaColumns(array("q", map(ids.__getitem__, order)), array("d", map(self.start.__getitem__, order)),
                          array("d", map(self.finish.__getitem__, order)))

    def lookup(self, ids: Iterable[str]) -> dict[str, Eta]:
        """The ETAs of those of ``ids`` that are here (columns in id order: :meth:`by_id`):
        a bisection each, no index (a dict of a million ids would be 100 MB)."""
        col, n, out = self.ids, len(self.ids), {}
        for cid in ids:
            i = bisect_left(col, int(cid))
            if i < n and col[i] == int(cid):
                out[cid] = Eta(self.start[i], self.finish[i])
        return out


@dataclasses.dataclass(frozen=True)
class _Known:
    """The charts in memory as a container (``in``), asked one by one (LiveState.knows)."""

    knows: Callable[[int], bool]

    def __contains__(self, chart_id: object) -> bool:
        return self.knows(chart_id)


def _eta_columns(ids, start, finish) -> EtaColumns:
    return EtaColumns(forked.as_array("q", ids), forked.as_array("d", start), forked.as_array("d", finish))


@dataclasses.dataclass(frozen=True)
class PassOut:
    """What an ETA pass gives back to the loop (from a forked child, pickled)."""

    seq: int                 # the snapshot it published
    head: dict[str, Eta]     # the ETAs of the head of the order (:attr:`Scheduler.ETAS_KEPT`)
    first: EtaColumns        # the ETAs of the charts that had no first ETA, in id order
    due_levels: Mapping[int, int] = dataclasses.field(default_factory=dict)  # due warnings moved (engine/due_states.py: Levels)
    due_rose: Sequence[int] = dataclasses.field(default_factory=list)        # ... of which these rose
    measure: whatif.Measure | None = None  # per org its clear-time and at-risk count: a preview's "before"


class EtaPasses(Part):
    def __init__(self, host: Host) -> None:
        super().__init__(host)
        self._eta_due = 0.0
        self._eta_now = True
        self._eta_last_end = 0.0   # monotonic time the last ETA pass ended
        self._eta_last_cost = 0.0  # seconds the last ETA pass (with publication) took
        self._eta_task: asyncio.Task | None = None  # the ETA pass in flight
        self._eta_changes = 0  # ticks that changed something (a pass in flight compares)
        self._published_seq: int | None = None  # the last snapshot published
        self._confirmed_at = 0.0
        self._last_report = None                 # (ETAs of the head of the order, now) of the last ETA pass
        self._pass_mark: tuple | None = None     # the state the pass in flight measures (whatif.state_mark)
        self._measured: tuple | None = None      # (mark, Measure) of the last pass that succeeded
        self._first_pass_wanted = False          # a backlog was loaded: its first pass is still to start
        self._first_pass: asyncio.Task | None = None  # ... and this is it (first_pass_running)
        self._loaded_at = 0.0                    # monotonic time the backlog was loaded
        self._carry: tuple[EtaColumns, float] | None = None  # first ETAs the backfill writes (carried_firsts)

    def loaded(self) -> None:
        """The whole backlog was loaded: nothing of the last pass's holds for it, and its
        first pass (the next to start) is the one :attr:`first_pass_running` follows."""
        self._last_report = None
        self._carry = None
        self._first_pass_wanted = True
        self._loaded_at = self.clock.monotonic()

    @property
    def pass_in_flight(self) -> asyncio.Task | None:
        """The ETA pass running now (a task: await it to follow it to its end), None if none."""
        return self._eta_task

    @property
    def next_pass_due(self) -> float:
        """When the next pass is due (monotonic; infinite while one runs: it sets the next when it ends)."""
        return self._eta_due

    @property
    def last_pass_end(self) -> float:
        """When the last pass ended (monotonic; 0 before the first)."""
        return self._eta_last_end

    @property
    def pass_requested(self) -> bool:
        """The next :meth:`schedule_eta` starts a pass, however recent the last (a load, an
        ``eta_now`` change)."""
        return self._eta_now

    def request_pass(self) -> None:
        """Start a pass at the next :meth:`schedule_eta` (not while one runs, nor backing off)."""
        self._eta_now = True

    @property
    def published_seq(self) -> int | None:
        """The last snapshot this leader's passes published, which :meth:`confirm_snapshot`
        confirms; None before its first (or after a pass failed without one)."""
        return self._published_seq

    @property
    def head_etas(self) -> Mapping[str, Eta]:
        """The last pass's ETAs of the head of the order (what a dispatch's first ETAs read), by chart id."""
        return {} if self._last_report is None else self._last_report[0]

    @property
    def carrying_firsts(self) -> bool:
        """The backfill's chunks carry the last pass's first ETAs (:meth:`carried_firsts`)."""
        return self._carry is not None

    def stepped_down(self) -> None:
        """The leader stepped down: a leader again confirms only what its own passes store."""
        self._published_seq = None

    @property
    def first_pass_running(self) -> bool:
        """The first pass over a newly loaded backlog computes its ETAs: until its snapshot
        is stored the pages show no ETA at all, so the background work that competes with it
        for the CPU (the rounds' backfill) waits (not for the first ETAs' writes after it).
        Only the first: a pass that fails ends it, and the backfill goes on beside the next."""
        return self._first_pass is not None and not self._first_pass.done() and self._last_report is None

    def schedule_eta(self, fx: Effects, now: float) -> None:
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
        if self._carry is not None and not self.host.rounds.backfilling:
            self._end_carry()  # the backfill is over
        if (self._eta_now or self.clock.monotonic() >= self._eta_due) and self._eta_task is None \
                and self.host.loop.backoff["eta"].ready(now):
            self._start_eta_pass()

    def _eta_soon_gap(self) -> float:
        return max(self.ETA_SOON_MIN_GAP_S, self.ETA_SOON_COST_FACTOR * self._eta_last_cost)

    def _start_eta_pass(self) -> None:
        """Start an ETA pass in the background while the loop goes on dispatching: the pass
        computes the ETAs, builds the snapshot, encodes and stores it page by page. In a
        forked child (``eta_pass_in`` :attr:`EtaPassIn.PROCESS`), which sees the state as it was at the
        fork; or in a thread, on a copy the loop takes first (:meth:`LiveState.capture`,
        milliseconds)."""
        self._eta_now = False
        if self._carry is not None:
            self._end_carry()
        now = self.clock.time()
        captured = None
        if self.host.eta_pass_in is EtaPassIn.THREAD:
            captured = self.state.capture()
            self._pass_mark = whatif.state_mark(self.state, self._eta_changes)
        self._eta_due = math.inf  # the pass sets the next one when it ends
        self._eta_task = asyncio.create_task(self._run_eta_pass(captured, now, self._eta_changes),
                                             name="eta-pass")
        if self._first_pass_wanted:
            self._first_pass, self._first_pass_wanted = self._eta_task, False
        self.host.loop.tasks.append(self._eta_task)

    async def _run_eta_pass(self, captured: PassInput | None, now: float, changes: int) -> None:
        started = self.clock.monotonic()
        queued = len(self.state.queue)
        size = queued + len(self.state.running)
        before = self._published_seq
        failed = False
        try:
            failed = not await self.host.guarded("eta", lambda: self._eta_pass(captured, now), loop_waits=False)
            if not failed:
                metrics.eta_pass_done(self.clock.monotonic() - started)
            if size >= self.GIVE_BACK_MIN_CHARTS:  # (a small one's: glibc's own trim; each trim's pages fault back in)
                heap.give_back()  # the pass's result, freed (at 1M: the pickle of a million first ETAs)
            if failed and self._published_seq == before:
                # No snapshot from this pass: the last one no longer says what this scheduler
                # knows (something changed, or the pass would not have run). It is not
                # confirmed any more, so the pages turn it stale, as they do for a stopped
                # scheduler, until a pass succeeds.
                self._published_seq = None
        finally:
            end = self.clock.monotonic()
            self._eta_last_end, self._eta_last_cost = end, end - started
            if self._eta_last_cost > self.ETA_SLOW_LOG_S:
                log.info("ETA pass over %d queued charts took %.1f s (in its %s; dispatch went on)",
                         queued, self._eta_last_cost, self.host.eta_pass_in)
            # A static backlog needs no new pass every few seconds: the published ETAs are
            # absolute times and stay true until something changes (which brings the next
            # pass forward, see tick). Between changes the interval grows with the pass's
            # own cost, so an idle scheduler spends at most ~1/ETA_IDLE_COST_FACTOR on it.
            if failed or self._eta_changes != changes:  # failed, or changed while it ran: the next one soon
                interval = self._eta_soon_gap()  # (a failed one: no sooner than its backoff, too)
            else:
                interval = max(self.state.config.eta_interval_s if self.state else 3.0,
                               self.ETA_IDLE_COST_FACTOR * self._eta_last_cost)
            self._eta_due = end + interval
            task = self._eta_task
            self._eta_task = None
            if task in self.host.loop.tasks:
                self.host.loop.tasks.remove(task)
            self.host.loop.wake.set()

    async def _eta_pass(self, captured: PassInput | None, now: float) -> bool:
        if captured is None:
            state = self.state
            # Bounded by what the pass should cost (600 s whatever the backlog before), so
            # that a child that hangs is killed and the next pass comes soon: one took 224 s
            # once, cause unknown (a lock a parent thread held at the fork, perhaps).
            timeout = max(self.ETA_PASS_TIMEOUT_MIN_S, self.ETA_PASS_TIMEOUT_FACTOR * self._eta_last_cost,
                          self.ETA_PASS_TIMEOUT_PER_CHART_S * (len(state.queue) + len(state.running)))
            self._pass_mark = whatif.state_mark(state, self._eta_changes)  # the fork below, with no await before it
            try:
                out = await forked.run_forked(lambda: self.pass_in_child(state, now), name="ETA pass",
                                              timeout_s=timeout, nice=self.ETA_PASS_NICE, clock=self.clock)
            except forked.ChildFailed as exc:
                if exc.reports and self.state is not None:
                    # It died (or overran) after storing its snapshot, which is complete:
                    # confirmed and shown like any other. Its ETAs for dispatch and the
                    # first ETAs come with the next pass, soon (this one still failed).
                    seq = exc.reports[-1]
                    log.warning("the ETA pass failed after storing snapshot %d: that snapshot is published", seq)
                    self._published_seq = seq
                    await self.publisher.snapshot_stored(seq)
                raise
        else:
            out = await asyncio.to_thread(self._compute_and_publish, captured, now)
        if self.state is None:
            return True
        self._published_seq = out.seq
        if out.measure is not None and self._pass_mark is not None:
            self._measured = (self._pass_mark, out.measure)
        # Kept for the charts dispatched before the next pass (:meth:`eta_in_force`), from
        # now on (the first ETAs below may take a while): the head of the order, not a
        # million ETAs (~200 MB at 1M).
        self._last_report = (out.head, now)
        await self.publisher.snapshot_stored(out.seq)
        if self._eta_task is self._first_pass:
            log.info("the first ETAs of the loaded backlog are published, %.1f s after its load",
                     self.clock.monotonic() - self._loaded_at)
        # after publishing: the dashboards do not wait for these writes
        await self._record_due_alerts(out, now)
        await self.record_first_etas(out.first, now)
        return True

    def pass_in_child(self, state: LiveState, now: float) -> PassOut:
        """The pass in the forked child: the state as it was at the fork is its own, so the
        pass reads it as it is (``capture(copy=False)``: a copy here was 144 MB more at
        1M queued, of the child's 942 MB peak: bench/child_memory.py)."""
        return self._compute_and_publish(state.capture(copy=False), now)

    def _compute_and_publish(self, captured: PassInput, now: float) -> PassOut:
        """The ETA pass, the snapshot and its publication, on a copy: in a forked child or a
        worker thread. Without the cyclic collector: the pass allocates several acyclic
        objects per chart, and a full collection triggered by them would stop the loop (in
        a thread, it holds the GIL) for as long as it walks them. Returns the ETAs the
        loop needs (a few, but every one at a first start: no chart has a first ETA)."""
        with gc_paused():
            report = captured.eta_report(now)
            p90 = captured.forecast.p90_finisher()
            due = due_pass(captured, report.etas, now, p90)
            snap, rows, per_org = build_snapshot(captured, report, now, p90=p90, due=due)
            snap["eta_model"] = captured.eta_model.value
            seq = self.publisher.store_snapshot(snap, rows, per_org)
            forked.report(seq)  # stored: the parent publishes it even if this child dies from here on
            # Stored, so freed before the first ETAs are gathered below: their columns take the
            # snapshot's place rather than add to it (at 1M, a first pass's child peaked 20 MB
            # above its store there: bench/child_memory.py)
            del snap, rows, per_org
            etas = report.etas
            eta_at = eta_reader(etas)
            head = {cid: e for pos, cid in enumerate(islice(captured.queue, self.ETAS_KEPT))
                    if (e := eta_at(pos, cid)) is not None}
            risky = {str(o): c["at_risk"] + c["late"] for o, c in due.orgs.items() if c["at_risk"] + c["late"]}
            return PassOut(seq, head, EtaColumns.of(etas, captured.unpromised).by_id(), due.levels, due.rose,
                           whatif.measured(captured, report, risky, now))

    def last_measured(self) -> whatif.Measure | None:
        """The last pass's per-org clear-times, whatever changed since (the planner's first guess)."""
        return None if self._measured is None else self._measured[1]

    def measured_now(self) -> whatif.Measure | None:
        """The last pass's per-org clear-times and at-risk counts if the state is still the one
        it measured (nothing changed since its fork) and it is at most
        :attr:`PREVIEW_REUSE_MAX_AGE_S` old: a preview's "before", at that pass's ``now``."""
        got = self._measured
        if got is None or self.state is None or self.clock.time() - got[1].now > self.PREVIEW_REUSE_MAX_AGE_S:
            return None
        return got[1] if got[0] == whatif.state_mark(self.state, self._eta_changes) else None

    async def confirm_snapshot(self) -> None:
        """Say, about once a second, that the last published snapshot is this live
        scheduler's latest: readers keep showing it (it stays true while nothing changes,
        and a pass is on its way when something did, however long a large backlog's pass
        takes). Only what a pass of this leadership stored is confirmed, and only until a
        later pass fails without storing one (:meth:`_run_eta_pass`): a scheduler that
        stopped, stepped down or whose passes fail lets it turn stale."""
        seq = self._published_seq
        if seq is None or not self.host.leading or self.clock.monotonic() - self._confirmed_at < 1.0:
            return
        self._confirmed_at = self.clock.monotonic()
        await self.publisher.confirm_snapshot(seq, self.clock.time())

    def eta_in_force(self, r, at: float) -> tuple[float, float]:
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

    async def _record_due_alerts(self, out: PassOut, now: float) -> None:
        """The due warnings the pass moved: kept for the next pass's hysteresis and written
        to the charts (the webhook sweep and the accuracy panel read them there)."""
        if not out.due_levels or self.state is None:
            return
        known = _Known(self.state.knows)
        self.state.due.set_levels(out.due_levels, known)
        levels = {cid: lv for cid, lv in out.due_levels.items() if not lv or known.knows(cid)}
        await self.store.record_due_alerts(levels, [cid for cid in out.due_rose if cid in levels], now)

    async def record_first_etas(self, first: EtaColumns, now: float) -> None:
        """The first ETA of each chart that has none yet (``first``: the pass's ETAs of the
        charts that had none when it began), in short writes from the bulk-write thread
        (:class:`~fairsched.engine.ports.real.DbStore`): dispatch never waits behind them.

        Paced: the writes take at most ``FIRST_ETAS_WRITE_SHARE`` of the time, each followed
        by a rest in proportion to how long it took. After a first start at 1M every chart
        needs one (500 writes); written back to back, beside the backfill's rounds, they
        doubled dispatch's latency meanwhile (bench/scale.py --settle 0, docs/scale.md).

        While a backfill writes rounds (a first start), the charts it has still to write are
        left to it: each of its chunks writes their first ETAs with their rounds, one new
        version of each row instead of two (:meth:`carried_firsts`), until the backfill ends
        or the next pass starts (:meth:`_end_carry`). What it did not carry (an org it
        dropped, a dispatch's own writes, the charts written while that pass ran) the next
        pass gives."""
        if self.host.rounds.backfill is not None:
            self._carry = (first, now)
        await self._write_first_etas(first, now)
        if self._carry is None:
            self._shrink_unpromised(len(first))

    def _end_carry(self) -> None:
        """The backfill's chunks carry no more first ETAs: it is over, or a pass starts. Not
        beside a pass's child: each carried chunk changes the set of charts without a first
        ETA and the forecast's promises, and each page the parent changes while the child
        lives becomes the child's own (docs/architecture.md, "The first ETAs are paced")."""
        first, _ = self._carry
        self._carry = None
        self._shrink_unpromised(len(first))
        del first
        heap.give_back()  # the columns, freed (24 MB at 1M)

    def _shrink_unpromised(self, was: int) -> None:
        if self.state is not None and was > 10 * len(self.state.unpromised):
            # a set never gives back its table as it empties: 32 MB after a first start at 1M
            self.state.unpromised = set(self.state.unpromised)

    async def _write_first_etas(self, first: EtaColumns, now: float) -> None:
        share = self.FIRST_ETAS_WRITE_SHARE
        for lo in range(0, len(first), self.FIRST_ETAS_PER_WRITE):
            state = self.state
            if state is None:
                return
            hi = lo + self.FIRST_ETAS_PER_WRITE
            unpromised = state.unpromised
            chunk = [cid for cid in map(str, first.ids[lo:hi]) if cid in unpromised]  # since promised at dispatch
            bf = self.host.rounds.backfill if self._carry is not None else None
            if bf is not None:  # left to the backfill's chunks
                queue = state.queue
                chunk = [cid for cid in chunk if not bf.to_write(queue.org_of(cid), cid, queue.round_of(cid))]
            if not chunk:
                await asyncio.sleep(0)  # (a million charts filtered: the loop goes on between parts)
                continue
            etas = first.part(lo, hi)
            began = self.clock.monotonic()
            await self.store.record_first_etas(state.first_etas(etas, now, chunk))
            state.unpromised.difference_update(chunk)
            if 0 < share < 1 and lo + self.FIRST_ETAS_PER_WRITE < len(first):
                await self.host.sleep((self.clock.monotonic() - began) * (1 - share) / share)

    def carried_firsts(self, changes: Iterable[str]) -> dict[int, tuple[float, float]]:
        """The first ETAs a backfill's chunk writes with its rounds (``changes``, chart ids):
        those of its charts that have none, as the pass that left them to it gave them
        (:meth:`record_first_etas`). The chunk, once committed, hands them to
        :meth:`firsts_written`."""
        state = self.state
        if self._carry is None or state is None:
            return {}
        first, now = self._carry
        unpromised = state.unpromised
        etas = first.lookup(cid for cid in changes if cid in unpromised)
        return state.first_etas(etas, now, etas) if etas else {}

    def firsts_written(self, firsts: Iterable[int]) -> None:
        if self.state is not None:
            self.state.unpromised.difference_update(map(str, firsts))

    async def broadcast(self, events: list[dict]) -> None:
        counters = self.state.counters()
        if len(events) > self.MAX_EVENTS_PER_TICK:
            events = [live_updates.Batch(count=len(events)).to_wire()]
        for event in events:
            await self.publisher.event(event, counters)
