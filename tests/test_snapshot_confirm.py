"""The scheduler's confirmation of its last snapshot, as the pages see it: a real Redis,
the real publisher and the dashboard's own reads; the scheduler's other ports are the
fakes of ``tests/test_tick.py``, and the pages read the scheduler's clock (moved by hand)."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import redis.asyncio as aredis
from channels.db import database_sync_to_async

from charts import selectors as chart_selectors
from dashboard import selectors
from fairsched.engine import eta_passes as scheduler_module
from fairsched.engine.ports.real import LivePublisher
from tests.test_tick import pass_ends, rig, settle  # noqa: F401 - rig is a fixture

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_scheduler_whose_passes_fail_lets_its_snapshot_turn_stale_on_the_pages(rig, redis_url, settings,
                                                                                       monkeypatch):
    """Issue 21, item 4: every ETA pass failing, the pages said "live" for ever, because the
    scheduler confirmed its last snapshot every second. Now they say stale once it is
    older than the staleness bound (max(3 ETA intervals, 10 s)), and live again after
    the next pass that succeeds."""
    settings.FAIRSCHED_STALE_MIN_S, settings.FAIRSCHED_STALE_INTERVALS = 10, 3
    chart_selectors.forget_interval()
    r = rig(budget=1, charts=2)
    r.clock.wall = time.time()
    monkeypatch.setattr(chart_selectors, "time", SimpleNamespace(time=r.clock.time, monotonic=time.monotonic))
    s = r.s
    s.publisher = LivePublisher(redis_url)
    state = database_sync_to_async(selectors.dashboard_state)

    async def seconds(n: int) -> None:
        for _ in range(n):
            r.clock.advance(1.0)
            r.renew_lease()
            await r.tick()
            await pass_ends(s)

    try:
        await r.lead()
        await r.tick()
        await pass_ends(s)
        await seconds(2)
        seen = await state()
        assert seen["source"] == "scheduler" and seen["stale"] is False

        build = scheduler_module.build_snapshot

        def broken(*args, **kwargs):
            raise RuntimeError("the pass breaks on something")

        monkeypatch.setattr(scheduler_module, "build_snapshot", broken)
        r.temporal.close(1)  # a change: chart 2 starts, and the pass that should show it fails
        await settle()
        await seconds(55)
        assert r.store.state(2) == "running"
        seen = await state()
        assert seen["stale"] is True and seen["source"] == "db" and seen["age_s"] >= 40

        monkeypatch.setattr(scheduler_module, "build_snapshot", build)
        await seconds(11)  # the backoff (10 s at most) ends; the next pass succeeds
        seen = await state()
        assert seen["source"] == "scheduler" and seen["stale"] is False
        assert seen["running"][0]["id"] == 2
    finally:
        await s.step_down()
        await s.publisher.aclose()
