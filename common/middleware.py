"""HTTP middleware: a clear answer to a too-large request, and the Content-Security-Policy.

Django refuses a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (or with more than
``DATA_UPLOAD_MAX_NUMBER_FIELDS`` fields) by raising a ``SuspiciousOperation`` from
wherever the body is first read -- usually the CSRF check. That becomes Django's
debug page under ``DJANGO_DEBUG=1`` (paths and settings shown to whoever sent it)
and a bare "Bad Request" otherwise, and the form input is lost. Here the body is
read first, and a refusal is answered by the kind of page that was asked for.
"""
from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import DisallowedHost, RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.utils.datastructures import MultiValueDict

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
SALVAGE_FACTOR = 8  # a form body up to this many times the limit is read to keep its small fields
KEEP_FIELD_CHARS = 10_000  # fields longer than this are dropped from a salvaged form


def keeps_oversized_form(view: Callable) -> Callable:
    """Mark a form view that re-renders a too-large submission itself: the middleware keeps
    the form's small fields, drops the large ones and lists them in ``request.oversized_fields``."""
    view.keeps_oversized_form = True  # type: ignore[attr-defined]
    return view


def answers_json(view: Callable) -> Callable:
    """Mark a view whose errors are JSON (so a too-large body gets a 413 JSON answer)."""
    view.answers_json = True  # type: ignore[attr-defined]
    return view


def _limit_text() -> str:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return f"{limit:,} bytes" if limit is not None else "the limit"


def _wants_json(request: HttpRequest, view: Callable) -> bool:
    return (getattr(view, "answers_json", False) or request.content_type == "application/json"
            or "application/json" in request.headers.get("Accept", "") or request.path.endswith(".json"))


class RequestBodyLimitMiddleware:
    """Read (and so check) a request's body before the CSRF check and the view do."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view: Callable, args: Any, kwargs: Any) -> HttpResponse | None:
        if request.method in ("GET", "HEAD", "OPTIONS", "TRACE"):
            return None
        try:
            if request.method == "POST" and request.content_type in FORM_TYPES:
                request.POST  # noqa: B018 - parses the form now (file parts are not counted)
            else:
                request.body  # noqa: B018
        except (RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent) as exc:
            return self.refuse(request, view, exc)
        return None

    def refuse(self, request: HttpRequest, view: Callable, exc: Exception) -> HttpResponse | None:
        too_big = isinstance(exc, RequestDataTooBig)
        message = (f"The request is too large: its body is more than {_limit_text()}." if too_big else
                   "The request has too many fields or files.")
        status = 413 if too_big else 400
        if too_big and getattr(view, "keeps_oversized_form", False) and self.salvage(request):
            return None
        if _wants_json(request, view):
            return JsonResponse({"ok": False, "error": message, "errors": {"body": [message]}, "message": message},
                                status=status)
        return HttpResponse(
            f"<!doctype html><title>Request too large</title><h1>{status}</h1><p>{html.escape(message)}</p>"
            "<p>Go back, make it smaller and send it again.</p>", status=status)

    def salvage(self, request: HttpRequest) -> bool:
        """Keep a too-large urlencoded form's small fields (CSRF token, names, ids) so the view
        can show the form again with a message on the fields that were dropped."""
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 0
        length = int(request.META.get("CONTENT_LENGTH") or 0)
        if request.content_type != "application/x-www-form-urlencoded" or not 0 < length <= limit * SALVAGE_FACTOR:
            return False
        try:
            raw = request._stream.read(length)  # unread: Django refused on the Content-Length
            full = QueryDict(raw, encoding=request.encoding)
        except Exception:  # noqa: BLE001 - anything odd: answer with the plain refusal
            return False
        kept, dropped = QueryDict(mutable=True, encoding=request.encoding), []
        for key, values in full.lists():
            if any(len(v) > KEEP_FIELD_CHARS for v in values):
                dropped.append(key)
            else:
                kept.setlist(key, values)
        request._post, request._files = kept, MultiValueDict()
        request.oversized_fields = dropped  # type: ignore[attr-defined]
        return True


# --- Content-Security-Policy ------------------------------------------------------------------

BASE_POLICY = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "font-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}
# django-rq's own templates carry inline scripts (its select-all checkboxes); its pages are
# for superusers only and still load nothing from another origin.
RELAXED_PREFIXES = ("/admin/rq/",)


def content_security_policy(request: HttpRequest) -> str:
    policy = dict(BASE_POLICY)
    try:  # 'self' covers ws: and wss: in CSP level 3; older browsers need the host spelled out
        host = request.get_host()
        policy["connect-src"] = f"'self' ws://{host} wss://{host}"
    except DisallowedHost:
        policy["connect-src"] = "'self'"
    if request.path.startswith(RELAXED_PREFIXES):
        policy["script-src"] = policy["style-src"] = "'self' 'unsafe-inline'"
    return "; ".join(f"{k} {v}" for k, v in policy.items())


class ContentSecurityPolicyMiddleware:
    """Pages load scripts and styles from this origin only: no inline script or style
    runs, so an injected ``<script>`` or ``style=`` does nothing."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if settings.DEBUG and response.status_code >= 400 and response.status_code != 413:
            return response  # Django's debug pages are inline HTML, CSS and JS
        if "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = content_security_policy(request)
        return response
