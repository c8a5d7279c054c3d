from __future__ import annotations

from functools import wraps

from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect

from dashboard.controls import can_view_dashboard


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Staff who may see the dashboard go there, other staff to the admin, org members to
    their org's page."""
    user = request.user
    if can_view_dashboard(user):
        return redirect("dashboard:index")
    if user.is_staff:
        return redirect("admin:index")
    org = user.orgs.order_by("name").first()
    if org is not None:
        return redirect("dashboard:org", slug=org.slug)
    return HttpResponse("Your account does not belong to any organisation yet.", status=403)


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


RQ_PERMISSION = "jobs.manage_rq_queues"


def can_manage_rq(user) -> bool:
    """The rq queue views open, delete and requeue any job (pending imports, webhook
    deliveries): superusers, or staff given ``jobs.manage_rq_queues`` -- never staff as such."""
    return bool(user and user.is_active and user.is_staff and (user.is_superuser or user.has_perm(RQ_PERMISSION)))


def rq_admin_required(view):
    """Wrap one of django-rq's views: the admin login for anonymous users, 403 for staff
    without the permission."""
    @wraps(view)
    def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not can_manage_rq(request.user):
            raise PermissionDenied(f"The job queues need the {RQ_PERMISSION} permission.")
        return view(request, *args, **kwargs)

    return staff_member_required(wrapped)
