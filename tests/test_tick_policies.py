"""The policies (issue 23) in the live scheduler, ``tick()`` driven with the fakes of
tests/test_tick.py: switching ``share`` and ``dispatch`` live, and a restart under ``work``
keeping the order (each chart's estimate at arrival and share are persisted)."""
from __future__ import annotations

import dataclasses

from common.notify import OrgNote, SettingsNote
from scheduling.queue import FairQueue
from fairsched.engine.scheduler import Scheduler
from tests.test_tick import pass_ends, rig, settle  # noqa: F401 - the fixture

ORDER_WORK = ["1", "2", "4", "6", "3", "8", "5", "7"]
"""Two orgs of weight 1, org 1's charts (odd) of 1200 s, org 2's (even) of 600 s, under the
share work (docs/scheduling.md, "Share by work": virtual times in budget-seconds per unit of
weight): each org's first chart starts afresh at the head, round 0 (1, 2, by age); then each
chart's round is the midpoint of its virtual start and finish: org 2's 900, 1500, 2100,
org 1's 1800, 3000, 4200."""


def long_and_short(r) -> None:
    r.store.averages = {("1", "code"): 1200.0, ("2", "code"): 600.0}


def switch(r, **policies) -> None:
    """What the admin or the dashboard does: the settings row changes, the scheduler is told."""
    r.store.config = dataclasses.replace(r.store.config, **policies)
    r.s.loop.notes.append(SettingsNote())


async def test_share_work_switched_on_live_reranks_and_dispatch_follows_the_work_order(rig):
    r = rig(budget=1, charts=8, weights=(1, 1))
    long_and_short(r)
    await r.lead()
    assert r.s.state.queue.order() == ["1", "2", "3", "4", "5", "6", "7", "8"]  # charts: alternating
    switch(r, share="work", quantum_s=600.0)
    await r.tick()
    assert r.s.state.queue.share == "work"
    assert r.temporal.start_calls == [1]  # the work order's head
    assert r.s.state.queue.order() == ORDER_WORK[1:]
    for expected in ORDER_WORK[1:4]:
        r.temporal.close(int(r.temporal.start_calls[-1]))
        await settle()
        await r.tick()
        assert r.temporal.start_calls[-1] == int(expected)
        assert r.s.state.used <= 1
    # estimates at arrival and shares are persisted beside the rounds
    queued = [row for row in r.store.rows.values() if row.state == "queued"]
    assert queued and all(row.est_s in (600.0, 1200.0) and row.share is not None for row in queued)
    assert r.store.saved.share == ("work", 600.0)


async def test_share_switched_back_to_charts_live_gives_the_charts_order_again(rig):
    r = rig(budget=1, charts=8, weights=(1, 1))
    long_and_short(r)
    r.store.config = dataclasses.replace(r.store.config, share="work")
    await r.lead()
    assert r.s.state.queue.order() == ORDER_WORK
    switch(r, share="charts")
    await r.tick()
    assert r.temporal.start_calls == [1]
    assert r.s.state.queue.order() == ["2", "3", "4", "5", "6", "7", "8"]
    assert r.store.saved.share == ("charts", None)


async def test_quantum_s_alone_switched_live_under_work_reranks(rig):
    """Under work, a switch of quantum_s alone re-ranks every org, as a change of the share
    key does, and is saved; the work order does not depend on it (its rounds are virtual
    times in budget-seconds, docs/scheduling.md, "Share by work"): dispatch goes on in the
    same order."""
    r = rig(budget=1, charts=8, weights=(1, 1))
    long_and_short(r)
    r.store.config = dataclasses.replace(r.store.config, share="work", quantum_s=600.0)
    await r.lead()
    assert r.s.state.queue.order() == ORDER_WORK
    switch(r, quantum_s=1200.0)
    await r.tick()
    assert (r.s.state.queue.share, r.s.state.queue.quantum_s) == ("work", 1200.0)
    assert r.temporal.start_calls == [1]
    assert r.s.state.queue.order() == ORDER_WORK[1:]
    await r.tick()
    assert r.store.saved.share == ("work", 1200.0)


def wide_head(rig, small_s: float):
    """Budget 3, org 1 (weight 2): chart 1 costs 2 and chart 2 costs 3, 100 s each; org 2's
    chart 3 costs 1 and takes ``small_s``."""
    r = rig(budget=3, charts=0, weights=(2, 1), costs={("1", "mid"): 2, ("1", "big"): 3, ("2", "small"): 1})
    for pk, org, wf in ((1, 1, "mid"), (2, 1, "big"), (3, 2, "small")):
        r.store.add(pk, org, wf)
    r.store.averages = {("1", "mid"): 100.0, ("1", "big"): 100.0, ("2", "small"): small_s}
    return r


async def test_dispatch_backfill_switched_on_live_starts_a_short_chart_past_a_blocked_head(rig):
    """Budget 3, org 1 (weight 2): chart 1 costs 2 and chart 2 costs 3, 100 s each; org 2's
    chart 3 costs 1 and takes 50 s. Strict: 1 starts, 2 waits for 3 units, 3 waits behind it.
    Backfill: 3 ends (even at its 90% bound, 75 s) before 2's reservation at 100 s: it starts."""
    r = wide_head(rig, small_s=50.0)
    await r.lead()
    await r.tick()
    assert r.temporal.start_calls == [1]  # strict: head-of-line
    await r.tick()
    assert r.temporal.start_calls == [1]
    switch(r, dispatch="backfill")
    await r.tick()
    assert r.s.state.queue.dispatch_policy == "backfill"
    assert r.temporal.start_calls == [1, 3]
    assert r.s.state.used == 3 and r.s.state.queue.order() == ["2"]
    r.temporal.close(3)
    await settle()
    await r.tick()
    assert r.temporal.start_calls == [1, 3]  # 2 needs 3 units: only after chart 1 ends
    r.temporal.close(1)
    await settle()
    await r.tick()
    assert r.temporal.start_calls == [1, 3, 2] and r.s.state.used == 3


async def test_a_chart_backfilled_under_its_guard_holds_its_window_and_wakes_the_loop_at_its_end(rig):
    """As above: chart 3 starts ahead of chart 2's reservation, guarded by its 90% bound
    (75 s). Its window stays held until 75 s after its start, closed or not (docs/
    scheduling.md, "Backfill"), and the loop wakes then to dispatch, though nothing may
    finish at that moment."""
    r = wide_head(rig, small_s=50.0)
    # every other timed step far off (reconcile, resyncs, ETA passes): the window's end is the next wake-up
    r.store.config = dataclasses.replace(r.store.config, dispatch="backfill", reconcile_interval_s=1e6,
                                         eta_interval_s=1e6)
    r.s.MAX_SLEEP_S = r.s.RESYNC_INTERVAL_S = 1e6
    await r.lead()
    await r.tick()
    started = r.clock.time()
    assert r.temporal.start_calls == [1, 3]
    q = r.s.state.queue
    assert q.next_release(started) == started + 75.0
    await pass_ends(r.s)
    assert r.s.idle_for() == 75.0
    r.temporal.close(3)
    await settle()
    await r.tick()
    assert q.next_release(r.clock.time()) == started + 75.0  # chart 3 is done: its window is still held
    r.clock.advance(80.0)
    assert q.next_release(r.clock.time()) is None


async def test_backfill_never_starts_a_chart_whose_bound_would_delay_the_reservation(rig):
    """As above, but chart 3 takes 80 s: its 90% bound (120 s) ends after chart 2's
    reservation (100 s), so backfill leaves it behind chart 2, as strict does."""
    r = wide_head(rig, small_s=80.0)
    r.store.config = dataclasses.replace(r.store.config, dispatch="backfill")
    await r.lead()
    await r.tick()
    assert r.temporal.start_calls == [1]


async def test_a_restart_under_work_keeps_the_order_and_each_charts_work_at_arrival(rig):
    """Under work, a scheduler restarts after the estimates moved: the charts keep their
    rounds, and a re-rank after the restart (a weight change) counts each chart's work by its
    estimate at arrival (persisted), exactly as the scheduler that never stopped does."""
    r = rig(budget=1, charts=8, weights=(1, 1))
    long_and_short(r)
    r.store.config = dataclasses.replace(r.store.config, share="work")
    await r.lead()
    assert not r.s.state.partial  # a first start under work ranks the whole backlog
    await r.tick()
    assert r.temporal.start_calls == [int(ORDER_WORK[0])]
    await r.tick()  # the rounds are saved
    before: FairQueue = r.s.state.queue
    order, rounds = before.order(), before.export_rounds()
    await r.s.step_down()

    r.store.averages = {("1", "code"): 60.0, ("2", "code"): 6000.0}  # the estimates moved meanwhile
    s2 = Scheduler(temporal_address="unused:1", namespace="default", task_queue="q", redis_url="redis://unused",
                   clock=r.clock, store=r.store, publisher=r.publisher, temporal=r.temporal)
    r.s = s2
    await r.lead()
    for _ in range(50):
        await settle()
        if not s2.state.partial:
            break
    assert s2.state.queue.order() == order
    assert s2.state.queue.export_rounds() == rounds
    # a weight change re-ranks org 2 by the work its charts had at arrival
    before.set_weight("2", 2)
    r.store.orgs[2] = dataclasses.replace(r.store.orgs[2], weight=2)
    s2.loop.notes.append(OrgNote(id=2))
    await r.tick()
    assert r.temporal.start_calls == [int(ORDER_WORK[0])]  # the first still runs: nothing more fits
    assert s2.state.queue.order() == before.order()
    assert {c: s2.state.queue.round_of(c) for c in before.order()} == {c: before.round_of(c) for c in before.order()}
    assert s2.state.queue.export_rounds() == before.export_rounds()


async def test_the_eta_pass_under_backfill_gives_the_reservations_dispatch_makes(rig):
    """As the backfill test above: after the switch, the ETA pass says chart 3 starts now and
    chart 2 when chart 1 ends (100 s), exactly what dispatch starts; under strict it said
    chart 3 starts after chart 2. The snapshot names the policy in force."""
    r = wide_head(rig, small_s=50.0)
    await r.lead()
    await r.tick()
    now = r.clock.time()
    strict = r.s.state.capture().eta_report(now).etas
    assert strict["3"].start_s >= strict["2"].start_s >= 100.0 - 1e-6
    r.store.config = dataclasses.replace(r.store.config, dispatch="backfill")
    r.s.state.apply_config(r.store.config)  # what the settings note makes the sync do
    backfill = r.s.state.capture().eta_report(now).etas
    assert backfill["3"].start_s == 0.0 and abs(backfill["2"].start_s - 100.0) < 1e-6
    assert r.s.state.to_start(now) == ["3"]
    from fairsched.engine.publish import _snapshot
    cap = r.s.state.capture()
    snap = _snapshot(cap, cap.eta_report(now), now, r.s.state.used, [], [])
    assert snap["policies"] == {"share": "charts", "quantum_s": 600.0, "dispatch": "backfill"}


async def test_a_restart_under_charts_after_a_work_period_counts_each_chart_as_one(rig):
    """Shares written under work stay in the rows after a switch back to charts; a restart
    under charts must count every chart as 1 (a cancelled chart gives back 1, not its old
    budget-seconds), as the scheduler that never stopped does."""
    r = rig(budget=1, charts=8, weights=(1, 1))
    long_and_short(r)
    r.store.config = dataclasses.replace(r.store.config, share="work")
    await r.lead()
    await r.tick()
    await r.tick()
    assert any(row.share not in (None, 1) for row in r.store.rows.values() if row.state == "queued")
    switch(r, share="charts")
    await r.tick()
    await r.tick()
    before: FairQueue = r.s.state.queue
    await r.s.step_down()
    s2 = Scheduler(temporal_address="unused:1", namespace="default", task_queue="q", redis_url="redis://unused",
                   clock=r.clock, store=r.store, publisher=r.publisher, temporal=r.temporal)
    r.s = s2
    await r.lead()
    for _ in range(50):
        await settle()
        if not s2.state.partial:
            break
    assert s2.state.queue.order() == before.order()
    last = before.order()[-1]  # it holds its org's last round
    for q in (before, s2.state.queue):
        q.remove(last)
    assert s2.state.queue.export_rounds() == before.export_rounds()
