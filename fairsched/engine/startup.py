"""Start-up: the head of the order first, then the whole backlog takes over.

:meth:`Startup.load` reads the backlog at a start (see docs/architecture.md, "Start-up:
the head of the order first"): at a restart the head of the saved order
(:func:`fairsched.engine.store.db.read_head`), at a very first start the head of the backlog;
the loop dispatches from that partial state while the whole backlog is read in the same
snapshot and built in a thread (:meth:`Startup._load_whole`, :meth:`Startup.build_whole`);
then, in a tick, :meth:`Startup.take_over_whole` replays onto the whole what the head
dispatched or removed. What it builds (the state, the round saver) it hands to the host
(``host.install``), which owns them.
"""
from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable
from typing import Any

from scheduling import NeedsWholeBacklog, RoundSaver, same_rounds
from fairsched.engine.store import db
from fairsched.engine import heap
from fairsched.engine.store.chart_columns import ChartColumns
from fairsched.engine.eta_passes import EtaPasses
from fairsched.engine.host import Backoff, Host, Part
from fairsched.engine.ports.real import in_daemon_thread
from fairsched.engine.state import QUEUED, LiveState
from fairsched.engine.store.rows import World
from fairsched.engine.sync import Sync

log = logging.getLogger("fairsched.engine")


def _freeze_backlog() -> None:
    """Move what the load built (the backlog: several objects per chart) out of the cyclic
    garbage collector's sight: its full collections would otherwise walk them all, again
    and again, while the scheduler idles. They stay collectable by reference counting.
    Then give back to the system what the load freed (:mod:`.heap`). For a load of
    ``FREEZE_MIN_CHARTS`` or more only: the full collection it starts with walks the whole
    process, and a small backlog costs the collector less than that walk (in the test
    processes, 30 s of the suite's CPU)."""
    gc.collect()
    gc.freeze()
    heap.give_back()  # what the read freed in the C heap (235 MB at a million charts)


class Startup(Part):
    def __init__(self, host: Host, sync: Sync, etas: EtaPasses) -> None:
        super().__init__(host)
        self.sync, self.etas = sync, etas
        self._load_started = 0.0
        self._whole_ready: tuple | None = None  # (state, prepared backfill, world, replay?) built while dispatching from the head

    async def load(self) -> None:
        """Load the backlog. At a restart (a round state was saved) the head of the saved
        order comes first (:func:`fairsched.engine.store.db.read_head`): dispatch starts from it
        while the whole backlog is read, in the same database snapshot, and built in a
        thread; the whole then takes over (:meth:`take_over_whole`). A first start (no
        round state saved) does the same from the head of the backlog, each org's first
        charts by rank (``FairQueue.first_head``). A head that cannot resume alone loads
        the whole backlog before dispatching."""
        backoff = Backoff(self.BACKOFF_MIN_S, self.BACKOFF_MAX_S)
        loop = asyncio.get_running_loop()
        self._load_started = self.clock.monotonic()
        while not self.host.loop.stop.is_set():
            heads: asyncio.Queue = asyncio.Queue()

            def on_head(head: db.Head | None) -> bool:  # in the reading thread
                loop.call_soon_threadsafe(heads.put_nowait, head)
                return head is None or head.whole_wanted

            reading = asyncio.ensure_future(self.store.read_streamed(self.HEAD_PER_ORG, on_head))
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
                    self.host.loop.tasks.append(asyncio.create_task(self._load_whole(reading), name="load-whole"))
                    return
                world = await reading
                if world is None:  # the head was the whole backlog
                    world = head.world
                break
            except Exception as exc:  # noqa: BLE001 - database down: retry
                delay = backoff.fail(self.clock.monotonic())
                log.warning("cannot load the backlog (%s); retrying in %.1f s", exc, delay)
                await self.host.sleep(delay)
            finally:
                got_head.cancel()
        else:
            return
        self.host.install(LiveState(world, observe_arrivals=False), RoundSaver(world.rounds))  # learn_history below
        self.host.loop.notes.clear()  # the load read everything they could name
        await self._loaded(world)

    def _start_from_head(self, head: db.Head) -> bool:
        """Become a partial state over the head of the saved order (False: it cannot resume alone)."""
        try:
            state = LiveState(head.world, observe_arrivals=False, horizon=head.horizon, truncated=head.truncated)
        except NeedsWholeBacklog as exc:
            log.info("loading the whole backlog before dispatching: %s", exc)
            return False
        self.host.install(state, RoundSaver(head.world.rounds))
        if head.truncated:
            # A first start, or a restart amid its backfill: the head's new rounds are written
            # first (each org a prefix of its order, its cursor after it), and the whole
            # backlog's then go on after them.
            self.host.rounds.start_backfill(state.queue, tuple, 1, keep_written=True)
        self.host.loop.notes.clear()  # the read covers them; the take-over's resync covers what came later
        log.info("loaded the head of the %s: %d queued (%d in the order), %d running; dispatching from it "
                 "while the whole backlog loads", "backlog (a first start)" if head.world.rounds is None else
                 "order" + (" (%d orgs' rounds still to write)" % len(head.truncated) if head.truncated else ""),
                 len(state.queue), state.queue.order_len, len(state.running))
        for chart_id in state.running:
            self.sync.watch(chart_id)
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
                written, saved = dict(self.host.rounds.written_rounds or {}), self.host.rounds.saved
                charts = ChartColumns.of(world.charts)
                had = lambda: charts.ids_with_round(QUEUED)  # noqa: E731
                prepare = lambda state: RoundSaver.prepare(state.queue, had, self.BACKFILL_MIN,  # noqa: E731
                                                           written, saved)
            self._whole_ready = (*(await self.build_whole(world, prepare)), world, True)
        except Exception as exc:  # noqa: BLE001 - database down: a plain load, without the head
            log.warning("cannot read the whole backlog (%s): dispatch waits for a plain load", exc)
            self.state.queue.close_horizon(everything=True)
            backoff = Backoff(self.BACKOFF_MIN_S, self.BACKOFF_MAX_S)
            while not self.host.loop.stop.is_set():
                try:
                    world = await self.store.read_world()
                    self._whole_ready = (*(await self.build_whole(world)), world, False)
                    break
                except Exception as exc2:  # noqa: BLE001
                    delay = backoff.fail(self.clock.monotonic())
                    log.warning("cannot load the backlog (%s); retrying in %.1f s", exc2, delay)
                    await self.host.sleep(delay)
        self.host.loop.wake.set()

    @staticmethod
    async def build_whole(world: World, prepare: Callable[[LiveState], Any] | None = None) -> tuple[LiveState, Any]:
        """The whole backlog's state, built in a thread while the loop dispatches from the
        head, and what ``prepare`` makes of it there (None without). Public: the fault
        harness of the integration tests holds it back (tests/integration/faulty_scheduler.py)."""
        def build() -> tuple[LiveState, Any]:
            state = LiveState(world, observe_arrivals=False)
            return state, (prepare(state) if prepare is not None else None)
        return await in_daemon_thread(build, name="fairsched-build")

    @property
    def whole_ready(self) -> bool:
        """The whole backlog is read and built (while the loop dispatched from its head): the
        next tick's :meth:`take_over_whole` puts it in the head's place."""
        return self._whole_ready is not None

    def stepped_down(self) -> None:
        """The leader stepped down: a whole backlog read for it is dropped (the next leader loads its own)."""
        self._whole_ready = None

    async def take_over_whole(self) -> None:
        """In the tick (nothing in flight): the whole backlog's state replaces the partial one."""
        whole, prepared, world, replay = self._whole_ready
        self._whole_ready = None
        head = self.state
        backfill = None
        if replay:
            if prepared is not None:  # before the replay: what the head dispatched extends its org's written part
                backfill = self.host.rounds.adopt(whole.queue, prepared)
            taken = whole.take_over_from(head)
            if not same_rounds(whole.queue.export_rounds(), head.queue.export_rounds(), head.truncated):
                log.error("the whole backlog's round state differs from the head's after the replay")
            log.info("the whole backlog takes over from the head (%d dispatched or removed meanwhile)", len(taken))
        else:
            whole.running, whole.committing = head.running, head.committing
        self.host.install(whole, self.host.rounds if replay else RoundSaver(world.rounds))
        self.sync.restart_resync()  # the next resync reads everything changed since the whole read
        self.host.loop.resync_requested = True
        self.etas.request_pass()
        await self._loaded(world, backfill)

    async def _loaded(self, world: World, backfill: int | None = None) -> None:
        """The whole backlog is in memory: the forecast's history, then the log line. The
        load was a full read: the first full resync comes as long after it as after one."""
        self.sync.full_resync_after(self.clock.monotonic() - self._load_started)
        try:
            self.state.learn_history(await self.store.recent_arrivals(), await self.store.recent_durations(),
                                     await self.store.recent_promises())
            self.state.unpromised -= {str(c) for c in await self.store.recorded_first_etas()}
        except Exception as exc:  # noqa: BLE001 - the ETAs only: never stop the load for them
            log.warning("cannot read recent arrivals, durations or recorded ETAs (%s); learning from now on", exc)
        self.etas.loaded()
        charts = ChartColumns.of(world.charts)
        n = backfill if backfill is not None else self.host.rounds.start_backfill(
            self.state.queue, lambda: charts.ids_with_round(QUEUED), self.BACKFILL_MIN)
        if n:
            log.info("writing %d charts' rounds %d at a time between dispatches (the head of the order first)",
                     n, self.BACKFILL_CHUNK)
        del world
        if len(self.state.queue) + len(self.state.running) >= self.FREEZE_MIN_CHARTS:
            _freeze_backlog()  # (below, the collection it starts with costs more than it saves)
        log.info("loaded backlog: %d queued (%d in the order), %d running (cost %d of budget %d), %d orgs",
                 len(self.state.queue), self.state.queue.order_len, len(self.state.running), self.state.used,
                 self.state.budget, len(self.state.orgs))
        for chart_id in self.state.running:
            self.sync.watch(chart_id)  # (once: a chart watched already is left alone)
