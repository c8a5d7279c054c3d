"""The one reader: database → live state → snapshot, or → scenario.

Everything that wants the scheduler's view of the database goes through here, so the
rules (who is held, paused or blocked, the round each chart holds, the duration
estimates, the clear-times) are applied by the same code the live scheduler runs:

- :func:`read_state` — the rows (:func:`fairsched.engine.store.db.read_world`) made into a
  :class:`~fairsched.engine.state.LiveState` (the fair order with the persisted rounds,
  the running charts, the forecast's recent history), exactly as the scheduler loads it;
- :func:`compute_snapshot` — an ETA pass over a captured state and the snapshot built
  from it (:func:`fairsched.engine.publish.build_snapshot`): what the scheduler
  publishes after each pass;
- :func:`snapshot_from_db` — the two together, for a process that is not the scheduler
  (tests, the bench and demos: ``dashboard.simulate``);
- :func:`scenario_from_db` — the live state as a scenario (``manage.py plan --live`` and
  ``--dump``, ``docs/scheduling.md``): each queued normal-tier chart carries the round
  the scheduler holds for it, so a plan of the dump gives the scheduler's order.
- :func:`forecast_plan`, :func:`live_rounds` — the live ETA model outside the scheduler
  (``manage.py plan --live``): the forecast of a plan of the live state, learned from the
  same recent history the scheduler loads, and the rounds the scheduler published.

Synchronous and ORM-bound: call from a thread that may use the database.
"""
from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.db import connection

from common import snapshot
from control.models import SchedulerSettings
from scheduling import EtaReport, Plan
from scheduling.forecast import Forecaster, PlanOrder
from scheduling.modes import EtaModel
from scheduling.contract.scenario import Scenario, dump_scenario
from fairsched.engine.live_types import PassInput
from fairsched.engine.publish import build_snapshot
from fairsched.engine.state import LiveState
from fairsched.engine.store import db
from fairsched.engine.store.rows import World


def _read_world() -> World:
    """``db.read_world`` in one snapshot of the database (``db.one_snapshot``), as the
    scheduler reads it: a live scheduler writes rounds and their cursors meanwhile."""
    db.read_config()  # the settings row is created on first read: the one write, before the read-only snapshot
    if connection.in_atomic_block:  # a caller's transaction (a test's): read in it
        return db.read_world()
    with db.one_snapshot():
        return db.read_world()


def read_state(*, history: bool = True) -> LiveState:
    """The live state of the database, as the scheduler loads it at start-up. ``history``:
    also the forecast's recent arrivals, durations and promises (the scheduler's
    :meth:`LiveState.learn_history`)."""
    state = LiveState(_read_world(), observe_arrivals=not history)
    if history:
        state.learn_history(db.recent_arrivals(), db.recent_durations(), db.recent_promises())
    return state


def compute_snapshot(captured: PassInput, now: float) -> tuple[EtaReport, dict, list[dict], dict[int, dict]]:
    """The ETA pass of the configured model over ``captured`` and the snapshot of it:
    ``(report, snapshot, order_rows, per_org)`` for :func:`common.snapshot.store`."""
    report = captured.eta_report(now)
    snap, rows, per_org = build_snapshot(captured, report, now, p90=captured.forecast.p90_finisher())
    snap["eta_model"] = captured.eta_model.value
    return report, snap, rows, per_org


def snapshot_from_db(now: float | None = None) -> tuple[dict, list[dict], dict[int, dict]]:
    """``(snapshot, order_rows, per_org)`` of the database now, as the scheduler would publish it."""
    now = time.time() if now is None else now
    _, snap, rows, per_org = compute_snapshot(read_state().capture(), now)
    return snap, rows, per_org


def scenario_from_db(*, include_rounds: bool = True, now: datetime | None = None) -> dict[str, Any]:
    """The live database state as a scenario (``docs/scheduling.md``). Ids follow the ORM:
    org and chart primary keys as strings, workflows by name.

    With ``include_rounds`` (the default) each queued normal-tier chart in the order
    carries the round the scheduler holds for it: the persisted rounds, and for a chart
    that arrived after the last save the arrival rule's round, which is what a scheduler
    starting now resumes (so this needs no running scheduler). With no saved round state
    (no scheduler ever ran) no rounds are given and the plan computes the static rounds,
    which is exactly what a first scheduler builds. One snapshot of the database
    (``db.one_snapshot``): a live scheduler writes rounds and their cursors meanwhile, and
    charts read before a write with the round state read after it ranked some charts a
    round early (a restart test on a slow machine: ``b0 b1 a2 ...`` for ``b0 a2 a3 b1 ...``)."""
    world = _read_world()
    state = LiveState(world)
    at = (now or datetime.now().astimezone()).timestamp()
    out = dump_scenario(state.queue, running=sorted(state.running_charts(), key=lambda r: int(r.id)),
                        now=at, durations=state.durations)
    if not include_rounds or world.rounds is None:
        for item in out["queued"]:
            item.pop("round", None)
    return out


# ---------------------------------------------------------------- the live ETA model outside the scheduler
def configured_model() -> EtaModel:
    return EtaModel(SchedulerSettings.get().eta_model)


def forecast_plan(s: Scenario, p: Plan, *, head: int | None = None,
                  round_state: dict[str, tuple[int, int]] | None = None) -> Plan:
    """``p`` with the forecast model's ETAs and clear-times instead of the lane simulation's."""
    fc = Forecaster(s.durations)
    for org, wf, at in db.recent_arrivals():
        fc.observe_arrival(org, wf, at)
    for org, wf, seconds in db.recent_durations():
        fc.observe_finish(org, wf, seconds)
    order = PlanOrder(p, {c.id: c for c in s.queued}, budget=s.budget, weights=s.weights, costs=s.costs,
                      head=head, round_state=round_state)
    rep = fc.etas(order, s.running, s.now)
    return replace(p, etas=rep.etas, org_clear_s=rep.org_clear_s, clear_s=rep.clear_s)


def live_rounds() -> tuple[int | None, dict[str, tuple[int, int]] | None]:
    """The scheduler's published ``head`` and per-org (last, used), if it published."""
    try:
        snap = snapshot.read_snapshot() or {}
    except Exception:  # noqa: BLE001 - Redis down: the plan's own rounds then
        return None, None
    if "head" not in snap or snap.get("rounds") is None:
        return None, None
    return int(snap["head"]), {o: (int(lu[0]), int(lu[1])) for o, lu in snap["rounds"].items()}
