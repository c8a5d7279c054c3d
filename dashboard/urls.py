"""Included at the site root (``path("", include("dashboard.urls"))``) so that the
staff dashboard and the org pages share the ``dashboard`` namespace."""
from django.urls import path

from dashboard import views

app_name = "dashboard"
urlpatterns = [
    path("dashboard/", views.index, name="index"),
    path("dashboard/state.json", views.state_json, name="state"),
    path("dashboard/order.json", views.order_json, name="order"),
    path("dashboard/plots.json", views.plots_json, name="plots"),
    path("dashboard/accuracy.json", views.accuracy_json, name="accuracy"),
    path("dashboard/control/", views.control, name="control"),
    path("orgs/<slug:slug>/", views.org_page, name="org"),
    path("orgs/<slug:slug>/status.json", views.org_status_json, name="org_status"),
]
