from __future__ import annotations

from django.contrib import admin
from django.http import HttpResponseRedirect
from django.urls import reverse

from django.contrib import messages
from django.core.exceptions import ValidationError

from control.models import AuditEntry, Pool, SchedulerSettings
from control.services import pool_delete, pool_set, scheduler_settings_set


@admin.register(SchedulerSettings)
class SchedulerSettingsAdmin(admin.ModelAdmin):
    """The budget dial, the intervals and the policies: one row, edited through the service."""

    fields = ("budget", "eta_interval_s", "reconcile_interval_s", "eta_model", "share", "quantum_s", "dispatch",
              "updated_at")
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
            eta_model=obj.eta_model, share=obj.share, quantum_s=obj.quantum_s, dispatch=obj.dispatch,
            actor=request.user,
        )


@admin.register(Pool)
class PoolAdmin(admin.ModelAdmin):
    """Capacity pools beside the budget (docs/scheduling.md, "Pools"): each edit goes through
    the service (audited, applied by the scheduler at once)."""

    list_display = ("name", "capacity")
    list_editable = ("capacity",)
    fields = ("name", "capacity")

    def get_readonly_fields(self, request, obj=None):
        return ("name",) if obj is not None else ()

    def get_changelist_form(self, request, **kwargs):
        form = super().get_changelist_form(request, **kwargs)

        class Labelled(form):
            def __init__(self, *args, **kw):
                super().__init__(*args, **kw)
                if "capacity" in self.fields and self.instance.pk:
                    w = self.fields["capacity"].widget
                    w.attrs = {**w.attrs, "aria-label": f"capacity of pool {self.instance.name}"}

        return Labelled

    def save_model(self, request, obj: Pool, form, change: bool) -> None:
        try:
            row = pool_set(name=obj.name, capacity=obj.capacity, actor=request.user)
        except ValidationError as exc:
            for msg in exc.messages:
                self.message_user(request, msg, level=messages.ERROR)
            return
        obj.pk = row.pk

    def delete_model(self, request, obj: Pool) -> None:
        pool_delete(name=obj.name, actor=request.user)

    def delete_queryset(self, request, queryset) -> None:
        for obj in queryset:
            pool_delete(name=obj.name, actor=request.user)


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """The audit trail, read-only: entries are written by the services, never by hand."""

    list_display = ("at", "actor_name", "action", "summary", "chart", "org")
    list_filter = ("action", "org")
    search_fields = ("summary", "actor_name", "chart__external_id")
    date_hierarchy = "at"
    list_select_related = ("chart", "org")
    show_full_result_count = False

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


def audit_table(entries) -> str:
    """An admin read-only field: the entries as a small table, newest first."""
    from django.utils.html import format_html, format_html_join

    rows = format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", (
        (f"{e.at:%Y-%m-%d %H:%M:%S}", e.actor_name or "system", e.summary, _json_text(e.before), _json_text(e.after))
        for e in entries))
    if not rows:
        return "No operator actions recorded."
    return format_html('<table class="audit"><thead><tr><th>when</th><th>who</th><th>what</th><th>before</th>'
                       '<th>after</th></tr></thead><tbody>{}</tbody></table>', rows)


def _json_text(value) -> str:
    import json

    return "—" if value is None else json.dumps(value, default=str)
