"""The states of a chart: the vocabulary every layer shares (the row's ``state`` column)."""
from __future__ import annotations

from django.db import models


class ChartState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


FINAL_STATES = (ChartState.SUCCEEDED, ChartState.FAILED, ChartState.CANCELLED)
