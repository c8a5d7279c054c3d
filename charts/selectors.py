"""Reads of the charts that the web apps share (``dashboard``, ``api``, ``monitoring``): the
scheduler's latest snapshot and how old it is, an org's charts with their states, positions
and ETAs (its status), and the duration estimates as the database holds them.

The scheduler's snapshot (:mod:`common.snapshot`) is the source when it is live. A snapshot
older than a few ETA intervals (:func:`stale_after_s`) is never shown as live: the reads fall
back to the database and say ``"stale": true`` with the snapshot's ``age_s``.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Any, Callable

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from charts.models import Chart, ChartState, DurationStat
from common import clear_notes
from common.compiled import CompiledRows
from common import snapshot as snap
from control.models import DEFAULT_POOL, Pool, SchedulerSettings
from scheduling import Durations
from scheduling.pools import CEILING, Limit, Pools, demand_of
from orgs.models import Org, OrgPoolLimit, Workflow, WorkflowCost

ORG_STATUS_MAX = 5000  # the most charts one org_status page holds
DURATIONS_TTL_S = 1.0

_lock = threading.Lock()


# --- the duration estimates ---------------------------------------------------------------


def read_durations() -> Durations:
    """The duration estimates the ETA pass uses, as the database holds them
    (docs/scheduling.md, "The duration estimate"): (org, workflow), (org, None) the org's,
    (None, workflow) the workflow's over all orgs, each the decaying mean of
    :class:`DurationStat` (``counts``: its all-time count); ``expected``: workflow name ->
    declared seconds. Small tables, read whole: the scheduler reads them with the other small
    tables (start-up and every resync), the web pages when they show an estimate."""
    averages: dict[tuple[str | None, str | None], float] = {}
    counts: dict[tuple[str | None, str | None], int] = {}
    for org, wf, count, mean in _STATS.rows():
        if count:
            key = (None if org is None else str(org), wf)
            averages[key], counts[key] = mean, count
    expected = {name: float(s) for name, s in _EXPECTED.rows()}
    return Durations(averages, expected=expected, counts=counts)


# The small tables' reads, their SQL built once per connection (common.compiled.CompiledRows):
# the scheduler reads them at every resync.
_STATS = CompiledRows(lambda: DurationStat.objects.values_list("org_id", "workflow__name", "count", "mean_s"))
_EXPECTED = CompiledRows(lambda: Workflow.objects.filter(expected_duration_s__isnull=False)
                         .values_list("name", "expected_duration_s"))
_POOLS = CompiledRows(lambda: Pool.objects.values_list("name", "capacity"))
_COSTS = CompiledRows(lambda: WorkflowCost.objects.values_list("org_id", "workflow__name", "cost", "pools"))
_LIMITS = CompiledRows(lambda: OrgPoolLimit.objects.values_list("org_id", "pool", "max", "min"))


_durations_cache: dict[str, Any] = {"at": 0.0, "value": None}


def cached_durations() -> Durations:
    """:func:`read_durations`, re-read at most once a second per process (status.json names
    each chart's estimate source from it: two small queries, not two per request)."""
    with _lock:
        if _durations_cache["value"] is not None and time.monotonic() - _durations_cache["at"] < DURATIONS_TTL_S:
            return _durations_cache["value"]
    value = read_durations()
    with _lock:
        _durations_cache.update(at=time.monotonic(), value=value)
    return value


def estimate_sources(org: Org) -> Callable[[str | None], str]:
    """workflow -> where the org's estimate for it comes from (:data:`scheduling.types.SOURCES`)."""
    est, key, seen = cached_durations(), str(org.pk), {}

    def source(workflow: str | None) -> str:
        if workflow not in seen:
            seen[workflow] = est.source(key, workflow).kind
        return seen[workflow]
    return source


def clear_caches() -> None:
    """Forget the estimates (tests; a Redis flushed under a running process)."""
    with _lock:
        _durations_cache["value"] = None
        _pools_cache.update(key=None, value=None)


# --- the snapshot and its age -------------------------------------------------------------


_interval_cache: dict[str, float] = {"at": -1e9, "value": 3.0}


def forget_interval() -> None:
    """Read the ETA interval again at the next :func:`stale_after_s` (it is kept 5 s): a
    settings change seen at once (tests)."""
    _interval_cache["at"] = -1e9


def stale_after_s() -> float:
    """How old a snapshot may be before it is stale: a few ETA intervals (the scheduler
    publishes one per pass), never less than ``FAIRSCHED_STALE_MIN_S``."""
    if time.monotonic() - _interval_cache["at"] > 5.0:
        try:
            _interval_cache["value"] = float(SchedulerSettings.get().eta_interval_s)
        except Exception:  # noqa: BLE001 - keep the last known interval
            pass
        _interval_cache["at"] = time.monotonic()
    return max(float(settings.FAIRSCHED_STALE_MIN_S), settings.FAIRSCHED_STALE_INTERVALS * _interval_cache["value"])


def snapshot_age_s(s: dict[str, Any]) -> float | None:
    """Seconds since the scheduler published ``s`` (its ``now``), or last confirmed it
    still current (nothing changed since: a static backlog is not re-published)."""
    try:
        return max(0.0, time.time() - float(snap.confirmed_at(s)))
    except (KeyError, TypeError, ValueError):
        return None


def read_snapshot_with_age() -> tuple[dict[str, Any] | None, float | None, bool]:
    """``(snapshot, age_s, stale)`` of the latest snapshot, stale or not."""
    try:
        s = snap.read_snapshot()
    except Exception:  # noqa: BLE001
        s = None
    if s is None:
        return None, None, False
    age = snapshot_age_s(s)
    return s, age, age is None or age > stale_after_s()


def read_live_snapshot() -> dict[str, Any] | None:
    """The scheduler's latest snapshot if it is live; None when there is none (never published,
    expired, Redis down) or it is stale (the scheduler stopped publishing): old numbers are
    never shown as live."""
    s, _, stale = read_snapshot_with_age()
    return None if stale else s


def round_age(age: float | None) -> float | None:
    """A snapshot's age as the pages show it (a tenth of a second)."""
    return None if age is None else round(age, 1)


# --- capacity pools: why a chart waits (docs/scheduling.md, "Pools") -----------------------


def read_pools(budget: int | None = None) -> Pools | None:
    """The capacity pools (docs/scheduling.md, "Pools"), as the scheduler reads them with its
    settings and the pages show them: each pool's capacity (``default``, the budget: given,
    or read), what each (org id as text, workflow name) draws on (a plain cost ``c``:
    ``{"default": c}``) and the orgs' limits. None while none is set up: no pool, no cost
    drawing on one, no limit. A cost naming a pool that no longer exists draws on a pool of
    no room: its charts are blocked."""
    capacity = dict(_POOLS.rows())
    rows = _COSTS.rows()
    limits = {(str(o), p): Limit(mx, mn) for o, p, mx, mn in _LIMITS.rows()}
    if not capacity and not limits and not any(pools for *_, pools in rows):
        return None
    demands = {(str(o), w): demand_of(pools) if pools else ((DEFAULT_POOL, c),) for o, w, c, pools in rows}
    budget = SchedulerSettings.get().budget if budget is None else budget
    return Pools({DEFAULT_POOL: budget, **capacity}, demands, limits)


def never_note(pools: Pools, org: int, workflow: str | None) -> str | None:
    """Why a blocked chart of ``org`` running ``workflow`` never starts under these pools
    (:meth:`scheduling.pools.Pools.never` in words, :func:`common.clear_notes.never_in_pool`);
    None if it could start."""
    demand = pools.demand(str(org), workflow)
    wait = pools.never(str(org), demand)
    if wait is None:
        return None
    units = dict(demand)[wait.pool]
    if wait.reason == CEILING:
        return clear_notes.never_in_pool(wait.pool, units, pools.capacity.get(wait.pool),
                                         ceiling=pools.ceiling(str(org), wait.pool))
    return clear_notes.never_in_pool(wait.pool, units, pools.capacity.get(wait.pool))


def pool_heads(s: dict[str, Any], pools: Pools | None) -> dict[int, dict[str, Any]]:
    """The charts at the head of a pool in snapshot ``s`` (each pool's ``blocked_by``): per
    chart id its ``org`` (id), ``org_name``, ``external_id``, ``pools`` (those it holds the
    head of) and ``short_of`` (those of them without room for it: the reason it waits; it
    keeps the others for itself). One query for them all."""
    rows = {p["name"]: p for p in s.get("pools") or []}
    heads: dict[int, list[str]] = {}
    for name, p in rows.items():
        if p.get("blocked_by") is not None:
            heads.setdefault(int(p["blocked_by"]), []).append(name)
    out: dict[int, dict[str, Any]] = {}
    if not heads:
        return out
    for cid, org, org_name, ext, wf in Chart.objects.filter(pk__in=list(heads)).values_list(
            "pk", "org_id", "org__name", "external_id", "workflow__name"):
        need = dict(pools.demand(str(org), wf)) if pools is not None else {}
        names = heads[cid]
        short = [n for n in names if rows[n]["in_use"] + need.get(n, 1) > rows[n]["capacity"]] or names
        out[cid] = {"org": org, "org_name": org_name, "external_id": ext, "pools": names, "short_of": short}
    return out


def pool_waits(s: dict[str, Any], heads: dict[int, dict[str, Any]]) -> dict[int, str]:
    """chart id -> why it waits, for the charts snapshot ``s`` names: the head of a pool without
    room for it, ``"waiting for pool llm (8 of 8 in use)"``, and an org's first chart at its
    ceiling, ``"at its ceiling in pool llm (4 of 4)"``. ``heads``: :func:`pool_heads`."""
    rows = {p["name"]: p for p in s.get("pools") or []}
    out: dict[int, list[str]] = {}
    for cid, head in heads.items():
        out[cid] = [clear_notes.waits_for_pool(n, rows[n]["capacity"], rows[n]["in_use"]) for n in head["short_of"]]
    for per in (s.get("org_pools") or {}).values():
        for pool, use in sorted(per.items()):
            cid = use.get("waiting_at_ceiling")
            if cid is not None and use.get("max") is not None:
                out.setdefault(int(cid), []).append(clear_notes.waits_at_ceiling(pool, use["in_use"], use["max"]))
    return {cid: "; ".join(texts) for cid, texts in out.items()}


_pools_cache: dict[str, Any] = {"key": None, "value": None}


def _pools_of(s: dict[str, Any]) -> tuple[Pools | None, dict[int, str]]:
    """:func:`read_pools` and :func:`pool_waits` of snapshot ``s``, read once per snapshot per
    process (every open org page asks with each snapshot; a change of the pools makes the
    scheduler publish a new one)."""
    key = (s.get("seq"), s.get("generated_at"))
    with _lock:
        if key[0] is not None and _pools_cache["key"] == key:
            return _pools_cache["value"]
    pools = read_pools()
    value = (pools, pool_waits(s, pool_heads(s, pools)))
    with _lock:
        _pools_cache.update(key=key, value=value)
    return value


def chart_waits(s: dict[str, Any] | None, charts: list[tuple[int, int, str | None, str | None]]) -> dict[int, str]:
    """Why each of ``charts`` (``(id, org id, workflow name, state in the snapshot)``) waits
    because of a pool or a ceiling, for those that do: a chart of the order named by snapshot
    ``s`` (:func:`pool_waits`: a pool's head, an org's first chart at its ceiling), any other
    chart of the order that draws on a pool whose head waits (``"in line for pool llm (8 of 8
    in use)"``: head-of-line per pool; the head is not named, it may be another org's), a
    blocked chart (:func:`never_note`). Empty without pools."""
    if not s or not s.get("pools") or not charts:
        return {}
    pools, named = _pools_of(s)
    waiting = {p["name"]: p for p in s["pools"] if p.get("blocked_by") is not None}
    out = {}
    for cid, org, workflow, state in charts:
        if cid in named:
            out[cid] = named[cid]
        elif state == "blocked" and pools is not None:
            note = never_note(pools, org, workflow)
            if note:
                out[cid] = note
        elif state == "ordered" and pools is not None and waiting:
            lines = [clear_notes.in_line_for_pool(p, waiting[p]["capacity"], waiting[p]["in_use"])
                     for p, _ in pools.demand(str(org), workflow) if p in waiting]
            if lines:
                out[cid] = "; ".join(lines)
    return out


def org_pools(s: dict[str, Any], org: Org | int) -> list[dict[str, Any]]:
    """An org's use of each pool in snapshot ``s`` against its ceiling and minimum, with
    ``text`` (``"llm 4 of 4 (ceiling)"``), ``at_ceiling`` and, when its charts wait there,
    ``waiting`` (``"at its ceiling in pool llm (4 of 4)"``)."""
    pk = org.pk if isinstance(org, Org) else org
    out = []
    for pool, use in sorted(((s.get("org_pools") or {}).get(str(pk)) or {}).items()):
        mx, units = use.get("max"), use.get("in_use") or 0
        out.append({"pool": pool, "in_use": units, "max": mx, "min": use.get("min") or 0,
                    "at_ceiling": mx is not None and units >= mx,
                    "text": clear_notes.org_pool_use(pool, units, mx, use.get("min") or 0),
                    "waiting": (clear_notes.waits_at_ceiling(pool, units, mx)
                                if use.get("waiting_at_ceiling") is not None and mx is not None else None)})
    return out


# --- an org's status ------------------------------------------------------------------------


def org_row_from_db(org: Org) -> dict[str, Any]:
    counts = Chart.objects.filter(org=org).aggregate(
        queued=Count("pk", filter=Q(state=ChartState.QUEUED)),
        running=Count("pk", filter=Q(state=ChartState.RUNNING)),
    )
    return {"id": org.pk, "name": org.name, "slug": org.slug, "weight": org.weight, "held": org.is_held,
            "queued": counts["queued"], "running": counts["running"], "clear_s": None, "clear_at": None}


def org_status(org: Org, *, offset: int = 0, limit: int = 200, external_id: str | None = None) -> dict[str, Any]:
    """The org's charts with state, position and ETA, and its clear-time.

    From the org's snapshot key when the scheduler published; else from the DB
    (states only, ``position``/``eta`` null, ``source: "db"``).
    """
    offset = max(0, int(offset))
    limit = max(1, min(ORG_STATUS_MAX, int(limit)))
    latest, age, stale = read_snapshot_with_age()
    s = None if stale else latest
    if s is None:
        data = None
    elif external_id:  # one chart: the index says which page holds it
        data = snap.read_org_external_id(org.pk, external_id, snapshot=s)
    else:  # only the pages shown
        data = snap.read_org(org.pk, offset, limit, snapshot=s)
    freshness = {"stale": latest is not None and stale, "age_s": round_age(age)}
    if data is None:
        return {**_org_status_from_db(org, offset, limit, external_id), **freshness}
    return {**_org_status_from_snapshot(org, s, data, offset, limit, external_id), **freshness}


def _org_status_from_snapshot(org: Org, s: dict[str, Any], data: dict[str, Any], offset: int, limit: int,
                              external_id: str | None) -> dict[str, Any]:
    base = s.get("now") or time.time()
    source = estimate_sources(org)
    charts = [org_chart(r, base, source) for r in data.get("charts", [])]
    total = data.get("total", len(charts))
    if external_id:
        charts = [c for c in charts if c["external_id"] == external_id]
        total = len(charts)
        charts = charts[offset:offset + limit]
    row = data.get("org") or {}
    no_eta = row.get("no_eta")
    if s.get("pools"):  # why its charts wait for a pool or at a ceiling, and its use of each pool
        waits = chart_waits(s, [(c["id"], org.pk, c["workflow"], c["state"]) for c in charts])
        for c in charts:
            c["waits"] = waits.get(c["id"])
        if (row.get("unplanned") or {}).get("blocked"):
            no_eta = clear_notes.no_eta_note(row["unplanned"], org_held=row.get("held", org.is_held), pooled=True)
    return {
        "source": "scheduler", "seq": s.get("seq"), "generated_at": s.get("generated_at"), "now": base,
        "org": {"id": org.pk, "name": org.name, "slug": org.slug, "weight": row.get("weight", org.weight),
                "held": row.get("held", org.is_held), "queued": row.get("queued"),
                "running": row.get("running"), "clear_s": row.get("clear_s"),
                "clear_at": row.get("clear_at") or _at(base, row.get("clear_s")),
                # why there is no clear-time, or what it leaves out (held, paused, blocked)
                "unplanned": row.get("unplanned") or {}, "no_eta": no_eta,
                "turnaround_s": row.get("turnaround_s"),
                # its charts with a due time per state (on_time, at_risk, late)
                "due": row.get("due") or {},
                # with capacity pools: its use of each against its ceiling (docs/api.md, "Pools")
                "pools": org_pools(s, org) if s.get("pools") else []},
        "total": total, "offset": offset, "limit": limit, "charts": charts,
    }


def _org_status_from_db(org: Org, offset: int, limit: int, external_id: str | None) -> dict[str, Any]:
    """The fallback before the scheduler published (or when its snapshot is stale): states
    from the database, no position or ETA."""
    qs = Chart.objects.filter(org=org, state__in=[ChartState.QUEUED, ChartState.RUNNING]).select_related("workflow")
    if external_id:
        qs = qs.filter(external_id=external_id)
    total = qs.count()
    rows = qs.order_by("-state", "created_at", "pk")[offset:offset + limit]  # running first, then queued by age
    now = timezone.now()
    source = estimate_sources(org)
    charts = [{
        "id": c.pk, "external_id": c.external_id, "workflow": c.workflow.name,
        "estimate_source": source(c.workflow.name),
        "state": "running" if c.state == ChartState.RUNNING else ("held" if org.is_held else
                                                                   "paused" if c.paused else "queued"),
        "position": None, "start_at": None, "eta": None, "eta_s": None, "waits": None,
        "created_at": c.created_at.isoformat(), "started_at": c.started_at.isoformat() if c.started_at else None,
    } for c in rows]
    return {"source": "db", "seq": None, "generated_at": now.isoformat(), "now": now.timestamp(),
            "org": org_row_from_db(org), "total": total, "offset": offset, "limit": limit, "charts": charts}


def _at(base: float, seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(base + seconds, tz=timezone.get_current_timezone()).isoformat()


def org_chart(r: dict[str, Any], base: float, source: Callable[[str | None], str]) -> dict[str, Any]:
    """One chart of the org's status from its row in the snapshot (``base``: the snapshot's now)."""
    finish = r.get("finish_s")
    start = r.get("start_s")
    return {
        "id": r.get("id"), "external_id": r.get("external_id"), "workflow": r.get("workflow"),
        # where its duration estimate comes from: pair, workflow, org (history), declared, default
        "estimate_source": source(r.get("workflow")),
        "state": r.get("state"), "position": r.get("pos"), "priority": r.get("priority", False),
        "start_at": _at(base, start) if r.get("state") != "running" else r.get("started_at"),
        "eta": _at(base, finish), "eta_s": finish,
        "eta_p90": _at(base, r.get("p90_s")),  # the finish it should beat 9 times out of 10
        # a running chart's duration estimate: the page says "overdue by" once start + expected passed
        "expected_s": r.get("expected_s"),
        "cost": r.get("cost"),
        # its due time, its state against it and the slack (due - ETA): docs/scheduling.md, "Due times"
        "due_at": _at(base, r.get("due_s")), "due_state": r.get("due_state"),
        "slack_s": None if r.get("slack_s") is None else round(r["slack_s"], 1),
        # why it waits for a pool or at its org's ceiling there (with pools; set by org_status)
        "waits": None,
    }
