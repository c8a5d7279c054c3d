"""Included at the site root (``path("", include("dashboard.urls"))``) so that the
staff dashboard and the org pages share the ``dashboard`` namespace."""
from django.urls import path

from dashboard import cockpit, views, whatif

app_name = "dashboard"
urlpatterns = [
    path("dashboard/", views.index, name="index"),
    path("dashboard/state.json", views.state_json, name="state"),
    path("dashboard/order.json", views.order_json, name="order"),
    path("dashboard/due.json", views.due_json, name="due"),
    path("dashboard/plots.json", views.plots_json, name="plots"),
    path("dashboard/accuracy.json", views.accuracy_json, name="accuracy"),
    path("dashboard/activity.json", views.activity_json, name="activity"),
    path("dashboard/capacity.json", views.capacity_json, name="capacity"),
    path("dashboard/whatif.json", whatif.whatif_json, name="whatif"),
    path("dashboard/control/", views.control, name="control"),
    path("dashboard/history/", cockpit.history_view, name="history"),
    path("dashboard/search/", cockpit.search_view, name="search"),
    path("dashboard/failures/", cockpit.failures_view, name="failures"),
    path("charts/<int:pk>/", cockpit.chart_view, name="chart"),
    path("charts/<int:pk>/rerun/", cockpit.rerun_view, name="rerun"),
    path("orgs/<slug:slug>/", views.org_page, name="org"),
    path("orgs/<slug:slug>/status.json", views.org_status_json, name="org_status"),
    path("favicon.ico", views.favicon, name="favicon"),
]
