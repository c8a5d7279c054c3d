from __future__ import annotations

from django.db import models
from django.utils import timezone


class ChartState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


FINAL_STATES = (ChartState.SUCCEEDED, ChartState.FAILED, ChartState.CANCELLED)


class Chart(models.Model):
    """One unit of work: a workflow run for an org. The row is the truth."""

    org = models.ForeignKey("orgs.Org", on_delete=models.PROTECT, related_name="charts")
    workflow = models.ForeignKey("orgs.Workflow", on_delete=models.PROTECT, related_name="charts")
    external_id = models.CharField(
        max_length=200, null=True, blank=True,
        help_text="The producer's own id; unique within the org, so a resubmission is idempotent.",
    )
    payload = models.JSONField(default=dict, blank=True, help_text="Passed to the workflow as its input.")
    state = models.CharField(max_length=16, choices=ChartState.choices, default=ChartState.QUEUED)
    priority = models.BooleanField(default=False)
    prioritized_at = models.DateTimeField(null=True, blank=True)
    paused = models.BooleanField(default=False)
    moved_to_front_at = models.DateTimeField(
        null=True, blank=True, help_text="Set when an operator moved it to the front of its org's queue."
    )
    cancel_requested = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    dispatched_cost = models.PositiveIntegerField(null=True, blank=True)
    temporal_run_id = models.CharField(max_length=200, blank=True)
    error = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    rerun_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reruns",
        help_text="The failed or cancelled chart this one re-runs.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["org", "external_id"],
                condition=models.Q(external_id__isnull=False),
                name="chart_unique_external_id_per_org",
            ),
        ]
        indexes = [
            models.Index(fields=["state", "created_at", "id"], name="chart_state_created"),
            models.Index(fields=["org", "state"], name="chart_org_state"),
            models.Index(fields=["state", "updated_at"], name="chart_state_updated"),
            # History (newest finished first, keyset on (finished_at, id)) and search by external id.
            models.Index(fields=["finished_at", "id"], name="chart_finished"),
            models.Index(fields=["state", "finished_at"], name="chart_state_finished"),
            models.Index(fields=["external_id"], name="chart_external_id"),
        ]

    def __str__(self) -> str:
        ext = f" ({self.external_id})" if self.external_id else ""
        return f"chart #{self.pk}{ext}"

    @property
    def workflow_id(self) -> str:
        """The Temporal workflow id: one per chart, which makes a start idempotent."""
        return f"chart-{self.pk}"

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES


class DurationStat(models.Model):
    """Running total of finished chart durations per (org, workflow), and per org (workflow NULL).

    Kept up to date when a chart finishes, so the ETA pass reads a few rows
    instead of scanning every finished chart.
    """

    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="duration_stats")
    workflow = models.ForeignKey(
        "orgs.Workflow", on_delete=models.CASCADE, null=True, blank=True, related_name="duration_stats"
    )
    count = models.PositiveIntegerField(default=0)
    total_s = models.FloatField(default=0.0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["org", "workflow"], name="durationstat_unique_pair"),
            models.UniqueConstraint(
                fields=["org"], condition=models.Q(workflow__isnull=True), name="durationstat_unique_org"
            ),
        ]

    @property
    def avg_s(self) -> float | None:
        return self.total_s / self.count if self.count else None
