"""A warm stop that always stops: SIGTERM / SIGINT for the long-running commands.

``runscheduler`` and ``runworker`` install a :class:`StopDeadline`. The first signal
asks the command's event loop to stop warmly; if the process is still alive
``timeout_s`` later (or at a second signal: Ctrl-C twice, or the supervisor's
second SIGTERM), the deadline's thread runs ``on_force`` (the scheduler releases
its lease there), logs ``"<name> stopped (forced after N s: <phase>)"``, writes
every thread's stack to stderr (so a slow phase can be found), and ends the
process with ``os._exit``. A forced exit is as safe as a kill, which the system is
built to survive: see the scheduler's and the worker's docstrings.

Why not ``loop.add_signal_handler``: asyncio learns of a signal through its
self-pipe, the socket every ``call_soon_threadsafe`` also writes a byte to, and
it reads that socket only between callbacks. While the loop thread is busy (an
ETA pass or a load of a large backlog takes seconds), the Temporal bridge, the
database thread and the executor keep writing; past about 280 bytes the socket
is full, the C signal handler's byte is dropped, and the stop is lost (CPython
only prints "Exception ignored when trying to write to the signal wakeup fd").
Here the C handler writes the signal's number to a pipe of this module's own,
which only signals write to, the instant the signal arrives whatever the main
thread is doing; the deadline's thread reads it and calls the loop with
``call_soon_threadsafe`` (whose byte may be dropped harmlessly: the callback is
queued before the byte is written, and a full pipe already wakes the loop).
"""
from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable

log = logging.getLogger("fairsched.runtime.shutdown")

FORCED_EXIT_STATUS = 0  # the stop was asked for, and what it leaves behind is consistent
SAY_TIMEOUT_S = 1.0  # a log handler blocked by a stuck thread must not block the forced exit


def _ignore(signum: int, frame: object) -> None:
    """The Python-level handler: the work is done by the deadline's thread (see the module docstring)."""


class StopDeadline:
    """SIGTERM/SIGINT -> ``on_stop`` on the loop; still alive ``timeout_s`` later -> forced exit."""

    def __init__(self, *, name: str, timeout_s: float, phase: Callable[[], str] = lambda: "",
                 on_force: Callable[[], None] | None = None) -> None:
        self.name = name
        self.timeout_s = timeout_s
        self.phase = phase
        self.on_force = on_force
        self.requested_at: float | None = None  # time.monotonic() of the first signal
        self.requested_during = ""  # the phase when it arrived
        self.signal_name = ""
        self.stopped = False  # set once the graceful path has logged "<name> stopped"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_stop: Callable[[], None] | None = None
        self._lock = threading.Lock()

    def install(self, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> None:
        """Take over ``signals`` (main thread only), before the work starts."""
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        for sig in signals:
            signal.signal(sig, _ignore)
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(read_end,), daemon=True, name=f"{self.name}-stop").start()

    def attach(self, loop: asyncio.AbstractEventLoop, on_stop: Callable[[], None]) -> None:
        """Call ``on_stop`` on ``loop`` at the first signal (at once if one came already)."""
        with self._lock:
            self._loop, self._on_stop = loop, on_stop
            pending = self.requested_at is not None
        if pending:
            loop.call_soon_threadsafe(on_stop)

    def exit_now(self, status: int = 0) -> None:
        """End the process once the graceful stop is done, skipping the interpreter's own teardown:
        it joins executor threads (a database read or lock wait the stop abandoned, a snapshot
        being written) and frees a large backlog's memory, seconds at 100,000 charts (for ever
        behind a lock), and nothing in it matters once the stop is done."""
        self.stopped = True
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        logging.shutdown()
        os._exit(status)

    def elapsed(self) -> float:
        return time.monotonic() - self.requested_at if self.requested_at is not None else 0.0

    # ------------------------------------------------------------------ the deadline's thread
    def _watch(self, read_end: int) -> None:
        signals = self._next_signals(read_end, None)
        with self._lock:
            self.requested_at = time.monotonic()
            self.requested_during = self._phase()
            self.signal_name = _signal_name(signals[0])
            loop, on_stop = self._loop, self._on_stop
        if loop is not None and on_stop is not None:
            try:
                loop.call_soon_threadsafe(on_stop)
            except RuntimeError:  # the loop closed meanwhile: the process is on its way out
                pass
        deadline = self.requested_at + self.timeout_s
        again = signals[1:]
        while not again and (remaining := deadline - time.monotonic()) > 0:
            again = self._next_signals(read_end, remaining)
        if again:
            self._say(f"second signal ({_signal_name(again[0])}): {self.name} stops now")
        self._force()

    @staticmethod
    def _next_signals(read_end: int, timeout: float | None) -> bytes:
        """The numbers of the signals that arrived (empty after ``timeout``)."""
        while True:
            ready, _, _ = select.select([read_end], [], [], timeout)
            if not ready:
                return b""
            data = os.read(read_end, 64)
            if data:
                return data

    def _phase(self) -> str:
        try:
            return self.phase() or "unknown"
        except Exception:  # noqa: BLE001 - a description must never stop the stop
            return "unknown"

    def _force(self) -> None:
        phase = self._phase()
        problem = ""
        if self.on_force is not None:
            try:
                self.on_force()
            except Exception as exc:  # noqa: BLE001
                problem = f"; {exc}"
        waited = self.elapsed()
        if self.stopped:
            self._say(f"{self.name}: exit forced after {waited:.1f} s ({phase}){problem}")
        else:
            self._say(f"{self.name} stopped (forced after {waited:.1f} s: {phase}; "
                      f"stop requested during: {self.requested_during}){problem}")
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        os._exit(FORCED_EXIT_STATUS)

    def _say(self, message: str) -> None:
        """Log ``message``; if logging is stuck (a lock held by a stuck thread), write it to stderr."""
        done = threading.Event()

        def emit() -> None:
            log.warning(message)  # a StreamHandler flushes each record
            done.set()

        threading.Thread(target=emit, daemon=True).start()
        if not done.wait(SAY_TIMEOUT_S):
            try:
                os.write(2, f"{message}\n".encode())
            except OSError:
                pass


def _signal_name(signum: int | None) -> str:
    try:
        return signal.Signals(signum).name
    except (TypeError, ValueError):
        return "signal"
