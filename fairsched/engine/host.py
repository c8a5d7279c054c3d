"""What the scheduler's collaborators see of the loop that owns them.

:class:`~fairsched.engine.scheduler.Scheduler` owns the state (``state``, the round
saver ``rounds``, the loop's shared bookkeeping ``loop``: a :class:`LoopState`) and the
ports; its collaborators (:mod:`~fairsched.engine.leadership`,
:mod:`~fairsched.engine.startup`, :mod:`~fairsched.engine.dispatcher`,
:mod:`~fairsched.engine.eta_passes`, :mod:`~fairsched.engine.sync`,
:mod:`~fairsched.engine.previews`) hold a :class:`Host` and read them through it, at call
time (a test may swap a port, or a tunable such as ``HEAD_PER_ORG``, after building the
scheduler). A collaborator never assigns ``state`` or ``rounds``: it returns effects, and
what it builds at a start is installed by the host (:meth:`Host.install`). What it reports
to the next tick goes through ``loop`` (:meth:`LoopState.report_note`,
:meth:`LoopState.report_finished`, :meth:`LoopState.request_resync`, ...).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol

from common.notify import Note
from scheduling import RoundSaver
from fairsched.engine.ports.protocols import Clock, Publisher, Store, TemporalPort
from fairsched.engine.state import LiveState
from fairsched.temporal.shared import WorkflowIds


class Backoff:
    """Capped exponential backoff for one kind of operation."""

    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = low, high
        self.delay = 0.0
        self.not_before = 0.0
        self.failures = 0

    def ready(self, now: float) -> bool:
        return now >= self.not_before

    def fail(self, now: float) -> float:
        self.failures += 1
        self.delay = min(self.high, self.delay * 2 if self.delay else self.low)
        self.not_before = now + self.delay
        return self.delay

    def ok(self) -> None:
        self.delay, self.not_before, self.failures = 0.0, 0.0, 0


# The steps that back off, each on its own (:meth:`Host.guarded`).
BACKOFF_STEPS = ("finish", "notes", "resync", "reconcile", "dispatch", "eta", "cancel", "rounds", "commit")


@dataclass(eq=False)
class LoopState:
    """The loop's shared bookkeeping: what the reporters (the notification listener, the
    result watchers, the chained commits) leave for the next tick, the loop's events, and
    what a step reads of the tick it runs in. One per scheduler (``Scheduler.loop``); the
    collaborators read and write it through their host, on the loop (a thread only sets
    ``resync_requested`` and wakes the loop through ``call_soon_threadsafe``).

    The inbox, emptied by the tick's steps:

    - ``notes``: notifications parsed (:mod:`~fairsched.engine.notes`), re-read by ``Sync.apply_notes``;
    - ``finished``: ``(chart id, outcome)`` of workflows that closed, recorded by ``Sync.record_finished``;
    - ``resync_requested``: an incremental resync asked for (a lost or bad message, a failed
      notes step, the whole backlog's take-over);
    - ``commits_done``: dispatches' commits written after a save in flight, followed by
      ``Dispatcher.finish_commits``.

    The loop's own:

    - ``wake``: set to end the loop's wait for work at once; ``stop``: set by a warm stop;
    - ``tasks``: the leader's background tasks (lease, notifications, previews, an ETA pass,
      the whole backlog's read), cancelled when it steps down;
    - ``backoff``: one :class:`Backoff` a step (:data:`BACKOFF_STEPS`);
    - ``tick_at``: when the current tick began (monotonic; a dispatch's line says what went before it);
    - ``chunk``: the round state's save in flight, written aside (a backfill's chunk, or a
      dispatch's commit chained after one: ``Dispatcher``), None if none.
    """

    backoff: dict[str, Backoff]
    notes: list[Note] = field(default_factory=list)
    finished: list[tuple[int, Any]] = field(default_factory=list)  # (chart id, temporal.client.Outcome)
    resync_requested: bool = False
    commits_done: list[tuple] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task] = field(default_factory=list)
    tick_at: float = 0.0
    chunk: asyncio.Task | None = None

    @classmethod
    def new(cls, backoff_min_s: float, backoff_max_s: float) -> LoopState:
        """An empty state, each step's backoff between ``backoff_min_s`` and ``backoff_max_s``."""
        return cls(backoff={name: Backoff(backoff_min_s, backoff_max_s) for name in BACKOFF_STEPS})

    def report_note(self, note: Note) -> None:
        """A notification for the next tick (which it wakes)."""
        self.notes.append(note)
        self.wake.set()

    def take_notes(self) -> list[Note]:
        """The notes reported so far, in order; the inbox is left empty."""
        notes, self.notes = self.notes, []
        return notes

    def put_back_notes(self, notes: list[Note]) -> None:
        """Notes taken but not applied (the step failed): first again, before those reported since."""
        self.notes = notes + self.notes

    def report_finished(self, chart_id: int, outcome: Any) -> None:
        """A workflow that closed, for the next tick (which it wakes) to record."""
        self.finished.append((chart_id, outcome))
        self.wake.set()

    def request_resync(self) -> None:
        """An incremental resync at the next tick (which it wakes)."""
        self.resync_requested = True
        self.wake.set()

    @property
    def has_news(self) -> bool:
        """Notes or finishes wait: the loop ticks again without waiting."""
        return bool(self.notes or self.finished)

    def forget_reports(self) -> None:
        """A leader steps down: what was reported for its ticks is the next leader's to read again."""
        self.commits_done.clear()
        self.notes.clear()
        self.finished.clear()


class Host(Protocol):
    """The loop, as its collaborators see it (the tunables are the scheduler's constants)."""

    state: LiveState | None
    rounds: RoundSaver           # what of the round state is written, and when (installed with ``state``)
    loop: LoopState              # the loop's shared bookkeeping: the inbox, the events, the backoffs, ...
    clock: Clock
    store: Store
    publisher: Publisher
    temporal: TemporalPort
    leading: bool
    phase: str
    ids: WorkflowIds | None  # this deployment's workflow ids (set at the take-over)

    def __getattr__(self, name: str) -> Any:  # the tunables: BACKOFF_MIN_S, HEAD_PER_ORG, ...
        ...

    def install(self, state: LiveState, rounds: RoundSaver) -> None:
        """What a start built (the state and its round saver): from now on the loop's."""

    async def sleep(self, seconds: float) -> None:
        """Sleep, unless a stop comes first."""

    async def guarded(self, name: str, step: Any, *, detail: Any = None, loop_waits: bool = True) -> Any:
        """Run one step, backing it off on failure (``loop.backoff[name]``): its result, True
        for None, None if it failed."""

    def log_slow_step(self, name: str, took: float, how: str = ..., detail: str = "") -> None:
        """Log a step that took long (one line a step a while at most)."""

    async def rounds_settled(self) -> None:
        """Wait for the round state's saves in flight, then follow the chained commits."""


class Part:
    """A collaborator: the host's ports and state, read when used."""

    def __init__(self, host: Host) -> None:
        self.host = host

    @property
    def state(self) -> LiveState | None:
        return self.host.state

    @property
    def clock(self) -> Clock:
        return self.host.clock

    @property
    def store(self) -> Store:
        return self.host.store

    @property
    def publisher(self) -> Publisher:
        return self.host.publisher

    @property
    def temporal(self) -> TemporalPort:
        return self.host.temporal

    def __getattr__(self, name: str):
        """The tunables (``CANCEL_GRACE_S``, ``HEAD_PER_ORG``, ...) are the host's, read when used."""
        if name.isupper() and "host" in self.__dict__:
            return getattr(self.host, name)
        raise AttributeError(name)

    def backoff(self) -> Backoff:
        return Backoff(self.host.BACKOFF_MIN_S, self.host.BACKOFF_MAX_S)
