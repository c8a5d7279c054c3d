"""Live recording of each chart's first ETA and ETA at dispatch, on the real stack
(``runscheduler`` + ``runworker`` subprocesses, real Temporal and Redis, the test database)."""
from __future__ import annotations

import pytest

from charts.models import Chart, ChartState
from dashboard.accuracy import accuracy
from control.models import SchedulerSettings
from control.services import scheduler_settings_set
from tests.factories import make_chart, make_org, make_workflow
from tests.integration.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_first_and_dispatch_etas_are_recorded_and_the_first_is_kept(live):
    from common import snapshot

    s = SchedulerSettings.get()
    s.budget, s.eta_interval_s, s.reconcile_interval_s = 1, 0.3, 1.0
    s.save()
    assert s.eta_model == "forecast"  # the default
    org = make_org("Acme")
    wf = make_workflow("code", temporal_type="DemoChart")
    busy = make_chart(org, wf, payload={"seconds": 3})
    waiting = [make_chart(org, wf, payload={"seconds": 0.3}) for _ in range(3)]
    live.shared_worker()
    sched = live.scheduler()
    # while the busy chart runs, the waiting ones get their first ETA, written once by the ETA pass
    firsts = wait_until(
        lambda: (rows := dict(Chart.objects.filter(pk__in=[c.pk for c in waiting], state=ChartState.QUEUED,
                                                   eta_first_at__isnull=False).values_list("pk", "eta_first_at")))
        and len(rows) == 3 and rows,
        timeout=30, what="first ETAs of the three waiting charts")
    snap = wait_until(lambda: snapshot.read_snapshot(), timeout=10, what="a snapshot")
    assert snap["eta_model"] == "forecast"
    ids = [busy.pk] + [c.pk for c in waiting]
    wait_until(lambda: Chart.objects.filter(pk__in=ids, state=ChartState.SUCCEEDED).count() == 4, timeout=60,
               what="all four charts succeeded")
    rows = {c.pk: c for c in Chart.objects.filter(pk__in=ids)}
    for pk in ids:
        assert rows[pk].eta_first_at is not None and rows[pk].eta_dispatch_at is not None, sched.log()[-3000:]
    for pk, first in firsts.items():
        assert rows[pk].eta_first_at == first  # the first ETA is never overwritten
        assert rows[pk].eta_p90_at is not None and rows[pk].eta_p90_at >= first  # and its 90% bound with it
    # the chart that waited longest was promised a finish after the busy chart's
    last = waiting[-1].pk
    assert rows[last].eta_first_at > rows[busy.pk].eta_first_at
    acc = accuracy()
    assert acc["n"] == 4 and acc["first"]["n"] == 4 and acc["dispatch"]["n"] == 4
    assert acc["orgs"][str(org.pk)]["first"]["median_abs_s"] is not None

    # the operator switches the model: the next snapshot says so
    scheduler_settings_set(eta_model="lanes")
    wait_until(lambda: (sn := snapshot.read_snapshot()) and sn.get("eta_model") == "lanes", timeout=20,
               what="a snapshot made by the lane model")
