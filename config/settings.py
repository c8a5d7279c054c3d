"""Fairsched settings: everything configurable is read from the environment here.

Defaults give the embedded single-machine setup (SQLite under ``var/``, a local
Redis, the Temporal dev server). Production sets ``DJANGO_DEBUG=0``,
``DJANGO_SECRET_KEY``, ``DJANGO_ALLOWED_HOSTS``, ``DATABASE_URL``, ``REDIS_URL``
and ``TEMPORAL_ADDRESS``; ``manage.py check --deploy`` is then clean.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from fairsched.engine.forked import EtaPassIn  # the enum alone: forked.py imports no Django

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("FAIRSCHED_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}: expected 0/1/true/false, got {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: expected an integer, got {raw!r}") from None


def env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: expected a number of seconds, got {raw!r}") from None
    if not 0 < value < float("inf"):
        raise ImproperlyConfigured(f"{name}: expected a positive number of seconds, got {raw!r}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


# --- Core Django -----------------------------------------------------------

DEBUG = env_bool("DJANGO_DEBUG", True)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set when DJANGO_DEBUG=0")
    SECRET_KEY = "dev-only-insecure-key-fairsched-do-not-use-in-production"

ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
PORT = env_int("PORT", 8000)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # The scheduler's control records (settings, round state, deployment, audit trail); label "fairsched".
    "control",
    # The commands. Before channels: its own ``runworker`` command would shadow fairsched's Temporal worker.
    "fairsched",
    "channels",
    "django_rq",
    "orgs",
    "charts",
    "dashboard",
    "jobs",
    "ninja",  # django-ninja: its docs page's Swagger UI from static files (no CDN)
    "api",
]
# daphne's app only replaces ``manage.py runserver`` with its ASGI server, and it imports
# Twisted when Django starts (0.3-0.7 s of CPU): the deployed web process is the ``daphne``
# command itself, and the scheduler, the workers and every other command do not serve.
if sys.argv[1:2] == ["runserver"]:
    INSTALLED_APPS.insert(0, "daphne")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "common.middleware.ContentSecurityPolicyMiddleware",
    # /api/v1/ only: its body limits, problem+json for every error, the requests' count
    "api.middleware.ApiMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # Before the CSRF check: a too-large body is answered here, not by a SuspiciousOperation page.
    "common.middleware.RequestBodyLimitMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database ----------------------------------------------------------------
# SQLite (default) is tuned for several writer processes: WAL journal, writes
# take the lock at BEGIN (IMMEDIATE) instead of failing on upgrade, and a
# generous busy timeout. Its backend is Django's with the closed connections kept open for
# the next connect (common/pooled_sqlite3): under ASGI every request opened one, 1.5 ms here.

DATABASE_URL = os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'fairsched.sqlite3'}"
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["ENGINE"] = "common.pooled_sqlite3"
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # Tests use a file (not :memory:) so that subprocesses (scheduler, worker)
    # started by integration tests see the same database.
    # Named per process so concurrent test runs never share one; subprocesses of a
    # test get the file's path through DATABASE_URL.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test_fairsched_{os.getpid()}.sqlite3")}
else:
    # No CONN_HEALTH_CHECKS here: dj_database_url sets the key (False), so a setdefault did nothing.
    # The API tier turns them on with a check of the socket (common.quiet_check); the scheduler and
    # the worker find a connection the server ended by its error, and their next call reconnects.
    DATABASES["default"]["TEST"] = {"NAME": f"test_{DATABASES['default']['NAME']}_{os.getpid()}"}
    # psycopg binds a query's parameters into its text (Django's default, client-side binding);
    # FAIRSCHED_DB_SERVER_SIDE_BINDING=1 sends them apart (Django 5.2's server_side_binding), and
    # psycopg prepares a statement run 5 times. Off: bench/api.py --bindings client,server measured
    # it (docs/api.md, "Server-side binding").
    if env_bool("FAIRSCHED_DB_SERVER_SIDE_BINDING", False):
        DATABASES["default"].setdefault("OPTIONS", {})["server_side_binding"] = True
# PostgreSQL: daphne's web borrows its connections from a pool of its process
# (common/connections.pool_connections, called by config/asgi.py), at most this many.
FAIRSCHED_DB_POOL = env_bool("FAIRSCHED_DB_POOL", True)
FAIRSCHED_DB_POOL_SIZE = env_int("FAIRSCHED_DB_POOL_SIZE", 10)
if not 1 <= FAIRSCHED_DB_POOL_SIZE <= 1000:
    raise ImproperlyConfigured(f"FAIRSCHED_DB_POOL_SIZE: must be between 1 and 1000, got {FAIRSCHED_DB_POOL_SIZE}")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Test suites only: a password hash costs about 1.3 s on small machines (PBKDF2's work factor is the
# point of it), and the suite logs users in hundreds of times. tests/conftest.py sets this for the
# test process and every server it starts; never set it in production.
if env_bool("FAIRSCHED_FAST_PASSWORD_HASH", False):
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

LANGUAGE_CODE = "en-us"
TIME_ZONE = os.environ.get("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True
FORMAT_MODULE_PATH = ["config.formats"]  # 24 h times in the admin, like the dashboard

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"] if (BASE_DIR / "static").is_dir() else []
# Serve static files from the ASGI app itself (single-machine default). Behind a
# reverse proxy, run collectstatic and set FAIRSCHED_SERVE_STATIC=0.
SERVE_STATIC = env_bool("FAIRSCHED_SERVE_STATIC", True)

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# --- Redis, Channels, rq -------------------------------------------------------

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
if os.environ.get("FAIRSCHED_CHANNEL_LAYER", "redis") == "memory":
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
else:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # redis-py 8 reads with a 5 s socket timeout by default, the same 5 s that channels_redis
            # blocks in BZPOPMIN on an idle socket: under load the read lost that race and the
            # consumer died ("Timeout reading from ..."). A longer timeout keeps idle sockets up.
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 15}], "capacity": 1000, "expiry": 30},
        }
    }
RQ_QUEUES = {
    "default": {"URL": REDIS_URL, "DEFAULT_TIMEOUT": 3600},
}
RQ_SHOW_ADMIN_LINK = True
# rq's worker with a prompt stop of its command listener (jobs/worker.py: a warm stop took 60 s).
RQ = {"WORKER_CLASS": "jobs.worker.Worker"}

# Input limits (common/validation.py has the bounds on budget, weight and cost): the
# largest chart payload, in bytes of its compact JSON; and the largest request body
# (file uploads excepted), kept above what a form needs to carry the largest payload.
FAIRSCHED_MAX_PAYLOAD_BYTES = env_int("FAIRSCHED_MAX_PAYLOAD_BYTES", 1_048_576)
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DJANGO_DATA_UPLOAD_MAX_MEMORY_SIZE",
                                      max(2_621_440, 2 * FAIRSCHED_MAX_PAYLOAD_BYTES + 65_536))
# Web pages whose origin (scheme://host:port) may open the WebSockets, besides the page's own
# origin (the Host it was served from). Defaults to DJANGO_CSRF_TRUSTED_ORIGINS.
FAIRSCHED_WS_ALLOWED_ORIGINS = env_list("FAIRSCHED_WS_ALLOWED_ORIGINS", CSRF_TRUSTED_ORIGINS)
# Socket controls per second per socket (a token bucket; bursts up to the same number).
FAIRSCHED_WS_CONTROL_RATE = env_int("FAIRSCHED_WS_CONTROL_RATE", 20)
# The producer API (/api/v1/, docs/api.md): requests per second per key (a token bucket in
# Redis, shared by every web process; 0 turns it off) and the burst it allows; the most
# charts in one batch, the largest batch body, and how long an Idempotency-Key's response is kept.
FAIRSCHED_API_RATE = env_seconds("FAIRSCHED_API_RATE", 100.0) if os.environ.get("FAIRSCHED_API_RATE") not in (
    "0", "0.0") else 0.0
FAIRSCHED_API_BURST = env_int("FAIRSCHED_API_BURST", max(1, int(2 * FAIRSCHED_API_RATE)))
FAIRSCHED_API_BATCH_MAX = env_int("FAIRSCHED_API_BATCH_MAX", 1000)
FAIRSCHED_API_BATCH_MAX_BYTES = env_int("FAIRSCHED_API_BATCH_MAX_BYTES", 32 * 1024 * 1024)
FAIRSCHED_API_IDEMPOTENCY_TTL_S = env_int("FAIRSCHED_API_IDEMPOTENCY_TTL_S", 24 * 3600)
for _name in ("FAIRSCHED_API_BURST", "FAIRSCHED_API_BATCH_MAX", "FAIRSCHED_API_BATCH_MAX_BYTES",
              "FAIRSCHED_API_IDEMPOTENCY_TTL_S"):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name}: must be at least 1, got {globals()[_name]}")
# A snapshot older than max(this many ETA intervals, FAIRSCHED_STALE_MIN_S) is shown as stale.
FAIRSCHED_STALE_INTERVALS = env_int("FAIRSCHED_STALE_INTERVALS", 3)
FAIRSCHED_STALE_MIN_S = env_int("FAIRSCHED_STALE_MIN_S", 10)

# Prometheus metrics at /metrics (docs/metrics.md). With a token, only requests bearing it are
# answered; without one, only loopback clients that came through no proxy.
FAIRSCHED_METRICS_TOKEN = os.environ.get("FAIRSCHED_METRICS_TOKEN", "")
# The org label's cardinality: the first this many orgs (by id) by slug, the rest summed as "other".
FAIRSCHED_METRICS_MAX_ORGS = env_int("FAIRSCHED_METRICS_MAX_ORGS", 50)
# Behind a reverse proxy (also trusts X-Forwarded-Proto in production: see Security below).
FAIRSCHED_BEHIND_PROXY = env_bool("DJANGO_BEHIND_PROXY", False)

# Background jobs (jobs/): bulk import and webhooks.
FAIRSCHED_IMPORT_BATCH = env_int("FAIRSCHED_IMPORT_BATCH", 500)
FAIRSCHED_IMPORT_MAX_BYTES = env_int("FAIRSCHED_IMPORT_MAX_BYTES", 50 * 1024 * 1024)
# An import with no sign of life for this long (its worker was killed) is re-queued by the sweep.
FAIRSCHED_IMPORT_STALE_S = env_int("FAIRSCHED_IMPORT_STALE_S", 120)
FAIRSCHED_WEBHOOK_TIMEOUT_S = env_int("FAIRSCHED_WEBHOOK_TIMEOUT_S", 10)
# Webhooks to loopback and private addresses (an internal receiver). Link-local addresses and
# cloud metadata services are never reached.
FAIRSCHED_WEBHOOK_ALLOW_PRIVATE = env_bool("FAIRSCHED_WEBHOOK_ALLOW_PRIVATE", False)
# Also send the pre-Standard-Webhooks signature (X-Fairsched-Signature: sha256=<hex HMAC of the
# body>) for receivers not migrated yet (docs/webhooks.md); it covers the body only, so a captured
# delivery can be replayed to a receiver that checks nothing else. Off once they have migrated.
FAIRSCHED_WEBHOOK_LEGACY_SIGNATURE = env_bool("FAIRSCHED_WEBHOOK_LEGACY_SIGNATURE", True)
# Seconds before each retry of a failed delivery; its length is the number of retries.
FAIRSCHED_WEBHOOK_RETRY_S = [int(s) for s in env_list("FAIRSCHED_WEBHOOK_RETRY_S", ["10", "30", "120", "600", "1800"])]

# make run (manage.py runall): the demo load generator and the demo admin's first password.
FAIRSCHED_DEMO_LOAD = env_bool("FAIRSCHED_DEMO_LOAD", True)
FAIRSCHED_DEMO_RATE = env_int("FAIRSCHED_DEMO_RATE", 6)  # charts per minute
FAIRSCHED_ADMIN_PASSWORD = os.environ.get("FAIRSCHED_ADMIN_PASSWORD", "")  # default: generated, kept in var/
# Ports of the Redis and Temporal that make run starts (a taken one is replaced by a free one).
FAIRSCHED_REDIS_PORT = env_int("FAIRSCHED_REDIS_PORT", 6379)
FAIRSCHED_TEMPORAL_PORT = env_int("FAIRSCHED_TEMPORAL_PORT", 7233)
FAIRSCHED_TEMPORAL_UI_PORT = env_int("FAIRSCHED_TEMPORAL_UI_PORT", 8233)

# --- Temporal -----------------------------------------------------------------

TEMPORAL_ADDRESS = os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233")
TEMPORAL_NAMESPACE = os.environ.get("TEMPORAL_NAMESPACE", "default")
TEMPORAL_UI_URL = os.environ.get("TEMPORAL_UI_URL", "http://127.0.0.1:8233")
FAIRSCHED_TASK_QUEUE = os.environ.get("FAIRSCHED_TASK_QUEUE", "fairsched")
# This deployment's id, part of every chart's workflow id (chart-<deployment>-<pk>): written
# into the database once (generated if unset); set, it must match what the database holds.
FAIRSCHED_DEPLOYMENT = os.environ.get("FAIRSCHED_DEPLOYMENT", "")
# A cancelled chart whose workflow has not closed this many seconds after the cancel request
# (a workflow that ignores cancellation) is terminated, so it frees its budget.
FAIRSCHED_CANCEL_GRACE_S = env_int("FAIRSCHED_CANCEL_GRACE_S", 60)
if FAIRSCHED_CANCEL_GRACE_S < 1:
    raise ImproperlyConfigured(f"FAIRSCHED_CANCEL_GRACE_S: must be at least 1, got {FAIRSCHED_CANCEL_GRACE_S}")
# A dispatch's workflow starts in flight at once (bench/scheduler.py, a Temporal dev server: with 32,
# 0.85-0.89x a bare client's throughput at 50; with 64, a median 0.96x (0.77-1.01x) a bare client's at 64).
FAIRSCHED_START_CONCURRENCY = env_int("FAIRSCHED_START_CONCURRENCY", 64)
if not 1 <= FAIRSCHED_START_CONCURRENCY <= 1000:
    raise ImproperlyConfigured(
        f"FAIRSCHED_START_CONCURRENCY: must be between 1 and 1000, got {FAIRSCHED_START_CONCURRENCY}")
# After SIGTERM, runscheduler and runworker end within this many seconds, warmly or forced
# (fairsched/runtime/shutdown.py); a supervisor should wait a little longer before its SIGKILL.
FAIRSCHED_STOP_TIMEOUT_S = env_seconds("FAIRSCHED_STOP_TIMEOUT_S", 10.0)
# How long /dashboard/whatif.json waits for the scheduler's capacity plan (clear_by=, meet_due=1):
# a search over several ETA passes (common/previews.py; a preview waits 3 s). The scheduler
# kills a plan still running when this has passed.
FAIRSCHED_PLAN_WAIT_S = env_seconds("FAIRSCHED_PLAN_WAIT_S", 20.0)

# Activities one ``runworker`` runs at once (temporalio's default is 100). DemoChart's activity
# holds its slot for the whole chart, so a worker runs at most this many charts: run
# ceil(budget / this) workers, or raise it (README: sizing workers).
FAIRSCHED_WORKER_CONCURRENCY = env_int("FAIRSCHED_WORKER_CONCURRENCY", 1000)
if FAIRSCHED_WORKER_CONCURRENCY < 1:
    raise ImproperlyConfigured(
        f"FAIRSCHED_WORKER_CONCURRENCY: must be at least 1, got {FAIRSCHED_WORKER_CONCURRENCY}")

# A workflow task (the worker's turn at a workflow's code) that no worker has completed this
# long after one started it (that worker died, or Temporal restarted under it) is handed to
# another: each workflow a dead worker or a Temporal restart left mid-task, and the chart's
# budget, waits this long. Temporal's own default is 10 s; set at a workflow's start.
FAIRSCHED_WORKFLOW_TASK_TIMEOUT_S = env_seconds("FAIRSCHED_WORKFLOW_TASK_TIMEOUT_S", 10.0)

# After a worker dies without a warm stop (a SIGKILL, a crash), the next task of each workflow
# it had cached waits this long on its sticky queue before any worker may take it
# (temporalio's sticky_queue_schedule_to_start_timeout, whose default is 10 s): each chart
# it was running holds its budget that much longer. A lower value costs a worker that is
# merely slow a replay of the workflow's history on the task's next worker.
FAIRSCHED_WORKER_STICKY_TIMEOUT_S = env_seconds("FAIRSCHED_WORKER_STICKY_TIMEOUT_S", 10.0)

# Where runscheduler runs its ETA pass and snapshot: "process" (a forked child, off the
# dispatching loop's GIL; fairsched/engine/forked.py) or "thread" (in the scheduler's own
# process, where fork is unavailable or unwanted). docs/architecture.md: the ETA pass.
try:
    FAIRSCHED_ETA_PASS = EtaPassIn(os.environ.get("FAIRSCHED_ETA_PASS", EtaPassIn.PROCESS.value))
except ValueError:
    raise ImproperlyConfigured(
        f"FAIRSCHED_ETA_PASS: 'process' or 'thread', got {os.environ['FAIRSCHED_ETA_PASS']!r}") from None

# --- Security (production) -------------------------------------------------------

SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
if not DEBUG:
    SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
    SECURE_REDIRECT_EXEMPT = [r"^metrics$"]  # Prometheus scrapes a web process directly over http
    SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    if FAIRSCHED_BEHIND_PROXY:
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# --- Logging -------------------------------------------------------------------

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "line": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "line"},
    },
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        app: {"level": os.environ.get("FAIRSCHED_LOG_LEVEL", "INFO")}
        for app in ("common", "control", "fairsched", "orgs", "charts", "dashboard", "jobs")
    },
}
