"""Writes to orgs, workflows and costs. Each validates, writes in one transaction and
notifies the scheduler on commit."""
from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from control import audit
from common.notify import CostNote, OrgNote, notify
from common.validation import MAX_COST, MAX_WEIGHT, require_int
from fairsched.core.rules import HELD_WEIGHT, is_held
from orgs.models import DEFAULT_EXECUTION_TIMEOUT_S, Org, Workflow, WorkflowCost


def _locked_org(org: Org | int) -> Org:
    pk = org.pk if isinstance(org, Org) else org
    try:
        return Org.objects.select_for_update().get(pk=pk)
    except Org.DoesNotExist:
        raise ValidationError({"org": f"Org {pk} does not exist (was it deleted?)."}) from None


def org_create(*, name: str, weight: int = 1, slug: str = "") -> Org:
    weight = require_int("weight", weight, minimum=0, maximum=MAX_WEIGHT)
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "name is required."})
    org = Org(name=name, slug=slug, weight=weight)
    org.full_clean(exclude=["slug"] if not slug else None)
    with transaction.atomic():
        org.save()
        notify(OrgNote(id=org.pk))
    return org


def org_announce(*, org: Org, actor: Any = None) -> None:
    """Record and tell the scheduler that an org was added, on commit (for orgs saved
    outside org_create, such as the admin's add form)."""
    audit.record(actor=actor, action="org_add", org=org, summary=f"Added {org.name} (weight {org.weight})",
                 after={"weight": org.weight})
    notify(OrgNote(id=org.pk))


def _apply_weight(locked: Org, weight: int, *, actor: Any, action: str) -> Org:
    """Write a new weight to a locked row and record it (``weight``, ``hold`` or ``release``)."""
    before = locked.weight
    if is_held(weight) and not is_held(locked.weight):
        locked.weight_before_hold = locked.weight
    locked.weight = weight
    locked.save(update_fields=["weight", "weight_before_hold", "updated_at"])
    summary = {"hold": f"Held {locked.name}",
               "release": f"Released {locked.name} (weight {weight})"}.get(
        action, f"Set the weight of {locked.name} to {weight} (was {before})"
                + (": held" if is_held(weight) else ""))
    audit.record(actor=actor, action=action, org=locked, summary=summary,
                 before={"weight": before}, after={"weight": weight})
    notify(OrgNote(id=locked.pk))
    return locked


def org_set_weight(*, org: Org | int, weight: int, actor: Any = None) -> Org:
    """Set an org's weight. 0 holds the org (its charts stay visible and never dispatch)."""
    weight = require_int("weight", weight, minimum=0, maximum=MAX_WEIGHT)
    with transaction.atomic():
        locked = _locked_org(org)
        if locked.weight == weight:
            return locked
        return _apply_weight(locked, weight, actor=actor, action="weight")


def org_hold(*, org: Org | int, actor: Any = None) -> Org:
    """Hold an org: weight 0, remembering the weight to restore on release."""
    with transaction.atomic():
        locked = _locked_org(org)
        if locked.is_held:
            return locked
        return _apply_weight(locked, HELD_WEIGHT, actor=actor, action="hold")


def org_release(*, org: Org | int, actor: Any = None) -> Org:
    """Release a held org back to the weight it had before the hold (1 if unknown)."""
    with transaction.atomic():
        locked = _locked_org(org)
        if not locked.is_held:
            return locked
        return _apply_weight(locked, locked.weight_before_hold or 1, actor=actor, action="release")


def workflow_create(*, name: str, temporal_type: str = "", description: str = "",
                    execution_timeout_s: int = DEFAULT_EXECUTION_TIMEOUT_S) -> Workflow:
    """A workflow type; ``execution_timeout_s`` (1 s to 366 days) bounds each chart's run."""
    wf = Workflow(name=(name or "").strip(), temporal_type=temporal_type, description=description,
                  execution_timeout_s=execution_timeout_s)
    wf.full_clean(exclude=["temporal_type"])
    with transaction.atomic():
        wf.save()
    return wf


def workflow_cost_set(*, org: Org | int, workflow: Workflow | int, cost: int, actor: Any = None) -> WorkflowCost:
    """Set the cost of an (org, workflow) pair. In-flight charts keep the cost they started with."""
    cost = require_int("cost", cost, minimum=1, maximum=MAX_COST)
    with transaction.atomic():
        locked = _locked_org(org)
        wf_pk = workflow.pk if isinstance(workflow, Workflow) else workflow
        wf = Workflow.objects.filter(pk=wf_pk).first()
        if wf is None:
            raise ValidationError({"workflow": f"Workflow {wf_pk} does not exist."})
        row, created = WorkflowCost.objects.get_or_create(org=locked, workflow_id=wf_pk, defaults={"cost": cost})
        if not created and row.cost == cost:
            return row
        before = None if created else row.cost
        if not created:
            row.cost = cost
            row.save(update_fields=["cost"])
        audit.record(actor=actor, action="cost", org=locked,
                     summary=f"Set the cost of {wf.name} for {locked.name} to {cost} (was {before or 1})",
                     before={"workflow": wf.name, "cost": before}, after={"workflow": wf.name, "cost": cost})
        notify(CostNote(org=locked.pk, workflow=wf.pk))
    return row


def workflow_cost_delete(*, org: Org | int, workflow: Workflow | int, actor: Any = None) -> None:
    """Remove a pair's cost row: the pair costs 1 again."""
    org_pk = org.pk if isinstance(org, Org) else org
    wf_pk = workflow.pk if isinstance(workflow, Workflow) else workflow
    with transaction.atomic():
        row = WorkflowCost.objects.select_related("org", "workflow").filter(org_id=org_pk, workflow_id=wf_pk).first()
        if row is None:
            return
        row.delete()
        audit.record(actor=actor, action="cost", org=row.org,
                     summary=f"Removed the cost of {row.workflow.name} for {row.org.name} (was {row.cost}; costs 1 again)",
                     before={"workflow": row.workflow.name, "cost": row.cost},
                     after={"workflow": row.workflow.name, "cost": None})
        notify(CostNote(org=row.org_id, workflow=row.workflow_id))
