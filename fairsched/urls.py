from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from fairsched import views

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/rq/", include("django_rq.urls")),
    path("admin/", admin.site.urls),
    path("charts/", include("charts.urls")),
    path("", include("dashboard.urls")),  # /dashboard/... and /orgs/<slug>/...
]
