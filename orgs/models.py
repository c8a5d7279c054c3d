from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, URLValidator
from django.db import models
from django.utils import timezone
from django.utils.text import slugify

from common.compiled import CompiledSelect
from common.validation import MAX_COST, MAX_WEIGHT, NoNulValidator
from control.models import DEFAULT_POOL, Pool
from scheduling.rules import is_held


WHSEC_PREFIX = "whsec_"
MAX_QUEUED = 100_000_000


def webhook_signing_key(secret: str) -> bytes:
    """The HMAC key of an org's webhook secret, read as Standard Webhooks reads one:
    ``whsec_<base64>`` is the decoded bytes. Any other secret (every one set before the
    signature followed that spec) is its UTF-8 bytes, so its receivers keep their key:
    its spec form is :func:`standard_webhook_secret`. Raises ValueError for a ``whsec_``
    secret that is not base64 of at least one byte. The spec recommends 24 to 64 random
    bytes; shorter keys are accepted as the libraries accept them, so that every existing
    secret's ``whsec_`` form can be stored as it is."""
    if not secret.startswith(WHSEC_PREFIX):
        return secret.encode()
    text = secret[len(WHSEC_PREFIX):]
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a secret starting with whsec_ must be followed by base64 (Standard Webhooks)") from None
    if not key:
        raise ValueError("a whsec_ secret must encode at least one byte (Standard Webhooks recommends 24 to 64)")
    return key


def standard_webhook_secret(secret: str) -> str:
    """The ``whsec_`` form of a webhook secret, what a Standard Webhooks library takes."""
    if secret.startswith(WHSEC_PREFIX):
        return secret
    return WHSEC_PREFIX + base64.b64encode(secret.encode()).decode()


class Org(models.Model):
    """A tenant organisation. ``weight`` is its share in the round-robin; 0 means held."""

    name = models.CharField(max_length=200, unique=True)
    slug = models.SlugField(max_length=200, unique=True, blank=True)
    weight = models.PositiveIntegerField(
        default=1, validators=[MaxValueValidator(MAX_WEIGHT)],
        help_text=f"Charts per round in the weighted round-robin (at most {MAX_WEIGHT:,}). 0 holds the org.",
    )
    weight_before_hold = models.PositiveIntegerField(
        null=True, blank=True, editable=False, help_text="The weight to restore on release."
    )
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="orgs")
    webhook_url = models.URLField(blank=True, validators=[URLValidator(schemes=["http", "https"])],
                                  help_text="POSTed a signed JSON payload when charts finish (http or https).")
    webhook_secret = models.CharField(
        max_length=200, blank=True, validators=[NoNulValidator()],
        help_text="HMAC-SHA256 key for webhooks (Standard Webhooks); required with a webhook URL. "
                  "whsec_<base64 of 24-64 random bytes>, or any other text: its UTF-8 bytes are the key.",
    )
    webhook_clear_margin_s = models.PositiveIntegerField(
        default=600, help_text="Notify when the org's clear-time moves by more than this many seconds."
    )
    max_queued = models.PositiveIntegerField(
        null=True, blank=True, validators=[MaxValueValidator(MAX_QUEUED)],
        help_text="At most this many queued charts: the producer API answers 429 naming the cap beyond it. "
                  "Empty: no cap.",
    )
    turnaround = models.DurationField(
        null=True, blank=True, validators=[MinValueValidator(timedelta(minutes=1)),
                                           MaxValueValidator(timedelta(days=366))],
        help_text="The turnaround promised for each chart (e.g. 24:00:00): a chart without its own due time is "
                  "due this long after it was created. Empty: no due time. A change applies to the charts "
                  "not finished yet.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_held(self) -> bool:
        """Auto-hold (:func:`scheduling.rules.is_held`): weight 0 holds the org."""
        return is_held(self.weight)

    @property
    def weight_on_release(self) -> int:
        """The weight a release gives it: the one it had before the hold (1 if unknown). The
        one rule of it: ``orgs.services.org_release`` applies it, a what-if preview shows it."""
        return self.weight_before_hold or 1

    def clean(self) -> None:
        """A webhook needs a secret: a body signed with the empty key is one anyone can forge."""
        super().clean()
        if self.webhook_url and not (self.webhook_secret or "").strip():
            raise ValidationError({"webhook_secret": "webhook_secret: required when a webhook URL is set "
                                                     "(receivers check the signature made with it)."})
        if self.webhook_secret:
            try:
                webhook_signing_key(self.webhook_secret)
            except ValueError as exc:
                raise ValidationError({"webhook_secret": f"webhook_secret: {exc}"}) from None

    def default_slug(self) -> str:
        """The slug a blank one becomes: the name's."""
        return slugify(self.name)[:200] or f"org-{self.pk or 'new'}"

    def save(self, *args, **kwargs) -> None:
        if not self.slug:
            self.slug = self.default_slug()
        super().save(*args, **kwargs)


DEFAULT_EXECUTION_TIMEOUT_S = 24 * 3600
MAX_EXECUTION_TIMEOUT_S = 366 * 24 * 3600
MIN_EXPECTED_DURATION_S = 1
MAX_EXPECTED_DURATION_S = 7 * 24 * 3600


class Workflow(models.Model):
    """A workflow type. The scheduler starts ``temporal_type`` on Temporal, with
    ``execution_timeout_s`` as the workflow's execution timeout: a chart that never
    finishes is timed out by Temporal and frees its budget."""

    name = models.CharField(max_length=200, unique=True)
    temporal_type = models.CharField(
        max_length=200, blank=True, help_text="Temporal workflow type to start; defaults to the name."
    )
    description = models.TextField(blank=True)
    execution_timeout_s = models.PositiveIntegerField(
        "execution timeout (seconds)", default=DEFAULT_EXECUTION_TIMEOUT_S,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_EXECUTION_TIMEOUT_S)],
        help_text="A chart's workflow running longer than this is timed out by Temporal (the chart fails and "
                  "frees its budget). Default 86400 (24 h); at most 366 days.",
    )
    expected_duration_s = models.PositiveIntegerField(
        "expected duration (seconds)", null=True, blank=True,
        validators=[MinValueValidator(MIN_EXPECTED_DURATION_S), MaxValueValidator(MAX_EXPECTED_DURATION_S)],
        help_text="How long one chart of this workflow runs, as far as you know (1 s to 7 days). The ETAs use it "
                  "until charts of this workflow have finished, then blend it out (it counts as 5 finished "
                  "charts). Empty: other workflows' averages or the 600 s default until then.",
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=models.Q(execution_timeout_s__gte=1),
                                   name="workflow_execution_timeout_gte_1"),
            models.CheckConstraint(
                condition=models.Q(expected_duration_s__isnull=True)
                | models.Q(expected_duration_s__gte=MIN_EXPECTED_DURATION_S,
                           expected_duration_s__lte=MAX_EXPECTED_DURATION_S),
                name="workflow_expected_duration_range"),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs) -> None:
        if not self.temporal_type:
            self.temporal_type = self.name
        super().save(*args, **kwargs)


class WorkflowCost(models.Model):
    """The cost of one (org, workflow) pair; a pair without a row costs 1. With ``pools``
    the pair draws on those pools instead (docs/scheduling.md, "Pools")."""

    org = models.ForeignKey(Org, on_delete=models.CASCADE, related_name="costs")
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="costs")
    cost = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1), MaxValueValidator(MAX_COST)])
    pools = models.JSONField(
        default=dict, blank=True,
        help_text='What the pair draws on, {"pool": units}, e.g. {"llm": 1, "gpu": 2}, in place of the cost '
                  '(which is then not read); "default" is the budget. Empty: the cost, on the budget.')

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["org", "workflow"], name="workflowcost_unique_pair"),
            models.CheckConstraint(condition=models.Q(cost__gte=1), name="workflowcost_cost_gte_1"),
        ]

    def clean(self) -> None:
        """``pools``: an object of known pools (a pool's name or ``default``) to units from 1
        to MAX_COST."""
        super().clean()
        pools = self.pools or {}
        if not isinstance(pools, dict):
            raise ValidationError({"pools": 'Expected an object such as {"llm": 1, "gpu": 2}.'})
        known = known_pools()
        for name, units in pools.items():
            if name not in known:
                raise ValidationError({"pools": f"Unknown pool {name!r} (known: {', '.join(sorted(known))})."})
            if isinstance(units, bool) or not isinstance(units, int) or not 1 <= units <= MAX_COST:
                raise ValidationError({"pools": f"{name}: units must be an integer from 1 to {MAX_COST}."})

    def __str__(self) -> str:
        if self.pools:
            return f"{self.org} / {self.workflow}: " + ", ".join(f"{p} {u}" for p, u in sorted(self.pools.items()))
        return f"{self.org} / {self.workflow}: {self.cost}"


def known_pools() -> set[str]:
    """Every pool a cost or a limit may name: the pools, and ``default`` (the budget)."""
    return {DEFAULT_POOL, *Pool.objects.values_list("name", flat=True)}


class OrgPoolLimit(models.Model):
    """An org's ceiling (``max``) and guaranteed minimum (``min``) in one pool
    (docs/scheduling.md, "Pools"): it never holds more than ``max`` units there (its charts
    past it wait without blocking anyone), and while it holds less than ``min`` and has work
    waiting that draws on the pool, units freed there go to it first. Running charts are
    never stopped."""

    org = models.ForeignKey(Org, on_delete=models.CASCADE, related_name="pool_limits")
    pool = models.SlugField(max_length=50, help_text='The pool\'s name ("default": the budget).')
    max = models.PositiveIntegerField(null=True, blank=True, validators=[MaxValueValidator(MAX_COST * 1000)],
                                      help_text="The ceiling in units (empty: none).")
    min = models.PositiveIntegerField(default=0, validators=[MaxValueValidator(MAX_COST * 1000)],
                                      help_text="The guaranteed minimum in units (0: none).")

    class Meta:
        ordering = ["org", "pool"]
        constraints = [
            models.UniqueConstraint(fields=["org", "pool"], name="orgpoollimit_unique"),
            models.CheckConstraint(condition=models.Q(max__isnull=True) | models.Q(min__lte=models.F("max")),
                                   name="orgpoollimit_min_lte_max"),
        ]

    def clean(self) -> None:
        super().clean()
        if self.pool and self.pool not in known_pools():
            raise ValidationError({"pool": f"Unknown pool {self.pool!r}."})
        if self.max is not None and self.min is not None and self.min > self.max:
            raise ValidationError({"min": f"min ({self.min}) must be at most max ({self.max})."})

    def __str__(self) -> str:
        return f"{self.org} in {self.pool}: max {self.max if self.max is not None else '-'}, min {self.min}"


# --- API keys of an org: its status.json and the producer API (``/api/v1/``, the ``api`` app) ---
#
# A key has a scope: ``read`` (status.json and the API's reads; what every key made before
# scopes could do) or ``submit`` (also submit and cancel charts through the API). The model was
# the dashboard's (dashboard/0001_initial); orgs/0009_orgtoken took it over, state only.

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

    org = models.ForeignKey(Org, on_delete=models.CASCADE, related_name="api_tokens")
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
        db_table = "dashboard_orgtoken"  # made by the dashboard app, moved here without moving a row
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
        token = _KEY_READ.first(key_hash=hash_token(raw))
        if token is not None:
            now = timezone.now()
            if token.last_used_at is None or (now - token.last_used_at).total_seconds() >= LAST_USED_EVERY_S:
                # at most one write a minute per key: a producer posting 300 charts a second must
                # not queue 300 writes behind its own submissions (SQLite has one writer)
                cls.objects.filter(pk=token.pk).update(last_used_at=now)
                token.last_used_at = now
        return token


# The key's read with its org (``authenticate``, every API request): its SQL built once per
# connection (common/compiled.py); the ORM's own ``.first()`` of this queryset.
_KEY_READ = CompiledSelect(
    lambda key_hash: OrgToken.objects.select_related("org").filter(key_hash=key_hash, revoked=False).order_by("pk")[:1],
    "key_hash")
