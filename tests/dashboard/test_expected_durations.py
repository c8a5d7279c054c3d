"""A workflow's declared expected duration (``Workflow.expected_duration_s``): validated in the
service and the admin, read by the scheduler with the history, used for the ETAs before any
history, and named as the estimate's source on the chart page and in status.json."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.test import Client
from django.urls import reverse

from charts import lifecycle
from charts.models import ChartState
from control.models import AuditEntry
from dashboard import selectors
from dashboard.simulate import publish_from_db
from charts.selectors import read_durations
from orgs import services as org_services
from orgs.models import Workflow
from tests.factories import make_chart, make_user, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


def _finish(chart, seconds: float) -> None:
    lifecycle.chart_mark_running(chart_id=chart.pk, cost=1)
    chart.refresh_from_db()
    lifecycle.chart_record_outcome(chart_id=chart.pk, state=ChartState.SUCCEEDED,
                                         finished_at=chart.started_at + timedelta(seconds=seconds))


def test_the_service_sets_it_audits_it_and_tells_the_scheduler(db, capture_notifications):
    wf = org_services.workflow_create(name="audit", temporal_type="DemoChart", expected_duration_s=120)
    assert wf.expected_duration_s == 120
    capture_notifications.clear()
    root = make_user("root", superuser=True)
    assert org_services.workflow_expected_set(workflow=wf, seconds=90, actor=root)
    assert Workflow.objects.get(pk=wf.pk).expected_duration_s == 90
    entry = AuditEntry.objects.get(action="expected")
    assert entry.summary == "Set the expected duration of audit to 90 s (was 120 s)" and entry.actor == root
    assert {"kind": "resync"} in capture_notifications  # the scheduler re-reads its estimates now
    assert not org_services.workflow_expected_set(workflow=wf, seconds=90)  # unchanged: nothing written
    assert org_services.workflow_expected_set(workflow=wf.pk, seconds=None)
    assert Workflow.objects.get(pk=wf.pk).expected_duration_s is None


@pytest.mark.parametrize("value, message", [
    (0, "expected_duration_s must be at least 1, got 0."),
    (7 * 86400 + 1, "expected_duration_s must be at most 604,800, got 604801."),
    (1.5, "expected_duration_s must be a whole number, got 1.5."),
    (True, "expected_duration_s must be a whole number, got True."),
    ("soon", "expected_duration_s must be a whole number, got 'soon'."),
], ids=["zero", "over-7-days", "fraction", "bool", "text"])
def test_a_bad_expected_duration_is_refused_naming_the_field(db, value, message):
    wf = make_workflow("audit")
    with pytest.raises(ValidationError) as err:
        org_services.workflow_expected_set(workflow=wf, seconds=value)
    assert err.value.message_dict == {"expected_duration_s": [message]}
    with pytest.raises(ValidationError):
        org_services.workflow_create(name="scan", expected_duration_s=value)
    assert Workflow.objects.get(pk=wf.pk).expected_duration_s is None and not Workflow.objects.filter(name="scan")


def test_the_database_refuses_an_expected_duration_out_of_range(db):
    wf = make_workflow("audit")
    with pytest.raises(IntegrityError), transaction.atomic():
        Workflow.objects.filter(pk=wf.pk).update(expected_duration_s=0)


def test_the_admin_edits_it_through_the_service(db, admin_client, capture_notifications):
    wf = make_workflow("audit")
    url = reverse("admin:orgs_workflow_change", args=[wf.pk])
    form = {"name": "audit", "temporal_type": "DemoChart", "description": "", "execution_timeout_s": 86400}
    bad = admin_client.post(url, {**form, "expected_duration_s": 0})
    assert bad.status_code == 200 and "Ensure this value is greater than or equal to 1." in bad.content.decode()
    capture_notifications.clear()
    resp = admin_client.post(url, {**form, "expected_duration_s": 150}, follow=True)
    assert resp.status_code == 200
    assert Workflow.objects.get(pk=wf.pk).expected_duration_s == 150
    assert AuditEntry.objects.filter(action="expected").count() == 1
    assert {"kind": "resync"} in capture_notifications
    assert "expected duration (seconds)" in admin_client.get(reverse("admin:orgs_workflow_changelist")).content.decode().lower()


def test_the_scheduler_reads_the_declared_duration_and_blends_it_with_history(two_orgs):
    wf, acme = two_orgs["wf"], two_orgs["a"]
    org_services.workflow_expected_set(workflow=wf, seconds=90)
    est = read_durations()
    assert est.expected == {"code": 90.0} and est(str(acme.pk), "code") == 90.0
    _finish(two_orgs["charts_a"][0], 30.0)
    est = read_durations()
    assert est.counts[(str(acme.pk), "code")] == 1
    assert est(str(acme.pk), "code") == (5 * 90.0 + 30.0) / 6  # 80 s: one finished chart against five


def _client(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_the_chart_page_and_status_json_say_where_the_estimate_came_from(two_orgs, redis_url):
    wf = two_orgs["wf"]
    chart = two_orgs["charts_a"][1]
    root = _client(make_user("root", superuser=True))

    def source_on_page() -> str:
        text = root.get(f"/charts/{chart.pk}/").content.decode()
        return text[text.index('id="estimate-source"'):].split("</p>")[0]

    assert 'data-source="default"' in source_on_page() and "the default (600 s" in source_on_page()
    org_services.workflow_expected_set(workflow=wf, seconds=90)
    page = source_on_page()
    assert 'data-source="declared"' in page and "declared for code" in page and "1 min 30 s" in page
    publish_from_db()
    data = _client(two_orgs["alice"]).get("/orgs/acme/status.json").json()
    assert {c["estimate_source"] for c in data["charts"]} == {"declared"}
    assert [c["eta_s"] for c in data["charts"]][:1] == [90.0]  # the first ETA is the declared duration
    _finish(two_orgs["charts_b"][0], 60.0)  # another org's history of the workflow
    page = source_on_page()
    assert 'data-source="workflow"' in page and "code charts of every org (1 finished)" in page
    assert "blended with the declared 90 s" in page
    _finish(two_orgs["charts_a"][0], 30.0)
    page = source_on_page()
    assert 'data-source="pair"' in page and "Acme&#x27;s code charts (1 finished)" in page
    selectors.clear_caches()  # status.json re-reads the estimates at most once a second
    publish_from_db()
    data = _client(two_orgs["bob"]).get("/orgs/beta/status.json").json()
    assert {c["estimate_source"] for c in data["charts"]} == {"pair"}  # Beta's own finished code chart
