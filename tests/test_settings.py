"""Configuration: production mode passes Django's deployment checks; bad values are refused clearly."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def test_sqlite_is_configured_for_several_writers():
    from django.conf import settings

    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3":
        return
    options = settings.DATABASES["default"]["OPTIONS"]
    assert options["transaction_mode"] == "IMMEDIATE"
    assert "journal_mode=WAL" in options["init_command"]
    assert options["timeout"] >= 20
