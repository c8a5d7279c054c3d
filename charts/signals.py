"""A chart written through the ORM or the admin notifies the scheduler as a service would.

Producers who create charts with ``Chart.objects.create(...)`` (or ``chart.save()``, or
the admin) are one of the three promised ways in: without a note their chart waited for
the incremental resync, up to its interval (3 s) behind a service's submission. The note is
sent on commit, once a transaction: a service that saves a chart and notifies for it itself
(``chart_submit``, ``chart_rerun``) sends one note, not two (:func:`common.notify.notify`
keeps a transaction's pending notes). A deleted chart's note makes the scheduler re-read a
row that is gone, so it leaves the order at once, not at the next full resync.

What sends no signal sends no note: ``bulk_create``, ``QuerySet.update()`` and raw SQL are
read by the resyncs (``docs/producers.md``). A fixture's raw load notifies nothing.
"""
from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from charts.models import Chart
from common.notify import ChartNote, notify


@receiver(post_save, sender=Chart, dispatch_uid="charts.notify_on_save")
def notify_on_save(sender: type[Chart], instance: Chart, raw: bool = False, using: str | None = None,
                   **kwargs: Any) -> None:
    if not raw:
        notify(ChartNote(id=instance.pk), using=using)


@receiver(post_delete, sender=Chart, dispatch_uid="charts.notify_on_delete")
def notify_on_delete(sender: type[Chart], instance: Chart, using: str | None = None, **kwargs: Any) -> None:
    if instance.pk is not None:
        notify(ChartNote(id=instance.pk), using=using)
