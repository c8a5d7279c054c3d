"""Services notify the scheduler themselves: once, on commit, never for a rolled-back write,
and no ``post_save`` receiver does it for them (a plain ``Chart.objects.create`` is read by
the incremental resync instead)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from unittest import mock

import pytest
from django.apps import apps
from django.db import transaction
from django.db.models.signals import post_save
from django.utils import timezone

from charts import services as charts_services
from charts.models import Chart, ChartState
from control.models import SchedulerSettings
from fairsched.engine import db
from orgs import services as org_services
from orgs.models import Org
from tests.factories import make_chart, make_cost, make_org, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)

PROJECT_APPS = ("charts", "orgs", "control", "dashboard", "jobs", "fairsched")


class Rollback(Exception):
    pass


def _submit(org, wf, failed):
    return charts_services.chart_submit(org=org, workflow=wf, external_id="mrn-1").pk


def _submit_many(org, wf, failed):
    return charts_services.chart_submit_many(charts=[{"org": org, "workflow": wf}] * 3).created


def _rerun(org, wf, failed):
    return charts_services.chart_rerun(chart=failed).pk


@contextmanager
def no_post_save_receivers() -> Iterator[None]:
    """Every ``post_save`` receiver disconnected for the block: what a service sends, it sends itself."""
    with mock.patch.object(post_save, "receivers", []):
        post_save.sender_receivers_cache.clear()
        try:
            yield
        finally:
            post_save.sender_receivers_cache.clear()


@pytest.mark.parametrize("write", [_submit, _submit_many, _rerun], ids=["submit", "submit_many", "rerun"])
def test_a_submit_notifies_exactly_once_on_commit(write, capture_notifications):
    """The service itself, with no ``post_save`` receiver to notify for it."""
    org, wf = make_org(), make_workflow()
    failed = make_chart(org, wf, state=ChartState.FAILED)
    capture_notifications.clear()
    with no_post_save_receivers(), transaction.atomic():
        made = write(org, wf, failed)
        assert capture_notifications == []  # not before the commit
    if isinstance(made, list):
        assert capture_notifications == [{"kind": "charts", "ids": made, "count": 3}]
    else:
        assert capture_notifications == [{"kind": "chart", "id": made}]


def test_nothing_notifies_on_a_rolled_back_transaction(capture_notifications):
    org, wf = make_org(weight=2), make_workflow()
    failed = make_chart(org, wf, state=ChartState.FAILED)
    queued = make_chart(org, wf)
    capture_notifications.clear()
    with pytest.raises(Rollback), transaction.atomic():
        _submit(org, wf, failed)
        _submit_many(org, wf, failed)
        charts_services.chart_rerun(chart=failed)
        charts_services.chart_pause(chart=queued)
        org_services.org_set_weight(org=org, weight=5)
        org_services.workflow_cost_set(org=org, workflow=wf, cost=3)
        raise Rollback
    assert capture_notifications == []
    assert Chart.objects.count() == 2 and Org.objects.get(pk=org.pk).name == org.name


def _project_instances() -> list:
    org, wf = make_org(), make_workflow()
    return [make_chart(org, wf), org, wf, make_cost(org, wf, 2), SchedulerSettings.get()]


def test_no_post_save_receiver_notifies(capture_notifications):
    """Django's signal registry sends ``post_save`` for a row of each model the scheduler
    reads to every receiver connected: none of them notifies."""
    instances = _project_instances()
    capture_notifications.clear()
    for obj in instances:
        post_save.send(sender=type(obj), instance=obj, created=True, raw=False, using="default", update_fields=None)
        post_save.send(sender=type(obj), instance=obj, created=False, raw=False, using="default",
                       update_fields=None)
    assert capture_notifications == []


def test_the_project_connects_no_post_save_receiver():
    """The registry itself: no model of the project's apps has a ``post_save`` receiver, so a
    save notifies nothing behind a service's back (services notify; resyncs catch the rest)."""
    models = [m for config in apps.get_app_configs() if config.name.split(".")[0] in PROJECT_APPS
              for m in config.get_models()]
    assert {m.__name__ for m in models} >= {"Chart", "Org", "WorkflowCost", "SchedulerSettings"}
    assert [m.__name__ for m in models if post_save.has_listeners(m)] == []


def test_a_plain_orm_create_sends_nothing_and_the_incremental_resync_reads_it(capture_notifications):
    org, wf = make_org(), make_workflow()
    since = timezone.now() - timedelta(seconds=1)
    capture_notifications.clear()
    chart = Chart.objects.create(org=org, workflow=wf, payload={})
    assert capture_notifications == []
    assert chart.pk in [row.id for row in db.read_changes(since).charts]
