"""``manage.py plan FILE|-``: the plan of a scenario (docs/scheduling.md).

``--table`` prints it for people; ``--live`` plans the live state and
``--dump`` prints the live state as a scenario (replayable with ``plan``).
Bad input: exit status 2 and one line on stderr naming the field and value.
"""
from __future__ import annotations

import json
import sys
import time as _time
from datetime import datetime, timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from scheduling import Plan
from scheduling.modes import EtaModel
from fairsched.engine.planner import plan_budget
from fairsched.engine.reader import read_state
from fairsched.engine.reader import configured_model, forecast_plan, live_rounds
from fairsched.engine.reader import scenario_from_db
from scheduling.contract.fields import ScenarioError
from scheduling.contract.pool_scenario import is_pooled
from scheduling.contract.scenario import parse_scenario, plan as plan_json, plan_scenario, plan_to_json


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


def live_plan(s) -> tuple[Plan, EtaModel]:
    """The plan of a parsed live scenario with the ETAs of the model the scheduler is set
    to (``SchedulerSettings.eta_model``), and that model's name."""

    p = plan_scenario(s)
    model = configured_model()
    if model is EtaModel.FORECAST:
        head, rounds = live_rounds()
        p = forecast_plan(s, p, head=head, round_state=rounds)
    return p, model


def live_scenario() -> dict:
    """The live state as a scenario dict (:func:`fairsched.engine.reader.scenario_from_db`)."""
    return scenario_from_db()


def _clock(now: datetime, seconds: float) -> str:
    t = now + timedelta(seconds=seconds)
    return t.strftime("%H:%M:%S") if t.date() == now.date() else t.strftime("%Y-%m-%d %H:%M:%S")


def render_table(scenario: dict, live: bool = False) -> str:
    """The plan for people: order with position, org, workflow, cost and ETA
    as time of day; then held / paused / blocked and the clear-time per org.
    ``live``: the ETAs of the live scheduler's model (named on the first line)."""
    s = parse_scenario(scenario)
    p, model = live_plan(s) if live else (plan_scenario(s), EtaModel.LANES)
    now = datetime.fromisoformat(scenario["now"])
    charts = {c.id: c for c in s.queued}
    dispatch = set(p.dispatch)
    lines = [f"now {now.isoformat()}  budget {s.budget}  "
             f"running {len(s.running)} (cost {sum(r.cost for r in s.running)})  "
             f"queued {len(s.queued)}  ordered {len(p.order)}  ETA model {model}"]
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
        n = p.org_unplanned.get(org, 0)
        if cs is None:
            lines.append(f"  {org:<10}   no ETA  ({n} held, paused or blocked)")
            continue
        note = f"; {n} held, paused or blocked: no ETA" if n else ""
        lines.append(f"  {org:<10} {_clock(now, cs):>8}  (+{cs:.0f} s{note})")
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
        parser.add_argument("--clear-by", metavar="ISO",
                            help="with --live: the smallest budget that clears the backlog by this time")
        parser.add_argument("--meet-due", action="store_true",
                            help="with --live: the smallest budget that keeps every due time")
        parser.add_argument("--pool", metavar="NAME",
                            help="with --clear-by/--meet-due: the smallest capacity of this pool instead of the budget")

    def handle(self, *args, **opts) -> None:
        from django.db import DatabaseError

        try:
            return self._handle(opts)
        except DatabaseError as e:
            msg = " ".join(str(e).split()) or type(e).__name__
            raise CommandError(f"database: {msg} (is it migrated? manage.py migrate)",
                               returncode=1) from None

    def _handle(self, opts) -> None:
        if opts.get("clear_by") is not None or opts.get("meet_due"):
            return self._capacity(opts)
        try:
            if opts["dump"]:
                self.stdout.write(json.dumps(live_scenario(), indent=2))
                return
            if opts["live"]:
                scenario = live_scenario()
            else:
                scenario = read_json(opts["file"], self.stdin if hasattr(self, "stdin") else None)
            if is_pooled(scenario) and not opts["live"]:
                if opts["table"]:
                    raise CommandError("--table: a scenario with pools is printed as JSON (leave out --table)",
                                       returncode=2)
                self.stdout.write(json.dumps(plan_json(scenario), indent=2))
            elif opts["table"]:
                self.stdout.write(render_table(scenario, live=opts["live"]))
            else:
                s = parse_scenario(scenario)
                if opts["live"]:
                    p, model = live_plan(s)
                    out = {**plan_to_json(p, s.weights), "eta_model": model.value}
                else:
                    out = plan_to_json(plan_scenario(s), s.weights)
                self.stdout.write(json.dumps(out, indent=2))
        except ScenarioError as e:
            raise CommandError(str(e), returncode=2) from None

    def _capacity(self, opts) -> None:
        """``--live --clear-by ISO`` / ``--live --meet-due``: the capacity planner
        (fairsched/engine/planner.py) over the database's state, read as the scheduler reads it."""
        if not opts["live"]:
            raise CommandError("--clear-by/--meet-due: plan the live state (add --live)", returncode=2)
        if opts.get("clear_by") is not None and opts.get("meet_due"):
            raise CommandError("--meet-due: give --clear-by or --meet-due, not both", returncode=2)
        clear_by = None
        if opts.get("clear_by") is not None:
            raw = opts["clear_by"].strip()
            try:
                when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
            except ValueError:
                raise CommandError(f"--clear-by: an ISO 8601 time (2030-01-01T09:00:00Z), got {raw!r}",
                                   returncode=2) from None
            clear_by = (when if when.tzinfo else timezone.make_aware(when)).timestamp()
        now = _time.time()
        if clear_by is not None and clear_by <= now:
            raise CommandError(f"--clear-by: {opts['clear_by']} is not in the future", returncode=2)
        try:
            answer = plan_budget(read_state(), now, clear_by=clear_by, meet_due=bool(opts.get("meet_due")),
                                 pool=opts.get("pool"))
        except ValueError as exc:  # an unknown pool
            raise CommandError(f"--pool: unknown pool {opts['pool']!r}" if opts.get("pool") else str(exc),
                               returncode=2) from None
        self.stdout.write(json.dumps(answer.to_json(now), indent=2))
