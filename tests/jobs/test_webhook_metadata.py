"""Cloud metadata services are never a webhook's destination, even with private networks allowed.

Issue 21, item 11: with FAIRSCHED_WEBHOOK_ALLOW_PRIVATE=1, AWS's IPv6 metadata address
(``fd00:ec2::254``, a unique-local address) and Alibaba's (``100.100.100.200``, in the
shared 100.64.0.0/10 space) were "private" and so allowed; Azure's ``168.63.129.16`` is
not even private.
"""
from __future__ import annotations

import socket

import pytest

from charts.models import ChartState
from charts.lifecycle import chart_mark_running, chart_record_outcome
from jobs import tasks, webhooks
from jobs.models import DeliveryStatus, WebhookDelivery
from tests.factories import make_chart, make_org, make_workflow

METADATA = ["169.254.169.254", "::ffff:169.254.169.254", "fd00:ec2::254", "fd00:ec2::23", "fd20:ce::254",
            "100.100.100.200", "168.63.129.16", "192.0.0.192", "169.254.170.2",
            "2002:a9fe:a9fe::1",  # 6to4 carrying 169.254.169.254
            "64:ff9b::a9fe:a9fe"]  # NAT64 of it


@pytest.mark.parametrize("ip", METADATA)
def test_metadata_addresses_are_refused_even_with_private_networks_allowed(ip, settings):
    settings.FAIRSCHED_WEBHOOK_ALLOW_PRIVATE = True
    with pytest.raises(webhooks.DestinationRefused, match=r"is a cloud metadata address \(.+\); never allowed"):
        webhooks.check_destination(ip, "example")


@pytest.mark.parametrize("ip", ["fd00:1234::254", "100.100.100.201", "10.0.0.1", "2002:0a00:0001::1"])
def test_the_private_networks_around_them_stay_allowed(ip, settings):
    settings.FAIRSCHED_WEBHOOK_ALLOW_PRIVATE = True
    webhooks.check_destination(ip, "example")


@pytest.mark.parametrize("host", ["metadata.google.internal", "METADATA.google.internal.", "metadata",
                                  "instance-data.ec2.internal"])
def test_metadata_names_are_refused_before_any_lookup(host, settings, monkeypatch):
    """Whatever the resolver answers for them (here: loopback, which is allowed)."""
    settings.FAIRSCHED_WEBHOOK_ALLOW_PRIVATE = True
    looked_up = []
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: looked_up.append(a) or
                        [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80))])
    with pytest.raises(webhooks.DestinationRefused, match="is a cloud metadata service; never allowed"):
        webhooks._guarded_connection((host, 80), timeout=1)
    assert looked_up == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("url", ["http://[fd00:ec2::254]/latest/meta-data/", "http://100.100.100.200/latest/meta-data/",
                                 "http://metadata.google.internal/computeMetadata/v1/"])
def test_a_delivery_to_a_metadata_service_fails_at_once_without_retries(url, run_jobs, settings):
    settings.FAIRSCHED_WEBHOOK_ALLOW_PRIVATE = True
    settings.FAIRSCHED_WEBHOOK_RETRY_S = [1, 1]
    settings.FAIRSCHED_WEBHOOK_TIMEOUT_S = 2
    org = make_org("Metadata")
    org.webhook_url, org.webhook_secret = url, "s3cret"
    org.save()
    chart = make_chart(org, make_workflow("code"))
    chart_mark_running(chart_id=chart.pk, cost=1)
    chart_record_outcome(chart_id=chart.pk, state=ChartState.SUCCEEDED)
    tasks.sweep()
    run_jobs()
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.next_retry_at) == (DeliveryStatus.FAILED, 1, None)
    assert delivery.last_error.startswith("refused: webhook destination ") and "never allowed" in delivery.last_error
    assert "cloud metadata" in delivery.last_error
