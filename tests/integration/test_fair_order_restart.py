"""The fair order survives a kill -9 of the scheduler and a standby takeover (issue 10).

Org A weight 2, org B weight 1, budget 2, charts that run for minutes: A's first two
charts start, so B's first chart is next. ``plan --live`` and the order the scheduler
publishes are the same after a new scheduler took over as before: the round state is
in the database (written with each dispatch), not rebuilt from ``head = 0``.
"""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from charts.models import Chart, ChartState
from common import snapshot
from tests.cli import manage
from tests.factories import make_chart, make_org, make_workflow
from tests.integration.conftest import wait_until
from tests.integration.test_scheduler_live import configure

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

# The schedulers a test SIGKILLs and starts again hold the lease this long (``--lease-ttl``;
# 5 s by default): the new one waits that long at most for the dead one's lease to expire.
SHORT_LEASE = ("--lease-ttl", "2")

EXPECTED = ["b0", "a2", "a3", "b1", "a4", "a5", "b2"]  # the order before: B's first chart is next


def backlog() -> dict[str, str]:
    """a0..a5 (A, weight 2) then b0..b2 (B, weight 1), a minute apart; chart id -> name."""
    configure(budget=2)
    a, b = make_org("A", weight=2), make_org("B", weight=1)
    wf = make_workflow("code", temporal_type="DemoChart")
    t0 = timezone.now() - timedelta(hours=1)
    names = {}
    for i in range(6):
        names[str(make_chart(a, wf, created_at=t0 + timedelta(minutes=i), payload={"seconds": 900}).pk)] = f"a{i}"
    for i in range(3):
        names[str(make_chart(b, wf, created_at=t0 + timedelta(minutes=10 + i), payload={"seconds": 900}).pk)] = f"b{i}"
    return names


def plan_live(live, names: dict[str, str]) -> list[str]:
    """``manage.py plan --live`` of the database the schedulers use (in this process: the same
    database and Redis, tests/cli.py)."""
    from django.conf import settings

    assert settings.REDIS_URL == live.env["REDIS_URL"]
    out = manage("plan", "--live")
    assert out.returncode == 0, out.stderr
    return [names[i] for i in json.loads(out.stdout)["order"]]


def published_after(t: float, names: dict[str, str], *, without: tuple[str, ...] = ()) -> list[str]:
    """The order a scheduler published in a snapshot made at or after ``t`` (its in-memory
    order), and without the charts ``without`` (dispatched ones) in it. ``t`` is the moment of
    the event the snapshot must follow, read from the scheduler's log (:meth:`Proc.logged_at`,
    to the millisecond): a dispatch or a take-over brings a pass at once, in the same tick,
    often within the event's millisecond; a snapshot of that millisecond with the event's
    effect in it is the one wanted. With nothing changing, passes come
    ``ETA_IDLE_COST_FACTOR`` (60) times their own cost apart (0.5 s and more on a busy
    machine: a test that missed the first pass after the event waited 15-90 s for the
    next). The wait is bounded at 90 s all the same."""
    def fresh():
        snap = snapshot.read_snapshot()
        if snap is None or snap["now"] < t:
            return None
        _, rows = snapshot.read_order(0, 1000)
        order = [names[str(r["id"])] for r in rows if r["state"] == "ordered"]
        return order if not set(without) & set(order) else None
    return wait_until(fresh, timeout=90, what="a snapshot from the new scheduler")


def dispatched_at(sched, names: dict[str, str], *charts: str) -> float:
    """When ``sched`` logged the dispatch of the last of ``charts`` (a pass after it sees them running)."""
    pk = {name: chart_id for chart_id, name in names.items()}
    return max(sched.logged_at(f"dispatch chart #{pk[name]} ") for name in charts)


def order_after(live, names: dict[str, str], what: str, since: float) -> list[str]:
    """The order a new scheduler published after ``since``, once it equals ``plan --live`` of the database."""
    published = published_after(since, names)
    after = plan_live(live, names)
    print(f"\n{what}: plan --live after: {' '.join(after)} (published: {' '.join(published)})")
    assert after == published
    return after


def first_two_started(names: dict[str, str]) -> None:
    running = lambda: sorted(names[str(pk)] for pk in  # noqa: E731
                             Chart.objects.filter(state=ChartState.RUNNING).values_list("pk", flat=True))
    wait_until(lambda: running() == ["a0", "a1"], timeout=60, what="a0 and a1 to start")


@pytest.mark.slow(12)
def test_order_before_a_kill_9_equals_the_order_after_the_restart(live):
    names = backlog()
    live.shared_worker()
    sched = live.scheduler(*SHORT_LEASE)
    first_two_started(names)
    before = plan_live(live, names)
    published = published_after(dispatched_at(sched, names, "a0", "a1"), names, without=("a0", "a1"))
    print(f"\nrestart: plan --live before kill -9: {' '.join(before)}")
    assert before == published == EXPECTED
    sched.kill()
    new = live.scheduler(*SHORT_LEASE)
    new.saw("loaded backlog", timeout=60)
    published = published_after(new.logged_at("scheduler starting"), names)  # any snapshot of the new one
    after = plan_live(live, names)
    print(f"restart: plan --live after the restart: {' '.join(after)} (published: {' '.join(published)})")
    assert after == published == before
    assert sorted(names[str(pk)] for pk in Chart.objects.filter(state=ChartState.RUNNING)
                  .values_list("pk", flat=True)) == ["a0", "a1"]


def test_a_restart_that_starts_from_the_head_of_the_order_keeps_the_order(live):
    """The same kill -9, but the new scheduler loads one chart per org first (a2 and b0):
    it dispatches from that head while the whole backlog loads, then the whole backlog
    takes over; the order after is the order before."""
    names = backlog()
    live.shared_worker()
    sched = live.scheduler(*SHORT_LEASE)
    first_two_started(names)
    before = plan_live(live, names)
    assert before == EXPECTED
    sched.kill()
    new = live.faulty_scheduler("--head-per-org", "1", *SHORT_LEASE)
    new.saw("loaded the head of the order: 2 queued", timeout=60)
    took_over = new.logged_at("the whole backlog takes over from the head", timeout=60)
    assert order_after(live, names, "head-first restart", since=took_over) == before


def test_a_kill_9_while_the_first_start_still_writes_its_rounds_keeps_the_order(live, tmp_path):
    """A first start whose rounds are written a chunk at a time (a backfill; at a million
    charts, one write of them all held the database for minutes). Here no chunk is written
    (a gate) but the dispatches write what they must: the database then holds no queued
    chart's round, only each org's cursor (A's after a0 and a1), yet ``plan --live`` and a
    restart after a kill -9 give the same order, and the new scheduler writes the rest. It
    starts from the head even so (one chart an org here: a2 and b0, both orgs cut short),
    not after reading the whole backlog."""
    names = backlog()
    gate = tmp_path / "no-chunks"
    gate.touch()
    live.shared_worker()
    sched = live.faulty_scheduler("--backfill-min", "1", "--backfill-gate", str(gate), *SHORT_LEASE)
    sched.saw("writing 9 charts' rounds", timeout=60)
    first_two_started(names)
    # no queued chart's round is written, only each org's cursor (A's after a0 and a1)
    assert not Chart.objects.filter(fair_round__isnull=False).exists()
    before = plan_live(live, names)
    assert before == published_after(dispatched_at(sched, names, "a0", "a1"), names, without=("a0", "a1")) == EXPECTED
    sched.kill()
    new = live.faulty_scheduler("--backfill-min", "1", "--head-per-org", "1", *SHORT_LEASE)
    new.saw("loaded the head of the order (2 orgs' rounds still to write): 2 queued", timeout=60)
    new.saw("the whole backlog takes over from the head", timeout=60)
    new.saw("every chart's round is written", timeout=60)
    # (the rounds it writes are those of its order in memory, which the snapshot publishes)
    assert order_after(live, names, "restart during the backfill", since=new.logged_at("scheduler starting")) == before
    assert not Chart.objects.filter(state=ChartState.QUEUED, fair_round__isnull=True).exists()


def test_a_kill_9_while_a_first_start_dispatches_from_the_head_of_the_backlog_keeps_the_order(live, tmp_path):
    """A first start reads two charts an org first (a0 a1, b0 b1) and dispatches from them
    (a0 and a1: every chart of round 0 is in that head) while the whole backlog waits (a
    gate). A kill -9 then: the database holds the head's rounds and cursors only, yet
    ``plan --live`` and a restart give the order a scheduler that never stopped holds,
    and the new scheduler writes the other rounds."""
    names = backlog()
    gate = tmp_path / "no-whole"
    gate.touch()
    live.shared_worker()
    sched = live.faulty_scheduler("--head-per-org", "2", "--whole-gate", str(gate), *SHORT_LEASE)
    sched.saw("loaded the head of the backlog (a first start): 4 queued", timeout=60)
    first_two_started(names)
    sched.saw("the rounds of the head of the backlog are written", timeout=30)
    assert "takes over" not in sched.log()
    written = {names[str(pk)] for pk in Chart.objects.filter(fair_round__isnull=False).values_list("pk", flat=True)}
    assert {"b0", "b1"} <= written <= {"a0", "a1", "b0", "b1"}  # the head's; a0 and a1 may be running already
    sched.kill()
    assert plan_live(live, names) == EXPECTED
    new = live.scheduler(*SHORT_LEASE)
    new.saw("loaded backlog: 7 queued", timeout=60)
    assert order_after(live, names, "restart while the first start dispatched from its head",
                       since=new.logged_at("scheduler starting")) == EXPECTED
    wait_until(lambda: not Chart.objects.filter(state=ChartState.QUEUED, fair_round__isnull=True).exists(),
               timeout=30, what="the other rounds written")


def test_order_before_a_standby_takeover_equals_the_order_after(live):
    names = backlog()
    live.shared_worker()
    one = live.scheduler("--lease-ttl", "2")
    two = live.scheduler("--lease-ttl", "2")
    first_two_started(names)
    # The lease line, not the dispatch line: the leader logs a dispatch just after its
    # commit, so the charts may be seen running a moment before (CI once took the leader
    # for the standby that way); the lease was logged before anything was loaded.
    leader, standby = (one, two) if "acquired: this scheduler is active" in one.log() else (two, one)
    standby.saw("standby: the lease is held by")
    before = plan_live(live, names)
    published = published_after(dispatched_at(leader, names, "a0", "a1"), names, without=("a0", "a1"))
    print(f"\ntakeover: plan --live before kill -9 of the leader: {' '.join(before)}")
    assert before == published == EXPECTED
    leader.kill()
    standby.saw("loaded backlog", timeout=60)
    published = published_after(standby.logged_at("acquired: this scheduler is active"), names)
    after = plan_live(live, names)
    print(f"takeover: plan --live after the standby took over: {' '.join(after)} "
          f"(published: {' '.join(published)})")
    assert after == published == before
