from __future__ import annotations

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
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


class AuditEntry(models.Model):
    """One operator action: who, what, when, and the value before and after.

    A model of our own rather than the admin's ``LogEntry``: most actions come from
    the dashboard's socket and the controls endpoint, not the admin; an entry names
    the chart and the org it touched as real foreign keys (so a chart's page and an
    org's admin page list their own entries through an index); ``before`` and
    ``after`` are JSON values, not a change message; and the feed is read newest
    first by time, which ``LogEntry`` does not index. Written by the services
    (:mod:`fairsched.audit`), so every entry point is covered.
    """

    at = models.DateTimeField(db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(
        max_length=150, blank=True, help_text="The user's name when it acted (kept if the user is deleted)."
    )
    action = models.CharField(max_length=32)
    chart = models.ForeignKey("charts.Chart", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    org = models.ForeignKey("orgs.Org", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    summary = models.CharField(max_length=300, help_text="What happened, in the operator's words.")
    before = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    after = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)

    class Meta:
        verbose_name = "audit entry"
        verbose_name_plural = "audit trail"
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["chart", "at"], name="audit_chart_at"),
            models.Index(fields=["org", "at"], name="audit_org_at"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor_name or 'system'}: {self.summary}"
