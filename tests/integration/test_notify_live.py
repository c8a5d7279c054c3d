"""A live scheduler hears of a chart from the service that wrote it, and finds a chart that no
service wrote (a plain ``Chart.objects.create``: no signal notifies) at its incremental
resync, within seconds."""
from __future__ import annotations

import pytest

from charts import services as charts_services
from charts.models import Chart, ChartState
from control.services import scheduler_settings_set
from tests.factories import make_org, make_workflow
from tests.integration.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def final(pk: int) -> bool:
    return Chart.objects.filter(pk=pk, state__in=[ChartState.QUEUED, ChartState.RUNNING]).count() == 0


def test_a_submitted_chart_and_a_plain_orm_chart_both_run(live):
    scheduler_settings_set(budget=1, eta_interval_s=0.5, reconcile_interval_s=1.0)
    org, wf = make_org("Acme"), make_workflow("code", temporal_type="DemoChart")
    live.shared_worker()
    live.scheduler()
    submitted = charts_services.chart_submit(org=org, workflow=wf, payload={"seconds": 0.2})
    wait_until(lambda: final(submitted.pk), timeout=30, what="the submitted chart")
    plain = Chart.objects.create(org=org, workflow=wf, payload={"seconds": 0.2})  # nothing notifies
    wait_until(lambda: final(plain.pk), timeout=30, what="the plain ORM chart, found by the incremental resync")
    assert Chart.objects.get(pk=plain.pk).state == ChartState.SUCCEEDED
