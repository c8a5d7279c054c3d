"""Start-up alone (:mod:`fairsched.engine.startup`): a plain load, the head of the order
first, and the whole backlog's take-over, with the fake store of ``tests/test_tick.py``."""
from __future__ import annotations

import asyncio

from scheduling import RoundSaver
from fairsched.engine.eta_passes import EtaPasses
from fairsched.engine.startup import Startup
from fairsched.engine.sync import Sync
from tests.engine.fakes import FakeHost, settle


def startup(host: FakeHost) -> Startup:
    return Startup(host, Sync(host), EtaPasses(host))


async def until_whole_ready(s: Startup) -> None:
    for _ in range(100):
        await settle()
        if s.whole_ready:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the whole backlog was never built")


async def test_a_first_start_dispatches_from_the_head_and_the_whole_takes_over():
    host = FakeHost(budget=1, charts=6, weights=(1, 1))
    host.HEAD_PER_ORG = 1
    s = startup(host)
    await s.load()
    assert host.state is not None and host.state.partial  # installed by the host
    assert sorted(host.state.queue.order(), key=int) == ["1", "2"]
    assert not s.whole_ready and [t.get_name() for t in host.loop.tasks] == ["load-whole"]
    host.store.whole_gate.set()
    await until_whole_ready(s)
    head = host.state
    await s.take_over_whole()
    assert host.state is not head and not host.state.partial and len(host.state.queue) == 6
    assert host.loop.resync_requested and s.etas.pass_requested and s.sync.watermark is None


async def test_a_restart_with_a_saved_order_loads_its_head_first():
    host = FakeHost(budget=1, charts=4)
    world = await host.store.read_world()
    from fairsched.engine.state import LiveState
    host.store.saved = LiveState(world).queue.export_rounds()
    for pk in range(1, 5):
        host.store.set(pk, round=host.store.saved.head + (pk - 1))
    host.HEAD_PER_ORG = 2
    s = startup(host)
    await s.load()
    assert host.state.partial and host.state.queue.order() == ["1", "2"]
    host.store.whole_gate.set()
    await until_whole_ready(s)
    await s.take_over_whole()
    assert host.state.queue.order() == ["1", "2", "3", "4"]


async def test_a_head_that_is_the_whole_backlog_loads_it_at_once():
    host = FakeHost(budget=1, charts=2)
    s = startup(host)
    await s.load()
    assert not host.state.partial and len(host.state.queue) == 2 and host.loop.tasks == []
    assert isinstance(host.rounds, RoundSaver)


async def test_a_database_down_at_the_load_is_retried_through_the_clock():
    host = FakeHost(budget=1, charts=2)
    calls = []
    real = host.store.read_streamed

    async def flaky(*args):
        calls.append(1)
        if len(calls) == 1:
            raise OSError("database down")
        return await real(*args)
    host.store.read_streamed = flaky
    s = startup(host)
    await s.load()
    assert host.slept == [host.BACKOFF_MIN_S] and host.state is not None
