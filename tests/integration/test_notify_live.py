"""A live scheduler hears of a chart from the service that wrote it and of a chart a producer
wrote with a plain ``Chart.objects.create`` (its ``post_save`` note, ``charts/signals.py``)
alike, and finds a chart that sent no note (``bulk_create``) at its incremental resync."""
from __future__ import annotations

import re

import pytest

from charts import services as charts_services
from charts.models import Chart, ChartState
from control.services import scheduler_settings_set
from tests.factories import make_org, make_workflow
from tests.integration.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def final(pk: int) -> bool:
    return Chart.objects.filter(pk=pk, state__in=[ChartState.QUEUED, ChartState.RUNNING]).count() == 0


def found_by_resync(log: str) -> set[int]:
    """The charts the scheduler's resyncs applied as changes no note had told it of (it logs
    the first ten of each resync's)."""
    return {int(pk) for line in log.splitlines() if "without a notification applied" in line
            for pk in re.findall(r"#(\d+)", line)}


def test_a_submitted_an_orm_and_a_bulk_chart_all_run_and_only_the_bulk_one_waits_for_the_resync(live):
    scheduler_settings_set(budget=1, eta_interval_s=0.5, reconcile_interval_s=1.0)
    org, wf = make_org("Acme"), make_workflow("code", temporal_type="DemoChart")
    live.shared_worker()
    scheduler = live.scheduler()
    submitted = charts_services.chart_submit(org=org, workflow=wf, payload={"seconds": 0.2})
    wait_until(lambda: final(submitted.pk), timeout=30, what="the submitted chart")
    plain = Chart.objects.create(org=org, workflow=wf, payload={"seconds": 0.2})  # its save notifies
    wait_until(lambda: final(plain.pk), timeout=30, what="the plain ORM chart")
    bulk, = Chart.objects.bulk_create([Chart(org=org, workflow=wf, payload={"seconds": 0.2})])  # nothing notifies
    bulk_pk = bulk.pk or Chart.objects.order_by("-pk").values_list("pk", flat=True)[0]
    wait_until(lambda: final(bulk_pk), timeout=30, what="the bulk-created chart, found by the incremental resync")
    assert set(Chart.objects.filter(pk__in=[submitted.pk, plain.pk, bulk_pk]).values_list("state", flat=True)) == {
        ChartState.SUCCEEDED}
    resynced = found_by_resync(scheduler.log())
    assert bulk_pk in resynced  # the check itself sees a chart that came by the resync
    assert plain.pk not in resynced and submitted.pk not in resynced
