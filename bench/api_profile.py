"""Where a single submission's milliseconds go, in one process, on one thread.

Run from the repo root: ``.venv/bin/python bench/api_profile.py --postgres URL [--requests 3000]
[--profile] [--top 40]``.

Starts its own Redis and a fresh database on the PostgreSQL server of ``URL`` (dropped after),
sets the process up as the API tier's gunicorn worker does (``config/gunicorn.conf.py``'s
``post_worker_init``: kept connections, the quiet health check) and calls the WSGI application
(``config.wsgi``: Django's handler, every middleware, the URL conf, django-ninja, the view)
with a WSGI environ as gunicorn builds it, ``--requests`` times in a row, for:

- ``POST /api/v1/charts`` (no key of idempotency, no ``external_id``: the bench's singles);
- ``GET /healthz`` (the web stack's floor);
- ``chart_submit_created`` alone, as the view calls it (the service's floor: its two round
  trips are the key's read and the insert; here the org is read once before).

Each as a mean in ms a request (wall and this thread's CPU). ``--profile`` adds a cProfile of
the POSTs (``--sort``, the ``--top`` lines; ``--cpu``: this thread's CPU time, not the wall's),
then a split by layer from the same profile.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def environ(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> dict:
    env = {
        "REQUEST_METHOD": method, "SCRIPT_NAME": "", "PATH_INFO": path, "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000", "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "50000", "RAW_URI": path,
        "wsgi.version": (1, 0), "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr, "wsgi.multithread": True, "wsgi.multiprocess": True,
        "wsgi.run_once": False, "HTTP_HOST": "127.0.0.1:8000", "HTTP_CONNECTION": "keep-alive",
        "HTTP_USER_AGENT": "Python-urllib/3", "HTTP_ACCEPT_ENCODING": "identity",
    }
    if body:
        env["CONTENT_LENGTH"] = str(len(body))
        env["CONTENT_TYPE"] = "application/json"
    for name, value in (headers or {}).items():
        env[f"HTTP_{name.upper().replace('-', '_')}"] = value
    return env


def call(app, env: dict) -> int:
    status = []

    def start_response(s, h, exc_info=None):
        status.append(int(s.split(" ", 1)[0]))

    result = app(env, start_response)
    for _ in result:
        pass
    if hasattr(result, "close"):
        result.close()
    return status[0]


def timed(n: int, fn) -> tuple[float, float]:
    """Mean wall and CPU (this thread) in ms over ``n`` calls."""
    w0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(n):
        fn()
    return (time.perf_counter() - w0) * 1000 / n, (time.thread_time() - c0) * 1000 / n


LAYERS = [  # (label, a function whose cumulative time is the layer's, by file and name)
    ("WSGIHandler.__call__ (the whole request)", "django/core/handlers/wsgi.py", "__call__"),
    ("  request_started signal (connections' checks)", "django/dispatch/dispatcher.py", "send"),
    ("  WSGIRequest built", "django/core/handlers/wsgi.py", "__init__"),
    ("  ninja: PathView / Operation.run", "ninja/operation.py", "run"),
    ("    auth (KeyAuth: key read, rate limit)", "ninja/operation.py", "_run_authentication"),
    ("    parse + validate (pydantic)", "ninja/operation.py", "_get_values"),
    ("    the view (submit)", "api/views.py", "submit"),
    ("      chart_submit_created", "charts/services.py", "chart_submit_created"),
    ("      describe", "api/charts.py", "describe"),
    ("      _json", "api/views.py", "_json"),
    ("    result to response", "ninja/operation.py", "_result_to_response"),
    ("  SQL executed (all)", "django/db/backends/utils.py", "execute"),
    ("  psycopg execute (round trips)", "psycopg/cursor.py", "execute"),
    ("  rate limit take", "api/ratelimit.py", "take"),
    ("  metrics hook", "api/hooks.py", "api_request_done"),
    ("  notify (to the scheduler)", "common/notify.py", "send"),
]


def layers(stats: pstats.Stats, n: int) -> None:
    print(f"\n{'layer (cumulative, from the profile; ms a request)':<55} {'ms':>7}")
    for label, file, name in LAYERS:
        total = sum(v[3] for (f, _, fn), v in stats.stats.items() if f.endswith(file) and fn == name)
        print(f"{label:<55} {total * 1000 / n:7.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--postgres", required=True, help="a PostgreSQL server's URL")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--sort", default="cumulative")
    parser.add_argument("--save", default="", help="write the profile's stats to this file (pstats)")
    parser.add_argument("--cpu", action="store_true", help="profile this thread's CPU time, not the wall's")
    args = parser.parse_args()

    from bench._stack import drop_postgres, fresh_postgres
    from fairsched.runtime import embedded

    tmp = Path(tempfile.mkdtemp(prefix="fairsched-api-profile-"))
    database = fresh_postgres(args.postgres, f"fairsched_api_profile_{os.getpid()}")
    redis = embedded.start_redis(log=tmp / "redis.log")
    os.environ.update({"DATABASE_URL": database, "REDIS_URL": redis.url, "FAIRSCHED_CHANNEL_LAYER": "memory",
                       "DJANGO_SETTINGS_MODULE": "config.settings", "DJANGO_DEBUG": "0",
                       "DJANGO_SECRET_KEY": "bench", "DJANGO_SECURE_SSL_REDIRECT": "0",
                       "FAIRSCHED_DEMO_LOAD": "0", "FAIRSCHED_API_RATE": "1000"})
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)
        from common import quiet_check
        from common.connections import keep_connections

        keep_connections()  # as the tier's post_worker_init
        quiet_check.install()
        from config.wsgi import application as app
        from django.db import connections

        from charts.services import chart_submit_created
        from orgs.models import Org, OrgToken, Workflow

        connections.close_all()  # the migrations' connection: the requests open their own
        org = Org.objects.create(name="Producer")
        Workflow.objects.create(name="code", temporal_type="DemoChart")
        _, key = OrgToken.issue(org=org, name="bench", scope="submit")
        body = json.dumps({"workflow": "code", "payload": {"seconds": 1}}).encode()
        headers = {"Authorization": f"Bearer {key}"}

        def post() -> None:
            assert call(app, environ("POST", "/api/v1/charts", body, headers)) == 201

        def healthz() -> None:
            assert call(app, environ("GET", "/healthz")) == 200

        row = Org.objects.get(pk=org.pk)

        def service() -> None:
            chart_submit_created(org=row, workflow="code", payload={"seconds": 1}, external_id=None,
                                 priority=False, due_at=None, org_is_row=True)

        from django.db import connection

        def key_read() -> None:
            OrgToken.authenticate(key)

        def key_compile() -> None:  # the ORM's part of the key's read: its SQL built, not sent
            OrgToken.objects.select_related("org").filter(key_hash="x", revoked=False)[:1].query.get_compiler(
                "default").as_sql()

        def round_trip() -> None:  # the floor of any statement: one round trip, nothing built
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")

        n = args.requests
        for fn in (post, healthz, service):  # warm up
            timed(50, fn)
        print(f"{n} requests each, one thread (load {os.getloadavg()[0]:.1f}):")
        for label, fn in (("POST /api/v1/charts", post), ("GET /healthz", healthz),
                          ("chart_submit_created alone", service), ("OrgToken.authenticate", key_read),
                          ("  its SQL built only", key_compile), ("SELECT 1", round_trip),
                          ("POST /api/v1/charts (again)", post)):
            wall, cpu = timed(n, fn)
            print(f"  {label:<32} {wall:6.3f} ms wall  {cpu:6.3f} ms CPU")
        if args.profile:
            profiler = cProfile.Profile(time.thread_time) if args.cpu else cProfile.Profile()
            profiler.enable()
            timed(n, post)
            profiler.disable()
            if args.save:
                profiler.dump_stats(args.save)
            out = io.StringIO()
            stats = pstats.Stats(profiler, stream=out)
            stats.sort_stats(args.sort).print_stats(args.top)
            print(out.getvalue())
            layers(stats, n)
        connections.close_all()
    finally:
        redis.stop()
        drop_postgres(args.postgres, database)


if __name__ == "__main__":
    main()
