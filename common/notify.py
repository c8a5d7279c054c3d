"""Notifications to the scheduler: their vocabulary, and the one way to send them, when the
writing transaction commits.

Every service calls :func:`notify` with a typed note inside its transaction, and so does
a chart's ``save()`` or ``delete()`` through the ORM or the admin (the receivers in
``charts/signals.py``: producers who write charts with the ORM are one of the promised ways
in). The note is published on the Redis channel :data:`CHANNEL` only after commit (Zulip's
pattern), so the scheduler never sees a change that rolled back, and once a transaction
(a service's note and its save's are one); in a web process a thread of its own sends it
(:func:`send_in_background`), so no request waits on Redis for it. Notes are hints, not
the truth: the scheduler re-reads what they name, and its incremental resync (every few
seconds, the rows whose ``updated_at`` moved) catches anything that sent none
(``bulk_create`` and ``QuerySet.update()`` outside the services, a Redis outage); the full
resync (every 5 minutes) catches raw SQL. Publishing never fails a
write: a Redis error is logged and the resync repairs it. The engine reads the vocabulary
here (it imports no app).

Kinds (``kind`` on the wire; every note is the JSON object ``{"kind": ..., <its fields>}``)
---------------------------------------------------------------------------------------------

========= =============== =========================================================
kind      fields          what changed (the scheduler re-reads it)
========= =============== =========================================================
chart     id              a chart was created or changed: its row
charts    ids, count      charts submitted at once: the first :data:`CHARTS_NAMED`
                          pks, and how many there were (more than named: a resync)
org       id              an org: its weight, hold or release, name, webhook fields
cost      org, workflow   an (org, workflow) cost was set or removed: the costs
settings                  the budget, intervals or ETA model: the settings
resync                    re-read whatever changed
========= =============== =========================================================

Ids are whole numbers (pks). :func:`from_wire` refuses an unknown kind
(:class:`UnknownKind`) and a field missing, unknown or of the wrong type
(:class:`MalformedNote`); the scheduler's intake (``fairsched.engine.notes.read_note``)
reads any note it cannot parse as :class:`Resync`, so a newer sender's note is never
lost, only read by the next resync.
"""
from __future__ import annotations

import atexit
import dataclasses
import enum
import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import redis
from django.conf import settings
from django.db import transaction

from common.lingering import LingeringSender

log = logging.getLogger(__name__)

CHANNEL = "fairsched:scheduler"
CHARTS_NAMED = 1000  # the pks a ``charts`` note names at most


class Kind(enum.StrEnum):
    CHART = "chart"
    CHARTS = "charts"
    ORG = "org"
    COST = "cost"
    SETTINGS = "settings"
    RESYNC = "resync"


class MalformedNote(ValueError):
    """A wire note that is not one this version can read: not an object, or a field
    missing, unknown or of the wrong type."""


class UnknownKind(MalformedNote):
    """A wire note whose ``kind`` is none of :class:`Kind`."""


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require_ids(kind: Kind, **values: Any) -> None:
    for name, value in values.items():
        if not _is_id(value):
            raise MalformedNote(f"{kind.value} note: {name} must be a whole number, got {value!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Note:
    """One notification. Subclasses name their :class:`Kind` and declare their fields,
    checked when made (a sender's bug fails at the sender, not in the scheduler)."""

    kind: ClassVar[Kind]

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"kind": self.kind.value}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            wire[f.name] = list(value) if isinstance(value, tuple) else value
        return wire


@dataclass(frozen=True, kw_only=True, slots=True)
class ChartNote(Note):
    kind: ClassVar[Kind] = Kind.CHART
    id: int

    def __post_init__(self) -> None:
        _require_ids(self.kind, id=self.id)


@dataclass(frozen=True, kw_only=True, slots=True)
class ChartsNote(Note):
    """Charts submitted at once: ``ids`` names at most :data:`CHARTS_NAMED` of the ``count``
    (make one with :meth:`of`)."""

    kind: ClassVar[Kind] = Kind.CHARTS
    ids: tuple[int, ...]
    count: int

    def __post_init__(self) -> None:
        if not isinstance(self.ids, (list, tuple)):
            raise MalformedNote(f"charts note: ids must be a list of whole numbers, got {self.ids!r}")
        for i, pk in enumerate(self.ids):
            _require_ids(self.kind, **{f"ids[{i}]": pk})
        _require_ids(self.kind, count=self.count)
        if self.count < len(self.ids):
            raise MalformedNote(f"charts note: count {self.count} is less than the {len(self.ids)} ids named")
        object.__setattr__(self, "ids", tuple(self.ids))

    @classmethod
    def of(cls, ids: Sequence[int]) -> "ChartsNote":
        return cls(ids=tuple(ids[:CHARTS_NAMED]), count=len(ids))

    @property
    def complete(self) -> bool:
        """Every chart is named (else the scheduler resyncs for the rest)."""
        return self.count == len(self.ids)


@dataclass(frozen=True, kw_only=True, slots=True)
class OrgNote(Note):
    kind: ClassVar[Kind] = Kind.ORG
    id: int

    def __post_init__(self) -> None:
        _require_ids(self.kind, id=self.id)


@dataclass(frozen=True, kw_only=True, slots=True)
class CostNote(Note):
    kind: ClassVar[Kind] = Kind.COST
    org: int
    workflow: int

    def __post_init__(self) -> None:
        _require_ids(self.kind, org=self.org, workflow=self.workflow)


@dataclass(frozen=True, kw_only=True, slots=True)
class SettingsNote(Note):
    kind: ClassVar[Kind] = Kind.SETTINGS


@dataclass(frozen=True, kw_only=True, slots=True)
class Resync(Note):
    kind: ClassVar[Kind] = Kind.RESYNC


NOTES: dict[Kind, type[Note]] = {cls.kind: cls for cls in (ChartNote, ChartsNote, OrgNote, CostNote,
                                                            SettingsNote, Resync)}
assert set(NOTES) == set(Kind), "every kind has its note class"


def from_wire(wire: Any) -> Note:
    """The note a wire dict stands for; :class:`UnknownKind` for a kind not in :class:`Kind`,
    :class:`MalformedNote` for anything else this version cannot read."""
    if not isinstance(wire, dict):
        raise MalformedNote(f"a note is a JSON object, got {type(wire).__name__}")
    try:
        cls = NOTES[Kind(wire.get("kind"))]
    except ValueError:
        raise UnknownKind(f"unknown note kind {wire.get('kind')!r}") from None
    fields = {k: v for k, v in wire.items() if k != "kind"}
    try:
        return cls(**fields)
    except TypeError as exc:  # a field missing or unknown
        raise MalformedNote(f"{cls.kind.value} note: {exc}") from None


# --- sending -----------------------------------------------------------------------------

_client_lock = threading.Lock()
_client: redis.Redis | None = None
_client_url: str | None = None

# Test seam: when set, notes go here, in their wire form, instead of Redis (:func:`capture`).
_capture: list[Callable[[dict[str, Any]], None]] = []


@contextmanager
def capture(sink: Callable[[dict[str, Any]], None]) -> Iterator[None]:
    """Test hook: inside it, each note published goes to ``sink`` (and to every other
    capture's) in its wire form, instead of Redis; after it, as before."""
    _capture.append(sink)
    try:
        yield
    finally:
        _capture.remove(sink)


@contextmanager
def uncaptured() -> Iterator[None]:
    """Test hook: inside it, notes go to Redis (or the sender thread) even where a
    :func:`capture` is open; the captures resume after it."""
    sinks = _capture[:]
    _capture.clear()
    try:
        yield
    finally:
        _capture[:] = sinks


def redis_client() -> redis.Redis:
    """A shared Redis client with short timeouts (web requests must not hang on Redis)."""
    global _client, _client_url
    with _client_lock:
        if _client is None or _client_url != settings.REDIS_URL:
            _client = redis.Redis.from_url(
                settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=1, health_check_interval=30
            )
            _client_url = settings.REDIS_URL
        return _client


@contextmanager
def client_busy() -> Iterator[None]:
    """Test hook: hold the shared client's lock, as a thread inside :func:`redis_client` does
    (a fork meanwhile leaves it held in the child for ever)."""
    if not _client_lock.acquire(timeout=1):
        raise TimeoutError("the shared Redis client's lock is held")
    try:
        yield
    finally:
        _client_lock.release()


def publish(note: Note) -> None:
    """Publish ``note`` now (outside any transaction), or hand it to this process's sender
    thread once :func:`send_in_background` was called (the web). Never raises."""
    wire = note.to_wire()
    if _capture:
        for sink in list(_capture):
            sink(wire)
        return
    if _background:
        _sender.put(wire)
        return
    _send([wire])


def _send(wires: list[dict[str, Any]]) -> None:
    """One round trip for them all (a pipeline of PUBLISH, in order)."""
    try:
        client = redis_client()
        if len(wires) == 1:
            client.publish(CHANNEL, json.dumps(wires[0]))
            return
        pipe = client.pipeline(transaction=False)
        for wire in wires:
            pipe.publish(CHANNEL, json.dumps(wire))
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("scheduler notification not sent (%s); the periodic resync will catch up: %s",
                    exc, wires[0] if len(wires) == 1 else f"{len(wires)} notes, the first {wires[0]}")


# --- the web's sender thread ---------------------------------------------------------------
#
# A web process runs its requests' sync code on one thread: a request that waited for
# Redis's answer to its PUBLISH held every other request back by that round trip (0.3 to
# 4 ms on a loaded machine, as long as the rest of an API submission). There the notes go
# to a thread of the process that sends them, what piled up in one pipeline, in the order
# they were committed. Nothing changes for the scheduler: a note is still sent only after
# its commit, and one lost (the process killed between the commit and the send, as could
# happen before) is read by the incremental resync within seconds.

_background = False
SEND_BATCH = 1000
LINGER_S = 0.002  # after a send, what comes within it goes in the next one, waking no one
_sender = LingeringSender("notify-sender", lambda wires: _send(wires), linger_s=LINGER_S, batch=SEND_BATCH)


def send_in_background(enabled: bool = True) -> None:
    """From now on this process's notes are sent by a thread of its own (``config/asgi.py``:
    the web). A process that exits flushes them first (:func:`flush`, at exit)."""
    global _background
    _background = enabled


def flush(timeout: float = 5.0) -> bool:
    """Wait until the notes handed to the sender thread so far are sent (tests, exit)."""
    return _sender.flush(timeout)


atexit.register(flush, 2.0)


class _Publish:
    """The on-commit callback of one note: a callable that still says which note it sends,
    so that :func:`notify` can tell a transaction's pending notes from its other hooks."""

    __slots__ = ("note",)

    def __init__(self, note: Note) -> None:
        self.note = note

    def __call__(self) -> None:
        publish(self.note)


def _pending_notes(conn) -> set[Note]:
    """The notes already waiting for the current transaction's commit on ``conn``.

    Django keeps a transaction's hooks in ``conn.run_on_commit`` and gives it a new list
    whenever that changes other than by an append: at a commit, a rollback, and a savepoint's
    rollback (which keeps only the hooks registered outside it). So the set is kept beside
    the very list it was read from, and read again from a new one: O(1) a note, and a note
    whose hook a rollback dropped is sent again by the next write that asks for it."""
    hooks = conn.run_on_commit
    kept = getattr(conn, "_fairsched_pending_notes", None)
    if kept is None or kept[0] is not hooks:
        kept = (hooks, {func.note for _, func, _ in hooks if isinstance(func, _Publish)})
        conn._fairsched_pending_notes = kept
    return kept[1]


def notify(note: Note, using: str | None = None) -> None:
    """Send ``note`` to the scheduler when the current transaction commits (at once
    outside one); nothing if it rolls back; once a transaction however often it is asked
    (a service's own note and the ``post_save`` receiver's for the same chart, one save: one
    note, ``charts/signals.py``)."""
    if not isinstance(note, Note):
        raise TypeError(f"notify() takes a common.notify.Note, got {type(note).__name__}")
    conn = transaction.get_connection(using)
    if conn.in_atomic_block:
        pending = _pending_notes(conn)
        if note in pending:
            return
        pending.add(note)
    transaction.on_commit(_Publish(note), using=using)
