"""Services: validation naming the field, nothing written on bad input, notifications on commit."""
from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from charts import services as charts_services
from charts import lifecycle
from charts.models import Chart, ChartState, DurationStat
from control.models import SchedulerSettings
from control.services import budget_set, scheduler_settings_set
from orgs import services as org_services
from orgs.models import Org, WorkflowCost
from tests.factories import make_chart, make_org, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


def field_message(exc: pytest.ExceptionInfo[ValidationError]) -> dict[str, str]:
    return {k: " ".join(v) for k, v in exc.value.message_dict.items()}


# --- orgs ----------------------------------------------------------------------


def test_set_weight_notifies_once_on_commit(capture_notifications):
    org = make_org(weight=1)
    capture_notifications.clear()
    org_services.org_set_weight(org=org, weight=3)
    assert Org.objects.get(pk=org.pk).weight == 3
    assert capture_notifications == [{"kind": "org", "id": org.pk}]


def test_set_weight_to_same_value_sends_nothing(capture_notifications):
    org = make_org(weight=2)
    capture_notifications.clear()
    org_services.org_set_weight(org=org, weight=2)
    assert capture_notifications == []


@pytest.mark.parametrize("bad", [-1, "x", 1.5, True, None], ids=["negative", "text", "float", "bool", "none"])
def test_set_weight_refuses_bad_values(bad, capture_notifications):
    org = make_org(weight=2)
    capture_notifications.clear()
    with pytest.raises(ValidationError) as exc:
        org_services.org_set_weight(org=org, weight=bad)
    assert "weight" in field_message(exc)
    assert Org.objects.get(pk=org.pk).weight == 2
    assert capture_notifications == []


def test_hold_then_release_restores_the_weight(capture_notifications):
    org = make_org(weight=5)
    org_services.org_hold(org=org)
    held = Org.objects.get(pk=org.pk)
    assert held.weight == 0 and held.is_held and held.weight_before_hold == 5
    org_services.org_release(org=org)
    assert Org.objects.get(pk=org.pk).weight == 5
    assert [n["kind"] for n in capture_notifications if n.get("id") == org.pk][-2:] == ["org", "org"]


def test_release_of_an_org_that_was_created_held_gives_weight_one():
    org = make_org(weight=0)
    org_services.org_release(org=org)
    assert Org.objects.get(pk=org.pk).weight == 1


def test_set_weight_of_deleted_org_is_refused():
    org = make_org()
    pk = org.pk
    org.delete()
    with pytest.raises(ValidationError) as exc:
        org_services.org_set_weight(org=pk, weight=2)
    assert "does not exist" in field_message(exc)["org"]


def test_workflow_cost_set_creates_updates_and_notifies(capture_notifications):
    org, wf = make_org(), make_workflow()
    capture_notifications.clear()
    org_services.workflow_cost_set(org=org, workflow=wf, cost=3)
    org_services.workflow_cost_set(org=org, workflow=wf, cost=3)  # unchanged: no second message
    org_services.workflow_cost_set(org=org, workflow=wf, cost=2)
    assert WorkflowCost.objects.get(org=org, workflow=wf).cost == 2
    assert capture_notifications == [{"kind": "cost", "org": org.pk, "workflow": wf.pk}] * 2


@pytest.mark.parametrize("bad", [0, -3, "two"], ids=["zero", "negative", "text"])
def test_workflow_cost_refuses_below_one(bad):
    org, wf = make_org(), make_workflow()
    with pytest.raises(ValidationError) as exc:
        org_services.workflow_cost_set(org=org, workflow=wf, cost=bad)
    assert "cost" in field_message(exc)
    assert not WorkflowCost.objects.exists()


def test_workflow_cost_delete_makes_the_pair_cost_one_again(capture_notifications):
    org, wf = make_org(), make_workflow()
    org_services.workflow_cost_set(org=org, workflow=wf, cost=3)
    org_services.workflow_cost_delete(org=org, workflow=wf)
    assert not WorkflowCost.objects.exists()
    assert capture_notifications[-1] == {"kind": "cost", "org": org.pk, "workflow": wf.pk}


# --- settings ------------------------------------------------------------------------


def test_budget_set_and_refusals(capture_notifications):
    budget_set(budget=7)
    assert SchedulerSettings.get().budget == 7
    assert capture_notifications == [{"kind": "settings"}]
    with pytest.raises(ValidationError) as exc:
        budget_set(budget=-1)
    assert "budget" in field_message(exc)
    assert SchedulerSettings.get().budget == 7


def test_scheduler_settings_intervals_validated():
    with pytest.raises(ValidationError) as exc:
        scheduler_settings_set(eta_interval_s=0)
    assert "eta_interval_s" in field_message(exc)
    scheduler_settings_set(eta_interval_s=1.5, reconcile_interval_s=2)
    s = SchedulerSettings.get()
    assert (s.eta_interval_s, s.reconcile_interval_s) == (1.5, 2.0)


# --- charts: producer ----------------------------------------------------------------------


def test_chart_submit_creates_a_queued_chart_and_notifies(capture_notifications):
    org, wf = make_org(), make_workflow()
    chart = charts_services.chart_submit(org=org, workflow=wf, payload={"seconds": 3}, external_id="ext-1")
    assert chart.state == ChartState.QUEUED and chart.payload == {"seconds": 3}
    assert capture_notifications == [{"kind": "chart", "id": chart.pk}]


def test_nothing_is_sent_when_the_transaction_rolls_back(capture_notifications):
    from django.db import transaction

    org, wf = make_org(), make_workflow()
    capture_notifications.clear()
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            charts_services.chart_submit(org=org, workflow=wf)
            raise RuntimeError("boom")
    assert capture_notifications == []
    assert not Chart.objects.exists()


def test_chart_submit_accepts_slugs_and_names():
    org, wf = make_org("Acme Health"), make_workflow("code")
    chart = charts_services.chart_submit(org="acme-health", workflow="code")
    assert chart.org == org and chart.workflow == wf


def test_resubmission_with_same_external_id_is_idempotent():
    org, wf = make_org(), make_workflow()
    first = charts_services.chart_submit(org=org, workflow=wf, payload={"a": 1}, external_id="x")
    again = charts_services.chart_submit(org=org, workflow=wf, payload={"a": 1}, external_id="x")
    assert again.pk == first.pk and Chart.objects.count() == 1


def test_duplicate_external_id_with_other_content_is_refused():
    org, wf = make_org(), make_workflow()
    charts_services.chart_submit(org=org, workflow=wf, payload={"a": 1}, external_id="x")
    with pytest.raises(ValidationError) as exc:
        charts_services.chart_submit(org=org, workflow=wf, payload={"a": 2}, external_id="x")
    assert "already used" in field_message(exc)["external_id"]
    assert Chart.objects.count() == 1


def test_same_external_id_in_two_orgs_is_fine():
    wf = make_workflow()
    charts_services.chart_submit(org=make_org(), workflow=wf, external_id="x")
    charts_services.chart_submit(org=make_org(), workflow=wf, external_id="x")
    assert Chart.objects.count() == 2


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"payload": "{not json"}, "payload", "not valid JSON"),
        ({"payload": "[1, 2]"}, "payload", "JSON object"),
        ({"workflow": "nope"}, "workflow", "unknown workflow"),
        ({"org": "no-such-org"}, "org", "does not exist"),
    ],
    ids=["malformed-payload", "payload-not-object", "unknown-workflow", "unknown-org"],
)
def test_chart_submit_refuses_bad_input(kwargs, field, words):
    org, wf = make_org(), make_workflow()
    args = {"org": org, "workflow": wf, **kwargs}
    with pytest.raises(ValidationError) as exc:
        charts_services.chart_submit(**args)
    assert words in field_message(exc)[field]
    assert not Chart.objects.exists()


def test_chart_for_a_deleted_org_is_refused():
    org, wf = make_org(), make_workflow()
    stale = Org.objects.get(pk=org.pk)
    org.delete()
    with pytest.raises(ValidationError) as exc:
        charts_services.chart_submit(org=stale, workflow=wf)
    assert "does not exist" in field_message(exc)["org"]
    assert not Chart.objects.exists()


def test_submit_many_thousands_in_one_go(capture_notifications, django_assert_max_num_queries):
    org, wf = make_org(), make_workflow()
    items = [{"org": org, "workflow": wf, "external_id": f"e{i}", "payload": {"i": i}} for i in range(3000)]
    capture_notifications.clear()
    # batched: one INSERT per 1,000 rows (common/bulk.py), the external ids already there
    # read 500 at a time, the org and the workflow once
    with django_assert_max_num_queries(16):
        result = charts_services.chart_submit_many(charts=items)
    assert len(result.created) == 3000 and Chart.objects.count() == 3000
    assert [n["kind"] for n in capture_notifications] == ["charts"]
    again = charts_services.chart_submit_many(charts=items[:10])
    assert again.created == [] and len(again.existing) == 10


def test_submit_many_is_all_or_nothing_and_names_the_row():
    org, wf = make_org(), make_workflow()
    items = [{"org": org, "workflow": wf}] * 5 + [{"org": org, "workflow": "missing"}]
    with pytest.raises(ValidationError) as exc:
        charts_services.chart_submit_many(charts=items)
    assert "charts[5].workflow" in field_message(exc)
    assert not Chart.objects.exists()


def test_submit_many_refuses_repeated_external_id_in_the_batch():
    org, wf = make_org(), make_workflow()
    with pytest.raises(ValidationError) as exc:
        charts_services.chart_submit_many(charts=[{"org": org, "workflow": wf, "external_id": "a"}] * 2)
    assert "repeats charts[0]" in field_message(exc)["charts[1].external_id"]


# --- charts: operator controls ----------------------------------------------------------------


def test_pause_resume_roundtrip(capture_notifications):
    chart = make_chart(make_org())
    capture_notifications.clear()
    assert charts_services.chart_pause(chart=chart).paused is True
    assert charts_services.chart_resume(chart=chart).paused is False
    assert capture_notifications == [{"kind": "chart", "id": chart.pk}] * 2


def test_pause_of_running_chart_is_refused_with_reason():
    chart = make_chart(make_org(), state=ChartState.RUNNING)
    with pytest.raises(ValidationError) as exc:
        charts_services.chart_pause(chart=chart)
    assert "it is running" in field_message(exc)["state"]


def test_prioritize_sets_time_and_unprioritize_clears_it():
    chart = make_chart(make_org())
    c = charts_services.chart_prioritize(chart=chart)
    assert c.priority and c.prioritized_at is not None
    c = charts_services.chart_unprioritize(chart=chart)
    assert not c.priority and c.prioritized_at is None
    with pytest.raises(ValidationError):
        charts_services.chart_unprioritize(chart=chart)


def test_cancel_queued_is_immediate_and_running_is_requested():
    org = make_org()
    queued = make_chart(org)
    running = make_chart(org, state=ChartState.RUNNING)
    assert charts_services.chart_cancel(chart=queued).state == ChartState.CANCELLED
    r = charts_services.chart_cancel(chart=running)
    assert r.state == ChartState.RUNNING and r.cancel_requested
    with pytest.raises(ValidationError) as exc:
        charts_services.chart_cancel(chart=queued)
    assert "already cancelled" in field_message(exc)["state"]


# --- charts: scheduler lifecycle ----------------------------------------------------------------


def test_mark_running_is_compare_and_set():
    chart = make_chart(make_org(), paused=True)  # a pause that raced with the start loses
    assert lifecycle.chart_mark_running(chart_id=chart.pk, cost=2, run_id="r1") is True
    assert lifecycle.chart_mark_running(chart_id=chart.pk, cost=2, run_id="r2") is False
    chart.refresh_from_db()
    assert (chart.state, chart.dispatched_cost, chart.temporal_run_id) == (ChartState.RUNNING, 2, "r1")
    assert chart.paused is False


def test_marking_many_running_in_one_statement_writes_what_one_at_a_time_writes():
    """``charts_mark_running`` (a dispatch's starts, one UPDATE) against ``chart_mark_running``
    chart by chart, over the same rows: queued with and without a first ETA, paused, a
    chart no longer queued (compare-and-set: left alone), with and without an ETA in force."""
    from datetime import timedelta

    from django.db import transaction
    from django.utils import timezone

    org, wf = make_org(), make_workflow()
    now = timezone.now().replace(microsecond=123456)
    first = now - timedelta(minutes=5)
    kinds = [{}, {"eta_first_at": first, "eta_p90_at": first + timedelta(minutes=1)}, {"paused": True},
             {"state": ChartState.CANCELLED}, {"fair_round": 7}]
    etas = [(now + timedelta(minutes=3), now + timedelta(minutes=9)), (now + timedelta(minutes=3), None), ()]

    def rows():
        return [make_chart(org, wf, **kind) for kind in kinds for _ in etas]

    one, many = rows(), rows()
    fields = ("state", "paused", "dispatched_at", "started_at", "dispatched_cost", "temporal_run_id", "error",
              "fair_round", "eta_dispatch_at", "eta_first_at", "eta_p90_at")
    items = [(i, 2 + i % 2, f"run-{i}", now + timedelta(seconds=i), *etas[i % len(etas)]) for i in range(len(one))]
    expected = [lifecycle.chart_mark_running(chart_id=one[i].pk, cost=cost, run_id=run_id, at=at,
                                             eta_at=(eta or [None])[0], p90_at=(list(eta) + [None, None])[1])
                for i, cost, run_id, at, *eta in items]
    with transaction.atomic():
        got = lifecycle.charts_mark_running([(many[i].pk, cost, run_id, at, *eta)
                                             for i, cost, run_id, at, *eta in items])
    assert [got[c.pk] for c in many] == expected == [k.get("state") is None for k in kinds for _ in etas]
    for a, b in zip(one, many):
        a.refresh_from_db(), b.refresh_from_db()
        assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
        assert b.updated_at == a.updated_at or b.state == ChartState.CANCELLED


def test_recording_many_outcomes_writes_each_once_and_counts_them(capture_notifications):
    """``chart_record_outcomes`` (a tick's finishes, one transaction): each outcome as one
    ``chart_record_outcome``: a chart already final left alone, a chart named twice written
    once, each success's duration, the finished counts added up; a note for each written."""
    from datetime import timedelta

    from charts.models import FinishedCount

    org, wf = make_org(), make_workflow()
    charts = [make_chart(org, wf) for _ in range(4)]
    for c in charts:
        lifecycle.chart_mark_running(chart_id=c.pk, cost=1)
        c.refresh_from_db()
    lifecycle.chart_record_outcome(chart_id=charts[3].pk, state=ChartState.FAILED)  # already final
    capture_notifications.clear()
    W = lifecycle.OutcomeWrite
    wrote = lifecycle.chart_record_outcomes([
        W(charts[2].pk, ChartState.FAILED, error="boom"),
        W(charts[0].pk, ChartState.SUCCEEDED, finished_at=charts[0].started_at + timedelta(seconds=30)),
        W(charts[1].pk, ChartState.SUCCEEDED, finished_at=charts[1].started_at + timedelta(seconds=60)),
        W(charts[0].pk, ChartState.FAILED),
        W(charts[3].pk, ChartState.SUCCEEDED),
    ])
    assert wrote == [True, True, True, False, False]
    states = {c.pk: (c.state, c.error) for c in Chart.objects.filter(pk__in=[c.pk for c in charts])}
    assert [states[c.pk] for c in charts] == [(ChartState.SUCCEEDED, ""), (ChartState.SUCCEEDED, ""),
                                              (ChartState.FAILED, "boom"), (ChartState.FAILED, "")]
    pair = DurationStat.objects.get(org=org, workflow=wf)
    assert (pair.count, pair.total_s) == (2, 90.0)
    assert dict(FinishedCount.objects.filter(org=org).values_list("state", "count")) == {
        ChartState.SUCCEEDED: 2, ChartState.FAILED: 2}
    assert sorted(n["id"] for n in capture_notifications) == sorted(c.pk for c in charts[:3])


def test_record_outcome_is_idempotent_and_feeds_duration_stats():
    from datetime import timedelta

    org, wf = make_org(), make_workflow()
    chart = make_chart(org, wf)
    lifecycle.chart_mark_running(chart_id=chart.pk, cost=1)
    chart.refresh_from_db()
    done_at = chart.started_at + timedelta(seconds=90)
    assert lifecycle.chart_record_outcome(chart_id=chart.pk, state=ChartState.SUCCEEDED, finished_at=done_at)
    assert not lifecycle.chart_record_outcome(chart_id=chart.pk, state=ChartState.FAILED)
    chart.refresh_from_db()
    assert chart.state == ChartState.SUCCEEDED
    pair = DurationStat.objects.get(org=org, workflow=wf)
    whole = DurationStat.objects.get(org=org, workflow=None)
    assert (pair.count, pair.avg_s, whole.count, whole.avg_s) == (1, 90.0, 1, 90.0)


def test_requeue_puts_a_running_chart_back():
    chart = make_chart(make_org())
    lifecycle.chart_mark_running(chart_id=chart.pk, cost=1, run_id="r")
    assert lifecycle.chart_requeue(chart_id=chart.pk, reason="unknown to Temporal")
    chart.refresh_from_db()
    assert chart.state == ChartState.QUEUED and chart.dispatched_cost is None and "unknown" in chart.error


def test_a_finish_updates_the_pair_the_org_and_the_workflow_over_all_orgs_with_a_decaying_mean():
    """The workflow's statistic over all orgs (org NULL) is kept beside the pair's and the
    org's, and each is a decaying mean: after a workflow got faster, the estimate follows
    (an all-time mean would stay near the old figure)."""
    from datetime import timedelta

    from charts.selectors import read_durations

    acme, beta = make_org("Acme"), make_org("Beta")
    audit = make_workflow("audit")

    def finish(org, seconds):
        chart = make_chart(org, audit)
        lifecycle.chart_mark_running(chart_id=chart.pk, cost=1)
        chart.refresh_from_db()
        lifecycle.chart_record_outcome(chart_id=chart.pk, state=ChartState.SUCCEEDED,
                                             finished_at=chart.started_at + timedelta(seconds=seconds))

    finish(beta, 120.0)
    finish(beta, 100.0)
    wide = DurationStat.objects.get(org=None, workflow=audit)
    assert (wide.count, wide.avg_s) == (2, 110.0)  # a plain mean of the first finishes
    est = read_durations()
    assert est.averages[(None, "audit")] == 110.0 and (str(acme.pk), "audit") not in est.averages
    assert est.counts[(None, "audit")] == 2
    for _ in range(60):
        finish(beta, 110.0)
    for _ in range(60):
        finish(beta, 20.0)  # the workflow got faster
    wide = DurationStat.objects.get(org=None, workflow=audit)
    all_time = wide.total_s / wide.count
    assert all_time > 60.0
    assert wide.avg_s < 30.0  # 20 s plus 0.96^60 (9%) of the old 90 s gap: 27.8 s
    pair = DurationStat.objects.get(org=beta, workflow=audit)
    assert pair.avg_s == pytest.approx(wide.avg_s)
