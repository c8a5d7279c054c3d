"""Database connections kept from one call to the next, for the long-running processes: a
connection a thread for the scheduler, the worker and the API tier's gunicorn, whose threads
live as long as the process (``keep_connections``), and a pool for daphne's web, whose
requests each run on a thread of their own (``pool_connections``)."""
from __future__ import annotations

from django.conf import settings
from django.db import connections

KEEP_CONNECTIONS_S = 300.0


def keep_connections(max_age_s: float = KEEP_CONNECTIONS_S) -> None:
    """Keep this process's database connections open from one call to the next, for
    ``max_age_s`` (Django's ``CONN_MAX_AGE``), where the settings open one per request
    (``CONN_MAX_AGE = 0``, right for the web under ASGI). In the scheduler each thread holds
    one connection and drops an obsolete one before each call
    (``fairsched.engine.store.db.close_old_connections``); with ``CONN_MAX_AGE = 0`` that closed it
    every time, so that each call opened a new one: a dispatch's two reads took 5.9-6.1 ms
    each on PostgreSQL against 1.1-1.3 ms on a kept connection (one process, 200 reads). PostgreSQL only: SQLite's
    backend keeps its closed connections for the next connect already
    (``common.pooled_sqlite3``). A connection the server dropped fails the call that finds
    it, and ``close_old_connections`` before the next call drops it (errors occurred), so that
    call reconnects: the scheduler's step is retried with its backoff.

    For a process whose threads each make many calls, each on its own connection: the
    scheduler (``manage.py runscheduler``) and the Temporal worker (``manage.py runworker``,
    whose activities write through one thread)."""
    for alias in connections:
        if connections.settings[alias]["ENGINE"] != "common.pooled_sqlite3":
            connections.settings[alias]["CONN_MAX_AGE"] = max_age_s


def pool_connections() -> bool:
    """Take this process's PostgreSQL connections from a pool (Django's own, on
    ``psycopg_pool``): a request borrows one for its lifetime and gives it back at its end,
    where the settings' ``CONN_MAX_AGE = 0`` opened and closed one a request (about 5 ms
    here). For daphne's web process (``config/asgi.py``): under ASGI each request runs in a
    context of its own, so a connection cannot be kept a thread as gunicorn's are. At most
    ``FAIRSCHED_DB_POOL_SIZE`` connections (default 10; a request that finds them all lent
    waits up to 10 s for one, then fails as a lost database would); ``FAIRSCHED_DB_POOL=0``
    turns it off. SQLite untouched (``common.pooled_sqlite3`` keeps its connections
    already). Call it before the process opens a connection: Django gives a connection back
    to the pool only if it came from one. True if the pool is on."""
    if not settings.FAIRSCHED_DB_POOL:
        return False
    pooled = False
    for alias in connections:
        db = connections.settings[alias]
        if db["ENGINE"] != "django.db.backends.postgresql":
            continue
        db["CONN_MAX_AGE"] = 0  # Django refuses a pool with persistent connections
        db["OPTIONS"] = {**db.get("OPTIONS", {}),
                         "pool": {"min_size": 1, "max_size": settings.FAIRSCHED_DB_POOL_SIZE, "timeout": 10.0}}
        pooled = True
    return pooled
