"""The scheduler's database reads and writes: plain synchronous functions.

The live loop calls them through ``sync_to_async(thread_sensitive=True)`` (one
thread, so one connection). Each starts with ``close_old_connections()`` so a
database that restarted or dropped the connection is reconnected, not fatal.
Writes go through ``charts.services`` (compare-and-set, notifications).
"""
from __future__ import annotations

import functools
import threading
from contextlib import contextmanager
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from django.db import close_old_connections as _close_old_connections
from django.db import connection, transaction
from django.db.models import Max
from django.utils.timezone import now as timezone_now

from charts.models import Chart, ChartState
from charts.lifecycle import (OutcomeWrite, chart_fail_start, chart_record_outcomes, chart_requeue, charts_mark_running,
                              charts_set_dispatched_pools)
from scheduling import Durations, normal_key, RoundState as CoreRoundState
from scheduling.modes import Share
from scheduling.plan import gc_paused
from scheduling.pools import demand_of
from common.compiled import CompiledRows
from control import deployment as control_deployment
from fairsched.engine.store import pg_statistics
from fairsched.engine.store.chart_columns import ChartColumns
from fairsched.engine.store.rounds import (Firsts, Work, _save_rounds, _update_column, _update_columns,
                                           first_eta_values, round_state)
from charts.selectors import read_durations, read_pools
from fairsched.engine.store.rows import ChartRow, Config, OrgRow, World
from fairsched.temporal.shared import WorkflowIds
from control.models import SchedulerSettings
from orgs.models import DEFAULT_EXECUTION_TIMEOUT_S, Org, Workflow, WorkflowCost

CHART_FIELDS = (
    "id", "org_id", "workflow__name", "state", "created_at", "priority", "prioritized_at", "paused",
    "moved_to_front_at", "cancel_requested", "external_id", "started_at", "dispatched_cost", "temporal_run_id",
    "fair_round", "due_at", "due_explicit", "due_alert", "fair_est_s", "fair_share",
)
ACTIVE = (ChartState.QUEUED, ChartState.RUNNING)


def _ts(d: datetime | None) -> float | None:
    """Epoch seconds; a naive datetime is UTC (a raw SQLite read: Django stores UTC there)."""
    if d is None:
        return None
    return d.timestamp() if d.tzinfo is not None else d.replace(tzinfo=timezone.utc).timestamp()


def _aware(d: datetime) -> datetime:
    """``d`` made aware: a naive datetime is UTC (a raw SQLite read, as :func:`_ts`)."""
    return d if d.tzinfo is not None else d.replace(tzinfo=timezone.utc)


_snapshot = threading.local()  # .open: this thread reads inside one snapshot (read_streamed)


def close_old_connections() -> None:
    """Drop a connection the server closed or that outlived ``CONN_MAX_AGE``, unless a
    transaction is open on it (a caller's ``atomic()``, a test's, a snapshot read's):
    never close under one."""
    if not connection.in_atomic_block and not getattr(_snapshot, "open", False):
        _close_old_connections()


@contextmanager
def one_snapshot():
    """One consistent read of the database, without taking any write lock: PostgreSQL
    REPEATABLE READ, READ ONLY; on SQLite a deferred transaction (``atomic()`` there begins
    IMMEDIATE, settings.py, which would hold the write lock for the whole read and stall
    every writer, dispatch's included)."""
    _snapshot.open = True
    try:
        if connection.vendor == "sqlite":
            connection.ensure_connection()
            with connection.cursor() as cursor:
                cursor.execute("BEGIN DEFERRED")
            try:
                yield
            finally:
                with connection.cursor() as cursor:
                    cursor.execute("COMMIT")  # read only: nothing to keep
        else:
            with transaction.atomic():
                if connection.vendor == "postgresql":
                    with connection.cursor() as cursor:
                        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                yield
    finally:
        _snapshot.open = False


_NAMES: dict[str, str] = {}  # workflow names and states: one string each, not one per row read


def _row(v: tuple) -> ChartRow:
    (pk, org, wf, state, created, prio, prio_at, paused, front, cancel, ext, started, cost, run_id, rnd,
     due_at, due_explicit, due_alert, est_s, share) = v
    wf, state = _NAMES.setdefault(wf, wf), _NAMES.setdefault(state, state)
    return ChartRow(pk, org, wf, state, _ts(created), bool(prio), _ts(prio_at), bool(paused), _ts(front),
                    bool(cancel), ext, _ts(started), cost, run_id or "", rnd,
                    _ts(due_at) if due_explicit else None, bool(due_explicit), due_alert or "", est_s, share)


def _active_rows(batch: int = 20_000) -> ChartColumns:
    """Every queued and running chart, by pk, straight off a database cursor (the ORM's
    per-row conversions cost as much again as the read itself at a million rows), as
    columns: only a batch's rows are objects at once (:mod:`.chart_columns`)."""
    qs = Chart.objects.filter(state__in=ACTIVE).order_by("pk").values_list(*CHART_FIELDS)
    sql, params = qs.query.sql_with_params()
    with gc_paused(), connection.cursor() as cursor:  # many small acyclic rows: no collector passes
        cursor.execute(sql, params)
        return chart_columns(iter(lambda: cursor.fetchmany(batch), []))


def chart_columns(batches: Iterable[Sequence[tuple]]) -> ChartColumns:
    """The rows of ``batches`` (each a batch of :data:`CHART_FIELDS` tuples, as a cursor
    fetches them) as columns, each batch's :class:`ChartRow` objects freed before the next."""
    out = ChartColumns()
    for rows in batches:
        out.extend([_row(v) for v in rows])
    return out


_CONFIG_FIELDS = ("budget", "eta_interval_s", "reconcile_interval_s", "eta_model", "share", "quantum_s", "dispatch")
# The small tables' reads, their SQL built once per connection (common.compiled.CompiledRows):
# every resync reads them.
_SETTINGS = CompiledRows(lambda: SchedulerSettings.objects.filter(pk=1).values_list(*_CONFIG_FIELDS))
_ORGS = CompiledRows(lambda: Org.objects.order_by("pk").values_list("pk", "name", "slug", "weight", "turnaround"))
_COSTS = CompiledRows(lambda: WorkflowCost.objects.values_list("org_id", "workflow__name", "cost"))


def read_config() -> Config:
    close_old_connections()
    got = _SETTINGS.rows()
    if not got:  # never saved: the defaults' row, created once
        SchedulerSettings.get()
        got = _SETTINGS.rows()
    s = dict(zip(_CONFIG_FIELDS, got[0]))
    return Config(**s, pools=read_pools(s["budget"]))


def read_orgs(ids: Iterable[int] | None = None) -> list[OrgRow]:
    close_old_connections()
    if ids is None:
        rows = _ORGS.rows()
    else:
        rows = Org.objects.order_by("pk").filter(pk__in=list(ids)).values_list("pk", "name", "slug", "weight",
                                                                                 "turnaround")
    return [OrgRow(pk, name, slug, weight, turnaround.total_seconds() if turnaround else None)
            for pk, name, slug, weight, turnaround in rows]


def read_costs() -> dict[tuple[str, str], int]:
    close_old_connections()
    return {(str(o), w): c for o, w, c in _COSTS.rows()}


def read_round_state() -> CoreRoundState | None:
    """The persisted round-robin state (None: no scheduler ever saved one)."""
    close_old_connections()
    return round_state()


def save_rounds(state: CoreRoundState, changes: dict[str, int | None], work: Work | None = None,
                firsts: Firsts | None = None) -> None:
    """Write the round state and the queued charts' changed rounds (and under the share
    ``work`` their estimate at arrival and share; ``firsts``: first ETAs and their 90%
    bounds, where none is recorded), in one transaction (a crash leaves either the old
    save or the new one, never a mix)."""
    close_old_connections()
    with transaction.atomic():
        _save_rounds(state, changes, work, firsts)


def read_world() -> World:
    """Everything the scheduler holds, in one read (start-up)."""
    from django.utils import timezone

    read_at = timezone.now()
    config = read_config()
    charts = _active_rows()
    return World(config=config, orgs=read_orgs(), costs=read_costs(), averages=read_durations(), charts=charts,
                 rounds=read_round_state(), read_at=read_at, running_pools=read_running_pools())


def read_running_pools() -> dict[int, tuple]:
    """What each running chart dispatched with pools held (``Chart.dispatched_pools``), as a
    demand: a restart counts what it really holds, not its pair's demand after a change."""
    return {cid: demand_of(units) for cid, units in Chart.objects.filter(
        state=ChartState.RUNNING, dispatched_pools__isnull=False).values_list("id", "dispatched_pools")
        if isinstance(units, dict)}


@dataclass(frozen=True, slots=True)
class Head:
    """The head of the saved order, read first at a restart (:func:`read_head`): the
    world of a partial queue. ``horizon``: see :func:`scheduling.head_of_backlog`
    (None: the head is the whole backlog)."""

    world: World
    horizon: tuple | None
    # The orgs with more charts without a round than were read, their first by rank (a
    # first start, :func:`scheduling.queue.FairQueue.first_head`; or a restart amid its backfill).
    truncated: frozenset[str] | None = None

    @property
    def whole_wanted(self) -> bool:
        """The head is not the whole backlog: the whole is read next (in the same snapshot)."""
        return self.horizon is not None or bool(self.truncated)


def read_head(per_org: int) -> Head | None:
    """What :func:`scheduling.head_of_backlog` picks, straight from the database: the
    running charts and, of each org, its queued priority charts, its ``per_org`` first with
    a round by ``(round, created_at, id)`` and its ``per_org`` first without one by
    ``(created_at, id)`` (the index ``chart_org_head``: one short query each), with every
    chart moved to the front without a round (the partial index ``chart_moved_to_front``).
    The orgs with more without a round are ``truncated``: a restart amid a first start's
    backfill.

    When no round state was ever saved, a first start's head: the same read, in which no
    chart holds a round (:func:`scheduling.first_head_of_backlog`). None (rank the whole
    backlog first) if one does anyway (a round state deleted by hand: only the whole
    backlog can tell those charts' places), or under the share ``work`` (docs/scheduling.md,
    "The live scheduler and the policies")."""
    rounds = read_round_state()
    if rounds is None and SchedulerSettings.get().share == Share.WORK:
        return None
    read_at = timezone_now()
    rows = Chart.objects.values_list(*CHART_FIELDS)
    charts = [_row(v) for v in rows.filter(state=ChartState.RUNNING)]
    charts.extend(_row(v) for v in rows.filter(state=ChartState.QUEUED, moved_to_front_at__isnull=False,
                                               priority__in=[False], fair_round__isnull=True))
    orgs = read_orgs()
    bounds = []
    truncated = set()
    for org in orgs:
        queued = rows.filter(org_id=org.id, state=ChartState.QUEUED)
        kept = [_row(v) for v in queued.filter(priority__in=[False], fair_round__isnull=False)
                .order_by("fair_round", "created_at", "id")[:per_org]]
        if kept and rounds is None:
            return None
        if len(kept) == per_org:
            last = kept[-1]
            bounds.append(normal_key(last.round, last.created_at, last.id))
        # ``priority__in``, not ``priority=``: Django writes ``NOT priority`` for False, which
        # SQLite's planner cannot match to an index column (it sorted 222k rows an org).
        # ``order_by("fair_round", ...)`` (NULL in all): chart_org_head's order, which
        # PostgreSQL otherwise forgoes for chart_state_created (see pg_statistics).
        new = [_row(v) for v in queued.filter(priority__in=[False], fair_round__isnull=True,
                                              moved_to_front_at__isnull=True)
               .order_by("fair_round", "created_at", "id")[:per_org + 1]]
        if len(new) > per_org:
            truncated.add(str(org.id))
            new.pop()
        charts.extend(kept + new)
        charts.extend(_row(v) for v in queued.filter(priority__in=[True]))
    return Head(_head_world(charts, orgs, rounds, read_at), min(bounds) if bounds else None, frozenset(truncated))


def _head_world(charts: list[ChartRow], orgs: list[OrgRow], rounds: CoreRoundState | None,
                read_at: datetime) -> World:
    """A head's rows as a :class:`World`, with the small tables whole."""
    charts.sort(key=lambda r: r.id)  # as read_world gives them
    return World(config=read_config(), orgs=orgs, costs=read_costs(), averages=read_durations(), charts=charts,
                 rounds=rounds, read_at=read_at, running_pools=read_running_pools())


def read_streamed(per_org: int, on_head: Callable[[Head | None], bool]) -> World | None:
    """Start-up: :func:`read_head`, handed to ``on_head`` at once, then (if ``on_head``
    says the whole backlog is wanted; else None) :func:`read_world`, both in one snapshot
    of the database (:func:`one_snapshot`, which takes no write lock), so the whole backlog is exactly what the head was
    read from: what the scheduler dispatched from the head meanwhile is replayed on it.
    Run in a thread of its own (its own connection, closed at the end): the scheduler's
    database thread stays free for the dispatches from the head."""
    try:
        SchedulerSettings.get()  # the one write a read could make, before the read transaction
        # PostgreSQL after a bulk load: plans that fit the head's probes (rows changed in
        # place, a backfill's: analyzed meanwhile, in the background)
        pg_statistics.analyze_if_stale(defer_in_place=True)
        with one_snapshot():
            if not on_head(read_head(per_org)):
                return None
            return read_world()
    finally:
        connection.close()


@dataclass(frozen=True, slots=True)
class Changes:
    """An incremental resync's read: the small tables whole, the charts changed since a watermark."""
    config: Config
    orgs: list[OrgRow]
    costs: dict[tuple[str, str], int]
    averages: Durations     # the duration estimates (charts.selectors.read_durations)
    charts: list[ChartRow]  # every chart (any state) whose updated_at is at or after the watermark
    read_at: datetime       # when this read began: the next watermark (less the overlap)
    more: tuple[datetime, int] | None = None  # a chunk's read: where the next chunk begins (None: the last)


def read_changes(since: datetime | None, after: tuple[datetime, int] | None = None,
                 limit: int | None = None) -> Changes:
    """Settings, orgs, costs and duration estimates (small: read whole), and the charts whose
    ``updated_at`` is at or after ``since`` (all states: a chart that turned final
    leaves the order). ``updated_at`` is set by every write through ``charts.services``
    and by ``save()`` (auto_now); a ``QuerySet.update()`` or raw SQL that leaves it alone
    is caught only by the periodic full pass (:func:`read_active_chunk`).

    With ``limit``: at most that many charts, by ``(updated_at, id)`` from just after
    ``after`` (keyset pagination over the ``chart_updated_id`` index), and ``more`` says
    where the next chunk begins: after a bulk import, or at the whole backlog's take-over,
    a resync reads a chunk a tick, not 100,000 rows in one step."""
    from django.utils import timezone

    read_at = timezone.now()
    config = read_config()
    qs = Chart.objects.filter(updated_at__gte=since) if since is not None else Chart.objects.filter(state__in=ACTIVE)
    more = None
    if limit is None:
        # Sorted here, not by the database: with ``ORDER BY id`` SQLite walks the primary key
        # and tests every row (0.4 s at a million charts, every few seconds: most of an idle
        # scheduler's CPU) instead of searching the ``updated_at`` index.
        charts = sorted((_row(v) for v in qs.values_list(*CHART_FIELDS)), key=lambda r: r.id)
    else:
        if since is not None:
            got = _raw(*_changed_sql(since, after, limit))
        else:
            got = _raw(*qs.order_by("updated_at", "pk").values_list("updated_at", *CHART_FIELDS)[:limit]
                       .query.sql_with_params())
        charts = [_row(v[1:]) for v in got]
        if len(got) == limit:
            more = (_aware(got[-1][0]), got[-1][1])
    return Changes(config=config, orgs=read_orgs(), costs=read_costs(), averages=read_durations(), charts=charts,
                   read_at=read_at, more=more)


_SINCE = datetime(2001, 2, 3, 4, 5, 6, 789012, tzinfo=timezone.utc)  # stand-ins, found in the built statement's
_AFTER = datetime(2002, 3, 4, 5, 6, 7, 890123, tzinfo=timezone.utc)  # parameters (no chart has these times,
_AFTER_PK = 987_654_321_987                                          # and it does not matter if one did)


@functools.lru_cache(maxsize=16)
def _changed_plan(vendor: str, paged: bool, limit: int) -> tuple[str, tuple]:
    """A chunk of :func:`read_changes`' charts (``updated_at`` at or after a watermark, from
    just after a keyset position if ``paged``), its SQL built once: (sql, each parameter's
    slot: "since", "after", "after_pk", or a constant). The resync reads it at every tick a
    note asked for one, and the ORM's building cost more than the read."""
    qs = Chart.objects.filter(updated_at__gte=_SINCE)
    if paged:
        qs = qs.filter(updated_at__gte=_AFTER).exclude(updated_at=_AFTER, pk__lte=_AFTER_PK)
    sql, params = qs.order_by("updated_at", "pk").values_list("updated_at", *CHART_FIELDS)[:limit].query.sql_with_params()
    adapt = connection.ops.adapt_datetimefield_value
    marks = {adapt(_SINCE): "since", adapt(_AFTER): "after", _AFTER_PK: "after_pk"}
    slots = tuple(marks.get(p, (p,)) if isinstance(p, (str, int, datetime)) else (p,) for p in params)
    named = sorted(x for x in slots if isinstance(x, str))
    if named != sorted(["since"] + (["after", "after", "after_pk"] if paged else [])):
        raise AssertionError(f"read_changes' statement has other parameters than expected: {sql} {params}")
    return sql, slots


def _changed_sql(since: datetime, after: tuple[datetime, int] | None, limit: int) -> tuple[str, list]:
    sql, slots = _changed_plan(connection.vendor, after is not None, limit)
    adapt = connection.ops.adapt_datetimefield_value
    values = {"since": adapt(since)}
    if after is not None:
        values.update(after=adapt(after[0]), after_pk=after[1])
    return sql, [values[x] if isinstance(x, str) else x[0] for x in slots]


def read_active_chunk(after_pk: int, limit: int) -> list[ChartRow]:
    """Queued and running charts with ``pk > after_pk``, by pk, at most ``limit``: one
    chunk of the full resync (keyset pagination: each chunk is one short indexed query)."""
    close_old_connections()
    # One query per state: ``state = s AND id > x ORDER BY id`` walks the (state, id) index
    # in order and stops at ``limit``. ``state IN (...)`` with the same ORDER BY cannot use
    # the index order across the two states: SQLite sorted every active row after ``x``
    # for each chunk (3 s a chunk at a million charts, so a full pass of 10 minutes).
    found: list[tuple] = []
    for state in ACTIVE:
        found.extend(Chart.objects.filter(state=state, pk__gt=after_pk).order_by("pk")
                     .values_list(*CHART_FIELDS)[:limit])
    found.sort(key=lambda v: v[0])
    return [_row(v) for v in found[:limit]]


def _raw(sql: str, params: Sequence) -> list[tuple]:
    """The rows of ``sql`` straight off a database cursor, without the ORM's per-value
    conversions (:func:`_row` makes what it needs of them: SQLite's naive datetimes are UTC)."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


@functools.lru_cache(maxsize=128)
def _charts_sql(n: int, vendor: str) -> str | None:
    """The SQL of :data:`CHART_FIELDS` of ``n`` charts by pk (their ids its only parameters),
    compiled once for each ``n``: the scheduler reads the charts its notes and finishes name
    several times a second, and Django's compiling cost more than the read."""
    sql, params = Chart.objects.filter(pk__in=range(n)).values_list(*CHART_FIELDS).query.sql_with_params()
    return sql if list(params) == list(range(n)) else None


def read_charts(ids: Iterable[int], known_orgs: Container[int] = ()) -> tuple[dict[int, ChartRow], list[OrgRow]]:
    """The named charts (missing ones absent) and their orgs, but those in ``known_orgs``
    (the scheduler's: a note for a chart of an org it knows is one query, not two; an
    org's own changes come with notes of their own)."""
    close_old_connections()
    ids = list(dict.fromkeys(ids))
    rows: dict[int, ChartRow] = {}
    for start in range(0, len(ids), 500):
        part = ids[start:start + 500]
        sql = _charts_sql(len(part), connection.vendor)
        found = (_raw(sql, part) if sql is not None
                 else Chart.objects.filter(pk__in=part).values_list(*CHART_FIELDS))
        for v in found:
            rows[v[0]] = _row(v)
    orgs = {r.org for r in rows.values() if r.org not in known_orgs}
    return rows, read_orgs(orgs) if orgs else []


@dataclass(frozen=True, slots=True)
class Recorded:
    """What :func:`record_outcomes` did: whether each outcome was written (in order), and
    the rows after it, with the orgs the caller did not know (as :func:`read_charts`)."""
    wrote: list[bool]
    rows: dict[int, ChartRow]
    orgs: list[OrgRow]


@dataclass(frozen=True, slots=True)
class StartRow:
    """What starting a chart's workflow needs."""
    row: ChartRow
    org_slug: str
    temporal_type: str
    payload: Any  # a JSON object unless written around the services (then the start refuses it)
    execution_timeout_s: int = DEFAULT_EXECUTION_TIMEOUT_S


def read_for_start(ids: Iterable[int]) -> dict[int, StartRow]:
    close_old_connections()
    out = {}
    fields = CHART_FIELDS + ("org__slug", "workflow__temporal_type", "payload", "workflow__execution_timeout_s")
    for v in Chart.objects.filter(pk__in=list(ids)).values_list(*fields):
        row = _row(v[:len(CHART_FIELDS)])
        slug, ttype, payload, timeout_s = v[len(CHART_FIELDS):]
        out[row.id] = StartRow(row, slug, ttype or row.workflow, payload if payload is not None else {},
                               timeout_s if timeout_s and timeout_s > 0 else DEFAULT_EXECUTION_TIMEOUT_S)
    return out


def mark_running(items: list[tuple],
                 rounds: tuple[CoreRoundState, dict[str, int | None]] | None = None,
                 pools: dict[int, tuple] | None = None) -> dict[int, bool]:
    """queued -> running by compare-and-set for each (chart id, cost, run id, start time[,
    ETA in force, its 90% bound], epoch seconds), and with ``rounds`` the round state the
    dispatch left (``save_rounds``), all in one transaction: a restarted scheduler never
    sees a dispatch without its ``head``. ``pools``: with capacity pools, what each chart
    holds (chart id -> demand), recorded on the charts that moved (``dispatched_pools``)."""

    close_old_connections()
    ts = lambda v: datetime.fromtimestamp(v, tz=timezone.utc) if v is not None else None  # noqa: E731
    with transaction.atomic():
        if rounds is not None:
            _save_rounds(*rounds)
        ran = charts_mark_running([(cid, cost, run_id, ts(at), *map(ts, eta))
                                   for cid, cost, run_id, at, *eta in items])
        if pools:
            charts_set_dispatched_pools({cid: dict(d) for cid, d in pools.items() if ran.get(cid)})
        return ran


def fail_start(chart_id: int, error: str) -> bool:
    close_old_connections()
    return chart_fail_start(chart_id=chart_id, error=error)


def recorded_first_etas() -> set[int]:
    """Queued and running charts that already have their first ETA (start-up)."""
    close_old_connections()
    return set(Chart.objects.filter(state__in=ACTIVE, eta_first_at__isnull=False).values_list("pk", flat=True))


def record_first_etas(etas: dict[int, tuple[float, float]]) -> int:
    """Each chart's first published ETA and the 90% bound published with it (epoch
    seconds), only where no first ETA is recorded, both in one statement (one new version
    of each row): prepared UPDATEs for all (new charts only; the scheduler remembers the
    rest). Returns how many were recorded."""
    close_old_connections()
    first = connection.ops.quote_name(Chart._meta.get_field("eta_first_at").column)
    with transaction.atomic():
        return _update_columns(("eta_first_at", "eta_p90_at"), first_eta_values(etas), where=f"{first} IS NULL")


def record_due_alerts(levels: dict[int, int], rose: list[int], at: float) -> int:
    """The due warnings a pass moved: ``due_alert``; where it rose, ``due_alert_at`` (the
    webhook sweep's cue), the first time ``due_flagged_at`` (the early warning's lead), the
    first time to late ``due_late_at`` (the late warning's). Only queued or running charts."""
    close_old_connections()
    col = lambda name: connection.ops.quote_name(Chart._meta.get_field(name).column)  # noqa: E731
    when = datetime.fromtimestamp(at, tz=timezone.utc)
    active = f"{col('state')} IN ('queued', 'running')"
    names = {0: "", 1: "at_risk", 2: "late"}
    with transaction.atomic():
        done = _update_column("due_alert", [(names[lv], pk) for pk, lv in levels.items()], where=active)
        risen = [(when, pk) for pk in rose]
        _update_column("due_alert_at", risen, where=active)
        _update_column("due_flagged_at", risen, where=f"{active} AND {col('due_flagged_at')} IS NULL")
        _update_column("due_late_at", [(when, pk) for pk in rose if levels.get(pk) == 2],
                       where=f"{active} AND {col('due_late_at')} IS NULL")
    return done


def recent_promises(limit: int = 500) -> list[tuple[float, float, float]]:
    """(created, first ETA, finished) of the latest successful charts that had a first ETA,
    oldest first: the p90 finish's calibration at start-up."""
    close_old_connections()
    rows = (Chart.objects.filter(state=ChartState.SUCCEEDED, eta_first_at__isnull=False, finished_at__isnull=False)
            .order_by("-finished_at").values_list("created_at", "eta_first_at", "finished_at")[:limit])
    return [(c.timestamp(), e.timestamp(), f.timestamp()) for c, e, f in reversed(rows)]


def recent_arrivals(hours: float = 6.0, limit: int = 200_000) -> list[tuple[str, str, float]]:
    """(org, workflow, created at) of the charts created in the last ``hours`` (at most
    ``limit``, the latest), oldest first: what the forecast learns arrival rates from."""
    close_old_connections()
    since = datetime.now(timezone.utc) - timedelta(hours=hours)
    rows = (Chart.objects.filter(created_at__gte=since).order_by("-created_at")
            .values_list("org_id", "workflow__name", "created_at")[:limit])
    return [(str(o), w, c.timestamp()) for o, w, c in reversed(rows)]


def recent_durations(limit: int = 2000) -> list[tuple[str, str, float]]:
    """(org, workflow, seconds) of the latest successful charts, oldest first: what the
    forecast learns durations from at start-up."""
    close_old_connections()
    rows = (Chart.objects.filter(state=ChartState.SUCCEEDED, started_at__isnull=False, finished_at__isnull=False)
            .order_by("-finished_at").values_list("org_id", "workflow__name", "started_at", "finished_at")[:limit])
    return [(str(o), w, (f - s).total_seconds()) for o, w, s, f in reversed(rows)]


def record_outcomes(items: Sequence[tuple], known_orgs: Container[int] = ()) -> Recorded:
    """Closed workflows' outcomes, each ``(chart id, state, error, started at, finished at,
    run id)``, written in one transaction (``charts.lifecycle.chart_record_outcomes``:
    idempotent, compare-and-set), then their rows re-read (:func:`read_charts`): one call
    of the database thread for a tick's finishes, not two a finish."""
    close_old_connections()
    wrote = chart_record_outcomes([OutcomeWrite(cid, state, finished_at, started_at, error, run_id)
                                   for cid, state, error, started_at, finished_at, run_id in items])
    rows, orgs = read_charts({item[0] for item in items}, known_orgs)
    return Recorded(wrote, rows, orgs)


def deployment() -> WorkflowIds:
    """This deployment's workflow ids, the legacy cut fixed (a scheduler leading: see
    :mod:`control.deployment`)."""
    close_old_connections()
    return control_deployment.fix_legacy_cut(lambda: (Chart.objects.aggregate(m=Max("pk"))["m"] or 0) + 1)


def legacy_active(ids: WorkflowIds) -> bool:
    """Is any queued or running chart one that keeps a legacy id? (Reconciliation lists
    the legacy ids only while one is.) Two index lookups (``chart_state_id``)."""
    close_old_connections()
    if ids.legacy_below is None:
        return True
    for state in ACTIVE:
        first = Chart.objects.filter(state=state).order_by("pk").values_list("pk", flat=True).first()
        if first is not None and first < ids.legacy_below:
            return True
    return False


def requeue(chart_id: int, reason: str) -> bool:
    close_old_connections()
    return chart_requeue(chart_id=chart_id, reason=reason)


def workflow_names() -> dict[int, str]:
    close_old_connections()
    return dict(Workflow.objects.values_list("pk", "name"))
