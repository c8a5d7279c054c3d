"""``manage.py plan FILE|-``: the plan of a scenario (docs/scheduling.md).

``--table`` prints it for people; ``--live`` plans the live state and
``--dump`` prints the live state as a scenario (replayable with ``plan``).
Bad input: exit status 2 and one line on stderr naming the field and value.
"""
from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta, timezone

from django.core.management.base import BaseCommand, CommandError

from fairsched.scenario import ScenarioError, parse_scenario, plan_scenario, plan_to_json


def read_json(path: str | None, stdin=None) -> object:
    """Load JSON from a file or ``-`` (stdin); CommandError(returncode=2) on failure."""
    if not path:
        raise CommandError("FILE: missing (a scenario file, or - for stdin)", returncode=2)
    try:
        if path == "-":
            text = (stdin or sys.stdin).read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except FileNotFoundError:
        raise CommandError(f"FILE: no such file {path!r}", returncode=2) from None
    except (OSError, UnicodeDecodeError) as e:
        raise CommandError(f"FILE: cannot read {path!r}: {e}", returncode=2) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CommandError(f"FILE: invalid JSON in {path!r}: {e.msg} at line {e.lineno} "
                           f"column {e.colno}", returncode=2) from None


def live_eta_models() -> dict:
    """Which ETA model made what: ``eta_model`` is this plan's (the lane simulation of the
    order, recomputed here); ``scheduler_eta_model`` the one the live scheduler publishes
    (its last snapshot's, else the setting)."""
    from fairsched import snapshot
    from fairsched.models import SchedulerSettings

    try:
        snap = snapshot.read_snapshot() or {}
    except Exception:  # noqa: BLE001 - Redis down: the setting says it
        snap = {}
    return {"eta_model": "lanes", "scheduler_eta_model": snap.get("eta_model") or SchedulerSettings.get().eta_model}


def live_scenario() -> dict:
    """The live state as a scenario dict: ``fairsched.live.scenario_from_db()``
    when the live scheduler module provides it, else built from the ORM (static
    rounds: what a restart of the scheduler would rebuild)."""
    try:
        from fairsched.live import scenario_from_db  # provided by the live scheduler
    except ImportError:
        return scenario_from_orm()
    return scenario_from_db()


def scenario_from_orm(now: datetime | None = None) -> dict:
    """Build a scenario from the database rows. Org and chart ids are primary
    keys as strings, workflows their names. No ``round``: the plan computes
    the static rounds, as a restart would."""
    from charts.models import Chart, ChartState, DurationStat
    from fairsched.models import SchedulerSettings
    from orgs.models import Org, WorkflowCost

    now = now or datetime.now(timezone.utc)
    iso = lambda d: d.astimezone(timezone.utc).isoformat() if d else None
    orgs = list(Org.objects.order_by("pk"))
    costs = {(str(c.org_id), c.workflow.name): c.cost
             for c in WorkflowCost.objects.select_related("workflow")}
    averages = []
    for s in DurationStat.objects.select_related("workflow").order_by("org_id", "workflow_id"):
        if s.count:
            averages.append({"org": str(s.org_id),
                             "workflow": s.workflow.name if s.workflow_id else None,
                             "avg_s": s.total_s / s.count})
    running = []
    for c in (Chart.objects.filter(state=ChartState.RUNNING).select_related("workflow")
              .order_by("pk")):
        started = c.started_at or c.dispatched_at or now
        cost = c.dispatched_cost or costs.get((str(c.org_id), c.workflow.name), 1)
        running.append({"id": str(c.pk), "org": str(c.org_id), "workflow": c.workflow.name,
                        "started_at": iso(started), "cost": cost})
    queued = []
    for c in (Chart.objects.filter(state=ChartState.QUEUED).select_related("workflow")
              .order_by("pk")):
        item = {"id": str(c.pk), "org": str(c.org_id), "workflow": c.workflow.name,
                "created_at": iso(c.created_at), "priority": c.priority,
                "prioritized_at": iso(c.prioritized_at), "paused": c.paused}
        if c.moved_to_front_at:
            item["front_at"] = iso(c.moved_to_front_at)
        queued.append(item)
    return {
        "now": iso(now),
        "budget": SchedulerSettings.get().budget,
        "default_avg_s": 600,
        "orgs": [{"id": str(o.pk), "weight": o.weight} for o in orgs],
        "costs": [{"org": o, "workflow": w, "cost": c} for (o, w), c in costs.items()],
        "averages": averages,
        "running": running,
        "queued": queued,
    }


def _clock(now: datetime, seconds: float) -> str:
    t = now + timedelta(seconds=seconds)
    return t.strftime("%H:%M:%S") if t.date() == now.date() else t.strftime("%Y-%m-%d %H:%M:%S")


def render_table(scenario: dict) -> str:
    """The plan for people: order with position, org, workflow, cost and ETA
    as time of day; then held / paused / blocked and the clear-time per org."""
    s = parse_scenario(scenario)
    p = plan_scenario(s)
    now = datetime.fromisoformat(scenario["now"])
    charts = {c.id: c for c in s.queued}
    dispatch = set(p.dispatch)
    lines = [f"now {now.isoformat()}  budget {s.budget}  "
             f"running {len(s.running)} (cost {sum(r.cost for r in s.running)})  "
             f"queued {len(s.queued)}  ordered {len(p.order)}"]
    hdr = f"{'pos':>5}  {'chart':<12} {'org':<10} {'workflow':<14} {'cost':>4} {'round':>5}  " \
          f"{'start':>8}  {'finish':>8}"
    lines.append(hdr)
    for r in s.running:
        e = p.etas[r.id]
        lines.append(f"{'run':>5}  {r.id:<12} {r.org:<10} {str(r.workflow):<14} {r.cost:>4} "
                     f"{'':>5}  {'running':>8}  {_clock(now, e.finish_s):>8}")
    for i, cid in enumerate(p.order, 1):
        c = charts[cid]
        e = p.etas[cid]
        tag = "P" if c.priority else str(p.rounds.get(cid, ""))
        lines.append(f"{i:>5}  {cid:<12} {c.org:<10} {str(c.workflow):<14} "
                     f"{s.costs.get((c.org, c.workflow), 1):>4} {tag:>5}  "
                     f"{_clock(now, e.start_s):>8}  {_clock(now, e.finish_s):>8}"
                     + ("  <- dispatch now" if cid in dispatch else ""))
    for name in ("held", "paused", "blocked"):
        ids = getattr(p, name)
        if ids:
            lines.append(f"{name} ({len(ids)}): {' '.join(ids)}")
    lines.append("clear-time per org:")
    for org in s.weights:
        cs = p.org_clear_s.get(org, 0.0)
        lines.append(f"  {org:<10} {_clock(now, cs):>8}  (+{cs:.0f} s)")
    lines.append(f"clear-time {_clock(now, p.clear_s)}  (+{p.clear_s:.0f} s)")
    return "\n".join(lines)


class Command(BaseCommand):
    help = "Print the plan (fair order, dispatch, ETAs) of a scenario JSON file, or of the live state."

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", nargs="?", help="scenario JSON file, or - for stdin")
        parser.add_argument("--table", action="store_true", help="human-readable table")
        parser.add_argument("--live", action="store_true", help="plan the live database state")
        parser.add_argument("--dump", action="store_true",
                            help="print the live state as a scenario (replayable)")

    def handle(self, *args, **opts) -> None:
        from django.db import DatabaseError

        try:
            return self._handle(opts)
        except DatabaseError as e:
            msg = " ".join(str(e).split()) or type(e).__name__
            raise CommandError(f"database: {msg} (is it migrated? manage.py migrate)",
                               returncode=1) from None

    def _handle(self, opts) -> None:
        try:
            if opts["dump"]:
                self.stdout.write(json.dumps(live_scenario(), indent=2))
                return
            if opts["live"]:
                scenario = live_scenario()
            else:
                scenario = read_json(opts["file"], self.stdin if hasattr(self, "stdin") else None)
            if opts["table"]:
                self.stdout.write(render_table(scenario))
            else:
                s = parse_scenario(scenario)
                out = plan_to_json(plan_scenario(s), s.weights)
                if opts["live"]:
                    out.update(live_eta_models())
                self.stdout.write(json.dumps(out, indent=2))
        except ScenarioError as e:
            raise CommandError(str(e), returncode=2) from None
