from __future__ import annotations

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import widgets as admin_widgets
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
    """API keys for /orgs/<slug>/status.json and the producer API (/api/v1/). The key is
    shown once, when created; its scope says what it may do; the rate limit applies to each key."""

    list_display = ("org", "name", "scope", "prefix", "created_at", "last_used_at", "revoked", "rate_limit")
    list_filter = ("revoked", "scope", "org")
    search_fields = ("name", "prefix", "org__name")
    actions = ["revoke"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("org", "name", "scope")
        return ("org", "name", "scope", "prefix", "created_by", "created_at", "last_used_at", "revoked", "rate_limit")

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return ("org", "scope", "prefix", "created_by", "created_at", "last_used_at", "rate_limit")

    @admin.display(description="API rate limit")
    def rate_limit(self, obj: OrgToken | None = None) -> str:
        """The producer API's limit per key (FAIRSCHED_API_RATE, FAIRSCHED_API_BURST)."""
        rate, burst = settings.FAIRSCHED_API_RATE, settings.FAIRSCHED_API_BURST
        if rate <= 0:
            return "none (FAIRSCHED_API_RATE=0)"
        return f"{rate:g} requests/s, bursts of {burst} (FAIRSCHED_API_RATE, FAIRSCHED_API_BURST)"

    def save_model(self, request, obj: OrgToken, form, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        token, raw = OrgToken.issue(org=obj.org, name=obj.name, created_by=request.user, scope=obj.scope)
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


# Every admin form's date-and-time field (a user's last login, a chart's due time): a <label> on
# each of its two inputs (dashboard/templates/admin/widgets/split_datetime_labelled.html); Django's
# own template leaves both unnamed (axe: label). A template of this app, found by the forms' renderer.
admin_widgets.AdminSplitDateTime.template_name = "admin/widgets/split_datetime_labelled.html"
