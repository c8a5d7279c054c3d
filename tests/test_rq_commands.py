"""``rqworker`` and ``rqcron`` wait for Redis instead of exiting, so start-up order never matters."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from fairsched.runtime import embedded

ROOT = Path(__file__).resolve().parent.parent


def test_rqworker_started_before_redis_waits_then_works():
    port = embedded.free_port()
    env = {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{port}/0", "FAIRSCHED_LOG_LEVEL": "INFO"}
    worker = subprocess.Popen([sys.executable, "manage.py", "rqworker", "default", "--burst"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(worker.stdout), daemon=True)
    reader.start()
    redis_service = None
    try:
        # Start Redis only once the worker says it waits (a loaded machine may take seconds to get there).
        deadline = time.monotonic() + 60
        while not any("waiting for Redis" in line for line in lines):
            assert worker.poll() is None, "rqworker exited instead of waiting for Redis:\n" + "".join(lines)
            assert time.monotonic() < deadline, "rqworker never said it waits for Redis:\n" + "".join(lines)
            time.sleep(0.05)
        time.sleep(0.5)  # and still waits a moment later
        assert worker.poll() is None, "rqworker exited instead of waiting for Redis:\n" + "".join(lines)
        redis_service = embedded.start_redis(port=port)
        worker.wait(timeout=120)  # --burst: connects (its retries 10 s apart at most), finds no job, exits
        reader.join(timeout=10)
        out = "".join(lines)
        assert worker.returncode == 0, out
        assert "answers; starting" in out, out
    finally:
        if worker.poll() is None:
            worker.kill()
        if redis_service is not None:
            redis_service.stop()


def test_our_commands_shadow_django_rq():
    from django.core.management import get_commands

    commands = get_commands()
    assert commands["rqworker"] == "fairsched" and commands["rqcron"] == "fairsched"
