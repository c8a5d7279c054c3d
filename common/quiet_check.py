"""A kept PostgreSQL connection's health check without a round trip, for the API tier.

With ``CONN_HEALTH_CHECKS`` Django checks a kept connection before each request's first query
with ``SELECT 1``: a round trip a request, beside a single submission's own two
(docs/api.md, "Round trips"). A connection the server ended (a
restart, ``pg_terminate_backend``, ``idle_session_timeout``) has something to read on its
socket, the server's goodbye or the end of the stream; a live idle one has nothing. So at a
request's start (``request_started``, after Django's own receiver) a connection that is idle,
not broken and has nothing to read is marked checked; any other is left to Django's
``SELECT 1`` as before, which closes a dead one and opens a new one before the request uses it.
"""
from __future__ import annotations

import select

from django.core.signals import request_started
from django.db import connections


def socket_is_quiet(conn) -> bool:
    """The psycopg connection ``conn`` is open, idle outside a transaction, and its socket has
    nothing to read (no notice, no goodbye, no end of stream)."""
    import psycopg

    if conn is None or conn.closed or conn.broken:
        return False
    if conn.info.status != psycopg.pq.ConnStatus.OK or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return False
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


def check_quietly(**kwargs) -> None:
    for alias in connections:
        wrapper = connections[alias]
        if (wrapper.vendor == "postgresql" and wrapper.connection is not None and wrapper.health_check_enabled
                and not wrapper.health_check_done and socket_is_quiet(wrapper.connection)):
            wrapper.health_check_done = True


def install() -> None:
    """Turn Django's health checks on for this process's PostgreSQL connections and check a kept
    one by its socket at each request's start (the API tier's gunicorn workers,
    ``config/gunicorn.conf.py``). Call it before the process opens a connection.

    ``dj_database_url.parse`` gives the key, False, so they were off (the settings' old
    ``setdefault("CONN_HEALTH_CHECKS", True)`` did nothing): a kept connection the server
    had ended failed the next request on it with a 503 (tests/api/test_api_tier.py). Connected
    after ``django.db``'s own receiver, which resets the check: this one runs after it."""
    for alias in connections:
        if connections.settings[alias]["ENGINE"] == "django.db.backends.postgresql":
            connections.settings[alias]["CONN_HEALTH_CHECKS"] = True
    request_started.connect(check_quietly, dispatch_uid="common.quiet_check")
