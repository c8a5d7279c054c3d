"""Signed webhooks: found by the sweep, POSTed by rq jobs, retried with backoff, visible in the admin."""
from __future__ import annotations

import json
from datetime import timedelta

import django_rq
import pytest
from django.urls import reverse
from django.utils import timezone

from charts.models import ChartState
from charts.lifecycle import chart_mark_running, chart_record_outcome
from common import snapshot as snapshots
from jobs import tasks, webhooks
from jobs.models import DeliveryStatus, OrgClearTime, WebhookDelivery, WebhookEvent
from tests.factories import make_chart, make_org, make_user, make_workflow

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SECRET = "s3cret-for-tests"


@pytest.fixture
def org(receiver, settings):
    settings.FAIRSCHED_WEBHOOK_ALLOW_PRIVATE = True  # the receiver is on 127.0.0.1
    org = make_org("Acme Health")
    org.webhook_url = receiver.url
    org.webhook_secret = SECRET
    org.webhook_clear_margin_s = 600
    org.save()
    return org


def _finish(org, state=ChartState.SUCCEEDED, **fields):
    chart = make_chart(org, make_workflow("code"), external_id=fields.pop("external_id", None), **fields)
    chart_mark_running(chart_id=chart.pk, cost=1)
    chart_record_outcome(chart_id=chart.pk, state=state, error="boom" if state == ChartState.FAILED else "")
    return chart


def test_signature_is_hmac_sha256_of_the_body():
    # RFC 4231, test case 2
    body = b"what do ya want for nothing?"
    assert webhooks.sign(body, "Jefe") == "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    assert webhooks.verify(body, "Jefe", webhooks.sign(body, "Jefe"))
    assert not webhooks.verify(body, "other", webhooks.sign(body, "Jefe"))
    assert not webhooks.verify(body + b" ", "Jefe", webhooks.sign(body, "Jefe"))


def test_a_finished_chart_is_posted_once_signed_to_the_org(org, receiver, run_jobs):
    chart = _finish(org, external_id="mrn-1")
    _finish(make_org("No Hook"))  # an org without a URL gets nothing

    tasks.sweep()
    tasks.sweep()  # seeing the chart again sends nothing twice
    run_jobs()

    assert len(receiver.requests) == 1
    req = receiver.requests[0]
    delivery = WebhookDelivery.objects.get()
    assert req.headers["x-fairsched-signature"] == webhooks.sign(req.body, SECRET)
    assert req.headers["x-fairsched-event"] == "chart.finished"
    assert req.headers["x-fairsched-delivery"] == str(delivery.pk)
    assert req.headers["content-type"] == "application/json"
    doc = req.json()
    assert doc["event"] == "chart.finished" and doc["id"] == delivery.pk
    assert doc["org"] == {"id": org.pk, "slug": "acme-health", "name": "Acme Health"}
    assert {k: doc["chart"][k] for k in ("id", "external_id", "workflow", "state")} == {
        "id": chart.pk, "external_id": "mrn-1", "workflow": "code", "state": "succeeded"}
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == (DeliveryStatus.SUCCEEDED, 1, 200)
    assert delivery.dedupe_key == f"chart.finished:{chart.pk}" and delivery.delivered_at is not None


def test_failed_and_cancelled_charts_are_reported_too(org, receiver, run_jobs):
    _finish(org, ChartState.FAILED)
    _finish(org, ChartState.CANCELLED)
    tasks.sweep()
    run_jobs()
    assert sorted((r.json()["chart"]["state"], r.json()["chart"]["error"]) for r in receiver.requests) == [
        ("cancelled", ""), ("failed", "boom")]


def test_a_failing_receiver_is_retried_with_the_same_signed_body(org, receiver, run_jobs, settings):
    settings.FAIRSCHED_WEBHOOK_RETRY_S = [0, 0, 0]
    receiver.statuses = [500, 503, 200]
    _finish(org)
    tasks.sweep()
    run_jobs()

    delivery = WebhookDelivery.objects.get()
    assert [r.headers["x-fairsched-delivery"] for r in receiver.requests] == [str(delivery.pk)] * 3
    assert len({r.body for r in receiver.requests}) == 1
    assert len({r.headers["x-fairsched-signature"] for r in receiver.requests}) == 1
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == (DeliveryStatus.SUCCEEDED, 3, 200)


def test_giving_up_after_the_last_retry_is_recorded(org, receiver, run_jobs, settings):
    settings.FAIRSCHED_WEBHOOK_RETRY_S = [0, 0]
    receiver.statuses = [500]
    _finish(org)
    tasks.sweep()
    run_jobs()

    delivery = WebhookDelivery.objects.get()
    assert len(receiver.requests) == 3
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == (DeliveryStatus.FAILED, 3, 500)
    assert delivery.last_error == "HTTP 500 Internal Server Error"
    assert delivery.last_response == "answer 3: 500"
    assert delivery.next_retry_at is None
    queue = django_rq.get_queue("default")
    assert f"webhook-{delivery.pk}" in queue.failed_job_registry.get_job_ids()


def test_retries_back_off_on_rq_schedule(org, receiver, run_jobs, settings):
    settings.FAIRSCHED_WEBHOOK_RETRY_S = [30, 120]
    receiver.statuses = [502]
    _finish(org)
    tasks.sweep()
    before = timezone.now()
    run_jobs()

    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.PENDING, 1)
    assert before + timedelta(seconds=29) < delivery.next_retry_at < timezone.now() + timedelta(seconds=31)
    queue = django_rq.get_queue("default")
    assert f"webhook-{delivery.pk}" in queue.scheduled_job_registry.get_job_ids()


def test_an_unreachable_url_is_an_error_on_the_delivery(org, run_jobs, settings):
    from fairsched.runtime.embedded import free_port

    settings.FAIRSCHED_WEBHOOK_RETRY_S = []
    org.webhook_url = f"http://127.0.0.1:{free_port()}/nobody"
    org.save()
    _finish(org)
    tasks.sweep()
    run_jobs()
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == DeliveryStatus.FAILED
    assert delivery.last_status_code is None
    assert "URLError" in delivery.last_error and "refused" in delivery.last_error.lower()


def test_a_private_destination_is_refused_unless_allowed_and_never_retried(org, receiver, run_jobs, settings):
    settings.FAIRSCHED_WEBHOOK_ALLOW_PRIVATE = False
    settings.FAIRSCHED_WEBHOOK_RETRY_S = [1, 1]
    org.webhook_url = receiver.url.replace("127.0.0.1", "localhost")  # a name that resolves to loopback
    org.save()
    _finish(org)
    tasks.sweep()
    run_jobs()
    delivery = WebhookDelivery.objects.get()
    assert receiver.requests == []
    assert (delivery.status, delivery.attempts, delivery.next_retry_at) == (DeliveryStatus.FAILED, 1, None)
    assert delivery.last_error.startswith("refused: webhook destination localhost (")
    assert "loopback address; set FAIRSCHED_WEBHOOK_ALLOW_PRIVATE=1" in delivery.last_error
    assert not django_rq.get_queue("default").scheduled_job_registry.get_job_ids()  # no retry planned

    settings.FAIRSCHED_WEBHOOK_ALLOW_PRIVATE = True  # an internal receiver, allowed on purpose
    webhooks.webhook_delivery_retry(delivery=delivery)
    run_jobs()
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.SUCCEEDED and len(receiver.requests) == 1


def test_https_deliveries_verify_the_certificate_through_the_guarded_connection(org, tls_receiver, run_jobs,
                                                                                  settings, monkeypatch):
    settings.FAIRSCHED_WEBHOOK_RETRY_S = []
    org.webhook_url = tls_receiver.url
    org.save()
    _finish(org)
    tasks.sweep()
    run_jobs()  # the receiver's certificate is not trusted: the TLS handshake refuses it
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == DeliveryStatus.FAILED and "CERTIFICATE_VERIFY_FAILED" in delivery.last_error
    assert tls_receiver.requests == []

    monkeypatch.setenv("SSL_CERT_FILE", tls_receiver.cert_file)  # now it is
    webhooks.webhook_delivery_retry(delivery=delivery)
    run_jobs()
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.SUCCEEDED, delivery.last_error
    req = tls_receiver.requests[0]
    assert req.headers["x-fairsched-signature"] == webhooks.sign(req.body, SECRET)

    settings.FAIRSCHED_WEBHOOK_ALLOW_PRIVATE = False  # and the destination check still comes first
    webhooks.webhook_delivery_retry(delivery=delivery)
    run_jobs()
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.FAILED and delivery.last_error.startswith("refused: ")
    assert len(tls_receiver.requests) == 1


@pytest.mark.parametrize("ip, allowed_private, refused", [
    ("93.184.216.34", False, None),
    ("2606:4700::1111", False, None),
    ("10.1.2.3", False, "is a private address"),
    ("10.1.2.3", True, None),
    ("127.0.0.1", False, "is a loopback address"),
    ("::1", True, None),
    ("169.254.169.254", True, "is a cloud metadata address"),
    ("169.254.1.1", True, "is a link-local address; never allowed"),
    ("::ffff:169.254.1.1", True, "is a link-local address; never allowed"),
    ("fe80::1%eth0", True, "is a link-local address; never allowed"),
    ("0.0.0.0", True, "is a unspecified address; never allowed"),
    ("224.0.0.1", True, "is a multicast address; never allowed"),
])
def test_destination_addresses(ip, allowed_private, refused, settings):
    settings.FAIRSCHED_WEBHOOK_ALLOW_PRIVATE = allowed_private
    if refused is None:
        webhooks.check_destination(ip, "example")
    else:
        with pytest.raises(webhooks.DestinationRefused, match=refused):
            webhooks.check_destination(ip, "example")


def test_a_webhook_url_must_be_http_or_https(db):
    from django.core.exceptions import ValidationError

    org = make_org("Scheme")
    org.webhook_url = "ftp://example.com/drop"
    with pytest.raises(ValidationError) as exc:
        org.full_clean()
    assert "webhook_url" in exc.value.message_dict


def test_a_url_removed_before_sending_skips_the_delivery(org, receiver, run_jobs):
    _finish(org)
    tasks.sweep()
    org.webhook_url = ""
    org.save()
    run_jobs()
    assert receiver.requests == []
    assert WebhookDelivery.objects.get().status == DeliveryStatus.SKIPPED


def test_a_delivery_whose_job_was_lost_is_queued_again(org, receiver, run_jobs):
    _finish(org)
    tasks.sweep()
    django_rq.get_queue("default").empty()  # the job is lost (a flushed Redis, say)
    WebhookDelivery.objects.update(created_at=timezone.now() - timedelta(minutes=10))
    run_jobs()
    assert receiver.requests == []
    assert webhooks.requeue_stuck() == 1
    run_jobs()
    assert len(receiver.requests) == 1
    assert WebhookDelivery.objects.get().status == DeliveryStatus.SUCCEEDED


# --- clear-time ---------------------------------------------------------------------


def _snapshot(org, *, clear_in_s, queued=10, running=1, now=None, age_s=0, no_eta=None, unplanned=None):
    now = now or timezone.now()
    row = {"id": org.pk, "name": org.name, "queued": queued, "running": running,
           "clear_s": clear_in_s, "clear_at": None if clear_in_s is None else
           (now + timedelta(seconds=clear_in_s)).isoformat(), "no_eta": no_eta, "unplanned": unplanned or {}}
    return {"version": 1, "generated_at": (now - timedelta(seconds=age_s)).isoformat(), "now": now.timestamp(),
            "orgs": [row]}


def test_clear_time_moves_beyond_the_margin_are_notified(org, receiver, run_jobs):
    now = timezone.now()
    sent = []
    for clear_in_s, queued in [(7200, 10), (7200 + 300, 10), (7200 + 1200, 10), (None, 10), (0, 0), (0, 0)]:
        sent.append(webhooks.sweep_clear_times(now, _snapshot(org, clear_in_s=clear_in_s, queued=queued,
                                                                 running=queued and 1, now=now)))
    # first estimate (2 h from now), +5 min (within the 10 min margin), +20 min, held (no estimate: no news),
    # drained (2h20 early), drained again
    assert sent == [1, 0, 1, 0, 1, 0]
    run_jobs()
    docs = [r.json() for r in receiver.requests]
    assert [d["event"] for d in docs] == ["org.clear_time_changed"] * 3
    assert [d["moved_s"] for d in docs] == [7200.0, 1200.0, 8400.0]
    assert docs[1]["previous_clear_at"] == docs[0]["clear_at"]
    assert docs[2]["clear_at"] is None and docs[2]["clear_s"] is None
    assert OrgClearTime.objects.get(org=org).clear_at is None


def test_an_org_whose_work_cannot_run_is_told_so_never_that_it_is_clear(org, receiver, run_jobs):
    """Held (or all paused/blocked): the webhook says "no ETA" and why, once; it never
    reports a clear-time of now, as it did when a held org's clear_s was 0."""
    now = timezone.now()
    held = dict(clear_in_s=None, queued=31, running=0, now=now, no_eta="held: no ETA", unplanned={"held": 31})
    sent = [webhooks.sweep_clear_times(now, _snapshot(org, clear_in_s=3600, now=now)),
            webhooks.sweep_clear_times(now, _snapshot(org, **held)),
            webhooks.sweep_clear_times(now, _snapshot(org, **held)),  # no news
            webhooks.sweep_clear_times(now, _snapshot(org, clear_in_s=300, queued=31, now=now))]  # released
    assert sent == [1, 1, 0, 1]
    run_jobs()
    docs = [r.json() for r in receiver.requests]
    assert docs[1]["clear_at"] is None and docs[1]["clear_s"] is None
    assert docs[1]["no_eta"] == "held: no ETA" and docs[1]["unplanned"] == {"held": 31}
    assert docs[2]["clear_s"] == 300.0 and docs[2]["no_eta"] is None


def test_a_stale_or_missing_snapshot_says_nothing(org, redis_url):
    now = timezone.now()
    assert webhooks.sweep_clear_times(now, _snapshot(org, clear_in_s=9000, now=now, age_s=600)) == 0
    assert webhooks.sweep_clear_times(now) == 0  # nothing published yet
    assert WebhookDelivery.objects.count() == 0


def test_the_sweep_job_reads_the_published_snapshot(org, receiver, run_jobs):
    snap = _snapshot(org, clear_in_s=3600)
    snapshots.store(snap, [], {})
    django_rq.get_queue("default").enqueue(tasks.sweep)
    run_jobs()  # the sweep, then the delivery it queued
    assert [r.json()["event"] for r in receiver.requests] == [WebhookEvent.CLEAR_TIME_CHANGED]


# --- admin ----------------------------------------------------------------------------


def test_deliveries_are_visible_and_retryable_in_the_admin(org, receiver, run_jobs, client, settings):
    settings.FAIRSCHED_WEBHOOK_RETRY_S = []
    receiver.statuses = [500, 200]
    _finish(org)
    tasks.sweep()
    run_jobs()
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == DeliveryStatus.FAILED

    client.force_login(make_user("root", superuser=True))
    listing = client.get(reverse("admin:jobs_webhookdelivery_changelist")).content.decode()
    assert "chart.finished" in listing and "HTTP 500" in listing
    detail = client.get(reverse("admin:jobs_webhookdelivery_change", args=[delivery.pk])).content.decode()
    assert "X-Fairsched-Signature" in detail and json.loads(webhooks.delivery_body(delivery))["id"] == delivery.pk

    response = client.post(reverse("admin:jobs_webhookdelivery_changelist"),
                           {"action": "retry_now", "_selected_action": [delivery.pk]})
    assert response.status_code == 302
    run_jobs()
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.SUCCEEDED, 2)


def test_the_rq_queues_are_linked_from_the_admin(client, redis_url):
    client.force_login(make_user("root", superuser=True))
    index = client.get(reverse("admin:index")).content.decode()
    assert reverse("admin:django_rq_dashboard_changelist") in index
    assert client.get(reverse("admin:django_rq_dashboard_changelist")).status_code == 200
    assert client.get("/admin/rq/").status_code == 200
    assert client.get(reverse("admin:jobs_importjob_add")).status_code == 200
