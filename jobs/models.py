"""What the background jobs record: imports (with progress and per-row errors),
webhook deliveries (with attempts and the last response), and the small state the
periodic sweep keeps (its cursor, each org's last notified clear-time)."""
from __future__ import annotations

import uuid

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models


class ImportStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"  # every row imported (or already there)
    PARTIAL = "partial", "Partial"  # every valid row imported; the others have an error each
    FAILED = "failed", "Failed"  # the file itself could not be read; nothing imported


class ImportJob(models.Model):
    """One uploaded file of charts, imported by an rq job in atomic batches.

    The file is kept in the database (not on a local disk) so the rq worker that
    runs the import can be on another machine than the web process that took the
    upload. ``next_row`` is committed together with each batch, so a crashed import
    resumes exactly where it stopped and the counts always match what is in the
    database.
    """

    FINAL = (ImportStatus.SUCCEEDED, ImportStatus.PARTIAL, ImportStatus.FAILED)
    MAX_STORED_ERRORS = 1000

    filename = models.CharField(max_length=255)
    format = models.CharField(max_length=8, choices=[("csv", "CSV"), ("json", "JSON")])
    data = models.BinaryField(editable=False)
    batch_size = models.PositiveIntegerField(
        default=500, validators=[MinValueValidator(1), MaxValueValidator(10_000)],
        help_text="Rows per transaction.",
    )
    status = models.CharField(max_length=16, choices=ImportStatus.choices, default=ImportStatus.PENDING)
    total_rows = models.PositiveIntegerField(null=True, blank=True)
    next_row = models.PositiveIntegerField(default=0, help_text="Rows before this index are done (committed).")
    created_count = models.PositiveIntegerField(default=0, help_text="Charts created.")
    existing_count = models.PositiveIntegerField(
        default=0, help_text="Rows whose (org, external_id) already existed with the same content."
    )
    error_count = models.PositiveIntegerField(default=0)
    errors = models.JSONField(
        default=list, blank=True, help_text="Per-row errors: [{row, message}], row 1 = the first data row."
    )
    message = models.TextField(blank=True, help_text="What went wrong with the file as a whole.")
    rq_job_id = models.CharField(max_length=100, blank=True)
    heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="Last sign of life of the runner (set as it starts and after each batch)."
    )
    auto_resumes = models.PositiveSmallIntegerField(
        default=0, help_text="Times the sweep re-queued this import after its worker stopped mid-way."
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "chart import"
        # /admin/rq/ (django-rq's queue views: open, delete and requeue any job) needs this,
        # or a superuser; being staff is not enough.
        permissions = [("manage_rq_queues", "Can manage the background job queues (/admin/rq/)")]

    def __str__(self) -> str:
        return f"import #{self.pk} ({self.filename})"

    @property
    def is_final(self) -> bool:
        return self.status in self.FINAL

    @property
    def progress(self) -> float | None:
        """0..1 of the rows handled so far; None before the file has been read."""
        if not self.total_rows:
            return 1.0 if self.total_rows == 0 else None
        return min(1.0, self.next_row / self.total_rows)


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"  # queued, or waiting for a retry
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"  # every attempt failed
    SKIPPED = "skipped", "Skipped"  # the org removed its webhook URL before it was sent


class WebhookEvent(models.TextChoices):
    CHART_FINISHED = "chart.finished", "chart.finished"
    CLEAR_TIME_CHANGED = "org.clear_time_changed", "org.clear_time_changed"
    DUE_STATE_CHANGED = "chart.due_state_changed", "chart.due_state_changed"


def new_message_id() -> str:
    """A delivery's Standard Webhooks ``webhook-id``: random, so a database restored from
    a backup (whose ids start again) never gives a new message an id a receiver has seen."""
    return f"msg_{uuid.uuid4().hex}"


class WebhookDelivery(models.Model):
    """One signed POST to an org's webhook URL, with every attempt's outcome."""

    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="webhook_deliveries")
    event = models.CharField(max_length=40, choices=WebhookEvent.choices)
    dedupe_key = models.CharField(
        max_length=200, unique=True, null=True, blank=True,
        help_text="One delivery per key (e.g. chart.finished:12), however often the sweep sees the chart.",
    )
    message_id = models.CharField(
        max_length=64, unique=True, null=True, default=new_message_id, editable=False,
        help_text="The webhook-id header: the same on every attempt (receivers dedupe on it).",
    )
    payload = models.JSONField()
    url = models.URLField(max_length=2000, blank=True, help_text="Where the last attempt went.")
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_response = models.TextField(blank=True)
    last_error = models.TextField(blank=True)
    next_retry_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    claimed_until = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="An attempt is in progress until then."
    )
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "webhook deliveries"
        indexes = [models.Index(fields=["status", "next_retry_at"], name="webhook_status_retry")]

    def __str__(self) -> str:
        return f"{self.event} #{self.pk} to {self.org}"

    @property
    def webhook_id(self) -> str:
        """``message_id``; a row the migration could not reach (none expected) gets the id
        the migration gives existing rows."""
        return self.message_id or f"msg_legacy_{self.pk}"


class SweepCursor(models.Model):
    """How far a periodic sweep has looked: the position ``(at, after_id)`` on
    ``(Chart.updated_at, Chart.id)`` (``chart.finished``) or ``(Chart.due_alert_at,
    Chart.id)`` (due warnings). A page continues after it (keyset), so any number of
    charts stamped with one time are paged through, not re-read."""

    name = models.CharField(max_length=50, unique=True)
    at = models.DateTimeField()
    after_id = models.BigIntegerField(
        default=0, help_text="The last chart seen at ``at`` (0: none yet, the page starts at ``at``)."
    )

    def __str__(self) -> str:
        return f"{self.name} @ {self.at} #{self.after_id}"


class OrgClearTime(models.Model):
    """The clear-time last sent to an org's webhook (None: no work pending, or, with
    ``no_eta``, none of its work can run: held, paused or blocked)."""

    org = models.OneToOneField("orgs.Org", on_delete=models.CASCADE, related_name="+")
    clear_at = models.DateTimeField(null=True, blank=True)
    no_eta = models.CharField(max_length=300, blank=True, default="",
                              help_text='What was said instead of a clear-time, e.g. "held: no ETA".')
    notified_at = models.DateTimeField()
