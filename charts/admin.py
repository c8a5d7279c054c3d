from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import F, Q
from django.utils import timezone

from charts import services
from charts.models import FINAL_STATES, Chart, ChartState, DurationStat
from control.admin import audit_table
from control.models import AuditEntry

TIMING = ("created_at", "dispatched_at", "started_at", "finished_at", "dispatched_cost", "dispatched_pools", "temporal_run_id", "error")


class DueFilter(admin.SimpleListFilter):
    """Due times (docs/scheduling.md, "Due times"): the warnings in force on unfinished
    charts, those past their due time, and the finished ones met or missed."""

    title = "due"
    parameter_name = "due"

    def lookups(self, request, model_admin):
        return (("at_risk", "warned: at risk"), ("late", "warned: late"), ("overdue", "unfinished, past due"),
                ("met", "met"), ("missed", "missed"), ("none", "no due time"))

    def queryset(self, request, queryset):
        v, now = self.value(), timezone.now()
        active = Q(state__in=(ChartState.QUEUED, ChartState.RUNNING))
        if v in ("at_risk", "late"):
            return queryset.filter(active, due_alert=v)
        if v == "overdue":
            return queryset.filter(active, due_at__lt=now)
        if v == "met":
            return queryset.filter(state=ChartState.SUCCEEDED, due_at__isnull=False, finished_at__lte=F("due_at"))
        if v == "missed":
            return queryset.filter(state__in=FINAL_STATES, due_at__isnull=False).exclude(
                state=ChartState.SUCCEEDED, finished_at__lte=F("due_at"))
        if v == "none":
            return queryset.filter(due_at__isnull=True)
        return queryset


@admin.register(Chart)
class ChartAdmin(admin.ModelAdmin):
    list_display = ("id", "external_id", "org", "workflow", "state", "priority", "paused", "created_at", "due_at",
                    "due_alert", "finished_at")
    list_filter = ("state", DueFilter, "org", "workflow", "priority", "paused")
    search_fields = ("external_id",)
    list_select_related = ("org", "workflow")
    date_hierarchy = "created_at"
    actions = ["pause", "resume", "prioritize", "unprioritize", "cancel", "move_to_front", "rerun"]
    show_full_result_count = False

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("org", "workflow", "external_id", "payload", "priority", "due_at")
        return ("org", "workflow", "external_id", "payload", "state", "priority", "prioritized_at", "paused",
                "moved_to_front_at", "cancel_requested", "due_at", "due_explicit", "due_alert", "due_flagged_at",
                "due_late_at") + TIMING + ("rerun_of", "activity")

    @admin.display(description="Operator actions")
    def activity(self, obj: Chart) -> str:
        return audit_table(AuditEntry.objects.filter(chart=obj).order_by("-at", "-id")[:50])

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return self.get_fields(request, obj)  # changes go through the actions

    def save_model(self, request, obj: Chart, form, change: bool) -> None:
        if change:
            return
        created = services.chart_submit(
            org=obj.org, workflow=obj.workflow, payload=obj.payload,
            external_id=obj.external_id, priority=obj.priority, due_at=obj.due_at,
        )
        obj.pk = created.pk
        obj.refresh_from_db()

    def _apply(self, request, queryset, service, verb: str) -> None:
        done, failed = 0, []
        for chart in queryset.select_related(None).only("pk"):
            try:
                service(chart=chart.pk, actor=request.user)
                done += 1
            except ValidationError as exc:
                failed.extend(m for msgs in exc.message_dict.values() for m in msgs)
        if done:
            self.message_user(request, f"{verb} {done} chart(s).", level=messages.SUCCESS)
        for msg in failed[:20]:
            self.message_user(request, msg, level=messages.ERROR)
        if len(failed) > 20:
            self.message_user(request, f"... and {len(failed) - 20} more refused.", level=messages.ERROR)

    @admin.action(description="Pause selected queued charts", permissions=["change"])
    def pause(self, request, queryset):
        self._apply(request, queryset, services.chart_pause, "Paused")

    @admin.action(description="Resume selected paused charts", permissions=["change"])
    def resume(self, request, queryset):
        self._apply(request, queryset, services.chart_resume, "Resumed")

    @admin.action(description="Prioritize selected charts (high-priority tier)", permissions=["change"])
    def prioritize(self, request, queryset):
        self._apply(request, queryset, services.chart_prioritize, "Prioritized")

    @admin.action(description="Unprioritize selected charts", permissions=["change"])
    def unprioritize(self, request, queryset):
        self._apply(request, queryset, services.chart_unprioritize, "Unprioritized")

    @admin.action(description="Cancel selected charts", permissions=["change"])
    def cancel(self, request, queryset):
        self._apply(request, queryset, services.chart_cancel, "Cancelled")

    @admin.action(description="Move selected charts to the front of their org's queue", permissions=["change"])
    def move_to_front(self, request, queryset):
        self._apply(request, queryset, services.chart_move_to_front, "Moved to front")

    @admin.action(description="Re-run selected failed or cancelled charts (as new charts)", permissions=["add"])
    def rerun(self, request, queryset):
        self._apply(request, queryset, services.chart_rerun, "Re-ran")


@admin.register(DurationStat)
class DurationStatAdmin(admin.ModelAdmin):
    list_display = ("org", "workflow", "count", "avg_display")
    list_filter = ("org",)
    readonly_fields = ("org", "workflow", "count", "total_s")

    @admin.display(description="Average (s)")
    def avg_display(self, obj: DurationStat) -> str:
        return f"{obj.avg_s:.1f}" if obj.avg_s is not None else "—"

    def has_add_permission(self, request) -> bool:
        return False
