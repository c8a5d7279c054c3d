"""Django's SQLite backend, with the connections it closes kept open for the next connect.

Under ASGI every request runs in a context of its own (asgiref's ``ThreadSensitiveContext``,
which Django's ``ASGIHandler`` opens per request), and Django's connections belong to a
context: each request opened a connection and closed it after, whatever ``CONN_MAX_AGE``
says. Opening one costs about 1.5 ms on this machine (Django registers its ~30 SQL functions,
then the ``PRAGMA``\\ s of ``init_command``), a fifth of an API submission's whole cost in the
web process. So a closed connection goes back to a small pool of this process (at most
:data:`POOL_MAX` per database file) and the next connect takes it: the same settings, the
same ``PRAGMA``\\ s already run (they last as long as the connection).

A connection is pooled only when nothing of it is left: not closed inside an ``atomic()``
block (Django keeps using it there until the block ends), no transaction open (one still
open is rolled back first), made by this process (never one carried over a ``fork``: SQLite says
not to use it in the child), and to the file that is at that path now (a pool entry is
keyed by the file's device and inode, so a database deleted and made again, as the tests
do, never gets a connection to the old file), with the same settings (``timeout``,
``init_command``, ...) as the connect asks for. An in-memory database is never pooled (its
connection *is* the database). :func:`close_idle` closes them (a connection kept open, as any
open one, keeps another from taking the database for itself with ``locking_mode=EXCLUSIVE``).

A transaction that writes waits for its turn at the database's one writer in a queue
(:mod:`.writer`: this process's lock, then a ``flock`` every process takes) rather than in
SQLite's sleeping busy handler. Everything else is Django's ``sqlite3`` backend.
"""
from __future__ import annotations

import os
import threading
from typing import Any

from django.db import OperationalError
from django.db.backends.sqlite3 import base, creation

from common.pooled_sqlite3 import writer

POOL_MAX = 32  # a web process has a request in flight per thread; SQLite caches up to 2 MB a connection

_lock = threading.Lock()
_pid = os.getpid()
Key = tuple[str, int, int, str]  # the path, its file's device and inode, the connection's settings
_idle: dict[Key, list[Any]] = {}


def _file_key(name: str, settings: str = "") -> Key | None:
    try:
        st = os.stat(name)
    except OSError:
        return None
    return name, st.st_dev, st.st_ino, settings


def _take(key: Key) -> Any | None:
    global _pid
    with _lock:
        if _pid != os.getpid():  # a forked child: the parent's connections are not its own
            _idle.clear()
            _pid = os.getpid()
        for stale in [k for k in _idle if k[0] == key[0] and k[1:3] != key[1:3]]:
            for conn in _idle.pop(stale):  # the file at that path was replaced
                conn.close()
        free = _idle.get(key)
        return free.pop() if free else None


def _give(key: Key, conn: Any) -> bool:
    with _lock:
        if _pid != os.getpid():
            return False
        free = _idle.setdefault(key, [])
        if len(free) >= POOL_MAX:
            return False
        free.append(conn)
        return True


def close_idle() -> int:
    """Close the connections this process keeps (before taking the database for yourself: an
    open connection, idle or not, keeps ``locking_mode=EXCLUSIVE`` from being had). How many."""
    with _lock:
        kept = [conn for free in _idle.values() for conn in free] if _pid == os.getpid() else []
        _idle.clear()
    for conn in kept:
        conn.close()
    return len(kept)


def idle_connections() -> int:
    """How many connections this process keeps for the next connects (tests)."""
    with _lock:
        return sum(map(len, _idle.values())) if _pid == os.getpid() else 0


class DatabaseCreation(creation.DatabaseCreation):
    def _destroy_test_db(self, test_database_name: str, verbosity: int) -> None:
        """The test database's file goes, and with it the connections kept to it and its lock file."""
        close_idle()
        super()._destroy_test_db(test_database_name, verbosity)
        path = writer.lock_path(str(test_database_name))
        if path:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass


class DatabaseWrapper(base.DatabaseWrapper):
    creation_class = DatabaseCreation
    _has_turn = False

    # --- the writer's turn (writer.py): from BEGIN IMMEDIATE to the end of the transaction

    def _start_transaction_under_autocommit(self) -> None:
        self._end_turn()
        if self.transaction_mode in ("IMMEDIATE", "EXCLUSIVE"):
            timeout = float(self.settings_dict["OPTIONS"].get("timeout", 5))
            try:
                self._has_turn = writer.acquire(str(self.settings_dict["NAME"]), timeout)
            except writer.TurnTimeout as exc:
                raise OperationalError(f"database is locked ({exc})") from None
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._end_turn()
            raise

    def _end_turn(self) -> None:
        if self._has_turn:
            self._has_turn = False
            writer.release()

    def _commit(self) -> None:
        super()._commit()  # a failed COMMIT leaves the transaction open: its rollback ends the turn
        self._end_turn()

    def _rollback(self) -> None:
        try:
            super()._rollback()
        finally:
            self._end_turn()

    def _set_autocommit(self, autocommit: bool) -> None:
        super()._set_autocommit(autocommit)
        if autocommit:  # the end of every atomic(), whatever happened in it
            self._end_turn()

    # --- the pool

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        self._pool_pid = os.getpid()
        # the same file, with the same settings (a test's other timeout gets its own connections)
        self._pool_settings = repr((sorted(conn_params.items()), self.init_commands))
        self._pool_key = None
        if not self.is_in_memory_db():
            key = self._pool_key = _file_key(conn_params["database"], self._pool_settings)
            conn = _take(key) if key is not None else None
            if conn is not None:
                return conn
        return super().get_new_connection(conn_params)

    def _close(self) -> None:
        try:
            self._close_or_keep()
        finally:
            self._end_turn()

    def _close_or_keep(self) -> None:
        conn = self.connection
        if (conn is not None and not self.in_atomic_block and not self.is_in_memory_db()
                and getattr(self, "_pool_pid", None) == os.getpid()):
            # the file as it was at the connect (one stat a request, not two); a file made by it: now
            key = getattr(self, "_pool_key", None) or _file_key(self.settings_dict["NAME"],
                                                                getattr(self, "_pool_settings", ""))
            if key is not None:
                try:
                    if conn.in_transaction:
                        conn.rollback()
                except Exception:  # noqa: BLE001 - not fit to keep: close it as Django would
                    pass
                else:
                    if _give(key, conn):
                        return
        super()._close()
