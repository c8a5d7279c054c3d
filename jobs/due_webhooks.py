"""The webhook ``chart.due_state_changed``: sent when a chart's due warning rises (it
enters ``at_risk`` or ``late``; docs/scheduling.md, "Due times", for the hysteresis that
keeps it from flapping).

The scheduler writes each rise on the chart (``due_alert``, ``due_alert_at``); this
periodic sweep, beside the finished charts' (``jobs.webhooks``), turns each into one
delivery, signed and retried like every other. Its cursor is the position ``(at,
after_id)`` on ``(due_alert_at, id)`` (the partial index ``chart_due_alert``), re-read
``SWEEP_OVERLAP`` back for rows committed late; the dedupe key names the chart and the
time it rose, so a rise seen twice is sent once and a later rise again.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from charts.models import Chart
from jobs.models import SweepCursor, WebhookEvent
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
    return f"{EVENT}:{chart.pk}:{int(chart.due_alert_at.timestamp() * 1000)}"


def sweep_due_states(now: datetime | None = None) -> int:
    """A delivery for each due warning raised since the last sweep (charts of orgs with a
    webhook, still at risk or late). Returns how many were created."""
    now = now or timezone.now()
    cursor, _ = SweepCursor.objects.get_or_create(name=str(EVENT), defaults={"at": now - SWEEP_OVERLAP})
    raised = (Chart.objects.filter(due_alert_at__isnull=False, due_alert__in=("at_risk", "late"))
              .exclude(org__webhook_url="").select_related("org", "workflow").order_by("due_alert_at", "id"))
    after = Q(due_alert_at__gte=cursor.at) & (Q(due_alert_at__gt=cursor.at) | Q(pk__gt=cursor.after_id))
    page = list(raised.filter(after)[:SWEEP_LIMIT])
    behind = list(raised.filter(due_alert_at__gte=cursor.at - SWEEP_OVERLAP, due_alert_at__lte=cursor.at)
                  [:SWEEP_LIMIT])
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
