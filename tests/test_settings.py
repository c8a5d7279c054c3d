"""Configuration: production mode passes Django's deployment checks; bad values are refused clearly."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    full_env.update(env)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=full_env, capture_output=True,
                          text=True, timeout=120)


def test_check_deploy_is_clean_in_production_mode():
    result = run_manage(
        "check", "--deploy", "--fail-level", "WARNING",
        DJANGO_DEBUG="0", DJANGO_SECRET_KEY="x" * 20 + "-a-long-random-production-secret-0123456789",
        DJANGO_ALLOWED_HOSTS="fairsched.example.com",
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_production_mode_without_secret_key_is_refused():
    result = run_manage("check", DJANGO_DEBUG="0")
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr


def test_bad_boolean_names_the_variable():
    result = run_manage("check", DJANGO_DEBUG="maybe")
    assert result.returncode != 0 and "DJANGO_DEBUG" in result.stderr


@pytest.mark.parametrize("value", ["0", "1001", "many"])
def test_a_bad_start_concurrency_names_the_variable(value):
    result = run_manage("check", FAIRSCHED_START_CONCURRENCY=value)
    assert result.returncode != 0 and "FAIRSCHED_START_CONCURRENCY" in result.stderr


def test_the_start_concurrency_reaches_the_scheduler(settings):
    from fairsched.management.commands.runscheduler import Command

    settings.FAIRSCHED_START_CONCURRENCY = 7
    scheduler = Command().make_scheduler({"task_queue": None, "no_watch": False, "lease_ttl": None})
    assert scheduler.START_CONCURRENCY == 7


def test_sqlite_is_configured_for_several_writers():
    from django.conf import settings

    if not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        return
    options = settings.DATABASES["default"]["OPTIONS"]
    assert options["transaction_mode"] == "IMMEDIATE"
    assert "journal_mode=WAL" in options["init_command"]
    assert options["timeout"] >= 20


WRITER = """
import os, sys, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()
from charts.services import chart_pause, chart_submit
from control.services import budget_set
k, n = int(sys.argv[1]), int(sys.argv[2])
for i in range(n):
    c = chart_submit(org="acme", workflow="code", external_id=f"w{k}-{i}", payload={"i": i})
    if i % 10 == 0:
        chart_pause(chart=c.pk)       # a second write to a row another writer may be reading
        budget_set(budget=4 + k)      # every writer updates the same singleton row too
print("ok", k)
"""


@pytest.mark.django_db(transaction=True)
def test_several_writer_processes_at_once_never_meet_a_locked_database(test_db_url):
    """The web app, the scheduler, the worker and the rq worker all write: on SQLite, WAL and
    IMMEDIATE transactions with a busy timeout make them wait their turn instead of failing."""
    import django.db

    from charts.models import Chart
    from control.models import SchedulerSettings
    from tests.factories import make_org, make_workflow

    make_org("Acme")
    make_workflow("code")
    django.db.connections.close_all()
    env = {**os.environ, "DATABASE_URL": test_db_url, "REDIS_URL": "redis://127.0.0.1:9/0"}
    writers, n = 4, 150
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(k), str(n)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for k in range(writers)]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0 and "database is locked" not in out, out[-2000:]
    assert Chart.objects.filter(external_id__startswith="w").count() == writers * n
    assert Chart.objects.filter(paused=True).count() == writers * (n // 10)
    assert SchedulerSettings.get().budget in {4 + k for k in range(writers)}


def test_channel_layer_reads_outlast_its_blocking_receive():
    """An idle dashboard socket blocks in BZPOPMIN for ``brpop_timeout`` seconds; the Redis
    read must wait longer, or under load the read times out first and kills the consumer
    (redis-py 8 defaults to 5 s, the same as channels_redis)."""
    from channels_redis.core import RedisChannelLayer
    from channels_redis.utils import create_pool

    code = ("import json, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'config.settings'; "
            "from config import settings; print(json.dumps(settings.CHANNEL_LAYERS))")
    env = {k: v for k, v in os.environ.items() if k != "FAIRSCHED_CHANNEL_LAYER"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    import json

    layer = json.loads(out.stdout)["default"]
    assert layer["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    hosts = RedisChannelLayer(**layer["CONFIG"]).hosts
    pool = create_pool(hosts[0])
    timeout = pool.connection_class(**pool.connection_kwargs).socket_timeout  # not connected: no I/O
    assert timeout is None or timeout > RedisChannelLayer.brpop_timeout + 5


# ---------------------------------------------------------------- the policies (issue 23)

@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kw, field", [
    ({"share": "bytes"}, "share"), ({"share": 1}, "share"), ({"dispatch": "eager"}, "dispatch"),
    ({"quantum_s": 0}, "quantum_s"), ({"quantum_s": "nan"}, "quantum_s"), ({"quantum_s": True}, "quantum_s"),
    ({"quantum_s": 1e9}, "quantum_s"), ({"quantum_s": "ten"}, "quantum_s"),
])
@pytest.mark.django_db(transaction=True)
def test_policies_set_refuses_bad_values_naming_the_field(kw, field):
    from django.core.exceptions import ValidationError
    from control.models import AuditEntry, SchedulerSettings
    from control.services import policies_set
    with pytest.raises(ValidationError) as exc:
        policies_set(**kw)
    assert list(exc.value.message_dict) == [field] and field in exc.value.message_dict[field][0]
    s = SchedulerSettings.get()
    assert (s.share, s.quantum_s, s.dispatch) == ("charts", 600.0, "strict")
    assert not AuditEntry.objects.filter(action="policies").exists()


@pytest.mark.django_db(transaction=True)
def test_policies_set_audits_only_a_change(capture_notifications):
    from control.models import AuditEntry
    from control.services import policies_set
    policies_set(dispatch="backfill")
    policies_set(dispatch="backfill")
    entries = list(AuditEntry.objects.filter(action="policies"))
    assert len(entries) == 1 and entries[0].after == {"dispatch": "backfill"}
    assert entries[0].summary == "Set the policies: dispatch backfill"
    assert {"kind": "settings"} in capture_notifications


@pytest.mark.django_db(transaction=True)
def test_read_config_carries_the_policies():
    from control.services import policies_set
    from fairsched.engine.store import db
    policies_set(share="work", quantum_s=90, dispatch="backfill")
    c = db.read_config()
    assert c.policies == {"share": "work", "quantum_s": 90.0, "dispatch": "backfill"}


def test_the_test_database_is_named_per_process():
    """On either database, so that two test runs on one server never share one (a setting
    added under the PostgreSQL branch once left its line unreachable)."""
    from django.conf import settings

    assert str(os.getpid()) in settings.DATABASES["default"]["TEST"]["NAME"]
