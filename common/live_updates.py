"""The live-update protocol: the events open pages receive, their wire form, and the
one function every producer sends them through.

Producers -- the scheduler (what it applied), the operator controls (their echo, over the
socket or ``/dashboard/control/``), the audit trail (``control.audit``) and whoever
stores a snapshot (the scheduler's ETA pass, ``dashboard.simulate``) -- build a typed
event below and call :func:`send` (or :func:`asend` inside an event loop). That is the
only way onto the Channels group :data:`GROUP`; the sockets (``dashboard/consumers.py``)
read it and forward to the pages. This module imports no Django app: the engine may
use it.

Kinds (``kind`` on the wire; every event is ``{"kind": ..., <its fields>}``)
-----------------------------------------------------------------------------

The scheduler's events (what its memory just applied; ``chart`` and ``org`` are pks):

============== ===================================== ==========================================
kind           fields                                meaning
============== ===================================== ==========================================
queued         chart, org                            a chart joined the queue
running        chart, org                            a chart found running (adopted, not ours)
dispatch       chart, org, cost                      the scheduler started a chart's workflow
finish         chart, org, state, cost               a running chart's workflow closed
removed        chart, state                          a queued chart left the queue (final row)
paused         chart                                 a queued chart was paused
resumed        chart                                 a paused chart was resumed
prioritized    chart                                 a queued chart got priority
unprioritized  chart                                 a chart lost its priority
moved_to_front chart                                 a chart was moved to the front
weight         org, weight, held                     an org's weight took effect (held: it is on hold)
budget         budget [, action, at, by]             the budget changed (also an operator echo)
cost           org, workflow, cost [, action, at,by] an (org, workflow) cost changed (ditto)
batch          count                                 more than the scheduler sends in one tick
                                                     changed; the next snapshot says what
============== ===================================== ==========================================

An operator's echo (a control that succeeded, sent at once so pages update before the
scheduler's next snapshot; ``action`` is the control, ``at`` when, ``by`` who):

============== ===================================== ==========================================
chart          org, chart, action [, rerun_of,at,by] the chart's row after the control
org            org, org_row, action [, at, by]       the org's row (id, weight, held) after it
budget, cost   as above, with ``action``             (the same kinds as the scheduler's)
============== ===================================== ==========================================

The rest:

============== ===================================== ==========================================
audit          entry                                 an audit-trail entry (the Activity feed;
                                                     org pages never get it)
snapshot       seq                                   a snapshot was stored (``common.snapshot``);
                                                     never forwarded as an event: each socket
                                                     sends its page a ``snapshot`` message
============== ===================================== ==========================================

An org's page (``/ws/orgs/<slug>/``, open to the org's members) gets what
:func:`for_member` builds for members from its org's events: the fields named for each
kind (:data:`MEMBER_KINDS`), never ``by``, the budget or the audit trail.

:func:`event_from_wire` refuses an unknown kind (:class:`UnknownEventKind`) and unknown or missing
fields (``ValueError``); a socket ignores (and logs) a group message it cannot read.

Numbering and refetch
---------------------

One counter: ``n``. Each socket numbers every message it sends its page 1, 2, 3...
(``dashboard/consumers.py``). The channel layer is best-effort and may lose a message
(coalescing never does): a page that sees ``n`` skip (any message but a
``snapshot`` whose ``n`` is not the last plus one, :func:`refetch_needed`) sends
``{"type": "refetch"}`` and gets the stored snapshot again. ("Refetch" is the page's;
"resync" is the scheduler re-reading the database, ``common/notify.py``.)

``seq`` is not a message counter: it is a stored snapshot's version (``common.snapshot``;
the page shows it as "snapshot #41"). A socket uses it only to skip a ``snapshot`` notice
for the snapshot it already sent.
"""
from __future__ import annotations

import dataclasses
import enum
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

log = logging.getLogger(__name__)

GROUP = "dashboard"            # the Channels group every socket joins
GROUP_MESSAGE = "live.update"  # the group message's type (consumers' ``live_update``)
REFETCH = "refetch"            # what a page sends after a gap in ``n``


class EventKind(str, enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DISPATCH = "dispatch"
    FINISH = "finish"
    REMOVED = "removed"
    PAUSED = "paused"
    RESUMED = "resumed"
    PRIORITIZED = "prioritized"
    UNPRIORITIZED = "unprioritized"
    MOVED_TO_FRONT = "moved_to_front"
    WEIGHT = "weight"
    BUDGET = "budget"
    POOL = "pool"
    COST = "cost"
    BATCH = "batch"
    CHART = "chart"
    ORG = "org"
    AUDIT = "audit"
    SNAPSHOT = "snapshot"


_WIRE_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}


class UnknownEventKind(ValueError):
    """A wire event whose ``kind`` is none of :class:`EventKind`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """One live update. Subclasses name their :class:`EventKind` and declare their fields;
    fields that default to None are left off the wire while None."""

    kind: ClassVar[EventKind]

    def to_wire(self) -> dict[str, Any]:
        spec = _WIRE_FIELDS.get(type(self))
        if spec is None:  # (field name, left off while None), once per class: the engine's hot path
            spec = _WIRE_FIELDS[type(self)] = tuple((f.name, f.default is None) for f in dataclasses.fields(self))
        wire: dict[str, Any] = {"kind": self.kind.value}
        for name, optional in spec:
            value = getattr(self, name)
            if value is None and optional:
                continue
            wire[name] = value
        return wire


@dataclass(frozen=True, kw_only=True, slots=True)
class _Echo(Event):
    """An event an operator's control may cause: ``action`` (the control), ``at`` (epoch
    seconds) and ``by`` (the operator) are set on the echo, absent on the scheduler's."""

    action: str | None = None
    at: float | None = None
    by: str | None = None

    def stamped(self, *, at: float, by: str) -> "_Echo":
        return dataclasses.replace(self, at=at, by=by)


# --- the scheduler's ---------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class Queued(Event):
    kind: ClassVar[EventKind] = EventKind.QUEUED
    chart: int
    org: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Running(Event):
    kind: ClassVar[EventKind] = EventKind.RUNNING
    chart: int
    org: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Dispatched(Event):
    kind: ClassVar[EventKind] = EventKind.DISPATCH
    chart: int
    org: int
    cost: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Finish(Event):
    kind: ClassVar[EventKind] = EventKind.FINISH
    chart: int
    org: int
    state: str
    cost: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Removed(Event):
    kind: ClassVar[EventKind] = EventKind.REMOVED
    chart: int
    state: str  # the row's final state, or "deleted"


@dataclass(frozen=True, kw_only=True, slots=True)
class Paused(Event):
    kind: ClassVar[EventKind] = EventKind.PAUSED
    chart: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Resumed(Event):
    kind: ClassVar[EventKind] = EventKind.RESUMED
    chart: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Prioritized(Event):
    kind: ClassVar[EventKind] = EventKind.PRIORITIZED
    chart: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Unprioritized(Event):
    kind: ClassVar[EventKind] = EventKind.UNPRIORITIZED
    chart: int


@dataclass(frozen=True, kw_only=True, slots=True)
class MovedToFront(Event):
    kind: ClassVar[EventKind] = EventKind.MOVED_TO_FRONT
    chart: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Weight(Event):
    kind: ClassVar[EventKind] = EventKind.WEIGHT
    org: int
    weight: int
    held: bool  # the auto-hold rule's verdict (scheduling.rules.is_held), so no page re-derives it


@dataclass(frozen=True, kw_only=True, slots=True)
class Budget(_Echo):
    kind: ClassVar[EventKind] = EventKind.BUDGET
    budget: int


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolChanged(_Echo):
    """A pool's capacity set from its dial (the pool ``default`` is the budget: :class:`Budget`)."""
    kind: ClassVar[EventKind] = EventKind.POOL
    pool: str
    capacity: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Cost(_Echo):
    kind: ClassVar[EventKind] = EventKind.COST
    org: int
    workflow: int | str  # the control's echo: the workflow's pk; the scheduler's: its key (text)
    cost: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Batch(Event):
    kind: ClassVar[EventKind] = EventKind.BATCH
    count: int


# --- an operator's echo ----------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class ChartChanged(_Echo):
    """``chart``: id, org, state, paused, priority, cancel_requested, moved_to_front_at
    (ISO or None), external_id -- the row after the control."""

    kind: ClassVar[EventKind] = EventKind.CHART
    org: int
    chart: dict[str, Any]
    rerun_of: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class OrgChanged(_Echo):
    """``org_row``: id, weight, held -- the org after the control."""

    kind: ClassVar[EventKind] = EventKind.ORG
    org: int
    org_row: dict[str, Any]


# --- the rest ----------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class Audit(Event):
    """``entry``: ``control.audit.entry_json`` of the entry."""

    kind: ClassVar[EventKind] = EventKind.AUDIT
    entry: dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class SnapshotStored(Event):
    kind: ClassVar[EventKind] = EventKind.SNAPSHOT
    seq: int


EVENTS: dict[EventKind, type[Event]] = {cls.kind: cls for cls in (
    Queued, Running, Dispatched, Finish, Removed, Paused, Resumed, Prioritized, Unprioritized,
    MovedToFront, Weight, Budget, PoolChanged, Cost, Batch, ChartChanged, OrgChanged, Audit, SnapshotStored)}
assert set(EVENTS) == set(EventKind), "every kind has its event class"


def event_from_wire(wire: Any) -> Event:
    """The event a wire dict stands for; :class:`UnknownEventKind` for a kind not in :class:`EventKind`,
    ``ValueError`` for a field missing or not the kind's."""
    if not isinstance(wire, dict):
        raise ValueError(f"an event is a JSON object, got {type(wire).__name__}")
    try:
        cls = EVENTS[EventKind(wire.get("kind"))]
    except ValueError:
        raise UnknownEventKind(f"unknown event kind {wire.get('kind')!r}") from None
    fields = {k: v for k, v in wire.items() if k != "kind"}
    try:
        return cls(**fields)
    except TypeError as exc:
        raise ValueError(f"{cls.kind.value} event: {exc}") from None


def refetch_needed(last_n: int, n: int, message_type: str) -> bool:
    """The page's rule (``dashboard/static/dashboard/live.js`` does the same): after message
    ``last_n`` (0: none yet on this socket), message ``n`` shows a gap unless it is the next
    one or a snapshot (which starts afresh)."""
    return bool(last_n) and n != last_n + 1 and message_type != "snapshot"


# --- what an org's members receive ---------------------------------------------------------

# The chart row and org row of an echo, as members see them: named one by one, so a field
# added to the staff's row later is not sent to members until someone adds it here.
MEMBER_CHART_FIELDS = ("id", "org", "state", "paused", "priority", "cancel_requested", "moved_to_front_at",
                       "external_id")
MEMBER_ORG_FIELDS = ("id", "weight", "held")


def _pick(row: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {k: row[k] for k in names if k in row} if isinstance(row, dict) else {}


def _member_wire(kind: EventKind, **fields: Any) -> dict[str, Any]:
    return {"kind": kind.value, **{k: v for k, v in fields.items() if v is not None}}


def _for_member(event: Event) -> dict[str, Any] | None:
    """The member's event for ``event`` (already known to be of the member's org), built field
    by field; None: members get nothing of this kind."""
    if isinstance(event, (Queued, Running)):
        return _member_wire(event.kind, chart=event.chart, org=event.org)
    if isinstance(event, Dispatched):
        return _member_wire(event.kind, chart=event.chart, org=event.org, cost=event.cost)
    if isinstance(event, Finish):
        return _member_wire(event.kind, chart=event.chart, org=event.org, state=event.state, cost=event.cost)
    if isinstance(event, Weight):
        return _member_wire(event.kind, org=event.org, weight=event.weight, held=event.held)
    if isinstance(event, Cost):
        return _member_wire(event.kind, org=event.org, workflow=event.workflow, cost=event.cost,
                            action=event.action, at=event.at)
    if isinstance(event, ChartChanged):
        return _member_wire(event.kind, org=event.org, chart=_pick(event.chart, MEMBER_CHART_FIELDS),
                            action=event.action, at=event.at, rerun_of=event.rerun_of)
    if isinstance(event, OrgChanged):
        return _member_wire(event.kind, org=event.org, org_row=_pick(event.org_row, MEMBER_ORG_FIELDS),
                            action=event.action, at=event.at)
    return None


# Every kind, decided: what a member gets of it (see _for_member), or why nothing. A new kind
# fails the assert below until someone decides.
MEMBER_KINDS: dict[EventKind, str] = {
    EventKind.QUEUED: "chart, org", EventKind.RUNNING: "chart, org", EventKind.DISPATCH: "chart, org, cost",
    EventKind.FINISH: "chart, org, state, cost", EventKind.WEIGHT: "org, weight, held",
    EventKind.COST: "org, workflow, cost [, action, at]",
    EventKind.CHART: "org, chart (MEMBER_CHART_FIELDS), action [, rerun_of, at]",
    EventKind.ORG: "org, org_row (MEMBER_ORG_FIELDS), action [, at]",
    EventKind.REMOVED: "nothing: it names no org", EventKind.PAUSED: "nothing: it names no org",
    EventKind.RESUMED: "nothing: it names no org", EventKind.PRIORITIZED: "nothing: it names no org",
    EventKind.UNPRIORITIZED: "nothing: it names no org", EventKind.MOVED_TO_FRONT: "nothing: it names no org",
    EventKind.BUDGET: "nothing: the budget is the operators'",
    EventKind.POOL: "nothing: the pools' dials are the operators' (the org page's next snapshot shows the change)",
    EventKind.BATCH: "nothing: a count of every org's events",
    EventKind.AUDIT: "nothing: the audit trail names operators",
    EventKind.SNAPSHOT: "nothing: each socket sends its page a snapshot message instead",
}
assert set(MEMBER_KINDS) == set(EventKind), "every kind has a member projection (or a reason for none)"


def for_member(event: Event, org: int) -> dict[str, Any] | None:
    """What a member of org ``org`` receives for ``event`` on the org's socket
    (``/ws/orgs/<slug>/``), or None for nothing.

    Built for members, never the staff's event passed through: only the fields named for
    each kind (:data:`MEMBER_KINDS`). Never ``by`` (the operator: the pages hide operators'
    names from members), never another org's events, never the budget or the audit trail.
    """
    if getattr(event, "org", None) != org:
        return None
    return _for_member(event)


# --- the one path ------------------------------------------------------------------------

def _group_message(event: Event, counters: dict[str, Any] | None) -> dict[str, Any]:
    return {"type": GROUP_MESSAGE, "event": event.to_wire(), "counters": counters or {}}


def send(event: Event, counters: dict[str, Any] | None = None, *, layer: Any = None) -> None:
    """Send ``event`` (with the scheduler's ``counters``, if any) to every open socket.
    Best-effort: a failure is logged, never raised (a page hiccup must not stop anything).
    ``layer``: a channel layer other than the configured one (tests)."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = layer or get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(GROUP, _group_message(event, counters))
    except Exception as exc:  # noqa: BLE001
        log.warning("live update %s not sent: %s", event.kind.value, exc)


async def asend(event: Event, counters: dict[str, Any] | None = None, *, layer: Any = None) -> None:
    """:func:`send` for code running inside an event loop (the scheduler, the sockets)."""
    from channels.layers import get_channel_layer

    layer = layer or get_channel_layer()
    if layer is None:
        return
    try:
        await layer.group_send(GROUP, _group_message(event, counters))
    except Exception as exc:  # noqa: BLE001
        log.warning("live update %s not sent: %s", event.kind.value, exc)
