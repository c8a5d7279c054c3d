"""A chart failed because it can never start reaches its org like any other ending: a
signed ``chart.finished`` webhook with its state and reason."""
from __future__ import annotations

import pytest

from charts.lifecycle import chart_fail_start
from jobs import tasks
from tests.factories import make_chart, make_org, make_workflow

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_a_chart_that_cannot_start_is_posted_as_finished_failed_with_its_reason(receiver, run_jobs, settings):
    settings.FAIRSCHED_WEBHOOK_ALLOW_PRIVATE = True  # the receiver is on 127.0.0.1
    org = make_org("Acme Health")
    org.webhook_url, org.webhook_secret = receiver.url, "s3cret-for-tests"
    org.save()
    chart = make_chart(org, make_workflow("code"), external_id="mrn-big")
    reason = "cannot start: Temporal refused to start the workflow (RESOURCE_EXHAUSTED): larger than max"
    assert chart_fail_start(chart_id=chart.pk, error=reason)

    tasks.sweep()
    run_jobs()

    assert len(receiver.requests) == 1
    req = receiver.requests[0]
    assert req.headers["x-fairsched-event"] == "chart.finished"
    body = req.json()["chart"]
    assert (body["id"], body["state"], body["error"]) == (chart.pk, "failed", reason)
    assert body["started_at"] is None and body["duration_s"] is None and body["finished_at"]
