"""The dispatcher alone (:mod:`fairsched.engine.dispatcher`): plan, start, commit, with
the fakes of ``tests/test_tick.py`` behind a fake host."""
from __future__ import annotations

import pytest
from temporalio.service import RPCStatusCode

from fairsched.engine.dispatcher import Dispatcher
from fairsched.engine.eta_passes import EtaPasses
from fairsched.engine.ports.temporal import UNKNOWN, StartFailed
from fairsched.engine.sync import Sync
from tests.engine.fakes import FakeHost
from tests.test_tick import rpc


@pytest.fixture
async def dispatcher():
    host = FakeHost(budget=2, charts=3)
    await host.load()
    sync = Sync(host)
    d = Dispatcher(host, sync, EtaPasses(host))
    yield d
    sync.stop_watching()


async def test_the_head_of_the_order_that_fits_starts_and_is_committed(dispatcher):
    host = dispatcher.host
    fx = await dispatcher.dispatch()
    assert host.temporal.start_calls == [1, 2] and dispatcher.starts == 2
    assert host.store.state(1) == host.store.state(2) == "running" and set(host.state.running) == {1, 2}
    assert [e["kind"] for e in fx.events] == ["dispatch", "dispatch"]
    assert set(dispatcher.sync.watching) == {1, 2}
    assert not (await dispatcher.dispatch()).events  # the budget is full
    assert host.temporal.start_calls == [1, 2]


async def test_a_row_that_moved_is_applied_and_the_plan_made_again(dispatcher):
    host = dispatcher.host
    host.store.set(1, paused=True)  # paused in the database, not yet in memory
    await dispatcher.dispatch()
    assert host.temporal.start_calls == [2, 3] and host.state.queue.get("1").paused


async def test_a_start_refused_for_good_fails_the_chart(dispatcher):
    host = dispatcher.host
    host.temporal.refuse[1] = rpc(RPCStatusCode.INVALID_ARGUMENT, "Blob data size exceeds limit.")
    await dispatcher.dispatch()
    assert host.store.state(1) == "failed" and host.store.errors[1].startswith("cannot start: Temporal refused")
    assert host.store.state(2) == "running" and host.loop.backoff["dispatch"].ready(host.clock.monotonic())


async def test_temporal_unavailable_keeps_the_chart_in_place_and_backs_dispatch_off(dispatcher):
    host = dispatcher.host
    host.temporal.unavailable = True
    await dispatcher.dispatch()
    assert host.store.state(1) == "queued" and "1" in host.state.queue
    assert not host.loop.backoff["dispatch"].ready(host.clock.monotonic())


async def test_a_workflow_that_already_closed_is_recorded_not_started_again(dispatcher):
    host = dispatcher.host
    host.temporal.runs[1] = "run-1"
    host.temporal.close(1, "failed", "boom")
    await dispatcher.dispatch()
    assert host.store.state(1) == "failed" and host.store.errors[1] == "boom"
    assert 1 not in host.state.running and dispatcher.starts == 1  # only chart 2 started


async def test_an_unknown_start_error_fails_the_chart_only_after_the_bound_unless_temporal_knows_it():
    """A start that failed for a reason nobody knows is tried again, up to the bound; at the
    bound the chart is failed, unless Temporal knows its workflow (it started after all)."""
    for started_after_all in (False, True):
        host = FakeHost(budget=1, charts=1)
        await host.load()
        sync = Sync(host)
        dispatcher = Dispatcher(host, sync, EtaPasses(host))
        host.temporal.refuse[1] = StartFailed(UNKNOWN, "RuntimeError: odd", "odd")
        bound = dispatcher.start_failures.max_unknown
        for _ in range(bound - 1):
            await dispatcher.dispatch()
        assert host.store.state(1) == "queued" and dispatcher.start_failures.attempts
        if started_after_all:
            host.temporal.runs[1] = "run-1"
        await dispatcher.dispatch()
        assert host.temporal.start_calls == [1] * bound
        if started_after_all:  # the next attempt (or the reconcile) finds that run
            assert host.store.state(1) == "queued" and not dispatcher.start_failures.attempts
        else:
            assert host.store.state(1) == "failed" and "odd" in host.store.errors[1]
        sync.stop_watching()


async def test_a_payload_that_is_not_an_object_is_refused_without_a_start(dispatcher):
    host = dispatcher.host
    host.store.payloads[1] = [1, 2]
    await dispatcher.dispatch()
    assert host.store.state(1) == "failed" and "must be a JSON object" in host.store.errors[1]
    assert 1 not in host.temporal.start_calls


async def test_a_row_that_moved_between_start_and_commit_is_followed(dispatcher):
    host = dispatcher.host
    real = host.store.mark_running

    async def cancelled_meanwhile(items, rounds=None, pools=None):
        host.store.set(1, state="cancelled")
        return await real(items, rounds, pools)
    host.store.mark_running = cancelled_meanwhile
    await dispatcher.dispatch()
    assert host.temporal.cancels == [1] and 2 in host.state.running  # 1 holds its cost until its workflow closes
    assert 1 in dispatcher.sync.cancels_sent


async def test_each_dispatch_line_says_where_its_time_went(dispatcher, caplog):
    """The INFO line of each started chart names the tick's steps before the dispatch, its
    plan and read, and its start on Temporal (what ``bench/scale.py`` reads per probe)."""
    host = dispatcher.host
    start = host.temporal.start

    async def slow_start(**kw):
        host.clock.advance(0.040)
        return await start(**kw)

    host.temporal.start = slow_start
    host.loop.tick_at = host.clock.monotonic() - 0.250  # the tick began 250 ms before the dispatch
    with caplog.at_level("INFO", logger="fairsched.engine"):
        await dispatcher.dispatch()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("dispatch chart #")]
    assert len(lines) == 2
    # two starts of 40 ms each, both inside the one dispatch's start phase
    assert all(line.endswith("(the tick before it 250 ms, plan and read 0 ms, start on Temporal 80 ms)")
               for line in lines), lines
