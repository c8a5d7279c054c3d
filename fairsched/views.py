from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.urls import NoReverseMatch, reverse


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Staff go to the dashboard, org members to their org's page."""
    if request.user.is_staff:
        try:
            return redirect(reverse("dashboard:index"))
        except NoReverseMatch:
            return redirect("admin:index")
    org = request.user.orgs.order_by("name").first()
    if org is not None:
        try:
            return redirect(reverse("dashboard:org", kwargs={"slug": org.slug}))
        except NoReverseMatch:
            pass
    return HttpResponse("Your account does not belong to any organisation yet.", status=403)


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})
