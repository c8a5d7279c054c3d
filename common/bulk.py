"""``insert_rows(model, rows)``: what ``QuerySet.bulk_create`` writes for new plain rows, at a
fraction of its cost.

For 1,000 new charts ``bulk_create`` took 200-250 ms here: most of it Python (a model
instance per row, ~70 us each with its 31 defaults and two signals, then each of the 31
values of each row through the SQL compiler's expression checks), and on SQLite 32
statements (Django assumes 999 parameters a statement; this SQLite allows 250,000).

Here a row is a mapping of the values it sets (``{"org_id": 3, "payload": {...}}``); every
other field takes what an unsaved instance has, computed once for the batch: its default,
or for ``auto_now``/``auto_now_add`` the time of the call. Each value is prepared by its
field's own ``get_db_prep_save``, as the compiler does, a value repeated down a column
prepared once; the rows go in one ``INSERT ... RETURNING`` per chunk that fits the
database's parameter limit, in the caller's transaction. On PostgreSQL the chunk is one
array a column (``INSERT ... SELECT * FROM UNNEST(%s::bigint[], ...)``, as Django's own
compiler writes a ``bulk_create`` since 5.2): a ``VALUES`` list of 1,000 charts is 32,000
placeholders, which psycopg parsed client-side and PostgreSQL planned on every call, 320 ms a
batch of 1,000 against 45 ms unnested (below). The pks come back in the order of
the rows, as ``bulk_create`` reads them on SQLite and PostgreSQL. No ``save()``, no signal
(as ``bulk_create``). Only for plain rows: a value that is an expression, a field whose
``pre_save`` does more than read the value (a file, ``auto_now``) given in a row, a
``db_default`` or multi-table inheritance is refused (``ValueError``).
"""
from __future__ import annotations

import datetime
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connections, models
from django.db.models.expressions import Expression

_CACHEABLE = (str, int, float, bool, type(None), datetime.datetime, datetime.date)
POSTGRES_MAX_PARAMS = 65_535


def max_params(connection) -> int:
    """The parameters one statement may take on ``connection``'s database."""
    if connection.vendor == "sqlite":
        connection.ensure_connection()
        try:
            return connection.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        except AttributeError:  # Python < 3.11
            return connection.features.max_query_params
    if connection.vendor == "postgresql":
        return POSTGRES_MAX_PARAMS
    return connection.features.max_query_params or POSTGRES_MAX_PARAMS


def _plain(field: models.Field) -> bool:
    """Its ``pre_save`` only reads the value (so a row may give it)."""
    if isinstance(field, (models.DateField, models.TimeField)):
        return not (field.auto_now or field.auto_now_add)
    return type(field).pre_save is models.Field.pre_save


def _unnest_types(fields: Sequence[models.Field], connection) -> list[str] | None:
    """Each column's array element type for ``UNNEST`` on PostgreSQL, or None where a field
    cannot go in an array of plain values (Django's own conditions: a field with its own
    placeholder, or a type the backend does not name)."""
    if connection.vendor != "postgresql":
        return None
    types = []
    for field in fields:
        internal = (field.target_field if field.is_relation else field).get_internal_type()
        if hasattr(field, "get_placeholder") or internal not in connection.data_types:
            return None
        types.append(field.db_type(connection).split("(")[0])  # varchar[], not varchar(200)[]
    return types


def insert_rows(model: type[models.Model], rows: Sequence[Mapping[str, Any]], using: str = "default") -> list[int]:
    """Insert ``rows`` (mappings of field attnames to values) into ``model``'s table; their pks, in order."""
    if not rows:
        return []
    connection = connections[using]
    fields = _insertable_fields(model, connection)
    given: set[str] = set().union(*(row.keys() for row in rows))
    _check_given(model, fields, given)
    params_rows = _prepared_rows(model, fields, given, rows, connection)
    pks = _insert(model, fields, params_rows, connection)
    if len(pks) != len(rows):
        raise RuntimeError(f"insert_rows: {len(rows)} rows inserted, {len(pks)} pks returned")
    return pks


def _insertable_fields(model: type[models.Model], connection) -> list:
    """The model's columns but its pk, when a plain INSERT ... RETURNING can write them all."""
    opts = model._meta
    if opts.parents or not connection.features.can_return_rows_from_bulk_insert:
        raise ValueError(f"insert_rows: {opts.label} needs bulk_create (inheritance, or no RETURNING)")
    fields = [f for f in opts.concrete_fields if not f.primary_key]
    if any(getattr(f, "db_default", models.NOT_PROVIDED) is not models.NOT_PROVIDED for f in fields):
        raise ValueError(f"insert_rows: {opts.label} has a db_default; use bulk_create")
    return fields


def _check_given(model: type[models.Model], fields: list, given: set[str]) -> None:
    by_name = {f.attname: f for f in fields}
    for name in given:
        if name not in by_name or not _plain(by_name[name]):
            raise ValueError(f"insert_rows: {model._meta.label}.{name} cannot be given in a row (unknown, the pk, "
                             "or set by its field's pre_save)")


def _prepared_rows(model: type[models.Model], fields: list, given: set[str], rows: Sequence[Mapping[str, Any]],
                   connection) -> list[list[Any]]:
    """Each row's values for the database, every column: a value left out takes the field's
    default (the defaults and auto_now's time prepared once), and a repeated plain value
    (an org's id, a workflow's) is prepared once."""
    template = model()  # the defaults, and auto_now / auto_now_add's time, once
    base = {f.attname: f.get_db_prep_save(f.pre_save(template, True), connection)
            for f in fields if f.attname not in given}
    prepared: dict[tuple[str, type, Any], Any] = {}

    def prep(name: str, field, value: Any) -> Any:
        if isinstance(value, Expression):
            raise ValueError(f"insert_rows: {model._meta.label}.{name} is an expression; use bulk_create")
        if not isinstance(value, _CACHEABLE):
            return field.get_db_prep_save(value, connection)
        key = (name, type(value), value)
        if key not in prepared:
            prepared[key] = field.get_db_prep_save(value, connection)
        return prepared[key]

    missing = object()
    out = []
    for row in rows:
        values = []
        for field in fields:
            name = field.attname
            value = row.get(name, missing)
            if value is not missing:
                values.append(prep(name, field, value))
            elif name in base:
                values.append(base[name])
            else:
                values.append(field.get_db_prep_save(field.get_default(), connection))
        out.append(values)
    return out


def _insert(model: type[models.Model], fields: list, params_rows: list[list[Any]], connection) -> list[int]:
    """The INSERTs, as many rows each as the backend's parameters allow; on PostgreSQL one
    array a column (``UNNEST``). The pks in order."""
    opts = model._meta
    qn = connection.ops.quote_name
    head = f"INSERT INTO {qn(opts.db_table)} ({', '.join(qn(f.column) for f in fields)}) "
    tail = f" RETURNING {qn(opts.pk.column)}"
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    per = max(1, max_params(connection) // len(fields))
    unnest = _unnest_types(fields, connection)
    pks: list[int] = []
    with connection.cursor() as cursor:
        for start in range(0, len(params_rows), per):
            chunk = params_rows[start:start + per]
            if unnest and len(chunk) > 1:
                # one parameter a column; the rows come out of UNNEST, and RETURNING, in order
                arrays = ", ".join(f"(%s)::{t}[]" for t in unnest)
                cursor.execute(f"{head}SELECT * FROM UNNEST({arrays}){tail}", [list(c) for c in zip(*chunk)])
            else:
                cursor.execute(f"{head}VALUES {', '.join([one] * len(chunk))}{tail}",
                               [v for values in chunk for v in values])
            pks.extend(r[0] for r in cursor.fetchall())
    return pks
