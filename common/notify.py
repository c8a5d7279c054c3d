"""Notifications to the scheduler, sent when the writing transaction commits.

Every write goes through a service, and every service calls :func:`notify` inside
its transaction. The message is published on the Redis channel
:data:`CHANNEL` only after commit (Zulip's pattern), so the scheduler never
sees a change that rolled back. Messages are hints, not the truth: the
scheduler re-reads the rows they name, and a periodic resync catches anything
that sent no message (bulk ORM writes, raw SQL, a Redis outage). Publishing
never fails a write: a Redis error is logged and the resync repairs it.

Message shapes (JSON objects)::

    {"kind": "chart", "id": 12}          a chart was created or changed
    {"kind": "charts", "ids": [..]}      several charts (bulk submit)
    {"kind": "org", "id": 3}             weight / hold / release
    {"kind": "cost", "org": 3, "workflow": 2}
    {"kind": "settings"}                 budget or intervals
    {"kind": "resync"}                   re-read everything
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import redis
from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

CHANNEL = "fairsched:scheduler"

_local = threading.local()
_client_lock = threading.Lock()
_client: redis.Redis | None = None
_client_url: str | None = None

# Test seam: when set, messages go here instead of Redis (see tests' capture_notifications).
_capture: list[Callable[[dict[str, Any]], None]] = []


def redis_client() -> redis.Redis:
    """A shared Redis client with short timeouts (web requests must not hang on Redis)."""
    global _client, _client_url
    with _client_lock:
        if _client is None or _client_url != settings.REDIS_URL:
            _client = redis.Redis.from_url(
                settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=1, health_check_interval=30
            )
            _client_url = settings.REDIS_URL
        return _client


def publish(message: dict[str, Any]) -> None:
    """Publish ``message`` now (outside any transaction). Never raises."""
    if _capture:
        for sink in list(_capture):
            sink(message)
        return
    try:
        redis_client().publish(CHANNEL, json.dumps(message))
    except redis.RedisError as exc:
        log.warning("scheduler notification not sent (%s); the periodic resync will catch up: %s", exc, message)


def notify(kind: str, **data: Any) -> None:
    """Queue a notification to the scheduler for when the current transaction commits."""
    message = {"kind": kind, **data}
    transaction.on_commit(lambda: publish(message))
