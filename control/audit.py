"""The audit trail: every operator action, recorded by the service that performs it.

Services call :func:`record` inside their own transaction, so an entry exists if
and only if the change was committed, whichever door the action came through (the
dashboard's socket, ``/dashboard/control/``, the admin, a shell). The entry is
sent to open dashboards on commit (their "Activity" feed; :mod:`common.live_updates`).

``summary`` is the action in the operator's words ("Paused mrn-12 (Acme Health)");
the controls reuse it as the toast the acting operator sees.
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone

from common import live_updates
from control.models import AuditEntry

log = logging.getLogger(__name__)

_local = threading.local()


@contextmanager
def capture() -> Iterator[list[AuditEntry]]:
    """Collect the entries recorded in this thread meanwhile (an adapter's toast reads their summary)."""
    stack = _local.__dict__.setdefault("stack", [])
    entries: list[AuditEntry] = []
    stack.append(entries)
    try:
        yield entries
    finally:
        stack.remove(entries)


def chart_label(chart) -> str:
    """``mrn-12 (Acme Health)``, or ``chart #12 (Acme Health)`` without an external id."""
    name = chart.external_id or f"chart #{chart.pk}"
    return f"{name} ({chart.org.name})"


class NamedActor(str):
    """An actor that is not a user, by its name (the producer API's key: ``API key fso_ab12… (billing)``):
    the entry carries the name and no user."""


def actor_name(actor) -> str:
    if isinstance(actor, NamedActor):
        return str(actor)[:150]
    if actor is None or not getattr(actor, "is_authenticated", False):
        return ""
    return actor.get_username()


def entry_json(entry: AuditEntry) -> dict[str, Any]:
    """The shape the dashboard's Activity feed shows (and the broadcast carries)."""
    return {"id": entry.pk, "at": entry.at.timestamp(), "by": entry.actor_name or "system",
            "action": entry.action, "summary": entry.summary, "chart_id": entry.chart_id,
            "org_id": entry.org_id, "before": entry.before, "after": entry.after}


def record(*, actor, action: str, summary: str, chart=None, org=None,
           before: Any = None, after: Any = None) -> AuditEntry:
    """Write one entry (call inside the service's transaction) and broadcast it on commit."""
    # As stored: datetimes become ISO text, so the broadcast and the row say the same.
    before, after = (json.loads(json.dumps(v, cls=DjangoJSONEncoder)) for v in (before, after))
    entry = AuditEntry.objects.create(
        at=timezone.now(), actor=actor if actor_name(actor) and not isinstance(actor, NamedActor) else None,
        actor_name=actor_name(actor),
        action=action, summary=summary[:300], chart=chart, org=org if org is not None else getattr(chart, "org", None),
        before=before, after=after,
    )
    for entries in getattr(_local, "stack", ()):
        entries.append(entry)
    transaction.on_commit(lambda: _broadcast(entry))
    return entry


def _broadcast(entry: AuditEntry) -> None:
    # No top-level "org" key: org members' sockets (filtered by org) never see operator names.
    try:
        live_updates.send(live_updates.Audit(entry=entry_json(entry)))
    except Exception as exc:  # noqa: BLE001 - a feed hiccup must never fail an action
        log.warning("audit broadcast failed: %s", exc)
