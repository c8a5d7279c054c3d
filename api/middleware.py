"""The producer API's door (``/api/v1/`` only; every other path passes untouched).

- The body is read here, under the API's own limit: ``DATA_UPLOAD_MAX_MEMORY_SIZE`` for a
  request, ``FAIRSCHED_API_BATCH_MAX_BYTES`` (32 MiB) for ``/charts/batch`` (1,000 charts with
  payloads). Larger: 413. A body that is not ``application/json``: 415.
- Any answer that is not already problem+json or JSON (Django's 404 page for an unknown
  path, a 405, an error) becomes problem+json: never an HTML page.
- :func:`api.hooks.api_request_done` hears of every request, once, with its final status.
"""
from __future__ import annotations

import io
import logging
import re
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve

from api import hooks
from api.problems import CONTENT_TYPE, Problem

log = logging.getLogger(__name__)

PREFIX = "/api/v1/"
JSON_TYPES = ("application/json", CONTENT_TYPE)
_ROUTE_PARAM = re.compile(r"<(?:\w+:)?(\w+)>")
# The methods an endpoint label names; any other (a client may send any token) is OTHER, so
# invented methods cannot make new metric series (fairsched_api_requests_total's endpoint).
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"})
OTHER_METHOD = "OTHER"


def _limit(request: HttpRequest) -> tuple[int, str]:
    if request.path.rstrip("/").endswith("/charts/batch"):
        return settings.FAIRSCHED_API_BATCH_MAX_BYTES, "FAIRSCHED_API_BATCH_MAX_BYTES"
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 2_621_440, "DATA_UPLOAD_MAX_MEMORY_SIZE"


def _too_large(limit: int, name: str) -> Problem:
    message = f"body: more than {limit:,} bytes ({name}); send less (a batch: fewer charts or smaller payloads)."
    return Problem(413, message, kind="too-large", errors={"body": [message]})


def read_body(request: HttpRequest) -> Problem | None:
    """Read the body now, refusing one over the API's limit; Django's own limit (smaller
    than a batch) then never sees it."""
    if request.method in ("GET", "HEAD", "OPTIONS", "DELETE", "TRACE"):
        return None
    limit, name = _limit(request)
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > limit:
        return _too_large(limit, name)
    body = request.read(limit + 1)
    if len(body) > limit:
        return _too_large(limit, name)
    request._body = body  # what HttpRequest.body caches: the views and the CSRF check read it
    request._stream = io.BytesIO(body)
    if body.strip() and request.content_type not in JSON_TYPES:
        shown = request.content_type or "none"
        message = f"Content-Type: must be application/json, got {shown[:60]}."
        return Problem(415, message, kind="unsupported-media-type", errors={"Content-Type": [message]})
    return None


def endpoint(request: HttpRequest) -> str:
    """``"POST /api/v1/charts/{chart_id}"``: the route, never the id, and a known method or
    ``OTHER`` (a metric's label: its values must be bounded whatever a client sends)."""
    match = getattr(request, "resolver_match", None)
    if match is None:
        try:
            match = resolve(request.path_info)
        except Resolver404:
            return "unmatched"
    route = getattr(match, "route", None)
    if not route:
        return "unmatched"
    template = _ROUTE_PARAM.sub(lambda m: "{" + m.group(1) + "}", route)
    method = request.method if request.method in KNOWN_METHODS else OTHER_METHOD
    return f"{method} /{template}"


def as_problem(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """An error that is not JSON yet (Django's pages) as problem+json."""
    if response.status_code < 400:
        return response
    kind = response.get("Content-Type", "").split(";")[0].strip()
    if kind in JSON_TYPES:
        return response
    if response.status_code == 404:
        problem = Problem(404, f"No such endpoint: {request.method} {request.path[:200]} (see {PREFIX}docs).",
                          kind="not-found")
    elif response.status_code == 405:
        problem = Problem(405, f"{request.method} is not allowed on {request.path[:200]}.",
                          headers={"Allow": response.get("Allow", "")} if response.get("Allow") else None)
    else:
        problem = Problem(response.status_code, f"{response.reason_phrase}.")
    return problem.response(request)


class ApiMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith(PREFIX):
            return self.get_response(request)
        refused = read_body(request)
        response = refused.response(request) if refused else self.get_response(request)
        response = as_problem(request, response)
        hooks.api_request_done(endpoint(request), response.status_code)
        return response

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not request.path.startswith(PREFIX):
            return None
        log.exception("API %s %s failed", request.method, request.path)
        return Problem(500, "Internal error; it is logged.").response(request)
