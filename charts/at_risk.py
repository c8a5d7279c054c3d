""""Prioritise at risk": an org's charts at risk of missing their due time, or late, put in
the priority tier in one audited action (docs/scheduling.md, "Due times"). Each is undone
by the usual unprioritise (``charts.services.chart_unprioritize``)."""
from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from charts.models import Chart, ChartState
from common import snapshot as snap
from common.notify import ChartsNote, notify
from control import audit
from orgs.models import Org

MAX_CHARTS = 10_000  # one action; the snapshot lists them least slack first


def at_risk_ids(org_id: int) -> list[int]:
    """The org's queued charts at risk or late: the latest snapshot's list (``d:<org>``,
    least slack first), else, with no scheduler publishing, the warnings on the rows."""
    flagged = snap.read_due(org_id, limit=MAX_CHARTS)
    if flagged:
        return [int(f["id"]) for f in flagged]
    return list(Chart.objects.filter(org_id=org_id, state=ChartState.QUEUED, due_alert__in=("at_risk", "late"))
                .order_by("due_at", "pk").values_list("pk", flat=True)[:MAX_CHARTS])


def charts_prioritize_at_risk(*, org: Org | int, actor: Any = None) -> list[int]:
    """Prioritise the org's queued charts at risk or late that are not prioritised yet;
    returns their ids (empty: nothing to do, nothing recorded)."""
    org_id = org.pk if isinstance(org, Org) else int(org)
    org_obj = Org.objects.filter(pk=org_id).first()
    if org_obj is None:
        from django.core.exceptions import ValidationError
        raise ValidationError({"org": f"org: org {org_id} does not exist (was it deleted?)."})
    ids = at_risk_ids(org_id)
    now = timezone.now()
    with transaction.atomic():
        todo = list(Chart.objects.select_for_update().filter(
            pk__in=ids, org_id=org_id, state=ChartState.QUEUED, priority=False).values_list("pk", flat=True))
        if not todo:
            return []
        Chart.objects.filter(pk__in=todo).update(priority=True, prioritized_at=now, updated_at=now)
        shown = ", ".join(f"#{i}" for i in todo[:20]) + (f" and {len(todo) - 20} more" if len(todo) > 20 else "")
        audit.record(actor=actor, action="prioritize_at_risk", org=org_obj,
                     summary=f"Prioritised {len(todo)} at-risk or late chart(s) of {org_obj.name}: {shown}",
                     before={"charts": todo, "priority": False}, after={"charts": todo, "priority": True})
        notify(ChartsNote.of(todo))
    return todo
