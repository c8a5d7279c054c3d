"""``chart.due_state_changed`` on the real stack: a live scheduler's ETA pass finds a chart
late against its org's turnaround and records the warning; the sweep (``jobs.tasks.sweep``)
and rq (a real Redis, rq's worker in this process) deliver it once to a local HTTP
receiver, signed as Standard Webhooks says. Later passes keep the warning where it is and
send nothing more. No worker polls the test's task queue, so the late chart, once
started, stays running, and the other stays queued behind it."""
from __future__ import annotations

import base64
from datetime import timedelta

import pytest
from django.utils import timezone
from standardwebhooks import Webhook

from charts.models import Chart, ChartState
from common import snapshot
from control.services import scheduler_settings_set
from jobs import tasks
from jobs.models import WebhookDelivery, WebhookEvent
from orgs.services import org_set_turnaround
from tests.factories import make_chart, make_org, make_workflow
from tests.integration.conftest import wait_until
from tests.jobs.conftest import receiver, run_jobs  # noqa: F401 - fixtures: the HTTP receiver, rq in-process

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

WHSEC = "whsec_" + base64.b64encode(bytes(range(32))).decode()
EVENT = str(WebhookEvent.DUE_STATE_CHANGED)


def test_a_late_chart_is_sent_once_signed_from_a_live_eta_pass(live, receiver, run_jobs, settings):  # noqa: F811
    settings.FAIRSCHED_WEBHOOK_ALLOW_PRIVATE = True  # the receiver is on 127.0.0.1
    scheduler_settings_set(budget=1, eta_interval_s=0.3, reconcile_interval_s=1.0)
    org = make_org("Acme")
    org.webhook_url, org.webhook_secret = receiver.url, WHSEC
    org.full_clean()
    org.save()
    org_set_turnaround(org=org, turnaround=3600)
    wf = make_workflow("code", temporal_type="DemoChart")
    now = timezone.now()
    # created 2 h ago with a 1 h turnaround: due an hour ago, so late whatever its ETA
    late = make_chart(org, wf, created_at=now - timedelta(hours=2), external_id="mrn-late")
    on_time = make_chart(org, wf, due_at=now + timedelta(days=2))  # its own due time
    assert late.due_at is not None and not late.due_explicit and on_time.due_explicit
    live.scheduler()

    wait_until(lambda: Chart.objects.filter(pk=late.pk, due_alert="late", due_alert_at__isnull=False).exists(),
               timeout=15, what="the scheduler's ETA pass to record the late chart's warning")
    tasks.sweep()
    run_jobs()
    sent = [r for r in receiver.requests if r.json()["event"] == EVENT]
    assert len(sent) == 1
    [req] = sent
    doc = Webhook(WHSEC).verify(req.body, req.headers)  # raises unless signed with the org's secret
    delivery = WebhookDelivery.objects.get(event=EVENT)
    assert doc["id"] == delivery.pk and req.headers["webhook-id"] == delivery.message_id
    assert doc["due_state"] == "late" and doc["chart"]["external_id"] == "mrn-late"
    assert doc["due_explicit"] is False and doc["first_flagged_at"] is not None

    # two more passes while it is still late: the warning stays where it is, nothing more is sent.
    # Each brought forward by an arrival of another org's: with nothing changing, passes come
    # ETA_IDLE_COST_FACTOR (60) times their own cost apart (15 s and more on a busy machine).
    raised_at = Chart.objects.get(pk=late.pk).due_alert_at
    beta = make_org("Beta")
    for _ in range(2):
        seq = snapshot.read_snapshot()["seq"]
        make_chart(beta, wf)
        snap = wait_until(lambda: (s := snapshot.read_snapshot()) and s["seq"] > seq and s,
                          timeout=30, what="an ETA pass after an arrival")
    assert {r["id"]: r["state"] for r in snap["due"]["charts"]}[late.pk] == "late"
    tasks.sweep()
    run_jobs()
    assert [r.json()["event"] for r in receiver.requests].count(EVENT) == 1
    assert WebhookDelivery.objects.filter(event=EVENT).count() == 1
    assert Chart.objects.get(pk=late.pk).due_alert_at == raised_at
    assert not Chart.objects.filter(pk=on_time.pk).exclude(due_alert="").exists()  # never warned
    assert Chart.objects.get(pk=late.pk).state in (ChartState.QUEUED, ChartState.RUNNING)  # still in flight
