"""The policies (issue 23) switched live: a real scheduler and worker on a Temporal dev
server and Redis. While a chart runs, the operator switches to ``share = work`` and
``dispatch = backfill``; the scheduler re-ranks, dispatch follows the new order, and the
running cost Temporal saw never exceeds the budget. At budget 3, backfill switched on
while a wide chart waits starts the short chart behind it, which strict held back."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from charts.models import Chart, ChartState, DurationStat
from control.models import AuditEntry
from control.services import policies_set
from fairsched.temporal.shared import workflow_id
from tests.factories import make_chart, make_org, make_workflow
from tests.integration.conftest import wait_until
from tests.integration.test_scheduler_live import (all_final, closed_in_temporal, configure, held, max_concurrent_cost,
                                                    states)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_switching_to_work_and_backfill_while_charts_run_reorders_dispatch_within_the_budget(live, temporal):
    configure(budget=1)
    a, b = make_org("Acme", weight=1), make_org("Beta", weight=1)
    slow = make_workflow("slow", temporal_type="DemoChart")
    quick = make_workflow("quick", temporal_type="DemoChart")
    # the estimates (the ETA model's means): Acme's charts 12 s, Beta's 3 s (they run shorter:
    # only the ratios and the quantum matter to the order)
    DurationStat.objects.create(org=a, workflow=slow, count=1000, total_s=12000.0, mean_s=12.0)
    DurationStat.objects.create(org=b, workflow=quick, count=1000, total_s=3000.0, mean_s=3.0)
    start = timezone.now() - timedelta(hours=1)
    a_charts = [make_chart(a, slow, created_at=start + timedelta(seconds=i), payload={"seconds": 4 if i == 0 else 0.3})
                for i in range(4)]
    b_charts = [make_chart(b, quick, created_at=start + timedelta(seconds=10 + i), payload={"seconds": 0.2})
                for i in range(6)]
    a1, a2, a3, a4 = (c.pk for c in a_charts)
    b1, b2, b3, b4, b5, b6 = (c.pk for c in b_charts)
    ids = [a1, a2, a3, a4, b1, b2, b3, b4, b5, b6]

    live.worker()
    sched = live.scheduler()
    # share charts: A1 B1 A2 B2 ...; A1 (4 s) starts first and holds the whole budget
    wait_until(lambda: Chart.objects.get(pk=a1).state == ChartState.RUNNING, timeout=30, what="A1 running")
    assert Chart.objects.filter(state=ChartState.RUNNING).count() == 1
    policies_set(share="work", quantum_s=3, dispatch="backfill")
    sched.saw("policies set to share work (quantum 3s), dispatch backfill")
    assert Chart.objects.get(pk=a1).state == ChartState.RUNNING, "the switch must land while A1 runs"
    assert AuditEntry.objects.filter(action="policies").count() == 1

    wait_until(lambda: all_final(ids), timeout=90, what="all charts final")
    assert set(states(ids).values()) == {"succeeded"}, sched.log()[-3000:]
    # work (docs/scheduling.md, "Share by work"): the switch starts each org afresh at the head
    # (round 0): A2 and B1 take round 0 (A2 is older); then each chart's round is the midpoint of
    # its virtual start and finish, in budget-seconds: Beta's (3 s) 4, 7, 10, 13, 16, Acme's
    # (12 s) 18, 30
    started = {c: d.start_time.timestamp() for c, d in closed_in_temporal(temporal, ids).items()}
    assert sorted(ids, key=started.get) == [a1, a2, b1, b2, b3, b4, b5, b6, a3, a4], sched.log()[-3000:]
    intervals = [(*held(c, d), 1) for c, d in closed_in_temporal(temporal, ids).items()]
    assert max_concurrent_cost(intervals) == 1  # the budget, never more
    assert {len(temporal.executions(workflow_id(c))) for c in ids} == {1}


def test_backfill_switched_on_while_a_wide_chart_waits_starts_the_short_one_behind_it(live, temporal):
    """Budget 3. R (cost 1) runs 8 s (estimated 20 s); the wide W (cost 3) is next and
    waits for R; the short S (cost 1, estimated 1 s, 90% bound 1.5 s) is behind W. Under
    strict S waits behind W. Switched to backfill while R runs, S starts at once: it fits in
    the 2 free units and ends long before W's reservation (R's estimated finish). W starts
    only once R has ended; Temporal's start and close times show it, and the running cost
    never exceeds the budget."""
    from orgs.models import WorkflowCost

    configure(budget=3)
    r_org, w_org, s_org = make_org("Rho", weight=1), make_org("Wide", weight=1), make_org("Short", weight=1)
    long, wide, short = (make_workflow(n, temporal_type="DemoChart") for n in ("long", "wide", "short"))
    WorkflowCost.objects.create(org=w_org, workflow=wide, cost=3)
    for org, wf, mean in ((r_org, long, 20.0), (w_org, wide, 3.0), (s_org, short, 1.0)):
        DurationStat.objects.create(org=org, workflow=wf, count=1000, total_s=1000 * mean, mean_s=mean)
    start = timezone.now() - timedelta(hours=1)
    r = make_chart(r_org, long, created_at=start, payload={"seconds": 8}).pk
    w = make_chart(w_org, wide, created_at=start + timedelta(seconds=1), payload={"seconds": 0.5}).pk
    s = make_chart(s_org, short, created_at=start + timedelta(seconds=2), payload={"seconds": 0.3}).pk
    ids = [r, w, s]

    live.shared_worker()
    sched = live.scheduler()
    wait_until(lambda: Chart.objects.get(pk=r).state == ChartState.RUNNING, timeout=30, what="R running")
    sched.saw(f"dispatch chart #{r} org=")
    # strict: W heads the order and does not fit in the 2 free units; S waits behind it
    time.sleep(1.0)
    assert states([w, s]) == {w: "queued", s: "queued"}, sched.log()[-3000:]
    policies_set(dispatch="backfill")
    sched.saw("policies set to share charts (quantum 600s), dispatch backfill")
    wait_until(lambda: Chart.objects.get(pk=s).state != ChartState.QUEUED, timeout=10, what="S started")
    assert Chart.objects.get(pk=r).state == ChartState.RUNNING, "S must start while R still runs"
    assert Chart.objects.get(pk=w).state == ChartState.QUEUED

    wait_until(lambda: all_final(ids), timeout=40, what="all charts final")
    assert set(states(ids).values()) == {"succeeded"}, sched.log()[-3000:]
    seen = closed_in_temporal(temporal, ids)
    at = {c: held(c, d) for c, d in seen.items()}
    assert at[r][0] < at[s][0] < at[r][1], at  # S ran beside R
    assert at[s][1] < at[w][0], at            # and was done before W started
    assert at[w][0] >= at[r][1], at           # W needed the whole budget: after R closed
    cost = {r: 1, w: 3, s: 1}
    assert max_concurrent_cost([(a, b, cost[c]) for c, (a, b) in at.items()]) == 3
    assert Chart.objects.get(pk=w).dispatched_cost == 3
