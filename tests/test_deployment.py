"""The deployment id: written once into the database, checked against FAIRSCHED_DEPLOYMENT,
and the legacy cut fixed once (:mod:`control.deployment`)."""
from __future__ import annotations

import importlib

import pytest
from django.apps import apps as django_apps
from django.db import connection
from django.core.management import CommandError, call_command

from control import deployment
from fairsched.engine.store import db
from charts.models import Chart
from control.models import Deployment
from common.workflow_ids import use_workflow_ids, workflow_id
from tests.factories import make_chart, make_org, make_workflow

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _from_the_database():
    use_workflow_ids(None)  # resolve from the database, as the web and the jobs do
    deployment.forget()


def test_unset_a_deployment_id_is_generated_once_and_kept(settings):
    settings.FAIRSCHED_DEPLOYMENT = ""
    first = deployment.ensure()
    deployment.forget()
    assert deployment.ensure().deployment == first.deployment
    assert Deployment.objects.get().name == first.deployment and len(first.deployment) == 8


def test_a_set_deployment_id_is_written_and_a_different_one_refused(settings):
    settings.FAIRSCHED_DEPLOYMENT = "prod"
    assert deployment.ensure().deployment == "prod"
    deployment.forget()
    settings.FAIRSCHED_DEPLOYMENT = "staging"
    with pytest.raises(deployment.DeploymentMismatch, match="FAIRSCHED_DEPLOYMENT is 'staging' but this database "
                                                            "belongs to deployment 'prod'"):
        deployment.ensure()
    with pytest.raises(CommandError, match="belongs to deployment 'prod'"):
        call_command("runworker")  # refuses to start, saying why
    with pytest.raises(deployment.DeploymentMismatch):
        db.deployment()  # the scheduler's take-over: runscheduler exits with the same CommandError
    assert Deployment.objects.get().name == "prod"


def test_an_invalid_deployment_id_is_refused(settings):
    settings.FAIRSCHED_DEPLOYMENT = "Prod-1"
    with pytest.raises(deployment.ImproperlyConfigured, match="FAIRSCHED_DEPLOYMENT: a lowercase letter"):
        deployment.ensure()


def test_a_new_database_has_no_legacy_cut_and_its_first_process_names_it(settings):
    """Its migration (with no chart in the database) wrote the row with the cut at 1 and no
    name: the first process to need it names it, and even the first chart, created before any
    scheduler led (the demo's seed on a fresh ``make run``), runs as ``chart-<deployment>-<pk>``."""
    migration = importlib.import_module("charts.migrations.0014_no_legacy_cut_on_a_new_database")
    migration.no_legacy_cut_on_a_new_database(django_apps, connection.schema_editor())  # a new database's
    row = Deployment.objects.get()
    assert (row.name, row.legacy_below) == ("", 1)
    settings.FAIRSCHED_DEPLOYMENT = "prod"
    first = make_chart(make_org("acme"), make_workflow())
    assert workflow_id(first.pk) == f"chart-prod-{first.pk}"
    assert db.deployment() == deployment.ensure() and Deployment.objects.get().name == "prod"
    assert db.deployment().legacy_below == 1  # the first lead keeps it


def test_the_migration_leaves_a_database_with_charts_or_a_deployment_as_it_was():
    migration = importlib.import_module("charts.migrations.0014_no_legacy_cut_on_a_new_database")
    editor = connection.schema_editor()
    make_chart(make_org("acme"), make_workflow())
    migration.no_legacy_cut_on_a_new_database(django_apps, editor)
    assert not Deployment.objects.exists()  # a chart: its cut waits for the first lead
    Deployment.objects.create(pk=1, name="prod")
    Chart.objects.all().delete()
    migration.no_legacy_cut_on_a_new_database(django_apps, editor)
    assert Deployment.objects.get().legacy_below is None  # a row: as it was


def test_the_charts_before_the_first_lead_keep_their_legacy_id_and_the_cut_is_written_once(settings):
    """A database from before deployment ids (no row yet: the suite's own, tests/conftest.py)."""
    settings.FAIRSCHED_DEPLOYMENT = "prod"
    org, wf = make_org("acme"), make_workflow()
    old = make_chart(org, wf)
    assert workflow_id(old.pk) == f"chart-{old.pk}"  # no scheduler of this version has led: all legacy
    ids = db.deployment()
    new = make_chart(org, wf)
    assert ids.legacy_below == old.pk + 1
    assert old.temporal_workflow_id == f"chart-{old.pk}" and new.temporal_workflow_id == f"chart-prod-{new.pk}"
    deployment.forget()
    assert db.deployment().legacy_below == old.pk + 1  # written once: the next lead keeps it
    assert db.legacy_active(ids)  # the old chart is queued
    old.state = "succeeded"
    old.save()
    assert not db.legacy_active(ids)
