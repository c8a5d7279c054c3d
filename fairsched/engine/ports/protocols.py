"""The ports of the live scheduler (:mod:`fairsched.engine.scheduler`): what it talks to, as
six small protocols, and :class:`Unavailable`.

The scheduler takes each in its constructor; the real ones are in
:mod:`fairsched.engine.ports.real` (clock, store, publisher),
:mod:`fairsched.engine.ports.temporal` and :mod:`fairsched.engine.ports.redis`, so
``runscheduler`` builds exactly what it always ran. Tests hand it fakes instead
(``tests/test_tick.py``: no Temporal, no Redis, a clock they move by hand).

* :class:`Clock`: ``monotonic()`` for every interval, deadline and backoff; ``time()``
  (epoch seconds) for what is written down or published; and every wait: ``sleep()``,
  ``sleep_blocking()`` (in a thread), ``wait()`` (an event, at most so long).
* :class:`Store`: the database functions of :mod:`fairsched.engine.store.db` the scheduler
  calls.
* :class:`Publisher`: the snapshot store (store a pass's snapshot, confirm the last one
  is current) and the dashboards' live updates (a snapshot was stored, an event).
* :class:`TemporalPort`: the Temporal calls, by chart id: start, outcome (describe),
  describe, cancel, terminate, wait for the result, list the running chart workflows.
  Errors are the port's own (:mod:`fairsched.engine.ports.temporal`, which classifies
  Temporal's): ``WorkflowNotFound``, ``AlreadyStarted``, ``TemporalError``, ``StartFailed``.
* :class:`LeasePort`: the one-active-scheduler lease (acquire, renew from the keeper's
  thread, release for good, who holds it).
* :class:`NotificationSource`: the scheduler's notifications (:mod:`common.notify`), one
  subscription at a time.

The lease and the notifications are Redis (:mod:`fairsched.engine.ports.redis`); a port
that cannot reach its service raises :class:`Unavailable`.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Container, Iterable
from datetime import datetime
from typing import Any, Protocol

from common.notify import Note
from scheduling import RoundState
from fairsched.engine.store import db
from fairsched.engine.store.rows import ChartRow, Config, OrgRow, World
from fairsched.temporal.client import Outcome
from fairsched.temporal.shared import ChartInput, WorkflowIds


# ==================================================================== clock
class Clock(Protocol):
    def monotonic(self) -> float: ...
    def time(self) -> float: ...
    async def sleep(self, seconds: float) -> None: ...
    def sleep_blocking(self, seconds: float) -> None:
        """Sleep in a thread of its own (the lease keeper)."""
    async def wait(self, event: asyncio.Event, timeout_s: float) -> bool:
        """Wait for ``event``, at most ``timeout_s``: True if it was set."""
    async def wait_tasks(self, tasks: Iterable[asyncio.Future], timeout_s: float) -> bool:
        """Wait for ``tasks`` to end, at most ``timeout_s``: True if they all did."""
    async def wait_for(self, awaitable: Any, timeout_s: float) -> Any:
        """``await awaitable``, at most ``timeout_s`` (``asyncio.TimeoutError`` past it)."""


class Unavailable(Exception):
    """A port's service (Redis) does not answer: retry later."""




# ==================================================================== store
class Store(Protocol):
    async def read_world(self) -> World: ...
    async def read_streamed(self, per_org: int, on_head: Callable[[db.Head | None], bool]) -> World | None: ...
    async def recent_arrivals(self) -> list[tuple[str, str, float]]: ...
    async def recent_durations(self) -> list[tuple[str, str, float]]: ...
    async def recent_promises(self) -> list[tuple[float, float, float]]: ...
    async def recorded_first_etas(self) -> set[int]: ...
    async def record_first_etas(self, etas: dict[int, tuple[float, float]]) -> int: ...
    async def record_due_alerts(self, levels: dict[int, int], rose: list[int], at: float) -> int: ...
    async def read_config(self) -> Config: ...
    async def read_orgs(self, ids: Iterable[int] | None = None) -> list[OrgRow]: ...
    async def read_costs(self) -> dict[tuple[str, str], int]: ...
    async def read_changes(self, since: datetime | None, after: tuple[datetime, int] | None = None,
                           limit: int | None = None) -> db.Changes: ...
    async def read_active_chunk(self, after_pk: int, limit: int) -> list[ChartRow]: ...
    async def read_charts(self, ids: Iterable[int], known_orgs: Container[int] = ()) -> tuple[dict[int, ChartRow], list[OrgRow]]: ...
    async def read_for_start(self, ids: Iterable[int]) -> dict[int, db.StartRow]: ...
    async def mark_running(self, items: list[tuple], rounds: Any = None,
                           pools: dict[int, tuple] | None = None) -> dict[int, bool]: ...
    async def fail_start(self, chart_id: int, error: str) -> bool: ...
    async def record_outcomes(self, items: list[tuple], known_orgs: Container[int] = ()) -> db.Recorded:
        """Outcomes ``(chart id, state, error, started at, finished at, run id)`` written in one
        transaction (idempotent), then their rows re-read (``db.record_outcomes``)."""
    async def requeue(self, chart_id: int, reason: str) -> bool: ...
    async def deployment(self) -> WorkflowIds:
        """This deployment's workflow ids (the legacy cut fixed once: the scheduler leads)."""
    async def legacy_active(self, ids: WorkflowIds) -> bool:
        """Is a queued or running chart one that keeps its legacy id ``chart-<pk>``?"""
    async def save_rounds(self, state: RoundState, changes: dict[str, int | None],
                          work: dict[str, tuple[float | None, float | None]] | None = None) -> None: ...
    async def save_rounds_aside(self, state: RoundState, changes: dict[str, int | None],
                                work: dict[str, tuple[float | None, float | None]] | None = None,
                                orgs: Iterable[int] | None = None,
                                firsts: dict[int, tuple[float, float]] | None = None) -> None: ...
    def start_vacuum_after_backfill(self) -> None: ...


# ==================================================================== publisher
class Publisher(Protocol):
    def store_snapshot(self, snap: dict, rows: list[dict], per_org: dict) -> int:
        """Store a pass's snapshot (called in the pass's thread); its sequence number."""
    async def snapshot_stored(self, seq: int) -> None:
        """Tell the dashboards a new snapshot is stored."""
    async def confirm_snapshot(self, seq: int, at: float) -> None:
        """Say snapshot ``seq`` is still this live scheduler's latest (``at``: epoch seconds)."""
    async def event(self, event: dict, counters: dict) -> None:
        """One live-update event, with the current counters."""


# ==================================================================== Temporal
class TemporalPort(Protocol):
    async def connect(self) -> None:
        """Connect (retrying until it can); called when the scheduler starts leading."""
    async def start(self, *, temporal_type: str, task_queue: str, chart: ChartInput,
                    execution_timeout_s: int) -> str:
        """Start (or find: USE_EXISTING) the chart's workflow (``ids.of``); its run id. Raises
        ``AlreadyStarted`` if it already closed (REJECT_DUPLICATE), ``StartFailed`` (judged)
        if it did not start."""
    async def outcome(self, chart_id: int) -> Outcome | None:
        """How the chart's workflow ended, None while it runs (``WorkflowNotFound``: unknown)."""
    async def describe(self, chart_id: int) -> None:
        """Raises ``WorkflowNotFound`` when Temporal does not know the workflow, ``TemporalError``."""
    async def cancel(self, chart_id: int) -> None:
        """Request cancellation (``WorkflowNotFound``: no such workflow, ``TemporalError``)."""
    async def terminate(self, chart_id: int, reason: str) -> None:
        """Terminate the workflow (``WorkflowNotFound``: it closed already, ``TemporalError``)."""
    async def wait_closed(self, chart_id: int) -> None:
        """Return when the chart's workflow closes, whichever way."""
    def running(self, legacy: bool = False) -> AsyncIterator[tuple[str, str]]:
        """(workflow id, run id) of this deployment's running chart workflows (at least: the
        caller keeps only ``ids.chart_of``'s); ``legacy``: also those named ``chart-<pk>``."""
    async def retention_s(self) -> float | None:
        """The namespace's retention: how long Temporal keeps a closed workflow (None: unknown)."""

    ids: WorkflowIds | None  # this deployment's workflow ids, set by the scheduler before any call


# ==================================================================== lease and notifications
class LeaseKeeper(Protocol):
    """The lease keeper's own connection (used from its thread only)."""

    def renew(self) -> bool:
        """Renew (or take again, if free) the lease; False: another scheduler holds it. Raises Unavailable."""
    def close(self) -> None: ...


class LeasePort(Protocol):
    """One active scheduler: a lease with a time to live, renewed while alive."""

    token: str

    async def acquire(self) -> bool:
        """Take the lease if free (or ours already); raises :class:`Unavailable`."""
    async def holder(self) -> str | None:
        """Who holds it (its token), None if nobody; raises :class:`Unavailable`."""
    def keeper(self) -> LeaseKeeper:
        """A connection for the keeper's thread."""
    def release_now(self, timeout_s: float) -> None:
        """Release it, only if still ours, synchronously (a stop, a forced exit); raises Unavailable."""
    async def aclose(self) -> None: ...


class Subscription(Protocol):
    async def next_note(self, timeout_s: float) -> Note | None:
        """The next notification, parsed (one this version cannot read is a
        :class:`~common.notify.Resync`: :func:`fairsched.engine.notes.read_note`), None if
        none came within ``timeout_s``; raises :class:`Unavailable`."""
    async def aclose(self) -> None: ...


class NotificationSource(Protocol):
    """The scheduler's notifications (:mod:`common.notify`)."""

    async def subscribe(self) -> Subscription:
        """Subscribe (raises :class:`Unavailable`); a message sent before this is not seen."""
    async def aclose(self) -> None: ...
