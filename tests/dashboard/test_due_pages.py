"""Due times where they show: status.json, the dashboard's Due panel, the org page, the chart
page, the admin's filter, and "Prioritise at risk" (one audited action, undone per chart)."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db.models import F
from django.test import Client
from django.utils import timezone

from charts import services
from charts.models import Chart
from control import services as control_services
from control.models import AuditEntry
from dashboard.controls import apply_control
from dashboard.simulate import publish_from_db
from dashboard.templatetags import cockpit
from orgs import services as org_services
from tests.factories import make_org, make_user, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def due_backlog(redis_url, operator):
    """Acme: 30-minute turnaround, six 600 s charts, budget 1 (the default): the first
    two on time, the last ones late. Beta: no due times."""
    control_services.budget_set(budget=1)
    wf = make_workflow("code")
    acme, beta = make_org("Acme"), make_org("Beta")
    org_services.org_set_turnaround(org=acme, turnaround="30m")
    charts = [services.chart_submit(org=acme, workflow=wf, external_id=f"a-{i}") for i in range(6)]
    services.chart_submit(org=beta, workflow=wf, external_id="b-0")
    alice = make_user("alice")
    acme.members.add(alice)
    # The slack is counted from the publication: the time the seven submissions took (over
    # half a second once, on a loaded CI machine) would take it below "20 min". Moved
    # forward together to just before it, the charts keep their order and due times.
    shift = timezone.now() - charts[0].created_at
    Chart.objects.update(created_at=F("created_at") + shift, due_at=F("due_at") + shift)
    publish_from_db()
    charts = [Chart.objects.get(pk=c.pk) for c in charts]
    return {"acme": acme, "beta": beta, "charts": charts, "alice": alice, "operator": operator}


def test_status_json_and_the_pages_show_the_due_times(due_backlog):
    c = Client()
    c.force_login(due_backlog["alice"])
    got = c.get("/orgs/acme/status.json").json()
    states = [ch["due_state"] for ch in got["charts"]]
    assert states.count("late") >= 1 and all(s in ("on_time", "at_risk", "late") for s in states)
    assert all(ch["due_at"] and ch["slack_s"] is not None for ch in got["charts"])
    assert got["org"]["turnaround_s"] == 1800 and sum(got["org"]["due"].values()) == 6
    page = c.get("/orgs/acme/").content.decode()
    assert 'id="org-due"' in page and "late" in page
    chart = due_backlog["charts"][-1]
    staff = Client()
    staff.force_login(due_backlog["operator"])
    assert 'id="chart-due-state"' in staff.get(f"/charts/{chart.pk}/").content.decode()
    dash = staff.get("/dashboard/state.json").json()
    assert dash["due"]["counts"]["late"] >= 1 and dash["due"]["charts"][0]["org"] == due_backlog["acme"].pk
    assert 'id="due-panel"' in staff.get("/dashboard/").content.decode()


def _slack_text(client, chart) -> str:
    html = client.get(f"/charts/{chart.pk}/").content.decode()
    m = re.search(r'<span[^>]*id="chart-slack"[^>]*>([^<]*)</span>', html)
    assert m, "the chart page shows no slack"
    return m.group(1)


def test_the_chart_page_words_the_slack(due_backlog):
    """The due time minus the ETA, in words as the pages word durations: 600 s charts one
    after the other against a 30-minute turnaround are 20 min ahead, then 20 min behind for
    each chart before them; a finished chart's is against the time it finished."""
    staff = Client()
    staff.force_login(due_backlog["operator"])
    first, _, third, _, _, last = due_backlog["charts"]
    assert _slack_text(staff, first) == "20 min to spare"
    assert _slack_text(staff, third) == "late by 20 min"
    assert _slack_text(staff, last) == "late by 1 h 20 min"
    Chart.objects.filter(pk=first.pk).update(state="succeeded", finished_at=first.due_at - timedelta(minutes=10))
    Chart.objects.filter(pk=third.pk).update(state="succeeded", finished_at=third.due_at + timedelta(minutes=25))
    Chart.objects.filter(pk=last.pk).update(state="failed", finished_at=last.due_at - timedelta(minutes=5))
    assert _slack_text(staff, first) == "met with 10 min to spare"
    assert _slack_text(staff, third) == "missed by 25 min"
    assert _slack_text(staff, last) == "ended 5 min before it was due"  # failed: missed all the same


def test_a_chart_without_an_eta_has_no_slack(due_backlog):
    staff = Client()
    staff.force_login(due_backlog["operator"])
    chart = due_backlog["charts"][1]
    services.chart_pause(chart=chart.pk)
    publish_from_db()
    assert _slack_text(staff, chart) == "no ETA, so no slack"
    assert 'id="chart-due-state">at_risk<' in staff.get(f"/charts/{chart.pk}/").content.decode()


@pytest.mark.parametrize("seconds, state, words", [
    (7800, None, "2 h 10 min to spare"), (-1500, "late", "late by 25 min"), (45, "at_risk", "45 s to spare"),
    (-0.2, "late", "late by under 1 s"), (0, "on_time", "under 1 s to spare"),
    (600, "met", "met with 10 min to spare"), (-90, "missed", "missed by 1 min 30 s"), (None, None, ""),
])
def test_the_slack_in_words(seconds, state, words):
    assert cockpit.slack(seconds, state) == words


def test_prioritise_at_risk_is_one_audited_action_undone_per_chart(due_backlog):
    op = due_backlog["operator"]
    out = apply_control(op, {"action": "prioritize_at_risk", "org": due_backlog["acme"].pk})
    assert out.ok, out.errors
    prioritised = set(Chart.objects.filter(priority=True).values_list("pk", flat=True))
    assert prioritised and prioritised <= {c.pk for c in due_backlog["charts"]}
    entry = AuditEntry.objects.get(action="prioritize_at_risk")
    assert entry.org_id == due_backlog["acme"].pk and sorted(entry.after["charts"]) == sorted(prioritised)
    again = apply_control(op, {"action": "prioritize_at_risk", "org": due_backlog["acme"].pk})
    assert again.ok and AuditEntry.objects.filter(action="prioritize_at_risk").count() == 1  # nothing left to do
    for pk in prioritised:
        assert apply_control(op, {"action": "unprioritize", "chart": pk}).ok
    assert not Chart.objects.filter(priority=True).exists()
    refused = apply_control(make_user("viewer2", staff=True, perms=("charts.view_chart",)),
                            {"action": "prioritize_at_risk", "org": due_backlog["acme"].pk})
    assert not refused.ok and "permission" in refused.errors


def test_the_admin_filters_charts_by_due(due_backlog):
    admin = make_user("root", staff=True, superuser=True)
    c = Client()
    c.force_login(admin)
    done = due_backlog["charts"][0]
    Chart.objects.filter(pk=done.pk).update(state="succeeded", finished_at=done.due_at + timedelta(minutes=1))
    page = c.get("/admin/charts/chart/", {"due": "missed"}).content.decode()
    assert f"/admin/charts/chart/{done.pk}/change/" in page
    assert f"/admin/charts/chart/{due_backlog['charts'][1].pk}/change/" not in page
    none = c.get("/admin/charts/chart/", {"due": "none"}).content.decode()
    assert "b-0" in none and "a-1" not in none
    assert c.get("/admin/charts/chart/", {"due": "overdue"}).status_code == 200
    assert timezone.now()  # (the filter reads the clock)


def test_accuracy_json_gives_the_due_warnings_recall_and_precision(due_backlog):
    a, b, c = due_backlog["charts"][:3]
    Chart.objects.filter(pk=a.pk).update(state="succeeded", finished_at=a.due_at + timedelta(minutes=5),
                                         due_flagged_at=a.due_at - timedelta(hours=2),  # missed, warned 2 h ahead
                                         due_late_at=a.due_at - timedelta(minutes=90))  # and late 1.5 h ahead
    Chart.objects.filter(pk=b.pk).update(state="succeeded", finished_at=b.due_at - timedelta(minutes=5),
                                         due_flagged_at=b.due_at - timedelta(minutes=20))  # warned, met
    Chart.objects.filter(pk=c.pk).update(state="failed", finished_at=c.due_at - timedelta(minutes=5))  # missed
    staff = Client()
    staff.force_login(due_backlog["operator"])
    due = staff.get("/dashboard/accuracy.json").json()["due"]
    assert (due["finished"], due["missed"], due["flagged"]) == (3, 2, 2)
    assert due["recall"] == 0.5 and due["precision"] == 0.5
    late = due["late"]  # the late warning: only a, which missed
    assert (late["finished"], late["missed"], late["flagged"]) == (3, 2, 1)
    assert late["recall"] == 0.5 and late["precision"] == 1.0 and late["lead_median_s"] == 5400


def test_the_org_page_shows_the_slack_signed_and_the_state_in_words(due_backlog):
    """The member's page shows each flagged chart's slack as the dashboard's Due panel does,
    signed (a late chart's is negative: "−20 min"), and its state in words ("at risk"), never
    the raw ``at_risk``."""
    from common import snapshot

    c = Client()
    c.force_login(due_backlog["alice"])
    html = c.get("/orgs/acme/").content.decode()
    table = html[html.index('id="org-due"'):]
    flagged = snapshot.read_due(due_backlog["acme"].pk)
    assert any(r["state"] == "late" for r in flagged)
    for r in flagged:
        row = re.search(rf"<tr><td>#{r['id']}\b.*?</tr>", table, re.S).group(0)
        cells = [re.sub(r"<[^>]+>", "", td).strip() for td in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        assert cells[2] == {"late": "late", "at_risk": "at risk"}[r["state"]]
        assert cells[3] == cockpit.due_slack(r["slack_s"])
        if r["state"] == "late":
            assert cells[3].startswith("−"), cells
    assert "at_risk" not in re.sub(r'class="[^"]*"', "", table[:table.index("</section>")])
    assert [cockpit.due_slack(s) for s in (-7560, -1200, 0, 180, 5400, None)] == [
        "−2.1 h", "−20 min", "0 min", "3 min", "1.5 h", "no ETA"]  # the Due panel's format (due.js)
