"""Statements whose SQL the ORM builds once per connection, then sent with each call's values.

Building a statement is most of a single submission's Python: the API key's read (a join to
its org) and the chart's insert (32 columns and a subquery) took about 2 of the request's 3-4 ms
of CPU in the ORM's query building and SQL compiling, for two statements whose text never
changes (docs/api.md, "Where the time goes"). Here the ORM still writes the SQL, from the same
queryset the code would run, once per database connection (each gunicorn thread has its own),
with placeholder values standing for the call's; each call sends that text with its own values,
and builds the rows' objects as the ORM's own iterator does (the columns' converters, the
``select_related`` models). The statement, its parameters and the objects are the ORM's: only
the building is skipped.
"""
from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from django.db import connections, models
from django.db.models.query import get_related_populators

_CACHE_ATTR = "_fairsched_compiled"


def per_connection(alias: str) -> dict:
    """A cache that lives as long as the connection's wrapper of this thread (``connections[alias]``)."""
    wrapper = connections[alias]
    cache = wrapper.__dict__.get(_CACHE_ATTR)
    if cache is None:
        cache = wrapper.__dict__[_CACHE_ATTR] = {}
    return cache


def placeholders(names: tuple[str, ...]) -> dict[str, str]:
    """A text no caller sends for each of ``names``, to find where its value goes in the parameters."""
    token = secrets.token_hex(12)
    return {name: f"fairsched-placeholder-{name}-{token}" for name in names}


class CompiledSelect:
    """``build(**values)``'s first row, the queryset's SQL built once per connection.

    ``build`` takes text values named ``names`` and returns a queryset (``select_related``
    allowed, no annotations). Each value must reach the statement as one parameter, unchanged
    (text compared with ``=``: ``key_hash=...``); checked when the statement is built."""

    def __init__(self, build: Callable[..., models.QuerySet], *names: str) -> None:
        self.build = build
        self.names = names

    def _compile(self, alias: str) -> tuple:
        marks = placeholders(self.names)
        compiler = self.build(**marks).query.get_compiler(using=alias)
        sql, params = compiler.as_sql()
        by_mark = {mark: name for name, mark in marks.items()}
        slots = [(True, by_mark[p]) if isinstance(p, str) and p in by_mark else (False, p) for p in params]
        if sorted(name for named, name in slots if named) != sorted(self.names):
            raise ValueError(f"{self.names}: each must be one parameter of the statement: {sql}")
        if compiler.annotation_col_map:
            raise ValueError("annotations are not supported")
        select, klass_info = compiler.select, compiler.klass_info
        start, end = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
        init_list = [f[0].target.attname for f in select[start:end]]
        converters = compiler.get_converters([s[0] for s in select[:compiler.col_count]])
        return (sql, slots, compiler, klass_info["model"], init_list, (start, end),
                get_related_populators(klass_info, select, alias), converters)

    def first(self, using: str = "default", **values: str) -> models.Model | None:
        cache = per_connection(using)
        plan = cache.get(self)
        if plan is None:
            plan = cache[self] = self._compile(using)
        sql, slots, compiler, model, init_list, (start, end), populators, converters = plan
        params = [values[v] if named else v for named, v in slots]
        with connections[using].cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if row is None:
            return None
        if converters:
            row = next(iter(compiler.apply_converters([row], converters)))
        obj = model.from_db(using, init_list, row[start:end])
        for populator in populators:
            populator.populate(row, obj)
        return obj


class CompiledRows:
    """The rows of ``build()``, a ``values_list`` queryset whose parameters never change (a whole
    small table, a join, fixed filters), its SQL built once per connection: the scheduler reads
    its small tables (settings, pools, orgs, costs, duration estimates) at every resync, and the
    ORM's building of their eight statements cost more than running them (``bench/scheduler.py``,
    docs/scale.md). Each row is a tuple, converted by the columns' own converters
    (a JSON column decoded, a duration made a ``timedelta``), as ``values_list`` returns it."""

    def __init__(self, build: Callable[[], models.QuerySet]) -> None:
        self.build = build

    def _compile(self, alias: str) -> tuple:
        compiler = self.build().query.get_compiler(using=alias)
        sql, params = compiler.as_sql()
        converters = compiler.get_converters([s[0] for s in compiler.select[:compiler.col_count]])
        return sql, tuple(params), compiler, converters

    def rows(self, using: str = "default") -> list[tuple]:
        cache = per_connection(using)
        plan = cache.get(self)
        if plan is None:
            plan = cache[self] = self._compile(using)
        sql, params, compiler, converters = plan
        with connections[using].cursor() as cursor:
            cursor.execute(sql, params)
            got = cursor.fetchall()
        if converters:
            return [tuple(row) for row in compiler.apply_converters(got, converters)]
        return got


class PkWhere:
    """The primary key of ``model``'s row whose fields equal ``match`` (text), as a subquery of an
    insert (``SELECT id FROM ... WHERE name = %s LIMIT 1``): NULL when there is none. Built only
    when the insert's SQL is (``common.insert_one`` builds it once per connection)."""

    def __init__(self, model: type[models.Model], **match: str) -> None:
        self.model = model
        self.match = match
        self.shape = (model, tuple(sorted(match)))

    def subquery(self, match: dict[str, Any] | None = None) -> models.Subquery:
        return models.Subquery(self.model._default_manager.filter(**(match or self.match)).values("pk")[:1])

    def resolve_expression(self, *args: Any, **kwargs: Any) -> Any:
        return self.subquery().resolve_expression(*args, **kwargs)

    def __repr__(self) -> str:
        return f"PkWhere({self.model.__name__}, {self.match!r})"
