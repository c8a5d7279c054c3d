"""The Due list beyond its first 100 charts: state.json says how many are at risk or late in
all (``due.total``, beside the first ``due.charts``), and ``/dashboard/due.json`` pages them
filtered by org and state, least slack first, from the scheduler's snapshot."""
from __future__ import annotations

import pytest
from django.test import Client

from common import snapshot
from dashboard.simulate import publish_from_db
from tests.factories import make_flagged_backlog

pytestmark = pytest.mark.django_db(transaction=True)


def slack_key(r):
    return (r["slack_s"] if r["slack_s"] is not None else r["due_s"], r["id"])


@pytest.fixture
def flagged(redis_url, operator):
    """Acme: 110 charts late; Beta: 6 late, younger (less late) than Acme's; Cedar, held:
    7 at risk (no ETA, due tomorrow). The first 100 by slack are all Acme's."""
    acme, beta, cedar = make_flagged_backlog()
    publish_from_db()
    c = Client()
    c.force_login(operator)
    return {"acme": acme, "beta": beta, "cedar": cedar, "client": c}


def test_state_json_says_how_many_are_at_risk_or_late_beside_the_first_100(flagged):
    due = flagged["client"].get("/dashboard/state.json").json()["due"]
    assert due["counts"] == {"on_time": 0, "at_risk": 7, "late": 116}
    assert due["total"] == 123 and len(due["charts"]) == 100  # "100 of 123", the keys as they were
    assert {r["org"] for r in due["charts"]} == {flagged["acme"].pk}  # what the cut hides ...
    got = flagged["client"].get("/dashboard/due.json").json()
    assert got["total"] == 123 and [r["id"] for r in got["charts"]] == [r["id"] for r in due["charts"]]


def test_due_json_filters_by_state_and_org_and_pages_least_slack_first(flagged):
    c = flagged["client"]
    risky = c.get("/dashboard/due.json", {"state": "at_risk"}).json()
    assert risky["total"] == 7 and len(risky["charts"]) == 7
    assert {r["state"] for r in risky["charts"]} == {"at_risk"} and {r["org"] for r in risky["charts"]} == {flagged["cedar"].pk}
    beta = c.get("/dashboard/due.json", {"org": flagged["beta"].pk}).json()
    assert beta["total"] == 6 and {r["org"] for r in beta["charts"]} == {flagged["beta"].pk}
    assert c.get("/dashboard/due.json", {"org": flagged["beta"].pk, "state": "at_risk"}).json()["total"] == 0
    late_acme = c.get("/dashboard/due.json", {"org": flagged["acme"].pk, "state": "late", "offset": 100}).json()
    assert late_acme["total"] == 110 and len(late_acme["charts"]) == 10

    # every page of every org, both states: each flagged chart once, least slack first
    pages, offset = [], 0
    while True:
        page = c.get("/dashboard/due.json", {"offset": offset, "limit": 50}).json()
        pages += page["charts"]
        offset += 50
        if offset >= page["total"]:
            break
    everything = [r for o in (flagged["acme"], flagged["beta"], flagged["cedar"]) for r in snapshot.read_due(o.pk)]
    assert len(pages) == 123 and sorted(pages, key=slack_key) == pages
    assert sorted(r["id"] for r in pages) == sorted(r["id"] for r in everything)
    assert pages[100:] == c.get("/dashboard/due.json", {"offset": 100}).json()["charts"]
    late = c.get("/dashboard/due.json", {"state": "late", "offset": 100}).json()
    assert late["total"] == 116 and [r["id"] for r in late["charts"]] == [r["id"] for r in pages[100:116]]


@pytest.mark.parametrize("query, param", [({"state": "soon"}, "state"), ({"org": "x"}, "org"),
                                          ({"offset": -1}, "offset"), ({"limit": 0}, "limit"), ({"limit": 501}, "limit")])
def test_due_json_refuses_a_bad_query_naming_it(flagged, query, param):
    got = flagged["client"].get("/dashboard/due.json", query)
    assert got.status_code == 400 and param in got.json()["errors"]


def test_due_json_is_for_staff(flagged):
    assert Client().get("/dashboard/due.json").status_code in (302, 403)


def test_the_org_page_says_how_many_of_its_flagged_charts_it_lists(flagged):
    from tests.factories import make_user

    alice = make_user("alice")
    flagged["acme"].members.add(alice)
    c = Client()
    c.force_login(alice)
    html = c.get("/orgs/acme/").content.decode()
    table = html[html.index('id="org-due"'):html.index('id="accuracy"')]
    assert table.count("<tr><td>#") == 50
    assert 'id="due-shown">The 50 with the least slack of 110 at risk or late.</p>' in table
