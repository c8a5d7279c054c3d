"""Reads for the dashboard, the org pages and the live admin.

The scheduler's latest snapshot (:mod:`common.snapshot`) is the source when it
exists. When the scheduler has not published (not running, or its snapshot
expired), everything still renders from the database: counts, orgs, running
charts; the order is then unknown and the page says it waits for the scheduler.

Every function returns plain JSON-able dicts in the snapshot's shapes, with
``"source": "scheduler" | "db"`` so pages can say which one they show. A snapshot
older than a few ETA intervals (:func:`charts.selectors.stale_after_s`) is never shown as
live: the pages fall back to the database and say ``"stale": true`` with the snapshot's
``age_s``. The reads the dashboard shares with the producer API and ``/metrics`` (the live
snapshot and its age, an org's status, the duration estimates) are :mod:`charts.selectors`'.
"""
from __future__ import annotations

import heapq
import json
import threading
import time
from datetime import datetime, timedelta
from itertools import islice
from typing import Any

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.utils import timezone

from charts.models import FINAL_STATES, Chart, ChartState
from charts import selectors as chart_selectors
from charts.selectors import read_durations, read_snapshot_with_age, round_age
from common import clear_notes
from common import snapshot as snap
from control.models import DEFAULT_POOL
from dashboard.permissions import can_view_dashboard
from control.models import SchedulerSettings
from common.notify import redis_client
from orgs.models import Org, Workflow, WorkflowCost

PAGE_MAX = 500
HISTORY_KEY = "fairsched:dashboard:history"
HISTORY_SEEN_KEY = "fairsched:dashboard:history:seen:{}"
HISTORY_LEN = 720  # one point per ETA pass (about 3 s): the last ~36 minutes


# --- the stored order, parsed once per snapshot per process -----------------------

_order_lock = threading.Lock()
_order_cache: dict[str, Any] = {"seq": None, "rows": [], "index": {}}


def order_rows(snapshot: dict[str, Any] | None) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """All rows of the stored order and an index by chart id, parsed once per snapshot.

    O(backlog): only for views that need any chart's row (the admin's position column);
    pages read :func:`order_page`, which fetches only the pages it shows.
    """
    key = (snapshot or {}).get("seq"), (snapshot or {}).get("generated_at")
    with _order_lock:
        if key[0] is not None and _order_cache["seq"] == key:
            return _order_cache["rows"], _order_cache["index"]
        try:
            rows = snap.read_order_all(snapshot) if snapshot is not None else []
        except Exception:  # noqa: BLE001 - Redis down: show the DB view
            rows = []
        index = {r["id"]: r for r in rows}
        _order_cache.update(seq=key, rows=rows, index=index)
        return rows, index


ORDER_STATES = ("ordered", "paused", "held", "blocked")
DUE_STATES = ("late", "at_risk")  # the Due list's filter (docs/operating.md, "The Due panel")


def _due_key(row: dict[str, Any]) -> tuple[float, int]:
    """The Due list's order, the scheduler's (``fairsched.engine.due_states.Flagged.key``): least
    slack first, a chart without an ETA by the time left until it is due."""
    return (row["slack_s"] if row.get("slack_s") is not None else row["due_s"]), row["id"]


def due_page(snapshot: dict[str, Any] | None, *, org: int | None = None, state: str | None = None,
             offset: int = 0, limit: int = 100) -> dict[str, Any]:
    """A page of the charts at risk or late, least slack first, of one org or all of them and
    of one state (``late``, ``at_risk``) or both: ``{"known", "total", "offset", "limit",
    "org", "state", "charts"}``. Read from each org's flagged charts in the snapshot
    (``common.snapshot.read_due``): sorted by slack, an org's late charts come before its
    at-risk ones (late: slack < 0, or no ETA and the due time passed), so a state is a range
    of that list, its length the org's count. All orgs: each one's first ``offset + limit``
    of the range, merged."""
    out = {"known": snapshot is not None, "total": 0, "offset": offset, "limit": limit, "org": org,
           "state": state, "charts": []}
    if snapshot is None:
        return out
    counts = {o["id"]: o.get("due") or {} for o in snapshot.get("orgs") or []}

    def span(o: int) -> tuple[int, int]:
        late, risky = counts.get(o, {}).get("late", 0), counts.get(o, {}).get("at_risk", 0)
        return {"late": (0, late), "at_risk": (late, late + risky)}.get(state or "", (0, late + risky))

    orgs = [org] if org is not None else [o for o in counts if span(o)[1] > span(o)[0]]
    spans = {o: span(o) for o in orgs}
    out["total"] = sum(b - a for a, b in spans.values())
    if org is not None:
        a, b = spans[org]
        rows = snap.read_due(org, snapshot, offset=a + offset, limit=max(0, min(limit, b - a - offset)))
    else:
        lists = [snap.read_due(o, snapshot, offset=a, limit=min(b - a, offset + limit)) for o, (a, b) in spans.items()]
        rows = list(islice(heapq.merge(*lists, key=_due_key), offset, offset + limit))
    out["charts"] = rows
    return out


def order_page(snapshot: dict[str, Any] | None, *, offset: int = 0, limit: int = 100,
               org: int | None = None, state: str | None = None) -> dict[str, Any]:
    """A page of the order (the fair order first, then the charts set aside): reads only
    the published pages it spans, whatever the backlog.

    ``state`` (one of :data:`ORDER_STATES`) keeps only those rows: a paused chart
    leaves the fair order for the end of the list, and "paused" finds it again. That
    filter reads the whole published order once per snapshot (cached).
    """
    offset = max(0, int(offset))
    limit = max(1, min(PAGE_MAX, int(limit)))
    state = state if state in ORDER_STATES else None
    if snapshot is None:
        return {"known": False, "offset": offset, "limit": limit, "org": org, "state": state, "total": None,
                "rows": []}
    if org is not None:
        # The org's slice lists its order rows, then its running rows: the first
        # total - running rows are its queued charts.
        head = snap.read_org(org, 0, 0, snapshot=snapshot) or {"total": 0, "org": {}}
        total = max(0, head.get("total", 0) - ((head.get("org") or {}).get("running") or 0))
        want = max(0, min(limit, total - offset))
        data = snap.read_org(org, offset, want, snapshot=snapshot) if want else None
        rows = [r for r in (data or {}).get("charts", []) if r.get("state") != "running"]
    else:
        total, rows = snap.read_order(offset, limit, snapshot=snapshot) if state is None else (0, [])
    if state is not None:
        every = order_rows(snapshot)[0] if org is None else [
            r for r in (snap.read_org(org, snapshot=snapshot) or {}).get("charts", []) if r.get("state") != "running"]
        chosen = [r for r in every if (r.get("state") or "ordered") == state]
        total, rows = len(chosen), chosen[offset:offset + limit]
    return {"known": True, "offset": offset, "limit": limit, "org": org, "state": state, "total": total,
            "rows": rows}


# --- the summary --------------------------------------------------------------------


def dashboard_state() -> dict[str, Any]:
    """Everything the dashboard's top half shows: the live snapshot, else the same shape from
    the DB. ``stale`` says the latest snapshot is older than :func:`charts.selectors.stale_after_s` (``age_s``
    its age): the counts then come from the database and the order is unknown."""
    s, age, stale = read_snapshot_with_age()
    if s is not None and not stale:
        return {**s, "source": "scheduler", "stale": False, "age_s": round_age(age), **pool_panel(s)}
    return {**db_state(), "stale": s is not None, "age_s": round_age(age)}


def pool_panel(s: dict[str, Any]) -> dict[str, Any]:
    """The Pools panel of snapshot ``s`` (nothing without pools): ``pool_panel.pools``, each pool's
    ``name``, ``capacity``, ``in_use``, ``blocked_by`` and ``text`` ("waiting for pool llm: 8 of 8
    in use — chart #123 of Acme at the head"), and ``pool_panel.orgs``, each org's use of the
    pools against its ceilings (``text``: "Acme: llm 4 of 4 (ceiling)", ``at_ceiling``, and
    ``waiting``, its first chart that waits at a ceiling); with ``no_eta`` worded for pools."""
    if not s.get("pools"):
        return {}
    heads = chart_selectors.pool_heads(s, chart_selectors.read_pools())
    out: dict[str, Any] = {"pool_panel": {"pools": [_pool_row(p, heads) for p in s["pools"]],
                                          "orgs": _pool_orgs(s)}}
    counters = s.get("counters") or {}
    if counters.get("blocked"):
        out["no_eta"] = clear_notes.no_eta_note({k: counters.get(k) for k in clear_notes.KINDS}, pooled=True)
        out["orgs"] = [{**o, "no_eta": clear_notes.no_eta_note(o["unplanned"], org_held=o.get("held", False),
                                                               pooled=True)}
                       if (o.get("unplanned") or {}).get("blocked") else o for o in s.get("orgs") or []]
    return out


def _pool_row(p: dict[str, Any], heads: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """One pool of the panel, its head named: ``chart #123 of Acme``."""
    cid = p.get("blocked_by")
    head = heads.get(cid) if cid is not None else None
    who = None if cid is None else f"chart #{cid} of {head['org_name']}" if head else f"chart #{cid}"
    return {**p, "budget": p["name"] == DEFAULT_POOL,
            "text": clear_notes.pool_line(p["name"], p["capacity"], p["in_use"], who,
                                          head["short_of"] if head else None)}


def _pool_orgs(s: dict[str, Any]) -> list[dict[str, Any]]:
    """Each org of ``s["org_pools"]``, by name: its use of each pool in words."""
    names = {str(o["id"]): o["name"] for o in s.get("orgs") or []}
    per_org = s.get("org_pools") or {}
    rows = []
    for org in sorted(per_org, key=lambda k: (names.get(k, k), k)):
        uses = chart_selectors.org_pools(s, int(org))
        name = names.get(org, f"org {org}")
        waiting = [f"chart #{per_org[org][u['pool']]['waiting_at_ceiling']} waits {u['waiting']}"
                   for u in uses if u["waiting"]]
        rows.append({"id": int(org), "name": name, "text": clear_notes.org_pools_line(name, [u["text"] for u in uses]),
                     "at_ceiling": any(u["at_ceiling"] for u in uses), "waiting": "; ".join(waiting) or None})
    return rows


def _db_orgs() -> list[Org]:
    """Every org with its queued, paused and running charts counted and its used cost."""
    return list(Org.objects.annotate(
        n_queued=Count("charts", filter=Q(charts__state=ChartState.QUEUED)),
        n_paused=Count("charts", filter=Q(charts__state=ChartState.QUEUED, charts__paused=True)),
        n_running=Count("charts", filter=Q(charts__state=ChartState.RUNNING)),
        used=Sum("charts__dispatched_cost", filter=Q(charts__state=ChartState.RUNNING)),
    ))


def _db_blocked(held_ids: set[int], budget: int) -> int:
    """How many queued charts (not held, not paused) cost more than the whole budget."""
    blocked_pairs = list(WorkflowCost.objects.filter(cost__gt=budget).values_list("org_id", "workflow_id"))
    if not blocked_pairs:
        return 0
    blocked_q = Q(pk__in=[])
    for org_id, wf_id in blocked_pairs:
        blocked_q |= Q(org_id=org_id, workflow_id=wf_id)
    queued = Chart.objects.filter(state=ChartState.QUEUED)
    return queued.exclude(org_id__in=held_ids).filter(paused=False).filter(blocked_q).count()


def _db_counters(orgs: list[Org], budget: int) -> dict[str, Any]:
    """The snapshot's counters from the database (the order is unknown)."""
    held_ids = {o.pk for o in orgs if o.is_held}
    return {"queued": sum(o.n_queued for o in orgs), "ordered": None, "running": sum(o.n_running for o in orgs),
            "held": sum(o.n_queued for o in orgs if o.pk in held_ids),
            "paused": sum(o.n_paused for o in orgs if o.pk not in held_ids),
            "blocked": _db_blocked(held_ids, budget)}


def _db_running_rows(now: datetime) -> list[dict[str, Any]]:
    """The running charts (oldest first, at most 500), with their expected durations."""
    est = read_durations()
    running = []
    for c in Chart.objects.filter(state=ChartState.RUNNING).select_related("workflow").order_by("started_at")[:500]:
        elapsed = (now - c.started_at).total_seconds() if c.started_at else 0.0
        expected = est(str(c.org_id), c.workflow.name)
        running.append({
            "id": c.pk, "org": c.org_id, "workflow": c.workflow.name, "cost": c.dispatched_cost or 1,
            "external_id": c.external_id, "started_at": c.started_at.isoformat() if c.started_at else None,
            "elapsed_s": elapsed, "expected_s": expected, "finish_s": max(0.0, expected - elapsed),
            "workflow_id": c.temporal_workflow_id,
            "run_id": c.temporal_run_id,
        })
    return running


def _db_org_rows(orgs: list[Org], used_total: int) -> list[dict[str, Any]]:
    """One row per org: its counts and its shares (no clear-time)."""
    weight_total = sum(o.weight for o in orgs if not o.is_held and (o.n_queued or o.n_running))
    return [{
        "id": o.pk, "name": o.name, "slug": o.slug, "weight": o.weight, "held": o.is_held,
        "queued": o.n_queued, "running": o.n_running, "used_cost": o.used or 0,
        "share_budget": (o.used or 0) / used_total if used_total else 0.0,  # share of the budget in use
        "share_weight": o.weight / weight_total if weight_total and (o.n_queued or o.n_running) else 0.0,
        "clear_s": None, "clear_at": None,
    } for o in orgs]


def db_state() -> dict[str, Any]:
    """The snapshot's shape computed from the database (no order, no ETAs)."""
    now = timezone.now()
    settings = SchedulerSettings.get()
    budget = settings.budget
    orgs = _db_orgs()
    counters = _db_counters(orgs, budget)
    running = _db_running_rows(now)
    used_total = sum(o.used or 0 for o in orgs)
    return {
        "version": 1, "seq": None, "generated_at": now.isoformat(), "now": now.timestamp(),
        "budget": budget, "used": used_total, "counters": counters,
        "policies": {"share": settings.share, "quantum_s": settings.quantum_s, "dispatch": settings.dispatch},
        "clear_s": None, "clear_at": None,
        "orgs": _db_org_rows(orgs, used_total),
        "running": running,
        "source": "db",
    }


def workflow_costs() -> dict[str, Any]:
    """Workflows, and the cost of every (org, workflow) pair that has a row (others cost 1)."""
    return {
        "workflows": [{"id": w.pk, "name": w.name} for w in Workflow.objects.all()],
        "costs": [{"org": c.org_id, "workflow": c.workflow_id, "cost": c.cost} for c in WorkflowCost.objects.all()],
    }


# --- org pages -----------------------------------------------------------------------


# --- plots ------------------------------------------------------------------------------


def record_history(s: dict[str, Any]) -> None:
    """Keep one queue-depth point per snapshot (first consumer to see a ``seq`` records it)."""
    seq = s.get("seq")
    if seq is None:
        return
    client = redis_client()
    if not client.set(HISTORY_SEEN_KEY.format(seq), 1, nx=True, ex=120):
        return
    point = {"t": s.get("now"), "q": {str(o["id"]): o.get("queued", 0) for o in s.get("orgs", [])},
             "r": s.get("counters", {}).get("running")}
    pipe = client.pipeline()
    pipe.rpush(HISTORY_KEY, json.dumps(point, separators=(",", ":")))
    pipe.ltrim(HISTORY_KEY, -HISTORY_LEN, -1)
    pipe.expire(HISTORY_KEY, snap.TTL_S * 6)
    pipe.execute()


def read_history() -> list[dict[str, Any]]:
    try:
        return [json.loads(x) for x in redis_client().lrange(HISTORY_KEY, 0, -1)]
    except Exception:  # noqa: BLE001
        return []


def plot_data(*, minutes: int = 60, finishes: int = 200) -> dict[str, Any]:
    """Data for the plots, from the DB plus the small queue-depth history in Redis.

    * ``per_minute``: charts started and finished in each of the last ``minutes`` minutes.
    * ``finishes``: recently finished charts, actual vs predicted finish. The
      prediction is what the lane simulation predicts for a running chart,
      ``started_at + estimate`` with the duration estimate of its (org, workflow)
      (the same averages the ETA pass uses; the database does not keep the ETA
      the chart was shown while queued).
    * ``depth``: queue depth per org at each ETA pass seen while a dashboard was open.
    """
    now = timezone.now()
    since = now - timedelta(minutes=minutes)
    start_min = since.replace(second=0, microsecond=0)
    buckets = [start_min + timedelta(minutes=i) for i in range(minutes + 1)]
    starts = [0] * len(buckets)
    ends = [0] * len(buckets)
    for ts in Chart.objects.filter(started_at__gte=start_min).values_list("started_at", flat=True).iterator():
        starts[min(len(buckets) - 1, int((ts - start_min).total_seconds() // 60))] += 1
    for ts in Chart.objects.filter(finished_at__gte=start_min, state__in=FINAL_STATES).values_list(
            "finished_at", flat=True).iterator():
        ends[min(len(buckets) - 1, int((ts - start_min).total_seconds() // 60))] += 1
    est = read_durations()
    recent = []
    for c in (Chart.objects.filter(state=ChartState.SUCCEEDED, finished_at__isnull=False, started_at__isnull=False)
              .select_related("workflow").order_by("-finished_at")[:finishes]):
        predicted = c.started_at + timedelta(seconds=est(str(c.org_id), c.workflow.name))
        recent.append({"id": c.pk, "org": c.org_id, "external_id": c.external_id,
                       "started_at": c.started_at.timestamp(), "finished_at": c.finished_at.timestamp(),
                       "predicted_at": predicted.timestamp()})
    recent.reverse()
    return {
        "now": now.timestamp(),
        "per_minute": {"t": [b.timestamp() for b in buckets], "starts": starts, "finishes": ends},
        "finishes": recent,
        "depth": read_history(),
        "orgs": {str(o.pk): o.name for o in Org.objects.all()},
    }


def temporal_url(workflow_id: str) -> str:
    base = settings.TEMPORAL_UI_URL.rstrip("/")
    return f"{base}/namespaces/{settings.TEMPORAL_NAMESPACE}/workflows/{workflow_id}"


_costs_cache: dict[str, Any] = {"at": 0.0, "value": None}
COSTS_TTL_S = 1.0


def cached_costs() -> dict[str, Any]:
    """:func:`workflow_costs`, re-read at most once a second per process (100 sockets, one query)."""
    with _order_lock:
        if _costs_cache["value"] is not None and time.monotonic() - _costs_cache["at"] < COSTS_TTL_S:
            return _costs_cache["value"]
    value = workflow_costs()
    with _order_lock:
        _costs_cache.update(at=time.monotonic(), value=value)
    return value


def org_for_user(user, slug: str) -> Org | None:
    """The org ``slug`` if ``user`` may see it (a member, or dashboard staff); else None.

    Never says whether an org the user may not see exists (the caller answers 404).
    """
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    org = Org.objects.filter(slug=slug).first()
    if org is None:
        return None
    if can_view_dashboard(user) or org.members.filter(pk=user.pk).exists():
        return org
    return None


def invalidate_costs() -> None:
    with _order_lock:
        _costs_cache["value"] = None


def clear_caches() -> None:
    """Forget the parsed order, the costs and the estimates (tests; a Redis flushed under a
    running process)."""
    chart_selectors.clear_caches()
    with _order_lock:
        _costs_cache["value"] = None
        _order_cache.update(seq=None, rows=[], index={})
        _msg_cache.clear()
        _history_done.clear()


# --- one serialised snapshot message per (snapshot, view) per process ---------------------------

_msg_cache: dict[Any, tuple[Any, str]] = {}
_history_done: set[Any] = set()
MSG_CACHE_SIZE = 32


def snapshot_message(view: dict[str, Any]) -> tuple[int | None, str, str]:
    """``(seq, source, json)`` of the dashboard's snapshot message for ``view`` (without ``n``).

    A hundred open dashboards on the same page of the order share one serialisation
    per snapshot instead of a hundred.
    """
    state = dashboard_state()
    live = state.get("source") == "scheduler"
    costs = cached_costs()
    key = None
    if live:
        ident = (state.get("seq"), state.get("generated_at"))
        if ident not in _history_done:
            _history_done.add(ident)
            if len(_history_done) > 64:
                _history_done.clear()
                _history_done.add(ident)
            try:
                record_history(state)
            except Exception:  # noqa: BLE001 - the history is a nicety
                pass
        key = (ident, view.get("offset"), view.get("limit"), view.get("org"), view.get("state"))
        with _order_lock:
            hit = _msg_cache.get(key)
        if hit is not None and hit[0] is costs:
            return state.get("seq"), "scheduler", hit[1]
    order = order_page(state if live else None, **view)
    text = json.dumps({"type": "snapshot", "seq": state.get("seq"), "state": state, "order": order, "costs": costs},
                      separators=(",", ":"))
    if key is not None:
        with _order_lock:
            if len(_msg_cache) >= MSG_CACHE_SIZE:
                _msg_cache.clear()
            _msg_cache[key] = (costs, text)
    return state.get("seq"), state.get("source", "db"), text
