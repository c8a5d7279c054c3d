"""The web side under hostile input: no traceback, no debug page, no 500; who may do what;
stale data says it is stale. Each test is a row of the poison-proofing issue's table."""
from __future__ import annotations

import json
import time
from urllib.parse import urlencode

import pytest
from django.test import Client

from charts.models import Chart
from dashboard.simulate import publish_from_db
from common.middleware import content_security_policy
from control.models import SchedulerSettings
from orgs.models import Org
from tests.factories import make_user

pytestmark = pytest.mark.django_db


def _client(user=None, **kwargs) -> Client:
    c = Client(**kwargs)
    if user is not None:
        c.force_login(user)
    return c


# --- too-large bodies ---------------------------------------------------------------------------------------


@pytest.fixture
def producer(two_orgs):
    user = make_user("producer", perms=("charts.add_chart",))
    two_orgs["a"].members.add(user)
    return user


@pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on"])
def test_a_3mb_form_body_shows_the_form_again_with_a_message_and_what_was_kept(two_orgs, producer, settings, debug):
    settings.DEBUG = debug
    c = _client(producer, enforce_csrf_checks=True)
    c.get("/charts/new/")
    token = c.cookies["csrftoken"].value
    big = json.dumps({"blob": "x" * (3 * 1024 * 1024)})
    form = {"csrfmiddlewaretoken": token, "org": two_orgs["a"].pk, "workflow": two_orgs["wf"].pk,
            "external_id": "keep-me", "payload": big}
    # As a browser sends a form without enctype: urlencoded.
    resp = c.post("/charts/new/", urlencode(form), content_type="application/x-www-form-urlencoded")
    html = resp.content.decode()
    assert resp.status_code == 200
    assert "Traceback" not in html and "DJANGO_SETTINGS_MODULE" not in html
    assert "Too large: the request was more than" in html
    assert 'value="keep-me"' in html  # the small fields are kept
    assert resp.context["form"].errors["payload"]
    assert not Chart.objects.filter(external_id="keep-me").exists()


def test_a_payload_over_its_own_limit_but_under_the_body_limit_is_a_form_error(two_orgs, producer):
    big = json.dumps({"blob": "x" * (1536 * 1024)})  # 1.5 MB: readable, but over FAIRSCHED_MAX_PAYLOAD_BYTES
    resp = _client(producer).post("/charts/new/", urlencode({
        "org": two_orgs["a"].pk, "workflow": two_orgs["wf"].pk, "external_id": "big", "payload": big}),
        content_type="application/x-www-form-urlencoded")
    assert resp.status_code == 200
    assert "FAIRSCHED_MAX_PAYLOAD_BYTES" in " ".join(resp.context["form"].errors["payload"])
    assert not Chart.objects.filter(external_id="big").exists()


@pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on"])
def test_a_3mb_multipart_form_body_is_a_plain_413_page(two_orgs, producer, settings, debug):
    settings.DEBUG = debug
    resp = _client(producer).post("/charts/new/", {"org": two_orgs["a"].pk, "workflow": two_orgs["wf"].pk,
                                                   "payload": "x" * (3 * 1024 * 1024)})
    html = resp.content.decode()
    assert resp.status_code == 413 and "The request is too large" in html
    assert "Traceback" not in html and "DJANGO_SETTINGS_MODULE" not in html
    assert not Chart.objects.filter(payload__has_key="blob").exists()


@pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on"])
def test_a_too_large_json_body_on_the_controls_is_a_413_json_answer(two_orgs, operator, settings, debug):
    settings.DEBUG = debug
    body = json.dumps({"action": "set_budget", "budget": 5, "pad": "x" * (3 * 1024 * 1024)})
    resp = _client(operator).post("/dashboard/control/", body, content_type="application/json")
    assert resp.status_code == 413
    assert resp.json()["ok"] is False and "too large" in resp.json()["message"]
    assert SchedulerSettings.get().budget == 4


def test_a_too_large_form_body_on_the_controls_is_a_413_json_answer(two_orgs, operator):
    resp = _client(operator).post("/dashboard/control/", {"action": "set_budget", "budget": "x" * (3 * 1024 * 1024)})
    assert resp.status_code == 413 and "too large" in resp.json()["message"]


# --- numbers out of range on /dashboard/control/ --------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "field"),
    [({"action": "set_budget", "budget": 2**31}, "budget"),
     ({"action": "set_budget", "budget": 10**9}, "budget"),
     ({"action": "set_weight", "org": "ORG", "weight": 2**31}, "weight"),
     ({"action": "set_cost", "org": "ORG", "workflow": "WF", "cost": 2**31}, "cost"),
     ({"action": "pause", "chart": 2**63}, "chart"),
     ({"action": "hold", "org": 10**30}, "org"),
     ({"action": "pause", "chart": 1e400}, "chart"),
     ({"action": "set_weight", "org": "ORG", "weight": 1e400}, "weight")],
    ids=["budget-2^31", "budget-1e9", "weight-2^31", "cost-2^31", "chart-2^63", "org-1e30", "chart-inf", "weight-inf"],
)
def test_out_of_range_controls_are_400_naming_the_field(two_orgs, operator, data, field):
    data = {k: two_orgs["a"].pk if v == "ORG" else two_orgs["wf"].pk if v == "WF" else v for k, v in data.items()}
    body = json.dumps(data).replace("Infinity", "1e400")
    resp = _client(operator).post("/dashboard/control/", body, content_type="application/json")
    assert resp.status_code == 400, resp.content
    assert field in resp.json()["errors"]


# --- bad query parameters -------------------------------------------------------------------------------------


@pytest.mark.parametrize("published", [False, True], ids=["no-snapshot", "snapshot"])
@pytest.mark.parametrize(
    ("query", "field"),
    [("external_id=%00", "external_id"), (f"offset={10**29}", "offset"), ("offset=-1", "offset"),
     ("offset=1.5", "offset"), ("limit=abc", "limit"), ("limit=0", "limit"), ("limit=-5", "limit"),
     (f"external_id={'x' * 201}", "external_id")],
    ids=["nul", "offset-1e29", "offset-negative", "offset-float", "limit-text", "limit-0", "limit-negative",
         "external-id-too-long"],
)
def test_bad_status_json_query_is_400_naming_it(two_orgs, redis_url, query, field, published):
    if published:
        publish_from_db()
    resp = _client(two_orgs["alice"]).get(f"/orgs/{two_orgs['a'].slug}/status.json?{query}")
    assert resp.status_code == 400 and field in resp.json()["errors"]


@pytest.mark.parametrize("query", [f"offset={10**29}", "offset=-1", "limit=x", "org=abc", "limit=100000"])
def test_bad_order_json_query_is_400(two_orgs, viewer, redis_url, query):
    assert _client(viewer).get(f"/dashboard/order.json?{query}").status_code == 400


def test_good_queries_still_work(two_orgs, viewer, redis_url):
    publish_from_db()
    assert _client(viewer).get("/dashboard/order.json?offset=1&limit=2").json()["rows"][0]["external_id"] == "b-0"
    data = _client(two_orgs["alice"]).get(f"/orgs/{two_orgs['a'].slug}/status.json?external_id=a-1&limit=5").json()
    assert [c["external_id"] for c in data["charts"]] == ["a-1"]


# --- /admin/rq/ -------------------------------------------------------------------------------------------------


RQ_URLS = ["/admin/rq/", "/admin/rq/queues/0/", "/admin/rq/queues/0/some-job/delete/",
           "/admin/rq/queues/0/some-job/requeue/", "/admin/rq/stats.json", "/admin/django_rq/dashboard/",
           "/admin/django_rq/dashboard/queues/0/"]


@pytest.mark.parametrize("url", RQ_URLS)
def test_staff_without_the_permission_cannot_open_the_rq_queues(redis_url, url):
    staff = make_user("staff", staff=True, perms=("charts.view_chart", "charts.change_chart", "orgs.change_org"))
    resp = _client(staff).get(url)
    assert resp.status_code == 403


@pytest.mark.parametrize("url", ["/admin/rq/", "/admin/rq/queues/0/", "/admin/django_rq/dashboard/"])
def test_superusers_and_the_permission_open_the_rq_queues(redis_url, url):
    assert _client(make_user("root", superuser=True)).get(url).status_code == 200
    ops = make_user("ops", staff=True, perms=("jobs.manage_rq_queues",))
    assert _client(ops).get(url).status_code == 200


def test_anonymous_is_sent_to_log_in_for_the_rq_queues(redis_url):
    resp = _client().get("/admin/rq/")
    assert resp.status_code == 302 and "/login/" in resp.url


def test_the_rq_link_is_not_shown_to_staff_without_the_permission(redis_url):
    index = _client(make_user("staff", staff=True, perms=("charts.view_chart",))).get("/admin/").content.decode()
    assert "/admin/django_rq/dashboard/" not in index


# --- Content-Security-Policy -------------------------------------------------------------------------------------


@pytest.mark.parametrize("page", ["/dashboard/", "/orgs/acme/", "/admin/", "/charts/new/"])
def test_pages_carry_a_same_origin_content_security_policy(two_orgs, operator, redis_url, page):
    user = make_user("root", superuser=True) if page in ("/admin/", "/charts/new/") else operator
    resp = _client(user).get(page)
    assert resp.status_code == 200
    policy = dict(part.strip().split(" ", 1) for part in resp["Content-Security-Policy"].split(";"))
    assert policy["script-src"] == "'self'" and policy["style-src"] == "'self'"
    assert policy["object-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
    html = resp.content.decode()
    assert "<style" not in html and " style=" not in html
    for chunk in html.split("<script")[1:]:  # every script is a file, or a JSON data block
        tag = chunk.split(">", 1)[0]
        assert "src=" in tag or 'type="application/json"' in tag, tag


def test_the_socket_is_allowed_by_the_policy(rf):
    request = rf.get("/dashboard/", HTTP_HOST="localhost:8000")
    assert "connect-src 'self' ws://localhost:8000 wss://localhost:8000" in content_security_policy(request)


# --- stale snapshots ----------------------------------------------------------------------------------------------


def test_a_stale_snapshot_is_not_shown_as_live(two_orgs, viewer, redis_url):
    publish_from_db(now=time.time() - 3600)  # the scheduler's last word, an hour ago
    state = _client(viewer).get("/dashboard/state.json").json()
    assert state["source"] == "db" and state["stale"] is True and state["age_s"] >= 3500
    assert state["counters"]["queued"] == 5  # fresh counts from the database
    order = _client(viewer).get("/dashboard/order.json").json()
    assert order["known"] is False
    status = _client(two_orgs["alice"]).get(f"/orgs/{two_orgs['a'].slug}/status.json").json()
    assert status["source"] == "db" and status["stale"] is True and status["age_s"] >= 3500
    assert all(c["position"] is None and c["eta"] is None for c in status["charts"])
    page = _client(viewer).get("/dashboard/").content.decode()
    assert "Stale: the scheduler's last snapshot is" in page
    org_page = _client(two_orgs["alice"]).get(f"/orgs/{two_orgs['a'].slug}/").content.decode()
    assert "Stale: the scheduler's last snapshot is" in org_page


def test_a_fresh_snapshot_is_live_and_says_its_age(two_orgs, viewer, redis_url):
    publish_from_db()
    state = _client(viewer).get("/dashboard/state.json").json()
    assert state["source"] == "scheduler" and state["stale"] is False and 0 <= state["age_s"] < 3600
    status = _client(two_orgs["alice"]).get(f"/orgs/{two_orgs['a'].slug}/status.json").json()
    assert status["source"] == "scheduler" and status["stale"] is False
    assert "Stale:" not in _client(viewer).get("/dashboard/").content.decode().split('id="stale"')[1][:200]


def test_stale_means_older_than_a_few_eta_intervals(two_orgs, viewer, redis_url, settings):
    from charts import selectors

    SchedulerSettings.get()
    SchedulerSettings.objects.update(eta_interval_s=20.0)
    selectors.forget_interval()
    publish_from_db(now=time.time() - 45)  # younger than 3 x 20 s
    assert _client(viewer).get("/dashboard/state.json").json()["stale"] is False
    publish_from_db(now=time.time() - 75)  # older
    assert _client(viewer).get("/dashboard/state.json").json()["stale"] is True


def test_a_held_org_via_the_controls_still_works(two_orgs, operator, redis_url):
    """The hardening keeps ordinary controls working (the control case of the refusals above)."""
    resp = _client(operator).post("/dashboard/control/", json.dumps({"action": "hold", "org": two_orgs["a"].pk}),
                                  content_type="application/json")
    assert resp.status_code == 200 and Org.objects.get(pk=two_orgs["a"].pk).weight == 0
