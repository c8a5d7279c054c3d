"""Clear-times never lie (issue 10): what the scheduler publishes, the org's status.json
and the admin say for an org whose queued charts are all held, paused or blocked, and
why nothing starts when the head of the order does not fit in the free budget."""
from __future__ import annotations

import time

import pytest
from django.utils import timezone

from charts.models import ChartState
from common import snapshot
from fairsched.engine.store import db
from fairsched.engine.publish import build_snapshot
from fairsched.engine.state import LiveState
from control.models import SchedulerSettings
from tests.factories import make_chart, make_cost, make_org, make_user, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


def set_budget(budget: int) -> None:
    s = SchedulerSettings.get()
    s.budget = budget
    s.save()


@pytest.fixture
def world(redis_url):
    """Budget 4. Acme runs an audit (cost 3) and has another audit at the head of the order;
    Evergreen is held, Cedar's charts are all paused, Delta's cost more than the budget."""
    set_budget(4)
    code, audit, huge = make_workflow("code"), make_workflow("audit"), make_workflow("huge")
    acme, evergreen = make_org("Acme"), make_org("Evergreen Medical", weight=0)
    cedar, delta = make_org("Cedar Labs"), make_org("Delta")
    make_cost(acme, audit, 3)
    make_cost(delta, huge, 5)
    make_chart(acme, audit, state=ChartState.RUNNING, dispatched_cost=3, started_at=timezone.now())
    head = make_chart(acme, audit)
    make_chart(acme, code)
    for _ in range(3):
        make_chart(evergreen, code)
        make_chart(cedar, code, paused=True)
    for _ in range(2):
        make_chart(delta, huge)
    return {"acme": acme, "evergreen": evergreen, "cedar": cedar, "delta": delta, "head": head}


def publish() -> dict:
    """What the scheduler publishes after an ETA pass, from the database."""
    state = LiveState(db.read_world())
    now = time.time()
    report = state.queue.etas(state.running_charts(), now, estimate=state.durations)
    snap, rows, per_org = build_snapshot(state, report, now)
    snapshot.store(snap, rows, per_org)
    return snap


def org_row(snap: dict, org) -> dict:
    return next(o for o in snap["orgs"] if o["id"] == org.pk)


def test_held_paused_and_blocked_orgs_have_no_clear_time_and_say_why(world):
    snap = publish()
    held, paused, blocked = (org_row(snap, world[k]) for k in ("evergreen", "cedar", "delta"))
    for row in (held, paused, blocked):
        assert row["clear_s"] is None and row["clear_at"] is None  # was 0.0 and now: "clear"
    assert held["no_eta"] == "held: no ETA" and held["unplanned"]["held"] == 3
    assert paused["no_eta"] == "3 paused: no ETA until resumed"
    assert blocked["no_eta"] == "2 blocked: cost above the budget"
    acme = org_row(snap, world["acme"])
    assert acme["clear_s"] > 0 and acme["no_eta"] is None
    assert snap["no_eta"] == "3 held: no ETA; 3 paused: no ETA until resumed; 2 blocked: cost above the budget"


def test_why_nothing_starts_names_the_head_and_the_free_budget(world):
    head = world["head"]
    assert publish()["waiting"]["text"] == f"next: #{head.pk} (Acme, audit, cost 3) waits for 3 free; 1 free"
    set_budget(6)  # it fits now: dispatch is not waiting
    assert publish()["waiting"] is None


def test_budget_zero_blocks_everything_and_no_org_is_clear(world):
    set_budget(0)
    snap = publish()
    acme = org_row(snap, world["acme"])
    # Acme still has its running audit: a clear-time for that, and its 2 queued charts named
    assert acme["clear_s"] is not None and acme["no_eta"] == "2 blocked: cost above the budget"
    assert org_row(snap, world["delta"])["clear_s"] is None
    assert "blocked: cost above the budget" in snap["no_eta"]


def test_status_json_gives_null_and_the_reason_for_a_held_org(world, client):
    publish()
    member = make_user("eve")
    world["evergreen"].members.add(member)
    client.force_login(member)
    org = client.get(f"/orgs/{world['evergreen'].slug}/status.json").json()["org"]
    assert org["clear_s"] is None and org["clear_at"] is None
    assert org["no_eta"] == "held: no ETA" and org["unplanned"]["held"] == 3


def test_admin_org_list_names_the_unplanned_charts(world, client):
    from dashboard import admin_live

    publish()
    admin_live.forget_snapshot()  # the admin caches the snapshot for a second
    client.force_login(make_user("root", superuser=True))
    html = client.get("/admin/orgs/org/").content.decode()
    assert "held: no ETA" in html and "3 paused: no ETA until resumed" in html
    assert "2 blocked: cost above the budget" in html
    assert ">clear<" not in html


def test_the_budget_help_text_says_running_work_drains_above_a_lowered_budget(client):
    client.force_login(make_user("root", superuser=True))
    SchedulerSettings.get()
    html = client.get("/admin/fairsched/schedulersettings/", follow=True).content.decode()
    assert "never exceeds" not in html
    assert "running charts are never stopped" in html and "drains by design" in html


def test_the_live_dump_carries_the_workflow_averages_over_all_orgs(world):
    from datetime import timedelta

    from charts import lifecycle
    from scheduling.contract import scenario
    from fairsched.engine.reader import scenario_from_db
    from orgs import services as org_services

    chart = world["head"]
    lifecycle.chart_mark_running(chart_id=chart.pk, cost=3)
    chart.refresh_from_db()
    lifecycle.chart_record_outcome(chart_id=chart.pk, state=ChartState.SUCCEEDED,
                                         finished_at=chart.started_at + timedelta(seconds=130))
    org_services.workflow_expected_set(workflow=chart.workflow, seconds=100)
    scn = scenario_from_db()
    assert {"org": None, "workflow": "audit", "avg_s": 130.0, "count": 1} in scn["averages"]
    assert scn["expected"] == [{"workflow": "audit", "expected_s": 100.0}]  # the declared duration, for the blend
    scenario.plan(scn)  # valid v2 input
