"""What a scrape reads: the scheduler's snapshot, a few small tables, the Redis hashes of
:mod:`common.metrics`. Never the backlog: O(orgs + running charts) whatever is queued,
except while the scheduler's snapshot is stale or missing (then one GROUP BY over the
queued and running charts, as the pages fall back to the database).

The imports of other apps' models are all here (one place to move with them).
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Sum

from charts.models import Chart, ChartState, FinishedCount
from charts.selectors import stale_after_s
from common import metrics
from common import snapshot as snap
from scheduling.rules import is_held
from control.models import SchedulerSettings
from orgs.models import Org

log = logging.getLogger(__name__)

STATES = ("queued", "running", "paused", "held", "blocked")  # fairsched_charts' state label


@dataclass
class Reading:
    orgs: list[tuple[int, str]]                            # (id, slug), by id
    source: str                                            # "scheduler" | "db"
    charts: dict[int, dict[str, int]]                      # org id -> state -> charts
    budget: int | None
    in_use: int | None
    clear_s: dict[int, float] = field(default_factory=dict)  # org id -> seconds until it clears
    snapshot_age_s: float | None = None
    scheduler_up: bool = False
    finished: dict[tuple[int, str], int] = field(default_factory=dict)
    histograms: dict[str, dict[str, tuple[list[int], float]]] = field(default_factory=dict)
    api: dict[tuple[str, str], int] = field(default_factory=dict)
    pools: list[dict[str, Any]] = field(default_factory=list)    # the snapshot's (publish.pool_summary)
    org_pools: dict[int, dict[str, dict]] = field(default_factory=dict)  # org id -> pool -> in_use, max


def read() -> Reading:
    rows = list(Org.objects.order_by("id").values_list("id", "slug", "weight"))
    orgs = [(o, slug) for o, slug, _ in rows]
    s, age, hists, api = _read_redis()
    live = s is not None and age is not None and age <= stale_after_s()
    reading = _from_snapshot(orgs, s) if live else _from_db(orgs, {o for o, _, weight in rows if is_held(weight)})
    reading.snapshot_age_s, reading.scheduler_up = age, live
    reading.finished = {(o, st): n for o, st, n in FinishedCount.objects.values_list("org_id", "state", "count")}
    reading.histograms, reading.api = hists, api
    return reading


def _read_redis() -> tuple[dict[str, Any] | None, float | None, dict, dict]:
    """The snapshot, its age, the histograms and the API counter: one round trip. The age is
    the pages' (``charts.selectors.snapshot_age_s``): since the scheduler published the
    snapshot or last confirmed it current (``common.snapshot.confirmed_at``)."""
    metrics.flush(1.0)  # this process's own API requests counted so far are in Redis
    try:
        pipe = metrics.redis_client().pipeline(transaction=False)
        pipe.get(snap.SNAPSHOT_KEY)
        pipe.get(snap.CURRENT_KEY)
        metrics.queue_reads(pipe)
        answers = pipe.execute()
    except Exception as exc:  # noqa: BLE001 - Redis down: the database's counts are still served
        log.warning("metrics: cannot read Redis: %s", exc)
        return None, None, {}, {}
    hists, api = metrics.parse_reads(answers[2:])
    s = json.loads(answers[0]) if answers[0] else None
    if not isinstance(s, dict):
        return None, None, hists, api
    current = json.loads(answers[1]) if answers[1] else None
    try:
        at = float(s.get("now"))
        if isinstance(current, dict) and current.get("seq") == s.get("seq") and isinstance(current.get("at"), (int, float)):
            at = max(at, float(current["at"]))
        age = max(0.0, time.time() - at)
    except (TypeError, ValueError):
        age = None
    return s, age, hists, api


def _from_snapshot(orgs: list[tuple[int, str]], s: dict[str, Any]) -> Reading:
    """The live snapshot's per-org counts (the scheduler's classification) and clear-times.
    A confirmed snapshot's times are absolute: the clear-time counts down from its ``now``."""
    charts: dict[int, dict[str, int]] = {}
    clear: dict[int, float] = {}
    base = float(s.get("now") or time.time())
    for row in s.get("orgs") or []:
        aside = row.get("unplanned") or {}
        held, paused, blocked = (int(aside.get(k, 0)) for k in ("held", "paused", "blocked"))
        charts[int(row["id"])] = {
            "queued": max(0, int(row.get("queued", 0)) - held - paused - blocked),
            "running": int(row.get("running", 0)), "paused": paused, "held": held, "blocked": blocked}
        counts = charts[int(row["id"])]
        nothing_planned = held + paused + blocked and not counts["queued"] and not counts["running"]
        if row.get("clear_s") is not None and not nothing_planned:  # scenario contract v2 (common.clear_notes)
            clear[int(row["id"])] = max(0.0, base + float(row["clear_s"]) - time.time())
    org_pools = {int(o): per for o, per in (s.get("org_pools") or {}).items()}
    return Reading(orgs=orgs, source="scheduler", charts=charts, budget=s.get("budget"), in_use=s.get("used"),
                   clear_s=clear, pools=list(s.get("pools") or []), org_pools=org_pools)


def _from_db(orgs: list[tuple[int, str]], held: set[int]) -> Reading:
    """No live snapshot (the scheduler is down or stalled): the database's counts. A held
    org's queued charts are ``held``, a paused chart ``paused``; which charts the scheduler
    would call ``blocked`` needs the scheduler (they count as ``queued`` meanwhile)."""
    charts: dict[int, dict[str, int]] = {}
    rows = (Chart.objects.filter(state__in=(ChartState.QUEUED, ChartState.RUNNING))
            .values_list("org_id", "state", "paused").annotate(n=Count("id")).order_by())
    for org_id, state, paused, n in rows:
        counts = charts.setdefault(org_id, dict.fromkeys(STATES, 0))
        if state == ChartState.RUNNING:
            counts["running"] += n
        elif org_id in held:
            counts["held"] += n
        else:
            counts["paused" if paused else "queued"] += n
    try:
        budget = SchedulerSettings.get().budget
    except Exception:  # noqa: BLE001
        budget = None
    in_use = Chart.objects.filter(state=ChartState.RUNNING).aggregate(u=Sum("dispatched_cost"))["u"] or 0
    return Reading(orgs=orgs, source="db", charts=charts, budget=budget, in_use=in_use)

