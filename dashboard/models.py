"""API keys of an org: its status.json and the producer API (``/api/v1/``, the ``api`` app).

A key has a scope: ``read`` (status.json and the API's reads; what every key made before
scopes could do) or ``submit`` (also submit and cancel charts through the API)."""
from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

TOKEN_PREFIX = "fso_"
LAST_USED_EVERY_S = 60  # last_used_at is written at most this often per key: not one write per request


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class Scope(models.TextChoices):
    READ = "read", "read: status.json and the API's reads"
    SUBMIT = "submit", "submit: also submit and cancel charts through the API (includes read)"


class OrgToken(models.Model):
    """A bearer token that reads one org's status. Only its SHA-256 is stored; the
    token itself is shown once, when it is created."""

    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=200, help_text="What uses it, e.g. 'billing system'.")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=12, editable=False, help_text="The token's first characters, to tell tokens apart.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+", editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked = models.BooleanField(default=False)
    scope = models.CharField(max_length=16, choices=Scope.choices, default=Scope.READ,
                             help_text="read: status.json and the API's reads; submit: also submit and cancel "
                                       "charts through the API.")

    class Meta:
        verbose_name = "org API token"

    def __str__(self) -> str:
        return f"{self.org} / {self.name} ({self.prefix}…)"

    @classmethod
    def issue(cls, *, org, name: str, created_by=None, scope: str = Scope.READ) -> tuple["OrgToken", str]:
        """Create a token; returns the row and the raw token (shown once, never stored)."""
        if scope not in Scope.values:
            raise ValueError(f"scope: one of {', '.join(Scope.values)}, got {scope!r}")
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(org=org, name=name, key_hash=hash_token(raw), prefix=raw[:12],
                                   created_by=created_by, scope=scope)
        return token, raw

    def allows(self, scope: str) -> bool:
        """``submit`` includes ``read``."""
        return scope == Scope.READ or self.scope == Scope.SUBMIT

    @classmethod
    def authenticate(cls, raw: str) -> "OrgToken | None":
        if not raw or not raw.startswith(TOKEN_PREFIX):
            return None
        token = cls.objects.select_related("org").filter(key_hash=hash_token(raw), revoked=False).first()
        if token is not None:
            now = timezone.now()
            if token.last_used_at is None or (now - token.last_used_at).total_seconds() >= LAST_USED_EVERY_S:
                # at most one write a minute per key: a producer posting 300 charts a second must
                # not queue 300 writes behind its own submissions (SQLite has one writer)
                cls.objects.filter(pk=token.pk).update(last_used_at=now)
                token.last_used_at = now
        return token
