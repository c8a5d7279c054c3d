"""Fixtures for the live scheduler's integration tests: real Temporal, real Redis,
``runscheduler`` / ``runworker`` as subprocesses sharing the test database."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest
from django.db import connection

from tests import zygote
from tests.conftest import ARTIFACTS

ROOT = Path(__file__).resolve().parents[2]


def database_url() -> str:
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    auth = s["USER"] or ""
    if s.get("PASSWORD"):
        auth += f":{s['PASSWORD']}"
    host = s.get("HOST") or "127.0.0.1"
    port = f":{s['PORT']}" if s.get("PORT") else ""
    return f"postgres://{auth}@{host}{port}/{s['NAME']}"


def wait_until(predicate: Callable[[], object], timeout: float = 30.0, interval: float = 0.1, what: str = "") -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or predicate}")
        time.sleep(interval)


@dataclass
class Proc:
    name: str
    args: list[str]
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen | zygote.ZygoteProcess | None = None
    script: Path = ROOT / "manage.py"

    def start(self) -> "Proc":
        """``python script args`` in a session of its own, its output appended to its log:
        forked warm by this test process's zygote (tests/zygote.py: the libraries imported
        once, not a second of imports a start)."""
        self.proc = zygote.popen([self.script, *self.args], self.env, ROOT, self.log_path)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout: float = 15.0) -> int:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def saw(self, text: str, timeout: float = 10.0) -> bool:
        """Wait for `text` in this process's log; a line is written just after the write it reports,
        so a test that has seen the database change may still be a moment ahead of the log."""
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} never logged {text!r}; its log ends:\n{self.log()[-3000:]}")
            time.sleep(0.1)
        return True

    def logged_at(self, text: str, timeout: float = 10.0) -> float:
        """When (epoch seconds) this process logged its first line with ``text``, waiting for
        it as :meth:`saw` does: the moment of the event itself, not the moment the test noticed
        it (a wait for "something after X" then starts at X). The start of the millisecond the
        line shows: what the process did just after the line may fall in the same millisecond
        (an ETA pass started in the tick that logged a dispatch), so "after X" is ``>=``."""
        self.saw(text, timeout)
        line = next(line for line in self.log().splitlines() if text in line)
        return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


@dataclass
class SharedWorker:
    """One ``runworker`` for the integration tests of this test process (an xdist worker), on a
    task queue of its own: started by the first test that asks (:meth:`Live.shared_worker`),
    SIGKILLed at the end of the session. A worker holds no state of the database's (it runs
    the workflows it is given and records their outcomes by chart id; ids are never reused
    across tests), so a test on a fresh database can share it; its start-up cost 2-5 s of a
    busy machine per test. The scheduler is not shared: it holds the database's charts in
    memory (a test's flush would leave it with the last test's) and its lease and snapshot
    in Redis, which every test flushes."""

    task_queue: str = field(default_factory=lambda: f"test-shared-{uuid.uuid4().hex[:10]}")
    proc: Proc | None = None

    def get(self, env: dict[str, str]) -> Proc:
        if self.proc is None or not self.proc.alive():  # first use (or it died: a new one)
            name = f"shared-worker-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
            log = ARTIFACTS / "integration" / f"{name}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            self.proc = Proc(name, ["runworker"], {**env, "FAIRSCHED_TASK_QUEUE": self.task_queue}, log).start()
        return self.proc

    def stop(self) -> None:
        """For a test that must be alone on the database: the worker keeps a connection open
        (its start-up's), which keeps SQLite's exclusive lock from being taken. The next test
        that asks starts another."""
        if self.proc is not None:
            self.proc.kill()
            self.proc = None


@dataclass
class Live:
    """The environment of one test: a task queue of its own and the processes it started."""

    env: dict[str, str]
    task_queue: str
    artifacts: Path
    procs: list[Proc] = field(default_factory=list)
    shared: SharedWorker | None = None
    settings: object = None

    def spawn(self, kind: str, *extra: str, env: dict[str, str] | None = None, name: str | None = None,
              script: Path | None = None) -> Proc:
        name = name or f"{kind}{sum(p.name.startswith(kind) for p in self.procs) + 1}"
        args = [kind, *extra] if script is None else list(extra)
        proc = Proc(name, args, {**self.env, **(env or {})}, self.artifacts / f"{name}.log",
                    script=script or ROOT / "manage.py")
        self.procs.append(proc.start())
        return proc

    def scheduler(self, *extra: str, env: dict[str, str] | None = None, name: str | None = None) -> Proc:
        return self.spawn("runscheduler", *extra, env=env, name=name)

    def faulty_scheduler(self, *args: str, env: dict[str, str] | None = None) -> Proc:
        """``runscheduler`` with faults injected through its ports (``--crash-after-starts N``,
        ``--eta-gate PATH``; tests/integration/faulty_scheduler.py)."""
        return self.spawn("faulty-scheduler", *args, env=env,
                          script=ROOT / "tests" / "integration" / "faulty_scheduler.py")

    def crashing_scheduler(self, after_starts: int, *extra: str, env: dict[str, str] | None = None) -> Proc:
        """``runscheduler`` SIGKILLed right after its ``after_starts``-th workflow start,
        before the compare-and-set."""
        return self.faulty_scheduler("--crash-after-starts", str(after_starts), *extra, env=env)

    def worker(self, *extra: str, env: dict[str, str] | None = None) -> Proc:
        """A ``runworker`` of this test's own: for a test that stops, kills or configures it."""
        return self.spawn("runworker", *extra, env=env)

    def shared_worker(self) -> Proc:
        """The worker this test process shares (:class:`SharedWorker`), for a test that only
        needs the workflows run: the test takes its task queue, so it asks before starting
        its own processes. Not to be stopped or killed."""
        assert not self.procs, "ask for the shared worker before starting processes: they take its task queue"
        self.task_queue = self.env["FAIRSCHED_TASK_QUEUE"] = self.shared.task_queue
        self.settings.FAIRSCHED_TASK_QUEUE = self.shared.task_queue
        return self.shared.get(self.env)

    def stop_all(self) -> None:
        """SIGKILL every process still running. A kill at any moment is safe by design (the
        scheduler's forked ETA pass dies with it, ``PR_SET_PDEATHSIG``), and the next test
        starts on a flushed Redis and a fresh task queue; a test that checks a warm stop does
        so itself. (A SIGTERM here let a worker with activities in flight wait out its 2 s
        grace at the end of most tests.)"""
        for p in self.procs:
            p.kill()


@pytest.fixture(scope="session")
def _shared_worker() -> Iterator[SharedWorker]:
    shared = SharedWorker()
    try:
        yield shared
    finally:
        if shared.proc is not None:
            shared.proc.kill()


@pytest.fixture
def live(request, redis_url, temporal_address, settings, _shared_worker) -> Iterator[Live]:
    """Subprocess environment for this test (same database, Redis, Temporal; a fresh task queue)."""
    task_queue = f"test-{uuid.uuid4().hex[:10]}"
    settings.FAIRSCHED_TASK_QUEUE = task_queue
    artifacts = ARTIFACTS / "integration" / request.node.name.replace("/", "_")
    artifacts.mkdir(parents=True, exist_ok=True)
    for old in artifacts.glob("*.log"):
        old.unlink()
    env = {**os.environ, "DATABASE_URL": database_url(), "REDIS_URL": redis_url,
           "TEMPORAL_ADDRESS": temporal_address, "FAIRSCHED_TASK_QUEUE": task_queue,
           "FAIRSCHED_CHANNEL_LAYER": "redis", "FAIRSCHED_LOG_LEVEL": "INFO", "PYTHONUNBUFFERED": "1",
           # A worker the test SIGKILLs leaves the workflows it had cached waiting this long
           # for it (10 s by default) before the test's next worker may take them; and a
           # workflow task it (or a Temporal the test kills) left started, this long (10 s).
           "FAIRSCHED_WORKER_STICKY_TIMEOUT_S": "1", "FAIRSCHED_WORKFLOW_TASK_TIMEOUT_S": "2"}
    live = Live(env=env, task_queue=task_queue, artifacts=artifacts, shared=_shared_worker, settings=settings)
    try:
        yield live
    finally:
        live.stop_all()


class TemporalFacade:
    """A sync facade over a Temporal client, for assertions."""

    def __init__(self, address: str) -> None:
        from temporalio.client import Client

        self.loop = asyncio.new_event_loop()
        self.client = self.loop.run_until_complete(Client.connect(address))

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def executions(self, workflow_id: str) -> list:
        async def go():
            return [wf async for wf in self.client.list_workflows(f'WorkflowId = "{workflow_id}"')]
        return self.run(go())

    def describe(self, workflow_id: str):
        return self.run(self.client.get_workflow_handle(workflow_id).describe())

    def exists(self, workflow_id: str) -> bool:
        from temporalio.service import RPCError, RPCStatusCode

        try:
            self.describe(workflow_id)
            return True
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return False
            raise

    def close(self) -> None:
        self.loop.close()


@pytest.fixture
def temporal(temporal_address):
    t = TemporalFacade(temporal_address)
    yield t
    t.close()
