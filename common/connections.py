"""Database connections kept from one call to the next, for the long-running processes."""
from __future__ import annotations

from django.db import connections

KEEP_CONNECTIONS_S = 300.0


def keep_connections(max_age_s: float = KEEP_CONNECTIONS_S) -> None:
    """Keep this process's database connections open from one call to the next, for
    ``max_age_s`` (Django's ``CONN_MAX_AGE``), where the settings open one per request
    (``CONN_MAX_AGE = 0``, right for the web under ASGI). In the scheduler each thread holds
    one connection and drops an obsolete one before each call
    (``fairsched.engine.db.close_old_connections``); with ``CONN_MAX_AGE = 0`` that closed it
    every time, so that each call opened a new one: a dispatch's two reads took 5.9-6.1 ms
    each on PostgreSQL against 1.1-1.3 ms on a kept connection (one process, 200 reads). PostgreSQL only: SQLite's
    backend keeps its closed connections for the next connect already
    (``common.pooled_sqlite3``). A connection the server dropped is still found out before
    use (``CONN_HEALTH_CHECKS``, set for PostgreSQL in the settings).

    For a process whose threads each make many calls, each on its own connection: the
    scheduler (``manage.py runscheduler``) and the Temporal worker (``manage.py runworker``,
    whose activities write through one thread)."""
    for alias in connections:
        if connections.settings[alias]["ENGINE"] != "common.pooled_sqlite3":
            connections.settings[alias]["CONN_MAX_AGE"] = max_age_s
