"""The producer API (/api/v1/, docs/api.md): every endpoint, every error code, idempotency,
isolation between orgs, back-pressure and the hostile inputs the services refuse."""
from __future__ import annotations

import threading
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from api import hooks
from api.models import IdempotencyKey
from charts import services as chart_services
from charts.models import Chart, ChartState
from orgs.models import OrgToken
from dashboard.simulate import publish_from_db
from control.models import AuditEntry
from orgs.models import Workflow
from orgs.services import org_hold
from tests.api.conftest import producer

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"


def _problem(response, status: int) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == PROBLEM
    body = response.json()
    assert body["status"] == status and body["title"] and body["detail"] and "type" in body
    return body


# --- keys ---------------------------------------------------------------------------------


def test_orgtoken_submit_scope_prints_the_key_on_its_last_line(api_world):
    out, err = StringIO(), StringIO()
    call_command("orgtoken", "acme", "pipeline", "--scope", "submit", stdout=out, stderr=err)
    raw = out.getvalue().strip().splitlines()[-1]
    token = OrgToken.objects.get(name="pipeline")
    assert token.scope == "submit" and token.key_hash != raw and raw.startswith("fso_")
    response = Client().post("/api/v1/charts", {"workflow": "code"}, content_type="application/json",
                             HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 201
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_a_key_without_a_scope_reads_and_cannot_submit(api_world):
    call_command("orgtoken", "acme", "erp", stdout=StringIO())
    assert OrgToken.objects.get(name="erp").scope == "read"
    reader = api_world["acme_read"]
    body = _problem(reader.post("/charts", {"workflow": "code"}), 403)
    assert "scope is read" in body["errors"]["Authorization"][0]
    assert reader.get("/status").status_code == 200
    assert Chart.objects.count() == 0
    # and status.json takes a submit key too (submit includes read)
    assert api_world["acme"].client.get("/orgs/acme/status.json").status_code == 200


@pytest.mark.parametrize("header", [None, "Bearer fso_nope", "Basic abc", "Bearer "])
def test_401_without_a_valid_key(api_world, header):
    client = Client(HTTP_AUTHORIZATION=header) if header else Client()
    response = client.get("/api/v1/charts")
    body = _problem(response, 401)
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert "Authorization" in body["errors"]


def test_a_revoked_key_is_refused(api_world):
    acme = api_world["acme"]
    OrgToken.objects.filter(org=acme.org).update(revoked=True)
    _problem(acme.get("/charts"), 401)


# --- endpoints ----------------------------------------------------------------------------


def test_submit_one_chart_201_with_location_and_the_resource(api_world):
    acme = api_world["acme"]
    response = acme.post("/charts", {"workflow": "code", "payload": {"seconds": 30}, "external_id": "mrn-1",
                                     "priority": "false"})
    assert response.status_code == 201
    body = response.json()
    chart = Chart.objects.get()
    assert response["Location"] == f"/api/v1/charts/{chart.pk}" == body["url"]
    assert chart.org == acme.org and chart.payload == {"seconds": 30} and not chart.priority
    assert body["state"] == "queued" and body["position"] is None
    assert body["no_eta"] == "waiting for the scheduler's next pass to place it"
    assert set(body) >= {"id", "external_id", "workflow", "state", "position", "eta", "eta_p90", "created_at",
                         "started_at", "finished_at", "error", "rerun_of"}
    # external_id keeps its own idempotency: same content -> 200 and the same chart; different -> 422
    again = acme.post("/charts", {"workflow": "code", "payload": {"seconds": 30}, "external_id": "mrn-1"})
    assert again.status_code == 200 and again.json()["id"] == chart.pk
    other = _problem(acme.post("/charts", {"workflow": "review", "external_id": "mrn-1"}), 422)
    assert "already used" in other["errors"]["external_id"][0]
    assert Chart.objects.count() == 1


def test_batch_is_all_or_nothing_and_names_the_item(api_world):
    acme = api_world["acme"]
    charts = [{"workflow": "code", "external_id": f"b-{i}"} for i in range(20)]
    charts[12] = {"workflow": "cod"}
    body = _problem(acme.post("/charts/batch", {"charts": charts}), 422)
    assert list(body["errors"]) == ["charts[12].workflow"]
    assert body["errors"]["charts[12].workflow"] == ["charts[12].workflow: unknown workflow 'cod'."]
    assert Chart.objects.count() == 0
    charts[12] = {"workflow": "review", "payload": {"seconds": 1}}
    response = acme.post("/charts/batch", {"charts": charts})
    assert response.status_code == 201
    out = response.json()
    assert out["created"] == 20 and out["existing"] == 0 and len(out["charts"]) == 20
    assert [c["external_id"] for c in out["charts"]][:2] == ["b-0", "b-1"]
    assert Chart.objects.get(pk=out["charts"][12]["id"]).workflow.name == "review"
    # the same again: every chart already there, none created
    charts[12] = {"workflow": "review", "payload": {"seconds": 1}, "external_id": "b-12"}
    Chart.objects.filter(pk=out["charts"][12]["id"]).update(external_id="b-12")
    again = acme.post("/charts/batch", {"charts": charts})
    assert again.status_code == 200 and again.json()["created"] == 0 and again.json()["existing"] == 20
    assert [c["id"] for c in again.json()["charts"]] == [c["id"] for c in out["charts"]]
    dup = _problem(acme.post("/charts/batch", {"charts": [{"workflow": "code", "external_id": "x"},
                                                         {"workflow": "code", "external_id": "x"}]}), 422)
    assert list(dup["errors"]) == ["charts[1].external_id"]
    org_field = _problem(acme.post("/charts/batch", {"charts": [{"workflow": "code", "org": "beta"}]}), 422)
    assert list(org_field["errors"]) == ["charts[0].org"]


def test_batch_over_the_maximum_is_413(api_world, settings):
    settings.FAIRSCHED_API_BATCH_MAX = 5
    body = _problem(api_world["acme"].post("/charts/batch", {"charts": [{"workflow": "code"}] * 6}), 413)
    assert "FAIRSCHED_API_BATCH_MAX" in body["errors"]["charts"][0]


def test_get_a_chart_with_its_place_from_the_snapshot(api_world, redis_url):
    acme = api_world["acme"]
    ids = [acme.post("/charts", {"workflow": "code"}).json()["id"] for _ in range(3)]
    assert acme.get(f"/charts/{ids[0]}").json()["no_eta"] == "waiting for the scheduler's next pass to place it"
    publish_from_db()
    body = acme.get(f"/charts/{ids[1]}").json()
    assert body["position"] == 1 and body["eta"] is not None and body["no_eta"] is None
    # held: the pages' words, no position
    org_hold(org=acme.org)
    publish_from_db()
    held = acme.get(f"/charts/{ids[1]}").json()
    assert held["position"] is None and held["eta"] is None and held["no_eta"] == "held: no ETA"
    # a finished chart
    Chart.objects.filter(pk=ids[2]).update(state=ChartState.FAILED, error="boom")
    failed = acme.get(f"/charts/{ids[2]}").json()
    assert failed["state"] == "failed" and failed["error"] == "boom" and failed["no_eta"].startswith("failed")


def test_the_chart_reads_its_own_field_of_the_snapshot_never_the_whole_order(api_world, redis_url, monkeypatch):
    from common import snapshot as snap

    acme = api_world["acme"]
    cid = acme.post("/charts", {"workflow": "code"}).json()["id"]
    publish_from_db()
    monkeypatch.setattr(snap, "read_order", lambda *a, **k: pytest.fail("read the order"))
    monkeypatch.setattr(snap, "read_order_all", lambda *a, **k: pytest.fail("read the whole order"))
    assert acme.get(f"/charts/{cid}").json()["position"] == 0


def test_list_filters_and_keyset_pages(api_world):
    acme, beta = api_world["acme"], api_world["beta"]
    mine = [acme.post("/charts", {"workflow": "code", "external_id": f"m-{i}"}).json()["id"] for i in range(5)]
    beta.post("/charts", {"workflow": "code", "external_id": "m-1"})
    Chart.objects.filter(pk=mine[0]).update(state=ChartState.SUCCEEDED)
    page = acme.get("/charts", limit=2).json()
    assert [c["id"] for c in page["charts"]] == mine[:-3:-1] and page["next"]
    seen = [c["id"] for c in page["charts"]]
    while page["next"]:
        page = acme.get("/charts", limit=2, cursor=page["next"]).json()
        seen += [c["id"] for c in page["charts"]]
    assert seen == mine[::-1]  # every chart of its own org once, newest first; none of beta's
    assert [c["id"] for c in acme.get("/charts", external_id="m-1").json()["charts"]] == [mine[1]]
    assert [c["id"] for c in acme.get("/charts", state="succeeded").json()["charts"]] == [mine[0]]
    assert "state" in _problem(acme.get("/charts", state="done"), 400)["errors"]
    assert "cursor" in _problem(acme.get("/charts", cursor="abc"), 400)["errors"]
    assert "limit" in _problem(acme.get("/charts", limit=100000), 400)["errors"]
    assert "external_id" in _problem(acme.get("/charts", external_id="a\x00b"), 400)["errors"]


def test_cancel_is_the_cockpits_cancel_with_its_audit_entry(api_world):
    acme = api_world["acme"]
    queued = acme.post("/charts", {"workflow": "code", "external_id": "c-1"}).json()["id"]
    response = acme.post(f"/charts/{queued}/cancel")
    assert response.status_code == 200 and response.json()["state"] == "cancelled"
    entry = AuditEntry.objects.get(chart_id=queued)
    assert entry.action == "cancel" and entry.summary == "Cancelled c-1 (Acme)"
    assert entry.actor_name.startswith("API key fso_")
    body = _problem(acme.post(f"/charts/{queued}/cancel"), 409)
    assert "already cancelled" in body["errors"]["state"][0]
    running = acme.post("/charts", {"workflow": "code"}).json()["id"]
    Chart.objects.filter(pk=running).update(state=ChartState.RUNNING)
    response = acme.post(f"/charts/{running}/cancel")
    assert response.status_code == 202 and response.json()["cancel_requested"] is True


def test_status_is_status_json(api_world):
    acme = api_world["acme"]
    acme.post("/charts", {"workflow": "code", "external_id": "s-1"})
    body = acme.get("/status").json()
    legacy = acme.client.get("/orgs/acme/status.json", {"limit": 100}).json()
    for key in ("source", "org", "total", "charts"):
        assert body[key] == legacy[key]
    assert body["org"]["queued"] == 1
    assert acme.get("/status", external_id="s-1").json()["total"] == 1


def test_openapi_and_the_docs_page(api_world):
    schema = Client().get("/api/v1/openapi.json").json()
    assert {"/api/v1/charts", "/api/v1/charts/batch", "/api/v1/charts/{chart_id}", "/api/v1/charts/{chart_id}/cancel",
            "/api/v1/status"} <= set(schema["paths"])
    responses = schema["paths"]["/api/v1/charts"]["post"]["responses"]
    assert PROBLEM in responses["422"]["content"] and "application/json" in responses["201"]["content"]
    page = Client().get("/api/v1/docs")
    text = page.content.decode()
    assert page.status_code == 200 and "/static/ninja/swagger-ui-bundle.js" in text
    assert "cdn" not in text.lower() and "'unsafe-inline'" not in page["Content-Security-Policy"]


# --- isolation ----------------------------------------------------------------------------


def test_another_orgs_chart_is_a_404_everywhere(api_world):
    acme, beta = api_world["acme"], api_world["beta"]
    theirs = beta.post("/charts", {"workflow": "code"}).json()["id"]
    _problem(acme.get(f"/charts/{theirs}"), 404)
    _problem(acme.post(f"/charts/{theirs}/cancel"), 404)
    assert Chart.objects.get(pk=theirs).state == ChartState.QUEUED
    assert acme.get("/charts").json()["charts"] == []
    assert acme.get("/status").json()["org"]["slug"] == "acme"


@pytest.mark.parametrize("path", ["/charts/0", "/charts/abc", f"/charts/{2**70}", "/nope", "/charts/1/nope"])
def test_404s_are_problems_never_html(api_world, path):
    response = api_world["acme"].get(path)
    _problem(response, 404)


def test_405_is_a_problem(api_world):
    response = api_world["acme"].client.delete("/api/v1/charts/1")
    assert response.status_code == 405 and response["Content-Type"] == PROBLEM


# --- idempotency --------------------------------------------------------------------------


def test_idempotent_replay_returns_the_stored_response_and_makes_no_second_chart(api_world):
    acme = api_world["acme"]
    first = acme.post("/charts", {"workflow": "code"}, **{"Idempotency-Key": "k-1"})
    again = acme.post("/charts", {"workflow": "code"}, **{"Idempotency-Key": "k-1"})
    assert first.status_code == again.status_code == 201
    assert first.content == again.content and first["Location"] == again["Location"]
    assert again["Idempotent-Replayed"] == "true"
    assert Chart.objects.count() == 1
    # the draft's quoted form names the same key; another org's same key is its own
    assert acme.post("/charts", {"workflow": "code"}, **{"Idempotency-Key": '"k-1"'}).content == first.content
    assert api_world["beta"].post("/charts", {"workflow": "code"}, **{"Idempotency-Key": "k-1"}).status_code == 201
    assert Chart.objects.count() == 2
    # a refusal is stored too: the same request gets the same answer
    bad = acme.post("/charts", {"workflow": "nope"}, **{"Idempotency-Key": "k-2"})
    Workflow.objects.create(name="nope")
    assert acme.post("/charts", {"workflow": "nope"}, **{"Idempotency-Key": "k-2"}).content == bad.content


def test_the_same_key_with_another_body_is_422(api_world):
    acme = api_world["acme"]
    acme.post("/charts", {"workflow": "code"}, **{"Idempotency-Key": "k-1"})
    body = _problem(acme.post("/charts", {"workflow": "review"}, **{"Idempotency-Key": "k-1"}), 422)
    assert "Idempotency-Key" in body["errors"] and body["type"].endswith("idempotency-key-reused")
    assert Chart.objects.count() == 1


def test_an_expired_key_runs_again(api_world):
    acme = api_world["acme"]
    acme.post("/charts", {"workflow": "code"}, **{"Idempotency-Key": "k-1"})
    IdempotencyKey.objects.update(expires_at="2000-01-01T00:00:00Z")
    assert acme.post("/charts", {"workflow": "code"}, **{"Idempotency-Key": "k-1"}).status_code == 201
    assert Chart.objects.count() == 2


@pytest.mark.parametrize("value", ["", "x" * 256, "caf\u00e9", "a\tb"])
def test_a_bad_idempotency_key_is_400(api_world, value):
    body = _problem(api_world["acme"].post("/charts", {"workflow": "code"}, **{"Idempotency-Key": value}), 400)
    assert "Idempotency-Key" in body["errors"]


@pytest.mark.django_db(transaction=True)
def test_a_retry_while_the_first_is_in_flight_is_409(api_world, monkeypatch):
    acme = api_world["acme"]
    inside, release = threading.Event(), threading.Event()
    real = chart_services.chart_submit_created

    def slow(**kwargs):
        inside.set()
        assert release.wait(10)
        return real(**kwargs)

    monkeypatch.setattr(chart_services, "chart_submit_created", slow)
    first: list = []
    worker = threading.Thread(target=lambda: first.append(
        acme.post("/charts", {"workflow": "code"}, **{"Idempotency-Key": "race"})))
    worker.start()
    try:
        assert inside.wait(10)
        response = acme.post("/charts", {"workflow": "code"}, **{"Idempotency-Key": "race"})
        body = _problem(response, 409)
        assert response["Retry-After"] == "1" and body["type"].endswith("in-flight")
    finally:
        release.set()
        worker.join(10)
    assert first[0].status_code == 201
    replay = acme.post("/charts", {"workflow": "code"}, **{"Idempotency-Key": "race"})
    assert replay.status_code == 201 and replay.content == first[0].content
    assert Chart.objects.count() == 1


# --- back-pressure ------------------------------------------------------------------------


def test_the_rate_limit_answers_429_with_retry_after(api_world, redis_url, settings):
    settings.FAIRSCHED_API_RATE, settings.FAIRSCHED_API_BURST = 0.5, 2
    acme, beta = api_world["acme"], api_world["beta"]
    assert [acme.get("/charts").status_code for _ in range(2)] == [200, 200]
    response = acme.get("/charts")
    body = _problem(response, 429)
    assert int(response["Retry-After"]) >= 1 and "FAIRSCHED_API_RATE" in body["detail"]
    assert beta.get("/charts").status_code == 200  # per key
    # a rate-limited retry with an Idempotency-Key is not stored: it runs once the bucket refills
    _problem(acme.post("/charts", {"workflow": "code"}, **{"Idempotency-Key": "r"}), 429)
    assert not IdempotencyKey.objects.exists()


def test_the_org_cap_on_queued_charts_answers_429_naming_it(api_world):
    acme = api_world["acme"]
    acme.org.max_queued = 2
    acme.org.save()
    assert acme.post("/charts", {"workflow": "code", "external_id": "q-1"}).status_code == 201
    assert acme.post("/charts", {"workflow": "code"}, **{"Idempotency-Key": "q"}).status_code == 201
    response = acme.post("/charts", {"workflow": "code"})
    body = _problem(response, 429)
    assert "max_queued" in body["errors"] and "cap of 2" in body["detail"] and body["max_queued"] == 2
    assert "Retry-After" in response
    # a resubmission of a chart already there passes; a batch that would pass the cap does not
    assert acme.post("/charts", {"workflow": "code", "external_id": "q-1"}).status_code == 200
    _problem(acme.post("/charts/batch", {"charts": [{"workflow": "code"}]}), 429)
    assert Chart.objects.filter(org=acme.org).count() == 2
    assert api_world["beta"].post("/charts", {"workflow": "code"}).status_code == 201  # no cap there


# --- hostile input ------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "field", "words"), [
    ({"workflow": "code", "payload": {"steps": ["a", "b\x00"]}}, "payload.steps[1]", "NUL"),
    ('{"workflow": "code", "payload": {"x": NaN}}', "payload.x", "NaN"),
    ('{"workflow": "code", "payload": {"x": [1, Infinity]}}', "payload.x[1]", "NaN and Infinity"),
    ({"workflow": "code", "payload": [1, 2]}, "payload", "JSON object"),
    ({"workflow": "code", "payload": "{\"a\": 1"}, "payload", "not valid JSON"),
    ({"workflow": "code", "priority": "maybe"}, "priority", "true or false"),
    ({"workflow": "code", "priority": 2}, "priority", "true or false"),
    ({"workflow": 2**70}, "workflow", "unknown workflow"),
    ({"workflow": True}, "workflow", "unknown workflow"),
    ({"workflow": "code", "external_id": "x" * 201}, "external_id", "longer than 200"),
    ({"workflow": "code", "external_id": "a\x00"}, "external_id", "NUL"),
    ({"workflow": "code", "external_id": True}, "external_id", "text or a whole number"),
    ({"workflow": "code\x00"}, "workflow", "unknown workflow"),
])
def test_hostile_input_is_refused_as_the_services_refuse_it(api_world, body, field, words):
    response = api_world["acme"].post("/charts", body)
    problem = _problem(response, 422)
    assert field in problem["errors"], problem
    assert words in problem["errors"][field][0]
    assert Chart.objects.count() == 0


def test_a_payload_over_the_limit_is_refused_naming_it(api_world, settings):
    settings.FAIRSCHED_MAX_PAYLOAD_BYTES = 1000
    problem = _problem(api_world["acme"].post("/charts", {"workflow": "code", "payload": {"x": "y" * 2000}}), 422)
    assert "FAIRSCHED_MAX_PAYLOAD_BYTES" in problem["errors"]["payload"][0]
    batch = _problem(api_world["acme"].post("/charts/batch", {"charts": [
        {"workflow": "code"}, {"workflow": "code", "payload": {"x": "y" * 2000}}]}), 422)
    assert list(batch["errors"]) == ["charts[1].payload"]


def test_a_body_over_the_limit_is_413_and_a_batch_has_its_own(api_world, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    settings.FAIRSCHED_API_BATCH_MAX_BYTES = 50_000
    acme = api_world["acme"]
    big = {"workflow": "code", "payload": {"x": "y" * 20_000}}
    assert "DATA_UPLOAD_MAX_MEMORY_SIZE" in _problem(acme.post("/charts", big), 413)["detail"]
    # a batch above the request limit but under its own passes the door
    assert acme.post("/charts/batch", {"charts": [{"workflow": "code", "payload": {"x": "y" * 5000}}] * 4}
                     ).status_code == 201
    assert "FAIRSCHED_API_BATCH_MAX_BYTES" in _problem(
        acme.post("/charts/batch", {"charts": [big] * 3}), 413)["detail"]


@pytest.mark.parametrize(("content_type", "body"), [
    ("text/plain", '{"workflow": "code"}'),
    ("application/x-www-form-urlencoded", "workflow=code"),
    ("multipart/form-data; boundary=x", "--x--"),
])
def test_415_for_a_body_that_is_not_json(api_world, content_type, body):
    response = api_world["acme"].client.post("/api/v1/charts", body, content_type=content_type)
    assert "Content-Type" in _problem(response, 415)["errors"]


@pytest.mark.parametrize("raw", [b"{bad", b"\xff\xfe{}", b"[" * 100_000 + b"]" * 100_000, b"1" * 5000])
def test_400_for_a_body_that_is_not_json(api_world, raw):
    response = api_world["acme"].client.post("/api/v1/charts", raw, content_type="application/json")
    assert response.status_code in (400, 422), response.content
    assert response["Content-Type"] == PROBLEM
    assert "body" in response.json()["errors"]


def test_shape_errors_name_the_field(api_world):
    acme = api_world["acme"]
    assert _problem(acme.post("/charts", {}), 422)["errors"] == {"workflow": ["workflow: is required."]}
    assert "prority" in _problem(acme.post("/charts", {"workflow": "code", "prority": True}), 422)["errors"]
    assert "charts" in _problem(acme.post("/charts/batch", {"charts": {"a": 1}}), 422)["errors"]
    assert "charts[0]" in _problem(acme.post("/charts/batch", {"charts": [1]}), 422)["errors"]


# --- the metrics hook ---------------------------------------------------------------------


def test_every_request_reaches_the_hook_once_with_its_route_and_code(api_world):
    heard: list[tuple[str, int]] = []

    def listen(endpoint: str, code: int) -> None:
        heard.append((endpoint, code))

    hooks.connect(listen)
    try:
        acme = api_world["acme"]
        cid = acme.post("/charts", {"workflow": "code"}).json()["id"]
        acme.get(f"/charts/{cid}")
        acme.get("/nope")
        Client().get("/api/v1/charts")
        acme.client.post("/api/v1/charts", "x", content_type="text/plain")
    finally:
        hooks.disconnect(listen)  # only its own: the metrics' listener (ApiConfig.ready) stays
    assert heard == [("POST /api/v1/charts", 201), ("GET /api/v1/charts/{chart_id}", 200), ("unmatched", 404),
                     ("GET /api/v1/charts", 401), ("POST /api/v1/charts", 415)]
