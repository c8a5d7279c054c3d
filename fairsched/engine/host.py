"""What the scheduler's collaborators see of the loop that owns them.

:class:`~fairsched.engine.scheduler.Scheduler` owns the state (``state``, the round
saver, the notes and results reported to the next tick) and the ports; its
collaborators (:mod:`~fairsched.engine.leadership`, :mod:`~fairsched.engine.startup`,
:mod:`~fairsched.engine.dispatcher`, :mod:`~fairsched.engine.eta_passes`,
:mod:`~fairsched.engine.sync`) hold a :class:`Host` and read them through it, at call
time (a test may swap a port, or a tunable such as ``HEAD_PER_ORG``, after building the
scheduler). A collaborator never assigns ``state``: it returns effects, and what it
builds at a start is installed by the host.
"""
from __future__ import annotations

import asyncio
from typing import Any, Protocol

from common.notify import Note
from fairsched.core import RoundSaver
from fairsched.engine.ports import Clock, Publisher, Store, TemporalPort
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


class Host(Protocol):
    """The loop, as its collaborators see it (the tunables are the scheduler's constants)."""

    state: LiveState | None
    clock: Clock
    store: Store
    publisher: Publisher
    temporal: TemporalPort
    leading: bool
    phase: str
    _rounds: RoundSaver
    _notes: list[Note]
    _finished: list
    _tasks: list[asyncio.Task]
    _stop: asyncio.Event
    _wake: asyncio.Event
    _tick_at: float              # when the current tick began (monotonic; a dispatch's line says what went before)
    _resync_requested: bool
    _backoff: dict[str, Backoff]
    _chunk: asyncio.Task | None  # the round state's save in flight (a backfill's chunk, a chained commit)
    _commits_done: list[tuple]   # chained commits written, for the tick to follow (Dispatcher)
    ids: WorkflowIds | None  # this deployment's workflow ids (set at the take-over)

    def __getattr__(self, name: str) -> Any:  # the tunables: BACKOFF_MIN_S, HEAD_PER_ORG, ...
        ...

    async def _sleep(self, seconds: float) -> None: ...
    async def _guarded(self, name: str, step: Any, *, detail: Any = None, loop_waits: bool = True) -> Any: ...
    async def rounds_settled(self) -> None: ...


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
