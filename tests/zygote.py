"""Warm starts for the processes the integration tests run: a zygote that has imported the
libraries once, and forks each ``manage.py runscheduler`` / ``runworker`` from there.

A start of one of those processes spent about a second of CPU importing Django, temporalio,
redis and the rest before its first line of the project's code; the suite starts some 70 a
pass, on two cores (``bench/suite_cpu.py``). The zygote (one per xdist worker, started at the
first spawn) imports those libraries, never the project's code nor Django's settings, and
waits. Asked for a process, it forks; the child starts a session of its own, takes its
environment, working directory, argument list and log, and runs the script as ``python
script args`` would (``runpy``, as ``__main__``). From there on it is the same program: the
project's modules, Django's set-up, the Temporal runtime, threads, signal handlers are all
its own. What it shares with its siblings is only what an import does.

:class:`ZygoteProcess` stands in for :class:`subprocess.Popen` (``pid``, ``poll``, ``wait``,
``returncode``, ``send_signal``, ``kill``, ``terminate``): the zygote reaps its children and
reports each exit status (a negative signal number for a signal, as ``Popen``).

``FAIRSCHED_TEST_ZYGOTE=0`` starts every process cold, with ``subprocess.Popen``.
"""
from __future__ import annotations

import atexit
import importlib
import json
import os
import random
import runpy
import select
import signal
import subprocess
import sys
import threading
import traceback
from pathlib import Path

# Imported once by the zygote: what every scheduler and worker imports before the project's own
# code (python -X importtime manage.py runscheduler). None reads Django's settings at import.
WARM = ("asyncio", "json", "logging.handlers", "sqlite3", "uuid", "decimal",
        "django", "django.core.management", "django.db.models", "django.http", "django.urls", "django.forms",
        "django.db.backends.sqlite3.base",
        "asgiref.sync", "redis", "redis.asyncio", "rq", "pydantic", "croniter",
        "temporalio.client", "temporalio.worker", "temporalio.workflow", "temporalio.activity",
        "temporalio.common", "temporalio.exceptions", "temporalio.service", "temporalio.runtime",
        "psycopg", "channels", "channels_redis.core", "prometheus_client")


def enabled() -> bool:
    return os.environ.get("FAIRSCHED_TEST_ZYGOTE", "1") != "0"


class ZygoteProcess:
    """A process the zygote forked: :class:`subprocess.Popen`'s interface, as far as the tests use it."""

    def __init__(self, zygote: "Zygote", pid: int, args: list[str]) -> None:
        self._zygote, self.pid, self.args = zygote, pid, args

    @property
    def returncode(self) -> int | None:
        return self._zygote.exit_code(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._zygote.wait(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:  # (as Popen: never a signal to a pid that may be another's by now)
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class Zygote:
    """The client side: one zygote process, its replies read by a thread."""

    def __init__(self) -> None:
        # Without Django's settings: an import that reads them fails and is left to the child.
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        self._proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      env=env, start_new_session=True)
        self._lock = threading.Lock()  # one request at a time: the reply to it is the next "pid"
        self._changed = threading.Condition()
        self._pids: list[int] = []
        self._exits: dict[int, int] = {}
        self._reader = threading.Thread(target=self._read, name="zygote-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._proc.stdout:
            message = json.loads(line)
            with self._changed:
                if "pid" in message:
                    self._pids.append(message["pid"])
                else:
                    self._exits[message["exit"]] = message["code"]
                self._changed.notify_all()
        with self._changed:  # the zygote is gone: nothing more will be reported
            self._changed.notify_all()

    def alive(self) -> bool:
        return self._proc.poll() is None

    def spawn(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> ZygoteProcess:
        """Fork ``python argv...`` (``argv[0]``: the script) with ``env``, in ``cwd``, its output
        appended to ``log``."""
        request = json.dumps({"argv": [str(a) for a in argv], "env": env, "cwd": str(cwd), "log": str(log)})
        with self._lock:
            self._proc.stdin.write(request.encode() + b"\n")
            self._proc.stdin.flush()
            with self._changed:
                if not self._changed.wait_for(lambda: self._pids or not self.alive(), timeout=30) or not self._pids:
                    raise RuntimeError("the zygote did not fork (it is gone)")
                pid = self._pids.pop(0)
        return ZygoteProcess(self, pid, [sys.executable, *map(str, argv)])

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            return self._exits.get(pid)

    def wait(self, pid: int, timeout: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits or not self.alive(), timeout=timeout)
            return self._exits.get(pid)

    def close(self) -> None:
        if self.alive():
            self._proc.kill()
            self._proc.wait(5)


_zygote: Zygote | None = None


def popen(argv: list[str], env: dict[str, str], cwd: Path, log: Path):
    """``subprocess.Popen([python, *argv], ...)`` with its output appended to ``log``, in a
    session of its own, forked warm by this process's zygote (or started cold when
    :func:`enabled` says no)."""
    global _zygote
    if not enabled():
        with open(log, "ab") as out:
            return subprocess.Popen([sys.executable, *map(str, argv)], env=env, cwd=cwd, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
    if _zygote is None or not _zygote.alive():
        _zygote = Zygote()
    return _zygote.spawn(argv, env, cwd, log)


def close() -> None:
    global _zygote
    if _zygote is not None:
        _zygote.close()
        _zygote = None


# --- the zygote itself ----------------------------------------------------------------------

def _child(request: dict, closing: list[int]) -> None:
    """In the forked child: become ``python argv...`` and never return."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # (SIGINT, SIGTERM and SIGPIPE: as Python starts them)
        for fd in closing:
            os.close(fd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(devnull)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        random.seed()  # not the zygote's sequence, which every sibling has
        script = request["argv"][0]
        sys.argv = list(request["argv"])
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as stop:
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - as the interpreter would: the traceback, then status 1
            traceback.print_exc()
        # Then as the interpreter's own exit: the threads' ends, then the atexit handlers.
        threading._shutdown()
        atexit._run_exitfuncs()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _serve() -> None:
    for name in WARM:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a library missing here is imported (or not) by the child itself
            pass
    this, venv = Path(__file__).resolve(), Path(sys.prefix).resolve()
    ours = sorted(name for name, module in list(sys.modules.items())
                  if name != "tests" and getattr(module, "__file__", None)
                  and (path := Path(module.__file__).resolve()) != this
                  and path.is_relative_to(this.parents[1]) and not path.is_relative_to(venv))
    if ours:  # the children would run with them as they were imported here, in the zygote's environment
        raise SystemExit(f"the zygote imported the project's modules {ours}: take out what imported them")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    requests_in, replies_out = sys.stdin.buffer, sys.stdout.buffer
    stdin_fd = requests_in.fileno()
    pending = b""

    def reply(message: dict) -> None:
        replies_out.write(json.dumps(message).encode() + b"\n")
        replies_out.flush()

    def reap() -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            reply({"exit": pid, "code": os.waitstatus_to_exitcode(status)})

    while True:
        ready, _, _ = select.select([stdin_fd, wake_r], [], [])
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
            reap()
        if stdin_fd in ready:
            chunk = os.read(stdin_fd, 1 << 16)
            if not chunk:  # the test process is gone: so is the zygote (its children live on)
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _child(request, [wake_r, wake_w])
                reply({"pid": pid})
            reap()


if __name__ == "__main__":
    _serve()
