from __future__ import annotations

from django.contrib import admin
from django.http import HttpResponseRedirect
from django.urls import reverse

from fairsched.models import SchedulerSettings
from fairsched.services import scheduler_settings_set


@admin.register(SchedulerSettings)
class SchedulerSettingsAdmin(admin.ModelAdmin):
    """The budget dial and the intervals: one row, edited through the service."""

    fields = ("budget", "eta_interval_s", "reconcile_interval_s", "eta_model", "updated_at")
    readonly_fields = ("updated_at",)

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def changelist_view(self, request, extra_context=None):
        obj = SchedulerSettings.get()
        return HttpResponseRedirect(reverse("admin:fairsched_schedulersettings_change", args=[obj.pk]))

    def save_model(self, request, obj: SchedulerSettings, form, change: bool) -> None:
        scheduler_settings_set(
            budget=obj.budget, eta_interval_s=obj.eta_interval_s, reconcile_interval_s=obj.reconcile_interval_s,
            eta_model=obj.eta_model,
        )
