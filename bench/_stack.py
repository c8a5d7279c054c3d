"""The live stack the scheduler benches run against: a fresh SQLite database (or a fresh
PostgreSQL database on a server the caller names), Redis and
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

    def spawn(self, cmd: str, *args: str) -> subprocess.Popen:
        out = open(self.tmp / f"{cmd}.log", "ab")
        self.procs.append(subprocess.Popen([sys.executable, str(ROOT / "manage.py"), cmd, *args], env=self.env, cwd=ROOT,
                                           stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
        return self.procs[-1]


def fresh_postgres(server_url: str, name: str) -> str:
    """A new, empty database ``name`` on the PostgreSQL server of ``server_url`` (dropped
    first if a killed run left it); its URL."""
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{server_url.rsplit('/', 1)[0]}/{name}"


def drop_postgres(server_url: str, url: str) -> None:
    """The database of ``url`` dropped, its sessions ended (``fresh_postgres``'s)."""
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')


@contextmanager
def live_stack(prefix: str, spawn: tuple[str, ...] = (), postgres: str = "") -> Iterator[Stack]:
    """Start the services, migrate, spawn ``spawn`` (e.g. runworker, runscheduler); stop all after.
    ``postgres``: a PostgreSQL server's URL, on which the stack gets a database of its own
    (dropped after); without it, a SQLite file beside the logs."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    sys.path.insert(0, str(ROOT))
    from fairsched.runtime import embedded

    database = (fresh_postgres(postgres, f"fairsched_bench_{os.getpid()}") if postgres
                else f"sqlite:///{tmp / 'bench.sqlite3'}")
    redis = embedded.start_redis(log=tmp / "redis.log")
    temporal = embedded.start_temporal(log=tmp / "temporal.log")
    env = {**os.environ, "DATABASE_URL": database, "REDIS_URL": redis.url,
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
        if postgres:
            from django.db import connections

            connections.close_all()
            drop_postgres(postgres, database)


