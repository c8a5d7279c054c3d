"""The cockpit's server-rendered views (history, search, a chart's page, failures), the
admin's re-run action and activity, and the admin list's sortable Position and ETA."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from charts.models import Chart, ChartState
from charts.services import chart_pause
from dashboard.simulate import publish_from_db
from control.models import AuditEntry
from orgs.services import org_hold
from tests.factories import make_chart, make_org, make_user, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def finished(db):
    """Acme and Beta with finished charts one minute apart, newest last: 7 succeeded, 3 failed, 2 cancelled."""
    code, ocr = make_workflow("code"), make_workflow("ocr")
    acme, beta = make_org("Acme"), make_org("Beta")
    now = timezone.now()
    rows = []
    for i in range(12):
        state = ChartState.FAILED if i % 4 == 1 else ChartState.CANCELLED if i in (6, 10) else ChartState.SUCCEEDED
        at = now - timedelta(minutes=12 - i)
        rows.append(make_chart(acme if i % 2 else beta, ocr if i % 3 == 0 else code, external_id=f"h-{i}", state=state,
                               started_at=at - timedelta(seconds=30), dispatched_at=at - timedelta(seconds=30),
                               finished_at=at, error="Traceback (most recent call last):\nValueError: bad page"
                               if state == ChartState.FAILED else ""))
    return {"charts": rows, "acme": acme, "beta": beta, "code": code, "ocr": ocr}


@pytest.fixture
def staff(client):
    client.force_login(make_user("root", superuser=True))
    return client


def _ids(resp) -> list[str]:
    import re

    return re.findall(r'<tr data-chart-id="(\d+)"', resp.content.decode())


def test_history_pages_by_keyset_newest_first(finished, staff):
    charts = finished["charts"]
    first = staff.get("/dashboard/history/?limit=5")
    assert _ids(first)[:3] == [str(c.pk) for c in reversed(charts)][:3]
    # Walk every page through the "older" links: each chart once, newest first.
    seen, url = [], "/dashboard/history/"
    from dashboard import history

    history.PAGE, old = 5, history.PAGE
    try:
        while url:
            resp = staff.get(url)
            seen += _ids(resp)
            text = resp.content.decode()
            url = None
            if 'id="history-older"' in text:
                href = text.split('id="history-older"')[0].rsplit('href="', 1)[1].split('"')[0]
                url = "/dashboard/history/" + href.replace("&amp;", "&")
    finally:
        history.PAGE = old
    assert seen == [str(c.pk) for c in reversed(charts)]


@pytest.mark.parametrize("query,want", [
    ("state=failed", lambda c: c.state == "failed"),
    ("state=cancelled", lambda c: c.state == "cancelled"),
    ("org={acme}", lambda c: c.org.name == "Acme"),
    ("workflow={ocr}", lambda c: c.workflow.name == "ocr"),
    ("org={acme}&state=failed", lambda c: c.org.name == "Acme" and c.state == "failed"),
], ids=["failed", "cancelled", "org", "workflow", "org-and-state"])
def test_history_filters(finished, staff, query, want):
    q = query.format(acme=finished["acme"].pk, ocr=finished["ocr"].pk)
    assert _ids(staff.get(f"/dashboard/history/?{q}")) == [str(c.pk) for c in reversed(finished["charts"]) if want(c)]


def test_history_time_range_and_bad_input_names_the_field(finished, staff):
    charts = finished["charts"]
    since = timezone.localtime(charts[8].finished_at).strftime("%Y-%m-%dT%H:%M:%S")
    assert _ids(staff.get(f"/dashboard/history/?since={since}")) == [str(c.pk) for c in reversed(charts[8:])]
    bad = staff.get("/dashboard/history/?since=yesterday")
    assert bad.status_code == 200 and "Enter a valid date/time" in bad.content.decode()
    cursor = staff.get("/dashboard/history/?after=nonsense")
    assert "after: &#x27;nonsense&#x27; is not a page cursor" in cursor.content.decode()


def test_history_skips_queued_and_running(finished, staff):
    live = make_chart(finished["acme"], finished["code"], external_id="live")
    assert str(live.pk) not in _ids(staff.get("/dashboard/history/"))


@pytest.mark.parametrize("query", ["h-5", "#{pk}", "{pk}"], ids=["external-id", "hash-id", "bare-id"])
def test_search_opens_the_chart(finished, staff, query):
    chart = finished["charts"][5]
    resp = staff.get("/dashboard/search/", {"q": query.format(pk=chart.pk)})
    assert resp.status_code == 302 and resp.url == f"/charts/{chart.pk}/"


def test_search_finds_live_charts_and_reruns_and_says_when_nothing_matches(finished, staff):
    queued = make_chart(finished["acme"], finished["code"], external_id="q-1")
    assert staff.get("/dashboard/search/", {"q": "q-1"}).url == f"/charts/{queued.pk}/"
    failed = finished["charts"][1]
    staff.post(f"/charts/{failed.pk}/rerun/")
    both = staff.get("/dashboard/search/", {"q": "h-1"})
    assert sorted(_ids(both)) == sorted([str(failed.pk), str(Chart.objects.get(rerun_of=failed).pk)])
    assert "No chart has the external id or chart id" in staff.get("/dashboard/search/", {"q": "nope"}).content.decode()


def test_chart_page_shows_timeline_error_temporal_and_prediction(finished, staff):
    chart = finished["charts"][1]
    text = staff.get(f"/charts/{chart.pk}/").content.decode()
    for piece in ("h-1", "ValueError: bad page", f"/workflows/chart-test-{chart.pk}", "dispatched", "failed",
                  "Predicted vs what happened", "run time", "Re-run as a new chart"):
        assert piece in text, piece


def test_chart_page_timeline_has_operator_actions_and_live_position(finished, staff, redis_url):
    chart = make_chart(finished["acme"], finished["code"], external_id="q-2")
    chart_pause(chart=chart, actor=make_user("ops", staff=True))
    publish_from_db()
    text = staff.get(f"/charts/{chart.pk}/").content.decode()
    assert "Paused q-2 (Acme)" in text and "ops" in text
    assert "paused (set aside)" in text  # its place: set aside, findable


def test_chart_page_renders_the_stored_predictions(finished, staff):
    chart = finished["charts"][0]
    Chart.objects.filter(pk=chart.pk).update(eta_first_at=chart.finished_at - timedelta(minutes=2),
                                             eta_dispatch_at=chart.finished_at - timedelta(seconds=20))
    text = staff.get(f"/charts/{chart.pk}/").content.decode()
    assert "finish, when first placed" in text and "2 min" in text and "finish, at dispatch" in text and "20 s" in text


def test_chart_page_errors_are_eta_minus_actual_as_the_accuracy_panel_says(finished, staff):
    """One sign convention: an ETA 5 s after the actual finish is off by +5 s (ETA − actual,
    the accuracy panel's error), one 20 s before it by −20 s; the page says so."""
    import re

    chart = finished["charts"][0]
    Chart.objects.filter(pk=chart.pk).update(eta_first_at=chart.finished_at + timedelta(seconds=5),
                                             eta_dispatch_at=chart.finished_at - timedelta(seconds=20))
    html = staff.get(f"/charts/{chart.pk}/").content.decode()
    table = html[html.index('id="chart-prediction"'):]
    rows = {re.sub(r"<[^>]+>", "", cells[0]): re.sub(r"<[^>]+>", "", cells[-1]).strip()
            for cells in (re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", tr, re.S)
                          for tr in re.findall(r"<tr>(.*?)</tr>", table[:table.index("</table>")], re.S))}
    assert rows["finish, when first placed"] == "+5 s"
    assert rows["finish, at dispatch"] == "−20 s"
    assert "ETA − actual" in table[:table.index("</div>")]


def test_chart_page_for_members_and_strangers(finished, client):
    chart = finished["charts"][1]  # Acme's
    member = make_user("m")
    finished["acme"].members.add(member)
    chart_pause(chart=make_chart(finished["acme"], finished["code"], external_id="q-m"), actor=make_user("ops"))
    client.force_login(member)
    text = client.get(f"/charts/{chart.pk}/").content.decode()
    assert "h-1" in text and "Re-run" not in text
    paused = client.get(f"/charts/{Chart.objects.get(external_id='q-m').pk}/").content.decode()
    assert "q-m" in paused and "ops" not in paused  # members never see operators' names
    client.force_login(make_user("stranger"))
    assert client.get(f"/charts/{chart.pk}/").status_code == 404


def test_failures_panel_counts_per_org_and_workflow(finished, staff):
    old = make_chart(finished["acme"], finished["ocr"], state=ChartState.FAILED, error="old",
                     finished_at=timezone.now() - timedelta(hours=5))
    resp = staff.get("/dashboard/failures/")
    ctx = resp.context
    assert [c.pk for c in ctx["recent"]] == [c.pk for c in reversed(finished["charts"]) if c.state == "failed"] + [old.pk]
    assert {r["org__name"]: (r["hour"], r["day"]) for r in ctx["by_org"]} == {"Acme": (3, 4)}
    assert {r["workflow__name"]: (r["hour"], r["day"]) for r in ctx["by_workflow"]} == {"code": (2, 2), "ocr": (1, 2)}
    assert "ValueError: bad page" not in resp.content.decode()  # the first line only
    assert "Traceback (most recent call last):" in resp.content.decode()


def test_rerun_needs_add_chart(finished, client):
    viewer = make_user("v", staff=True, perms=("charts.view_chart", "charts.change_chart"))
    client.force_login(viewer)
    chart = finished["charts"][1]
    resp = client.post(f"/charts/{chart.pk}/rerun/", follow=True)
    assert "needs charts.add_chart" in resp.content.decode()
    assert not Chart.objects.filter(rerun_of=chart).exists()


# --- admin -------------------------------------------------------------------------------


def test_admin_bulk_rerun_records_the_user(finished, admin_client):
    failed = [c for c in finished["charts"] if c.state in ("failed", "cancelled")]
    ok = finished["charts"][0]
    resp = admin_client.post("/admin/charts/chart/", {"action": "rerun", "_selected_action": [c.pk for c in failed + [ok]]},
                             follow=True)
    text = resp.content.decode()
    assert f"Re-ran {len(failed)} chart(s)." in text and f"cannot re-run chart #{ok.pk}" in text.lower()
    assert Chart.objects.filter(rerun_of__in=failed).count() == len(failed)
    assert set(AuditEntry.objects.filter(action="rerun").values_list("actor_name", flat=True)) == {"admin"}


def test_admin_org_and_chart_pages_show_their_entries(finished, admin_client):
    acme = finished["acme"]
    org_hold(org=acme, actor=make_user("ops", staff=True))
    text = admin_client.get(f"/admin/orgs/org/{acme.pk}/change/").content.decode()
    assert "Held Acme" in text and "ops" in text
    chart = finished["charts"][1]
    admin_client.post(f"/charts/{chart.pk}/rerun/")
    assert "Re-ran h-1 (Acme)" in admin_client.get(f"/admin/charts/chart/{chart.pk}/change/").content.decode()


def test_admin_chart_list_sorts_by_position_and_eta(admin_client, redis_url):
    wf = make_workflow("code")
    a, b = make_org("A"), make_org("B")
    charts = [make_chart(a, wf, external_id=f"a-{i}") for i in range(3)] + [make_chart(b, wf, external_id=f"b-{i}")
                                                                          for i in range(3)]
    publish_from_db()
    from charts.selectors import read_live_snapshot
    from dashboard.selectors import order_rows

    rows, _ = order_rows(read_live_snapshot())
    fair = [str(r["id"]) for r in rows if r.get("pos") is not None]
    assert fair != [str(c.pk) for c in charts]  # the fair order interleaves A and B

    def listed(o: str) -> list[str]:
        import re

        text = admin_client.get(f"/admin/charts/chart/?o={o}").content.decode()
        return re.findall(r'<th class="field-id"><a href="/admin/charts/chart/(\d+)/change/', text)

    cols = ("id", "external_id", "org", "workflow", "state_flags", "live_position", "live_eta", "created_at")
    pos, eta = cols.index("live_position") + 1, cols.index("live_eta") + 1
    assert listed(str(pos)) == fair
    assert listed(f"-{pos}") == list(reversed(fair))
    finish = {str(r["id"]): r["finish_s"] for r in rows}
    by_eta = listed(str(eta))
    assert sorted(by_eta) == sorted(fair) and [finish[i] for i in by_eta] == sorted(finish.values())


def test_controls_endpoint_records_the_user_and_activity_json_lists_it(finished, client, redis_url):
    op = make_user("op", staff=True, perms=("charts.view_chart", "charts.change_chart"))
    client.force_login(op)
    chart = make_chart(finished["acme"], finished["code"], external_id="q-9")
    resp = client.post("/dashboard/control/", {"action": "pause", "chart": chart.pk})
    assert resp.json()["message"] == "Paused q-9 (Acme)"
    entry = AuditEntry.objects.get(action="pause")
    assert (entry.actor, entry.chart_id, entry.before, entry.after) == (op, chart.pk, {"paused": False}, {"paused": True})
    assert client.get("/dashboard/activity.json").json()["entries"][0]["summary"] == "Paused q-9 (Acme)"
    assert "3 in the last hour" in client.get("/dashboard/").content.decode()
