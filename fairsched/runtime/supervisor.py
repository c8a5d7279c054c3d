"""A small process supervisor for ``make run``: start order, restarts, clean stop.

Why not honcho (which the project depends on, and whose Procfile format the
repository's ``Procfile`` uses for deployments)? Honcho runs a Procfile well,
but ``make run`` needs three things it does not do:

1. **Start order by readiness.** A process starts once the ports it needs accept
   connections (the scheduler after Redis and Temporal, daphne after Redis), and
   the database is migrated and seeded in between. Each command also retries its
   dependencies on its own, so this only keeps the first seconds quiet.
2. **Restarts.** Honcho stops everything when one process exits. Here a process
   that exits is restarted with backoff (a crashed scheduler comes back; a Redis
   killed by hand is started again and everyone reconnects). Only a service that
   cannot start at all (``essential``: Redis, Temporal, the web server) stops
   the whole system, with its last output as the reason.
3. **A stop that leaves nothing behind, in order.** Every process runs in its own
   session (so a Ctrl-C in the terminal reaches only the supervisor); on stop
   the application processes get SIGTERM first (warm stops), a second SIGTERM
   halfway (rq's cold stop, which kills its work horse), then SIGKILL; the
   services (Temporal, then Redis, which saves its data) stop last. Descendants
   that left the process group (rq's work horse calls ``setsid``) are tracked
   with psutil and stopped too.

A :meth:`Supervisor.tick` seam runs one step of the loop, for tests.
"""
from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil

COLOURS = ("36", "33", "32", "35", "34", "31", "96", "93", "92", "95")


@dataclass
class ProcessSpec:
    """One process: what to run, what it needs first, and how it may fail."""

    name: str
    argv: list[str]
    env: dict[str, str] | None = None
    cwd: str | None = None
    needs: tuple[int, ...] = ()  # 127.0.0.1 ports that must accept connections before it starts
    listens: int | None = None  # its own port: it is "ready" once this accepts connections
    essential: bool = False  # must become ready within ready_timeout_s, or the whole system stops
    ready_timeout_s: float = 90.0
    stop_timeout_s: float = 10.0
    service: bool = False  # a backing service (Redis, Temporal): stopped after the processes that use it
    quiet_stop: bool = False  # while it stops, its output goes to its log file only (shutdown chatter)


@dataclass
class Managed:
    spec: ProcessSpec
    colour: str
    popen: subprocess.Popen | None = None
    state: str = "waiting"  # waiting -> running -> (exited -> waiting) ... -> stopped
    started_at: float = 0.0
    next_start_at: float = 0.0
    waiting_since: float = field(default_factory=time.monotonic)
    ready: bool = False
    ever_ready: bool = False
    quick_exits: int = 0
    restarts: int = 0
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=25))
    descendants: dict[int, psutil.Process] = field(default_factory=dict)
    announced_wait: bool = False
    muted: bool = False
    reader: threading.Thread | None = None


class SupervisorError(RuntimeError):
    """The system cannot run; the message says which service failed and why."""


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


class Supervisor:
    TICK_S = 0.2
    BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)
    QUICK_EXIT_S = 10.0  # an exit this soon after a start counts towards a crash loop
    ESSENTIAL_MAX_QUICK_EXITS = 5
    DESCENDANT_SCAN_S = 2.0

    def __init__(self, *, out: IO[str] | None = None, log_dir: Path | None = None,
                 on_change: Callable[[], None] | None = None) -> None:
        self.out = out or sys.stdout
        self.colour = self.out.isatty() and os.environ.get("NO_COLOR") is None
        self.log_dir = log_dir
        self.on_change = on_change  # called after a process starts (e.g. to record pids)
        self.procs: list[Managed] = []
        self.stop_requested = False
        self.fatal: str | None = None
        self._write_lock = threading.Lock()
        self._last_scan = 0.0
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)

    # --- output --------------------------------------------------------------------

    def say(self, text: str, name: str = "runall", colour: str = "1") -> None:
        width = max([len(p.spec.name) for p in self.procs] + [9])
        prefix = f"{name:>{width}} | "
        if self.colour:
            prefix = f"\x1b[{colour}m{prefix}\x1b[0m"
        with self._write_lock:
            try:
                for line in text.splitlines() or [""]:
                    self.out.write(prefix + line + "\n")
                self.out.flush()
            except (OSError, ValueError):
                pass  # a closed terminal or pipe must not stop the pumps (children would block)

    def _pump(self, proc: Managed, stream: IO[bytes]) -> None:
        log = open(self.log_dir / f"{proc.spec.name}.log", "ab") if self.log_dir else None
        try:
            for raw in iter(stream.readline, b""):
                if log:
                    log.write(raw)
                    log.flush()
                line = raw.decode("utf-8", "replace").rstrip("\n")
                proc.tail.append(line)
                if not proc.muted:
                    self.say(line, proc.spec.name, proc.colour)
        finally:
            stream.close()
            if log:
                log.close()

    # --- processes -------------------------------------------------------------------

    def add(self, spec: ProcessSpec) -> Managed:
        assert all(p.spec.name != spec.name for p in self.procs), f"duplicate process {spec.name}"
        proc = Managed(spec, COLOURS[len(self.procs) % len(COLOURS)])
        self.procs.append(proc)
        return proc

    def get(self, name: str) -> Managed:
        return next(p for p in self.procs if p.spec.name == name)

    def pids(self) -> dict[str, int]:
        return {p.spec.name: p.popen.pid for p in self.procs if p.popen is not None and p.state == "running"}

    def _spawn(self, proc: Managed) -> None:
        spec = proc.spec
        env = dict(os.environ if spec.env is None else spec.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        try:
            proc.popen = subprocess.Popen(
                spec.argv, env=env, cwd=spec.cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
        except OSError as exc:
            raise SupervisorError(f"{spec.name}: cannot run {spec.argv[0]}: {exc}") from None
        proc.state, proc.started_at, proc.ready = "running", time.monotonic(), False
        proc.descendants = {}
        proc.reader = threading.Thread(target=self._pump, args=(proc, proc.popen.stdout), daemon=True,
                                       name=f"pump-{spec.name}")
        proc.reader.start()
        if self.on_change:
            self.on_change()

    def _on_exit(self, proc: Managed, code: int, now: float) -> None:
        spec = proc.spec
        if proc.reader is not None:
            proc.reader.join(timeout=1.0)
        self._reap_descendants(proc)
        lived = now - proc.started_at
        proc.quick_exits = proc.quick_exits + 1 if lived < self.QUICK_EXIT_S else 0
        if spec.essential and (not proc.ever_ready or proc.quick_exits >= self.ESSENTIAL_MAX_QUICK_EXITS):
            last = "\n".join(f"    {line}" for line in list(proc.tail)[-12:]) or "    (no output)"
            self.fatal = (f"{spec.name} could not start: `{' '.join(spec.argv)}` exited with status {code} "
                          f"after {lived:.1f} s. Its last output:\n{last}")
            proc.state = "stopped"
            return
        delay = self.BACKOFF_S[min(proc.quick_exits, len(self.BACKOFF_S) - 1)]
        proc.restarts += 1
        proc.state, proc.next_start_at, proc.waiting_since = "waiting", now + delay, now
        proc.announced_wait = False
        self.say(f"{spec.name} exited with status {code} after {lived:.1f} s; restarting in {delay:g} s")

    def tick(self) -> None:
        """One step: notice exits, start what is due and whose dependencies are up, check readiness."""
        now = time.monotonic()
        for proc in self.procs:
            if self.fatal:
                return
            if proc.state == "running":
                self._check_running(proc, now)
            elif proc.state == "waiting" and now >= proc.next_start_at:
                self._start_if_needs_are_up(proc, now)
        if now - self._last_scan > self.DESCENDANT_SCAN_S:
            self._last_scan = now
            self._scan_descendants()

    def _check_running(self, proc: Managed, now: float) -> None:
        """A running process: its exit, its port opening (ready), or an essential one that
        never listened within its time (fatal, with its last output)."""
        spec = proc.spec
        code = proc.popen.poll()
        if code is not None:
            self._on_exit(proc, code, now)
        elif spec.listens and not proc.ready and port_open(spec.listens):
            proc.ready = proc.ever_ready = True
            self.say(f"{spec.name} is ready on port {spec.listens}")
        elif spec.essential and not proc.ever_ready and now - proc.started_at > spec.ready_timeout_s:
            last = "\n".join(f"    {line}" for line in list(proc.tail)[-12:]) or "    (no output)"
            self.fatal = (f"{spec.name} did not listen on port {spec.listens} within "
                          f"{spec.ready_timeout_s:.0f} s. Its last output:\n{last}")

    def _start_if_needs_are_up(self, proc: Managed, now: float) -> None:
        """A process whose start is due starts once the ports it needs are open (and says
        what it waits for after 3 s)."""
        spec = proc.spec
        missing = [port for port in spec.needs if not port_open(port)]
        if not missing:
            self._spawn(proc)
        elif not proc.announced_wait and now - proc.waiting_since > 3:
            self.say(f"{spec.name} waits for port(s) {', '.join(map(str, missing))}")
            proc.announced_wait = True

    def ready(self, name: str) -> bool:
        return self.get(name).ready

    def wait_ready(self, name: str, timeout: float) -> None:
        """Tick until ``name`` is ready; raise SupervisorError if it fails, or on a stop request."""
        deadline = time.monotonic() + timeout
        while not self.ready(name):
            self.tick()
            if self.fatal:
                raise SupervisorError(self.fatal)
            if self.stop_requested:
                raise SupervisorError("stop requested")
            if time.monotonic() > deadline:
                raise SupervisorError(f"{name} was not ready within {timeout:.0f} s")
            time.sleep(self.TICK_S)

    def run(self, on_tick: Callable[[], None] | None = None) -> int:
        """Supervise until a stop is requested (SIGINT/SIGTERM) or a service fails; returns the exit status."""
        while not self.stop_requested and not self.fatal:
            self.tick()
            if on_tick is not None:
                on_tick()
            time.sleep(self.TICK_S)
        if self.fatal:
            self.say(self.fatal, colour="31")
            return 1
        return 0

    def install_signal_handlers(self) -> None:
        def request_stop(signum, frame) -> None:
            if not self.stop_requested:
                self.stop_requested = True
                self.say(f"{signal.Signals(signum).name} received: stopping everything")

        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGHUP, request_stop)

    # --- stopping ----------------------------------------------------------------------

    def _scan_descendants(self) -> None:
        for proc in self.procs:
            if proc.state != "running" or proc.popen is None:
                continue
            try:
                for child in psutil.Process(proc.popen.pid).children(recursive=True):
                    proc.descendants.setdefault(child.pid, child)
            except psutil.Error:
                pass

    def _reap_descendants(self, proc: Managed, sig: int = signal.SIGKILL) -> None:
        """Stop what a process left behind (children that outlived it)."""
        for child in list(proc.descendants.values()):
            try:
                if child.is_running():  # compares the creation time: never a recycled pid
                    child.send_signal(sig)
            except psutil.Error:
                pass
        proc.descendants = {}

    @staticmethod
    def _signal_group(proc: Managed, sig: int) -> None:
        try:
            os.killpg(proc.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _stop_wave(self, wave: list[Managed]) -> None:
        running = [p for p in wave if p.popen is not None and p.state == "running"]
        if not running:
            return
        self._scan_descendants()
        for proc in running:
            self.say(f"stopping {proc.spec.name} (pid {proc.popen.pid})")
            proc.muted = proc.spec.quiet_stop
            self._signal_group(proc, signal.SIGTERM)
        start = time.monotonic()
        second = set()
        while True:
            alive = [p for p in running if p.popen.poll() is None]
            if not alive:
                break
            elapsed = time.monotonic() - start
            for proc in alive:
                if elapsed > proc.spec.stop_timeout_s / 2 and proc.spec.name not in second:
                    second.add(proc.spec.name)  # rq: a second SIGTERM is the cold stop
                    self._signal_group(proc, signal.SIGTERM)
            if elapsed > max(p.spec.stop_timeout_s for p in alive):
                for proc in alive:
                    self.say(f"{proc.spec.name} did not stop within {proc.spec.stop_timeout_s:g} s: SIGKILL")
                    self._signal_group(proc, signal.SIGKILL)
                    proc.popen.wait(5)
                break
            time.sleep(0.05)
        for proc in running:
            self._signal_group(proc, signal.SIGKILL)  # anything left in its group
            self._reap_descendants(proc)
            if proc.reader is not None:
                proc.reader.join(timeout=2.0)
            proc.state = "stopped"
            self.say(f"{proc.spec.name} stopped (status {proc.popen.returncode})")

    def shutdown(self) -> None:
        """Stop the application processes together, then the services in reverse start order."""
        for proc in self.procs:
            if proc.state == "waiting":
                proc.state = "stopped"
        self._stop_wave([p for p in self.procs if not p.spec.service])
        for proc in reversed([p for p in self.procs if p.spec.service]):
            self._stop_wave([proc])
