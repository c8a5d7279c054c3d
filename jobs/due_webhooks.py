"""The webhook ``chart.due_state_changed``: sent when a chart's due warning rises (it
enters ``at_risk`` or ``late``; docs/scheduling.md, "Due times", for the hysteresis that
keeps it from flapping).

The scheduler writes each rise on the chart (``due_alert``, ``due_alert_at``); this
periodic sweep, beside the finished charts' (``jobs.webhooks``), turns each into one
delivery, signed and retried like every other. Its cursor is the position ``(at,
after_id)`` on ``(due_alert_at, id)`` (the partial index ``chart_due_alert``), re-read
``SWEEP_OVERLAP`` back for rows committed late (only the rises there without their
delivery: one ETA pass stamps every rise with its time, so a burst larger than a page
must not hide a late rise behind it); the dedupe key names the chart and the time it
rose, so a rise seen twice is sent once and a later rise again.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from charts.models import Chart
from jobs.models import SweepCursor, WebhookDelivery, WebhookEvent
from jobs.webhooks import SWEEP_LIMIT, SWEEP_OVERLAP, webhook_delivery_create

EVENT = WebhookEvent.DUE_STATE_CHANGED


def due_payload(chart: Chart) -> dict[str, Any]:
    iso = (lambda v: v.isoformat() if v else None)
    return {
        "org": {"id": chart.org_id, "slug": chart.org.slug, "name": chart.org.name},
        "chart": {"id": chart.pk, "external_id": chart.external_id, "workflow": chart.workflow.name,
                  "state": chart.state, "created_at": iso(chart.created_at)},
        "due_state": chart.due_alert, "due_at": iso(chart.due_at), "due_explicit": chart.due_explicit,
        "raised_at": iso(chart.due_alert_at), "first_flagged_at": iso(chart.due_flagged_at),
    }


def dedupe_key(chart: Chart) -> str:
    """One delivery per rise (the chart and the time it rose); it carries the level in force
    when the sweep saw it (a fall in the seconds between is not a second rise)."""
    return _key(chart.pk, chart.due_alert_at)


def _key(pk: int, raised_at: datetime) -> str:
    return f"{EVENT}:{pk}:{int(raised_at.timestamp() * 1000)}"


def _late(raised, cursor: SweepCursor) -> list[Chart]:
    """The rises in the ``SWEEP_OVERLAP`` before the position that have no delivery yet (a
    write committed after a page went past its time), at most ``SWEEP_LIMIT``. The window is
    read as ``(id, raised at)`` pairs, a page at a time on ``(due_alert_at, id)``, and each
    rise's key looked up among the deliveries: a burst already delivered is neither loaded
    whole again nor a first page that hides what is behind it."""
    window = raised.filter(due_alert_at__gte=cursor.at - SWEEP_OVERLAP, due_alert_at__lte=cursor.at).filter(
        Q(due_alert_at__lt=cursor.at) | Q(pk__lte=cursor.after_id))
    missing: list[int] = []
    chunk = window
    while len(missing) < SWEEP_LIMIT:
        pairs = list(chunk.values_list("pk", "due_alert_at")[:SWEEP_LIMIT])
        keys = {_key(pk, at): pk for pk, at in pairs}
        done = set(WebhookDelivery.objects.filter(dedupe_key__in=list(keys)).values_list("dedupe_key", flat=True))
        missing += [pk for key, pk in keys.items() if key not in done]
        if len(pairs) < SWEEP_LIMIT:
            break
        at, pk = pairs[-1][1], pairs[-1][0]
        chunk = window.filter(Q(due_alert_at__gte=at) & (Q(due_alert_at__gt=at) | Q(pk__gt=pk)))
    return list(raised.filter(pk__in=missing[:SWEEP_LIMIT])) if missing else []


def sweep_due_states(now: datetime | None = None) -> int:
    """A delivery for each due warning raised since the last sweep (charts of orgs with a
    webhook, still at risk or late). Returns how many were created."""
    now = now or timezone.now()
    cursor, _ = SweepCursor.objects.get_or_create(name=str(EVENT), defaults={"at": now - SWEEP_OVERLAP})
    raised = (Chart.objects.filter(due_alert_at__isnull=False, due_alert__in=("at_risk", "late"))
              .exclude(org__webhook_url="").select_related("org", "workflow").order_by("due_alert_at", "id"))
    after = Q(due_alert_at__gte=cursor.at) & (Q(due_alert_at__gt=cursor.at) | Q(pk__gt=cursor.after_id))
    page = list(raised.filter(after)[:SWEEP_LIMIT])
    behind = _late(raised, cursor)
    created = 0
    with transaction.atomic():
        for chart in {c.pk: c for c in behind + page}.values():
            if webhook_delivery_create(org=chart.org, event=EVENT, payload=due_payload(chart),
                                       dedupe_key=dedupe_key(chart)):
                created += 1
        if len(page) >= SWEEP_LIMIT:
            cursor.at, cursor.after_id = page[-1].due_alert_at, page[-1].pk
        elif now > cursor.at:
            cursor.at, cursor.after_id = now, 0
        cursor.save(update_fields=["at", "after_id"])
    return created
