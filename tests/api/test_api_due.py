"""The producer API's due times: ``due_at`` submitted (one chart, a batch), refused naming the
field, and read back with the state and slack of the scheduler's latest pass."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from django.utils import timezone as dj_timezone

from charts.models import Chart, ChartState
from dashboard.simulate import publish_from_db
from orgs.services import org_set_turnaround

pytestmark = pytest.mark.django_db


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_a_chart_submitted_with_due_at_reads_it_back_with_its_state_and_slack(api_world, redis_url):
    acme = api_world["acme"]
    later = (dj_timezone.now() + timedelta(days=3)).replace(microsecond=0)
    early = (dj_timezone.now() - timedelta(minutes=5)).replace(microsecond=0)
    on_time = acme.post("/charts", {"workflow": "code", "due_at": later.isoformat()})
    assert on_time.status_code == 201, on_time.content
    assert _when(on_time.json()["due_at"]) == later and on_time.json()["due_state"] is None  # not placed yet
    late_id = acme.post("/charts", {"workflow": "code", "due_at": early.isoformat()}).json()["id"]
    plain_id = acme.post("/charts", {"workflow": "code"}).json()["id"]
    publish_from_db()
    body = acme.get(f"/charts/{on_time.json()['id']}").json()
    assert body["due_state"] == "on_time" and body["slack_s"] > 2 * 86400
    late = acme.get(f"/charts/{late_id}").json()
    assert late["due_state"] == "late" and late["slack_s"] < -300
    plain = acme.get(f"/charts/{plain_id}").json()
    assert (plain["due_at"], plain["due_state"], plain["slack_s"]) == (None, None, None)


def test_the_orgs_turnaround_gives_the_due_time_and_a_finished_chart_met_or_missed(api_world, redis_url):
    acme = api_world["acme"]
    org_set_turnaround(org=acme.org, turnaround=3600)
    body = acme.post("/charts", {"workflow": "code"}).json()
    assert _when(body["due_at"]) - _when(body["created_at"]) == timedelta(hours=1)
    chart = Chart.objects.get(pk=body["id"])
    Chart.objects.filter(pk=chart.pk).update(state=ChartState.SUCCEEDED,
                                             finished_at=chart.due_at - timedelta(minutes=1))
    assert acme.get(f"/charts/{chart.pk}").json()["due_state"] == "met"
    Chart.objects.filter(pk=chart.pk).update(finished_at=chart.due_at + timedelta(minutes=1))
    assert acme.get(f"/charts/{chart.pk}").json()["due_state"] == "missed"
    Chart.objects.filter(pk=chart.pk).update(state=ChartState.FAILED, finished_at=chart.due_at - timedelta(minutes=1))
    assert acme.get(f"/charts/{chart.pk}").json()["due_state"] == "missed"  # failed by the due time: missed


def test_a_batch_carries_due_at_and_a_bad_one_is_refused_naming_the_item(api_world):
    acme = api_world["acme"]
    due = datetime(2031, 5, 1, 9, 0, tzinfo=timezone.utc)
    ok = acme.post("/charts/batch", {"charts": [{"workflow": "code", "due_at": due.isoformat()}, {"workflow": "code"}]})
    assert ok.status_code == 201, ok.content
    first, second = (Chart.objects.get(pk=c["id"]) for c in ok.json()["charts"])
    assert first.due_at == due and first.due_explicit and second.due_at is None
    bad = acme.post("/charts/batch", {"charts": [{"workflow": "code"}, {"workflow": "code", "due_at": "tomorrow"}]})
    assert bad.status_code == 422 and "charts[1].due_at" in bad.json()["errors"], bad.content
    assert Chart.objects.count() == 2  # all or nothing


@pytest.mark.parametrize("value", ["tomorrow", "2030-13-01T00:00:00Z", 12, True])
def test_a_bad_due_at_is_a_422_naming_it(api_world, value):
    response = api_world["acme"].post("/charts", {"workflow": "code", "due_at": value})
    assert response.status_code == 422, response.content
    problem = response.json()
    assert "due_at" in problem["errors"] and "due_at" in problem["errors"]["due_at"][0], problem
    assert Chart.objects.count() == 0
