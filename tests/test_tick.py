"""``Scheduler.tick()`` driven with fakes: no Temporal, no Redis, no database, a clock
moved by hand (the way Zulip tests its queue workers: the loop body, called directly).

The fakes stand in for the four ports of :mod:`fairsched.engine.ports`: a store of rows
in memory (compare-and-set like the services), a Temporal that runs workflows only
when told, a publisher that records, and a clock. The subprocess integration tests
(tests/integration/) still run the real thing end to end.
"""
from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections import defaultdict
from datetime import datetime, timezone

import pytest
from temporalio.service import RPCError, RPCStatusCode

from common.notify import ChartNote
from fairsched.engine.store import db
from fairsched.engine.ports.temporal import AlreadyStarted, StartFailed, WorkflowNotFound
from fairsched.engine.scheduler import Scheduler
from scheduling import first_head_of_backlog, head_of_backlog
from fairsched.engine.state import FINAL
from fairsched.engine.store.rows import ChartRow, Config, OrgRow, World
from fairsched.temporal.client import Outcome
from fairsched.temporal.shared import WorkflowIds, workflow_id

T0 = 1_800_000_000.0
UTC = timezone.utc


def rpc(status: RPCStatusCode, message: str) -> RPCError:
    return RPCError(message, status, b"")


class FakeClock:
    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall = T0

    def monotonic(self) -> float:
        return self.mono

    def time(self) -> float:
        return self.wall

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds

    async def sleep(self, seconds: float) -> None:
        self.advance(seconds)
        await asyncio.sleep(0)

    def sleep_blocking(self, seconds: float) -> None:
        self.advance(seconds)

    async def wait(self, event: asyncio.Event, timeout_s: float) -> bool:
        if not event.is_set():
            self.advance(timeout_s)
        return event.is_set()

    async def wait_tasks(self, tasks, timeout_s: float) -> bool:
        """The tasks get a moment of real time to end (a cancelled one ends at its next
        await); past that the fake time moves on by the whole timeout."""
        tasks = set(tasks)
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=min(timeout_s, 1.0))
        if pending:
            self.advance(timeout_s)
        return not pending

    async def wait_for(self, awaitable, timeout_s: float):
        return await asyncio.wait_for(awaitable, timeout=min(timeout_s, 5.0))


class FakeStore:
    """Chart rows in memory; writes are compare-and-set like ``charts.services``."""

    def __init__(self, budget: int, orgs: list[OrgRow], costs: dict | None = None) -> None:
        self.config = Config(budget, 3.0, 5.0)
        self.orgs = {o.id: o for o in orgs}
        self.costs = costs or {}
        self.rows: dict[int, ChartRow] = {}
        self.payloads: dict[int, object] = {}
        self.errors: dict[int, str] = {}
        self.marked: list[tuple] = []  # every mark_running item
        self.saved = None  # the round state saved last
        self.whole_gate = asyncio.Event()  # a streamed start reads the whole backlog once set
        self.vacuums = 0  # start_vacuum_after_backfill calls
        self.chunks_orgs: list[tuple] = []  # (changes, orgs) of each chunk written aside
        self.chunks_firsts: list[dict] = []  # the first ETAs each chunk written aside carried
        self.averages: dict = {}  # (org, workflow) -> mean seconds: the Durations estimates
        self.running_pools: dict[int, tuple] = {}  # with pools: what each running chart holds (dispatched_pools)

    def add(self, pk: int, org: int, workflow: str = "code", payload: object = None) -> None:
        self.rows[pk] = ChartRow(pk, org, workflow, "queued", T0 + pk, external_id=f"x-{pk}")
        self.payloads[pk] = {} if payload is None else payload

    def state(self, pk: int) -> str:
        return self.rows[pk].state

    def set(self, pk: int, **kw) -> None:
        self.rows[pk] = dataclasses.replace(self.rows[pk], **kw)

    def active_rows(self) -> list[ChartRow]:
        return [r for r in self.rows.values() if r.state not in FINAL]

    async def read_world(self) -> World:
        return World(self.config, list(self.orgs.values()), dict(self.costs), dict(self.averages), self.active_rows(),
                     rounds=self.saved, read_at=datetime.now(UTC),
                     running_pools={c: d for c, d in self.running_pools.items() if self.rows[c].state == "running"})

    async def read_streamed(self, per_org, on_head):
        """The head of the saved order first (what ``db.read_head`` reads), then, once the
        test opens ``whole_gate``, the whole backlog as it was when the head was read."""
        world = await self.read_world()
        running = [r for r in world.charts if r.state == "running"]
        queued = {str(r.id): r for r in world.charts if r.state == "queued"}
        if self.saved is None and self.config.share == "work":  # db.read_head: the whole backlog first
            on_head(None)
            return world
        if self.saved is None:  # a first start: each org's first charts by rank
            head, truncated = first_head_of_backlog([r.queued_chart() for r in queued.values()], per_org)
            charts = sorted(running + [queued[c.id] for c in head], key=lambda r: r.id)
            if not on_head(db.Head(dataclasses.replace(world, charts=charts), None, frozenset(truncated))):
                return None
            await self.whole_gate.wait()
            return world
        head, horizon, truncated = head_of_backlog([r.queued_chart(with_round=True) for r in queued.values()],
                                                   per_org)
        charts = running + [queued[c.id] for c in head]
        world = dataclasses.replace(world, rounds=self.saved)
        if not on_head(db.Head(dataclasses.replace(world, charts=charts), horizon, frozenset(truncated))):
            return None
        await self.whole_gate.wait()
        return world

    async def recent_arrivals(self):
        return []

    async def recent_durations(self):
        return []

    async def recent_promises(self):
        return []

    async def recorded_first_etas(self):
        return set()

    async def record_first_etas(self, etas):
        return len(etas)

    async def record_due_alerts(self, levels, rose, at):
        self.due_alerts = getattr(self, "due_alerts", [])
        self.due_alerts.append((dict(levels), list(rose), at))
        for pk, level in levels.items():
            if pk in self.rows:
                self.set(pk, due_alert={0: "", 1: "at_risk", 2: "late"}[level])
        return len(levels)

    async def read_config(self):
        return self.config

    async def read_orgs(self, ids=None):
        return [o for o in self.orgs.values() if ids is None or o.id in ids]

    async def read_costs(self):
        return dict(self.costs)

    async def read_changes(self, since, after=None, limit=None):
        """Every row counts as changed; with ``limit``, a chunk at a time by id (the real
        store's keyset is ``(updated_at, id)``)."""
        rows = sorted(self.rows.values(), key=lambda r: r.id)
        if after is not None:
            rows = [r for r in rows if r.id > after[1]]
        more = None
        if limit is not None and len(rows) >= limit:
            rows = rows[:limit]
            more = (None, rows[-1].id)
        return db.Changes(self.config, list(self.orgs.values()), dict(self.costs), dict(self.averages), rows,
                          datetime.now(UTC), more)

    async def read_active_chunk(self, after_pk, limit):
        return sorted((r for r in self.active_rows() if r.id > after_pk), key=lambda r: r.id)[:limit]

    def start_vacuum_after_backfill(self) -> None:
        self.vacuums += 1

    async def read_charts(self, ids, known_orgs=()):
        rows = {i: self.rows[i] for i in ids if i in self.rows}
        return rows, [self.orgs[o] for o in {r.org for r in rows.values()} - set(known_orgs)]

    async def read_for_start(self, ids):
        return {i: db.StartRow(self.rows[i], f"org-{self.rows[i].org}", "DemoChart", self.payloads[i], 3600)
                for i in ids if i in self.rows}

    async def mark_running(self, items, rounds=None, pools=None):
        if rounds is not None:
            await self.save_rounds(*rounds)
        out = {}
        for cid, cost, run_id, at, *_ in items:
            self.marked.append((cid, cost, run_id, at))
            out[cid] = self.rows[cid].state == "queued"
            if out[cid]:
                self.set(cid, state="running", started_at=at, dispatched_cost=cost, run_id=run_id)
                if pools and cid in pools:
                    self.running_pools[cid] = pools[cid]
        return out

    async def fail_start(self, chart_id, error):
        if self.rows[chart_id].state != "queued":
            return False
        self.set(chart_id, state="failed")
        self.errors[chart_id] = error
        return True

    async def record_outcome(self, chart_id, state, error, started_at, finished_at, run_id):
        if self.rows[chart_id].state in FINAL:
            return False
        self.set(chart_id, state=state)
        self.errors[chart_id] = error
        return True

    async def record_outcomes(self, items, known_orgs=()):
        wrote = [await self.record_outcome(*item) for item in items]
        return db.Recorded(wrote, *await self.read_charts({item[0] for item in items}, known_orgs))

    async def requeue(self, chart_id, reason):
        self.set(chart_id, state="queued")
        return True

    deployment_ids = WorkflowIds("test")  # every chart gets chart-test-<pk>

    async def deployment(self):
        return self.deployment_ids

    async def legacy_active(self, ids):
        return any(ids.is_legacy(pk) for pk, r in self.rows.items() if r.state in ("queued", "running"))

    async def save_rounds(self, state, changes, work=None):
        self.saved = state
        for cid, r in changes.items():
            self.set(int(cid), round=r)
        for cid, (est, share) in (work or {}).items():
            self.set(int(cid), est_s=est, share=share)

    chunk_gate: asyncio.Event | None = None  # a test holds the backfill's chunk in flight with it
    chunks_aside = 0
    chunk_failures = 0  # the next chunks to fail (a database error)

    async def save_rounds_aside(self, state, changes, work=None, orgs=None, firsts=None):
        """A backfill's chunk, written aside: as the real store, after the loop let go."""
        self.chunks_aside += 1
        self.chunks_firsts.append(dict(firsts or {}))  # the first ETAs it carries
        self.chunks_orgs.append((dict(changes), orgs))  # the orgs whose dead index entries it sweeps
        await asyncio.sleep(0)
        if self.chunk_gate is not None:
            await self.chunk_gate.wait()
        if self.chunk_failures:
            self.chunk_failures -= 1
            raise OSError("connection lost")
        await self.save_rounds(state, changes, work)


class FakeTemporal:
    """Workflows run until the test closes them (:meth:`close`); starts can be made to fail.
    Its errors are the Temporal port's (:mod:`fairsched.engine.ports.temporal`), a failed
    start judged as the real port judges Temporal's error (``StartFailed.of``)."""

    def __init__(self) -> None:
        self.runs: dict[int, str] = {}
        self.outcomes: dict[int, Outcome] = {}
        self.closed: dict[int, asyncio.Event] = defaultdict(asyncio.Event)
        self.start_calls: list[int] = []
        self.refuse: dict[int, BaseException] = {}  # chart -> what its start raises
        self.unavailable = False
        self.cancels: list[int] = []
        self.terminated: dict[int, str] = {}
        self.ids = None  # set by the scheduler at take-over
        self.retention = 7 * 86_400.0

    async def connect(self) -> None:
        pass

    async def retention_s(self):
        return self.retention

    async def start(self, *, temporal_type, task_queue, chart, execution_timeout_s) -> str:
        pk = chart.chart_id
        self.start_calls.append(pk)
        if self.unavailable:
            raise StartFailed.of(rpc(RPCStatusCode.UNAVAILABLE, "connection refused"))
        if pk in self.refuse:
            raise StartFailed.of(self.refuse[pk])
        if pk in self.outcomes:
            raise AlreadyStarted(f"{workflow_id(pk)}: {temporal_type}")
        return self.runs.setdefault(pk, f"run-{pk}")

    def close(self, pk: int, state: str = "succeeded", error: str = "") -> None:
        at = datetime.fromtimestamp(T0, UTC)
        self.outcomes[pk] = Outcome(state, error, at, at, self.runs[pk])
        self.closed[pk].set()

    async def outcome(self, chart_id):
        if chart_id not in self.runs:
            raise WorkflowNotFound("workflow not found", "NOT_FOUND")
        return self.outcomes.get(chart_id)

    async def describe(self, chart_id):
        await self.outcome(chart_id)

    async def cancel(self, chart_id):  # a workflow that ignores its cancel
        self.cancels.append(chart_id)

    async def terminate(self, chart_id, reason):
        self.terminated[chart_id] = reason
        self.close(chart_id, "failed", f"terminated: {reason}")

    async def wait_closed(self, chart_id):
        await self.closed[chart_id].wait()

    async def running(self, legacy=False):
        for pk, run in list(self.runs.items()):
            if pk not in self.outcomes:
                yield self.ids.of(pk), run


class FakePublisher:
    def __init__(self) -> None:
        self.events: list[dict] = []
        self.snapshots = 0
        self.confirms: list[tuple[int, float]] = []  # (seq, at) of each confirmation
        self.broken: BaseException | None = None  # what storing a snapshot raises

    def store_snapshot(self, snap, rows, per_org) -> int:
        if self.broken is not None:
            raise self.broken
        self.snapshots += 1
        return self.snapshots

    async def snapshot_stored(self, seq):
        pass

    async def confirm_snapshot(self, seq, at):
        self.confirms.append((seq, at))

    async def event(self, event, counters):
        self.events.append(event)

    def kinds(self, kind: str) -> list[int]:
        return [e["chart"] for e in self.events if e["kind"] == kind]


@dataclasses.dataclass
class Rig:
    s: Scheduler
    clock: FakeClock
    store: FakeStore
    temporal: FakeTemporal
    publisher: FakePublisher

    async def lead(self) -> None:
        """What ``_lead`` does before its loop, without the lease keeper and the listener:
        the lease is held (renewed just now)."""
        s = self.s
        s.leading = True
        self.renew_lease()
        await s.take_over()

    def renew_lease(self) -> None:
        self.s.leadership.ok_until = self.clock.monotonic() + self.s.LEASE_TTL_S

    async def restart(self, **tunables) -> Scheduler:
        """The scheduler steps down and a new one, over the same database, Temporal and
        Redis, replaces it (not leading yet: :meth:`lead`). ``tunables``: its class
        constants to set (HEAD_PER_ORG=1, ...)."""
        await self.s.step_down()
        self.s = Scheduler(temporal_address="unused:1", namespace="default", task_queue="q",
                           redis_url="redis://unused", clock=self.clock, store=self.store,
                           publisher=self.publisher, temporal=self.temporal)
        for name, value in tunables.items():
            setattr(self.s, name, value)
        return self.s

    async def tick(self) -> None:
        await self.s.tick()
        await settle()

    def running(self) -> set[int]:
        return set(self.s.state.running)


async def settle() -> None:
    """Let the watchers (and the ETA pass's bookkeeping) run."""
    for _ in range(10):
        await asyncio.sleep(0)


async def whole_takes_over(r, s) -> None:
    """The whole backlog's read is let through; once it is built (in a thread: on a loaded
    machine it can take more than the loop's turns, so up to 10 s of real time), a tick takes
    over with it."""
    r.store.whole_gate.set()
    deadline = time.monotonic() + 10.0
    while not s.startup.whole_ready and time.monotonic() < deadline:
        await settle()
        await asyncio.sleep(0.005)
    assert s.startup.whole_ready, "the whole backlog was not built within 10 s"
    await r.tick()


async def tick_until_written(r, caplog, most: int = 50) -> int:
    """Tick (letting the backfill's chunk in flight land between ticks) until every
    chart's round is written; returns how many ticks that took."""
    for n in range(1, most + 1):
        await r.tick()
        await settle()
        await pass_ends(r.s)  # a loaded backlog's first pass holds the chunks back while it runs
        if "every chart's round is written" in caplog.text:
            return n
    raise AssertionError("the backfill never ended")


async def written_then_a_restart_keeps_the_order(r, caplog) -> None:
    """Tick until every chart's round is written: each queued row has its round, the saved
    round state is the queue's, and a restart over them keeps the order."""
    await tick_until_written(r, caplog)
    assert all(row.round is not None for row in r.store.rows.values() if row.state == "queued")
    assert r.store.saved == r.s.state.queue.export_rounds()
    order = r.s.state.queue.order()
    s = await r.restart()
    await r.lead()
    assert s.state.queue.order() == order


@pytest.fixture
async def rig():
    rigs: list[Rig] = []

    def make(budget: int, charts: int, *, weights=(1,), costs=None, **kw) -> Rig:
        clock, temporal, publisher = FakeClock(), FakeTemporal(), FakePublisher()
        store = FakeStore(budget, [OrgRow(i + 1, f"Org {i + 1}", f"org-{i + 1}", w) for i, w in enumerate(weights)],
                          costs)
        for pk in range(1, charts + 1):
            store.add(pk, 1 + (pk - 1) % len(weights))
        s = Scheduler(temporal_address="unused:1", namespace="default", task_queue="q", redis_url="redis://unused",
                      clock=clock, store=store, publisher=publisher, temporal=temporal, **kw)
        r = Rig(s, clock, store, temporal, publisher)
        rigs.append(r)
        return r

    yield make
    for r in rigs:
        await r.s.step_down()


# ------------------------------------------------------------------------------------------


async def test_a_chart_whose_turn_has_come_is_started_and_committed(rig):
    r = rig(budget=2, charts=3, weights=(2, 1))  # org 1: charts 1, 3; org 2: chart 2
    await r.lead()
    assert r.s.state.queue.order() == ["1", "2", "3"]
    await r.tick()
    assert r.temporal.start_calls == [1, 2]  # the head of the fair order that fits the budget
    assert r.store.state(1) == r.store.state(2) == "running" and r.store.state(3) == "queued"
    assert r.store.rows[1].run_id == "run-1" and r.store.rows[1].dispatched_cost == 1
    assert [m[3] for m in r.store.marked] == [r.clock.time()] * 2  # the start time, from the clock
    assert r.running() == {1, 2} and r.s.state.queue.order() == ["3"] and r.s.state.free == 0
    assert r.publisher.kinds("dispatch") == [1, 2]
    assert r.s.starts == 2
    await r.tick()
    assert r.temporal.start_calls == [1, 2]  # nothing more fits


async def test_a_chart_whose_turn_has_come_starts_before_the_tick_does_its_chunk_of_the_full_resync(rig):
    """The full resync reads and applies a chunk per tick: after the tick's dispatch, never
    in front of it (at 100k on PostgreSQL, the first priority charts after the full resync
    began waited behind it)."""
    r = rig(budget=1, charts=3)
    await r.lead()
    steps: list[str] = []
    chunk, start = r.store.read_active_chunk, r.temporal.start

    async def read_active_chunk(after_pk, limit):
        steps.append("chunk")
        return await chunk(after_pk, limit)

    async def started(**kw):
        steps.append("start")
        return await start(**kw)

    r.store.read_active_chunk, r.temporal.start = read_active_chunk, started
    r.s.sync.request_full_resync()  # due now
    await r.tick()
    assert steps == ["start", "chunk"]
    assert r.temporal.start_calls == [1] and r.s.sync.full_resync_read is None  # 3 charts: one chunk was all


async def test_a_start_refused_for_good_fails_the_chart_and_the_order_moves_on(rig):
    r = rig(budget=1, charts=2)
    r.temporal.refuse[1] = rpc(RPCStatusCode.INVALID_ARGUMENT, "Blob data size exceeds limit.")
    await r.lead()
    await r.tick()
    assert r.store.state(1) == "failed"
    assert r.store.errors[1].startswith("cannot start: Temporal refused to start the workflow (INVALID_ARGUMENT)")
    assert "1" not in r.s.state.queue
    assert r.s.loop.backoff["dispatch"].ready(r.clock.monotonic())  # nobody to blame but the chart: no backoff
    await r.tick()  # no clock change needed: the next chart has the head
    assert r.temporal.start_calls == [1, 2] and r.store.state(2) == "running"


async def test_temporal_unavailable_backs_dispatch_off_until_the_clock_moves_on(rig):
    r = rig(budget=1, charts=1)
    r.temporal.unavailable = True
    await r.lead()
    await r.tick()
    assert r.temporal.start_calls == [1] and r.store.state(1) == "queued" and "1" in r.s.state.queue
    r.temporal.unavailable = False
    await r.tick()
    assert r.temporal.start_calls == [1]  # backing off: no retry at once
    r.clock.advance(r.s.BACKOFF_MIN_S)
    r.renew_lease()
    await r.tick()
    assert r.temporal.start_calls == [1, 1] and r.store.state(1) == "running"


@pytest.mark.parametrize("status", [RPCStatusCode.INTERNAL, RPCStatusCode.UNKNOWN, RPCStatusCode.UNAVAILABLE],
                         ids=["internal", "unknown", "unavailable"])
async def test_a_server_side_error_never_fails_the_chart_it_keeps_its_place_and_dispatch_backs_off(rig, status):
    """A proxy in front of Temporal answering HTTP 500 gives INTERNAL or UNKNOWN: Temporal
    never saw the start, so it is "Temporal unavailable", however long it lasts. (These
    counted against the chart, which was failed after 5 attempts.)"""
    r = rig(budget=1, charts=2)
    r.temporal.refuse[1] = rpc(status, "upstream connect error: HTTP 500")
    await r.lead()
    for n in range(1, 3 * r.s.dispatcher.start_failures.max_unknown + 1):
        await r.tick()
        assert r.store.state(1) == "queued" and r.s.state.queue.order() == ["1", "2"]
        assert not r.s.loop.backoff["dispatch"].ready(r.clock.monotonic())  # no tight loop
        r.clock.advance(r.s.BACKOFF_MAX_S)
        r.renew_lease()
    assert r.temporal.start_calls == [1] * n  # the head of the order, never passed over
    assert r.s.dispatcher.start_failures.attempts == {}  # nothing counted against it
    del r.temporal.refuse[1]
    await r.tick()
    assert r.store.state(1) == "running" and r.temporal.start_calls[-1] == 1


async def test_a_failing_outcome_after_already_started_leaves_that_chart_and_commits_the_rest(rig):
    """A start refused as already started (chart 1's workflow ran before) reads the
    workflow's outcome; when that read fails, chart 1 is left for the next dispatch (or the
    reconciliation) and chart 2, started in the same dispatch, is still committed. (The
    error aborted the whole dispatch: chart 2 ran in Temporal with its row queued.)"""
    r = rig(budget=2, charts=2)
    r.temporal.runs[1] = "run-old"
    r.temporal.close(1)  # it ran and closed before this scheduler started
    outcome = r.temporal.outcome
    broken = {"on": True}

    async def flaky_outcome(chart_id):
        if broken["on"] and chart_id == 1:
            raise rpc(RPCStatusCode.UNAVAILABLE, "connection reset")
        return await outcome(chart_id)

    await r.lead()
    r.temporal.outcome = flaky_outcome
    await r.tick()
    assert r.store.state(2) == "running" and r.running() == {2}
    assert r.store.state(1) == "queued" and r.s.state.queue.order() == ["1"]
    assert not r.s.loop.backoff["dispatch"].ready(r.clock.monotonic())
    broken["on"] = False
    r.clock.advance(r.s.BACKOFF_MIN_S)
    r.renew_lease()
    await r.tick()
    assert r.store.state(1) == "succeeded"  # its real outcome, recorded; never run again
    assert r.temporal.runs[1] == "run-old"


async def test_dispatch_never_exceeds_the_budget(rig):
    r = rig(budget=3, charts=6, weights=(1, 1), costs={("2", "code"): 2})  # org 2's charts cost 2
    await r.lead()
    for _ in range(3):
        await r.tick()
        assert r.s.state.used <= 3
    assert r.temporal.start_calls == [1, 2]  # cost 1 + 2: the budget is full, chart 3 (cost 1) waits
    assert sum(m[1] for m in r.store.marked) == 3


async def test_a_finished_result_frees_budget_and_the_next_chart_dispatches(rig):
    r = rig(budget=1, charts=2)
    await r.lead()
    await r.tick()
    assert r.running() == {1}
    await r.tick()
    assert r.temporal.start_calls == [1]  # no budget free
    r.temporal.close(1)
    await settle()  # the result watch reports it
    await r.tick()
    assert r.store.state(1) == "succeeded"
    assert r.running() == {2} and r.temporal.start_calls == [1, 2]
    assert r.publisher.kinds("finish") == [1]


async def test_a_cancel_not_honoured_is_terminated_after_the_grace_period(rig):
    r = rig(budget=1, charts=1, cancel_grace_s=60.0)
    await r.lead()
    await r.tick()
    r.store.set(1, cancel_requested=True)  # the user cancels: the row says so, a notification names it
    r.s.loop.notes.append(ChartNote(id=1))
    await r.tick()
    assert r.temporal.cancels == [1] and r.running() == {1}
    r.clock.advance(59.0)
    r.renew_lease()
    await r.tick()
    assert r.temporal.terminated == {} and r.running() == {1}  # still within the grace period
    r.clock.advance(2.0)
    r.renew_lease()
    await r.tick()
    assert r.temporal.terminated == {1: "cancel not honoured within 60 s"}
    assert r.store.state(1) == "cancelled" and r.store.errors[1] == "cancel not honoured within 60 s: terminated"
    assert r.running() == set() and r.s.state.free == 1


async def test_a_lease_not_renewed_stops_dispatch_until_it_is(rig):
    r = rig(budget=1, charts=1)
    await r.lead()
    r.clock.advance(r.s.LEASE_TTL_S)  # no renewal for a whole lease term
    await r.tick()
    assert r.temporal.start_calls == [] and r.store.state(1) == "queued"
    r.renew_lease()
    await r.tick()
    assert r.temporal.start_calls == [1]


async def test_a_scheduler_that_stepped_down_dispatches_nothing(rig):
    r = rig(budget=1, charts=1)
    await r.lead()
    r.s.leading = False
    await r.tick()
    assert r.temporal.start_calls == []


async def test_a_notification_naming_a_new_chart_brings_it_in_and_it_dispatches(rig):
    r = rig(budget=1, charts=0)
    await r.lead()
    r.store.add(7, 1)  # created after the load; its notification names it
    r.s.loop.notes.append(ChartNote(id=7))
    await r.tick()
    assert r.temporal.start_calls == [7] and r.store.state(7) == "running"
    assert r.publisher.kinds("queued") == [7] and r.publisher.kinds("dispatch") == [7]


async def test_a_new_chart_of_an_org_created_after_the_load_brings_its_org_in_and_dispatches(rig):
    """The chart's org is read with it when the scheduler does not know it (a chart of an
    org it knows is read alone)."""
    r = rig(budget=1, charts=0)
    await r.lead()
    r.store.orgs[2] = OrgRow(2, "Org 2", "org-2", 3)
    r.store.add(7, 2)
    r.s.loop.notes.append(ChartNote(id=7))
    await r.tick()
    assert r.s.state.orgs[2].weight == 3 and r.s.state.queue.weights["2"] == 3
    assert r.temporal.start_calls == [7] and r.store.state(7) == "running"


async def test_a_crashed_dispatchs_workflow_that_recorded_itself_from_queued_holds_its_cost_until_it_closes(rig):
    """The chaos test's budget overshoot (tests/integration/test_poison_live.py, once in a
    PostgreSQL pass): a scheduler started chart 1's workflow and was killed before marking
    its row running; the workflow recorded its outcome from queued (so no dispatched cost
    on the row), and its worker died before the workflow closed. The next scheduler's
    reconcile finds it final but still running in Temporal: it holds chart 1's cost and
    watches for the close, so chart 2 waits, then starts at the close. (It held nothing
    when the row had no dispatched cost, and Temporal saw 2 running against a budget of 1;
    and the start-up reconcile's watches were dropped, the cost held to the next reconcile.)"""
    r = rig(budget=1, charts=2)
    r.temporal.runs[1] = "run-1"  # started by the predecessor, still running
    r.store.set(1, state="succeeded")  # recorded by its workflow, from queued
    assert r.store.rows[1].dispatched_cost is None
    await r.lead()
    assert r.s.state.used == 1 and r.s.state.running[1].closing
    await r.tick()
    assert r.temporal.start_calls == []  # the budget is chart 1's until Temporal closes it
    r.temporal.close(1)
    await settle()
    await r.tick()
    assert r.temporal.start_calls == [2] and r.s.state.used == 1 and 1 not in r.s.state.running


async def test_a_restart_dispatches_from_the_head_of_the_order_while_the_whole_backlog_loads(rig, caplog):
    """Three orgs of weight 1, budget 1: the order is 1 2 3 4 5 6 7 8 9. Chart 1 runs and
    the scheduler restarts, loading one chart per org first: 4, 2 and 3. The head may
    start chart 2 (nothing can sort before it) but not chart 3: org 1's unloaded chart
    7 could come before it as far as the head knows. A priority chart goes at once.
    Once the whole backlog takes over, the order goes on as if there had been no restart."""
    r = rig(budget=1, charts=9, weights=(1, 1, 1))
    await r.lead()
    await r.tick()
    assert r.temporal.start_calls == [1] and r.store.saved is not None
    s = await r.restart(HEAD_PER_ORG=1)
    await r.lead()
    assert s.state.partial and sorted(s.state.queue.order(), key=int) == ["2", "3", "4"]
    r.clock.advance(s.RESYNC_INTERVAL_S + 1.0)  # a resync and an ETA pass would be due: not while partial
    await r.tick()
    assert s.idle_for() > 0.5  # the loop sleeps (it spun, starving the thread that loads the whole)
    r.temporal.close(1)
    await settle()
    await r.tick()
    assert r.temporal.start_calls == [1, 2]
    r.temporal.close(2)
    await settle()
    await r.tick()
    assert r.temporal.start_calls == [1, 2]  # 3 is past the horizon: wait for the whole backlog
    r.store.rows[10] = ChartRow(10, 2, "code", "queued", T0 + 10, priority=True, prioritized_at=T0 + 10)
    r.store.payloads[10] = {}
    s.loop.notes.append(ChartNote(id=10))
    await r.tick()
    assert r.temporal.start_calls == [1, 2, 10]  # a priority chart needs no whole order
    r.temporal.close(10)
    await settle()
    await whole_takes_over(r, s)
    assert not s.state.partial
    assert "takes over from the head (1 dispatched" in caplog.text
    assert "differs" not in caplog.text  # the replay moved the rounds as the head moved them
    assert r.temporal.start_calls == [1, 2, 10, 3]
    assert s.state.queue.order() == ["4", "5", "6", "7", "8", "9"]
    assert s.state.queue.head == r.store.saved.head == 0


async def test_a_first_start_writes_the_rounds_a_chunk_at_a_time_and_a_restart_keeps_the_order(rig, caplog):
    """Nine charts in three orgs and no round saved: the first dispatch writes its own
    chart's round, not all nine (at a million, that one transaction held the database for
    minutes); the rest follow two per tick. A restart in the middle resumes the same
    order, and its backfill writes what is left."""
    r = rig(budget=1, charts=9, weights=(1, 1, 1))
    r.s.BACKFILL_MIN, r.s.BACKFILL_CHUNK = 3, 2
    await r.lead()
    assert "writing 9 charts' rounds 2 at a time" in caplog.text
    await r.tick()
    assert r.temporal.start_calls == [1]
    written = {pk for pk, row in r.store.rows.items() if row.round is not None}
    assert written == {1, 2, 3}  # the dispatch's own chart, then one chunk of the head of the order; not all nine
    order = r.s.state.queue.order()
    rounds = {c: r.s.state.queue.round_of(c) for c in order}
    s = await r.restart(BACKFILL_MIN=3, BACKFILL_CHUNK=2)
    r.store.whole_gate.set()
    await r.lead()
    for _ in range(50):
        await settle()
        if s.startup.whole_ready:
            break
    await r.tick()
    assert not s.state.partial and s.state.queue.order() == order
    assert {c: s.state.queue.round_of(c) for c in order} == rounds
    assert "writing 6 charts' rounds 2 at a time" in caplog.text  # 4 to 9: 2's and 3's were written
    assert await tick_until_written(r, caplog) <= 5
    assert all(row.round is not None for row in r.store.rows.values() if row.state == "queued")
    assert r.store.saved == s.state.queue.export_rounds()


async def test_a_first_starts_backfill_writes_the_first_etas_of_its_charts_with_their_rounds(rig, caplog):
    """The first pass's first ETAs: the charts whose round is written get theirs from the
    pass's writer, the rest from the backfill's chunks, in the UPDATE of their rounds (one
    row version a chart, not two), until the next pass starts; what the chunks write after
    that, the next pass's writer records. Every chart gets one, once."""
    r = rig(budget=1, charts=12, weights=(1, 1, 1))
    r.s.BACKFILL_MIN, r.s.BACKFILL_CHUNK = 3, 2
    written: list[set] = []

    async def record(rows):
        written.append(set(rows))
        return len(rows)
    r.store.record_first_etas = record
    await r.lead()
    await tick_until_written(r, caplog)
    for _ in range(50):  # the next pass records what the chunks wrote while it ran
        if not r.s.state.unpromised - {str(c) for c in r.temporal.start_calls}:
            break
        r.clock.advance(r.s.state.config.eta_interval_s)
        await r.tick()
        await pass_ends(r.s)
    carried = [set(f) for f in r.store.chunks_firsts if f]
    by_writer = set().union(*written)
    by_chunks = set().union(*carried)
    assert len(carried) >= 2 and not by_writer & by_chunks
    assert sum(map(len, written + carried)) == len(by_writer | by_chunks)  # each chart once
    dispatched = set(r.temporal.start_calls)  # their first ETAs are their dispatch's
    assert by_writer | by_chunks | dispatched == set(range(1, 13)), (by_writer, by_chunks, dispatched)
    assert not r.s.state.unpromised - {str(c) for c in dispatched}


async def test_a_restart_amid_the_first_starts_backfill_dispatches_from_the_head(rig, caplog):
    """A first start writes the rounds a chunk at a time; a restart in the middle (charts
    4 to 9 have no round yet) does not wait for the whole backlog: it reads each org's first
    chart with a round and first without (one each here), places those by the arrival rule
    after the saved cursors, and dispatches up to the horizon. The whole backlog then takes
    over, the backfill writes the rest, and the order is the one a scheduler that never
    stopped would hold."""
    r = rig(budget=1, charts=9, weights=(1, 1, 1))
    r.s.BACKFILL_MIN, r.s.BACKFILL_CHUNK = 3, 2
    await r.lead()
    await r.tick()
    assert r.temporal.start_calls == [1]
    assert {pk for pk, row in r.store.rows.items() if row.round is not None} == {1, 2, 3}
    order = r.s.state.queue.order()
    rounds = {c: r.s.state.queue.round_of(c) for c in order}
    s = await r.restart(HEAD_PER_ORG=1, BACKFILL_MIN=3, BACKFILL_CHUNK=2)
    await r.lead()
    assert s.state.partial and s.state.queue.order() == ["2", "3", "4", "5", "6"]
    assert "loaded the head of the order (3 orgs' rounds still to write)" in caplog.text
    assert {c: s.state.queue.round_of(c) for c in s.state.queue.order()} == {c: rounds[c] for c in "23456"}
    r.temporal.close(1)
    await settle()
    await r.tick()
    r.temporal.close(2)
    await settle()
    await r.tick()
    assert r.temporal.start_calls == [1, 2]  # 3: org 2's unread charts could sort before it
    written = {pk for pk, row in r.store.rows.items() if row.round is not None}
    assert written <= {1, 2, 3, 4, 5, 6}  # the head's own charts only, each org a prefix
    await whole_takes_over(r, s)
    assert not s.state.partial
    assert "takes over from the head (1 dispatched" in caplog.text
    assert "differs" not in caplog.text
    assert r.temporal.start_calls == [1, 2, 3]
    assert s.state.queue.order() == order[2:]
    assert {c: s.state.queue.round_of(c) for c in order[2:]} == {c: rounds[c] for c in order[2:]}
    assert await tick_until_written(r, caplog) <= 6
    assert {pk: row.round for pk, row in r.store.rows.items() if row.state == "queued"} == \
        {int(c): rounds[c] for c in order[2:]}
    assert r.store.saved == s.state.queue.export_rounds()


async def test_a_chart_starts_while_the_backfills_chunk_is_in_flight_and_its_commit_is_chained_after_it(rig, caplog):
    """The backfill's chunk is written aside (its own thread and connection): a chart whose
    turn comes meanwhile starts on Temporal at once, and its commit (which carries the
    round state) is chained after the chunk, a task of its own: the loop goes on (a resync
    that reads the chart's row still queued leaves it running: the row is behind memory),
    and the saves land in the order they were made. A chunk that fails leaves its charts
    to the next save: every round is written in the end."""
    r = rig(budget=1, charts=9, weights=(1, 1, 1))
    r.s.BACKFILL_MIN, r.s.BACKFILL_CHUNK = 3, 2
    r.store.chunk_gate = asyncio.Event()
    await r.lead()
    await r.tick()
    assert r.temporal.start_calls == [1] and r.store.chunks_aside == 1  # the chunk after the dispatch, held
    changes, orgs = r.store.chunks_orgs[0]  # the sweep after it: the orgs of its charts
    assert changes and orgs == {r.store.rows[int(c)].org for c in changes}
    r.temporal.close(1)
    await settle()
    await asyncio.wait_for(r.s.tick(), 1.0)  # the tick ends: its commit waits, not the loop
    assert r.temporal.start_calls == [1, 2]  # started while the chunk is in flight
    assert 2 not in [m[0] for m in r.store.marked] and r.s.state.committing == {2}
    assert "dispatch-commit" in r.s.loop.chunk.get_name()
    r.s.loop.resync_requested = True
    await r.tick()  # the resync reads row 2, still queued: behind memory, not the truth
    assert 2 in r.s.state.running and "2" not in r.s.state.queue and r.temporal.start_calls == [1, 2]
    r.store.chunk_failures = 1
    r.store.chunk_gate.set()
    await r.s.rounds_settled()  # the chunk fails, then the commit lands (with the chunk's charts' rounds)
    assert 2 in [m[0] for m in r.store.marked] and r.store.state(2) == "running"
    assert not r.s.state.committing and 2 in r.s.sync.watching  # followed as an inline commit is
    assert "rounds failed (OSError: connection lost)" in caplog.text
    r.clock.advance(r.s.BACKOFF_MAX_S + 1)
    await written_then_a_restart_keeps_the_order(r, caplog)


async def test_commits_chained_behind_a_chunk_land_in_the_order_their_dispatches_made_them(rig, caplog):
    """Two dispatches while the backfill's chunk is held: each commit is chained after the
    save before it (the chunk, then the first commit), so the rows and round states land
    in dispatch order, and once everything is written a restart keeps the order."""
    r = rig(budget=2, charts=12, weights=(1, 1, 1))
    r.s.BACKFILL_MIN, r.s.BACKFILL_CHUNK = 3, 2
    r.store.chunk_gate = asyncio.Event()
    await r.lead()
    await r.tick()
    assert r.temporal.start_calls == [1, 2] and r.store.chunks_aside == 1
    for pk in (1, 2):
        r.temporal.close(pk)
        await settle()
        await r.tick()
    assert r.temporal.start_calls == [1, 2, 3, 4] and r.s.state.committing == {3, 4}
    assert [m[0] for m in r.store.marked] == [1, 2]
    r.store.chunk_gate.set()
    await r.s.rounds_settled()
    assert [m[0] for m in r.store.marked] == [1, 2, 3, 4] and not r.s.state.committing
    await written_then_a_restart_keeps_the_order(r, caplog)


async def test_a_commit_chained_behind_a_chunk_that_outlives_the_step_down_is_never_written(rig, caplog):
    """A step-down waits for the saves in flight for a while, then gives the lease up. A
    commit still chained behind a chunk then must not write (a next leader's saves would
    be overwritten): it is dropped, and the next leader adopts its started workflow."""
    r = rig(budget=1, charts=9, weights=(1, 1, 1))
    r.s.BACKFILL_MIN, r.s.BACKFILL_CHUNK = 3, 2
    r.store.chunk_gate = asyncio.Event()
    await r.lead()
    await r.tick()
    r.temporal.close(1)
    await settle()
    await r.tick()
    assert r.temporal.start_calls == [1, 2] and r.s.state.committing == {2}
    commit = r.s.loop.chunk
    r.s.STOP_WAIT_S = 0.05
    await r.s.step_down()  # the chunk outlives the wait
    r.store.chunk_gate.set()
    await asyncio.wait_for(commit, 1.0)
    assert 2 not in [m[0] for m in r.store.marked] and r.store.state(2) == "queued"
    assert "commit of charts [2] dropped: this scheduler stepped down" in caplog.text


async def test_a_first_start_dispatches_from_the_head_of_the_backlog_while_the_whole_loads(rig, caplog):
    """No round saved, three orgs of weight 1, budget 1: the order is 1 2 3 4 5 6 7 8 9.
    The first start reads two charts per org first (1 4, 2 5, 3 6): their rounds are the
    whole backlog's, and every org's next chart takes round 2, so the head may dispatch
    1 to 6. It starts 1 and 2 and writes the head's rounds a chunk at a time; the whole
    backlog then takes over, writes only the rest, and a restart keeps the order."""
    r = rig(budget=1, charts=9, weights=(1, 1, 1))
    r.s.HEAD_PER_ORG, r.s.BACKFILL_MIN, r.s.BACKFILL_CHUNK = 2, 3, 2
    await r.lead()
    s = r.s
    assert s.state.partial and s.state.queue.order() == ["1", "2", "3", "4", "5", "6"]
    assert "loaded the head of the backlog (a first start): 6 queued" in caplog.text
    await r.tick()
    r.temporal.close(1)
    await settle()
    await r.tick()
    assert r.temporal.start_calls == [1, 2]
    written = {pk for pk, row in r.store.rows.items() if row.round is not None}
    assert written and written <= {1, 2, 3, 4, 5, 6}  # the head's own charts only
    r.store.whole_gate.set()
    for _ in range(50):
        await settle()
        if s.startup.whole_ready:
            break
    r.temporal.close(2)
    await settle()
    await r.tick()
    assert not s.state.partial
    assert "takes over from the head (2 dispatched" in caplog.text
    assert "differs" not in caplog.text
    assert r.temporal.start_calls == [1, 2, 3]
    assert s.state.queue.order() == ["4", "5", "6", "7", "8", "9"]
    left = 9 - len(written)
    assert f"writing {left} charts' rounds 2 at a time" in caplog.text  # not again what the head wrote
    assert r.store.vacuums == 0  # the head's rounds written is not the end of the backfill
    assert await tick_until_written(r, caplog) <= 6
    assert r.store.vacuums == 1  # PostgreSQL's dead row versions of the chunks: one vacuum, once
    for _ in range(3):
        await r.tick()
    assert r.store.vacuums == 1
    assert {pk: row.round for pk, row in r.store.rows.items() if row.state == "queued"} == \
        {4: 1, 5: 1, 6: 1, 7: 2, 8: 2, 9: 2}
    assert r.store.saved == s.state.queue.export_rounds()
    s2 = await r.restart()
    await r.lead()
    for _ in range(50):
        await settle()
        if s2.startup.whole_ready or not s2.state.partial:
            break
    await r.tick()
    assert s2.state.queue.order() == ["4", "5", "6", "7", "8", "9"]


async def pass_ends(s: Scheduler) -> None:
    """Let the ETA pass in flight (in a thread) end, and its bookkeeping run."""
    for _ in range(500):
        if s.etas.pass_in_flight is None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the ETA pass did not end")


async def test_a_snapshot_is_confirmed_only_while_the_passes_succeed(rig):
    """The scheduler confirms each second that its last snapshot is still current; once an
    ETA pass fails, that snapshot no longer says what the scheduler knows, and it is
    confirmed no more (the pages then turn it stale), until a pass succeeds again. (It
    was confirmed every second however long the passes kept failing: frozen ETAs shown
    as live.)"""
    r = rig(budget=1, charts=3)
    await r.lead()

    async def seconds(n: int) -> None:
        for _ in range(n):
            r.clock.advance(1.0)
            r.renew_lease()
            await r.tick()
            await pass_ends(r.s)

    await r.tick()  # dispatches chart 1; the first pass starts
    await pass_ends(r.s)
    await seconds(3)
    assert r.publisher.snapshots >= 1 and r.publisher.confirms[-1][1] > r.clock.time() - 2
    r.publisher.broken = RuntimeError("the pass cannot store its snapshot")
    r.temporal.close(1)  # something changes: chart 2 dispatches, a pass is due soon, and fails
    await settle()
    await seconds(1)
    assert r.store.state(2) == "running"
    await seconds(5)
    last = r.publisher.confirms[-1][1]
    await seconds(30)  # the passes keep failing
    assert r.publisher.confirms[-1][1] == last  # no longer confirmed
    assert r.publisher.confirms[-1][1] < r.clock.time() - 29
    r.publisher.broken = None  # the passes succeed again: the new snapshot is confirmed
    await seconds(12)
    seq, at = r.publisher.confirms[-1]
    assert seq == r.publisher.snapshots and at > r.clock.time() - 2


async def test_a_pass_that_stored_its_snapshot_and_failed_after_it_still_has_it_confirmed(rig):
    """The first ETAs are written after the snapshot is stored: a database error there fails
    the pass (it runs again soon), but the snapshot it stored is complete and current."""
    r = rig(budget=1, charts=3)

    async def no_database(etas):
        raise ConnectionError("the database is gone")

    r.store.record_first_etas = no_database
    await r.lead()
    await r.tick()
    await pass_ends(r.s)
    assert r.publisher.snapshots == 1 and not r.s.loop.backoff["eta"].ready(r.clock.monotonic())
    r.clock.advance(1.0)
    r.renew_lease()
    await r.tick()
    assert r.publisher.confirms[-1] == (1, r.clock.time())


def test_a_batch_of_notifications_names_what_to_read_again():
    from common.notify import ChartsNote, CostNote, OrgNote, Resync, SettingsNote
    from fairsched.engine.notes import Reads, read_note

    reads = Reads.of([ChartNote(id=1), ChartsNote.of([2, 3]), OrgNote(id=4), CostNote(org=4, workflow=1)])
    assert (reads.charts, reads.orgs, reads.costs, reads.settings, reads.resync) == ({1, 2, 3}, {4}, True, False,
                                                                                      False)
    assert Reads.of([read_note(b'{"kind": "chart", "id": "5"}')]).resync  # malformed: read everything changed instead
    assert Reads.of([ChartsNote(ids=(1,), count=5)]).resync  # only some named: resync
    assert Reads.of([SettingsNote()]).settings and Reads.of([Resync()]).resync
    assert Reads.of([read_note(b'{"kind": "what"}')]).resync


async def test_a_step_down_waits_for_a_task_that_ignores_its_cancel_through_the_clock(rig):
    """Every wait goes through the injected clock (issue 22): a background task that ignores
    its cancel is waited for at most STOP_WAIT_S of the clock's time, then left behind."""
    r = rig(budget=1, charts=1)
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # ignores its cancel

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)  # it runs up to its wait (a task cancelled before it starts just ends)
    r.s.loop.tasks.append(task)
    before = r.clock.monotonic()
    await r.s.step_down()
    assert r.clock.monotonic() - before == r.s.STOP_WAIT_S
    assert not task.done() and r.s.loop.tasks == []
    release.set()
    await task


async def test_a_slow_step_is_logged_with_how_long_the_loop_waited(rig, caplog):
    """A dispatch waits behind whatever step the loop is in: a step that took
    STEP_SLOW_LOG_S or more is logged with its name and time; a quick one is not."""
    r = rig(budget=1, charts=1)
    await r.lead()

    async def slow():
        r.clock.advance(0.25)

    async def quick():
        r.clock.advance(0.01)

    await r.s.guarded("rounds", slow)
    await r.s.guarded("notes", quick)
    assert "step rounds took 250 ms (the loop waited for it)" in caplog.text
    assert "step notes took" not in caplog.text
    # a backfill's chunks are slow one after another: one line per STEP_SLOW_LOG_EVERY_S at most
    caplog.clear()
    for _ in range(3):
        await r.s.guarded("rounds", slow)  # 0.25 s each: within 10 s of the first line
    assert "step rounds" not in caplog.text
    r.clock.advance(10)
    await r.s.guarded("rounds", slow)
    assert "step rounds took 250 ms (the loop waited for it); 3 more since the last such line, " \
           "the longest 250 ms" in caplog.text
    # a step run from a task of its own (the ETA pass, which logs its own time) is not the loop's
    caplog.clear()
    await r.s.guarded("eta", slow, loop_waits=False)
    assert "step eta" not in caplog.text


async def test_a_slow_dispatch_says_where_its_time_went(rig, caplog):
    """A dispatch's slow-step line names its phases: plan and read, the starts on
    Temporal, the commit (and whether it was chained after a save in flight)."""
    r = rig(budget=1, charts=1)
    await r.lead()
    start = r.temporal.start

    async def slow_start(**kw):
        r.clock.advance(0.3)
        return await start(**kw)

    r.temporal.start = slow_start
    await r.tick()
    assert r.temporal.start_calls == [1]
    assert "step dispatch took 300 ms (the loop waited for it): 1 chart: plan and read 0 ms, start on " \
           "Temporal 300 ms, commit 0 ms\n" in caplog.text


async def test_the_rounds_backfill_waits_for_the_first_pass_over_the_loaded_backlog(rig, caplog):
    """Until the first ETA pass over a loaded backlog stores its snapshot the pages show no
    ETA, and at 1M the rounds' backfill competes with it for the two cores. The backfill
    waits while that pass computes, and only then: not while the pass writes its first
    ETAs after publishing, nor beside any later pass."""
    r = rig(budget=1, charts=12, weights=(1, 1, 1))
    r.s.BACKFILL_MIN, r.s.BACKFILL_CHUNK = 3, 2
    release = threading.Event()
    passes = []
    store_snapshot = r.s.publisher.store_snapshot

    def held(snap, rows, per_org):  # the pass, in its thread: the first is held before its snapshot is stored
        passes.append(snap)
        if len(passes) == 1:
            assert release.wait(10)
        return store_snapshot(snap, rows, per_org)

    r.s.publisher.store_snapshot = held
    await r.lead()
    assert "writing 12 charts' rounds 2 at a time" in caplog.text

    def written() -> int:
        return sum(row.round is not None for row in r.store.rows.values())

    await r.tick()  # dispatches chart 1 (its round written with it); the first pass starts
    assert r.s.etas.first_pass_running and len(passes) == 1
    at_first = written()
    for _ in range(4):
        await r.tick()
        await settle()
    assert written() == at_first and r.s.rounds.backfilling  # no chunk while the first pass runs
    recording, recorded = asyncio.Event(), asyncio.Event()
    record = r.store.record_first_etas

    async def held_record(etas):
        recording.set()
        await recorded.wait()
        return await record(etas)

    r.store.record_first_etas = held_record
    release.set()
    await asyncio.wait_for(recording.wait(), 10)  # published; its first ETAs still to write
    assert "the first ETAs of the loaded backlog are published" in caplog.text
    assert not r.s.etas.first_pass_running and r.s.etas.pass_in_flight is not None
    for _ in range(3):
        await r.tick()
        await settle()
    assert written() > at_first  # the backfill goes on while they are written
    recorded.set()
    await pass_ends(r.s)
    r.clock.advance(60.0)  # the next pass is due: the backfill goes on beside it
    assert await tick_until_written(r, caplog) <= 8
    assert len(passes) >= 2
    assert all(row.round is not None for row in r.store.rows.values() if row.state == "queued")
