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


def test_resubmitting_identical_content_returns_the_chart_already_submitted(producer):
    client, org, wf = producer
    client.post(URL, {"org": org.pk, "workflow": wf.pk, "external_id": "dup", "payload": '{"a": 1}'})
    resp = client.post(URL, {"org": org.pk, "workflow": wf.pk, "external_id": "dup", "payload": '{"a": 1}'}, follow=True)
    chart = Chart.objects.get()
    text = resp.content.decode()
    assert "Already submitted, here it is" in text and f'href="/charts/{chart.pk}/"' in text


def test_same_external_id_with_different_content_is_refused_naming_the_field(producer):
    client, org, wf = producer
    client.post(URL, {"org": org.pk, "workflow": wf.pk, "external_id": "dup", "payload": '{"a": 1}'})
    resp = client.post(URL, {"org": org.pk, "workflow": wf.pk, "external_id": "dup", "payload": '{"a": 2}'})
    assert resp.status_code == 200
    assert "external_id: &#x27;dup&#x27; is already used by chart" in resp.content.decode()
    assert Chart.objects.count() == 1


def test_success_links_to_the_charts_status_and_warns_when_the_org_is_held(producer):
    client, org, wf = producer
    org.weight = 0
    org.save()
    form = client.get(URL).content.decode()
    assert "Acme (held: charts will not start until it is released)" in form
    resp = client.post(URL, {"org": org.pk, "workflow": wf.pk, "external_id": "mrn-9", "payload": "{}"}, follow=True)
    chart = Chart.objects.get()
    text = resp.content.decode()
    assert f'href="/charts/{chart.pk}/"' in text and "see its position and ETA" in text
    assert "Acme is held: mrn-9 will not start until the org is released." in text
    status = client.get(f"/charts/{chart.pk}/")  # a member may open their own chart's status
    assert status.status_code == 200 and "mrn-9" in status.content.decode()


def test_member_cannot_submit_for_another_org(producer):
    client, _, wf = producer
    other = make_org("Other")
    resp = client.post(URL, {"org": other.pk, "workflow": wf.pk, "payload": "{}"})
    assert "Select a valid choice" in resp.content.decode()
    assert not Chart.objects.exists()
