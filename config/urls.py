"""The URLs of the whole site: the org pages and dashboard, the producer form, the admin."""
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django_rq.urls import get_admin_urlpatterns, get_api_urlpatterns

from api.views import api as api_v1
from config import views
from jobs.permissions import rq_admin_required
from monitoring.views import metrics_view

# django-rq's views only check is_staff: every one of them is wrapped in rq_admin_required.
rq_urlpatterns = get_api_urlpatterns() + get_admin_urlpatterns(view_wrapper=rq_admin_required)
for _pattern in rq_urlpatterns[: len(get_api_urlpatterns())]:
    _pattern.callback = rq_admin_required(_pattern.callback)

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),  # Prometheus (docs/metrics.md)
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/rq/", include((rq_urlpatterns, "django_rq"))),
    path("admin/", admin.site.urls),
    path("charts/", include("charts.urls")),
    path("api/v1/", api_v1.urls),  # the producer API (docs/api.md)
    path("", include("dashboard.urls")),  # /dashboard/... and /orgs/<slug>/...
]
