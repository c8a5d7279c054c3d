"""Errors of the producer API as RFC 9457 problem details (``application/problem+json``).

Every refusal is a :class:`Problem`: ``type``, ``title``, ``status``, ``detail`` and an
``errors`` object naming each field (``payload.steps[1]``, ``charts[3].external_id``)
with the services' own messages. A service's :class:`~django.core.exceptions.ValidationError`
becomes one with :func:`from_validation`; a pydantic error of django-ninja with
:func:`from_ninja`.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpResponse

CONTENT_TYPE = "application/problem+json"
TITLES = {
    400: "Bad request", 401: "Unauthorized", 403: "Forbidden", 404: "Not found", 405: "Method not allowed",
    409: "Conflict", 413: "Content too large", 415: "Unsupported media type", 422: "Unprocessable content",
    429: "Too many requests", 500: "Internal error", 503: "Service unavailable",
}
TYPE_BASE = "urn:fairsched:problem:"
# A message that names a deeper field than its key: "payload.steps[1]: contains a NUL character".
_NAMED = re.compile(r"^([A-Za-z_][\w]*(?:\[\d+\]|\.[^\s:\[\].]+)*):\s")


class Problem(Exception):
    """A refusal: raise it anywhere under a view; the API answers it as problem+json."""

    def __init__(self, status: int, detail: str, *, kind: str | None = None,
                 errors: Mapping[str, list[str]] | None = None, headers: Mapping[str, str] | None = None,
                 **extra: Any) -> None:
        super().__init__(detail)
        self.status, self.detail, self.kind = status, detail, kind
        self.errors = {k: list(v) for k, v in (errors or {}).items()}
        self.headers = dict(headers or {})
        self.extra = extra

    def as_json(self) -> dict[str, Any]:
        return {"type": TYPE_BASE + self.kind if self.kind else "about:blank",
                "title": TITLES.get(self.status, "Error"), "status": self.status, "detail": self.detail,
                "errors": self.errors, **self.extra}

    def response(self, request=None) -> HttpResponse:
        body = self.as_json()
        if request is not None:
            body.setdefault("instance", request.path)
        response = HttpResponse(json.dumps(body, separators=(",", ":")), status=self.status,
                                content_type=CONTENT_TYPE)
        for name, value in self.headers.items():
            response[name] = value
        response["Cache-Control"] = "no-store"
        return response


def _field(key: str, message: str) -> str:
    """The field a message names, when it names one at or below ``key`` (the services
    write ``payload.steps[1]: ...`` under the key ``payload``)."""
    m = _NAMED.match(message)
    if m and (m.group(1) == key or m.group(1).startswith((key + ".", key + "[")) or key == "__all__"):
        return m.group(1)
    return "chart" if key == "__all__" else key


def from_validation(exc: ValidationError, *, status: int = 422, kind: str = "validation") -> Problem:
    """A service's refusal, its messages unchanged, each under the field it names."""
    errors: dict[str, list[str]] = {}
    if hasattr(exc, "error_dict"):
        for key, messages in exc.message_dict.items():
            for message in messages:
                errors.setdefault(_field(key, message), []).append(message)
    else:
        for message in exc.messages:
            errors.setdefault(_field("__all__", message), []).append(message)
    detail = " ".join(m for ms in errors.values() for m in ms)
    return Problem(status, detail, kind=kind, errors=errors)


def _path(loc: list[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _shown(e: Mapping[str, Any]) -> str:
    if "input" not in e:
        return ""
    text = repr(e["input"])
    return ", got " + (text if len(text) <= 60 else text[:57] + "...")


def from_ninja(errors: list[dict[str, Any]]) -> Problem:
    """django-ninja's validation errors (pydantic's), named as the services name fields:
    a query or path parameter is a 400, a body field a 422."""
    out: dict[str, list[str]] = {}
    status = 422
    for e in errors:
        loc = list(e.get("loc") or [])
        where = loc.pop(0) if loc else "body"
        if where == "body" and loc and isinstance(loc[0], str):
            loc.pop(0)  # the view's parameter: the body itself
        if where == "path":  # /charts/abc, /charts/0: no such chart
            return Problem(404, "No such chart (an id is a whole number from 1).", kind="not-found")
        if where in ("query", "header"):
            status = 400
        name = _path(loc) or "body"
        kind = e.get("type", "")
        if kind == "missing":
            message = f"{name}: is required." if name != "body" else "body: a JSON object is required."
        elif kind == "extra_forbidden":
            message = f"{name}: unknown field."
        elif kind in ("model_type", "dict_type", "model_attributes_type"):
            message = f"{name}: must be a JSON object{_shown(e)}."
        elif kind == "list_type":
            message = f"{name}: must be a JSON list{_shown(e)}."
        else:
            text = str(e.get("msg") or "invalid").rstrip(".")
            message = f"{name}: {text[0].lower() + text[1:]}{_shown(e)}."
        out.setdefault(name, []).append(message)
    detail = " ".join(m for ms in out.values() for m in ms)
    return Problem(status, detail, kind="validation" if status == 422 else "bad-request", errors=out)
