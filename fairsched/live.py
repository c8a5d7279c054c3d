"""The live state as a contract scenario (``manage.py plan --live`` / ``--dump``).

``scenario_from_db()`` reads the database (the truth for what is queued and
running) and, with ``include_rounds=True`` (the default), gives each queued
normal-tier chart the round the live scheduler holds for it. The scheduler
persists its round state in the database as it changes (``RoundState``,
``OrgRoundState`` and each queued chart's ``fair_round``, written with every
dispatch), so this needs no running scheduler and no Redis: the rounds are what
a scheduler starting now would resume (:meth:`FairQueue.restore`), which is the
order before a restart or a takeover. A chart that arrived after the last save
gets the arrival rule's round. With no saved state (no scheduler ever ran) no
rounds are given and the plan computes the static rounds, which is exactly what
a first scheduler builds.

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
    from fairsched.core import FairQueue, QueuedChart
    from fairsched.engine.db import round_state
    from fairsched.scenario import parse_ts

    state = round_state()
    if state is None:
        return
    saved = dict(Chart.objects.filter(state=ChartState.QUEUED, fair_round__isnull=False)
                 .values_list("pk", "fair_round"))
    charts = []
    for item in scn["queued"]:
        pk = int(item["id"])
        charts.append(QueuedChart(
            item["id"], item["org"], item["workflow"], parse_ts(item["created_at"], "created_at"), pk,
            item["priority"], parse_ts(item["prioritized_at"], "prioritized_at", nullable=True),
            item["paused"], parse_ts(item.get("front_at"), "front_at", nullable=True), saved.get(pk)))
    queue = FairQueue.restore(charts, state=state, budget=budget,
                              weights={str(o): w for o, w in weights.items()}, costs=costs)
    for item in scn["queued"]:
        if queue.state_of(item["id"]) == "ordered" and not item["priority"]:
            item["round"] = queue.round_of(item["id"])
