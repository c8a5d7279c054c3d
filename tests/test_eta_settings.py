"""The ETA model switch: SchedulerSettings.eta_model, through the service and the admin."""
from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from fairsched.engine.db import read_config
from fairsched.models import SchedulerSettings
from fairsched.services import scheduler_settings_set

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
                            "_save": "Save"})
    assert SchedulerSettings.get().eta_model == "lanes"
    resp = admin_client.post(url, {"budget": 4, "eta_interval_s": 3, "reconcile_interval_s": 5, "eta_model": "x",
                                   "_save": "Save"})
    assert "Select a valid choice" in resp.content.decode()
    assert SchedulerSettings.get().eta_model == "lanes"
