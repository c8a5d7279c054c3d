"""The one place code outside consumers sends to the dashboard's Channels group.

Messages may be dropped (the channel layer is best-effort). Each socket numbers what
it sends (``n``, in dashboard/consumers.py); a page that sees a gap in ``n`` asks for
the stored snapshot (fairsched.snapshot) again. ``seq`` numbers stored snapshots.
"""
from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

GROUP = "dashboard"


def _send(message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(GROUP, message)
    except Exception as exc:  # noqa: BLE001 - a dashboard hiccup must never stop the scheduler
        log.warning("dashboard broadcast failed: %s", exc)


def broadcast_snapshot(seq: int) -> None:
    """A new snapshot is stored: consumers read it (fairsched.snapshot) and push it."""
    _send({"type": "queue.snapshot", "seq": seq})


def broadcast_event(event: dict[str, Any], counters: dict[str, Any]) -> None:
    """A cheap event (dispatch, finish, change) with the current counters."""
    _send({"type": "queue.event", "event": event, "counters": counters})


async def _asend(message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        await layer.group_send(GROUP, message)
    except Exception as exc:  # noqa: BLE001
        log.warning("dashboard broadcast failed: %s", exc)


async def abroadcast_snapshot(seq: int) -> None:
    """:func:`broadcast_snapshot` for code running inside an event loop (the scheduler)."""
    await _asend({"type": "queue.snapshot", "seq": seq})


async def abroadcast_event(event: dict[str, Any], counters: dict[str, Any]) -> None:
    await _asend({"type": "queue.event", "event": event, "counters": counters})
