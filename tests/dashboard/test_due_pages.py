"""Due times where they show: status.json, the dashboard's Due panel, the org page, the chart
page, the admin's filter, and "Prioritise at risk" (one audited action, undone per chart)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from charts import services
from charts.models import Chart
from control import services as control_services
from control.models import AuditEntry
from dashboard.controls import apply_control
from dashboard.simulate import publish_from_db
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
    publish_from_db()
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
                                         due_flagged_at=a.due_at - timedelta(hours=2))  # missed, warned 2 h ahead
    Chart.objects.filter(pk=b.pk).update(state="succeeded", finished_at=b.due_at - timedelta(minutes=5),
                                         due_flagged_at=b.due_at - timedelta(minutes=20))  # warned, met
    Chart.objects.filter(pk=c.pk).update(state="failed", finished_at=c.due_at - timedelta(minutes=5))  # missed
    staff = Client()
    staff.force_login(due_backlog["operator"])
    due = staff.get("/dashboard/accuracy.json").json()["due"]
    assert (due["finished"], due["missed"], due["flagged"]) == (3, 2, 2)
    assert due["recall"] == 0.5 and due["precision"] == 0.5
