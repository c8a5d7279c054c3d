"""WebSocket consumers: the staff dashboard (``/ws/dashboard/``) and an org's page
(``/ws/orgs/<slug>/``).

Protocol (JSON; the events, ``n`` and refetch are documented once, in
:mod:`common.live_updates` and docs/live-updates.md). Every message the server sends
carries ``n``, numbered 1, 2, 3... on this socket; a page that sees a number missing
sends ``{"type": "refetch"}`` and gets a fresh snapshot. Server -> client:

* ``{"type": "snapshot", "n", "seq", "server_time", "state", "order", "costs"}`` --
  on connect, on refetch, and when the scheduler stored a new snapshot (``seq``, its
  version). ``state`` is the stored summary (or the same shape from the DB,
  ``state.source == "db"``); ``order`` the page of the order this socket looks at.
* ``{"type": "events", "n", "server_time", "events": [...], "counters": {...}}`` --
  the live updates (:mod:`common.live_updates`, wire form), coalesced.
* ``{"type": "order", "n", ...}`` -- the answer to ``view``.
* ``{"type": "control.result", "n", "req", "ok", "action", "errors", "message", "event"}``;
  a control over the socket's rate (``FAIRSCHED_WS_CONTROL_RATE`` a second) is
  answered ``ok: false`` with ``errors.rate`` and not applied.
* ``{"type": "error", "n", "message", "errors"}`` -- the answer to a frame the server
  cannot use (not JSON, binary, not an object, a field of the wrong type or out of
  range, an unknown type). The socket stays open.

Client -> server: ``refetch``; ``view`` (offset, limit, org, state: ``paused``,
``held``, ``blocked`` or ``ordered`` to list only those); ``control`` (req, action and
its fields; staff dashboard only); ``ping``. Org pages get the member's form of their
org's events (:func:`common.live_updates.for_member`: no operator's name, no budget,
no audit trail) and no counters.

Updates are coalesced to at most one message per :data:`MIN_INTERVAL_S` per
socket, so a burst of scheduler events or a hundred open pages stay cheap.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.core.exceptions import ValidationError

from charts import selectors as chart_selectors
from dashboard import controls, selectors
from dashboard.permissions import can_view_dashboard
from common import live_updates
from common.live_updates import GROUP
from common.validation import MAX_ID, require_int

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 0.2  # at most 5 updates per second per socket
DB_REFRESH_S = 10.0  # without a scheduler, re-read the DB counts this often
CLOSE_FORBIDDEN = 4403
REAUTH_S = 15.0  # an open socket re-checks its user's access this often (revocation, membership)
MAX_OFFSET = 10**9


def _fresh_user(pk: int | None):
    """The user as the database has it now (the scope's copy caches permissions)."""
    from django.contrib.auth import get_user_model

    return get_user_model().objects.filter(pk=pk, is_active=True).first() if pk is not None else None


class _LiveConsumer(AsyncJsonWebsocketConsumer):
    """Snapshot on connect, numbered (``n``) and coalesced updates, refetch on request."""

    default_limit = 100
    clock = staticmethod(time.monotonic)  # the control rate's clock (tests freeze it)

    async def connect(self) -> None:
        self.n = 0
        self.seq: int | None = None
        self.view: dict[str, Any] = {"offset": 0, "limit": self.default_limit, "org": None, "state": None}
        self.want_snapshot = False
        self.events: list[dict[str, Any]] = []
        self.counters: dict[str, Any] | None = None
        self.last_flush = 0.0
        self.flush_task: asyncio.Task | None = None
        self.refresh_task: asyncio.Task | None = None
        self.stale_task: asyncio.Task | None = None
        self.joined = False
        self.checked_at = time.monotonic()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not await self.allowed(user):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        await self.channel_layer.group_add(GROUP, self.channel_name)
        self.joined = True
        await self.accept()
        await self.send_snapshot()

    async def disconnect(self, code: int) -> None:
        for task in (getattr(self, "flush_task", None), getattr(self, "refresh_task", None),
                     getattr(self, "stale_task", None)):
            if task is not None:
                task.cancel()
        if getattr(self, "joined", False):
            await self.channel_layer.group_discard(GROUP, self.channel_name)

    # --- sending -------------------------------------------------------------------

    async def send_numbered(self, message: dict[str, Any]) -> None:
        self.n += 1
        await self.send_json({**message, "n": self.n, "server_time": time.time()})

    async def send_snapshot(self) -> None:
        seq, source, text = await database_sync_to_async(self.read_snapshot)()
        self.seq = seq
        self.last_flush = time.monotonic()
        self.n += 1
        # ``text`` is a JSON object shared with other sockets: prepend this socket's number.
        await self.send(text_data=f'{{"n":{self.n},"server_time":{time.time():.3f},{text[1:]}')
        if source == "db" and self.refresh_task is None:
            self.refresh_task = asyncio.create_task(self._refresh_from_db())
        if source == "scheduler":
            await self._watch_staleness()

    async def _watch_staleness(self) -> None:
        """A live snapshot turns stale if no newer one follows (the scheduler stopped): the
        socket then gets a fresh snapshot message, which says so, instead of keeping old
        numbers on screen as if they were live."""
        if self.stale_task is not None:
            self.stale_task.cancel()
        after = await database_sync_to_async(chart_selectors.stale_after_s)()
        self.stale_task = asyncio.create_task(self._resend_when_stale(after + 0.5))

    async def _resend_when_stale(self, delay: float) -> None:
        try:
            await asyncio.sleep(delay)
            self.stale_task = None
            self.want_snapshot = True
            self.schedule_flush()
        except asyncio.CancelledError:
            pass

    async def _refresh_from_db(self) -> None:
        """No scheduler: keep the DB counts fresh until a snapshot shows up."""
        try:
            await asyncio.sleep(DB_REFRESH_S)
            self.refresh_task = None
            if self.seq is None:
                self.want_snapshot = True
                self.schedule_flush()
        except asyncio.CancelledError:
            pass

    def schedule_flush(self) -> None:
        if self.flush_task is not None and not self.flush_task.done():
            return
        delay = max(0.0, self.last_flush + MIN_INTERVAL_S - time.monotonic())
        self.flush_task = asyncio.create_task(self._flush_after(delay))

    async def _flush_after(self, delay: float) -> None:
        try:
            if delay:
                await asyncio.sleep(delay)
            await self.flush()
        except asyncio.CancelledError:
            pass
        except Exception:  # noqa: BLE001 - a failed push must not kill the socket
            log.exception("dashboard push failed")

    async def still_allowed(self) -> bool:
        """Re-check access every :data:`REAUTH_S` from a fresh user row; close the socket
        (4403) when a permission or an org membership was revoked since it opened."""
        now = time.monotonic()
        if now - self.checked_at < REAUTH_S:
            return True
        self.checked_at = now
        user = await database_sync_to_async(_fresh_user)(getattr(self.scope.get("user"), "pk", None))
        if user is not None and await self.allowed(user):
            return True
        log.info("closing a live socket of user %s: access revoked", getattr(self.scope.get("user"), "pk", None))
        self.events, self.counters, self.want_snapshot = [], None, False
        await self.close(code=CLOSE_FORBIDDEN)
        return False

    async def flush(self) -> None:
        if not await self.still_allowed():
            return
        events, counters = self.events, self.counters
        self.events, self.counters = [], None
        if events or counters:
            await self.send_numbered({"type": "events", "events": events, "counters": counters or {}})
        if self.want_snapshot:
            self.want_snapshot = False
            await self.send_snapshot()
        self.last_flush = time.monotonic()

    # --- group messages ------------------------------------------------------------

    async def live_update(self, message: dict[str, Any]) -> None:
        """A group message from :func:`common.live_updates.send`: a snapshot notice makes
        this socket send its page a snapshot; any other event is forwarded (coalesced)."""
        try:
            event = live_updates.event_from_wire(message.get("event"))
        except ValueError as exc:  # a producer of another version: skip it, keep the socket
            log.warning("live update ignored: %s", exc)
            return
        if isinstance(event, live_updates.SnapshotStored):
            if event.seq == self.seq:
                return  # already sent (a lower seq is a restarted Redis: still new)
            self.want_snapshot = True
            self.schedule_flush()
            return
        wire = self.outgoing(event, message["event"])
        if wire is None:
            return
        self.events.append(wire)
        if len(self.events) > 200:  # a flood: the next snapshot says it all
            self.events = self.events[-200:]
        if self.forward_counters and message.get("counters"):
            self.counters = message["counters"]
        self.schedule_flush()

    # --- client messages -----------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs) -> None:
        """A frame that is not a JSON object gets an ``error`` message back; the socket stays
        open (a closed socket and a traceback in the log are what a fuzzer hopes for)."""
        if text_data is None:
            await self.send_error("frame", "Binary frames are not understood; send JSON text.")
            return
        try:
            content = json.loads(text_data)
        except (ValueError, RecursionError):
            await self.send_error("frame", "Not valid JSON.")
            return
        if not isinstance(content, dict):
            await self.send_error("frame", f"Expected a JSON object, got {type(content).__name__}.")
            return
        try:
            await self.receive_json(content)
        except ValidationError as exc:
            errors = exc.message_dict if hasattr(exc, "error_dict") else {"__all__": exc.messages}
            await self.send_error("frame", " ".join(m for msgs in errors.values() for m in msgs),
                                  {k: list(v) for k, v in errors.items()})
        except Exception:  # noqa: BLE001 - a bug must cost one answer, not the socket
            log.exception("dashboard socket message failed")
            await self.send_error("frame", "The server could not handle this message.")

    async def send_error(self, field: str, message: str, errors: dict[str, list[str]] | None = None) -> None:
        await self.send_numbered({"type": "error", "message": message, "errors": errors or {field: [message]}})

    async def receive_json(self, content: Any, **kwargs) -> None:
        if not isinstance(content, dict) or not await self.still_allowed():
            return
        kind = content.get("type")
        if kind in (live_updates.REFETCH, "resync"):  # "resync": its name in pages loaded before the rename
            self.want_snapshot = False
            await self.send_snapshot()
        elif kind == "view":
            self.view = self.clean_view(content)
            page = await database_sync_to_async(self.read_page)()
            await self.send_numbered({"type": "order", **page})
        elif kind == "control":
            if not self.take_control_token():
                rate_message = (f"Too many controls: at most {settings.FAIRSCHED_WS_CONTROL_RATE} a second from one "
                                "page; this one was not applied.")
                await self.send_numbered({
                    "type": "control.result", "req": content.get("req"), "ok": False,
                    "action": content.get("action") if isinstance(content.get("action"), str) else None,
                    "errors": {"rate": [rate_message]}, "message": rate_message})
                return
            await self.control(content)
        elif kind == "ping":
            await self.send_numbered({"type": "pong"})
        else:
            shown = kind if isinstance(kind, str) and len(kind) <= 40 else type(kind).__name__
            await self.send_error("type", f"type: unknown message type {shown!r}; one of refetch, view, control, ping.")

    def take_control_token(self) -> bool:
        """A token bucket per socket: ``FAIRSCHED_WS_CONTROL_RATE`` controls a second, bursts
        up to the same number. A refused control is answered, not queued."""
        rate = float(settings.FAIRSCHED_WS_CONTROL_RATE)
        now = self.clock()
        self.tokens = min(rate, getattr(self, "tokens", rate) + (now - getattr(self, "tokens_at", now)) * rate)
        self.tokens_at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True

    def clean_view(self, content: dict[str, Any]) -> dict[str, Any]:
        """``offset``, ``limit`` and ``org`` of a ``view`` message; a value of the wrong kind or
        out of range is a ValidationError naming it (answered with an ``error`` message)."""
        def num(key: str, default: int | None, minimum: int, maximum: int) -> int | None:
            value = content.get(key)
            if value is None or value == "":
                return default
            return require_int(key, value, minimum=minimum, maximum=maximum)
        state = content.get("state")
        if state not in (None, "") and state not in selectors.ORDER_STATES:
            raise ValidationError({"state": f"state: one of {', '.join(selectors.ORDER_STATES)}, got {str(state)[:40]!r}."})
        return {"offset": num("offset", 0, 0, MAX_OFFSET),
                "limit": num("limit", self.default_limit, 1, selectors.PAGE_MAX),
                "org": num("org", None, 1, MAX_ID),
                "state": state or None}

    async def control(self, content: dict[str, Any]) -> None:
        await self.send_numbered({"type": "control.result", "req": content.get("req"), "ok": False,
                                  "action": content.get("action"),
                                  "errors": {"permission": ["Controls are not available on this page."]},
                                  "message": "Controls are not available on this page."})

    # --- for subclasses -------------------------------------------------------------

    forward_counters = True

    async def allowed(self, user) -> bool:
        raise NotImplementedError

    def outgoing(self, event: live_updates.Event, wire: dict[str, Any]) -> dict[str, Any] | None:
        """What this socket sends its page for ``event`` (``wire``: its staff wire form), or
        None: nothing. Staff get the event as it is."""
        return wire

    def read_snapshot(self) -> tuple[int | None, str, str]:
        """``(seq, source, json text of the snapshot message without n)``."""
        raise NotImplementedError

    def read_page(self) -> dict[str, Any]:
        raise NotImplementedError


class DashboardConsumer(_LiveConsumer):
    """``/ws/dashboard/``: staff with the view permission; controls need the change permissions."""

    async def allowed(self, user) -> bool:
        return await database_sync_to_async(can_view_dashboard)(user)

    def read_snapshot(self) -> tuple[int | None, str, str]:
        return selectors.snapshot_message(self.view)

    def read_page(self) -> dict[str, Any]:
        state = chart_selectors.read_live_snapshot()
        return {"seq": state.get("seq") if state else None, "order": selectors.order_page(state, **self.view)}

    async def control(self, content: dict[str, Any]) -> None:
        user = self.scope["user"]
        outcome = await database_sync_to_async(self._apply)(user, content)
        await self.send_numbered({"type": "control.result", "req": content.get("req"), **outcome.as_json()})
        if outcome.ok and outcome.event:
            await live_updates.asend(outcome.event.stamped(at=time.time(), by=user.get_username()))

    @staticmethod
    def _apply(user, content: dict[str, Any]) -> controls.Outcome:
        user.refresh_from_db()  # permissions or staff status may have changed since the socket opened
        for cache in ("_perm_cache", "_user_perm_cache", "_group_perm_cache"):
            user.__dict__.pop(cache, None)
        return controls.apply_control(user, content)


class OrgConsumer(_LiveConsumer):
    """``/ws/orgs/<slug>/``: the org's members and dashboard staff; only that org's charts."""

    default_limit = 200
    forward_counters = False  # global counters are not a member's business

    async def allowed(self, user) -> bool:
        slug = self.scope["url_route"]["kwargs"]["slug"]
        self.org = await database_sync_to_async(selectors.org_for_user)(user, slug)
        return self.org is not None

    def outgoing(self, event: live_updates.Event, wire: dict[str, Any]) -> dict[str, Any] | None:
        """The member's event, built for members (:func:`common.live_updates.for_member`):
        never the staff's event passed through, so no operator's name (``by``) reaches
        a member."""
        return live_updates.for_member(event, self.org.pk)

    def read_status(self) -> dict[str, Any]:
        status = chart_selectors.org_status(self.org, offset=self.view["offset"], limit=self.view["limit"])
        return {"seq": status.get("seq"), "state": status}

    def read_snapshot(self) -> tuple[int | None, str, str]:
        payload = self.read_status()
        text = json.dumps({"type": "snapshot", **payload}, separators=(",", ":"))
        return payload["seq"], payload["state"]["source"], text

    def read_page(self) -> dict[str, Any]:
        return self.read_status()
