from __future__ import annotations

from django.contrib import admin, messages
from django.core.paginator import Paginator
from django.utils.functional import cached_property

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


class CappedPaginator(Paginator):
    """Counts at most ``CAP`` rows (``SELECT COUNT(*) FROM (... LIMIT CAP)``): a list of a
    million charts pages without a full ``COUNT(*)``; past the cap the list says
    "10000" and the last linked page is the cap's (narrow with the filters)."""

    CAP = 10_000

    @cached_property
    def count(self) -> int:
        return self.object_list[:self.CAP].count()


class LiveChartAdmin(LiveChartAdminMixin, ChartAdmin):
    # Trimmed so Position and ETA fit at 1440 px: state, paused and priority share a column,
    # and when a chart finished is the history's business.
    list_display = ("id", "external_id", "org", "workflow", "state_flags", "live_position", "live_eta", "created_at")
    paginator = CappedPaginator
    # The year/month/day drill-down reads the distinct dates of every listed row (3.4 s at
    # 100k charts on SQLite); the date filter (today, past 7 days, this month, this year) does not.
    date_hierarchy = None
    list_filter = ChartAdmin.list_filter + ("created_at",)


class LiveOrgAdmin(LiveOrgAdminMixin, OrgAdmin):
    list_display = OrgAdmin.list_display + ("live_clear",)


for model, model_admin in ((Chart, LiveChartAdmin), (Org, LiveOrgAdmin)):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, model_admin)
