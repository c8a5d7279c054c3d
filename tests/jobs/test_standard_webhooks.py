"""Deliveries are signed as Standard Webhooks says, and verify with its reference library.

Issue 21, item 11: the signature covered the body only, so a captured delivery could be
replayed as it was. The receiver here is ``standardwebhooks`` (PyPI), verifying what the
real stack (the sweep, rq, an HTTP receiver) sent.
"""
from __future__ import annotations

import base64
import importlib
import re
import time

import pytest
from django.apps import apps
from django.core.exceptions import ValidationError
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from charts.models import ChartState
from charts.lifecycle import chart_mark_running, chart_record_outcome
from jobs import tasks, webhooks
from jobs.models import DeliveryStatus, WebhookDelivery
from orgs.models import Org, standard_webhook_secret, webhook_signing_key
from tests.factories import make_chart, make_org, make_workflow

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LEGACY_SECRET = "s3cret-for-tests"  # a secret set before: any text
WHSEC = "whsec_" + base64.b64encode(bytes(range(32))).decode()


def _org(receiver, secret: str) -> Org:
    org = make_org(f"Hooked {secret[:8]}")
    org.webhook_url, org.webhook_secret = receiver.url, secret
    org.full_clean()
    org.save()
    return org


def _finish(org: Org) -> None:
    chart = make_chart(org, make_workflow("code"))
    chart_mark_running(chart_id=chart.pk, cost=1)
    chart_record_outcome(chart_id=chart.pk, state=ChartState.SUCCEEDED)


@pytest.fixture(autouse=True)
def _private(settings):
    settings.FAIRSCHED_WEBHOOK_ALLOW_PRIVATE = True  # the receiver is on 127.0.0.1


@pytest.mark.parametrize("secret, receiver_key", [
    (WHSEC, WHSEC),  # a Standard Webhooks secret, given to the library as it is
    (LEGACY_SECRET, standard_webhook_secret(LEGACY_SECRET)),  # an existing secret, in its whsec_ form
    (LEGACY_SECRET, LEGACY_SECRET.encode()),  # or as raw key bytes
], ids=["whsec", "legacy-as-whsec", "legacy-as-bytes"])
def test_a_delivery_verifies_with_the_standard_webhooks_library(secret, receiver_key, receiver, run_jobs):
    org = _org(receiver, secret)
    _finish(org)
    tasks.sweep()
    sent_from = int(time.time())
    run_jobs()
    sent_by = time.time()
    [req] = receiver.requests
    doc = Webhook(receiver_key).verify(req.body, req.headers)
    delivery = WebhookDelivery.objects.get()
    assert doc["event"] == "chart.finished" and doc["id"] == delivery.pk
    assert req.headers["webhook-id"] == delivery.message_id and delivery.message_id.startswith("msg_")
    # the attempt's own time (bounded by the send, not by "now": CI saw the clock move 60 s in between)
    assert sent_from <= int(req.headers["webhook-timestamp"]) <= sent_by
    with pytest.raises(WebhookVerificationError):
        Webhook(base64.b64encode(b"another key of at least 24 bytes").decode()).verify(req.body, req.headers)


def test_a_retry_keeps_the_id_and_is_signed_at_its_own_time(receiver, run_jobs, settings, monkeypatch):
    settings.FAIRSCHED_WEBHOOK_RETRY_S = [0]
    receiver.statuses = [503, 200]
    org = _org(receiver, WHSEC)
    _finish(org)
    tasks.sweep()
    now = int(time.time())
    stamps = iter([now - 90, now])  # the retry comes 90 s after the first attempt
    monkeypatch.setattr(webhooks, "_timestamp", lambda: next(stamps))
    run_jobs()
    first, second = receiver.requests
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == WebhookDelivery.objects.get().message_id
    assert first.body == second.body
    assert (first.headers["webhook-timestamp"], second.headers["webhook-timestamp"]) == (str(now - 90), str(now))
    for req in (first, second):
        Webhook(WHSEC).verify(req.body, req.headers)
    assert WebhookDelivery.objects.get().status == DeliveryStatus.SUCCEEDED


def test_a_captured_delivery_cannot_be_replayed(receiver, run_jobs, monkeypatch):
    org = _org(receiver, WHSEC)
    monkeypatch.setattr(webhooks, "_timestamp", lambda: int(time.time()) - 400)  # captured 6 min 40 s ago
    _finish(org)
    tasks.sweep()
    run_jobs()
    [req] = receiver.requests
    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(WHSEC).verify(req.body, req.headers)
    fresh = {**req.headers, "webhook-timestamp": str(int(time.time()))}  # a replay with a new time
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(WHSEC).verify(req.body, fresh)
    other = {**req.headers, "webhook-id": "msg_other"}  # or as another message
    with pytest.raises(WebhookVerificationError):
        Webhook(WHSEC).verify(req.body, other)


def test_each_delivery_has_its_own_random_id(receiver, run_jobs):
    org = _org(receiver, WHSEC)
    _finish(org)
    _finish(org)
    tasks.sweep()
    run_jobs()
    ids = [r.headers["webhook-id"] for r in receiver.requests]
    assert len(set(ids)) == 2 and all(re.fullmatch(r"msg_[0-9a-f]{32}", i) for i in ids)  # not the pk


@pytest.mark.parametrize("legacy", [True, False])
def test_the_legacy_signature_is_sent_only_while_enabled(legacy, receiver, run_jobs, settings):
    settings.FAIRSCHED_WEBHOOK_LEGACY_SIGNATURE = legacy
    _finish(_org(receiver, LEGACY_SECRET))
    tasks.sweep()
    run_jobs()
    [req] = receiver.requests
    Webhook(LEGACY_SECRET.encode()).verify(req.body, req.headers)
    if legacy:
        assert webhooks.verify(req.body, LEGACY_SECRET, req.headers["x-fairsched-signature"])
    else:
        assert "x-fairsched-signature" not in req.headers


@pytest.mark.parametrize("secret, message", [
    ("whsec_not base64!", "must be followed by base64"),
    ("whsec_", "a whsec_ secret must encode at least one byte"),
])
def test_a_malformed_whsec_secret_is_refused_naming_the_field(secret, message):
    org = Org(name="Bad Secret", webhook_url="https://hooks.example.com/in", webhook_secret=secret)
    with pytest.raises(ValidationError) as exc:
        org.full_clean()
    [said] = exc.value.message_dict["webhook_secret"]
    assert said.startswith("webhook_secret: ") and message in said
    assert webhooks.refusal(org.webhook_url, secret).startswith("webhook_secret: ")


def test_the_key_of_a_secret_is_what_the_library_reads():
    for secret in (WHSEC, WHSEC.rstrip("="), standard_webhook_secret("any text, ünïcode")):
        assert webhook_signing_key(secret) == Webhook(secret)._whsecret
    assert webhook_signing_key("any text, ünïcode") == "any text, ünïcode".encode()


def test_the_migration_gives_existing_deliveries_distinct_stable_ids(receiver):
    org = _org(receiver, WHSEC)
    for n in range(3):
        WebhookDelivery.objects.create(org=org, event="chart.finished", payload={"n": n})
    WebhookDelivery.objects.update(message_id=None)  # as the rows were before the migration
    migration = importlib.import_module("jobs.migrations.0006_webhook_delivery_message_id")
    migration.fill_existing(apps, None)
    rows = dict(WebhookDelivery.objects.values_list("pk", "message_id"))
    assert rows == {pk: f"msg_legacy_{pk}" for pk in rows}
