"""The database's one writer, as a queue: who waits for it is woken when it is free.

SQLite lets one transaction write at a time; with ``transaction_mode`` IMMEDIATE each
``atomic()`` takes that lock at its ``BEGIN``. A connection that finds it taken waits in
SQLite's busy handler, which sleeps 1, 2, 5, 10, 15, 20, 25 ... up to 100 ms between tries:
20 API producers meeting there had a p95 of seconds, a writer arriving later often winning
over one that had slept longer. So before its ``BEGIN IMMEDIATE`` a transaction takes, in this
order:

1. this process's lock (a thread waiting on it is woken as soon as it is released), then
2. an exclusive ``flock`` on ``<database>.writer-lock`` beside the database file, which every
   process using this backend takes (the web processes, the scheduler, the workers): one
   thread per process asks for it, polling every :data:`POLL_S` (``flock`` cannot wait with a
   timeout), not SQLite's growing sleeps.

Both are released as the transaction ends (commit, rollback, the connection closed, or the
``BEGIN`` failing); the kernel drops the ``flock`` of a process that dies. Neither waits
longer than the connection's ``timeout`` option: past it the ``BEGIN`` fails with "database
is locked", as SQLite's own wait would have (a writer holds its lock all that time). A writer that takes neither
(the ``sqlite3`` shell, an autocommit statement outside ``atomic()``) still meets SQLite's own
lock, which stays the truth: this only orders the waiting. A thread that already holds the
turn (a second connection of the same thread) passes; a transaction may end on another
thread than the one it began on.
"""
from __future__ import annotations

import fcntl
import os
import threading
import time

POLL_S = 0.0005

_turn = threading.Lock()  # not an RLock: a transaction may end on another thread than it began
_owner: int | None = None  # the thread holding the turn
_held = 0  # how many transactions of that thread hold it (a second connection of the same thread)
_locked: int | None = None  # the descriptor flocked while the turn is held
_files: dict[tuple[int, str], int] = {}  # (pid, lock file) -> descriptor, opened once a process


def _forget_after_fork() -> None:
    """A forked child starts with no turn: the parent's lock may have been held by a thread the
    child does not have, and the inherited descriptor shares the parent's ``flock`` (unlocking
    it would unlock the parent's). The child opens its own if it writes."""
    global _turn, _owner, _held, _locked
    _turn, _owner, _held, _locked = threading.Lock(), None, 0, None
    _files.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def lock_path(database: str) -> str | None:
    """``<database>.writer-lock``, or None for a database that is not a plain file."""
    if not database or database == ":memory:" or database.startswith("file:") or "mode=memory" in database:
        return None
    return f"{database}.writer-lock"


def _descriptor(path: str) -> int | None:
    key = (os.getpid(), path)
    fd = _files.get(key)
    if fd is None:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        _files[key] = fd
    return fd


class TurnTimeout(Exception):
    """The turn was not had within the connection's timeout: what SQLite would have said then."""


def acquire(database: str, timeout: float) -> bool:
    """Wait for the writer's turn, at most ``timeout`` seconds (then :class:`TurnTimeout`). True if
    it is held now and :func:`release` must follow; False if there is none to take (not a plain
    file, or its lock file cannot be made: SQLite's own lock only)."""
    global _owner, _held, _locked
    path = lock_path(database)
    if path is None:
        return False
    me = threading.get_ident()
    if _owner == me:  # only this thread sets it to its own id
        _held += 1
        return True
    fd = _descriptor(path)
    if fd is None:
        return False
    deadline = time.monotonic() + max(0.0, timeout)
    if not _turn.acquire(timeout=max(0.0, timeout)):
        raise TurnTimeout(f"another thread of this process has been writing for {timeout:g} s")
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:  # (the turn is given back below, once)
                    raise TurnTimeout(f"another process has been writing for {timeout:g} s")
                time.sleep(POLL_S)
    except BaseException:
        _turn.release()
        raise
    _owner, _held, _locked = me, 1, fd
    return True


def release() -> None:
    """End one transaction's hold of the turn (the last one unlocks the file and the turn)."""
    global _owner, _held, _locked
    _held -= 1
    if _held > 0:
        return
    fd, _owner, _locked = _locked, None, None
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        _turn.release()


def held() -> int:
    """How many transactions of this process hold the turn now (tests)."""
    return _held
