"""One row inserted in one statement that returns its id, optionally ``ON CONFLICT DO NOTHING``:
where a look-up before the insert (or an ``IntegrityError`` and a savepoint after it) cost a
round trip or three, the unique constraint answers in the insert itself (docs/api.md,
"Round trips")."""
from __future__ import annotations

from contextlib import nullcontext

from django.db import models, router, transaction
from django.db.models.constants import OnConflict
from django.db.models.sql import InsertQuery


def insert_one(obj: models.Model, *, ignore_conflicts: bool = False, returning: tuple[str, ...] = ()) -> bool:
    """Insert ``obj`` as ``Model.save(force_insert=True)`` writes it (each field's ``pre_save``:
    defaults, ``auto_now``), and set its primary key. ``ignore_conflicts``: PostgreSQL's
    ``ON CONFLICT DO NOTHING``, SQLite's ``INSERT OR IGNORE`` (which also skips a row a NOT NULL
    or CHECK constraint refuses: the caller's rows must satisfy those); False when a unique
    constraint held the row out, nothing written. ``returning``: fields given as expressions (a
    subquery) whose values the insert returns and sets on ``obj``. Sends no ``pre_save``/``post_save``
    (``Model.save`` is not called: a caller with a receiver's work to do does it itself).

    Outside a transaction the statement is its own; inside one it runs under a savepoint, so
    that a refused insert (an ``IntegrityError``) leaves the caller's transaction usable, as
    ``transaction.atomic()`` around ``save`` did."""
    meta = obj._meta
    conn = transaction.get_connection(router.db_for_write(type(obj), instance=obj))
    query = InsertQuery(type(obj), on_conflict=OnConflict.IGNORE if ignore_conflicts else None)
    query.insert_values([f for f in meta.local_concrete_fields if f is not meta.auto_field], [obj])
    compiler = query.get_compiler(connection=conn)
    extra = [meta.get_field(name) for name in returning]
    compiler.returning_fields = [meta.pk, *extra]
    [(statement, params)] = compiler.as_sql()
    with transaction.atomic(using=conn.alias) if conn.in_atomic_block else nullcontext():
        with conn.cursor() as cursor:
            cursor.execute(statement, params)
            row = cursor.fetchone()
    if row is None:
        return False
    obj.pk = row[0]
    for field, value in zip(extra, row[1:]):
        setattr(obj, field.attname, value)
    obj._state.adding, obj._state.db = False, conn.alias
    return True
