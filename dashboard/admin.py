from __future__ import annotations

from django.contrib import admin
from django.contrib.admin import widgets as admin_widgets
from django.core.paginator import Paginator
from django.utils.functional import cached_property

from charts.admin import ChartAdmin
from charts.models import Chart
from dashboard.admin_live import LiveChartAdminMixin, LiveOrgAdminMixin
from orgs.admin import OrgAdmin
from orgs.models import Org


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
