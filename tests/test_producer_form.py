"""The producer's form at /charts/new/."""
from __future__ import annotations

import pytest

from charts.models import Chart
from tests.factories import make_org, make_user, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/charts/new/"


def test_login_required(client):
    resp = client.get(URL)
    assert resp.status_code == 302 and resp.url.startswith("/accounts/login/")


def test_permission_required(client):
    client.force_login(make_user("nobody"))
    assert client.get(URL).status_code == 403


@pytest.fixture
def producer(client):
    user = make_user("producer", perms=("charts.add_chart",))
    org = make_org("Acme")
    org.members.add(user)
    client.force_login(user)
    return client, org, make_workflow("code")


def test_submit_one_chart(producer, capture_notifications):
    client, org, wf = producer
    resp = client.post(URL, {"org": org.pk, "workflow": wf.pk, "external_id": "mrn-1", "payload": '{"seconds": 5}'},
                       follow=True)
    chart = Chart.objects.get()
    assert (chart.org, chart.external_id, chart.payload) == (org, "mrn-1", {"seconds": 5})
    assert "it is queued" in resp.content.decode()
    assert {"kind": "chart", "id": chart.pk} in capture_notifications


@pytest.mark.parametrize(
    ("payload", "message"),
    [("{broken", "Payload is not valid JSON"), ("[1]", "Payload must be a JSON object")],
    ids=["malformed", "not-an-object"],
)
def test_bad_payload_is_shown_in_the_form(producer, payload, message):
    client, org, wf = producer
    resp = client.post(URL, {"org": org.pk, "workflow": wf.pk, "payload": payload})
    assert resp.status_code == 200 and message in resp.content.decode()
    assert not Chart.objects.exists()


def test_unknown_workflow_is_shown_in_the_form(producer):
    client, org, _ = producer
    resp = client.post(URL, {"org": org.pk, "workflow": 999, "payload": "{}"})
    assert "Select a valid choice" in resp.content.decode()
    assert not Chart.objects.exists()


def test_duplicate_external_id_is_shown_in_the_form(producer):
    client, org, wf = producer
    client.post(URL, {"org": org.pk, "workflow": wf.pk, "external_id": "dup", "payload": "{}"})
    resp = client.post(URL, {"org": org.pk, "workflow": wf.pk, "external_id": "dup", "payload": "{}"})
    assert "already has a chart with external id" in resp.content.decode()
    assert Chart.objects.count() == 1


def test_member_cannot_submit_for_another_org(producer):
    client, _, wf = producer
    other = make_org("Other")
    resp = client.post(URL, {"org": other.pk, "workflow": wf.pk, "payload": "{}"})
    assert "Select a valid choice" in resp.content.decode()
    assert not Chart.objects.exists()
