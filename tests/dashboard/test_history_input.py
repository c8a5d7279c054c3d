"""What the history and the search do with input they cannot use.

One bad filter must not silently drop the others (``?org=3&since=junk`` showed every
org); a page cursor or a time at the end of the calendar must be a message, not a 500
(the conversion to UTC overflowed in the database adapter); a NUL character in the
search is refused naming ``q``, as ``status.json`` refuses one in ``external_id``.
"""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from charts.models import ChartState
from tests.factories import make_chart, make_org, make_user, make_workflow

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished(db):
    """Acme and Beta, three finished charts each, one minute apart."""
    wf = make_workflow("code")
    acme, beta = make_org("Acme"), make_org("Beta")
    now = timezone.now()
    charts = [make_chart(acme if i % 2 else beta, wf, external_id=f"h-{i}", state=ChartState.SUCCEEDED,
                         started_at=now - timedelta(minutes=10 - i, seconds=30),
                         finished_at=now - timedelta(minutes=10 - i)) for i in range(6)]
    return {"acme": acme, "beta": beta, "charts": charts}


@pytest.fixture
def staff(client):
    client.force_login(make_user("root", superuser=True))
    return client


def _ids(resp) -> list[str]:
    return re.findall(r'<tr data-chart-id="(\d+)"', resp.content.decode())


def _alert(resp) -> str:
    found = re.search(r'<p class="errorlist" role="alert">(.*?)</p>', resp.content.decode(), re.S)
    return found.group(1) if found else ""


@pytest.mark.parametrize("bad,name", [("since=junk", "since"), ("until=junk", "until"), ("state=lost", "state"),
                                      ("workflow=999999", "workflow"), ("since=%00", "since")],
                         ids=["since", "until", "state", "workflow", "nul"])
def test_one_bad_filter_keeps_the_others_and_is_named(finished, staff, bad, name):
    acme = finished["acme"]
    resp = staff.get(f"/dashboard/history/?org={acme.pk}&{bad}")
    assert resp.status_code == 200
    assert _ids(resp) == [str(c.pk) for c in reversed(finished["charts"]) if c.org_id == acme.pk]
    alert = _alert(resp)
    assert alert.startswith(f"{name}: ") and "Not filtered by it" in alert, alert


def test_a_bad_org_keeps_the_time_range(finished, staff):
    charts = finished["charts"]
    since = timezone.localtime(charts[3].finished_at).strftime("%Y-%m-%dT%H:%M:%S")
    resp = staff.get(f"/dashboard/history/?org=nope&since={since}")
    assert _ids(resp) == [str(c.pk) for c in reversed(charts[3:])]
    assert _alert(resp).startswith("org: ")


def test_until_before_since_names_until_and_keeps_since(finished, staff):
    charts = finished["charts"]
    since = timezone.localtime(charts[3].finished_at).strftime("%Y-%m-%dT%H:%M:%S")
    resp = staff.get(f"/dashboard/history/?since={since}&until=2000-01-01")
    assert _ids(resp) == [str(c.pk) for c in reversed(charts[3:])]
    assert _alert(resp).startswith("until: must be after")  # named once, not "until: until: ..."


@pytest.mark.parametrize("cursor", [
    "9999-12-31T23:59:59-23:59_1",         # past year 9999 in UTC
    "0001-01-01T00:00:00+23:59_1",         # before year 1 in UTC
    "2024-01-01T00:00:00+00:00_" + "9" * 30,  # an id no database stores
    "2024-13-01T00:00:00+00:00_1",         # a month that does not exist
    "2024-01-01T00:00:00+00:00_\u00b2",    # a digit that is not 0-9
], ids=["year-10000", "year-0", "huge-id", "month-13", "unicode-digit"])
def test_an_extreme_cursor_is_a_message_not_a_500(finished, staff, cursor):
    resp = staff.get("/dashboard/history/", {"after": cursor})
    assert resp.status_code == 200
    assert _alert(resp).startswith("after: "), _alert(resp)
    assert _ids(resp) == []


def test_a_time_at_the_end_of_the_calendar_in_a_zone_west_of_utc_is_named(finished, staff, settings):
    settings.TIME_ZONE = "America/Los_Angeles"
    resp = staff.get("/dashboard/history/", {"since": "9999-12-31T23:59", "org": finished["acme"].pk})
    assert resp.status_code == 200
    assert _alert(resp).startswith("since: ")
    assert len(_ids(resp)) == 3  # the org is still applied


@pytest.mark.parametrize("q", ["\x00", "h-1\x00", "x" * 201], ids=["nul", "nul-inside", "too-long"])
def test_search_refuses_a_nul_or_an_overlong_query_naming_q(finished, staff, q):
    resp = staff.get("/dashboard/search/", {"q": q})
    assert resp.status_code == 400
    assert "q: " in resp.content.decode()


def test_search_still_finds_after_the_checks(finished, staff):
    chart = finished["charts"][1]
    assert staff.get("/dashboard/search/", {"q": "h-1"}).url == f"/charts/{chart.pk}/"
