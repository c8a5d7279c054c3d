from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from fairsched.validation import MAX_BUDGET, MAX_INTERVAL_S


class SchedulerSettings(models.Model):
    """The scheduler's dials: a singleton row (pk=1), read with ``SchedulerSettings.get()``."""

    budget = models.PositiveIntegerField(
        default=4, validators=[MaxValueValidator(MAX_BUDGET)],
        help_text=f"Total cost budget (at most {MAX_BUDGET:,}): the sum of the costs of running charts never "
                  "exceeds it.",
    )
    eta_interval_s = models.FloatField(
        default=3.0, validators=[MinValueValidator(0.1), MaxValueValidator(MAX_INTERVAL_S)],
        help_text="Seconds between ETA passes.",
    )
    reconcile_interval_s = models.FloatField(
        default=5.0, validators=[MinValueValidator(0.1), MaxValueValidator(MAX_INTERVAL_S)],
        help_text="Seconds between reconciliations against Temporal.",
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
