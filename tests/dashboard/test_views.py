"""The dashboard and org pages over HTTP: who sees what, the DB fallback, JSON, controls."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from charts.models import Chart
from orgs.models import OrgToken
from dashboard.simulate import publish_from_db
from control.models import SchedulerSettings
from orgs.models import Org, WorkflowCost
from tests.factories import make_chart, make_user

pytestmark = pytest.mark.django_db


def _client(user=None) -> Client:
    c = Client()
    if user is not None:
        c.force_login(user)
    return c


def _initial(response) -> dict:
    html = response.content.decode()
    start = html.index('<script id="initial" type="application/json">') + len('<script id="initial" type="application/json">')
    return json.loads(html[start:html.index("</script>", start)])


# --- who may open the dashboard -----------------------------------------------------------


@pytest.mark.parametrize("who", ["anonymous", "member", "staff_without_perm"])
def test_dashboard_sends_others_to_log_in(two_orgs, redis_url, who):
    user = {"anonymous": None, "member": two_orgs["alice"],
            "staff_without_perm": make_user("plainstaff", staff=True)}[who]
    response = _client(user).get("/dashboard/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/dashboard/")


def test_home_sends_staff_to_dashboard_and_members_to_their_org(two_orgs, viewer):
    assert _client(viewer).get("/")["Location"] == "/dashboard/"
    assert _client(two_orgs["alice"]).get("/")["Location"] == "/orgs/acme/"


def test_home_sends_staff_without_dashboard_permission_to_the_admin(db):
    clerk = make_user("clerk", staff=True, perms=("orgs.view_org",))
    assert _client(clerk).get("/")["Location"] == "/admin/"


def test_home_refuses_a_user_of_no_org(db):
    response = _client(make_user("loner")).get("/")
    assert response.status_code == 403 and b"does not belong to any organisation" in response.content


def test_dashboard_renders_from_the_db_without_a_snapshot(two_orgs, viewer, redis_url):
    Org.objects.filter(pk=two_orgs["b"].pk).update(weight=0)
    Chart.objects.filter(pk=two_orgs["charts_a"][0].pk).update(paused=True)
    response = _client(viewer).get("/dashboard/")
    assert response.status_code == 200
    assert "Waiting for the scheduler" in response.content.decode()
    init = _initial(response)
    assert init["state"]["source"] == "db"
    assert init["state"]["counters"] == {"queued": 5, "ordered": None, "running": 0, "held": 2, "paused": 1,
                                         "blocked": 0}
    assert init["order"]["known"] is False
    assert init["actions"] == []  # a viewer may not act
    assert {o["name"]: o["queued"] for o in init["state"]["orgs"]} == {"Acme": 3, "Beta": 2}


def test_dashboard_counts_blocked_charts_from_the_db(two_orgs, viewer, redis_url):
    WorkflowCost.objects.create(org=two_orgs["a"], workflow=two_orgs["wf"], cost=SchedulerSettings.get().budget + 1)
    init = _initial(_client(viewer).get("/dashboard/"))
    assert init["state"]["counters"]["blocked"] == 3


def test_dashboard_shows_the_published_order(two_orgs, operator, redis_url):
    seq = publish_from_db()
    response = _client(operator).get("/dashboard/")
    init = _initial(response)
    assert init["state"]["source"] == "scheduler" and init["state"]["seq"] == seq
    rows = init["order"]["rows"]
    # Weighted round-robin of A (3) and B (2), weight 1 each, all created in that order.
    assert [r["external_id"] for r in rows] == ["a-0", "b-0", "a-1", "b-1", "a-2"]
    assert [r["pos"] for r in rows] == [0, 1, 2, 3, 4]
    assert set(init["actions"]) >= {"pause", "resume", "hold", "release", "set_budget", "set_cost", "reorder"}


def test_order_json_pages_and_filters_by_org(two_orgs, viewer, redis_url):
    publish_from_db()
    c = _client(viewer)
    page = c.get("/dashboard/order.json?offset=1&limit=2").json()
    assert page["total"] == 5 and [r["external_id"] for r in page["rows"]] == ["b-0", "a-1"]
    only_b = c.get(f"/dashboard/order.json?org={two_orgs['b'].pk}").json()
    assert [r["external_id"] for r in only_b["rows"]] == ["b-0", "b-1"]
    assert [r["pos"] for r in only_b["rows"]] == [1, 3]


def test_order_json_says_unknown_without_a_scheduler(two_orgs, viewer, redis_url):
    page = _client(viewer).get("/dashboard/order.json").json()
    assert page["known"] is False and page["rows"] == []


def test_state_and_plots_json(two_orgs, viewer, redis_url):
    c = _client(viewer)
    assert c.get("/dashboard/state.json").json()["source"] == "db"
    plots = c.get("/dashboard/plots.json").json()
    assert set(plots) >= {"per_minute", "finishes", "depth"}
    assert _client(two_orgs["alice"]).get("/dashboard/plots.json").status_code == 302


# --- controls over HTTP ----------------------------------------------------------------------


def test_control_post_applies_through_the_service_and_needs_the_change_permission(two_orgs, viewer, operator, redis_url):
    chart = two_orgs["charts_a"][0]
    refused = _client(viewer).post("/dashboard/control/", {"action": "pause", "chart": chart.pk})
    assert refused.status_code == 403 and "permission" in refused.json()["errors"]
    assert not Chart.objects.get(pk=chart.pk).paused
    ok = _client(operator).post("/dashboard/control/", {"action": "pause", "chart": chart.pk})
    assert ok.status_code == 200 and ok.json()["ok"] is True
    assert Chart.objects.get(pk=chart.pk).paused


def test_control_post_shows_the_services_refusal(two_orgs, operator, redis_url):
    chart = two_orgs["charts_a"][0]
    c = _client(operator)
    c.post("/dashboard/control/", {"action": "pause", "chart": chart.pk})
    again = c.post("/dashboard/control/", {"action": "pause", "chart": chart.pk})
    assert again.status_code == 400
    assert f"cannot pause chart #{chart.pk}" in again.json()["message"]
    bad = c.post("/dashboard/control/", json.dumps({"action": "set_budget", "budget": -1}),
                 content_type="application/json")
    assert bad.status_code == 400 and bad.json()["errors"] == {"budget": ["budget must be at least 0, got -1."]}


def test_set_policies_control_switches_them_audited_and_refuses_a_bad_value_naming_it(two_orgs, viewer, operator,
                                                                                     redis_url):
    from control.models import AuditEntry
    body = {"action": "set_policies", "share": "work", "quantum_s": "120", "dispatch": "backfill"}
    refused = _client(viewer).post("/dashboard/control/", body)
    assert refused.status_code == 403
    c = _client(operator)
    ok = c.post("/dashboard/control/", json.dumps(body), content_type="application/json")
    assert ok.status_code == 200 and ok.json()["ok"] is True
    assert ok.json()["message"] == "Set the policies: share work, quantum_s 120, dispatch backfill"
    s = SchedulerSettings.get()
    assert (s.share, s.quantum_s, s.dispatch) == ("work", 120.0, "backfill")
    assert AuditEntry.objects.get(action="policies").actor_name == "operator"
    bad = c.post("/dashboard/control/", json.dumps({"action": "set_policies", "dispatch": "eager"}),
                 content_type="application/json")
    assert bad.status_code == 400 and list(bad.json()["errors"]) == ["dispatch"]
    assert SchedulerSettings.get().dispatch == "backfill"
    page = c.get("/dashboard/").content.decode()
    assert 'id="policies-form"' in page and "policy: share work (quantum 120 s), dispatch backfill" in page
    legend = page.split('id="share-legend"', 1)[1].split("</p>", 1)[0].split(">", 1)[1]
    assert legend.startswith("Budget / weight") and "Fairness counts work per round" in legend
    assert "charts per round" not in legend  # the charts share's text is only in the data attribute


def test_control_post_needs_csrf(two_orgs, operator, redis_url):
    c = Client(enforce_csrf_checks=True)
    c.force_login(operator)
    response = c.post("/dashboard/control/", {"action": "hold", "org": two_orgs["a"].pk})
    assert response.status_code == 403
    assert Org.objects.get(pk=two_orgs["a"].pk).weight == 1


# --- org pages and tenant isolation ---------------------------------------------------------------


@pytest.mark.parametrize("published", [False, True], ids=["db", "snapshot"])
def test_member_sees_own_org_and_404_on_others(two_orgs, redis_url, published):
    if published:
        publish_from_db()
    c = _client(two_orgs["alice"])
    page = c.get("/orgs/acme/")
    assert page.status_code == 200
    body = page.content.decode()
    assert "a-0" in body and "b-0" not in body
    assert c.get("/orgs/beta/").status_code == 404
    assert c.get("/orgs/beta/status.json").status_code == 404
    assert c.get("/orgs/nope/").status_code == 404
    data = c.get("/orgs/acme/status.json").json()
    assert {ch["external_id"] for ch in data["charts"]} == {"a-0", "a-1", "a-2"}
    assert data["source"] == ("scheduler" if published else "db")


def test_status_json_gives_positions_etas_and_clear_time(two_orgs, redis_url):
    publish_from_db()
    data = _client(two_orgs["bob"]).get("/orgs/beta/status.json").json()
    assert [(c["external_id"], c["position"]) for c in data["charts"]] == [("b-0", 1), ("b-1", 3)]
    assert all(c["eta"] for c in data["charts"])
    assert data["org"]["clear_at"] is not None and data["org"]["clear_s"] > 0


def test_status_json_token_auth(two_orgs, redis_url):
    _, raw = OrgToken.issue(org=two_orgs["a"], name="billing")
    c = Client()
    ok = c.get("/orgs/acme/status.json", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert ok.status_code == 200 and ok.json()["org"]["slug"] == "acme"
    assert c.get("/orgs/acme/status.json?external_id=a-1", HTTP_AUTHORIZATION=f"Bearer {raw}").json()["total"] == 1
    assert c.get("/orgs/beta/status.json", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 404
    assert c.get("/orgs/acme/status.json", HTTP_AUTHORIZATION="Bearer fso_wrong").status_code == 401
    assert c.get("/orgs/acme/status.json").status_code == 401
    OrgToken.objects.update(revoked=True)
    assert c.get("/orgs/acme/status.json", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401
    assert OrgToken.objects.get().key_hash != raw  # only the hash is stored


def test_org_page_anonymous_goes_to_login(two_orgs):
    assert _client().get("/orgs/acme/")["Location"].startswith("/accounts/login/")


def test_staff_may_open_any_org_page(two_orgs, viewer, redis_url):
    assert _client(viewer).get("/orgs/beta/").status_code == 200


# --- the live admin ------------------------------------------------------------------------------------


def test_chart_admin_shows_position_and_eta_and_org_admin_clear_time(two_orgs, redis_url):
    admin_user = make_user("root", superuser=True)
    publish_from_db()
    c = _client(admin_user)
    charts = c.get("/admin/charts/chart/")
    assert charts.status_code == 200
    body = charts.content.decode()
    assert "Position" in body and "ETA" in body and "(in " in body
    assert 'id="live-counters"' in body
    orgs = c.get("/admin/orgs/org/").content.decode()
    assert "Clear-time" in orgs and "(in " in orgs


def test_admin_token_creation_shows_the_token_once(two_orgs):
    admin_user = make_user("root", superuser=True)
    c = _client(admin_user)
    response = c.post("/admin/orgs/orgtoken/add/", {"org": two_orgs["a"].pk, "name": "erp", "scope": "read"},
                      follow=True)
    assert response.status_code == 200
    token = OrgToken.objects.get()
    assert f"{token.prefix}" in response.content.decode() and "not shown again" in response.content.decode()


def test_orgtoken_command_prints_a_working_token(two_orgs, redis_url):
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("orgtoken", "acme", "erp", stdout=out)
    raw = out.getvalue().strip()
    assert Client().get("/orgs/acme/status.json", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
