"""The ETA model switch (SchedulerSettings.eta_model, service and admin) and the ETAs the dispatch CAS writes."""
from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from fairsched.engine.store.db import read_config
from control.models import SchedulerSettings
from control.services import scheduler_settings_set

pytestmark = pytest.mark.django_db(transaction=True)


def test_default_is_forecast_and_the_scheduler_reads_the_setting():
    assert SchedulerSettings.get().eta_model == "forecast"
    assert read_config().eta_model == "forecast"
    scheduler_settings_set(eta_model="lanes")
    assert read_config().eta_model == "lanes"


def test_service_sets_it_and_notifies_the_scheduler(capture_notifications):
    scheduler_settings_set(eta_model="lanes")
    assert SchedulerSettings.get().eta_model == "lanes"
    assert {"kind": "settings"} in capture_notifications


def test_service_refuses_an_unknown_model_naming_the_field():
    with pytest.raises(ValidationError) as err:
        scheduler_settings_set(eta_model="tarot", budget=7)
    assert err.value.message_dict == {"eta_model": ["eta_model must be one of lanes, forecast, got 'tarot'."]}
    assert SchedulerSettings.get().eta_model == "forecast" and SchedulerSettings.get().budget != 7  # nothing saved


def test_admin_edits_it(admin_client):
    url = reverse("admin:fairsched_schedulersettings_change", args=[SchedulerSettings.get().pk])
    page = admin_client.get(url).content.decode()
    assert 'name="eta_model"' in page and "forecast" in page
    admin_client.post(url, {"budget": 4, "eta_interval_s": 3, "reconcile_interval_s": 5, "eta_model": "lanes",
                            "share": "charts", "quantum_s": 600, "dispatch": "strict", "_save": "Save"})
    assert SchedulerSettings.get().eta_model == "lanes"
    resp = admin_client.post(url, {"budget": 4, "eta_interval_s": 3, "reconcile_interval_s": 5, "eta_model": "x",
                                   "share": "charts", "quantum_s": 600, "dispatch": "strict", "_save": "Save"})
    assert "Select a valid choice" in resp.content.decode()
    assert SchedulerSettings.get().eta_model == "lanes"


def test_dispatch_cas_records_the_eta_in_force_and_a_first_eta_only_if_none():
    from datetime import datetime, timedelta, timezone

    from charts.models import Chart
    from charts.lifecycle import chart_mark_running
    from tests.factories import make_chart, make_org

    t = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)
    org = make_org()
    fresh = make_chart(org)
    promised = make_chart(org, eta_first_at=t, eta_p90_at=t + timedelta(minutes=9))
    for c in (fresh, promised):
        assert chart_mark_running(chart_id=c.pk, cost=1, eta_at=t + timedelta(minutes=5),
                                  p90_at=t + timedelta(minutes=7))
    fresh, promised = Chart.objects.get(pk=fresh.pk), Chart.objects.get(pk=promised.pk)
    assert (fresh.eta_first_at, fresh.eta_dispatch_at, fresh.eta_p90_at) == (
        t + timedelta(minutes=5), t + timedelta(minutes=5), t + timedelta(minutes=7))
    assert (promised.eta_first_at, promised.eta_dispatch_at, promised.eta_p90_at) == (
        t, t + timedelta(minutes=5), t + timedelta(minutes=9))  # the first ETA and its bound are kept
    # the compare-and-set still refuses a second dispatch, and writes nothing then
    assert not chart_mark_running(chart_id=fresh.pk, cost=1, eta_at=t, p90_at=t)
    assert Chart.objects.get(pk=fresh.pk).eta_dispatch_at == t + timedelta(minutes=5)
