"""Services notify the scheduler themselves: once, on commit, never for a rolled-back write.
A chart saved or deleted through the ORM notifies too (``charts/signals.py``), once a
transaction with a service's own note; no other model's receiver notifies. The admin's org
changes go through ``org_update``."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from unittest import mock

import pytest
from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models.signals import post_save
from django.urls import reverse
from django.utils import timezone

from charts import services as charts_services
from charts.models import Chart, ChartState
from control.models import AuditEntry, SchedulerSettings
from fairsched.engine.store import db
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


@pytest.mark.parametrize("receivers", [False, True], ids=["service-alone", "with-receivers"])
@pytest.mark.parametrize("write", [_submit, _submit_many, _rerun], ids=["submit", "submit_many", "rerun"])
def test_a_submit_notifies_exactly_once_on_commit(write, receivers, capture_notifications):
    """The service itself notifies, with no ``post_save`` receiver to do it for it; with the
    chart's receiver connected too, its save and the service's note are still one note."""
    org, wf = make_org(), make_workflow()
    failed = make_chart(org, wf, state=ChartState.FAILED)
    capture_notifications.clear()
    with (contextlib.nullcontext() if receivers else no_post_save_receivers()), transaction.atomic():
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
        org_services.org_update(org=org, name="Renamed", webhook_clear_margin_s=60)
        org_services.workflow_cost_set(org=org, workflow=wf, cost=3)
        raise Rollback
    assert capture_notifications == []
    assert Chart.objects.count() == 2 and Org.objects.get(pk=org.pk).name == org.name


def _project_instances() -> list:
    org, wf = make_org(), make_workflow()
    return [org, wf, make_cost(org, wf, 2), SchedulerSettings.get()]


def test_no_post_save_receiver_but_the_charts_notifies(capture_notifications):
    """Django's signal registry sends ``post_save`` for a row of each other model the
    scheduler reads to every receiver connected: none of them notifies (their services do)."""
    instances = _project_instances()
    capture_notifications.clear()
    for obj in instances:
        post_save.send(sender=type(obj), instance=obj, created=True, raw=False, using="default", update_fields=None)
        post_save.send(sender=type(obj), instance=obj, created=False, raw=False, using="default",
                       update_fields=None)
    assert capture_notifications == []


def test_the_project_connects_a_post_save_receiver_for_charts_only():
    """The registry itself: of the project's models only ``Chart`` has a ``post_save``
    receiver (the ORM producers' note); every other change notifies through its service."""
    models = [m for config in apps.get_app_configs() if config.name.split(".")[0] in PROJECT_APPS
              for m in config.get_models()]
    assert {m.__name__ for m in models} >= {"Chart", "Org", "WorkflowCost", "SchedulerSettings"}
    assert [m.__name__ for m in models if post_save.has_listeners(m)] == ["Chart"]


def test_a_plain_orm_create_notifies_once_on_commit(capture_notifications):
    """A producer's ``Chart.objects.create`` is seen at once, not at the next resync (it
    waited up to 3 s for it before): one note, after the commit, none on a rollback."""
    org, wf = make_org(), make_workflow()
    capture_notifications.clear()
    with transaction.atomic():
        chart = Chart.objects.create(org=org, workflow=wf, payload={})
        chart.priority = True
        chart.save()
        assert capture_notifications == []  # not before the commit
    assert capture_notifications == [{"kind": "chart", "id": chart.pk}]
    capture_notifications.clear()
    with pytest.raises(Rollback), transaction.atomic():
        Chart.objects.create(org=org, workflow=wf, payload={})
        raise Rollback
    assert capture_notifications == []


def test_an_orm_create_outside_a_transaction_and_a_delete_notify(capture_notifications):
    org, wf = make_org(), make_workflow()
    capture_notifications.clear()
    chart = Chart.objects.create(org=org, workflow=wf, payload={})
    pk = chart.pk
    chart.delete()
    assert capture_notifications == [{"kind": "chart", "id": pk}, {"kind": "chart", "id": pk}]


def test_a_note_dropped_by_a_savepoints_rollback_is_sent_by_the_next_save(capture_notifications):
    """The once-a-transaction rule forgets a note whose hook a savepoint's rollback dropped."""
    org, wf = make_org(), make_workflow()
    chart = make_chart(org, wf)
    capture_notifications.clear()
    with transaction.atomic():
        with pytest.raises(Rollback), transaction.atomic():
            chart.save()
            raise Rollback
        chart.save()
    assert capture_notifications == [{"kind": "chart", "id": chart.pk}]


def test_a_bulk_create_sends_nothing_and_the_incremental_resync_reads_it(capture_notifications):
    org, wf = make_org(), make_workflow()
    since = timezone.now() - timedelta(seconds=1)
    capture_notifications.clear()
    chart, = Chart.objects.bulk_create([Chart(org=org, workflow=wf, payload={})])
    assert capture_notifications == []
    pk = chart.pk or Chart.objects.get().pk
    assert pk in [row.id for row in db.read_changes(since).charts]


# --- org_update: the admin's one door ----------------------------------------------------------------


def org_form(org: Org, **changes) -> dict:
    data = {"name": org.name, "slug": org.slug, "weight": org.weight, "webhook_url": org.webhook_url,
            "webhook_secret": org.webhook_secret, "webhook_clear_margin_s": org.webhook_clear_margin_s,
            "costs-TOTAL_FORMS": 0, "costs-INITIAL_FORMS": 0, "costs-MIN_NUM_FORMS": 0,
            "costs-MAX_NUM_FORMS": 1000, "_save": "Save"}
    data.update(changes)
    return data


def test_an_admin_change_of_a_non_weight_field_is_audited_and_notified(admin_client, capture_notifications):
    org = make_org("Acme", weight=2)
    capture_notifications.clear()
    resp = admin_client.post(reverse("admin:orgs_org_change", args=[org.pk]),
                             org_form(org, name="Acme Health", webhook_clear_margin_s=120), follow=True)
    assert resp.status_code == 200
    org.refresh_from_db()
    assert (org.name, org.webhook_clear_margin_s, org.weight) == ("Acme Health", 120, 2)
    rename, webhook = AuditEntry.objects.filter(org=org).order_by("id")  # one entry a change, by its service
    assert {rename.action, webhook.action} == {"org_change"} and rename.actor_name == webhook.actor_name == "admin"
    assert (rename.before, rename.after) == ({"name": "Acme"}, {"name": "Acme Health"})
    assert rename.summary == "Changed name of Acme Health (was Acme)"
    assert (webhook.before, webhook.after) == ({"webhook_clear_margin_s": 600}, {"webhook_clear_margin_s": 120})
    assert capture_notifications == [{"kind": "org", "id": org.pk}]  # one note for the transaction


def test_an_admin_change_of_weight_and_webhook_is_one_notification_and_hides_the_secret(
        admin_client, capture_notifications):
    org = make_org("Acme", weight=2)
    capture_notifications.clear()
    admin_client.post(reverse("admin:orgs_org_change", args=[org.pk]),
                      org_form(org, weight=0, webhook_url="https://hooks.example.com/x",
                               webhook_secret="s3cret-value"), follow=True)
    org.refresh_from_db()
    assert (org.weight, org.weight_before_hold, org.webhook_secret) == (0, 2, "s3cret-value")
    entries = {e.action: e for e in AuditEntry.objects.filter(org=org)}
    assert set(entries) == {"weight", "org_change"}
    assert entries["weight"].before == {"weight": 2} and entries["weight"].after == {"weight": 0}
    assert entries["org_change"].after == {"webhook_url": "https://hooks.example.com/x",
                                           "webhook_secret": "(new secret)"}
    assert "s3cret" not in str(entries["org_change"].before) + entries["org_change"].summary
    assert capture_notifications == [{"kind": "org", "id": org.pk}]


def test_an_admin_change_of_max_queued_is_stored_audited_and_can_be_cleared(admin_client, capture_notifications):
    """It had said "changed successfully" and stored nothing (docs/api.md says to set it there)."""
    org = make_org("Acme", weight=2)
    capture_notifications.clear()
    resp = admin_client.post(reverse("admin:orgs_org_change", args=[org.pk]), org_form(org, max_queued=500),
                             follow=True)
    assert resp.status_code == 200 and "changed successfully" in resp.content.decode()
    org.refresh_from_db()
    assert org.max_queued == 500
    entry = AuditEntry.objects.get(org=org)
    assert (entry.action, entry.before, entry.after) == ("org_change", {"max_queued": None}, {"max_queued": 500})
    assert capture_notifications == [{"kind": "org", "id": org.pk}]
    admin_client.post(reverse("admin:orgs_org_change", args=[org.pk]), org_form(org, max_queued=""), follow=True)
    org.refresh_from_db()
    assert org.max_queued is None  # empty: no cap
    resp = admin_client.post(reverse("admin:orgs_org_change", args=[org.pk]), org_form(org, max_queued=-3))
    assert resp.status_code == 200 and "errornote" in resp.content.decode()  # the form refuses it, nothing stored
    org.refresh_from_db()
    assert org.max_queued is None


def test_an_admin_save_with_nothing_changed_records_nothing(admin_client, capture_notifications):
    org = make_org("Acme", weight=2)
    capture_notifications.clear()
    admin_client.post(reverse("admin:orgs_org_change", args=[org.pk]), org_form(org), follow=True)
    assert not AuditEntry.objects.exists() and capture_notifications == []


@pytest.mark.parametrize(("changes", "field"), [
    ({"name": " "}, "name"),
    ({"name": "A\x00B"}, "name"),
    ({"name": "Taken"}, "name"),
    ({"weight": -1}, "weight"),
    ({"weight": True}, "weight"),
    ({"webhook_clear_margin_s": "soon"}, "webhook_clear_margin_s"),
    ({"webhook_url": "ftp://hooks.example.com", "webhook_secret": "k"}, "webhook_url"),
    ({"webhook_url": "https://hooks.example.com"}, "webhook_secret"),
    ({"webhook_secret": "whsec_!!"}, "webhook_secret"),
    ({"members": [10**6]}, "members"),
    ({"max_queued": -1}, "max_queued"),
    ({"max_queued": 10**9}, "max_queued"),
    ({"max_queued": "many"}, "max_queued"),
    ({"budget": 3}, "budget"),
], ids=["blank-name", "nul-name", "taken-name", "negative-weight", "bool-weight", "margin-text", "ftp-url",
        "url-without-secret", "bad-whsec", "unknown-member", "negative-cap", "huge-cap", "text-cap",
        "unknown-field"])
def test_org_update_refuses_a_bad_value_naming_the_field_and_writes_nothing(changes, field,
                                                                            capture_notifications):
    org = make_org("Acme", weight=2)
    make_org("Taken")
    row = Org.objects.filter(pk=org.pk).values().get()
    capture_notifications.clear()
    with pytest.raises(ValidationError) as exc:
        org_services.org_update(org=org, **{"name": "Acme Health", **changes})  # the good name is not written either
    assert list(exc.value.message_dict) == [field]
    assert all(m.startswith(field) for m in exc.value.message_dict[field]), exc.value.message_dict  # names it
    assert Org.objects.filter(pk=org.pk).values().get() == row
    assert not AuditEntry.objects.exists() and capture_notifications == []


def test_org_update_records_members_by_username_and_a_blank_slug_becomes_the_names(capture_notifications):
    from tests.factories import make_user

    org, ann, bob = make_org("Acme"), make_user("ann"), make_user("bob")
    org.members.add(ann)
    capture_notifications.clear()
    saved = org_services.org_update(org=org.pk, members=[bob, ann.pk], name="Acme Health", slug="")
    assert saved.slug == "acme-health" and set(saved.members.all()) == {ann, bob}
    rename, members = AuditEntry.objects.order_by("id")
    assert (rename.before, rename.after) == ({"name": "Acme", "slug": "acme"}, {"name": "Acme Health", "slug": "acme-health"})
    assert rename.summary == "Changed name, slug of Acme Health (was Acme)"
    assert (members.before, members.after) == ({"members": ["ann"]}, {"members": ["ann", "bob"]})
    assert members.summary == "Changed members of Acme Health"
    assert capture_notifications == [{"kind": "org", "id": org.pk}]
    capture_notifications.clear()
    org_services.org_update(org=org, members=[ann, bob], name="Acme Health")  # the same: no change
    assert AuditEntry.objects.count() == 2 and capture_notifications == []


@pytest.mark.parametrize(("service", "changes", "audited"), [
    ("org_rename", {"name": "Acme Health"}, {"name": "Acme Health"}),
    ("org_set_webhook", {"webhook_url": "https://hooks.example.com/x", "webhook_secret": "k"},
     {"webhook_url": "https://hooks.example.com/x", "webhook_secret": "(new secret)"}),
    ("org_set_max_queued", {"max_queued": 7}, {"max_queued": 7}),
], ids=["rename", "webhook", "max_queued"])
def test_each_org_change_has_its_own_service_audited_and_notified(service, changes, audited, capture_notifications):
    org = make_org("Acme")
    capture_notifications.clear()
    saved = getattr(org_services, service)(org=org, **changes)
    assert {f: getattr(saved, f) for f in changes} == changes
    entry = AuditEntry.objects.get()
    assert entry.action == "org_change" and entry.after == audited
    assert capture_notifications == [{"kind": "org", "id": org.pk}]
    capture_notifications.clear()
    getattr(org_services, service)(org=org, **changes)  # the same again: no change
    assert AuditEntry.objects.count() == 1 and capture_notifications == []
