"""The ETA passes alone (:mod:`fairsched.engine.eta_passes`): when a pass runs, what it
publishes and keeps, the first ETAs, the confirmation, the live updates."""
from __future__ import annotations

import asyncio

import pytest

from fairsched.engine import forked
from fairsched.engine.eta_passes import EtaColumns, EtaPasses
from fairsched.engine.forked import EtaPassIn
from fairsched.engine.live_types import Effects
from scheduling import Eta
from tests.engine.fakes import FakeHost


@pytest.fixture
async def etas():
    host = FakeHost(budget=1, charts=3)
    await host.load()
    yield EtaPasses(host)
    for task in host.loop.tasks:
        task.cancel()


async def run_pass(etas: EtaPasses) -> None:
    task = etas.pass_in_flight
    assert task is not None
    await task


async def test_a_pass_runs_at_once_at_the_start_publishes_and_keeps_the_head(etas):
    host = etas.host
    etas.schedule_eta(Effects(), host.clock.monotonic())
    assert etas.pass_in_flight is not None and etas.pass_in_flight in host.loop.tasks
    await run_pass(etas)
    assert host.publisher.snapshots == 1 and etas.published_seq == 1
    assert etas.pass_in_flight is None and host.loop.tasks == [] and host.loop.wake.is_set()
    assert set(etas.head_etas) == {"1", "2", "3"}
    assert host.guarded_steps == ["eta"]
    assert host.state.unpromised == set()  # the first ETAs were recorded


def _in_a_child_whose_time_is_up(host) -> list[float]:
    """Passes in a forked child, their wait's time up at once (the Clock port); the list of
    the timeouts asked for."""
    host.eta_pass_in = EtaPassIn.PROCESS
    asked: list[float] = []

    async def expiring(awaitable, timeout_s):
        asked.append(timeout_s)
        return await asyncio.wait_for(awaitable, 0)
    host.clock.wait_for = expiring
    return asked


@pytest.mark.skipif(not forked.available(), reason="no fork here")
async def test_a_pass_in_a_forked_child_is_timed_out_by_the_clock(etas):
    """The child's timeout goes through the Clock port, as every wait of the scheduler: here
    its time is up at once, so the pass fails (its child killed) though 10 s are far off."""
    host = etas.host
    asked = _in_a_child_whose_time_is_up(host)
    etas.schedule_eta(Effects(), host.clock.monotonic())
    with pytest.raises(forked.ChildFailed, match="ETA pass took more than 10 s: killed"):
        await run_pass(etas)  # the fake host's guard lets it through (the scheduler's logs it)
    assert asked == [host.ETA_PASS_TIMEOUT_MIN_S]
    assert etas.published_seq is None and host.publisher.snapshots == 0


@pytest.mark.skipif(not forked.available(), reason="no fork here")
async def test_a_pass_in_a_child_is_given_the_longest_of_its_bounds(etas):
    """10 s at least; 10x the last pass's cost; 0.6 ms a chart queued or running (a million:
    600 s), the bound of a first pass over a large backlog."""
    host = etas.host
    asked = _in_a_child_whose_time_is_up(host)
    expiring = host.clock.wait_for
    charts = len(host.state.queue) + len(host.state.running)
    # each pass: what it costs (the clock's seconds), the per-chart bound, the timeout it is given
    for cost, per_chart, expected in ((7.0, 0.0006, 10.0), (0.0, 0.0006, 70.0), (0.0, 100.0, 100.0 * charts)):
        async def costing(awaitable, timeout_s, cost=cost):
            host.clock.advance(cost)
            return await expiring(awaitable, timeout_s)
        host.clock.wait_for, host.ETA_PASS_TIMEOUT_PER_CHART_S = costing, per_chart
        etas.schedule_eta(Effects(), host.clock.monotonic())
        with pytest.raises(forked.ChildFailed):
            await run_pass(etas)
        etas.request_pass()
        assert asked[-1] == pytest.approx(expected)  # 70: ten times the last pass's 7 s


async def test_with_nothing_changing_the_next_pass_waits_the_interval(etas):
    host = etas.host
    etas.schedule_eta(Effects(), host.clock.monotonic())
    await run_pass(etas)
    etas.schedule_eta(Effects(), host.clock.monotonic())
    assert etas.pass_in_flight is None  # not due
    host.clock.advance(host.state.config.eta_interval_s)
    etas.schedule_eta(Effects(), host.clock.monotonic())
    assert etas.pass_in_flight is not None


async def test_a_change_brings_the_next_pass_forward(etas):
    host = etas.host
    etas.schedule_eta(Effects(), host.clock.monotonic())
    await run_pass(etas)
    host.clock.advance(host.ETA_SOON_MIN_GAP_S)
    etas.schedule_eta(Effects(events=[{"kind": "queued", "chart": 1}]), host.clock.monotonic())
    assert etas.pass_in_flight is not None


async def test_the_snapshot_is_confirmed_about_once_a_second_while_leading(etas):
    host = etas.host
    confirmed = []

    async def confirm(seq, at):
        confirmed.append(seq)
    host.publisher.confirm_snapshot = confirm
    await etas.confirm_snapshot()
    assert confirmed == []  # nothing published yet
    etas.schedule_eta(Effects(), host.clock.monotonic())
    await run_pass(etas)
    assert etas.published_seq == host.publisher.snapshots == 1
    await etas.confirm_snapshot()
    await etas.confirm_snapshot()
    assert confirmed == [1]
    host.clock.advance(1.0)
    host.leading = False
    await etas.confirm_snapshot()
    assert confirmed == [1]


async def test_the_eta_in_force_is_the_last_passs_else_the_mean_from_now(etas):
    host = etas.host
    r = type("R", (), {"id": 1, "org": 1, "workflow": "code"})()
    finish, _ = etas.eta_in_force(r, 100.0)
    assert finish == 100.0 + host.state.forecast.mean("1", "code")
    etas.schedule_eta(Effects(), host.clock.monotonic())
    await run_pass(etas)
    then = host.clock.time()  # the pass's now (the fake clock stands still)
    assert etas.eta_in_force(r, 100.0)[0] == etas.eta_in_force(r, 200.0)[0] == then + etas.head_etas["1"].finish_s


async def test_first_etas_are_recorded_only_for_charts_not_promised_meanwhile(etas):
    host = etas.host
    recorded = []

    async def record(rows):
        recorded.append(set(rows))
        return len(rows)
    host.store.record_first_etas = record
    host.state.unpromised.discard("2")  # promised at its dispatch since the pass began
    await etas.record_first_etas(EtaColumns.of({c: Eta(1.0, 2.0) for c in "123"}, "123"), 0.0)
    assert recorded == [{1, 3}] and host.state.unpromised == set()


async def test_the_first_etas_writes_are_paced_to_their_share_of_the_time(etas):
    """Each write but the last is followed by a rest in proportion to how long it took (a
    first start at 1M writes 500 beside the backfill's rounds): at a share of 0.5 as long
    as the write, at 0.25 three times as long; at 1 no rest."""
    host = etas.host
    host.FIRST_ETAS_PER_WRITE = 2

    async def record(rows):  # each write takes 2 s of the clock
        host.clock.advance(2.0)
        return len(rows)
    host.store.record_first_etas = record
    for share, rests in ((0.5, [2.0, 2.0]), (0.25, [6.0, 6.0]), (1.0, [])):
        host.FIRST_ETAS_WRITE_SHARE, host.slept = share, []
        host.state.unpromised.update("12345")
        await etas.record_first_etas(EtaColumns.of({c: Eta(1.0, 2.0) for c in "12345"}, "12345"), 0.0)
        assert host.slept == pytest.approx(rests) and host.state.unpromised == set()


async def test_a_backfill_carries_the_first_etas_of_the_charts_it_has_still_to_write():
    """A first start: the pass's writer records the first ETAs of the charts whose round is
    written; the backfill's chunks carry the rest with their rounds, one row version a
    chart, until the backfill is over."""
    host = FakeHost(budget=1, charts=6)
    await host.load()
    etas, queue, rounds = EtaPasses(host), host.state.queue, host.rounds
    try:
        assert rounds.start_backfill(queue, set, 1) == 6
        rounds.chunk(2)
        head = rounds.next(queue)
        rounds.written(head)  # the head's rounds are written
        recorded = []

        async def record(rows):
            recorded.append(set(rows))
            return len(rows)
        host.store.record_first_etas = record
        ids = [str(c) for c in range(6, 0, -1)]
        first = EtaColumns.of({c: Eta(1.0, float(c)) for c in ids}, set(ids)).by_id()
        await etas.record_first_etas(first, 100.0)
        assert recorded == [{int(c) for c in head[1]}] and len(head[1]) == 2

        rounds.chunk(10)
        chunk = rounds.next(queue)
        firsts = etas.carried_firsts(chunk[1])
        assert set(firsts) == {int(c) for c in chunk[1]} == {int(c) for c in ids} - recorded[0]
        assert all(at == 100.0 + pk for pk, (at, _) in firsts.items())  # the pass's ETAs, at its now
        rounds.written(chunk)
        etas.firsts_written(firsts)
        assert host.state.unpromised == set() and not rounds.backfilling
        etas.schedule_eta(Effects(), host.clock.monotonic())
        assert not etas.carrying_firsts  # the backfill is over: the columns are let go
    finally:
        for task in host.loop.tasks:
            task.cancel()


async def test_a_pass_that_starts_ends_the_backfills_carrying_of_first_etas():
    """The chunks carry first ETAs only between passes: while a pass's child lives the
    parent changes no set and no promise it shares with the child. The charts they then
    write without their first ETA get it from the next pass's writer."""
    host = FakeHost(budget=1, charts=6)
    await host.load()
    etas, queue, rounds = EtaPasses(host), host.state.queue, host.rounds
    try:
        rounds.start_backfill(queue, set, 1)
        ids = [str(c) for c in range(1, 7)]
        await etas.record_first_etas(EtaColumns.of({c: Eta(1.0, 2.0) for c in ids}, set(ids)).by_id(), 0.0)
        rounds.chunk(2)
        assert len(etas.carried_firsts(rounds.next(queue)[1])) == 2
        etas.schedule_eta(Effects(eta_now=True), host.clock.monotonic())
        assert etas.pass_in_flight is not None and not etas.carrying_firsts
        assert etas.carried_firsts(rounds.next(queue)[1]) == {}
        assert len(host.state.unpromised) == 6  # all still to record (nothing was committed)
    finally:
        for task in host.loop.tasks:
            task.cancel()


async def test_many_events_go_out_as_one_batch(etas):
    host = etas.host
    await etas.broadcast([{"kind": "queued", "chart": i} for i in range(host.MAX_EVENTS_PER_TICK + 1)])
    assert [e["kind"] for e in host.publisher.events] == ["batch"]
