"""The operator's admin: every change goes through the services (so the scheduler hears of it),
and invalid values get a message a person can act on, with nothing written."""
from __future__ import annotations

import pytest
from django.urls import reverse

from charts.models import Chart, ChartState
from control.models import SchedulerSettings
from orgs.models import Org, WorkflowCost
from tests.factories import make_chart, make_cost, make_org, make_user, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


def changelist_post(client, url: str, rows: list[dict], prefix: str = "form"):
    data = {f"{prefix}-TOTAL_FORMS": len(rows), f"{prefix}-INITIAL_FORMS": len(rows), "_save": "Save"}
    for i, row in enumerate(rows):
        for k, v in row.items():
            data[f"{prefix}-{i}-{k}"] = v
    return client.post(url, data, follow=True)


def test_org_changelist_shows_held_badge_and_counts(admin_client):
    busy, held = make_org("Busy", weight=2), make_org("Parked", weight=0)
    make_chart(busy), make_chart(busy), make_chart(busy, state=ChartState.RUNNING), make_chart(held)
    page = admin_client.get(reverse("admin:orgs_org_changelist")).content.decode()
    assert ">held<" in page
    row = page[page.index("Busy"):page.index("Parked")]
    assert '<td class="field-queued_count">2</td>' in row and '<td class="field-running_count">1</td>' in row


def test_weight_edited_in_the_list_goes_through_the_service(admin_client, capture_notifications):
    org = make_org("Acme", weight=1)
    capture_notifications.clear()
    resp = changelist_post(admin_client, reverse("admin:orgs_org_changelist"), [{"id": org.pk, "weight": 4}])
    assert resp.status_code == 200
    assert Org.objects.get(pk=org.pk).weight == 4
    assert {"kind": "org", "id": org.pk} in capture_notifications


def test_org_added_in_the_admin_notifies_the_scheduler(admin_client, capture_notifications):
    resp = admin_client.post(reverse("admin:orgs_org_add"), {
        "name": "Newco", "slug": "", "weight": 2, "webhook_url": "", "webhook_secret": "",
        "webhook_clear_margin_s": 300,
        "costs-TOTAL_FORMS": 0, "costs-INITIAL_FORMS": 0}, follow=True)
    assert resp.status_code == 200, resp.content.decode()[:500]
    org = Org.objects.get(name="Newco")
    assert {"kind": "org", "id": org.pk} in capture_notifications


def test_negative_weight_in_the_list_is_refused_with_a_message(admin_client, capture_notifications):
    org = make_org("Acme", weight=3)
    capture_notifications.clear()
    resp = changelist_post(admin_client, reverse("admin:orgs_org_changelist"), [{"id": org.pk, "weight": -2}])
    assert "Ensure this value is greater than or equal to 0" in resp.content.decode()
    assert Org.objects.get(pk=org.pk).weight == 3
    assert capture_notifications == []


def test_hold_and_release_actions(admin_client, capture_notifications):
    org = make_org("Acme", weight=3)
    url = reverse("admin:orgs_org_changelist")
    admin_client.post(url, {"action": "hold_orgs", "_selected_action": [org.pk]}, follow=True)
    assert Org.objects.get(pk=org.pk).weight == 0
    resp = admin_client.post(url, {"action": "release_orgs", "_selected_action": [org.pk]}, follow=True)
    assert Org.objects.get(pk=org.pk).weight == 3
    assert "Released 1 org(s)." in resp.content.decode()
    assert [n for n in capture_notifications if n["kind"] == "org"] == [{"kind": "org", "id": org.pk}] * 2


def org_change_data(org: Org, costs: list[dict], initial: int = 0) -> dict:
    data = {"name": org.name, "slug": org.slug, "weight": org.weight, "webhook_url": "", "webhook_secret": "",
            "webhook_clear_margin_s": 600, "costs-TOTAL_FORMS": len(costs), "costs-INITIAL_FORMS": initial,
            "costs-MIN_NUM_FORMS": 0, "costs-MAX_NUM_FORMS": 1000, "_save": "Save"}
    for i, row in enumerate(costs):
        for k, v in row.items():
            data[f"costs-{i}-{k}"] = v
    return data


def test_workflow_cost_inline_sets_cost_through_the_service(admin_client, capture_notifications):
    org, wf = make_org("Acme"), make_workflow("code")
    capture_notifications.clear()
    resp = admin_client.post(reverse("admin:orgs_org_change", args=[org.pk]),
                             org_change_data(org, [{"workflow": wf.pk, "cost": 3}]), follow=True)
    assert resp.status_code == 200
    assert WorkflowCost.objects.get(org=org, workflow=wf).cost == 3
    assert {"kind": "cost", "org": org.pk, "workflow": wf.pk} in capture_notifications


def test_workflow_cost_zero_is_refused_in_the_inline(admin_client):
    org, wf = make_org("Acme"), make_workflow("code")
    resp = admin_client.post(reverse("admin:orgs_org_change", args=[org.pk]),
                             org_change_data(org, [{"workflow": wf.pk, "cost": 0}]))
    assert "Ensure this value is greater than or equal to 1" in resp.content.decode()
    assert not WorkflowCost.objects.exists()


def test_workflow_cost_delete_in_the_inline(admin_client, capture_notifications):
    org, wf = make_org("Acme"), make_workflow("code")
    row = make_cost(org, wf, 3)
    data = org_change_data(org, [{"id": row.pk, "org": org.pk, "workflow": wf.pk, "cost": 3, "DELETE": "on"}], initial=1)
    admin_client.post(reverse("admin:orgs_org_change", args=[org.pk]), data, follow=True)
    assert not WorkflowCost.objects.exists()
    assert {"kind": "cost", "org": org.pk, "workflow": wf.pk} in capture_notifications


def test_chart_changelist_filters_and_search(admin_client):
    a, b = make_org("Alpha"), make_org("Beta")
    make_chart(a, external_id="find-me"), make_chart(b, external_id="other", paused=True)
    url = reverse("admin:charts_chart_changelist")
    assert "find-me" in admin_client.get(url, {"q": "find-me"}).content.decode()
    assert "other" not in admin_client.get(url, {"q": "find-me"}).content.decode()
    page = admin_client.get(url, {"paused__exact": "1"}).content.decode()
    assert "other" in page and "find-me" not in page
    for params in ({"org__id__exact": a.pk}, {"state": "queued"}, {"priority__exact": "0"}, {"workflow__id__exact": 1}):
        assert admin_client.get(url, params).status_code == 200


@pytest.mark.parametrize(
    ("action", "setup", "check"),
    [
        ("pause", {}, lambda c: c.paused),
        ("resume", {"paused": True}, lambda c: not c.paused),
        ("prioritize", {}, lambda c: c.priority and c.prioritized_at is not None),
        ("unprioritize", {"priority": True}, lambda c: not c.priority),
        ("cancel", {}, lambda c: c.state == ChartState.CANCELLED),
        ("move_to_front", {}, lambda c: c.moved_to_front_at is not None),
    ],
    ids=["pause", "resume", "prioritize", "unprioritize", "cancel", "move_to_front"],
)
def test_chart_actions(admin_client, capture_notifications, action, setup, check):
    chart = make_chart(make_org(), **setup)
    capture_notifications.clear()
    admin_client.post(reverse("admin:charts_chart_changelist"), {"action": action, "_selected_action": [chart.pk]})
    assert check(Chart.objects.get(pk=chart.pk))
    assert capture_notifications == [{"kind": "chart", "id": chart.pk}]


def test_refused_chart_action_shows_why(admin_client):
    chart = make_chart(make_org(), state=ChartState.RUNNING)
    resp = admin_client.post(reverse("admin:charts_chart_changelist"),
                             {"action": "pause", "_selected_action": [chart.pk]}, follow=True)
    assert f"cannot pause chart #{chart.pk}: it is running" in resp.content.decode().lower()
    assert not Chart.objects.get(pk=chart.pk).paused


def test_chart_timing_fields_are_read_only(admin_client):
    chart = make_chart(make_org())
    page = admin_client.get(reverse("admin:charts_chart_change", args=[chart.pk])).content.decode()
    assert 'name="created_at"' not in page and 'name="state"' not in page and "Dispatched at" in page


def test_chart_added_in_the_admin_goes_through_chart_submit(admin_client, capture_notifications):
    org, wf = make_org(), make_workflow()
    resp = admin_client.post(reverse("admin:charts_chart_add"),
                             {"org": org.pk, "workflow": wf.pk, "external_id": "x1", "payload": '{"seconds": 1}'},
                             follow=True)
    assert resp.status_code == 200
    chart = Chart.objects.get()
    assert chart.payload == {"seconds": 1} and chart.state == ChartState.QUEUED
    assert {"kind": "chart", "id": chart.pk} in capture_notifications


def test_chart_admin_refuses_malformed_payload(admin_client):
    org, wf = make_org(), make_workflow()
    resp = admin_client.post(reverse("admin:charts_chart_add"), {"org": org.pk, "workflow": wf.pk, "payload": "{oops"})
    assert "Enter a valid JSON" in resp.content.decode()
    assert not Chart.objects.exists()


POLICIES = {"share": "charts", "quantum_s": 600, "dispatch": "strict"}


def test_policies_in_admin_are_audited_and_bounded(admin_client, capture_notifications):
    from control.models import AuditEntry
    s = SchedulerSettings.get()
    url = reverse("admin:fairsched_schedulersettings_change", args=[s.pk])
    base = {"budget": 4, "eta_interval_s": 3, "reconcile_interval_s": 5, "eta_model": "forecast", "_save": "Save"}
    admin_client.post(url, {**base, "share": "work", "quantum_s": 120, "dispatch": "backfill"})
    s = SchedulerSettings.get()
    assert (s.share, s.quantum_s, s.dispatch) == ("work", 120.0, "backfill")
    entry = AuditEntry.objects.get(action="policies")
    assert entry.after == {"share": "work", "quantum_s": 120.0, "dispatch": "backfill"}
    assert entry.before == {"share": "charts", "quantum_s": 600.0, "dispatch": "strict"}
    assert {"kind": "settings"} in capture_notifications
    resp = admin_client.post(url, {**base, "share": "work", "quantum_s": 0.5, "dispatch": "backfill"})
    assert "Ensure this value is greater than or equal to 1" in resp.content.decode()
    assert SchedulerSettings.get().quantum_s == 120.0


def test_budget_dial_in_admin(admin_client, capture_notifications):
    s = SchedulerSettings.get()
    url = reverse("admin:fairsched_schedulersettings_change", args=[s.pk])
    admin_client.post(url, {"budget": 9, "eta_interval_s": 3, "reconcile_interval_s": 5, "eta_model": "forecast",
                            **POLICIES, "_save": "Save"})
    assert SchedulerSettings.get().budget == 9
    assert {"kind": "settings"} in capture_notifications
    resp = admin_client.post(url, {"budget": -1, "eta_interval_s": 3, "reconcile_interval_s": 5,
                                   "eta_model": "forecast", **POLICIES, "_save": "Save"})
    assert "Ensure this value is greater than or equal to 0" in resp.content.decode()
    assert SchedulerSettings.get().budget == 9
    resp = admin_client.get(reverse("admin:fairsched_schedulersettings_changelist"))
    assert resp.status_code == 302 and resp.url == url


def test_staff_without_change_permission_cannot_run_actions(client):
    user = make_user("viewer", staff=True, perms=("charts.view_chart",))
    client.force_login(user)
    chart = make_chart(make_org())
    resp = client.post(reverse("admin:charts_chart_changelist"), {"action": "pause", "_selected_action": [chart.pk]})
    assert resp.status_code in (200, 302, 403)
    assert not Chart.objects.get(pk=chart.pk).paused
