from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect

from dashboard.permissions import can_view_dashboard


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
