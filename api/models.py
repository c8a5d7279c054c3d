"""The producer API's stored responses, one per (org, Idempotency-Key) (docs/api.md#idempotency)."""
from __future__ import annotations

from django.db import models


class IdempotencyKey(models.Model):
    """The first response to an ``Idempotency-Key`` of an org, kept ``FAIRSCHED_API_IDEMPOTENCY_TTL_S``
    (24 h). ``status`` is null while the first request is still in flight."""

    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of the method, path and body.")
    status = models.PositiveSmallIntegerField(null=True, blank=True, help_text="Empty while in flight.")
    content_type = models.CharField(max_length=100, blank=True)
    body = models.TextField(blank=True)
    location = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        verbose_name = "idempotency key"
        constraints = [models.UniqueConstraint(fields=["org", "key"], name="api_idempotency_org_key")]
        indexes = [models.Index(fields=["expires_at"], name="api_idempotency_expires")]

    def __str__(self) -> str:
        return f"{self.key} ({self.status or 'in flight'})"
