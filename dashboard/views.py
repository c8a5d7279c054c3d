"""The staff dashboard, the org status pages and their JSON endpoints.

Pages render their first state on the server (from the scheduler's snapshot, or
the database when there is none) and then go live over a WebSocket.
"""
from __future__ import annotations

import json
import re
import time
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required, user_passes_test
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from charts import selectors as chart_selectors
from dashboard import controls, history, selectors
from dashboard.permissions import can_view_dashboard
from orgs.models import OrgToken
from common import live_updates
from common import snapshot as snap
from fairsched.temporal import capacity
from common.middleware import answers_json
from common.validation import MAX_ID
from dashboard.accuracy import DEFAULT_LAST, MAX_LAST, accuracy

staff_required = user_passes_test(can_view_dashboard)


class BadQuery(ValueError):
    """A query parameter that is not what the endpoint takes: answered with 400 naming it."""
    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


MAX_OFFSET = 10**9
_DIGITS = re.compile(r"\d{1,20}")


def _int_arg(request: HttpRequest, key: str, default: int | None, *, minimum: int = 0,
             maximum: int = MAX_OFFSET) -> int | None:
    """A whole-number query parameter in ``[minimum, maximum]``; anything else is a :class:`BadQuery`."""
    raw = request.GET.get(key, "")
    if raw == "":
        return default
    if not _DIGITS.fullmatch(raw) or not minimum <= int(raw) <= maximum:
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise BadQuery(key, f"{key}: expected a whole number from {minimum} to {maximum:,}, got {shown!r}.")
    return int(raw)


def _text_arg(request: HttpRequest, key: str, *, max_length: int = 200) -> str | None:
    raw = request.GET.get(key, "")
    if "\x00" in raw:
        raise BadQuery(key, f"{key}: contains a NUL character.")
    if len(raw) > max_length:
        raise BadQuery(key, f"{key}: longer than {max_length} characters.")
    return raw or None


def _bad_query(exc: BadQuery) -> JsonResponse:
    return _json({"error": str(exc), "errors": {exc.key: [str(exc)]}}, 400)


def _json(data: Any, status: int = 200) -> JsonResponse:
    response = JsonResponse(data, status=status, json_dumps_params={"separators": (",", ":")})
    response["Cache-Control"] = "no-store"
    return response


@never_cache
@staff_required
def index(request: HttpRequest) -> HttpResponse:
    try:
        org = _int_arg(request, "org", None, minimum=1, maximum=MAX_ID)
    except BadQuery as exc:
        return HttpResponseBadRequest(str(exc), content_type="text/plain")
    state = selectors.dashboard_state()
    live = state.get("source") == "scheduler"
    initial = {
        "state": state,
        "order": selectors.order_page(state if live else None, offset=0, limit=100, org=org),
        "costs": selectors.workflow_costs(),
        "actions": controls.allowed_actions(request.user),
        "temporal_ui": settings.TEMPORAL_UI_URL.rstrip("/"),
        "temporal_namespace": settings.TEMPORAL_NAMESPACE,
        "ws_path": "/ws/dashboard/",
        "control_url": reverse("dashboard:control"),
        "order_url": reverse("dashboard:order"),
        "plots_url": reverse("dashboard:plots"),
        "chart_url": reverse("dashboard:chart", args=[0]),
        "activity": history.recent_activity(),
        "activity_url": reverse("dashboard:activity"),
    }
    return render(request, "dashboard/index.html", {"initial": initial, "state": state, "live": live,
                                                    "failed_last_hour": history.failed_since(hours=1),
                                                    "capacity": capacity.read()})


@never_cache
@staff_required
@require_GET
def state_json(request: HttpRequest) -> JsonResponse:
    """The dashboard's state, with ``capacity``: the latest worker-capacity check (``fairsched/temporal/capacity.py``)."""
    return _json({**selectors.dashboard_state(), "capacity": capacity.read()})


@never_cache
@staff_required
@require_GET
def capacity_json(request: HttpRequest) -> JsonResponse:
    """The latest worker-capacity check: live workers, their activity slots, the running charts, any warning."""
    return _json(capacity.read())


@never_cache
@staff_required
@require_GET
def order_json(request: HttpRequest) -> JsonResponse:
    """A page of the order: ``?offset=0&limit=100&org=<id>`` (limit at most 500)."""
    try:
        offset, limit, org, state = _page_query(request, selectors.ORDER_STATES)
    except BadQuery as exc:
        return _bad_query(exc)
    s = chart_selectors.read_live_snapshot()
    page = selectors.order_page(s, offset=offset, limit=limit, org=org, state=state)
    return _json({"seq": s.get("seq") if s else None, **page})


def _page_query(request: HttpRequest, states: tuple[str, ...]) -> tuple[int, int, int | None, str | None]:
    """A page's query, ``offset``, ``limit`` (at most ``selectors.PAGE_MAX``), ``org`` and
    ``state`` (one of ``states``), each checked (:class:`BadQuery` names the one that is not)."""
    offset = _int_arg(request, "offset", 0)
    limit = _int_arg(request, "limit", 100, minimum=1, maximum=selectors.PAGE_MAX)
    org = _int_arg(request, "org", None, minimum=1, maximum=MAX_ID)
    state = request.GET.get("state") or None
    if state is not None and state not in states:
        raise BadQuery("state", f"state: one of {', '.join(states)}.")
    return offset, limit, org, state


@never_cache
@staff_required
@require_GET
def due_json(request: HttpRequest) -> JsonResponse:
    """A page of the charts at risk or late, least slack first:
    ``?org=<id>&state=late|at_risk&offset=0&limit=100`` (limit at most 500)."""
    try:
        offset, limit, org, state = _page_query(request, selectors.DUE_STATES)
    except BadQuery as exc:
        return _bad_query(exc)
    s = chart_selectors.read_live_snapshot()
    page = selectors.due_page(s, org=org, state=state, offset=offset, limit=limit)
    return _json({"seq": s.get("seq") if s else None, **page})


@never_cache
@staff_required
@require_GET
def plots_json(request: HttpRequest) -> JsonResponse:
    return _json(selectors.plot_data())


@never_cache
@staff_required
@require_GET
def accuracy_json(request: HttpRequest) -> JsonResponse:
    """ETA accuracy over the last ``?last=500`` finished charts (``dashboard/accuracy.py``)."""
    try:
        last = _int_arg(request, "last", DEFAULT_LAST, minimum=1, maximum=MAX_LAST)
    except BadQuery as exc:
        return _bad_query(exc)
    return _json(accuracy(last=last))


@never_cache
@staff_required
@require_GET
def activity_json(request: HttpRequest) -> JsonResponse:
    """The audit trail's latest entries (the Activity feed reloads them after a reconnect)."""
    return _json({"entries": history.recent_activity()})


@answers_json
@staff_required
@require_POST
def control(request: HttpRequest) -> JsonResponse:
    """The controls over HTTP (when the socket is down): a form or JSON body with ``action``
    and its fields; CSRF-protected like every POST."""
    if request.content_type == "application/json":
        try:
            data = json.loads(request.body or b"{}")
        except ValueError:
            return _json({"ok": False, "errors": {"body": ["Not valid JSON."]}, "message": "Not valid JSON."}, 400)
        if not isinstance(data, dict):
            data = {}
    else:
        data = request.POST.dict()
    outcome = controls.apply_control(request.user, data)
    if outcome.ok and outcome.event:
        live_updates.send(outcome.event.stamped(at=time.time(), by=request.user.get_username()))
    status = 200 if outcome.ok else (403 if "permission" in outcome.errors else 400)
    return _json(outcome.as_json(), status)


# --- org pages --------------------------------------------------------------------------


@never_cache
@login_required
def org_page(request: HttpRequest, slug: str) -> HttpResponse:
    org = selectors.org_for_user(request.user, slug)
    if org is None:
        raise Http404("No such organisation.")
    status = chart_selectors.org_status(org)
    initial = {"status": status, "ws_path": f"/ws/orgs/{org.slug}/"}
    due = status["org"].get("due") or {}
    return render(request, "orgs/status.html", {"org": org, "status": status, "initial": initial,
                                                "live": status["source"] == "scheduler",
                                                "due_charts": snap.read_due(org.pk, limit=50) if status["source"] == "scheduler" else [],
                                                "due_flagged": due.get("at_risk", 0) + due.get("late", 0),
                                                "accuracy": accuracy(org_id=org.pk, points=0)})


def _bearer(request: HttpRequest) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() in {"bearer", "token"} and value.strip():
        return value.strip()
    return None


@never_cache
@require_GET
def org_status_json(request: HttpRequest, slug: str) -> JsonResponse:
    """The org's status for a producer's systems: session login or ``Authorization: Bearer <token>``.

    Query: ``offset``, ``limit`` (default 500, at most 5000), ``external_id``.
    """
    raw = _bearer(request)
    if raw is not None:
        token = OrgToken.authenticate(raw)
        if token is None:
            response = _json({"error": "invalid or revoked token"}, 401)
            response["WWW-Authenticate"] = 'Bearer realm="fairsched"'
            return response
        if token.org.slug != slug:
            raise Http404("No such organisation.")
        org = token.org
    elif request.user.is_authenticated:
        org = selectors.org_for_user(request.user, slug)
        if org is None:
            raise Http404("No such organisation.")
    else:
        response = _json({"error": "authentication required: log in or send Authorization: Bearer <token>"}, 401)
        response["WWW-Authenticate"] = 'Bearer realm="fairsched"'
        return response
    try:
        offset = _int_arg(request, "offset", 0)
        limit = _int_arg(request, "limit", 500, minimum=1, maximum=chart_selectors.ORG_STATUS_MAX)
        external_id = _text_arg(request, "external_id")
    except BadQuery as exc:
        return _bad_query(exc)
    return _json(chart_selectors.org_status(org, offset=offset, limit=limit, external_id=external_id))


def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico``, which browsers ask for on every page: the static icon (pages also link it)."""
    from django.shortcuts import redirect
    from django.templatetags.static import static

    response = redirect(static("dashboard/icons/favicon.ico"), permanent=False)
    response["Cache-Control"] = "public, max-age=86400"
    return response
