"""What the producer API tells the rest of the system about each request it answered.

:func:`api_request_done` is called once per request to ``/api/v1/``, from one place
(:class:`api.middleware.ApiMiddleware`), after the answer is final (problem responses
included): ``endpoint`` is the route (``"POST /api/v1/charts"``,
``"GET /api/v1/charts/{chart_id}"``, ``"unmatched"`` for a path no route has), ``code``
the status code. The metrics (``fairsched_api_requests_total{endpoint, code}``) count here:
register a listener with :func:`connect`; a listener that raises is logged, never fails
the request.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

_listeners: list[Callable[[str, int], None]] = []


def connect(listener: Callable[[str, int], None]) -> None:
    """Call ``listener(endpoint, code)`` after every API request (idempotent per listener)."""
    if listener not in _listeners:
        _listeners.append(listener)


def disconnect(listener: Callable[[str, int], None]) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def api_request_done(endpoint: str, code: int) -> None:
    for listener in tuple(_listeners):
        try:
            listener(endpoint, code)
        except Exception:  # noqa: BLE001 - a metric must never fail a request
            log.exception("api_request_done listener %r failed", listener)
