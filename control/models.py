from __future__ import annotations

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from common.validation import MAX_BUDGET, MAX_INTERVAL_S
from scheduling import modes
from scheduling.modes import EtaModel
from scheduling.share import DEFAULT_QUANTUM_S

MIN_QUANTUM_S = 1.0
MAX_QUANTUM_S = 86_400.0


class Share(models.TextChoices):
    """How a round's turn is counted (docs/scheduling.md, "Share by work"): the core's
    :class:`~scheduling.modes.Share`, with the admin's labels."""

    CHARTS = modes.Share.CHARTS.value, "charts (weight charts per round)"
    WORK = modes.Share.WORK.value, "work (weight x quantum_s budget-seconds per round)"


class Dispatch(models.TextChoices):
    """How the order starts (docs/scheduling.md, "Backfill"): the core's
    :class:`~scheduling.modes.Dispatch`, with the admin's labels."""

    STRICT = modes.Dispatch.STRICT.value, "strict (head-of-line)"
    BACKFILL = modes.Dispatch.BACKFILL.value, "backfill (conservative, ETA-safe)"


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
        max_length=16, choices=[(m.value, m.value) for m in (EtaModel.FORECAST, EtaModel.LANES)],
        default=EtaModel.FORECAST.value,
        help_text="ETAs: 'forecast' also expects the arrivals each org keeps sending and learns durations "
                  "from finished charts (bench/eta.py); 'lanes' simulates only the current order.",
    )
    share = models.CharField(
        max_length=8, choices=Share.choices, default=Share.CHARTS,
        help_text="Fair share: 'charts' gives each org weight charts per round; 'work' gives it weight x "
                  "quantum_s budget-seconds (cost x estimated duration) per round. A change re-ranks every org.",
    )
    quantum_s = models.FloatField(
        default=DEFAULT_QUANTUM_S, validators=[MinValueValidator(MIN_QUANTUM_S), MaxValueValidator(MAX_QUANTUM_S)],
        help_text=f"Under share 'work': budget-seconds per unit of weight per round ({MIN_QUANTUM_S:g} to "
                  f"{MAX_QUANTUM_S:g}; default {DEFAULT_QUANTUM_S:g}: one cost-1 chart of the default estimate).",
    )
    dispatch = models.CharField(
        max_length=8, choices=Dispatch.choices, default=Dispatch.STRICT,
        help_text="'strict' stops at the first chart that does not fit; 'backfill' starts a later chart when "
                  "that delays no earlier chart's reservation (its 90% bound must end before it).",
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
    share = models.CharField(max_length=8, default=Share.CHARTS, help_text="The share the rounds were computed under.")
    quantum_s = models.FloatField(null=True, blank=True,
                                  help_text="The quantum the rounds were computed under (share 'work' only).")
    guard_holds = models.JSONField(
        default=list, blank=True,
        help_text="Under the dispatch 'backfill': the guards' windows of the charts started ahead of their "
                  "turn, [start, estimated end, bound's end, cost] in epoch seconds, kept clear until they end.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "round state"

    def __str__(self) -> str:
        return f"Round state (head {self.head})"


class OrgRoundState(models.Model):
    """One org's round-robin state: ``last`` (its highest assigned round, null: none),
    ``used`` (its charts, queued or dispatched, holding ``last``), ``in_head`` (its
    charts dispatched in round ``head``, or in round ``in_round`` when that is set: under
    the dispatch ``backfill`` an org may have dispatched from a round above ``head``) and
    the weight they were computed under. Under the share ``work`` ``used`` and
    ``in_head`` count budget-seconds (floats)."""

    org = models.OneToOneField("orgs.Org", on_delete=models.CASCADE, primary_key=True,
                               related_name="round_state")
    last = models.BigIntegerField(null=True, blank=True)
    used = models.FloatField(default=0)
    in_head = models.FloatField(default=0)
    in_round = models.BigIntegerField(null=True, blank=True)
    weight = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name = "org round state"

    def __str__(self) -> str:
        return f"Round state of org {self.org_id} (last {self.last}, used {self.used})"
DEFAULT_POOL = "default"
"""The budget's pool: every plain cost draws on it (scheduling.pools.DEFAULT_POOL)."""


def _not_default(name: str) -> None:
    from django.core.exceptions import ValidationError

    if name == DEFAULT_POOL:
        raise ValidationError("'default' is the budget's pool: set its capacity with the budget.")


class Pool(models.Model):
    """A capacity pool beside the budget (docs/scheduling.md, "Pools"): a name and a
    capacity in units, e.g. one LLM provider's concurrent calls for one model, or a GPU
    fleet. The budget is the pool ``default``; a cost may draw on several pools at once
    (``WorkflowCost.pools``), and a chart starts only when each has room."""

    name = models.SlugField(max_length=50, unique=True, validators=[_not_default],
                            help_text="The pool's name, as costs and limits name it (letters, digits, - and _).")
    capacity = models.PositiveIntegerField(
        validators=[MaxValueValidator(MAX_BUDGET)],
        help_text=(f"Units (at most {MAX_BUDGET:,}). Lowered under running work, nothing is stopped: the pool "
                   "stays over until enough charts finish, and nothing that draws on it starts meanwhile. "
                   "At 0, the charts that draw on it are blocked."),
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.capacity})"


class AuditEntry(models.Model):
    """One operator action: who, what, when, and the value before and after.

    A model of our own rather than the admin's ``LogEntry``: most actions come from
    the dashboard's socket and the controls endpoint, not the admin; an entry names
    the chart and the org it touched as real foreign keys (so a chart's page and an
    org's admin page list their own entries through an index); ``before`` and
    ``after`` are JSON values, not a change message; and the feed is read newest
    first by time, which ``LogEntry`` does not index. Written by the services
    (:mod:`control.audit`), so every entry point is covered.
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


class Deployment(models.Model):
    """This deployment's id (a singleton row, pk=1), written once: it is part of every
    chart's Temporal workflow id (``chart-<name>-<pk>``), so that two deployments on one
    Temporal namespace never take each other's workflows. See :mod:`control.deployment`.

    ``legacy_below``: charts with a smaller pk keep the id they had before deployments
    had ids (``chart-<pk>``); fixed once, when a scheduler of this version first leads
    (null until then)."""

    name = models.CharField(max_length=16, editable=False)
    legacy_below = models.BigIntegerField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "deployment"

    def __str__(self) -> str:
        return f"Deployment {self.name}"
