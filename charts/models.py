from __future__ import annotations

from django.db import models
from django.utils import timezone

from common.states import FINAL_STATES, ChartState  # noqa: F401 (re-exported)
from common.validation import JSONDocumentValidator, NoNulValidator
from common.workflow_ids import workflow_id


class Chart(models.Model):
    """One unit of work: a workflow run for an org. The row is the truth."""

    org = models.ForeignKey("orgs.Org", on_delete=models.PROTECT, related_name="charts")
    workflow = models.ForeignKey("orgs.Workflow", on_delete=models.PROTECT, related_name="charts")
    external_id = models.CharField(
        max_length=200, null=True, blank=True, validators=[NoNulValidator()],
        help_text="The producer's own id; unique within the org, so a resubmission is idempotent.",
    )
    payload = models.JSONField(
        default=dict, blank=True, validators=[JSONDocumentValidator()],
        help_text="Passed to the workflow as its input (a JSON object, at most FAIRSCHED_MAX_PAYLOAD_BYTES).",
    )
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
    dispatched_pools = models.JSONField(
        null=True, blank=True, editable=False,
        help_text="With capacity pools: what it held when dispatched, {pool: units} (kept across restarts; "
                  "a later change of its cost's pools does not touch running work).",
    )
    temporal_run_id = models.CharField(max_length=200, blank=True)
    error = models.TextField(blank=True)
    fair_round = models.BigIntegerField(
        null=True, blank=True, editable=False,
        help_text="The round the live scheduler gave this queued chart (persisted so a restart resumes the order).",
    )
    fair_est_s = models.FloatField(
        null=True, blank=True, editable=False,
        help_text="Share 'work': its estimated duration when it arrived (its work is cost x this, fixed).",
    )
    fair_share = models.FloatField(
        null=True, blank=True, editable=False,
        help_text="Share 'work': its part of its org's turn in its round, budget-seconds.",
    )
    eta_first_at = models.DateTimeField(null=True, blank=True, help_text="The first ETA published for it.")
    eta_dispatch_at = models.DateTimeField(
        null=True, blank=True, help_text="The ETA in force when it was dispatched.")
    eta_p90_at = models.DateTimeField(
        null=True, blank=True, help_text="With its first ETA: the finish it should beat 9 times out of 10.")
    due_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When it is due: its own due time, or its creation plus its org's turnaround (empty: none).")
    due_explicit = models.BooleanField(
        default=False, help_text="due_at was given for this chart (an org's turnaround change leaves it alone).")
    due_alert = models.CharField(
        max_length=8, blank=True, editable=False,
        help_text="The due warning in force (at_risk, late; empty: none), with hysteresis: docs/scheduling.md.")
    due_alert_at = models.DateTimeField(null=True, blank=True, editable=False,
                                        help_text="When the due warning last rose.")
    due_flagged_at = models.DateTimeField(null=True, blank=True, editable=False,
                                          help_text="When it was first warned about (at risk or late).")
    due_late_at = models.DateTimeField(null=True, blank=True, editable=False,
                                       help_text="When its warning first reached late (its ETA after the due time).")
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
            # The scheduler's incremental resync: rows changed since a watermark, any state;
            # and the chart.finished webhook sweep's keyset (jobs.webhooks): (updated_at, id)
            # after its cursor, in that order, read up to a page without a sort.
            models.Index(fields=["updated_at", "id"], name="chart_updated_id"),
            # The admin list: its filters, newest first (its default order), without a sort.
            models.Index(fields=["state", "-id"], name="chart_state_id"),
            models.Index(fields=["org", "state", "-id"], name="chart_org_state_id"),
            models.Index(fields=["workflow", "-id"], name="chart_workflow_id"),
            # A restart's head of the order: per org, its queued charts by saved round
            # (fairsched.engine.store.db.read_head), without reading the org's whole backlog.
            models.Index(fields=["org", "state", "priority", "fair_round", "created_at", "id"], name="chart_org_head"),
            # A first start's head: the charts moved to the front (few; partial, so small).
            models.Index(fields=["state", "org"], name="chart_moved_to_front",
                         condition=models.Q(moved_to_front_at__isnull=False)),
            # Due times: the admin's filter and the finished charts' met/missed (by state, due).
            models.Index(fields=["state", "due_at"], name="chart_state_due"),
            # The due-warning webhook sweep: warnings raised since its cursor (few; partial).
            models.Index(fields=["due_alert_at", "id"], name="chart_due_alert",
                         condition=models.Q(due_alert_at__isnull=False)),
        ]

    def save(self, *args, **kwargs) -> None:
        """A new chart's due time: ``due_at`` if given (explicit), else its creation plus
        its org's turnaround (:meth:`derive_due`), read from the org's row. A caller that has
        just read that row and derived both fields sets ``due_derived`` (``chart_submit``:
        one query less a submission)."""
        if self._state.adding and not self.__dict__.pop("due_derived", False):
            org = self.org
            if self.due_at is None and self.org_id is not None:  # the org's row, not a stale instance
                org = type(org)(pk=self.org_id, turnaround=type(org).objects.filter(pk=self.org_id).values_list(
                    "turnaround", flat=True).first())
            self.due_at, self.due_explicit = self.derive_due(org, self.created_at, self.due_at)
        super().save(*args, **kwargs)

    @staticmethod
    def derive_due(org, created_at, due_at):
        """``(due_at, explicit)`` of a new chart of ``org`` created at ``created_at``: the
        given ``due_at`` (explicit), else ``created_at`` + the org's turnaround, else None."""
        if due_at is not None:
            return due_at, True
        turnaround = getattr(org, "turnaround", None)
        return (created_at + turnaround if turnaround and created_at else None), False

    def __str__(self) -> str:
        ext = f" ({self.external_id})" if self.external_id else ""
        return f"chart #{self.pk}{ext}"

    @property
    def temporal_workflow_id(self) -> str:
        """The Temporal workflow id: one per chart, which makes a start idempotent, and naming
        this deployment (``chart-<deployment>-<pk>``; ``chart-<pk>`` for a chart older than
        the upgrade: :mod:`control.deployment`). (``workflow_id`` is the foreign key.)"""
        return workflow_id(self.pk)

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES


class DurationStat(models.Model):
    """Finished chart durations per (org, workflow), per org (workflow NULL) and per
    workflow over all orgs (org NULL), kept up to date in the transaction that
    records a finish, so the ETA pass reads a few rows instead of scanning every
    finished chart.

    ``mean_s`` is the estimate: an exponentially decaying mean, so a workflow that
    got faster last week is estimated as it runs now. Each finish x moves it by
    ``a * (x - mean_s)`` with ``a = max(DECAY_ALPHA, 1 / count)``: a plain mean of the
    first 25 finishes, then a fixed alpha of 0.04, a half-life of about 17 finishes
    (the last 50 carry 87% of the weight). ``count``/``total_s`` keep the all-time
    figures for the admin.
    """

    DECAY_ALPHA = 0.04

    org = models.ForeignKey(
        "orgs.Org", on_delete=models.CASCADE, null=True, blank=True, related_name="duration_stats"
    )
    workflow = models.ForeignKey(
        "orgs.Workflow", on_delete=models.CASCADE, null=True, blank=True, related_name="duration_stats"
    )
    count = models.PositiveIntegerField(default=0)
    total_s = models.FloatField(default=0.0)
    mean_s = models.FloatField(default=0.0, help_text="Decaying mean of the durations (the estimate).")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["org", "workflow"], name="durationstat_unique_pair"),
            models.UniqueConstraint(
                fields=["org"], condition=models.Q(workflow__isnull=True), name="durationstat_unique_org"
            ),
            models.UniqueConstraint(
                fields=["workflow"], condition=models.Q(org__isnull=True), name="durationstat_unique_workflow"
            ),
            models.CheckConstraint(
                condition=models.Q(org__isnull=False) | models.Q(workflow__isnull=False),
                name="durationstat_org_or_workflow",
            ),
        ]

    @property
    def avg_s(self) -> float | None:
        """The estimate (the decaying mean), None before the first finish."""
        return self.mean_s if self.count else None


class FinishedCount(models.Model):
    """How many charts of an org reached each final state: ``fairsched_charts_finished_total``.

    Added to in the transaction that makes a chart final (``charts.services``: a cancel of a
    queued chart, a start that can never succeed, a recorded outcome), so it is exactly the
    database's count without counting the finished charts on every scrape (one UPDATE per
    finish, as :class:`DurationStat`). A chart made final around the services (raw SQL) is not
    counted. Migration ``0009`` filled it from the charts already finished."""

    org = models.ForeignKey("orgs.Org", on_delete=models.CASCADE, related_name="finished_counts")
    state = models.CharField(max_length=16, choices=ChartState.choices)
    count = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "state"], name="finishedcount_unique_org_state")]

    def __str__(self) -> str:
        return f"{self.org_id} {self.state}: {self.count}"
