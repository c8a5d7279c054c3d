"""A stand-in for the scheduler's publication, for tests, the bench and demos.

``publish_from_db()`` reads the database, plans it with the same core
(``fairsched.scenario.plan``), and stores and broadcasts a snapshot in the
schema of :mod:`fairsched.snapshot`, exactly as the live scheduler does after
an ETA pass. It does not dispatch anything and keeps no persistent rounds (it
plans the static rounds of ``docs/scheduling.md``). The live system uses
``manage.py runscheduler``; this exists so the dashboard can be tested and
measured without it.
"""
from __future__ import annotations

import time
from collections import Counter, defaultdict
from datetime import datetime, timezone as dt_timezone
from typing import Any

from charts.models import Chart, ChartState, DurationStat
from dashboard.broadcast import broadcast_snapshot
from fairsched import scenario as fs_scenario
from fairsched import snapshot as snap
from fairsched.clear_notes import no_eta_note
from fairsched.models import SchedulerSettings
from orgs.models import Org, WorkflowCost

DEFAULT_AVG_S = 600.0


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=dt_timezone.utc).isoformat()


def build_from_db(now: float | None = None) -> tuple[dict[str, Any], list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """``(snapshot, order_rows, per_org)`` for the current database."""
    now = time.time() if now is None else now
    budget = SchedulerSettings.get().budget
    orgs = list(Org.objects.all())
    costs = {(c.org_id, c.workflow.name): c.cost for c in WorkflowCost.objects.select_related("workflow")}
    averages = [{"org": None if d.org_id is None else str(d.org_id),
                 "workflow": d.workflow.name if d.workflow_id else None, "avg_s": d.avg_s}
                for d in DurationStat.objects.select_related("workflow") if d.avg_s is not None]
    running = list(Chart.objects.filter(state=ChartState.RUNNING).select_related("workflow").order_by("started_at", "pk"))
    queued = list(Chart.objects.filter(state=ChartState.QUEUED).select_related("workflow").order_by("created_at", "pk"))
    scen = {
        "now": _iso(now), "budget": budget, "default_avg_s": DEFAULT_AVG_S,
        "orgs": [{"id": str(o.pk), "weight": o.weight} for o in orgs],
        "costs": [{"org": str(o), "workflow": wf, "cost": c} for (o, wf), c in costs.items()],
        "averages": averages,
        "running": [{"id": str(c.pk), "org": str(c.org_id), "workflow": c.workflow.name,
                     "started_at": _iso((c.started_at.timestamp() if c.started_at else now)),
                     "cost": c.dispatched_cost or costs.get((c.org_id, c.workflow.name), 1)} for c in running],
        "queued": [{"id": str(c.pk), "org": str(c.org_id), "workflow": c.workflow.name,
                    "created_at": _iso(c.created_at.timestamp()), "priority": c.priority,
                    "prioritized_at": _iso(c.prioritized_at.timestamp()) if c.prioritized_at else None,
                    "paused": c.paused,
                    **({"front_at": _iso(c.moved_to_front_at.timestamp())} if c.moved_to_front_at else {})}
                   for c in queued],
    }
    plan = fs_scenario.plan(scen)
    etas = plan["etas"]
    by_id = {c.pk: c for c in queued}
    durations = fs_scenario.Durations({(a["org"], a["workflow"]): a["avg_s"] for a in averages}, DEFAULT_AVG_S)

    def estimate(org_id: int, wf: str) -> float:
        return durations(str(org_id), wf)  # the scheduler's fallback (scenario contract v2)

    rows: list[dict[str, Any]] = []

    def row(c: Chart, pos: int | None, state: str) -> dict[str, Any]:
        e = etas.get(str(c.pk)) if pos is not None else None
        return {"id": c.pk, "pos": pos, "org": c.org_id, "workflow": c.workflow.name,
                "cost": costs.get((c.org_id, c.workflow.name), 1), "round": None, "priority": c.priority,
                "state": state, "external_id": c.external_id,
                "start_s": e["start_s"] if e else None, "finish_s": e["finish_s"] if e else None}

    for pos, cid in enumerate(plan["order"]):
        rows.append(row(by_id[int(cid)], pos, "ordered"))
    for state in ("held", "paused", "blocked"):
        rows.extend(row(by_id[int(cid)], None, state) for cid in plan[state])

    running_rows = []
    for c in running:
        started = c.started_at.timestamp() if c.started_at else now
        e = etas.get(str(c.pk), {"finish_s": 0.0})
        running_rows.append({
            "id": c.pk, "org": c.org_id, "workflow": c.workflow.name,
            "cost": c.dispatched_cost or costs.get((c.org_id, c.workflow.name), 1),
            "external_id": c.external_id, "started_at": _iso(started), "elapsed_s": max(0.0, now - started),
            "expected_s": estimate(c.org_id, c.workflow.name), "finish_s": e["finish_s"],
            "workflow_id": f"chart-{c.pk}", "run_id": c.temporal_run_id})

    queued_by_org: dict[int, int] = defaultdict(int)
    for c in queued:
        queued_by_org[c.org_id] += 1
    running_by_org: dict[int, list] = defaultdict(list)
    for r in running_rows:
        running_by_org[r["org"]].append(r)
    used = sum(r["cost"] for r in running_rows)
    active_weight = sum(o.weight for o in orgs if o.weight and (queued_by_org[o.pk] or running_by_org[o.pk]))
    unplanned = {k: Counter(by_id[int(cid)].org_id for cid in plan[k]) for k in ("held", "paused", "blocked")}
    org_rows = []
    for o in orgs:
        clear_s = plan["org_clear_s"].get(str(o.pk), 0.0)
        aside = {k: unplanned[k].get(o.pk, 0) for k in ("held", "paused", "blocked")}
        used_o = sum(r["cost"] for r in running_by_org[o.pk])
        org_rows.append({
            "id": o.pk, "name": o.name, "slug": o.slug, "weight": o.weight, "held": o.is_held,
            "queued": queued_by_org[o.pk], "running": len(running_by_org[o.pk]), "used_cost": used_o,
            "share_budget": round(used_o / used, 4) if used else 0.0,  # share of the budget in use
            "share_weight": round(o.weight / active_weight, 4)
            if active_weight and not o.is_held and (queued_by_org[o.pk] or running_by_org[o.pk]) else 0.0,
            "clear_s": clear_s, "clear_at": None if clear_s is None else _iso(now + clear_s),
            "unplanned": aside if any(aside.values()) else {},
            "no_eta": no_eta_note(aside, org_held=o.is_held)})
    snapshot = {
        "version": 1, "generated_at": _iso(now), "now": now, "budget": budget, "used": used,
        "counters": {"queued": len(queued), "ordered": len(plan["order"]), "running": len(running_rows),
                     "held": len(plan["held"]), "paused": len(plan["paused"]), "blocked": len(plan["blocked"])},
        "clear_s": plan["clear_s"], "clear_at": _iso(now + plan["clear_s"]),
        "orgs": org_rows, "running": running_rows, "simulated": True,
        "no_eta": no_eta_note({k: len(plan[k]) for k in ("held", "paused", "blocked")}),
    }
    org_charts: dict[int, list] = defaultdict(list)
    for r in rows:
        org_charts[r["org"]].append(r)
    per_org = {o["id"]: {"org": o, "charts": org_charts[o["id"]] + [
        {**r, "pos": None, "state": "running", "start_s": 0.0} for r in running_by_org[o["id"]]]} for o in org_rows}
    return snapshot, rows, per_org


def publish_from_db(now: float | None = None) -> int:
    """Build, store and broadcast a snapshot of the database; returns its ``seq``."""
    snapshot, rows, per_org = build_from_db(now)
    seq = snap.store(snapshot, rows, per_org)
    broadcast_snapshot(seq)
    return seq
