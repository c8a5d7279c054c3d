"""gunicorn's settings for the API tier: ``gunicorn -c config/gunicorn.conf.py config.wsgi``.

The producers' HTTP (``/api/v1/``, and ``/metrics`` for the scrapers) on a WSGI server, sized
apart from the cockpit's daphne (docs/deploying.md, "The API tier"). gunicorn reads ``PORT``
(bind ``0.0.0.0:$PORT``), ``WEB_CONCURRENCY`` (the worker processes) and
``GUNICORN_CMD_ARGS`` itself; the rest is here.

Why these (``bench/api.py --server gunicorn``, docs/api.md's figures): a request's Python runs
under its process's interpreter lock, so processes, not threads, use the cores: one worker
process a core by default. Threads keep the core busy while a request waits on the database or
Redis: two on SQLite, where more only queue more requests behind the same lock and the
database's one writer, which widened the p95 (20 producers, 2 processes: 8 threads p95 90 ms,
4 threads 74 ms, 2 threads 61 ms, at about the same rate); eight on PostgreSQL, where each
request waits on two round trips and a commit.
"""
from __future__ import annotations

import os

# django.db's connections are lazy: importing them here, in the arbiter, opens nothing
from common import quiet_check
from common.connections import keep_connections

workers = int(os.environ.get("WEB_CONCURRENCY") or os.cpu_count() or 1)
worker_class = "gthread"
# Two threads a process on SQLite (its one writer), eight on PostgreSQL, where a request waits on
# its round trips and its commit while the process's core could run another (docs/api.md's
# figures: 4 threads 1.19x the rate of 2, 8 threads 1.40x the rate of 4, after the statements'
# SQL was built once per connection, common/compiled.py). A connection a thread: WEB_CONCURRENCY
# x threads a host. FAIRSCHED_API_THREADS sets it.
_on_postgres = (os.environ.get("DATABASE_URL") or "").startswith(("postgres://", "postgresql://", "pgsql://"))
threads = int(os.environ.get("FAIRSCHED_API_THREADS") or (8 if _on_postgres else 2))
# A SIGTERM lets requests in flight finish (a batch of 1,000 takes well under a second).
graceful_timeout = 30
# A worker silent this long is restarted by the arbiter (a stuck request, not a slow one).
timeout = 60
# The load balancer in front terminates TLS and keeps connections to us alive.
keepalive = 5
accesslog = None
errorlog = "-"
# gunicorn 27's control socket is one path per user (~/.gunicorn/gunicorn.ctl): two tiers on one
# host (several units, the tests' parallel workers) would share it. Nothing here uses it.
control_socket_disable = True


def post_worker_init(worker) -> None:
    """Each worker's threads keep their database connections from one request to the next
    (``common.connections.keep_connections``: PostgreSQL; SQLite's backend keeps them
    already). A thread of a gthread worker serves one request at a time, so a connection a
    thread is safe, as in the scheduler; under the settings' ``CONN_MAX_AGE = 0`` (right for
    daphne) each request opened one, about 5 ms on PostgreSQL (docs/deploying.md,
    "Deploying beyond one machine"). A kept connection is checked at each request's start by
    its socket, not by ``SELECT 1`` (``common.quiet_check``: a submission's own are two round trips);
    one the server ended is still replaced before use."""
    keep_connections()
    quiet_check.install()
