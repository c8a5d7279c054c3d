"""PostgreSQL's planner statistics of the charts' table, refreshed at start-up when stale;
and the dead row versions a first start's backfill leaves, swept and vacuumed.

Right after a bulk load (an import, a restore, a first deployment over an existing
backlog) the table has no statistics until autovacuum gets to it, up to a minute or more
later. Without them the planner estimates one row for every condition and takes the
smallest index that fits the first columns: a start's head read (``db.read_head``) then
answered "has this org a queued chart with a round?" through ``chart_org_state`` (org,
state), reading every queued chart of the org, instead of through ``chart_org_head``
(org, state, priority, fair_round, ...), which answers it from one index page. At 1M
queued that made the head read 3.7 s on PostgreSQL against 0.24 s on SQLite, whose
planner needs no statistics for it (bench/pg_startup.py measures both, and this).

With statistics, the first-start query of an org's first charts by ``(created_at, id)``
went to ``chart_state_created`` (state, created_at, id), reading every org's queued
charts until it had 251 of this one's: fine for the largest org, a walk through most of
the backlog for a small one. It orders by ``(fair_round, created_at, id)`` now (NULL rounds
in all of them), the order of ``chart_org_head``'s rows of the org, which the planner
then takes with or without statistics.

So a scheduler's start runs ``ANALYZE`` on the table first when its statistics are missing
or stale (:func:`analyze_if_stale`): it samples 30,000 rows whatever the table's size,
a fraction of a second at 1M, and takes a lock that neither reads nor writes wait for
(autovacuum, which takes the same, gives way to it); but when the statistics still count
the rows right and the rows only changed in place (a restart amid a first start's backfill),
the plans stand, and it runs in a thread of its own while the head is read. SQLite: nothing
to do.
"""
from __future__ import annotations

import logging
import threading
import time

from django.db import DatabaseError, connection, transaction

from charts.models import Chart
from orgs.models import Org

log = logging.getLogger("fairsched.engine")

ANALYZE_MIN_ROWS = 10_000  # fewer rows changed since the last statistics: not worth a wait
STALE_FRACTION = 0.2       # statistics older than this share of the table's rows changed are stale


def analyze_if_stale(min_rows: int = ANALYZE_MIN_ROWS, *, defer_in_place: bool = False) -> bool:
    """``ANALYZE`` the charts' table if it was never analyzed and ``min_rows`` rows changed,
    or if more than :data:`STALE_FRACTION` of its rows (and ``min_rows``) changed since; True
    if it ran. Never raises: a failure (a lock not granted within 2 s, say) is logged and
    the start goes on without.

    ``defer_in_place`` (a start, before its head read): when the statistics exist and still
    count the table's rows right (the planner's ``reltuples`` within :data:`STALE_FRACTION`
    of the live rows), the rows changed in place (a backfill writing rounds, dispatches):
    the plans of the head's probes stand, so the ``ANALYZE`` runs in a thread and connection
    of its own instead of before the read (0.2-0.3 s of a restart at 1M), and this returns
    False. A bulk load or purge (the row count wrong) is analyzed first, as without."""
    if connection.vendor != "postgresql":
        return False
    table = Chart._meta.db_table
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT s.n_live_tup, s.n_mod_since_analyze, coalesce(s.last_analyze, s.last_autoanalyze), "
                           "c.reltuples FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
                           "WHERE s.relid = %s::regclass", [table])
            row = cursor.fetchone()
        if row is None:
            return False
        live, changed, analyzed_at, planned_rows = row
        if changed < min_rows or (analyzed_at is not None and changed <= STALE_FRACTION * live):
            return False
        if defer_in_place and analyzed_at is not None and abs(planned_rows - live) <= STALE_FRACTION * live:
            threading.Thread(target=_analyze_aside, name="fairsched-analyze", daemon=True).start()
            log.info("ANALYZE %s in the background: %s rows changed in place since its last statistics (%s)",
                     table, f"{changed:,}", analyzed_at)
            return False
        started = time.monotonic()
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '2s'")
            cursor.execute("SET LOCAL statement_timeout = '60s'")
            cursor.execute(f"ANALYZE {connection.ops.quote_name(table)}")
    except DatabaseError as exc:
        log.warning("the charts' planner statistics were not refreshed (%s); start-up goes on without", exc)
        return False
    log.info("ANALYZE %s: %s rows changed since its last statistics (%s), %.2f s", table, f"{changed:,}",
             analyzed_at or "none yet", time.monotonic() - started)
    return True


def _analyze_aside() -> None:
    """``ANALYZE`` of the charts from a thread of its own, on its own connection (closed after)."""
    try:
        analyze_if_stale(min_rows=0)
    finally:
        connection.close()


def vacuum_after_backfill() -> bool:
    """``VACUUM (ANALYZE)`` the charts' table, once a first start's backfill has written every
    chart's round: each chunk's ``UPDATE`` left a dead version of its rows and of their index
    entries, and until a vacuum a restart's head read walks them (the "has this org a chart
    without a round?" probe read 2,855 pages for none, 105 ms, at 1M; bench/pg_startup.py).
    Autovacuum gets there too, a minute or more later; a restart in that minute took 1.1 s
    to read its head instead of 0.2 s. Run from a thread of its own (it takes seconds at 1M,
    and a lock that neither reads nor writes wait for). True if it ran; never raises. SQLite:
    nothing to do."""
    if connection.vendor != "postgresql":
        return False
    table = Chart._meta.db_table
    started = time.monotonic()
    try:
        with connection.cursor() as cursor:  # autocommit: VACUUM cannot run in a transaction
            cursor.execute("SET lock_timeout = '2s'")
            try:
                cursor.execute(f"VACUUM (ANALYZE) {connection.ops.quote_name(table)}")
            finally:
                cursor.execute("SET lock_timeout = 0")
    except DatabaseError as exc:
        log.warning("the charts' table was not vacuumed after the backfill (%s); autovacuum will", exc)
        return False
    log.info("VACUUM (ANALYZE) %s after the first start's backfill, %.2f s", table, time.monotonic() - started)
    return True


def sweep_unrounded_heads(orgs: list[int] | None = None) -> None:
    """Probe, for every org (or those of ``orgs``: a chunk's), its first queued chart without
    a round, as a restart's head read does (``chart_org_head``, in its order): run after
    each chunk of a backfill, so that the index entries that chunk's ``UPDATE`` left dead
    are marked dead now (an index scan that meets a row version no transaction can see any
    more marks its entry, and later scans skip it without reading the table). Else, until
    the vacuum at the backfill's end, a restart's head read met every chart the backfill had
    written so far, in the table: about 1 s of a restart at 1M (bench/pg_startup.py: 2,859
    pages read for none, for one org). One statement, a short index scan an org. Never
    raises. SQLite: nothing to do."""
    if connection.vendor != "postgresql":
        return
    chart, org = (connection.ops.quote_name(t) for t in (Chart._meta.db_table, Org._meta.db_table))
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT o.id, (SELECT c.id FROM {chart} c WHERE c.org_id = o.id AND c.state = %s "
                f"AND c.priority = false AND c.fair_round IS NULL ORDER BY c.fair_round, c.created_at, c.id "
                f"LIMIT 1) FROM {org} o" + ("" if orgs is None else " WHERE o.id = ANY(%s)"),
                ["queued"] + ([] if orgs is None else [orgs]))
            cursor.fetchall()
    except DatabaseError as exc:
        log.warning("the backfill's dead index entries were not swept (%s)", exc)
