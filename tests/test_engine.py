"""The live scheduler's pure pieces: state changes, dispatch commit, snapshot, names."""
from __future__ import annotations

import pytest

from fairsched.engine.publish import build_snapshot
from fairsched.engine.host import Backoff
from fairsched.engine.store.rows import ChartRow, Config, OrgRow, World
from fairsched.engine.state import LiveState
from fairsched.temporal.client import failure_text
from fairsched.temporal.shared import chart_id_of, split_temporal_type, workflow_id

T0 = 1_800_000_000.0


def q(pk: int, org: int, *, at: float | None = None, **kw) -> ChartRow:
    return ChartRow(pk, org, kw.pop("workflow", "code"), "queued", at if at is not None else T0 + pk, **kw)


def running(pk: int, org: int, cost: int = 1, **kw) -> ChartRow:
    return ChartRow(pk, org, "code", "running", T0 + pk, started_at=T0 + 100, dispatched_cost=cost, **kw)


def world(charts, *, budget=3, weights=(2, 1), costs=None) -> World:
    orgs = [OrgRow(i + 1, f"Org {i + 1}", f"org-{i + 1}", w) for i, w in enumerate(weights)]
    return World(Config(budget, 1.0, 2.0), orgs, costs or {}, {}, list(charts))


@pytest.fixture
def backlog() -> LiveState:
    # the example: A (weight 2) has 1..4, B (weight 1) has 5..6
    return LiveState(world([q(1, 1), q(2, 1), q(3, 1), q(4, 1), q(5, 2), q(6, 2)], budget=3))


def test_load_orders_the_backlog_like_the_static_plan(backlog):
    assert backlog.queue.order() == ["1", "2", "5", "3", "4", "6"]
    assert backlog.free == 3 and backlog.to_start() == ["1", "2", "5"]


def test_running_rows_hold_their_dispatched_cost():
    s = LiveState(world([running(9, 1, cost=2), q(1, 1)], budget=3))
    assert s.used == 2 and s.free == 1 and s.to_start() == ["1"]


def test_commit_dispatch_moves_started_charts_to_running(backlog):
    planned = backlog.to_start()
    new = backlog.commit_dispatch(planned, {cid: ("run", T0) for cid in planned})
    assert [r.id for r in new] == [1, 2, 5]
    assert backlog.free == 0 and backlog.to_start() == []
    assert backlog.queue.order() == ["3", "4", "6"]


def test_a_failed_start_keeps_its_place_and_later_successes_leave_the_order(backlog):
    planned = backlog.to_start()  # 1, 2, 5
    new = backlog.commit_dispatch(planned, {"1": ("r1", T0), "5": ("r5", T0)})
    assert sorted(r.id for r in new) == [1, 5]
    assert backlog.queue.order()[0] == "2"  # the chart that did not start is still at the head
    assert backlog.used == 2


@pytest.mark.parametrize("change, expected_kind", [
    (dict(paused=True), "paused"),
    (dict(priority=True, prioritized_at=T0 + 50), "prioritized"),
    (dict(front_at=T0 + 60), "moved_to_front"),
], ids=["pause", "prioritize", "move-to-front"])
def test_a_reread_row_is_applied(backlog, change, expected_kind):
    fx = backlog.apply_chart(6, q(6, 2, **change))
    assert [e["kind"] for e in fx.events] == [expected_kind]


def test_pause_then_resume_and_priority_order(backlog):
    backlog.apply_chart(1, q(1, 1, paused=True))
    assert "1" not in backlog.queue.order() and backlog.queue.paused == ["1"]
    backlog.apply_chart(6, q(6, 2, priority=True, prioritized_at=T0 + 50))
    assert backlog.queue.order()[0] == "6"
    backlog.apply_chart(1, q(1, 1))
    assert "1" in backlog.queue.order()


def test_new_charts_arrive_and_gone_rows_leave(backlog):
    backlog.apply_chart(7, q(7, 2))
    assert "7" in backlog.queue
    backlog.apply_chart(7, None)
    backlog.apply_chart(3, ChartRow(3, 1, "code", "cancelled", T0 + 3))
    assert "7" not in backlog.queue and "3" not in backlog.queue
    assert backlog.queued_by_org[1] == 3 and backlog.queued_by_org[2] == 2


def test_a_final_row_keeps_its_cost_until_temporal_says_closed(backlog):
    backlog.commit_dispatch(["1"], {"1": ("r", T0)})
    fx = backlog.apply_chart(1, ChartRow(1, 1, "code", "succeeded", T0 + 1))
    assert backlog.used == 1 and backlog.running[1].closing and fx.watch == {1}
    fx = backlog.finished(1, "succeeded")
    assert backlog.used == 0 and fx.unwatch == {1} and fx.events[0]["kind"] == "finish"


def test_running_row_from_elsewhere_is_adopted_and_cancel_requested(backlog):
    fx = backlog.apply_chart(2, running(2, 1))
    assert "2" not in backlog.queue and 2 in backlog.running and fx.watch == {2}
    fx = backlog.apply_chart(2, running(2, 1, cancel_requested=True))
    assert fx.cancel == {2}
    backlog.running[2].cancel_sent = True
    assert backlog.apply_chart(2, running(2, 1, cancel_requested=True)).cancel == set()


def test_requeued_row_leaves_running_and_rejoins_the_order(backlog):
    backlog.commit_dispatch(["1"], {"1": ("r", T0)})
    fx = backlog.apply_chart(1, q(1, 1))
    assert 1 not in backlog.running and "1" in backlog.queue and fx.unwatch == {1}


def test_resync_applies_weights_costs_budget_and_removes_stale(backlog):
    w = world([q(1, 1), q(2, 1), q(4, 1), q(5, 2), q(6, 2)], budget=1, weights=(1, 0),
              costs={("1", "code"): 2})
    fx = backlog.apply_world(w)
    assert fx.eta_now
    kinds = sorted(e["kind"] for e in fx.events)
    assert kinds == ["budget", "cost", "removed", "weight", "weight"]
    assert backlog.queue.blocked == ["1", "2", "4"] and backlog.queue.held == ["5", "6"]


def test_lowering_the_budget_never_touches_running_work():
    s = LiveState(world([running(1, 1), running(2, 1), q(3, 1)], budget=2))
    s.apply_config(Config(1, 1.0, 2.0))
    assert s.free == -1 and s.to_start() == [] and set(s.running) == {1, 2}
    s.finished(1)
    assert s.to_start() == []  # still no room: 1 running of budget 1
    s.finished(2)
    assert s.to_start() == ["3"]


def test_snapshot_follows_the_published_schema(backlog):
    backlog.commit_dispatch(["1"], {"1": ("run-1", T0 + 100)})
    backlog.apply_chart(6, q(6, 2, paused=True))
    report = backlog.queue.etas(backlog.running_charts(), T0 + 160, estimate=backlog.durations)
    snap, rows, per_org = build_snapshot(backlog, report, T0 + 160)
    assert set(snap) >= {"version", "generated_at", "now", "budget", "used", "counters", "clear_s", "clear_at",
                         "orgs", "running"}
    assert snap["counters"] == {"queued": 5, "ordered": 4, "running": 1, "held": 0, "paused": 1, "blocked": 0}
    assert snap["running"][0] | {} == snap["running"][0] and snap["running"][0]["elapsed_s"] == 60.0
    assert snap["running"][0]["finish_s"] == 540.0 and snap["running"][0]["workflow_id"] == "chart-test-1"
    assert [(r["id"], r["pos"], r["state"]) for r in rows] == [
        (2, 0, "ordered"), (5, 1, "ordered"), (3, 2, "ordered"), (4, 3, "ordered"), (6, None, "paused")]
    assert rows[0]["start_s"] == 0.0 and rows[0]["finish_s"] == 600.0
    assert set(per_org) == {1, 2} and per_org[1]["org"]["used_cost"] == 1
    assert [c["state"] for c in per_org[1]["charts"]] == ["ordered", "ordered", "ordered", "running"]


def test_counters_are_per_org(backlog):
    backlog.commit_dispatch(["1"], {"1": ("r", T0)})
    c = backlog.counters()
    assert c["queued"] == 5 and c["running"] == 1 and c["used"] == 1
    assert c["orgs"]["1"] == {"queued": 3, "running": 1, "used_cost": 1}


def test_backoff_doubles_to_its_cap_and_resets():
    b = Backoff(0.5, 2.0)
    assert [b.fail(0.0) for _ in range(4)] == [0.5, 1.0, 2.0, 2.0]
    assert not b.ready(1.0) and b.ready(2.0)
    b.ok()
    assert b.ready(0.0) and b.fail(0.0) == 0.5


@pytest.mark.parametrize("given, expected", [
    ("DemoChart", ("DemoChart", "fairsched")),
    ("CodeChart@coders", ("CodeChart", "coders")),
    ("odd@", ("odd@", "fairsched")),
], ids=["default-queue", "own-queue", "trailing-at"])
def test_temporal_type_names_its_task_queue(given, expected):
    assert split_temporal_type(given, "fairsched") == expected


def test_workflow_ids():
    assert workflow_id(12) == "chart-test-12" and chart_id_of("chart-test-12") == 12
    assert chart_id_of("other-12") is None and chart_id_of("chart-x") is None
    # Another deployment's ids, and the legacy form of a chart that does not keep it, are not ours.
    assert chart_id_of("chart-prod-12") is None and chart_id_of("chart-12") is None
    assert chart_id_of("chart-test-x") is None and chart_id_of("chart-test-") is None


def test_charts_older_than_the_legacy_cut_keep_their_id():
    from fairsched.temporal.shared import WorkflowIds

    ids = WorkflowIds("prod", legacy_below=100)
    assert ids.of(99) == "chart-99" and ids.of(100) == "chart-prod-100"
    assert ids.chart_of("chart-99") == 99 and ids.chart_of("chart-prod-100") == 100
    assert ids.chart_of("chart-100") is None and ids.chart_of("chart-prod-99") is None
    unfixed = WorkflowIds("prod", legacy_below=None)  # no scheduler of this version led yet
    assert unfixed.of(10**9) == "chart-1000000000"
    for bad in ("", "Prod", "1prod", "prod-1", "a" * 17):
        with pytest.raises(ValueError):
            WorkflowIds(bad)


def test_failure_text_skips_generic_and_repeated_messages():
    from temporalio.exceptions import ActivityError, ApplicationError

    root = ApplicationError("boom (payload.fail is true)")
    act = ActivityError("Activity task failed", scheduled_event_id=1, started_event_id=2, identity="w",
                        activity_type="a", activity_id="1", retry_state=None)
    act.__cause__ = root
    outer = ApplicationError("DemoChart chart #3: boom (payload.fail is true)")
    outer.__cause__ = act
    assert failure_text(outer) == "DemoChart chart #3: boom (payload.fail is true)"


@pytest.mark.django_db
def test_scenario_from_db_carries_the_persisted_rounds():
    """The rounds come from the database (what the scheduler saved), not from Redis: a
    plan of the live state needs no running scheduler and survives a lost Redis."""
    from scheduling.contract import scenario
    from scheduling import OrgRounds, RoundState
    from fairsched.engine.store import db
    from fairsched.engine.reader import scenario_from_db
    from tests.factories import make_chart, make_org, make_workflow

    a, b = make_org("A", weight=1), make_org("B", weight=1)
    wf = make_workflow()
    c1, c2, c3, c4 = make_chart(a, wf), make_chart(a, wf), make_chart(b, wf), make_chart(a, wf)
    assert all("round" not in item for item in scenario_from_db()["queued"])  # nothing saved: static
    state = RoundState(5, 4, {str(a.pk): OrgRounds(6, 1, 0, 1), str(b.pk): OrgRounds(5, 1, 0, 1)})
    db.save_rounds(state, {str(c1.pk): 5, str(c2.pk): 6, str(c3.pk): 5})
    scn = scenario_from_db()
    assert [item["round"] for item in scn["queued"]] == [5, 6, 5, 7]  # c4 arrived after the save
    assert scenario.plan(scn)["order"] == [str(c.pk) for c in (c1, c3, c2, c4)]
    assert all("round" not in item for item in scenario_from_db(include_rounds=False)["queued"])


@pytest.mark.django_db(transaction=True)
def test_a_dispatch_writes_the_round_state_with_its_compare_and_set_and_a_new_state_resumes_it():
    """What the scheduler does: dispatch in memory, then one transaction with the
    compare-and-set and the round state; a LiveState read back from the database
    resumes the same order (org A weight 2, B weight 1, budget 2: B's first is next)."""
    from datetime import timedelta

    from django.utils import timezone

    from charts.models import Chart
    from fairsched.engine.store import db
    from fairsched.engine.state import LiveState
    from control.models import OrgRoundState, RoundState, SchedulerSettings
    from tests.factories import make_chart, make_org, make_workflow

    s = SchedulerSettings.get()
    s.budget = 2
    s.save()
    a, b = make_org("A", weight=2), make_org("B", weight=1)
    wf = make_workflow()
    t0 = timezone.now() - timedelta(hours=1)
    names = {make_chart(a, wf, created_at=t0 + timedelta(minutes=i)).pk: f"a{i}" for i in range(4)}
    names |= {make_chart(b, wf, created_at=t0 + timedelta(minutes=10 + i)).pk: f"b{i}" for i in range(2)}
    state = LiveState(db.read_world())
    planned = state.to_start()
    assert [names[int(c)] for c in planned] == ["a0", "a1"]
    new = state.commit_dispatch(planned, {c: ("run", 0.0) for c in planned})
    rounds = (state.queue.export_rounds(), state.queue.take_round_changes())
    ran = db.mark_running([(r.id, r.cost, r.run_id, 0.0) for r in new], rounds)
    assert all(ran.values())
    assert RoundState.objects.get().head == 0
    assert OrgRoundState.objects.get(org=a).in_head == 2
    assert set(Chart.objects.filter(fair_round__isnull=False).values_list("pk", flat=True)) == \
        {pk for pk, n in names.items() if n not in ("a0", "a1")}
    order = [names[int(c)] for c in state.queue.order()]
    assert order == ["b0", "a2", "a3", "b1"]
    assert [names[int(c)] for c in LiveState(db.read_world()).queue.order()] == order


@pytest.mark.django_db
def test_a_note_for_a_chart_of_a_known_org_is_one_query(django_assert_num_queries):
    """The scheduler reads the charts a note names with their orgs, but not the orgs it
    knows (an org's own changes come with notes of their own): one query, not two."""
    from fairsched.engine.store import db
    from tests.factories import make_chart, make_org, make_workflow

    a, b = make_org("A"), make_org("B")
    wf = make_workflow()
    ca, cb = make_chart(a, wf), make_chart(b, wf)
    with django_assert_num_queries(1):
        rows, orgs = db.read_charts([ca.pk, cb.pk], known_orgs={a.pk: None, b.pk: None})
    assert set(rows) == {ca.pk, cb.pk} and orgs == []
    with django_assert_num_queries(2):
        rows, orgs = db.read_charts([ca.pk, cb.pk], known_orgs={a.pk: None})
    assert [o.id for o in orgs] == [b.pk] and orgs[0].slug == b.slug
    assert [o.id for o in db.read_charts([ca.pk])[1]] == [a.pk]  # knowing none: every chart's org
