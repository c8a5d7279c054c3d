"""Poison charts against the real stack: nothing a chart carries can stall the fair order
or hold the budget for ever.

A chart Temporal refuses to start (a 5 MB payload written through the ORM, around the
services' size check) and a DemoChart whose payload its code cannot use are failed with
their reason while the charts behind them run; a workflow that outlives its execution
timeout, or ignores a cancel, is ended by Temporal and frees its budget. The chaos test
does all of it at once while the scheduler and the worker are SIGKILLed.
"""
from __future__ import annotations

import random
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from charts.models import Chart, ChartState
from orgs.models import WorkflowCost
from fairsched.temporal.shared import workflow_id
from tests.factories import make_chart, make_org, make_workflow
from tests.integration.conftest import wait_until
from tests.integration.test_scheduler_live import (  # noqa: F401 - user_worker is a fixture
    all_final,
    closed_in_temporal,
    configure,
    executions_per_chart,
    held,
    peak_of,
    states,
    user_worker,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

FIVE_MB = "x" * (5 * 1024 * 1024)


def test_poison_charts_at_the_head_fail_with_their_reason_and_the_charts_behind_them_run(live, temporal):
    """Budget 2; at the head a chart whose start Temporal refuses (5 MB payload) and a
    DemoChart with ``{"seconds": "abc"}``; six ordinary charts of two orgs behind them."""
    from temporalio.client import WorkflowExecutionStatus

    configure(budget=2)
    a, b = make_org("Acme"), make_org("Beta")
    wf = make_workflow("code", temporal_type="DemoChart")
    head = timezone.now() - timedelta(hours=1)
    too_big = make_chart(a, wf, created_at=head, payload={"seconds": 1, "notes": FIVE_MB})
    malformed = make_chart(b, wf, created_at=head, payload={"seconds": "abc"})
    ordinary = [make_chart(org, wf, created_at=head + timedelta(minutes=1 + i), payload={"seconds": 0.5}).pk
                for i, org in enumerate([a, b] * 3)]
    live.shared_worker()
    sched = live.scheduler()
    wait_until(lambda: all_final([too_big.pk, malformed.pk, *ordinary]), timeout=60, what="every chart final")
    assert set(states(ordinary).values()) == {"succeeded"}
    too_big.refresh_from_db()
    malformed.refresh_from_db()
    assert too_big.state == ChartState.FAILED and too_big.finished_at is not None
    assert too_big.error.startswith("cannot start: Temporal refused to start the workflow (RESOURCE_EXHAUSTED): ")
    assert "larger than max" in too_big.error
    assert not temporal.exists(workflow_id(too_big.pk))
    assert malformed.state == ChartState.FAILED
    assert malformed.error == (f"DemoChart chart #{malformed.pk}: invalid payload: "
                               "payload.seconds: must be a number of seconds, got 'abc'")
    assert closed_in_temporal(temporal, [malformed.pk])[malformed.pk].status == WorkflowExecutionStatus.FAILED
    assert set(executions_per_chart(temporal, [malformed.pk, *ordinary]).values()) == {1}
    log = sched.log()
    assert log.count(f"chart #{too_big.pk} failed: cannot start") == 1, log[-3000:]  # tried once, not 80 times a minute


def test_a_workflow_past_its_execution_timeout_fails_and_frees_the_budget(live, temporal):
    from temporalio.client import WorkflowExecutionStatus

    configure(budget=1)
    org = make_org("Acme")
    slow_wf = make_workflow("slow", temporal_type="DemoChart")
    slow_wf.execution_timeout_s = 2
    slow_wf.save()
    wf = make_workflow("code", temporal_type="DemoChart")
    stuck = make_chart(org, slow_wf, payload={"seconds": 300})
    after = make_chart(org, wf, payload={"seconds": 0.2})
    live.shared_worker()
    live.scheduler()
    wait_until(lambda: all_final([stuck.pk, after.pk]), timeout=60, what="both final")
    stuck.refresh_from_db()
    after.refresh_from_db()
    assert stuck.state == ChartState.FAILED and "timed out" in stuck.error, stuck.error
    closed = closed_in_temporal(temporal, [stuck.pk, after.pk])
    assert closed[stuck.pk].status == WorkflowExecutionStatus.TIMED_OUT
    assert after.state == ChartState.SUCCEEDED
    assert closed[after.pk].start_time >= closed[stuck.pk].close_time  # the budget of 1 was freed by the timeout


def test_a_cancel_the_workflow_ignores_escalates_to_terminate_after_the_grace(live, temporal, user_worker):
    from temporalio.client import WorkflowExecutionStatus

    from charts.services import chart_cancel

    configure(budget=1, reconcile=1.0)
    org = make_org("Acme")
    stubborn_wf = make_workflow("stubborn", temporal_type=f"StubbornChart@{user_worker}")
    stubborn = make_chart(org, stubborn_wf)
    after = make_chart(org, make_workflow("code", temporal_type="DemoChart"), payload={"seconds": 0.2})
    live.shared_worker()
    sched = live.scheduler(env={"FAIRSCHED_CANCEL_GRACE_S": "2"})
    wait_until(lambda: Chart.objects.get(pk=stubborn.pk).state == ChartState.RUNNING, timeout=30,
               what="the stubborn chart running")
    chart_cancel(chart=stubborn.pk)
    wait_until(lambda: all_final([stubborn.pk, after.pk]), timeout=60, what="both final")
    stubborn.refresh_from_db()
    assert stubborn.state == ChartState.CANCELLED
    assert stubborn.error == "cancel not honoured within 2 s: terminated"
    closed = closed_in_temporal(temporal, [stubborn.pk, after.pk])
    assert closed[stubborn.pk].status == WorkflowExecutionStatus.TERMINATED
    assert states([after.pk]) == {after.pk: "succeeded"}
    assert closed[after.pk].start_time >= closed[stubborn.pk].close_time
    assert sched.saw(f"cancel chart #{stubborn.pk}: workflow chart-{stubborn.pk} did not close within 2 s "
                     "of the cancel; terminated")


@pytest.mark.slow(38)
def test_chaos_poison_charts_and_sigkills_lose_nothing_repeat_nothing_and_never_exceed_the_budget(live, temporal):
    """120 short charts of three orgs (costs 1 and 2) with poison charts mixed
    in, while the scheduler and the worker are SIGKILLed and restarted three times.
    (160 took 50-65 s of the suite; the kills, not the count, make the chaos.)"""
    budget = 6
    configure(budget=budget, reconcile=1.0)
    rnd = random.Random(9)
    orgs = [make_org("Acme", weight=2), make_org("Beta"), make_org("Cedar")]
    code = make_workflow("code", temporal_type="DemoChart")
    big = make_workflow("big", temporal_type="DemoChart")
    WorkflowCost.objects.create(org=orgs[1], workflow=big, cost=2)
    poison_payloads = [{"seconds": 0.1, "notes": FIVE_MB}, {"seconds": "abc"}, {"seconds": 1e300},
                       {"seconds": 0.1, "fail": "yes"}, [1, 2, 3], {"seconds": 0.1, "notes": FIVE_MB}]
    start = timezone.now() - timedelta(hours=1)
    rows: list[tuple[Chart, bool]] = []  # (chart, is poison)
    for i in range(120):
        org = rnd.choice(orgs)
        rows.append((Chart(org=org, workflow=rnd.choice([code, big]), created_at=start + timedelta(seconds=i),
                           payload={"seconds": round(rnd.uniform(0.05, 0.3), 2)}), False))
    for k, payload in enumerate(poison_payloads):
        rows.insert(10 + k * 19, (Chart(org=orgs[k % 3], workflow=code, payload=payload,
                                        created_at=start + timedelta(seconds=10 + k * 19, milliseconds=500)), True))
    charts = Chart.objects.bulk_create([c for c, _ in rows])
    poison = [c.pk for c, (_, bad) in zip(charts, rows) if bad]
    ordinary = [c.pk for c, (_, bad) in zip(charts, rows) if not bad]
    assert len(poison) == len(poison_payloads) and len(ordinary) == 120
    cost = {c.pk: 2 if (c.workflow_id == big.pk and c.org_id == orgs[1].pk) else 1 for c in charts}

    worker, sched = live.worker(), live.scheduler("--lease-ttl", "1.5")
    for round_ in range(1, 4):
        wait_until(lambda: Chart.objects.filter(pk__in=ordinary, state=ChartState.SUCCEEDED).count()
                   >= round_ * 27, timeout=90, what=f"progress before kill {round_}")
        sched.kill()
        if round_ != 2:
            worker.kill()
            worker = live.worker()
        time.sleep(0.5)
        sched = live.scheduler("--lease-ttl", "1.5")
    wait_until(lambda: all_final(ordinary + poison), timeout=180, what="every chart final after the kills")

    got = states(ordinary + poison)
    assert {got[c] for c in ordinary} == {"succeeded"}, [c for c in ordinary if got[c] != "succeeded"][:10]
    errors = dict(Chart.objects.filter(pk__in=poison).values_list("pk", "error"))
    assert {got[c] for c in poison} == {"failed"} and all(errors.values()), errors
    assert set(executions_per_chart(temporal, ordinary).values()) == {1}  # each ran exactly once
    started = [c for c in poison if temporal.exists(workflow_id(c))]  # the DemoCharts that refused their payload
    closed = closed_in_temporal(temporal, ordinary + started, timeout=30)
    intervals = [(*held(c, d), cost[c], c) for c, d in closed.items()]
    peak, at_peak = peak_of(intervals)
    assert peak <= budget, f"cost {peak} ran at once; (start, close, cost, chart): {at_peak}"
