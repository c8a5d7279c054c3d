from __future__ import annotations

from django.contrib import admin, messages

from charts.admin import ChartAdmin
from charts.models import Chart
from dashboard.admin_live import LiveChartAdminMixin, LiveOrgAdminMixin
from dashboard.models import OrgToken
from orgs.admin import OrgAdmin
from orgs.models import Org


@admin.register(OrgToken)
class OrgTokenAdmin(admin.ModelAdmin):
    """API tokens for /orgs/<slug>/status.json. The token is shown once, when created."""

    list_display = ("org", "name", "prefix", "created_at", "last_used_at", "revoked")
    list_filter = ("revoked", "org")
    search_fields = ("name", "prefix", "org__name")
    actions = ["revoke"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("org", "name")
        return ("org", "name", "prefix", "created_by", "created_at", "last_used_at", "revoked")

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return ("org", "prefix", "created_by", "created_at", "last_used_at")

    def save_model(self, request, obj: OrgToken, form, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        token, raw = OrgToken.issue(org=obj.org, name=obj.name, created_by=request.user)
        obj.pk = token.pk
        obj.refresh_from_db()
        self.message_user(request, f"Token for {obj.org}: {raw} (copy it now; it is not shown again).",
                          level=messages.WARNING)

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request, queryset) -> None:
        n = queryset.update(revoked=True)
        self.message_user(request, f"Revoked {n} token(s).", level=messages.SUCCESS)


# --- live additions to the chart and org admins ---------------------------------------


class LiveChartAdmin(LiveChartAdminMixin, ChartAdmin):
    # Trimmed so Position and ETA fit at 1440 px: state, paused and priority share a column,
    # and when a chart finished is the history's business.
    list_display = ("id", "external_id", "org", "workflow", "state_flags", "live_position", "live_eta", "created_at")


class LiveOrgAdmin(LiveOrgAdminMixin, OrgAdmin):
    list_display = OrgAdmin.list_display + ("live_clear",)


for model, model_admin in ((Chart, LiveChartAdmin), (Org, LiveOrgAdmin)):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, model_admin)
