"""The live ETA model outside the scheduler (``manage.py plan --live``): the forecast of a
plan of the live state, learned from the same recent history the scheduler loads."""
from __future__ import annotations

from dataclasses import replace

from common import snapshot
from fairsched.core import Plan
from fairsched.core.forecast import Forecaster, PlanOrder
from fairsched.core.modes import EtaModel
from fairsched.engine import db
from control.models import SchedulerSettings
from fairsched.core.scenario import Scenario


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
