"""One row inserted in one statement that returns its id, optionally ``ON CONFLICT DO NOTHING``:
where a look-up before the insert (or an ``IntegrityError`` and a savepoint after it) cost a
round trip or three, the unique constraint answers in the insert itself (docs/api.md,
"Round trips"). The statement's SQL is built once per connection and shape
(``common.compiled``), not at each insert."""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from django.db import models, router, transaction
from django.db.models.constants import OnConflict
from django.db.models.sql import InsertQuery

from common.compiled import PkWhere, per_connection, placeholders

_UNCACHED = object()


def _compile(obj: models.Model, conn, ignore_conflicts: bool, returning: tuple[str, ...]) -> tuple[str, list]:
    """The ORM's own statement for ``obj`` (what ``Model.save(force_insert=True)`` writes)."""
    meta = obj._meta
    query = InsertQuery(type(obj), on_conflict=OnConflict.IGNORE if ignore_conflicts else None)
    query.insert_values([f for f in meta.local_concrete_fields if f is not meta.auto_field], [obj])
    compiler = query.get_compiler(connection=conn)
    compiler.returning_fields = [meta.pk, *(meta.get_field(name) for name in returning)]
    [(statement, params)] = compiler.as_sql()
    return statement, list(params)


def _plan(obj: models.Model, fields: list, values: list, conn, ignore_conflicts: bool,
          returning: tuple[str, ...]) -> tuple[str, list] | None:
    """The statement built once for inserts of ``obj``'s shape, and where each parameter comes
    from: ``(i, None)`` field ``i``'s value, ``(i, key)`` the ``PkWhere`` of field ``i``'s
    ``match[key]``. None when the ORM's parameters are not one a field and the ``PkWhere``s'
    (a field with its own placeholder, say): such inserts are built each time."""
    if any(getattr(f, "get_placeholder", None) is not None for f in fields):
        return None
    marks: dict[str, tuple[int, str]] = {}
    saved = {}
    try:
        for i, (f, v) in enumerate(zip(fields, values)):
            if isinstance(v, PkWhere):
                named = placeholders(tuple(v.match))
                marks.update({mark: (i, key) for key, mark in named.items()})
                saved[f.attname] = getattr(obj, f.attname)
                setattr(obj, f.attname, PkWhere(v.model, **named))
        statement, params = _compile(obj, conn, ignore_conflicts, returning)
    finally:
        for attname, value in saved.items():
            setattr(obj, attname, value)
    plain = iter(i for i, v in enumerate(values) if not isinstance(v, PkWhere))
    slots: list[tuple[int, str | None]] = []
    for p in params:
        if isinstance(p, str) and p in marks:
            slots.append(marks[p])
            continue
        i = next(plain, None)
        if i is None or type(p) is not type(fields[i].get_db_prep_save(values[i], connection=conn)):
            return None
        slots.append((i, None))
    if next(plain, None) is not None or len({s for s in slots if s[1] is not None}) != len(marks):
        return None
    return statement, slots


def _statement(obj: models.Model, conn, ignore_conflicts: bool, returning: tuple[str, ...]) -> tuple[str, list]:
    meta = obj._meta
    fields = [f for f in meta.local_concrete_fields if f is not meta.auto_field]
    values = [f.pre_save(obj, add=True) for f in fields]  # defaults, auto_now: as the ORM's insert
    if any(hasattr(v, "resolve_expression") and not isinstance(v, PkWhere) for v in values):
        return _compile(obj, conn, ignore_conflicts, returning)
    shape = (type(obj), ignore_conflicts, returning,
             tuple((i, v.shape) for i, v in enumerate(values) if isinstance(v, PkWhere)))
    cache = per_connection(conn.alias)
    plan = cache.get(shape, _UNCACHED)
    if plan is _UNCACHED:
        plan = cache[shape] = _plan(obj, fields, values, conn, ignore_conflicts, returning)
    if plan is None:
        return _compile(obj, conn, ignore_conflicts, returning)
    statement, slots = plan
    params: list[Any] = [values[i].match[key] if key is not None else fields[i].get_db_prep_save(values[i], connection=conn)
                         for i, key in slots]
    return statement, params


def insert_one(obj: models.Model, *, ignore_conflicts: bool = False, returning: tuple[str, ...] = ()) -> bool:
    """Insert ``obj`` as ``Model.save(force_insert=True)`` writes it (each field's ``pre_save``:
    defaults, ``auto_now``), and set its primary key. ``ignore_conflicts``: PostgreSQL's
    ``ON CONFLICT DO NOTHING``, SQLite's ``INSERT OR IGNORE`` (which also skips a row a NOT NULL
    or CHECK constraint refuses: the caller's rows must satisfy those); False when a unique
    constraint held the row out, nothing written. ``returning``: fields given as expressions (a
    subquery, ``common.compiled.PkWhere``) whose values the insert returns and sets on ``obj``.
    Sends no ``pre_save``/``post_save`` (``Model.save`` is not called: a caller with a receiver's
    work to do does it itself).

    Outside a transaction the statement is its own; inside one it runs under a savepoint, so
    that a refused insert (an ``IntegrityError``) leaves the caller's transaction usable, as
    ``transaction.atomic()`` around ``save`` did."""
    meta = obj._meta
    conn = transaction.get_connection(router.db_for_write(type(obj), instance=obj))
    statement, params = _statement(obj, conn, ignore_conflicts, returning)
    with transaction.atomic(using=conn.alias) if conn.in_atomic_block else nullcontext():
        with conn.cursor() as cursor:
            cursor.execute(statement, params)
            row = cursor.fetchone()
    if row is None:
        return False
    obj.pk = row[0]
    for name, value in zip(returning, row[1:]):
        setattr(obj, meta.get_field(name).attname, value)
    obj._state.adding, obj._state.db = False, conn.alias
    return True
