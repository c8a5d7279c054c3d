"""Operator controls: one adapter from a request (socket message or POST) to the services.

Each control names the Django permission it needs (view is not enough to act),
calls the same service the admin calls, and returns either the change as a
small event (broadcast to every open dashboard right away, so pages update
before the scheduler's next snapshot) or the refusal with messages per field.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import DatabaseError

from charts import services as chart_services
from charts.at_risk import charts_prioritize_at_risk
from charts.models import Chart
from dashboard import selectors
from control import audit
from common import live_updates
from control import services as control_services
from control.models import Pool
from common.validation import MAX_ID, require_int
from orgs import services as org_services
from orgs.models import Org

CHART_ACTIONS: dict[str, Callable[..., Chart]] = {
    "pause": chart_services.chart_pause,
    "resume": chart_services.chart_resume,
    "prioritize": chart_services.chart_prioritize,
    "unprioritize": chart_services.chart_unprioritize,
    "cancel": chart_services.chart_cancel,
    "reorder": chart_services.chart_move_to_front,
}
ORG_ACTIONS: dict[str, Callable[..., Org]] = {
    "hold": org_services.org_hold,
    "release": org_services.org_release,
}
PERMS = {
    **{a: "charts.change_chart" for a in CHART_ACTIONS},
    **{a: "orgs.change_org" for a in ORG_ACTIONS},
    "set_weight": "orgs.change_org",
    "set_cost": "orgs.change_workflowcost",
    "set_budget": "fairsched.change_schedulersettings",
    "set_pool": "fairsched.change_pool",
    "set_policies": "fairsched.change_schedulersettings",
    "rerun": "charts.add_chart",
    "prioritize_at_risk": "charts.change_chart",
}
ACTIONS = tuple(PERMS)
log = logging.getLogger(__name__)


@dataclass
class Outcome:
    ok: bool
    action: str
    event: live_updates.Event | None = None  # the echo for open pages (sent by the caller, stamped)
    errors: dict[str, list[str]] = field(default_factory=dict)
    said: str = ""  # what happened, in the operator's words (the audit entry's summary)

    @property
    def message(self) -> str:
        if self.ok:
            return self.said or "No change: it already was so."
        return " ".join(m for msgs in self.errors.values() for m in msgs)

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "action": self.action, "errors": self.errors, "message": self.message,
                "event": self.event.to_wire() if self.event else None}


def allowed_actions(user) -> list[str]:
    return [a for a, perm in PERMS.items() if user.has_perm(perm)]


def _int(data: Mapping[str, Any], key: str) -> int:
    """An id from the client: a whole number in ``[1, MAX_ID]`` (no float, no bool, nothing
    a database column would overflow on)."""
    return require_int(key, data.get(key), minimum=1, maximum=MAX_ID)


def _chart_event(action: str, chart: Chart, rerun_of: int | None = None) -> live_updates.ChartChanged:
    return live_updates.ChartChanged(action=action, org=chart.org_id, rerun_of=rerun_of, chart={
        "id": chart.pk, "org": chart.org_id, "state": chart.state, "paused": chart.paused,
        "priority": chart.priority, "cancel_requested": chart.cancel_requested,
        "moved_to_front_at": chart.moved_to_front_at.isoformat() if chart.moved_to_front_at else None,
        "external_id": chart.external_id})


def _org_event(action: str, org: Org) -> live_updates.OrgChanged:
    return live_updates.OrgChanged(action=action, org=org.pk,
                                   org_row={"id": org.pk, "weight": org.weight, "held": org.is_held})


def apply_control(user, data: Mapping[str, Any]) -> Outcome:
    """Check the permission for ``data["action"]``, apply it through its service (which
    records it in the audit trail with ``user`` as the actor) and say what happened."""
    raw_action = data.get("action")
    action = raw_action if isinstance(raw_action, str) and len(raw_action) <= 40 else ""
    if action not in PERMS:
        shown = raw_action if isinstance(raw_action, str) and len(raw_action) <= 40 else type(raw_action).__name__
        return Outcome(False, action, errors={"action": [f"Unknown action {shown!r}; one of {', '.join(ACTIONS)}."]})
    if not (user and user.is_authenticated and user.is_active and user.is_staff and user.has_perm(PERMS[action])):
        return Outcome(False, action, errors={"permission": [
            f"You do not have permission to {action.replace('_', ' ')} (needs {PERMS[action]})."]})
    try:
        with audit.capture() as entries:
            outcome = _apply(user, action, data)
        outcome.said = "; ".join(e.summary for e in entries)
        return outcome
    except ValidationError as exc:
        errors = exc.message_dict if hasattr(exc, "error_dict") else {"__all__": exc.messages}
        return Outcome(False, action, errors={k: list(v) for k, v in errors.items()})
    except DatabaseError as exc:  # never a 500 or a closed socket: say it, log it
        log.warning("control %s refused by the database: %s", action, exc)
        return Outcome(False, action, errors={"__all__": ["The database refused the change; nothing was changed."]})


def _apply(user, action: str, data: Mapping[str, Any]) -> Outcome:
    if action in CHART_ACTIONS:
        chart = CHART_ACTIONS[action](chart=_int(data, "chart"), actor=user)
        return Outcome(True, action, event=_chart_event(action, chart))
    if action == "rerun":
        chart = chart_services.chart_rerun(chart=_int(data, "chart"), actor=user)
        return Outcome(True, action, event=_chart_event(action, chart, rerun_of=chart.rerun_of_id))
    if action == "prioritize_at_risk":
        charts_prioritize_at_risk(org=_int(data, "org"), actor=user)
        return Outcome(True, action)
    if action in ORG_ACTIONS:
        org = ORG_ACTIONS[action](org=_int(data, "org"), actor=user)
        return Outcome(True, action, event=_org_event(action, org))
    if action == "set_weight":
        org = org_services.org_set_weight(org=_int(data, "org"), weight=data.get("weight"), actor=user)
        return Outcome(True, action, event=_org_event(action, org))
    if action == "set_cost":
        row = org_services.workflow_cost_set(org=_int(data, "org"), workflow=_int(data, "workflow"),
                                             cost=data.get("cost"), actor=user)
        selectors.invalidate_costs()
        return Outcome(True, action, event=live_updates.Cost(action=action, org=row.org_id,
                                                             workflow=row.workflow_id, cost=row.cost))
    if action == "set_policies":  # any of share, quantum_s, dispatch; the scheduler applies it live
        given = {k: data.get(k) for k in ("share", "quantum_s", "dispatch") if data.get(k) not in (None, "")}
        if not given:
            raise ValidationError({"share": ["Give share, quantum_s or dispatch."]})
        control_services.policies_set(**given, actor=user)
        return Outcome(True, action)
    if action == "set_pool":  # a pool's dial; the pool default is the budget (set_budget)
        name = data.get("pool")
        if not (isinstance(name, str) and Pool.objects.filter(name=name).exists()):  # a dial sets, never creates
            shown = name if isinstance(name, str) and len(name) <= 50 else type(name).__name__
            raise ValidationError({"pool": [f"Unknown pool {shown!r}: pools are created in the admin."]})
        pool = control_services.pool_set(name=name, capacity=data.get("capacity"), actor=user)
        return Outcome(True, action, event=live_updates.PoolChanged(action=action, pool=pool.name,
                                                                    capacity=pool.capacity))
    obj = control_services.budget_set(budget=data.get("budget"), actor=user)
    return Outcome(True, action, event=live_updates.Budget(action=action, budget=obj.budget))
