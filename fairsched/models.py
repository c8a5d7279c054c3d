from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models


class SchedulerSettings(models.Model):
    """The scheduler's dials: a singleton row (pk=1), read with ``SchedulerSettings.get()``."""

    budget = models.PositiveIntegerField(
        default=4, help_text="Total cost budget: the sum of the costs of running charts never exceeds it."
    )
    eta_interval_s = models.FloatField(
        default=3.0, validators=[MinValueValidator(0.1)], help_text="Seconds between ETA passes."
    )
    reconcile_interval_s = models.FloatField(
        default=5.0, validators=[MinValueValidator(0.1)],
        help_text="Seconds between reconciliations against Temporal.",
    )
    eta_model = models.CharField(
        max_length=16, choices=[("forecast", "forecast"), ("lanes", "lanes")], default="forecast",
        help_text="ETAs: 'forecast' also expects the arrivals each org keeps sending and learns durations "
                  "from finished charts (bench/eta.py); 'lanes' simulates only the current order.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "scheduler settings"
        verbose_name_plural = "scheduler settings"

    def __str__(self) -> str:
        return f"Scheduler settings (budget {self.budget})"

    def save(self, *args, **kwargs) -> None:
        self.pk = 1
        super().save(*args, **kwargs)

    @classmethod
    def get(cls) -> "SchedulerSettings":
        obj, _ = cls.objects.get_or_create(pk=1)
        return obj
