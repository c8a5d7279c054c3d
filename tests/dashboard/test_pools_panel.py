"""Capacity pools on the web side (issue 43, "Visible everywhere"): the dashboard's Pools panel
in words, a pool's dial through the audited service, and why a chart waits for a pool or at
its org's ceiling on the org page and in status.json. Pools set up in the database through
their services; the snapshot is the scheduler's own (dashboard.simulate.publish_from_db)."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from control.models import AuditEntry, Pool
from dashboard.simulate import publish_from_db
from tests.factories import make_chart, make_org, make_pooled_world, make_user, make_workflow

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def _initial(response) -> dict:
    html = response.content.decode()
    tag = '<script id="initial" type="application/json">'
    start = html.index(tag) + len(tag)
    return json.loads(html[start:html.index("</script>", start)])


@pytest.fixture
def pool_operator(db):
    """Staff who may turn the pools' dials (the admin's change permission on pools)."""
    return make_user("pools-op", staff=True, perms=("charts.view_chart", "fairsched.change_pool"))


def test_the_pools_panel_says_each_pool_its_head_and_each_orgs_ceiling_in_words(viewer, redis_url):
    w = make_pooled_world()
    publish_from_db()
    response = _client(viewer).get("/dashboard/")
    html = response.content.decode()
    assert 'id="pools-panel"' in html and 'id="pools-panel" aria-labelledby="pools-title" tabindex="-1" >' in html
    panel = _initial(response)["state"]["pool_panel"]
    b1 = w["b1"].pk
    assert [(p["name"], p["capacity"], p["in_use"], p["blocked_by"], p["text"]) for p in panel["pools"]] == [
        ("default", 4, 0, None, "pool default (the budget): 0 of 4 in use"),
        ("gpu", 0, 0, None, "pool gpu: capacity 0: every chart that draws on it is blocked"),
        ("llm", 2, 2, b1, f"waiting for pool llm: 2 of 2 in use — chart #{b1} of Beta at the head"),
    ]
    assert [p["budget"] for p in panel["pools"]] == [True, False, False]  # the default's dial is the budget's
    assert [(o["name"], o["text"], o["at_ceiling"], o["waiting"]) for o in panel["orgs"]] == [
        ("Acme", "Acme: llm 1 of 1 (ceiling)", True, f"chart #{w['a1'].pk} waits at its ceiling in pool llm (1 of 1)"),
        ("Beta", "Beta: llm 1", False, None),
    ]
    state = _client(viewer).get("/dashboard/state.json").json()
    assert state["pool_panel"] == panel  # the socket's snapshot message has the same state
    assert state["no_eta"] == "1 blocked: a pool has no room for them"
    beta = next(o for o in state["orgs"] if o["name"] == "Beta")
    assert beta["no_eta"] == "1 blocked: a pool has no room for them"


def test_a_pool_kept_for_a_head_that_waits_for_another_pool_says_so(viewer, redis_url):
    """A chart that waits for gpu keeps llm, which has room, for itself (docs/scheduling.md,
    "Dispatch: head-of-line per pool"): llm's line names the pool it really waits for."""
    from control.services import pool_set
    from orgs.services import workflow_cost_set

    audit = make_workflow("audit")
    acme = make_org("Acme")
    pool_set(name="llm", capacity=2)
    pool_set(name="gpu", capacity=1)
    workflow_cost_set(org=acme, workflow=audit, cost=1, pools={"llm": 1, "gpu": 1})
    make_chart(acme, audit, external_id="r", state="running", dispatched_cost=1)
    head = make_chart(acme, audit, external_id="q")
    publish_from_db()
    pools = {p["name"]: p["text"] for p in _client(viewer).get("/dashboard/state.json").json()["pool_panel"]["pools"]}
    assert pools["gpu"] == f"waiting for pool gpu: 1 of 1 in use — chart #{head.pk} of Acme at the head"
    assert pools["llm"] == f"pool llm: 1 of 2 in use — kept for chart #{head.pk} of Acme, which waits for pool gpu"


def test_no_pools_panel_without_pools(two_orgs, viewer, redis_url):
    publish_from_db()
    response = _client(viewer).get("/dashboard/")
    assert "pool_panel" not in _initial(response)["state"]
    assert 'id="pools-panel" aria-labelledby="pools-title" tabindex="-1" hidden' in response.content.decode()


def test_a_pool_dial_sets_the_capacity_through_the_audited_service(viewer, operator, pool_operator, redis_url):
    make_pooled_world()
    publish_from_db()
    assert "set_pool" in _initial(_client(pool_operator).get("/dashboard/"))["actions"]
    assert "set_pool" not in _initial(_client(viewer).get("/dashboard/"))["actions"]
    for who in (viewer, operator):  # the budget's permission is not the pools'
        refused = _client(who).post("/dashboard/control/", {"action": "set_pool", "pool": "llm", "capacity": 5})
        assert refused.status_code == 403 and "fairsched.change_pool" in refused.json()["message"]
    ok = _client(pool_operator).post("/dashboard/control/", {"action": "set_pool", "pool": "llm", "capacity": 5})
    body = ok.json()
    assert ok.status_code == 200 and body["ok"], body
    assert body["message"] == "Set the capacity of pool llm to 5 (was 2)"
    assert body["event"] == {"kind": "pool", "pool": "llm", "capacity": 5, "action": "set_pool"}
    assert Pool.objects.get(name="llm").capacity == 5
    entry = AuditEntry.objects.filter(action="pool").latest("id")
    assert entry.actor == pool_operator and entry.before == {"pool": "llm", "capacity": 2}
    assert entry.after == {"pool": "llm", "capacity": 5}


@pytest.mark.parametrize("data, field, words", [
    ({"pool": "tpu", "capacity": 3}, "pool", "Unknown pool 'tpu': pools are created in the admin."),
    ({"pool": "default", "capacity": 3}, "pool", "Unknown pool 'default'"),
    ({"pool": ["llm"], "capacity": 3}, "pool", "Unknown pool 'list'"),
    ({"pool": "llm", "capacity": -1}, "capacity", "capacity"),
    ({"pool": "llm", "capacity": "many"}, "capacity", "capacity"),
])
def test_a_pool_dial_refuses_naming_the_field_and_creates_nothing(pool_operator, redis_url, data, field, words):
    make_pooled_world()
    audits = AuditEntry.objects.count()
    refused = _client(pool_operator).post("/dashboard/control/", json.dumps({"action": "set_pool", **data}),
                                          content_type="application/json")
    body = refused.json()
    assert refused.status_code == 400 and field in body["errors"] and words in body["message"], body
    assert sorted(Pool.objects.values_list("name", "capacity")) == [("gpu", 0), ("llm", 2)]
    assert AuditEntry.objects.count() == audits


def test_status_json_and_the_org_page_say_why_a_chart_waits_for_a_pool(redis_url):
    w = make_pooled_world()
    bob, ada = make_user("bob"), make_user("ada")
    w["beta"].members.add(bob)
    w["acme"].members.add(ada)
    publish_from_db()
    beta = _client(bob).get("/orgs/beta/status.json").json()
    waits = {c["external_id"]: c["waits"] for c in beta["charts"]}
    assert waits == {"b-1": "waiting for pool llm (2 of 2 in use)",
                     "b-2": "pool gpu has no room for it: capacity 0", "b-0": None}
    assert beta["org"]["no_eta"] == "1 blocked: a pool has no room for them"
    assert [(u["pool"], u["text"]) for u in beta["org"]["pools"]] == [("llm", "llm 1")]
    acme = _client(ada).get("/orgs/acme/status.json").json()
    assert {c["external_id"]: c["waits"] for c in acme["charts"]} == {
        "a-1": "at its ceiling in pool llm (1 of 1)", "a-0": None}
    assert acme["org"]["pools"] == [{"pool": "llm", "in_use": 1, "max": 1, "min": 0, "at_ceiling": True,
                                     "text": "llm 1 of 1 (ceiling)",
                                     "waiting": "at its ceiling in pool llm (1 of 1)"}]
    assert "Beta" not in json.dumps(acme)  # a member never reads another org's name
    page = _client(ada).get("/orgs/acme/").content.decode()
    assert "Pools in use: llm 1 of 1 (ceiling)" in page and "why it waits" in page


def test_without_pools_status_json_has_no_pool_reasons(two_orgs, redis_url):
    publish_from_db()
    data = _client(two_orgs["bob"]).get("/orgs/beta/status.json").json()
    assert data["org"]["pools"] == [] and all(c["waits"] is None for c in data["charts"])


def test_a_chart_behind_a_pools_head_is_in_line_for_that_pool(redis_url):
    """Head-of-line per pool: Beta's second summary draws on llm, whose head (b-1) waits for
    room, so it is in line for llm; the head is not named (it may be another org's)."""
    w = make_pooled_world()
    make_chart(w["beta"], w["summary"], external_id="b-3", created_at=timezone.now() - timedelta(seconds=30))
    bob = make_user("bob")
    w["beta"].members.add(bob)
    publish_from_db()
    waits = {c["external_id"]: c["waits"] for c in _client(bob).get("/orgs/beta/status.json").json()["charts"]}
    assert waits["b-1"] == "waiting for pool llm (2 of 2 in use)"
    assert waits["b-3"] == "in line for pool llm (2 of 2 in use)"
    assert waits["b-0"] is None  # running


def test_a_charts_own_page_says_why_it_waits_as_its_org_page_does(viewer, redis_url):
    """The chart page (staff, and a member of its org) names the pool or the ceiling a queued
    chart waits for, in the org page's words; a chart that does not wait says nothing."""
    w = make_pooled_world()
    publish_from_db()
    staff = _client(viewer)

    def waits(chart, client=staff):
        html = client.get(f"/charts/{chart.pk}/").content.decode()
        if 'id="chart-waits"' not in html:
            return None
        start = html.index('id="chart-waits">') + len('id="chart-waits">')
        return html[start:html.index("</dd>", start)]

    assert waits(w["b1"]) == "waiting for pool llm (2 of 2 in use)"
    assert waits(w["b2"]) == "pool gpu has no room for it: capacity 0"
    assert waits(w["a1"]) == "at its ceiling in pool llm (1 of 1)"
    assert waits(w["running"][1]) is None  # running: it waits for nothing
    member = make_user("beta-member")
    w["beta"].members.add(member)
    assert waits(w["b1"], _client(member)) == "waiting for pool llm (2 of 2 in use)"
