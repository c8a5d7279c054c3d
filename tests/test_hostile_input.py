"""Hostile input is refused at the door, with the field named, on every database.

One test (or one parametrized case) per row of the hostile-input table of the
poison-proofing issue, plus the bounds and spellings around them. The services are
the one gate: the form, the admin, the import, ``chart_submit(_many)`` and the
controls all reach them.
"""
from __future__ import annotations

import json
import math

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from charts.models import Chart
from charts.services import chart_submit, chart_submit_many
from control.models import SchedulerSettings
from control.services import budget_set, scheduler_settings_set
from common.validation import MAX_BUDGET, MAX_COST, MAX_WEIGHT, parse_bool
from jobs import importing
from jobs.services import import_create
from orgs.models import Org, WorkflowCost
from orgs.services import org_set_weight, workflow_cost_set
from tests.factories import make_org, make_user, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def acme(db):
    return make_org("Acme")


@pytest.fixture
def code(db):
    return make_workflow("code")


def _refused(call, field: str) -> str:
    """Run ``call``; it must raise a ValidationError naming ``field``; return its message."""
    with pytest.raises(ValidationError) as exc:
        call()
    assert field in exc.value.message_dict, exc.value.message_dict
    return " ".join(exc.value.message_dict[field])


# --- payloads: size, NUL, NaN ----------------------------------------------------------------------


@pytest.mark.parametrize("megabytes", [5, 50], ids=["5MB", "50MB"])
def test_a_payload_over_the_limit_is_refused_naming_payload(acme, code, megabytes):
    big = {"blob": "x" * (megabytes * 1024 * 1024)}
    message = _refused(lambda: chart_submit(org=acme, workflow=code, payload=big), "payload")
    assert "FAIRSCHED_MAX_PAYLOAD_BYTES" in message
    _refused(lambda: chart_submit_many(charts=[{"org": acme, "workflow": code, "payload": big}]), "charts[0].payload")
    assert not Chart.objects.exists()


def test_the_payload_limit_is_the_setting_in_bytes_of_json(acme, code, settings):
    settings.FAIRSCHED_MAX_PAYLOAD_BYTES = 100
    fits = {"s": "x" * (100 - len('{"s":""}'))}  # exactly 100 bytes of compact JSON
    assert chart_submit(org=acme, workflow=code, payload=fits).payload == fits
    _refused(lambda: chart_submit(org=acme, workflow=code, payload={"s": "x" * 93}), "payload")
    # Multi-byte characters count as their UTF-8 bytes.
    _refused(lambda: chart_submit(org=acme, workflow=code, payload={"s": "é" * 50}), "payload")


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ({"prompt": "a\x00b"}, "payload.prompt"),
        ({"a\x00": 1}, "payload.a\\u0000"),
        ({"steps": [{"ok": "x"}, {"bad": ["\x00"]}]}, "payload.steps[1].bad[0]"),
        ('{"prompt": "a\\u0000b"}', "payload.prompt"),
    ],
    ids=["value", "key", "nested", "json-text-escape"],
)
def test_nul_in_a_payload_is_refused_on_every_database(acme, code, payload, where):
    message = _refused(lambda: chart_submit(org=acme, workflow=code, payload=payload), "payload")
    assert message.startswith(f"{where}: ") and "NUL" in message
    assert not Chart.objects.exists()


@pytest.mark.parametrize("value", ["mrn\x00-1", "\x00"], ids=["inside", "only"])
def test_nul_in_an_external_id_is_refused_on_every_database(acme, code, value):
    assert "NUL" in _refused(lambda: chart_submit(org=acme, workflow=code, external_id=value), "external_id")
    _refused(lambda: chart_submit_many(charts=[{"org": acme, "workflow": code, "external_id": value}]),
             "charts[0].external_id")
    assert not Chart.objects.exists()


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_nan_and_infinity_in_a_payload_blame_the_payload_not_the_external_id(acme, code, number):
    message = _refused(lambda: chart_submit(org=acme, workflow=code, payload={"x": {"y": number}}), "payload")
    assert message.startswith("payload.x.y: ") and "NaN and Infinity" in message
    # As JSON text (Python's json module reads NaN and Infinity).
    text = '{"x": NaN}' if math.isnan(number) else '{"x": %sInfinity}' % ("-" if number < 0 else "")
    _refused(lambda: chart_submit(org=acme, workflow=code, payload=text), "payload")
    assert not Chart.objects.exists()


def test_nan_as_an_external_id_is_refused_naming_it(acme, code):
    _refused(lambda: chart_submit(org=acme, workflow=code, external_id=math.nan), "external_id")
    assert not Chart.objects.exists()


# --- priority -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), ("true", True), ("TRUE", True), ("false", False), ("False", False),
     ("1", True), ("0", False), ("yes", True), ("No", False), (" yes ", True), (None, False), ("", False),
     (1, True), (0, False)],
    ids=repr,
)
def test_priority_spellings_mean_the_same_in_both_entry_points(acme, code, value, expected):
    one = chart_submit(org=acme, workflow=code, external_id="one", priority=value)
    many = chart_submit_many(charts=[{"org": acme, "workflow": code, "external_id": "many", "priority": value}])
    assert one.priority is expected
    assert Chart.objects.get(pk=many.created[0]).priority is expected
    assert parse_bool("priority", value) is expected


@pytest.mark.parametrize("value", ["maybe", "2", 2, 1.0, "truee", [], {}], ids=repr)
def test_an_ambiguous_priority_is_refused_naming_priority_in_both_entry_points(acme, code, value):
    _refused(lambda: chart_submit(org=acme, workflow=code, priority=value), "priority")
    _refused(lambda: chart_submit_many(charts=[{"org": acme, "workflow": code, "priority": value}]),
             "charts[0].priority")
    assert not Chart.objects.exists()


def test_priority_false_as_text_is_not_a_priority_chart(acme, code):
    chart = chart_submit(org=acme, workflow=code, priority="false")
    assert chart.priority is False and chart.prioritized_at is None


# --- upper bounds ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [MAX_BUDGET + 1, 10**9, 2**31, 2**63, 10**30, "9" * 5000],
                         ids=["max+1", "1e9", "2^31", "2^63", "1e30", "5000-digit-text"])
def test_budget_above_the_bound_is_refused_naming_budget(value):
    _refused(lambda: budget_set(budget=value), "budget")
    _refused(lambda: scheduler_settings_set(budget=value), "budget")
    assert SchedulerSettings.get().budget == 4


def test_the_bounds_themselves_are_accepted(acme, code):
    assert budget_set(budget=MAX_BUDGET).budget == MAX_BUDGET
    assert org_set_weight(org=acme, weight=MAX_WEIGHT).weight == MAX_WEIGHT
    assert workflow_cost_set(org=acme, workflow=code, cost=MAX_COST).cost == MAX_COST


@pytest.mark.parametrize("value", [MAX_WEIGHT + 1, 2**31, 2**63], ids=repr)
def test_weight_above_the_bound_is_refused_naming_weight(acme, value):
    _refused(lambda: org_set_weight(org=acme, weight=value), "weight")
    assert Org.objects.get(pk=acme.pk).weight == 1


@pytest.mark.parametrize("value", [MAX_COST + 1, 2**31, 2**63], ids=repr)
def test_cost_above_the_bound_is_refused_naming_cost(acme, code, value):
    _refused(lambda: workflow_cost_set(org=acme, workflow=code, cost=value), "cost")
    assert not WorkflowCost.objects.exists()


@pytest.mark.parametrize("value", [math.inf, math.nan, 1e300, "1e400"], ids=repr)
def test_intervals_must_be_finite_and_bounded(value):
    _refused(lambda: scheduler_settings_set(eta_interval_s=value), "eta_interval_s")


# --- the admin's forms: model validators, then the service ----------------------------------------------


@pytest.fixture
def admin_client(db):
    client = Client()
    client.force_login(make_user("root", superuser=True))
    return client


def test_admin_budget_of_2_to_the_31_is_a_form_error(admin_client):
    obj = SchedulerSettings.get()
    resp = admin_client.post(f"/admin/fairsched/schedulersettings/{obj.pk}/change/",
                             {"budget": str(2**31), "eta_interval_s": "3", "reconcile_interval_s": "5"})
    assert resp.status_code == 200
    assert "budget" in resp.context["adminform"].form.errors
    assert SchedulerSettings.get().budget == 4


def test_admin_org_weight_and_cost_above_the_bound_are_form_errors(admin_client, acme, code):
    resp = admin_client.post(f"/admin/orgs/org/{acme.pk}/change/", {
        "name": "Acme", "slug": "acme", "weight": str(2**31), "webhook_url": "", "webhook_secret": "",
        "webhook_clear_margin_s": "600",
        "costs-TOTAL_FORMS": "1", "costs-INITIAL_FORMS": "0", "costs-MIN_NUM_FORMS": "0", "costs-MAX_NUM_FORMS": "1000",
        "costs-0-workflow": str(code.pk), "costs-0-cost": str(2**31), "costs-0-org": str(acme.pk),
    })
    assert resp.status_code == 200
    assert "weight" in resp.context["adminform"].form.errors
    assert "cost" in resp.context["inline_admin_formsets"][0].formset.forms[0].errors
    assert Org.objects.get(pk=acme.pk).weight == 1 and not WorkflowCost.objects.exists()


def test_admin_chart_with_nan_nul_or_a_non_object_payload_is_a_form_error(admin_client, acme, code):
    for payload in ('{"x": NaN}', '{"x": "a\\u0000"}', "[1, 2]", '"text"'):
        resp = admin_client.post("/admin/charts/chart/add/", {
            "org": acme.pk, "workflow": code.pk, "external_id": "", "payload": payload})
        assert resp.status_code == 200, payload
        assert "payload" in resp.context["adminform"].form.errors, payload
    assert not Chart.objects.exists()


# --- the bulk import ---------------------------------------------------------------------------------------


def _rows(n: int, bad: dict[int, dict]) -> bytes:
    """``n`` JSON rows for Acme; row numbers in ``bad`` (1-based) get those fields."""
    return json.dumps([{"org": "acme", "workflow": "code", "external_id": f"e{i}", **bad.get(i, {})}
                       for i in range(1, n + 1)]).encode()


def test_an_import_row_with_nul_is_reported_and_the_rest_of_its_batch_imported(acme, code):
    data = _rows(30, {16: {"payload": {"note": "a\x00b"}}, 22: {"external_id": "x\x00y"}})
    job = importing.import_run(import_create(filename="nul.json", data=data, batch_size=10).pk)
    assert job.status == "partial"
    assert [e["row"] for e in job.errors] == [16, 22]
    assert "NUL" in job.errors[0]["message"] and "NUL" in job.errors[1]["message"]
    assert (job.created_count, job.error_count) == (28, 2)
    assert Chart.objects.count() == 28


def test_an_import_batch_the_database_refuses_falls_back_to_one_savepoint_per_row(acme, code, monkeypatch):
    """A value that gets past every check (here: the checks are switched off) and that the
    database refuses costs its row only, on SQLite (a CHECK constraint on the JSON) and on
    PostgreSQL (a DataError), and the import goes on."""
    from charts import services

    monkeypatch.setattr(services, "check_json_document", lambda *a, **k: 0, raising=False)
    data = _rows(12, {5: {"payload": {"x": math.nan}}})  # json.dumps writes NaN
    job = importing.import_run(import_create(filename="db.json", data=data, batch_size=10).pk)
    assert [e["row"] for e in job.errors] == [5]
    assert "refused by the database" in job.errors[0]["message"] or "NaN" in job.errors[0]["message"]
    assert (job.status, job.created_count) == ("partial", 11)
    assert Chart.objects.count() == 11


# --- webhooks ---------------------------------------------------------------------------------------------


def test_a_webhook_without_a_secret_is_refused_at_save(acme):
    acme.webhook_url = "https://hooks.example.com/fairsched"
    acme.webhook_secret = ""
    _refused(acme.full_clean, "webhook_secret")
    acme.webhook_secret = "   "
    _refused(acme.full_clean, "webhook_secret")
    acme.webhook_secret = "s3cret"
    acme.full_clean()


def test_admin_refuses_a_webhook_url_without_a_secret(admin_client, acme):
    resp = admin_client.post(f"/admin/orgs/org/{acme.pk}/change/", {
        "name": "Acme", "slug": "acme", "weight": "1", "webhook_url": "https://hooks.example.com/x",
        "webhook_secret": "", "webhook_clear_margin_s": "600",
        "costs-TOTAL_FORMS": "0", "costs-INITIAL_FORMS": "0", "costs-MIN_NUM_FORMS": "0", "costs-MAX_NUM_FORMS": "1000",
    })
    assert resp.status_code == 200 and "webhook_secret" in resp.context["adminform"].form.errors
    assert Org.objects.get(pk=acme.pk).webhook_url == ""


def test_an_unpaired_surrogate_is_refused_naming_the_field(acme, code):
    """PostgreSQL refuses one in JSON and in text; SQLite would keep it: refused on both."""
    _refused(lambda: chart_submit(org=acme, workflow=code, payload={"s": "a\ud800b"}), "payload")
    _refused(lambda: chart_submit(org=acme, workflow=code, payload='{"s": "\\ud800"}'), "payload")
    _refused(lambda: chart_submit(org=acme, workflow=code, external_id="x\udfff"), "external_id")
    assert not Chart.objects.exists()


def test_a_literal_backslash_u0000_is_ordinary_text(acme, code):
    chart = chart_submit(org=acme, workflow=code, payload={"s": "\\u0000 is how JSON writes NUL"})
    assert Chart.objects.get(pk=chart.pk).payload == {"s": "\\u0000 is how JSON writes NUL"}
