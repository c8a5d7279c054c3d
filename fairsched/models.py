from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from fairsched.validation import MAX_BUDGET, MAX_INTERVAL_S


class SchedulerSettings(models.Model):
    """The scheduler's dials: a singleton row (pk=1), read with ``SchedulerSettings.get()``."""

    budget = models.PositiveIntegerField(
        default=4, validators=[MaxValueValidator(MAX_BUDGET)],
        help_text=(
            f"Total cost budget (at most {MAX_BUDGET:,}): a chart starts only if the running cost plus its own "
            "cost fits in it. After the budget is lowered, running charts are never stopped: the running cost "
            "stays above the new budget until enough of them finish (it drains by design), and nothing starts "
            "meanwhile."
        ),
    )
    eta_interval_s = models.FloatField(
        default=3.0, validators=[MinValueValidator(0.1), MaxValueValidator(MAX_INTERVAL_S)],
        help_text="Seconds between ETA passes.",
    )
    reconcile_interval_s = models.FloatField(
        default=5.0, validators=[MinValueValidator(0.1), MaxValueValidator(MAX_INTERVAL_S)],
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


class RoundState(models.Model):
    """The persistent weighted round-robin's ``head`` (contracts: the round of the last
    normal-tier chart dispatched): a singleton row (pk=1), written only by the active
    scheduler, in the same transaction as a dispatch's compare-and-set. With each org's
    :class:`OrgRoundState` and each queued chart's ``Chart.fair_round`` it lets a new
    scheduler (a restart, a deploy, a standby taking over) resume the fair order exactly
    instead of rebuilding it from ``head = 0``. Kept apart from :class:`SchedulerSettings`
    so an operator saving the settings never overwrites it, nor it the settings."""

    head = models.BigIntegerField(default=0)
    budget = models.PositiveIntegerField(help_text="The budget the rounds were computed under.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "round state"

    def __str__(self) -> str:
        return f"Round state (head {self.head})"


class OrgRoundState(models.Model):
    """One org's round-robin state: ``last`` (its highest assigned round, null: none),
    ``used`` (its charts, queued or dispatched, holding ``last``), ``in_head`` (its
    charts dispatched in round ``head``) and the weight they were computed under."""

    org = models.OneToOneField("orgs.Org", on_delete=models.CASCADE, primary_key=True,
                               related_name="round_state")
    last = models.BigIntegerField(null=True, blank=True)
    used = models.PositiveIntegerField(default=0)
    in_head = models.PositiveIntegerField(default=0)
    weight = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name = "org round state"

    def __str__(self) -> str:
        return f"Round state of org {self.org_id} (last {self.last}, used {self.used})"
