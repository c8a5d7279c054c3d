"""The round state's persistence, and the bulk row writes it shares with the first ETAs.

:func:`round_state` reads what a restarted scheduler resumes the fair order from;
:func:`_save_rounds` writes it (the ``RoundState`` row, each org's ``OrgRoundState``, the
queued charts' changed rounds and, under the share ``work``, their estimates at arrival
and shares) inside the caller's transaction: a dispatch's compare-and-set
(:func:`fairsched.engine.store.db.mark_running`) or a save of its own
(:func:`fairsched.engine.store.db.save_rounds`). Plain synchronous functions on the current
connection; :mod:`fairsched.engine.store.db` says how the scheduler calls them.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from operator import itemgetter

from django.db import connection

from charts.models import Chart
from control.models import OrgRoundState, RoundState
from scheduling import OrgRounds, RoundState as CoreRoundState
from scheduling.modes import Share
from orgs.models import Org


def round_state() -> CoreRoundState | None:
    """The persisted round-robin state on the current connection (None: no scheduler ever
    saved one): web requests, commands; the scheduler calls :func:`fairsched.engine.store.db.read_round_state`."""
    row = RoundState.objects.filter(pk=1).first()
    if row is None:
        return None
    work = row.share == Share.WORK  # the row's text
    # under Share.CHARTS used and in_head count charts: ints, as the core gives them
    orgs = {str(o.org_id): OrgRounds(o.last, o.used if work else int(o.used), o.in_head if work else int(o.in_head),
                                     o.weight, o.in_round) for o in OrgRoundState.objects.all()}
    return CoreRoundState(row.head, row.budget, orgs, (row.share, row.quantum_s if work else None),
                          tuple(tuple(h) for h in row.guard_holds or ()))


Work = dict[str, tuple[float | None, float | None]]
"""Share.WORK: per chart whose round is written, (its estimate at arrival, its share)."""

Firsts = dict[int, tuple[float, float]]
"""Per chart, its first ETA and the 90% bound published with it (epoch seconds): written
only where no first ETA is recorded."""


_ORG_ROUND_FIELDS = ("last", "used", "in_head", "in_round", "weight")


def _save_rounds(state: CoreRoundState, changes: dict[str, int | None], work: Work | None = None,
                 firsts: Firsts | None = None) -> None:
    share, quantum = tuple(state.share)
    RoundState.objects.update_or_create(pk=1, defaults={"head": state.head, "budget": state.budget,
                                                        "share": share, "quantum_s": quantum,
                                                        "guard_holds": [list(h) for h in state.holds]})
    current = {str(o[0]): o[1:] for o in OrgRoundState.objects.values_list("org_id", *_ORG_ROUND_FIELDS)}
    moved = []
    for org, s in state.orgs.items():
        values = tuple(getattr(s, f) for f in _ORG_ROUND_FIELDS)  # OrgRounds' own names
        o = current.get(org)
        if o is None:
            if Org.objects.filter(pk=int(org)).exists():
                OrgRoundState.objects.create(org_id=int(org), **dict(zip(_ORG_ROUND_FIELDS, values)))
        elif o != values:
            moved.append((*values, int(org)))
    if moved:  # one prepared UPDATE for them all (a chunk of the backfill moves most orgs' cursors)
        qn = connection.ops.quote_name
        sets = ", ".join(f"{qn(f)} = %s" for f in _ORG_ROUND_FIELDS)
        with connection.cursor() as cursor:
            cursor.executemany(f"UPDATE {qn(OrgRoundState._meta.db_table)} SET {sets} WHERE {qn('org_id')} = %s",
                               sorted(moved, key=itemgetter(-1)))  # row locks in org order
    if changes:
        _write_chart_rounds(changes, firsts)
    if work:
        _write_chart_work(work)


def _write_chart_work(work: Work) -> None:
    """Write the charts' ``fair_est_s`` and ``fair_share`` (Share.WORK): few per save
    (arrivals, a re-rank), so one UPDATE per chart."""
    table = connection.ops.quote_name(Chart._meta.db_table)
    with connection.cursor() as cursor:
        cursor.executemany(f"UPDATE {table} SET fair_est_s = %s, fair_share = %s WHERE id = %s",
                           [(est, share, int(cid)) for cid, (est, share) in sorted(work.items(), key=lambda i: int(i[0]))])


def _utc(at: float | None) -> datetime | None:
    """Epoch seconds as an aware datetime (None stays None)."""
    return None if at is None else datetime.fromtimestamp(at, tz=timezone.utc)


def first_eta_values(firsts: Firsts) -> list[tuple[datetime, datetime, int]]:
    """``firsts`` as ``(first ETA, bound, chart id)`` rows for :func:`_update_columns`."""
    return [(_utc(at), _utc(bound), pk) for pk, (at, bound) in firsts.items()]


def _write_chart_rounds(changes: dict[str, int | None], firsts: Firsts | None = None, batch: int = 20_000) -> None:
    """Write the charts' rounds with one UPDATE per ``batch`` charts, joined to the new
    values passed as arrays (PostgreSQL ``unnest``) or JSON (SQLite ``json_each``):
    100k rows in well under a second, where Django's ``bulk_update`` (a CASE WHEN per
    row) takes more than a minute on SQLite and one UPDATE per row half a minute on
    PostgreSQL. Rare in size: only a first start or a budget change re-ranks everything.

    ``firsts`` (a first start's backfill carries them, ``EtaPasses.carried_firsts``): the
    same UPDATE sets those charts' first ETA and bound where none is recorded, so that a
    chart written at a first start makes one new row version, not two (on PostgreSQL
    neither write is HOT: ``fair_round`` is indexed)."""
    table = connection.ops.quote_name(Chart._meta.db_table)
    items = sorted((int(cid), r) for cid, r in changes.items())  # row locks in id order: see _update_column
    firsts = firsts or {}
    if connection.vendor not in ("postgresql", "sqlite") and firsts:
        _update_columns(("eta_first_at", "eta_p90_at"), first_eta_values(firsts), where="eta_first_at IS NULL")
        firsts = {}
    # the first ETA where none is recorded, its bound with it (SET sees the row as it was)
    sets = "fair_round = d.r" + (", eta_first_at = COALESCE(c.eta_first_at, d.f), eta_p90_at = CASE WHEN "
                                 "c.eta_first_at IS NULL AND d.f IS NOT NULL THEN d.p ELSE c.eta_p90_at END"
                                 if firsts else "")
    write = {"postgresql": _write_part_postgresql, "sqlite": _write_part_sqlite}.get(connection.vendor,
                                                                                    _write_part_other)
    with connection.cursor() as cursor:
        for i in range(0, len(items), batch):
            part = items[i:i + batch]
            # each chart's (first ETA, bound), None where the chunk carries none
            fp = [tuple(map(_utc, firsts.get(cid, (None, None)))) for cid, _ in part] if firsts else None
            write(cursor, table, sets, part, fp)


def _write_part_postgresql(cursor, table: str, sets: str, part: list[tuple[int, int | None]],
                           fp: list[tuple] | None) -> None:
    """One UPDATE joined to the new values as arrays (``unnest``), the rows locked in id order first."""
    _lock_in_id_order(cursor, table, [cid for cid, _ in part])
    if fp is None:
        cursor.execute(f"UPDATE {table} AS c SET {sets} FROM unnest(%s::bigint[], %s::bigint[]) "
                       f"AS d(id, r) WHERE c.id = d.id", [[cid for cid, _ in part], [r for _, r in part]])
        return
    cursor.execute(
        f"UPDATE {table} AS c SET {sets} FROM unnest(%s::bigint[], %s::bigint[], %s::timestamptz[], "
        f"%s::timestamptz[]) AS d(id, r, f, p) WHERE c.id = d.id",
        [[cid for cid, _ in part], [r for _, r in part], [f for f, _ in fp], [p for _, p in fp]])


def _write_part_sqlite(cursor, table: str, sets: str, part: list[tuple[int, int | None]],
                       fp: list[tuple] | None) -> None:
    """One UPDATE joined to the new values as JSON (``json_each``)."""
    rows, cols = part, "json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS r"
    if fp is not None:
        text = connection.ops.adapt_datetimefield_value  # (None stays None)
        rows = [(cid, r, text(f), text(p)) for (cid, r), (f, p) in zip(part, fp)]
        cols += ", json_extract(value, '$[2]') AS f, json_extract(value, '$[3]') AS p"
    cursor.execute(f"UPDATE {table} AS c SET {sets} FROM (SELECT {cols} FROM json_each(%s)) AS d "
                   f"WHERE c.id = d.id", [json.dumps(rows)])


def _write_part_other(cursor, table: str, sets: str, part: list[tuple[int, int | None]],
                      fp: list[tuple] | None) -> None:
    """Another backend: an UPDATE a row (its first ETAs were written apart, before)."""
    cursor.executemany(f"UPDATE {table} SET fair_round = %s WHERE id = %s", [(r, cid) for cid, r in part])


def _lock_in_id_order(cursor, table: str, ids: list[int]) -> None:
    """(PostgreSQL, in a transaction) Lock the rows in id order before an ``UPDATE ... FROM
    unnest(...)``: the join locks them in its plan's order (the heap's, which updates reshuffle),
    not the array's, and two such writers over the same rows deadlocked."""
    cursor.execute(f"SELECT 1 FROM {table} WHERE id = ANY(%s::bigint[]) ORDER BY id FOR UPDATE", [ids])


def _update_column(field: str, values: list[tuple], where: str = "") -> int:
    """``UPDATE chart SET <field> = v WHERE id = pk [AND <where>]`` for each ``(v, pk)``
    (:func:`_update_columns` of one column)."""
    return _update_columns((field,), values, where)


def _update_columns(fields: tuple[str, ...], values: list[tuple], where: str = "") -> int:
    """``UPDATE chart SET <f1> = v1, <f2> = v2, ... WHERE id = pk [AND <where>]`` for each
    ``(v1, v2, ..., pk)``, one prepared statement run for all (``executemany``): one new
    version of each row whatever the number of columns. ``bulk_update`` builds a CASE
    expression per row in Python: 100k fair rounds (a fresh backlog's first dispatch)
    took minutes; this takes a second. Scheduler-owned columns only: ``updated_at`` is
    left alone on purpose (no resync needs to see them).

    Rows are updated in id order, as :func:`_write_chart_rounds` does: the first ETAs
    (their own thread and connection) and a first start's rounds (the scheduler's) update
    the same rows at the same time, and PostgreSQL found deadlocks when each took its row
    locks in another order."""
    values = sorted(values, key=itemgetter(-1))
    qn = connection.ops.quote_name
    meta = Chart._meta
    table, pk_column = qn(meta.db_table), qn(meta.pk.column)
    columns = [meta.get_field(f) for f in fields]
    done = 0
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # One statement per 50k rows: PostgreSQL joins the columns as arrays (executemany
            # there is a round trip per row, 16 s for 100k rounds).
            sets = ", ".join(f"{qn(c.column)} = v.c{i}" for i, c in enumerate(columns))
            arrays = "".join(f", %s::{c.db_type(connection)}[]" for c in columns)
            names = "".join(f", c{i}" for i in range(len(columns)))
            sql = (f"UPDATE {table} AS t SET {sets} FROM unnest(%s::bigint[]{arrays}) AS v(pk{names}) "
                   f"WHERE t.{pk_column} = v.pk" + (f" AND t.{where}" if where else ""))
            for start in range(0, len(values), 50_000):
                chunk = values[start:start + 50_000]
                pks = [v[-1] for v in chunk]
                _lock_in_id_order(cursor, table, pks)
                cursor.execute(sql, [pks, *([v[i] for v in chunk] for i in range(len(columns)))])
                done += max(0, cursor.rowcount)
            return done
        adapts = [connection.ops.adapt_datetimefield_value if c.get_internal_type() == "DateTimeField" else None
                  for c in columns]
        sets = ", ".join(f"{qn(c.column)} = %s" for c in columns)
        sql = f"UPDATE {table} SET {sets} WHERE {pk_column} = %s" + (f" AND {where}" if where else "")
        for start in range(0, len(values), 5000):
            cursor.executemany(sql, [tuple(a(x) if a else x for a, x in zip(adapts, v[:-1])) + (v[-1],)
                                     for v in values[start:start + 5000]])
            done += max(0, cursor.rowcount)
    return done
