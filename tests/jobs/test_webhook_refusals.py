"""A webhook's delivery refuses anything but http(s), and never signs with an empty secret.

The model refuses such URLs and secrets at save; these rows are written around it
(a queryset update, as a migration or a script would), which is how they reach the
delivery in the issue's report.
"""
from __future__ import annotations

import pytest

from charts.models import ChartState
from charts.lifecycle import chart_mark_running, chart_record_outcome
from jobs import tasks, webhooks
from jobs.models import DeliveryStatus, WebhookDelivery
from orgs.models import Org
from tests.factories import make_chart, make_org, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/x", "data:text/plain,hello",
                                 "gopher://127.0.0.1:70/x", "/relative/path"],
                         ids=["file", "ftp", "data", "gopher", "no-scheme"])
def test_post_refuses_anything_but_http_and_https(url):
    attempt = webhooks.post(url, b"{}", {"Content-Type": "application/json"}, timeout=2)
    assert attempt.refused and attempt.status_code is None and attempt.response == ""
    assert "is not http or https" in attempt.error


def test_the_opener_has_no_file_ftp_or_data_handler():
    schemes = {name[:-len("_open")] for handler in webhooks._opener.handlers for name in dir(handler)
               if name.endswith("_open") and name not in ("do_open", "unknown_open")}
    assert schemes == {"http", "https"}


def _finished_chart(org: Org) -> None:
    chart = make_chart(org, make_workflow("code"))
    chart_mark_running(chart_id=chart.pk, cost=1)
    chart_record_outcome(chart_id=chart.pk, state=ChartState.SUCCEEDED)


def test_a_file_url_that_got_past_the_model_is_not_read(receiver, run_jobs, settings):
    org = make_org("Sneaky")
    Org.objects.filter(pk=org.pk).update(webhook_url="file:///etc/passwd", webhook_secret="s3cret")
    _finished_chart(org)
    tasks.sweep()
    run_jobs()
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == DeliveryStatus.FAILED
    assert delivery.last_response == "" and "root:" not in delivery.last_error
    assert "is not http or https" in delivery.last_error


def test_a_webhook_with_an_empty_secret_is_never_sent(receiver, run_jobs, settings):
    settings.FAIRSCHED_WEBHOOK_ALLOW_PRIVATE = True
    org = make_org("No Secret")
    Org.objects.filter(pk=org.pk).update(webhook_url=receiver.url, webhook_secret="")
    _finished_chart(org)
    tasks.sweep()
    run_jobs()
    assert receiver.requests == []  # nothing signed with the key "" ever leaves
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == DeliveryStatus.FAILED and "no webhook secret" in delivery.last_error


def test_the_control_case_a_proper_webhook_is_sent(receiver, run_jobs, settings):
    settings.FAIRSCHED_WEBHOOK_ALLOW_PRIVATE = True
    org = make_org("Proper")
    org.webhook_url, org.webhook_secret = receiver.url, "s3cret"
    org.full_clean()
    org.save()
    _finished_chart(org)
    tasks.sweep()
    run_jobs()
    assert len(receiver.requests) == 1
    assert webhooks.verify(receiver.requests[0].body, "s3cret", receiver.requests[0].headers["x-fairsched-signature"])
