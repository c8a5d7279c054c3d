"""``rqworker`` and ``rqcron`` wait for Redis instead of exiting, so start-up order never matters."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from fairsched.runtime import embedded

ROOT = Path(__file__).resolve().parent.parent


def test_rqworker_started_before_redis_waits_then_works():
    port = embedded.free_port()
    env = {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{port}/0", "FAIRSCHED_LOG_LEVEL": "INFO"}
    worker = subprocess.Popen([sys.executable, "manage.py", "rqworker", "default", "--burst"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    redis_service = None
    try:
        time.sleep(2.0)
        assert worker.poll() is None, "rqworker exited instead of waiting for Redis:\n" + worker.stdout.read()
        redis_service = embedded.start_redis(port=port)
        out, _ = worker.communicate(timeout=60)  # --burst: connects, finds no job, exits
        assert worker.returncode == 0, out
        assert "waiting for Redis" in out and "answers; starting" in out
    finally:
        if worker.poll() is None:
            worker.kill()
        if redis_service is not None:
            redis_service.stop()


def test_our_commands_shadow_django_rq():
    from django.core.management import get_commands

    commands = get_commands()
    assert commands["rqworker"] == "fairsched" and commands["rqcron"] == "fairsched"
