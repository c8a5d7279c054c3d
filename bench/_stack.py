"""The live stack the scheduler benches run against: a fresh SQLite database, Redis and
the Temporal dev server on free ports, this process's Django set up on them, and
``spawn(cmd)`` for ``manage.py`` processes (logs beside the database)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Stack:
    tmp: Path
    env: dict[str, str]
    temporal_url: str
    procs: list[subprocess.Popen] = field(default_factory=list)

    def spawn(self, cmd: str, *args: str) -> None:
        out = open(self.tmp / f"{cmd}.log", "ab")
        self.procs.append(subprocess.Popen([sys.executable, str(ROOT / "manage.py"), cmd, *args], env=self.env, cwd=ROOT,
                                           stdout=out, stderr=subprocess.STDOUT, start_new_session=True))


@contextmanager
def live_stack(prefix: str, spawn: tuple[str, ...] = ()) -> Iterator[Stack]:
    """Start the services, migrate, spawn ``spawn`` (e.g. runworker, runscheduler); stop all after."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    sys.path.insert(0, str(ROOT))
    from fairsched.runtime import embedded

    redis = embedded.start_redis(log=tmp / "redis.log")
    temporal = embedded.start_temporal(log=tmp / "temporal.log")
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp / 'bench.sqlite3'}", "REDIS_URL": redis.url,
           "TEMPORAL_ADDRESS": temporal.url, "FAIRSCHED_TASK_QUEUE": "bench", "FAIRSCHED_CHANNEL_LAYER": "memory",
           "DJANGO_SETTINGS_MODULE": "config.settings", "PYTHONUNBUFFERED": "1"}
    os.environ.update(env)
    stack = Stack(tmp, env, temporal.url)
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)
        for cmd in spawn:
            stack.spawn(cmd)
        yield stack
        print(f"(logs and database in {tmp})")
    finally:
        for p in stack.procs:
            p.terminate()
        for p in stack.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        temporal.stop()
        redis.stop()


