"""Run a CPU-bound function in a forked child of the scheduler, off its GIL.

The ETA pass and the snapshot it publishes are O(backlog) pure Python. In a thread
they share the scheduler's GIL with the loop that dispatches: every time the loop
waits for I/O (the database, Temporal, Redis) the pass takes the GIL, and the loop
waits for it back. At 100k queued that put a dispatch's p95 at 3-7x a small backlog's
(docs/architecture.md, "The ETA pass in a forked child"). A forked child has its own
interpreter on the other core, and sees the parent's memory as it was at the fork
(copy on write): no copy of the state is made on the loop, and the loop never waits.

What makes fork safe in a process that has threads (the database thread, the lease
keeper, the Temporal client's runtime): the child runs only ``fn``, which must touch
nothing of the parent but memory (no database connection, no Temporal client, no
asyncio loop, no lock a parent thread may have held at the fork: a Redis client made
in the child, not a shared one behind a lock), and it leaves by ``os._exit`` (multiprocessing's fork start does), so it never runs the
parent's exit handlers nor closes the parent's sockets. It gives up the parent's
signal handlers at once: the loop's signal wake-up socket is shared, and a SIGTERM
sent to the child (``make run``'s supervisor stops a process group) must not reach
the parent's loop as its own; the child ignores it, and the parent's warm stop kills the
child. It dies with its parent (``PR_SET_PDEATHSIG`` on
Linux): a ``kill -9`` of the scheduler leaves no pass running behind it.

What the child does that outlives it (the snapshot it stored) it says at once
(:func:`report`): a child that dies later, before its result reaches the parent, still
tells the parent what it left behind (:attr:`ChildFailed.reports`).

The wait for a child's result is bounded through the caller's ``clock`` (the scheduler's
:class:`~fairsched.engine.ports.protocols.Clock` port, its ``wait_for``), like every other wait of
the scheduler; without one (``bench/whatif.py``, a test), by :func:`asyncio.wait_for`.
"""
from __future__ import annotations

import asyncio
import codecs
import ctypes
import enum
import faulthandler
import multiprocessing
import os
import pickle
import signal
import sys
import logging
import time
import traceback
import warnings
from array import array
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger("fairsched.engine")
FORK_SLOW_LOG_S = 0.05  # a fork that held the loop this long is logged (its page tables: ~20 ms a GB)


class EtaPassIn(enum.StrEnum):
    """Where the scheduler runs its ETA pass and snapshot (``FAIRSCHED_ETA_PASS``)."""

    PROCESS = "process"  # a forked child (this module), off the dispatching loop's GIL
    THREAD = "thread"    # a thread of the scheduler's own process, on a copy of the state

_PR_SET_PDEATHSIG = 1


def _find_prctl() -> Any:
    """libc's ``prctl``, looked up in the parent (at import), never in a child: a lookup
    takes the dynamic loader's lock, which a parent thread may hold at the fork."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _find_prctl()


def _import_before_forks() -> None:
    """Import now, in the parent, what a child would otherwise import on its way. An import
    takes a lock per module, and a parent thread that was importing the same module at the
    fork left that lock held in the child for ever. The one a child met: the ``idna`` codec.
    Every ``socket.getaddrinfo`` encodes its host with it, an IP address included, so the
    first synchronous Redis connection in a process imports ``encodings.idna``. In the
    scheduler that is the lease keeper's thread or the database thread (asyncio's clients
    skip the lookup for an address), at about the time the first ETA pass forks, and the
    pass's child connects to Redis to store its snapshot. ``tests/test_forked.py`` checks
    that a pass in a child imports nothing."""
    codecs.lookup("idna")  # imports encodings.idna (and stringprep); cached from then on


_import_before_forks()


def available() -> bool:
    """True where a child can be forked (POSIX)."""
    return "fork" in multiprocessing.get_all_start_methods()


class ChildFailed(Exception):
    """The forked child raised (its traceback is the message), died, or overran.
    ``reports``: what it reported (:func:`report`) before it failed."""

    def __init__(self, message: str, reports: list[Any] | None = None) -> None:
        super().__init__(message)
        self.reports = list(reports or ())


_to_parent: Any = None  # in a forked child: the pipe to its parent (None elsewhere)


def report(value: Any) -> None:
    """Tell the parent ``value`` now, before the result (a picklable value, sent at once):
    what the child did that outlives it, so that the parent learns it even if the child
    dies before returning. Called outside a forked child (the pass in a thread), nothing."""
    if _to_parent is not None:
        _to_parent.send(("report", value))


def _detach(parent: int) -> None:
    """First thing in the child: its own signals, and death with its parent. A stop
    (SIGTERM, Ctrl-C's SIGINT) is the parent's to handle: its warm stop kills the child,
    so a supervisor that signals the whole process group never turns the child's end
    into a failed pass."""
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    if _PRCTL is not None:  # without it the parent's check below is all
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before prctl took hold
        os._exit(1)


def _idle_policy() -> None:
    """(Linux) A niced child runs under ``SCHED_IDLE`` too: a thread of any other process that
    wakes (Temporal's server answering a start, PostgreSQL, the parent's loop) takes the core
    from it at once, where a nice of 10 alone still leaves it a share and a wait. It still
    runs, at the lowest weight, on a machine that is never idle."""
    if hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except OSError:  # not allowed here: the nice stays
            pass


def _child(send: Any, fn: Callable[[], Any], parent: int, nice: int, timeout_s: float | None = None) -> None:
    global _to_parent
    _detach(parent)
    _to_parent = send
    if nice:
        os.nice(nice)
        _idle_policy()
    if timeout_s:
        # Just before the parent kills it for overrunning, every thread's stack goes to
        # stderr (the scheduler's log): a child that hangs says where (faulthandler's own
        # C thread, which needs no lock the child may find held).
        faulthandler.dump_traceback_later(max(0.5, 0.9 * timeout_s), exit=False)
    try:
        value = fn()
    except BaseException:  # noqa: BLE001 - everything goes back to the parent, as text
        send.send(("error", traceback.format_exc()))
    else:
        try:
            send_result(send, value)
        except Exception:  # noqa: BLE001 - an unpicklable result: say so rather than hang
            send.send(("error", traceback.format_exc()))
    send.close()


def send_result(send: Any, value: Any) -> None:
    """``value`` to the parent: pickled (protocol 5), with the buffers that its objects give
    out of band (:func:`columns_reduce`: a pass's first ETAs, a million charts' columns)
    written to the pipe as they lie in memory, after a message that says their formats and
    sizes. In band, pickle copied each column twice (``array.tobytes()``, then into its
    output): 48 MB more in the child at 1M, and as much again in the parent as it read them."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    views = [memoryview(b) for b in buffers]
    send.send(("ok", [(v.format, v.nbytes) for v in views]))
    send.send_bytes(head)
    fd = send.fileno()
    for v in views:
        raw = v.cast("B") if v.format != "B" else v
        done = 0
        while done < len(raw):
            done += os.write(fd, raw[done:])


async def run_forked(fn: Callable[[], T], *, name: str, timeout_s: float, nice: int = 0, clock: Any = None) -> T:
    """``fn()`` in a forked child; its result (pickled back through a pipe). Raises
    :class:`ChildFailed` if it raised, died or took more than ``timeout_s`` (by ``clock``'s
    ``wait_for``, see the module docstring). A cancel kills the child. The loop only forks
    (a page-table copy: about 20 ms per GB of heap) and waits; the result is read in a
    thread. ``nice``: the child's niceness above the parent's (background work yields the
    CPU to the parent and its database)."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, fn, os.getpid(), nice, timeout_s), name=name, daemon=True)
    with warnings.catch_warnings():
        # Python 3.12+ warns about any fork while threads run; see the module docstring
        # for why this one is safe.
        warnings.simplefilter("ignore", DeprecationWarning)
        began = time.monotonic()
        proc.start()
        took = time.monotonic() - began
    if took >= FORK_SLOW_LOG_S:
        log.info("%s: the fork held the loop %.0f ms", name, 1000 * took)
    send.close()
    received = False
    reports: list[Any] = []
    try:
        try:
            status, value = await _wait_for(clock)(asyncio.to_thread(receive_result, recv, reports), timeout_s)
        except asyncio.TimeoutError:
            raise ChildFailed(f"{name} took more than {timeout_s:.0f} s: killed", reports) from None
        except EOFError:
            received = True  # it is gone: its exit code says how
            await asyncio.to_thread(proc.join, 5)
            raise ChildFailed(f"{name} died (exit code {proc.exitcode})", reports) from None
        received = True
        if status != "ok":
            raise ChildFailed(f"{name} failed:\n{value}", reports)
        return value
    finally:
        await _reap(proc, recv, received)


async def _reap(proc: Any, recv: Any, received: bool) -> None:
    """Waits for a child that has sent its result (``received``) to leave, kills it
    otherwise or when it is stuck on its way out, and waits for it to be gone before
    closing: a killed child can take more than seconds to be reaped on a loaded machine,
    and ``Process.close`` refuses a child still running."""
    if received:
        await asyncio.to_thread(proc.join, 5)  # it has sent: it is leaving
    if proc.is_alive():  # cancelled, timed out, or stuck on its way out
        proc.kill()
        await asyncio.to_thread(proc.join)
    recv.close()
    proc.close()


def _wait_for(clock: Any) -> Callable[[Any, float], Any]:
    """``clock.wait_for``, or :func:`asyncio.wait_for` without a clock."""
    return asyncio.wait_for if clock is None else clock.wait_for


def receive_result(recv: Any, reports: list[Any]) -> tuple[str, Any]:
    """The child's result; what it reports before is appended to ``reports``."""
    while True:
        status, value = recv.recv()
        if status == "report":
            reports.append(value)
        elif status == "ok":  # then the value's pickle, then its buffers (send_result)
            head = recv.recv_bytes()
            return status, pickle.loads(head, buffers=[read_buffer(recv, f, n) for f, n in value])
        else:
            return status, value


def read_buffer(recv: Any, fmt: str, nbytes: int) -> Any:
    """A buffer :func:`send_result` wrote, read straight into its own column: an array of
    its format (a bytearray for bytes or a format that has no array), never through a copy."""
    if fmt in ("B", "b", "c") or len(fmt) != 1 or fmt not in "bBuhHiIlLqQfd":
        out: Any = bytearray(nbytes)
    else:
        size = array(fmt).itemsize
        out = array(fmt, bytes(size)) * (nbytes // size)  # (one item repeated: no bytes of nbytes made)
    view = memoryview(out).cast("B")
    fd, done = recv.fileno(), 0
    while done < nbytes:
        got = os.readv(fd, [view[done:]])
        if not got:
            raise EOFError
        done += got
    return out


def columns_reduce(obj: Any, protocol: int, rebuild: Callable[..., Any], *args: Any) -> tuple:
    """A ``__reduce_ex__`` for an object made of arrays (``args``, with plain values between):
    from protocol 5 on, each array goes as a :class:`pickle.PickleBuffer` (out of band to a
    forked child's parent, :func:`send_result`; in band, as bytes, elsewhere); ``rebuild``
    takes each back as an array or a bytes-like object (:func:`as_array` makes it an array)."""
    if protocol < 5:
        return rebuild, args
    return rebuild, tuple(pickle.PickleBuffer(a) if isinstance(a, (array, bytearray)) else a for a in args)


def as_array(typecode: str, got: Any) -> array:
    """An array of ``typecode`` from what :func:`columns_reduce` pickled: the array itself
    (out of band), or its bytes (in band)."""
    return got if isinstance(got, array) else array(typecode, got)


async def run_forked_pair(fa: Callable[[], T], fb: Callable[[], Any], *, name: str, timeout_s: float,
                          nice: int = 0, clock: Any = None) -> tuple[T, Any]:
    """``fa()`` and ``fb()`` in two forked children started back to back, with no await
    between the forks: both see the same state (a preview's before and after, computed
    side by side on two cores). Raises :class:`ChildFailed` as :func:`run_forked` does."""
    ctx = multiprocessing.get_context("fork")
    pipes, procs = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for fn in (fa, fb):
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(send, fn, os.getpid(), nice, timeout_s), name=name, daemon=True)
            proc.start()
            send.close()
            pipes.append(recv)
            procs.append(proc)
    received = False
    try:
        got = await _wait_for(clock)(asyncio.gather(*(asyncio.to_thread(receive_result, r, []) for r in pipes)),
                                     timeout_s)
        received = True
    except asyncio.TimeoutError:
        raise ChildFailed(f"{name} took more than {timeout_s:.1f} s: killed") from None
    except EOFError:
        raise ChildFailed(f"{name} died") from None
    finally:
        for proc, recv in zip(procs, pipes):
            await _reap(proc, recv, received)
    for status, value in got:
        if status != "ok":
            raise ChildFailed(f"{name} failed:\n{value}")
    return got[0][1], got[1][1]
