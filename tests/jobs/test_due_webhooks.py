"""``chart.due_state_changed``: one delivery per rise of a chart's due warning."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from charts import services
from fairsched.engine.store import db
from jobs.due_webhooks import sweep_due_states
from jobs.models import WebhookDelivery
from tests.factories import make_org, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def no_enqueue(monkeypatch):
    monkeypatch.setattr("jobs.webhooks.enqueue_delivery", lambda *a, **k: None)


def test_a_rise_is_sent_once_a_fall_is_not_sent_and_a_new_rise_is():
    org, wf = make_org("Acme"), make_workflow()
    org.webhook_url, org.webhook_secret = "https://example.com/hook", "s3cret"
    org.save()
    quiet = make_org("Quiet")  # no webhook: nothing sent
    chart = services.chart_submit(org=org, workflow=wf, external_id="mrn-1", due_at=timezone.now() + timedelta(hours=1))
    other = services.chart_submit(org=quiet, workflow=wf)
    t = timezone.now().timestamp()
    db.record_due_alerts({chart.pk: 1, other.pk: 1}, [chart.pk, other.pk], t)
    assert sweep_due_states() == 1
    assert sweep_due_states() == 0  # seen again (the overlap): deduped
    d = WebhookDelivery.objects.get()
    assert d.event == "chart.due_state_changed"
    assert d.payload["chart"]["external_id"] == "mrn-1" and d.payload["due_state"] == "at_risk"
    db.record_due_alerts({chart.pk: 2}, [chart.pk], t + 1)  # at risk -> late: a rise
    assert sweep_due_states() == 1
    db.record_due_alerts({chart.pk: 1}, [], t + 2)           # late -> at risk: a fall, not sent
    assert sweep_due_states() == 0
    assert [x.payload["due_state"] for x in WebhookDelivery.objects.order_by("pk")] == ["at_risk", "late"]
