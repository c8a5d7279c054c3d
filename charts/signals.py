"""A producer's plain ``Chart.objects.create(...)`` reaches the scheduler too; an org's
turnaround change reaches its unfinished charts' due times."""
from __future__ import annotations

from django.db.models import DateTimeField, DurationField, ExpressionWrapper, F, Value
from django.db.models.signals import post_save
from django.dispatch import receiver

from charts.models import Chart, ChartState
from common.notify import notify
from orgs.models import Org


@receiver(post_save, sender=Chart, dispatch_uid="charts.notify_on_create")
def notify_chart_created(sender, instance: Chart, created: bool, raw: bool = False, **kwargs) -> None:
    if created and not raw:
        notify("chart", id=instance.pk)


@receiver(post_save, sender=Org, dispatch_uid="charts.turnaround_applies")
def apply_turnaround(sender, instance: Org, created: bool, raw: bool = False, **kwargs) -> None:
    """An org's turnaround changed: its charts not finished yet, except those with a due
    time of their own, are due ``created_at`` + the new turnaround (or not at all). One
    UPDATE on ``(org, state)``; ``updated_at`` is left alone: the scheduler derives the
    same due time from the org's row (``fairsched.engine.due``), so it re-reads no chart."""
    new = instance.turnaround
    old = getattr(instance, "_loaded_turnaround", _UNKNOWN)
    instance._loaded_turnaround = new
    if created or raw or old == new:
        return
    qs = Chart.objects.filter(org_id=instance.pk, state__in=(ChartState.QUEUED, ChartState.RUNNING),
                              due_explicit=False)
    if new:
        qs.update(due_at=ExpressionWrapper(F("created_at") + Value(new, output_field=DurationField()),
                                           output_field=DateTimeField()))
    else:
        qs.update(due_at=None)
    notify("org", id=instance.pk)


_UNKNOWN = object()
