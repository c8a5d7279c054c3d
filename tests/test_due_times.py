"""Where a chart's due time comes from (docs/scheduling.md, "Due times"): its own, or its
creation plus its org's turnaround; a turnaround change reaches the unfinished charts."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from django.core.exceptions import ValidationError

from charts import services
from charts.models import Chart, ChartState
from control.models import AuditEntry
from fairsched.engine.store import db
from orgs import services as org_services
from tests.factories import make_chart, make_org, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)
UTC = timezone.utc
DAY = timedelta(hours=24)


def test_a_chart_is_due_its_creation_plus_the_turnaround_or_its_own_due_time():
    org, wf = make_org("Acme"), make_workflow()
    none = services.chart_submit(org=org, workflow=wf)
    assert none.due_at is None and not none.due_explicit
    org_services.org_set_turnaround(org=org, turnaround="24h")
    derived = services.chart_submit(org=org, workflow=wf)
    assert derived.due_at == derived.created_at + DAY and not derived.due_explicit
    own = services.chart_submit(org=org, workflow=wf, due_at="2030-01-01T17:00:00Z")
    assert own.due_at == datetime(2030, 1, 1, 17, tzinfo=UTC) and own.due_explicit
    orm = Chart.objects.create(org=org, workflow=wf)  # the plain ORM derives it too
    assert orm.due_at == orm.created_at + DAY
    many = services.chart_submit_many(charts=[{"org": org.pk, "workflow": wf.pk},
                                              {"org": org.pk, "workflow": wf.pk, "due_at": "2031-02-03T04:05:06+00:00"}])
    a, b = Chart.objects.filter(pk__in=many.created).order_by("pk")
    assert a.due_at == a.created_at + DAY and not a.due_explicit
    assert b.due_at == datetime(2031, 2, 3, 4, 5, 6, tzinfo=UTC) and b.due_explicit


@pytest.mark.parametrize("bad", ["tomorrow", "2030-13-01T00:00:00", 17, "x" * 100])
def test_a_bad_due_time_is_refused_naming_the_field(bad):
    org, wf = make_org("Acme"), make_workflow()
    with pytest.raises(ValidationError) as got:
        services.chart_submit(org=org, workflow=wf, due_at=bad)
    assert "due_at" in got.value.message_dict
    with pytest.raises(ValidationError) as got:
        services.chart_submit_many(charts=[{"org": org.pk, "workflow": wf.pk, "due_at": bad}])
    assert "charts[0].due_at" in got.value.message_dict
    assert not Chart.objects.exists()


@pytest.mark.parametrize("bad", ["soon", "0", 30, "400d", -5, True])
def test_a_bad_turnaround_is_refused_naming_the_field(bad):
    org = make_org("Acme")
    with pytest.raises(ValidationError) as got:
        org_services.org_set_turnaround(org=org, turnaround=bad)
    assert "turnaround" in got.value.message_dict


def test_a_turnaround_change_applies_to_the_unfinished_charts_only():
    org, wf = make_org("Acme"), make_workflow()
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    queued = make_chart(org, wf, created_at=t0)
    running = make_chart(org, wf, created_at=t0, state=ChartState.RUNNING)
    done = make_chart(org, wf, created_at=t0, state=ChartState.SUCCEEDED)
    own = make_chart(org, wf, created_at=t0, due_at=t0 + timedelta(hours=1))
    other = make_chart(make_org("Beta"), wf, created_at=t0)
    org_services.org_set_turnaround(org=org, turnaround=timedelta(hours=48), actor=None)
    got = dict(Chart.objects.values_list("pk", "due_at"))
    assert got[queued.pk] == got[running.pk] == t0 + 2 * DAY
    assert got[done.pk] is None and got[own.pk] == t0 + timedelta(hours=1) and got[other.pk] is None
    assert AuditEntry.objects.filter(action="turnaround").count() == 1
    org_services.org_set_turnaround(org=org, turnaround="")
    assert Chart.objects.get(pk=queued.pk).due_at is None
    assert Chart.objects.get(pk=own.pk).due_at == t0 + timedelta(hours=1)
    assert db.read_orgs([org.pk])[0].turnaround_s is None


def test_the_scheduler_reads_own_due_times_and_turnarounds_and_records_warnings():
    org, wf = make_org("Acme"), make_workflow()
    org_services.org_set_turnaround(org=org, turnaround=3600)
    derived = services.chart_submit(org=org, workflow=wf)
    own = services.chart_submit(org=org, workflow=wf, due_at="2030-01-01T00:00:00Z")
    rows, orgs = db.read_charts([derived.pk, own.pk])
    assert orgs[0].turnaround_s == 3600.0
    assert rows[derived.pk].due_at is None and not rows[derived.pk].due_explicit  # derived from the org
    assert rows[own.pk].due_explicit and rows[own.pk].due_at == datetime(2030, 1, 1, tzinfo=UTC).timestamp()
    at = datetime(2029, 6, 1, tzinfo=UTC).timestamp()
    db.record_due_alerts({derived.pk: 2, own.pk: 1}, [derived.pk, own.pk], at)
    db.record_due_alerts({own.pk: 0}, [], at + 60)
    d, o = Chart.objects.get(pk=derived.pk), Chart.objects.get(pk=own.pk)
    assert (d.due_alert, d.due_flagged_at.timestamp(), d.due_alert_at.timestamp()) == ("late", at, at)
    assert o.due_alert == "" and o.due_flagged_at.timestamp() == at  # the first flag stays
    assert d.due_late_at.timestamp() == at and o.due_late_at is None  # the late warning's first rise
    db.record_due_alerts({own.pk: 1}, [own.pk], at + 120)
    db.record_due_alerts({own.pk: 2}, [own.pk], at + 180)  # at risk, then late: late from now
    db.record_due_alerts({derived.pk: 1}, [], at + 180)
    db.record_due_alerts({derived.pk: 2}, [derived.pk], at + 240)  # late again: its first stays
    d, o = Chart.objects.get(pk=derived.pk), Chart.objects.get(pk=own.pk)
    assert (o.due_flagged_at.timestamp(), o.due_late_at.timestamp()) == (at, at + 180)
    assert d.due_late_at.timestamp() == at
    assert db.read_charts([derived.pk])[0][derived.pk].due_alert == "late"  # restored at a restart


@pytest.mark.parametrize("turnaround, text", [(timedelta(minutes=25), "25 min"), ("24h", "24 h"),
                                              (timedelta(hours=1, minutes=30), "1 h 30 min"),
                                              (timedelta(minutes=2, seconds=5), "2 min 5 s")])
def test_a_turnaround_is_audited_in_hours_and_minutes_not_a_fraction_of_an_hour(turnaround, text):
    org = make_org("Acme")
    org_services.org_set_turnaround(org=org, turnaround=turnaround)
    org_services.org_set_turnaround(org=org, turnaround="")
    first, second = AuditEntry.objects.filter(action="turnaround").order_by("pk")
    assert first.summary == f"Set the turnaround of Acme to {text} (was none)"  # not "0.416667 h"
    assert second.summary == f"Set the turnaround of Acme to none (was {text})"
