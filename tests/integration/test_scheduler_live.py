"""The live scheduler against a real Temporal dev server and a real Redis.

``runscheduler`` and ``runworker`` run as subprocesses on the test database;
assertions read the database and Temporal itself (start/close times, one
execution per workflow id).
"""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from charts.models import Chart, ChartState
from fairsched import scenario
from fairsched.models import SchedulerSettings
from orgs.models import WorkflowCost
from tests.factories import make_chart, make_org, make_workflow
from tests.integration.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def configure(budget: int, *, eta: float = 0.5, reconcile: float = 1.0) -> None:
    s = SchedulerSettings.get()
    s.budget, s.eta_interval_s, s.reconcile_interval_s = budget, eta, reconcile
    s.save()


def all_final(ids: list[int]) -> bool:
    return Chart.objects.filter(pk__in=ids, state__in=[ChartState.QUEUED, ChartState.RUNNING]).count() == 0


def states(ids: list[int]) -> dict[int, str]:
    return dict(Chart.objects.filter(pk__in=ids).values_list("pk", "state"))


def max_concurrent_cost(intervals: list[tuple[float, float, int]]) -> int:
    """Sweep over (start, close, cost): a close at the same instant as a start comes first."""
    events = sorted([(s, 1, c) for s, _, c in intervals] + [(e, 0, -c) for _, e, c in intervals])
    peak = cur = 0
    for _, _, delta in events:
        cur += delta
        peak = max(peak, cur)
    return peak


def test_charts_run_in_plan_order_and_all_succeed(live, temporal):
    configure(budget=1)
    a, b = make_org("Acme", weight=2), make_org("Beta", weight=1)
    wf = make_workflow("code", temporal_type="DemoChart")
    start = timezone.now() - timedelta(hours=1)
    charts = [make_chart(org, wf, created_at=start + timedelta(minutes=i), payload={"seconds": 0.2})
              for i, org in enumerate([a, a, a, a, b, b])]
    from fairsched.live import scenario_from_db

    expected = [int(i) for i in scenario.plan(scenario_from_db(include_rounds=False))["order"]]
    assert expected == [charts[i].pk for i in (0, 1, 4, 2, 3, 5)]

    live.worker()
    sched = live.scheduler()
    ids = [c.pk for c in charts]
    wait_until(lambda: all_final(ids), timeout=60, what="all charts final")
    assert set(states(ids).values()) == {"succeeded"}, sched.log()[-3000:]

    started = {c: temporal.describe(f"chart-{c}").start_time for c in ids}
    assert sorted(ids, key=started.get) == expected
    assert all(len(temporal.executions(f"chart-{c}")) == 1 for c in ids)
    assert "dispatch chart #" in sched.log()


def test_running_cost_seen_in_temporal_never_exceeds_budget(live, temporal):
    configure(budget=3)
    a, b = make_org("Acme", weight=1), make_org("Beta", weight=1)
    code, big = make_workflow("code", temporal_type="DemoChart"), make_workflow("big", temporal_type="DemoChart")
    WorkflowCost.objects.create(org=b, workflow=big, cost=2)
    charts = []
    for i in range(6):
        charts.append(make_chart(a, code, payload={"seconds": 0.3 + 0.1 * (i % 3)}))
        charts.append(make_chart(b, big, payload={"seconds": 0.4}))
    live.worker()
    live.scheduler()
    ids = [c.pk for c in charts]
    wait_until(lambda: all_final(ids), timeout=60, what="all charts final")
    assert set(states(ids).values()) == {"succeeded"}
    cost = {c.pk: 2 if c.workflow_id == big.pk else 1 for c in charts}
    intervals = []
    for c in ids:
        d = temporal.describe(f"chart-{c}")
        intervals.append((d.start_time.timestamp(), d.close_time.timestamp(), cost[c]))
    assert max_concurrent_cost(intervals) == 3  # used the whole budget, never more
    rows = Chart.objects.filter(pk__in=ids)
    assert all(r.dispatched_cost == cost[r.pk] for r in rows)
