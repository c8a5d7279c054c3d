"""The audit trail (one entry per operator action, written by the services) and re-run."""
from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from charts import services as charts_services
from charts.models import Chart, ChartState
from control.models import AuditEntry, SchedulerSettings
from control.services import budget_set, scheduler_settings_set
from orgs import services as org_services
from tests.factories import make_chart, make_cost, make_org, make_user, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world(db):
    wf = make_workflow("code")
    acme = make_org("Acme Health", weight=3)
    return {"wf": wf, "acme": acme, "op": make_user("op", staff=True, perms=("charts.add_chart",))}


def _queued(w, **fields):
    return make_chart(w["acme"], w["wf"], external_id="mrn-12", **fields)


# (action, setup -> target, call(target, actor), expected summary, before, after); target is a chart or an org.
ACTIONS = [
    ("pause", _queued, lambda c, a: charts_services.chart_pause(chart=c, actor=a),
     "Paused mrn-12 (Acme Health)", {"paused": False}, {"paused": True}),
    ("resume", lambda w: _queued(w, paused=True), lambda c, a: charts_services.chart_resume(chart=c, actor=a),
     "Resumed mrn-12 (Acme Health)", {"paused": True}, {"paused": False}),
    ("prioritize", _queued, lambda c, a: charts_services.chart_prioritize(chart=c, actor=a),
     "Prioritized mrn-12 (Acme Health)", {"priority": False, "prioritized_at": None}, None),
    ("unprioritize", lambda w: _queued(w, priority=True),
     lambda c, a: charts_services.chart_unprioritize(chart=c, actor=a),
     "Unprioritized mrn-12 (Acme Health)", {"priority": True}, {"priority": False, "prioritized_at": None}),
    ("move_to_front", _queued, lambda c, a: charts_services.chart_move_to_front(chart=c, actor=a),
     "Moved mrn-12 (Acme Health) to the front of its org's queue", {"moved_to_front_at": None}, None),
    ("cancel", _queued, lambda c, a: charts_services.chart_cancel(chart=c, actor=a),
     "Cancelled mrn-12 (Acme Health)", {"state": "queued", "finished_at": None}, None),
    ("cancel", lambda w: _queued(w, state=ChartState.RUNNING), lambda c, a: charts_services.chart_cancel(chart=c, actor=a),
     "Cancelling running mrn-12 (Acme Health) (Temporal confirms)", {"cancel_requested": False},
     {"cancel_requested": True}),
    ("hold", lambda w: w["acme"], lambda o, a: org_services.org_hold(org=o, actor=a),
     "Held Acme Health", {"weight": 3}, {"weight": 0}),
    ("release", lambda w: org_services.org_hold(org=w["acme"]), lambda o, a: org_services.org_release(org=o, actor=a),
     "Released Acme Health (weight 3)", {"weight": 0}, {"weight": 3}),
    ("weight", lambda w: w["acme"], lambda o, a: org_services.org_set_weight(org=o, weight=5, actor=a),
     "Set the weight of Acme Health to 5 (was 3)", {"weight": 3}, {"weight": 5}),
    ("cost", lambda w: w["acme"], lambda o, a: org_services.workflow_cost_set(org=o, workflow=make_workflow("code"),
                                                                              cost=4, actor=a),
     "Set the cost of code for Acme Health to 4 (was 1)", {"workflow": "code", "cost": None},
     {"workflow": "code", "cost": 4}),
    ("cost", lambda w: (make_cost(w["acme"], w["wf"], 2), w["acme"])[1],
     lambda o, a: org_services.workflow_cost_delete(org=o, workflow=make_workflow("code"), actor=a),
     "Removed the cost of code for Acme Health (was 2; costs 1 again)", {"workflow": "code", "cost": 2},
     {"workflow": "code", "cost": None}),
    ("budget", lambda w: None, lambda _, a: budget_set(budget=9, actor=a),
     "Set the budget to 9 (was 4)", {"budget": 4}, {"budget": 9}),
    ("budget", lambda w: None, lambda _, a: scheduler_settings_set(budget=6, actor=a),
     "Set the budget to 6 (was 4)", {"budget": 4}, {"budget": 6}),
    ("rerun", lambda w: _queued(w, state=ChartState.FAILED), lambda c, a: charts_services.chart_rerun(chart=c, actor=a),
     None, {"state": "failed"}, None),
]
IDS = ["pause", "resume", "prioritize", "unprioritize", "to-front", "cancel-queued", "cancel-running", "hold", "release", "weight",
       "cost-set", "cost-delete", "budget", "budget-admin-form", "rerun"]


@pytest.mark.parametrize("action,setup,call,summary,before,after", ACTIONS, ids=IDS)
def test_every_action_is_recorded_with_who_what_when_before_after(world, action, setup, call, summary, before, after):
    target = setup(world)
    AuditEntry.objects.all().delete()  # the setup's own actions (a hold) are not under test
    call(target, world["op"])
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.actor, entry.actor_name) == (action, world["op"], "op")
    assert entry.at is not None
    if summary is not None:
        assert entry.summary == summary
    for key, value in before.items():
        assert entry.before[key] == value
    if after is not None:
        assert entry.after == after
    if isinstance(target, Chart):
        assert (entry.chart_id, entry.org_id) == (target.pk, world["acme"].pk)
    elif target is not None:
        assert entry.org_id == world["acme"].pk


def test_a_refused_or_idle_action_records_nothing(world):
    chart = _queued(world, paused=True)
    with pytest.raises(ValidationError):
        charts_services.chart_pause(chart=chart, actor=world["op"])
    org_services.org_set_weight(org=world["acme"], weight=3, actor=world["op"])  # unchanged
    org_services.org_release(org=world["acme"], actor=world["op"])  # not held
    budget_set(budget=SchedulerSettings.get().budget, actor=world["op"])
    assert not AuditEntry.objects.exists()


def test_an_action_without_an_actor_is_recorded_as_system(world):
    org_services.org_hold(org=world["acme"])
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.actor_name, str(entry).split(": ", 1)[1]) == (None, "", "Held Acme Health")


def test_entry_is_broadcast_to_dashboards_on_commit(world, monkeypatch, django_capture_on_commit_callbacks):
    sent = []
    monkeypatch.setattr("common.live_updates.send", lambda event, counters=None: sent.append(event.to_wire()))
    with django_capture_on_commit_callbacks(execute=True):
        org_services.org_hold(org=world["acme"], actor=world["op"])
    assert [e["kind"] for e in sent] == ["audit"]
    assert sent[0]["entry"]["summary"] == "Held Acme Health" and sent[0]["entry"]["by"] == "op"
    assert "org" not in sent[0]  # org members' sockets filter on "org": they never see operator names


# --- re-run -----------------------------------------------------------------------------


@pytest.mark.parametrize("state", [ChartState.FAILED, ChartState.CANCELLED])
def test_rerun_makes_a_new_chart_linked_to_the_intact_original(world, state, capture_notifications):
    original = make_chart(world["acme"], world["wf"], external_id="mrn-7", payload={"seconds": 3}, state=state,
                          error="boom" if state == ChartState.FAILED else "")
    snapshot = Chart.objects.filter(pk=original.pk).values().get()
    capture_notifications.clear()
    new = charts_services.chart_rerun(chart=original.pk, actor=world["op"])
    assert (new.org_id, new.workflow_id, new.payload, new.state) == (
        world["acme"].pk, world["wf"].pk, {"seconds": 3}, ChartState.QUEUED)
    assert new.rerun_of_id == original.pk and new.external_id == "mrn-7~rerun-2"
    assert Chart.objects.filter(pk=original.pk).values().get() == snapshot
    assert {"kind": "chart", "id": new.pk} in capture_notifications
    entry = AuditEntry.objects.get(action="rerun")
    assert entry.chart_id == original.pk and entry.after == {"rerun": new.pk, "external_id": "mrn-7~rerun-2"}
    assert entry.summary == f"Re-ran mrn-7 (Acme Health) as chart #{new.pk}"


def test_rerun_ids_count_the_runs_of_the_root(world):
    original = make_chart(world["acme"], world["wf"], external_id="mrn-7", state=ChartState.FAILED)
    second = charts_services.chart_rerun(chart=original)
    Chart.objects.filter(pk=second.pk).update(state=ChartState.FAILED)  # one live run at a time
    third = charts_services.chart_rerun(chart=original)
    Chart.objects.filter(pk=third.pk).update(state=ChartState.FAILED)
    fourth = charts_services.chart_rerun(chart=third)
    assert [second.external_id, third.external_id, fourth.external_id] == [
        "mrn-7~rerun-2", "mrn-7~rerun-3", "mrn-7~rerun-4"]
    assert fourth.rerun_of_id == third.pk
    no_ext = make_chart(world["acme"], world["wf"], state=ChartState.CANCELLED)
    assert charts_services.chart_rerun(chart=no_ext).external_id is None


@pytest.mark.parametrize("state", [ChartState.QUEUED, ChartState.RUNNING, ChartState.SUCCEEDED])
def test_only_failed_or_cancelled_charts_rerun(world, state):
    chart = make_chart(world["acme"], world["wf"], state=state)
    with pytest.raises(ValidationError) as exc:
        charts_services.chart_rerun(chart=chart)
    assert f"cannot re-run chart #{chart.pk}: it is {state}" in exc.value.message_dict["state"][0]
    assert Chart.objects.count() == 1 and not AuditEntry.objects.exists()


def test_rerun_needs_the_add_chart_permission(world):
    chart = make_chart(world["acme"], world["wf"], state=ChartState.FAILED)
    viewer = make_user("viewer", staff=True, perms=("charts.view_chart", "charts.change_chart"))
    with pytest.raises(ValidationError) as exc:
        charts_services.chart_rerun(chart=chart, actor=viewer)
    assert "charts.add_chart" in exc.value.message_dict["permission"][0]
    assert Chart.objects.count() == 1
