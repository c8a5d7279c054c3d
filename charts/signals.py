"""A producer's plain ``Chart.objects.create(...)`` reaches the scheduler too."""
from __future__ import annotations

from django.db.models.signals import post_save
from django.dispatch import receiver

from charts.models import Chart
from common.notify import notify


@receiver(post_save, sender=Chart, dispatch_uid="charts.notify_on_create")
def notify_chart_created(sender, instance: Chart, created: bool, raw: bool = False, **kwargs) -> None:
    if created and not raw:
        notify("chart", id=instance.pk)
