"""A chart's lifecycle as the scheduler and the worker write it: dispatched (queued ->
running), refused for good, its Temporal run id, its outcome (-> a final state, with the
duration statistics and the finished counts), requeued when Temporal does not know the run.

Each is a compare-and-set on the row's state, so a transition happens once however often it
is asked for (a retried activity, a reconciliation racing a finish), and notifies the
scheduler on commit. The producers' and operators' writes are :mod:`charts.services`.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Case, DateTimeField, F, FloatField, Value, When
from django.db.models.functions import Cast, Coalesce, Greatest
from django.utils import timezone

from charts.models import FINAL_STATES, Chart, ChartState, DurationStat, FinishedCount
from common import metrics
from common.notify import ChartNote, notify

def chart_mark_running(*, chart_id: int, cost: int, run_id: str = "", at: datetime | None = None,
                       eta_at: datetime | None = None, p90_at: datetime | None = None) -> bool:
    """queued -> running, compare-and-set. False if the row moved meanwhile (cancelled,
    already running): the caller must not count it as dispatched. A pause that raced with
    the start loses (the workflow already runs, and running work is never touched), so the
    flag is cleared rather than left on a running chart. ``eta_at``: the ETA in force at
    dispatch, also its first ETA (with ``p90_at``, its 90% bound) if none was published
    while it waited."""
    now = at or timezone.now()
    extra = {}
    if eta_at is not None:
        extra = {"eta_dispatch_at": eta_at,
                 "eta_first_at": Coalesce(F("eta_first_at"), Value(eta_at, output_field=DateTimeField())),
                 "eta_p90_at": Case(When(eta_first_at__isnull=True,
                                         then=Value(p90_at, output_field=DateTimeField())),
                                    default=F("eta_p90_at"))}
    with transaction.atomic():
        updated = Chart.objects.filter(pk=chart_id, state=ChartState.QUEUED).update(
            state=ChartState.RUNNING, paused=False, dispatched_at=now, started_at=now, dispatched_cost=cost,
            temporal_run_id=run_id, error="", updated_at=now, fair_round=None, **extra,
        )
    return bool(updated)


def charts_mark_running(items: Sequence[tuple]) -> dict[int, bool]:
    """:func:`chart_mark_running` for each ``(chart id, cost, run id, at[, ETA in force[, its
    90% bound]])`` (datetimes), in one statement on PostgreSQL and SQLite (the values joined
    as arrays or JSON; the rows locked in id order first on PostgreSQL), in the caller's
    transaction: a dispatch's starts, 400 compare-and-sets in one UPDATE rather than an
    UPDATE and a savepoint each. Whether each chart moved to running."""
    rows = [(int(cid), cost, run_id or "", at or timezone.now(), *((list(eta) + [None, None])[:2]))
            for cid, cost, run_id, at, *eta in items]
    if connection.vendor not in ("postgresql", "sqlite"):
        return {cid: chart_mark_running(chart_id=cid, cost=cost, run_id=run_id, at=at, eta_at=eta_at, p90_at=p90_at)
                for cid, cost, run_id, at, eta_at, p90_at in rows}
    out = dict.fromkeys((r[0] for r in rows), False)
    if not rows:
        return out
    col = {name: connection.ops.quote_name(Chart._meta.get_field(name).column)
           for name in ("state", "paused", "dispatched_at", "started_at", "dispatched_cost", "temporal_run_id",
                        "error", "updated_at", "fair_round", "eta_dispatch_at", "eta_first_at", "eta_p90_at")}
    table, pk = connection.ops.quote_name(Chart._meta.db_table), connection.ops.quote_name(Chart._meta.pk.column)
    sets = (f"{col['state']} = %s, {col['paused']} = %s, {col['dispatched_at']} = d.at, {col['started_at']} = d.at, "
            f"{col['dispatched_cost']} = d.cost, {col['temporal_run_id']} = d.run_id, {col['error']} = '', "
            f"{col['updated_at']} = d.at, {col['fair_round']} = NULL, "
            f"{col['eta_dispatch_at']} = CASE WHEN d.eta IS NULL THEN c.{col['eta_dispatch_at']} ELSE d.eta END, "
            f"{col['eta_first_at']} = CASE WHEN d.eta IS NULL THEN c.{col['eta_first_at']} "
            f"ELSE COALESCE(c.{col['eta_first_at']}, d.eta) END, "
            f"{col['eta_p90_at']} = CASE WHEN d.eta IS NOT NULL AND c.{col['eta_first_at']} IS NULL THEN d.p90 "
            f"ELSE c.{col['eta_p90_at']} END")
    # (SQLite's RETURNING names the updated table's columns unqualified; PostgreSQL's "id" would be d's too)
    where = (f"WHERE c.{pk} = d.id AND c.{col['state']} = %s RETURNING "
             f"{'c.' if connection.vendor == 'postgresql' else ''}{pk}")
    rows.sort()  # row locks in id order
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            ids = [r[0] for r in rows]
            cursor.execute(f"SELECT 1 FROM {table} WHERE {pk} = ANY(%s::bigint[]) ORDER BY {pk} FOR UPDATE", [ids])
            cursor.execute(f"UPDATE {table} AS c SET {sets} FROM unnest(%s::bigint[], %s::integer[], %s::text[], "
                           f"%s::timestamptz[], %s::timestamptz[], %s::timestamptz[]) AS d(id, cost, run_id, at, eta, "
                           f"p90) {where}",
                           [ChartState.RUNNING, False, ids, *([r[i] for r in rows] for i in range(1, 6)),
                            ChartState.QUEUED])
        else:
            text = connection.ops.adapt_datetimefield_value
            values = json.dumps([(cid, cost, run_id, text(at), text(eta), text(p90))
                                 for cid, cost, run_id, at, eta, p90 in rows])
            picks = ", ".join(f"json_extract(value, '$[{i}]') AS {name}"
                              for i, name in enumerate(("id", "cost", "run_id", "at", "eta", "p90")))
            cursor.execute(f"UPDATE {table} AS c SET {sets} FROM (SELECT {picks} FROM json_each(%s)) AS d {where}",
                           [ChartState.RUNNING, False, values, ChartState.QUEUED])
        for (cid,) in cursor.fetchall():
            out[cid] = True
    return out


def charts_set_dispatched_pools(pools: Mapping[int, Mapping[str, int]]) -> None:
    """Record what each running chart of ``pools`` (chart id -> ``{pool: units}``) holds, in the
    caller's transaction: one UPDATE per distinct demand (a dispatch's charts share a few)."""
    by_demand: dict[str, tuple[dict, list[int]]] = {}
    for cid, units in pools.items():
        d = {p: int(u) for p, u in sorted(units.items())}
        by_demand.setdefault(json.dumps(d), (d, []))[1].append(int(cid))
    for d, ids in by_demand.values():
        Chart.objects.filter(pk__in=ids, state=ChartState.RUNNING).update(dispatched_pools=d)


def chart_fail_start(*, chart_id: int, error: str) -> bool:
    """queued -> failed, compare-and-set, for a chart whose workflow cannot be started
    (Temporal refused the request for good, or too many attempts failed). False if the
    row moved meanwhile (cancelled, or running: then it did start and is not failed)."""
    now = timezone.now()
    with transaction.atomic():
        updated = Chart.objects.filter(pk=chart_id, state=ChartState.QUEUED).update(
            state=ChartState.FAILED, finished_at=now, error=error[:10_000], updated_at=now,
        )
        if updated:
            count_finish(Chart.objects.filter(pk=chart_id).values_list("org_id", flat=True).get(), ChartState.FAILED)
            notify(ChartNote(id=chart_id))
    return bool(updated)


def chart_set_run_id(*, chart_id: int, run_id: str) -> None:
    Chart.objects.filter(pk=chart_id).update(temporal_run_id=run_id, updated_at=timezone.now())


@dataclass(frozen=True, slots=True)
class OutcomeWrite:
    """A closed workflow's outcome, to record (:func:`chart_record_outcomes`)."""

    chart_id: int
    state: str
    finished_at: datetime | None = None
    started_at: datetime | None = None
    error: str = ""
    run_id: str | None = None


def chart_record_outcome(
    *,
    chart_id: int,
    state: str,
    finished_at: datetime | None = None,
    started_at: datetime | None = None,
    error: str = "",
    run_id: str | None = None,
) -> bool:
    """running (or queued, when Temporal shows a run we never recorded) -> a final state.

    Idempotent: a chart already final is left alone and False returned. A success
    adds its duration to :class:`DurationStat`. One outcome of :func:`chart_record_outcomes`.
    """
    return chart_record_outcomes([OutcomeWrite(chart_id, state, finished_at, started_at, error, run_id)])[0]


_OUTCOME_READ = ("pk", "state", "org_id", "workflow_id", "started_at", "eta_first_at")


def chart_record_outcomes(outcomes: Sequence[OutcomeWrite]) -> list[bool]:
    """Each outcome as :func:`chart_record_outcome` records it, all in one transaction (the
    scheduler's finishes of a tick, as a dispatch's starts are written together): one read
    of the rows (before it: none is opened when every chart is final already), a
    compare-and-set UPDATE a chart that is not final yet (in id order), the
    duration statistics of each success, then each org's finished counts (one UPDATE a
    count: the rows are locked in the order a single outcome locks them, chart first).
    Whether each outcome was written, in order; a chart named twice is written once."""
    for o in outcomes:
        if o.state not in FINAL_STATES:
            raise ValueError(f"state: {o.state!r} is not a final state")
    wrote = [False] * len(outcomes)
    if not outcomes:
        return wrote
    # Read before the write transaction (the compare-and-set below makes the decision safe):
    # most outcomes reach the scheduler already recorded by the workflow's activity, and those
    # need no write, nor SQLite's one writer's turn.
    rows = {v[0]: v for v in Chart.objects.filter(pk__in={o.chart_id for o in outcomes})
            .values_list(*_OUTCOME_READ)}
    todo = sorted((i for i, o in enumerate(outcomes)
                   if o.chart_id in rows and rows[o.chart_id][1] not in FINAL_STATES), key=lambda i: outcomes[i].chart_id)
    if not todo:
        return wrote
    with transaction.atomic():
        succeeded, counts = _write_outcomes(outcomes, todo, rows, wrote)
        for o, finished, (_, _, org_id, workflow_id, started_at, eta_first_at) in succeeded:
            start = o.started_at or started_at
            if start is not None:
                _add_duration(org_id, workflow_id, max(0.0, (finished - start).total_seconds()))
            if eta_first_at is not None:
                first_eta, at = eta_first_at.timestamp(), finished.timestamp()
                transaction.on_commit(lambda first_eta=first_eta, at=at: metrics.chart_succeeded(first_eta, at))
        for (org_id, state), n in sorted(counts.items()):
            count_finish(org_id, state, n)
        for o, done in zip(outcomes, wrote):
            if done:
                notify(ChartNote(id=o.chart_id))
    return wrote


def _write_outcomes(outcomes: Sequence[OutcomeWrite], todo: list[int], rows: dict[int, tuple],
                    wrote: list[bool]) -> tuple[list[tuple], Counter[tuple[int, str]]]:
    """The compare-and-sets of ``outcomes[i]`` for each ``i`` of ``todo`` (``wrote[i]`` set for
    each written): the successes written (outcome, finish time, row read) and the finishes
    written by (org, state)."""
    counts: Counter[tuple[int, str]] = Counter()
    succeeded = []
    for i in todo:
        o, row = outcomes[i], rows[outcomes[i].chart_id]
        finished = o.finished_at or timezone.now()
        if row[1] in FINAL_STATES or not _write_outcome(o, row[1], finished):
            continue
        rows[o.chart_id] = (row[0], o.state, *row[2:])  # final now: named again, left alone
        wrote[i] = True
        counts[(row[2], o.state)] += 1
        if o.state == ChartState.SUCCEEDED:
            succeeded.append((o, finished, row))
    return succeeded, counts


def _write_outcome(o: OutcomeWrite, was: str, finished: datetime) -> bool:
    """The compare-and-set of one outcome: the row still in state ``was``."""
    changes: dict[str, Any] = {"state": o.state, "finished_at": finished, "error": o.error[:10_000],
                               "updated_at": timezone.now()}
    if o.started_at is not None:
        changes["started_at"] = o.started_at
    if o.run_id:
        changes["temporal_run_id"] = o.run_id
    return bool(Chart.objects.filter(pk=o.chart_id, state=was).update(**changes))


def chart_requeue(*, chart_id: int, reason: str) -> bool:
    """running -> queued (Temporal does not know the run). Keeps its place by created_at."""
    with transaction.atomic():
        updated = Chart.objects.filter(pk=chart_id, state=ChartState.RUNNING).update(
            state=ChartState.QUEUED, dispatched_at=None, started_at=None, dispatched_cost=None, dispatched_pools=None,
            temporal_run_id="", cancel_requested=False, error=f"requeued: {reason}"[:10_000], fair_round=None,
            updated_at=timezone.now(),
        )
        if updated:
            notify(ChartNote(id=chart_id))
    return bool(updated)


def count_finish(org_id: int, state: str, n: int = 1) -> None:
    """``n`` more charts of the org in final ``state`` (:class:`FinishedCount`), in the caller's
    transaction: one UPDATE, reading nothing first, so concurrent finishes never lose one."""
    if not FinishedCount.objects.filter(org_id=org_id, state=state).update(count=F("count") + n):
        try:
            with transaction.atomic():
                FinishedCount.objects.create(org_id=org_id, state=state, count=n)
        except IntegrityError:
            FinishedCount.objects.filter(org_id=org_id, state=state).update(count=F("count") + n)


def _add_duration(org_id: int, workflow_id: int, seconds: float) -> None:
    """Add one finish to the pair's, the org's and the workflow's (over all orgs)
    statistics: one UPDATE each, reading nothing first, so concurrent finishes
    never lose one. The decaying mean moves by ``max(alpha, 1 / count)`` of the
    gap (see :class:`DurationStat`)."""
    step = Greatest(Value(DurationStat.DECAY_ALPHA), Value(1.0) / Cast(F("count") + 1, FloatField()),
                    output_field=FloatField())
    changes = {"count": F("count") + 1, "total_s": F("total_s") + seconds,
               "mean_s": F("mean_s") + (Value(seconds) - F("mean_s")) * step}
    for org, wf in ((org_id, workflow_id), (org_id, None), (None, workflow_id)):
        updated = DurationStat.objects.filter(org_id=org, workflow_id=wf).update(**changes)
        if not updated:
            try:
                with transaction.atomic():
                    DurationStat.objects.create(org_id=org, workflow_id=wf, count=1, total_s=seconds,
                                                mean_s=seconds)
            except IntegrityError:
                DurationStat.objects.filter(org_id=org, workflow_id=wf).update(**changes)