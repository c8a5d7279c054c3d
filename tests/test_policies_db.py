"""What the scheduler writes and reads of the policies (issue 23) in the database: the
settings it runs under, and under the share ``work`` what a restart needs (the round
state's share and quantum, budget-second ``used``, each chart's estimate at arrival and
share), on SQLite and PostgreSQL."""
from __future__ import annotations

import dataclasses

import pytest

from control.models import OrgRoundState, RoundState
from control.services import policies_set
from scheduling.reserve import window_end
from fairsched.engine.store import db
from fairsched.engine.state import LiveState
from tests.factories import make_chart, make_org, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_restart_under_work_reads_back_the_order_and_the_work_of_each_chart():
    policies_set(share="work", quantum_s=600)
    a, b = make_org("A"), make_org("B")
    wf = make_workflow("code")
    for _ in range(4):
        make_chart(a, wf)
        make_chart(b, wf)
    world = db.read_world()
    # the estimates when they arrived: A's charts 1200 s (two turns each), B's the default 600 s
    state = LiveState(dataclasses.replace(world, averages={(str(a.pk), "code"): 1200.0}))
    assert state.queue.share == "work" and state.queue.quantum_s == 600.0
    changes = state.queue.take_round_changes()
    work = state.work_of(changes)
    assert {est for est, _ in work.values()} == {600.0, 1200.0}
    db.save_rounds(state.queue.export_rounds(), changes, work)
    row = RoundState.objects.get()
    assert (row.share, row.quantum_s) == ("work", 600.0)
    assert any(o.used != int(o.used) or o.used > 1 for o in OrgRoundState.objects.all())  # budget-seconds

    again = LiveState(db.read_world())  # a restart: the default estimates again (600 s each)
    assert again.queue.order() == state.queue.order()
    assert again.queue.export_rounds() == state.queue.export_rounds()
    for cid in state.queue.order():
        assert again.queue.get(cid).est_s == state.queue.get(cid).est_s
        assert again.queue.share_of(cid) == state.queue.share_of(cid)
    # a re-rank after the restart counts each chart's work at arrival, not today's estimate
    for q in (state.queue, again.queue):
        q.set_weight(str(a.pk), 3)
    assert again.queue.order() == state.queue.order()


def test_a_first_start_under_work_reads_the_whole_backlog_before_it_dispatches():
    org = make_org("A")
    make_chart(org, make_workflow("code"))
    assert db.read_head(per_org=1) is not None  # charts: a first start's head
    policies_set(share="work")
    assert db.read_head(per_org=1) is None      # work: the whole backlog


def test_the_round_state_under_charts_reads_back_whole_numbers():
    org = make_org("A", weight=2)
    make_chart(org, make_workflow("code"))
    state = LiveState(db.read_world())
    db.save_rounds(state.queue.export_rounds(), state.queue.take_round_changes())
    saved = db.read_round_state()
    assert saved.share == ("charts", None)
    assert all(isinstance(o.used, int) and isinstance(o.in_head, int) for o in saved.orgs.values())
    assert saved == state.queue.export_rounds()


def test_a_restart_under_backfill_reads_back_the_round_an_org_dispatched_from_above_the_head():
    """Budget 4; B's R (cost 1, 700 s) runs. A (weight 2): a0 (300 s) and the wide a1
    (cost 3) hold round 0, the short a2 (100 s) round 1. Backfill starts a0 and a2; the head
    stays 0 while A has dispatched from round 1 (``OrgRoundState.in_round``). After a
    restart a re-rank of A counts from there, as in the scheduler that never stopped, and
    a2's guard window is held as before (``RoundState.guard_holds``)."""
    from django.utils import timezone

    from charts.models import Chart, ChartState
    from control.models import SchedulerSettings
    from tests.factories import make_cost

    policies_set(dispatch="backfill")
    s = SchedulerSettings.get()
    s.budget = 4
    s.save()
    a, b = make_org("A", weight=2), make_org("B")
    w, big, short = make_workflow("code"), make_workflow("audit"), make_workflow("lint")
    make_cost(a, big, 3)
    make_chart(b, big, state=ChartState.RUNNING, dispatched_cost=1, started_at=timezone.now())
    a0, a1, a2 = (make_chart(a, wf) for wf in (w, big, short))
    averages = {(None, "code"): 300.0, (None, "audit"): 700.0, (None, "lint"): 100.0}
    state = LiveState(dataclasses.replace(db.read_world(), averages=averages))
    q = state.queue
    assert q.dispatch_policy == "backfill" and [q.round_of(str(c.pk)) for c in (a0, a1, a2)] == [0, 0, 1]
    started = q.dispatch(3, state.running_charts(), timezone.now().timestamp(), state.durations)
    assert [c.id for c in started] == [str(a0.pk), str(a2.pk)] and q.head == 0
    db.save_rounds(q.export_rounds(), q.take_round_changes())
    assert OrgRoundState.objects.get(org=a).in_round == 1
    # a2 started ahead of a1's reservation, under its guard: its window is saved too, to its
    # bound's end (150 s) up to the grid (reserve.window_end)
    holds = RoundState.objects.get(pk=1).guard_holds
    assert [h[3] for h in holds] == [1] and holds[0][2] == window_end(holds[0][0] + 150.0)
    Chart.objects.filter(pk__in=[a0.pk, a2.pk]).update(state=ChartState.RUNNING, dispatched_cost=1,
                                                        started_at=timezone.now())

    again = LiveState(db.read_world())
    assert again.queue.export_rounds() == q.export_rounds()
    for queue in (q, again.queue):
        queue.set_weight(str(a.pk), 1)
    assert again.queue.round_of(str(a1.pk)) == q.round_of(str(a1.pk)) == 2
