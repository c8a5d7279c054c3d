"""Who may open django-rq's queue views (they open, delete and requeue any job)."""
from __future__ import annotations

from functools import wraps

from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

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
