"""The live state as a contract scenario (``manage.py plan --live`` / ``--dump``).

``scenario_from_db()`` reads the database (the truth for what is queued and
running) and, with ``include_rounds=True`` (the default), gives each queued
normal-tier chart the round the live scheduler holds for it, read from the
order it last published (``fairsched:order`` in Redis). A chart that arrived
after that publication gets the round the scheduler's arrival rule gives it
(``max(head, last)``, +1 when its org's last round is full), from the per-org
``(last, used)`` the scheduler publishes with the snapshot (``rounds``; it counts
dispatched charts too), so a plan of the dump replays the live order. Without a published order (no scheduler running)
no rounds are given and the plan computes the static rounds, which is exactly
what a restarted scheduler rebuilds.

Ids follow ``manage.py plan``'s ORM dump: org and chart primary keys as
strings, workflows by name.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from charts.models import Chart, ChartState, DurationStat
from fairsched.models import SchedulerSettings
from orgs.models import Org, WorkflowCost

DEFAULT_AVG_S = 600.0


def _iso(d: datetime | None) -> str | None:
    return d.astimezone(timezone.utc).isoformat() if d else None


def scenario_from_db(*, include_rounds: bool = True, now: datetime | None = None) -> dict[str, Any]:
    """A scenario (docs/scheduling.md) of the live database state."""
    now = now or datetime.now(timezone.utc)
    orgs = list(Org.objects.order_by("pk").values_list("pk", "weight"))
    costs = {(str(o), w): c for o, w, c in WorkflowCost.objects.values_list("org_id", "workflow__name", "cost")}
    averages = [{"org": str(o), "workflow": w, "avg_s": total / count}
                for o, w, count, total in DurationStat.objects.order_by("org_id", "workflow_id")
                .values_list("org_id", "workflow__name", "count", "total_s") if count]
    running = []
    for pk, org, wf, started, dispatched, cost in (
            Chart.objects.filter(state=ChartState.RUNNING).order_by("pk")
            .values_list("pk", "org_id", "workflow__name", "started_at", "dispatched_at", "dispatched_cost")):
        running.append({"id": str(pk), "org": str(org), "workflow": wf,
                        "started_at": _iso(started or dispatched or now),
                        "cost": cost or costs.get((str(org), wf), 1)})
    queued = []
    for pk, org, wf, created, prio, prio_at, paused, front in (
            Chart.objects.filter(state=ChartState.QUEUED).order_by("pk")
            .values_list("pk", "org_id", "workflow__name", "created_at", "priority", "prioritized_at", "paused",
                         "moved_to_front_at")):
        item = {"id": str(pk), "org": str(org), "workflow": wf, "created_at": _iso(created),
                "priority": prio, "prioritized_at": _iso(prio_at), "paused": paused}
        if front:
            item["front_at"] = _iso(front)
        queued.append(item)
    budget = SchedulerSettings.get().budget
    out = {
        "now": _iso(now), "budget": budget, "default_avg_s": DEFAULT_AVG_S,
        "orgs": [{"id": str(o), "weight": w} for o, w in orgs],
        "costs": [{"org": o, "workflow": w, "cost": c} for (o, w), c in costs.items()],
        "averages": averages, "running": running, "queued": queued,
    }
    if include_rounds:
        _add_live_rounds(out, dict(orgs), costs, budget)
    return out


def _add_live_rounds(scn: dict[str, Any], weights: dict[int, int], costs: dict, budget: int) -> None:
    from fairsched import snapshot

    snap = snapshot.read_snapshot()
    _, rows = snapshot.read_order(0, 10**9)
    if not snap or not rows:
        return
    published = {str(r["id"]): r["round"] for r in rows if r.get("round") is not None and r.get("state") == "ordered"}
    head = int(snap.get("head", 0))
    # The scheduler's own (last, used) per org counts dispatched charts too; an older
    # snapshot without it falls back to what the published order shows.
    exact = snap.get("rounds")
    last: dict[str, int] = {o: int(lu[0]) for o, lu in exact.items()} if exact is not None else {}
    used: dict[str, int] = {o: int(lu[1]) for o, lu in exact.items()} if exact is not None else {}
    eligible = []
    for item in scn["queued"]:
        w = weights.get(int(item["org"]), 0)
        if item["priority"] or item["paused"] or w == 0 or costs.get((item["org"], item["workflow"]), 1) > budget:
            continue
        eligible.append(item)
        r = published.get(item["id"])
        if r is not None and exact is None:
            if r > last.get(item["org"], -1):
                last[item["org"]], used[item["org"]] = r, 1
            elif r == last[item["org"]]:
                used[item["org"]] += 1
    for item in eligible:  # arrival order: later arrivals get the scheduler's arrival rule
        if item["id"] in published:
            item["round"] = published[item["id"]]
            continue
        org, w = item["org"], weights.get(int(item["org"]), 1)
        lo = last.get(org)
        r = head if lo is None else max(lo, head)
        if lo is not None and r == lo and used[org] >= w:
            r += 1
        if r == lo:
            used[org] += 1
        else:
            last[org], used[org] = r, 1
        item["round"] = r
