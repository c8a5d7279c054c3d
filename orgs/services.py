"""Writes to orgs, workflows and costs. Each validates, writes in one transaction, records
an operator's change in the audit trail and notifies the scheduler on commit. An existing
org changes through one service a change (:func:`org_rename`, :func:`org_set_webhook`,
:func:`org_set_max_queued`, :func:`org_set_members`, :func:`org_set_turnaround`,
:func:`org_set_weight`, :func:`org_hold`, :func:`org_release`), or several at once, all or
nothing, through :func:`org_update` (the admin's form)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import transaction
from django.db.models import DateTimeField, DurationField, ExpressionWrapper, F, Value

from control import audit
from control.models import Pool
from common.notify import CostNote, OrgNote, Resync, SettingsNote, notify
from common.validation import MAX_COST, MAX_ID, MAX_WEIGHT, check_text, parse_turnaround, require_int
from scheduling.rules import HELD_WEIGHT, is_held
from orgs.models import (DEFAULT_EXECUTION_TIMEOUT_S, MAX_EXPECTED_DURATION_S, MAX_QUEUED, MIN_EXPECTED_DURATION_S, Org,
                         OrgPoolLimit, Workflow, WorkflowCost, known_pools)


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
    """Write a new weight to a locked row, record it (``weight``, ``hold`` or ``release``)
    and notify the scheduler."""
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


# What org_update changes: the org's fields an operator edits (the admin's form).
ORG_FIELDS = ("name", "slug", "weight", "members", "webhook_url", "webhook_secret", "webhook_clear_margin_s",
              "max_queued")
UPDATE_FIELDS = (*ORG_FIELDS, "turnaround")  # what org_update takes (the turnaround through _apply_turnaround)
_UNCHANGED = object()
MAX_MARGIN_S = 2**31 - 1  # fits a database integer on every backend
SECRET_SHOWN, NEW_SECRET_SHOWN = "(secret)", "(new secret)"  # the audit trail never holds the secret


def _text(field: str, value: Any, *, required: bool = False) -> str:
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise ValidationError({field: f"{field}: must be text, got {type(value).__name__}."})
    value = check_text(field, value).strip()
    if required and not value:
        raise ValidationError({field: f"{field}: is required."})
    return value


def _member_pks(value: Any) -> set[int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValidationError({"members": f"members: must be a list of users or user ids, got {value!r}."})
    pks = {require_int("members", getattr(u, "pk", u), minimum=1, maximum=MAX_ID) for u in value}
    found = set(get_user_model().objects.filter(pk__in=pks).values_list("pk", flat=True))
    if pks - found:
        raise ValidationError({"members": f"members: no user {min(pks - found)} (was it deleted?)."})
    return pks


def _org_values(changes: dict[str, Any]) -> dict[str, Any]:
    """The values ``org_update`` was given, each checked as its field allows (the model's
    own rules are checked after, on the row: :meth:`Org.full_clean`)."""
    unknown = sorted(set(changes) - set(UPDATE_FIELDS))
    if unknown:
        raise ValidationError({unknown[0]: f"{unknown[0]}: not a field an org update changes "
                                           f"(one of {', '.join(UPDATE_FIELDS)})."})
    out: dict[str, Any] = {}
    for field, value in changes.items():
        if field == "weight":
            out[field] = require_int(field, value, minimum=0, maximum=MAX_WEIGHT)
        elif field == "webhook_clear_margin_s":
            out[field] = require_int(field, value, minimum=0, maximum=MAX_MARGIN_S)
        elif field == "max_queued":  # None (or ""): no cap
            out[field] = None if value is None or value == "" else require_int(field, value, minimum=0,
                                                                               maximum=MAX_QUEUED)
        elif field == "members":
            out[field] = _member_pks(value)
        else:
            out[field] = _text(field, value, required=field == "name")
    return out


def _shown(field: str, value: Any, *, new: bool = False) -> Any:
    if field == "webhook_secret":
        return (NEW_SECRET_SHOWN if new else SECRET_SHOWN) if value else ""
    return value


def _usernames(pks: set[int]) -> list[str]:
    return sorted(get_user_model().objects.filter(pk__in=pks).values_list("username", flat=True))


# The services of org_update, one a change, each with the fields it takes.
NAME_FIELDS = ("name", "slug")
WEBHOOK_FIELDS = ("webhook_url", "webhook_secret", "webhook_clear_margin_s")


def _change_fields(locked: Org, values: dict[str, Any], *, actor: Any) -> bool:
    """Write the fields of ``values`` that differ on a locked org, checked as the model
    allows (``Org.full_clean`` on them: a unique name and slug, a URL, a secret with a webhook
    URL, a ``whsec_`` secret in base64; an error names the field), in one ``org_change``
    audit entry with the values before and after (the secret as ``(secret)``/``(new
    secret)``, never its value), and notify. False: nothing differed, nothing written."""
    fields = [f for f in values if values[f] != getattr(locked, f)]
    if not fields:
        return False
    before = {f: _shown(f, getattr(locked, f)) for f in fields}
    old_name = locked.name
    for f in fields:
        setattr(locked, f, values[f])
    if "slug" in fields and not locked.slug:
        locked.slug = locked.default_slug()  # before the uniqueness check, not in save()
    try:
        locked.full_clean(exclude=[f for f in ORG_FIELDS if f not in fields])
    except ValidationError as exc:
        raise ValidationError({f: [m if f == NON_FIELD_ERRORS or m.startswith(f"{f}:") else f"{f}: {m}"
                                   for m in msgs] for f, msgs in exc.message_dict.items()}) from None
    locked.save(update_fields=[*fields, "updated_at"])
    was = f" (was {old_name})" if "name" in fields else ""
    audit.record(actor=actor, action="org_change", org=locked,
                 summary=f"Changed {', '.join(f.replace('_', ' ') for f in fields)} of {locked.name}{was}",
                 before=before, after={f: _shown(f, getattr(locked, f), new=True) for f in fields})
    notify(OrgNote(id=locked.pk))
    return True


def _given(**values: Any) -> dict[str, Any]:
    return {f: v for f, v in values.items() if v is not _UNCHANGED}


def org_rename(*, org: Org | int, name: Any = _UNCHANGED, slug: Any = _UNCHANGED, actor: Any = None) -> Org:
    """Change an org's name and/or slug (a blank slug becomes the name's): validated, unique,
    audited (``org_change``) and notified; the same values are no change."""
    values = _org_values(_given(name=name, slug=slug))
    with transaction.atomic():
        locked = _locked_org(org)
        _change_fields(locked, values, actor=actor)
    return locked


def org_set_webhook(*, org: Org | int, webhook_url: Any = _UNCHANGED, webhook_secret: Any = _UNCHANGED,
                    webhook_clear_margin_s: Any = _UNCHANGED, actor: Any = None) -> Org:
    """Change an org's webhook: its URL, its secret (a secret needs a URL), how far a
    clear-time must move to be sent. Audited without the secret's value, and notified."""
    values = _org_values(_given(webhook_url=webhook_url, webhook_secret=webhook_secret,
                                webhook_clear_margin_s=webhook_clear_margin_s))
    with transaction.atomic():
        locked = _locked_org(org)
        _change_fields(locked, values, actor=actor)
    return locked


def org_set_max_queued(*, org: Org | int, max_queued: Any, actor: Any = None) -> Org:
    """Cap how many of an org's charts the producer API lets wait (None or "": no cap; a whole
    number from 0 to ``MAX_QUEUED``). Audited and notified."""
    values = _org_values({"max_queued": max_queued})
    with transaction.atomic():
        locked = _locked_org(org)
        _change_fields(locked, values, actor=actor)
    return locked


def org_set_members(*, org: Org | int, members: Any, actor: Any = None) -> Org:
    """Set who may see the org's pages (users or user ids; each must exist). Audited by
    username, and notified; the same members are no change."""
    pks = _org_values({"members": members})["members"]
    with transaction.atomic():
        locked = _locked_org(org)
        old = set(locked.members.values_list("pk", flat=True))
        if pks != old:
            locked.members.set(pks)
            audit.record(actor=actor, action="org_change", org=locked,
                         summary=f"Changed members of {locked.name}",
                         before={"members": _usernames(old)}, after={"members": _usernames(pks)})
            notify(OrgNote(id=locked.pk))
    return locked


def org_update(*, org: Org | int, actor: Any = None, **changes: Any) -> Org:
    """Several changes to an existing org at once, all or nothing: any of
    :data:`UPDATE_FIELDS`, given as keywords (the others are left as they are). The admin's
    form and list come through here.

    Every value is checked first (an error names the field and nothing is written), then each
    change goes to its own service, in one transaction: :func:`org_rename`,
    :func:`org_set_webhook`, :func:`org_set_max_queued`, :func:`org_set_members`,
    :func:`org_set_turnaround` and :func:`org_set_weight` (0 holds the org). Each audits its
    own change; the scheduler gets one ``org`` note on commit (:func:`common.notify.notify`
    sends a note once a transaction). A value equal to the current one is no change. Returns
    the org as saved."""
    turnaround = changes.pop("turnaround", _UNCHANGED)
    if turnaround is not _UNCHANGED:
        parse_turnaround("turnaround", turnaround)
    values = _org_values(changes)
    pk = org.pk if isinstance(org, Org) else org
    with transaction.atomic():
        _locked_org(pk)
        if turnaround is not _UNCHANGED:
            org_set_turnaround(org=pk, turnaround=turnaround, actor=actor)
        for fields, service in ((NAME_FIELDS, org_rename), (WEBHOOK_FIELDS, org_set_webhook),
                                (("max_queued",), org_set_max_queued), (("members",), org_set_members),
                                (("weight",), org_set_weight)):
            given = {f: values[f] for f in fields if f in values}
            if given:
                service(org=pk, actor=actor, **given)
        return _locked_org(pk)


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
        return _apply_weight(locked, locked.weight_on_release, actor=actor, action="release")


def org_set_turnaround(*, org: Org | int, turnaround: Any, actor: Any = None) -> Org:
    """Set (or clear, with None or "") an org's turnaround: its charts not finished yet and
    without a due time of their own become due ``created_at`` + ``turnaround``, in the same
    transaction (:func:`_apply_turnaround`). Audited and notified."""
    value = parse_turnaround("turnaround", turnaround)
    with transaction.atomic():
        locked = _locked_org(org)
        if _apply_turnaround(locked, value, actor=actor):
            notify(OrgNote(id=locked.pk))
    return locked


def turnaround_text(seconds: float) -> str:
    """A turnaround in hours, minutes and seconds, as the audit and the activity show it:
    ``25 min``, ``1 h 30 min``, ``24 h`` (never a fraction of an hour, "0.416667 h")."""
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return " ".join(f"{n} {unit}" for n, unit in ((h, "h"), (m, "min"), (s, "s")) if n) or "0 s"


def _apply_turnaround(locked: Org, value: Any, *, actor: Any) -> bool:
    """Write a new turnaround on a locked org and apply it to its unfinished charts without
    a due time of their own: one UPDATE on ``(org, state)`` through the org's ``charts``
    relation (the charts app sits above this one). ``updated_at`` is left alone: the
    scheduler derives the same due time from the org's row (``fairsched.engine.due_states``), so
    it re-reads no chart. Audited; the caller notifies. False: no change."""
    before = locked.turnaround
    if before == value:
        return False
    locked.turnaround = value
    locked.save(update_fields=["turnaround", "updated_at"])
    unfinished = locked.charts.filter(state__in=("queued", "running"), due_explicit=False)
    if value:
        unfinished.update(due_at=ExpressionWrapper(F("created_at") + Value(value, output_field=DurationField()),
                                                   output_field=DateTimeField()))
    else:
        unfinished.update(due_at=None)
    shown = (lambda t: "none" if t is None else turnaround_text(t.total_seconds()))
    audit.record(actor=actor, action="turnaround", org=locked,
                 summary=f"Set the turnaround of {locked.name} to {shown(value)} (was {shown(before)})",
                 before={"turnaround_s": before and before.total_seconds()},
                 after={"turnaround_s": value and value.total_seconds()})
    return True


def workflow_create(*, name: str, temporal_type: str = "", description: str = "",
                    execution_timeout_s: int = DEFAULT_EXECUTION_TIMEOUT_S,
                    expected_duration_s: int | None = None) -> Workflow:
    """A workflow type; ``execution_timeout_s`` (1 s to 366 days) bounds each chart's run;
    ``expected_duration_s`` (1 s to 7 days, or None) is the ETAs' estimate of a chart of it
    until some have finished (docs/scheduling.md, "The duration estimate")."""
    wf = Workflow(name=(name or "").strip(), temporal_type=temporal_type, description=description,
                  execution_timeout_s=execution_timeout_s,
                  expected_duration_s=_expected_duration(expected_duration_s))
    wf.full_clean(exclude=["temporal_type"])
    with transaction.atomic():
        wf.save()
    return wf


def _expected_duration(value: object) -> int | None:
    if value is None or value == "":
        return None
    return require_int("expected_duration_s", value, minimum=MIN_EXPECTED_DURATION_S,
                       maximum=MAX_EXPECTED_DURATION_S)


def workflow_expected_set(*, workflow: Workflow | int, seconds: int | None, actor: Any = None) -> bool:
    """Declare how long a chart of ``workflow`` runs (1 s to 7 days; None: not declared).
    The scheduler re-reads its estimates at once (a resync note); False if unchanged."""
    seconds = _expected_duration(seconds)
    with transaction.atomic():
        wf_pk = workflow.pk if isinstance(workflow, Workflow) else workflow
        wf = Workflow.objects.select_for_update().filter(pk=wf_pk).first()
        if wf is None:
            raise ValidationError({"workflow": f"Workflow {wf_pk} does not exist."})
        before = wf.expected_duration_s
        if before == seconds:
            return False
        wf.expected_duration_s = seconds
        wf.save(update_fields=["expected_duration_s"])
        shown = (lambda v: "none" if v is None else f"{v} s")
        audit.record(actor=actor, action="expected", summary=f"Set the expected duration of {wf.name} to "
                     f"{shown(seconds)} (was {shown(before)})",
                     before={"workflow": wf.name, "expected_duration_s": before},
                     after={"workflow": wf.name, "expected_duration_s": seconds})
        notify(Resync())
    return True


def check_pool_units(pools: Any, field: str = "pools") -> dict[str, int]:
    """``pools`` ({"pool": units}) checked: each pool known (a pool or ``default``), each
    units an integer from 1 to MAX_COST. An empty one is the plain cost."""
    if pools is None:
        return {}
    if not isinstance(pools, dict):
        raise ValidationError({field: 'expected an object such as {"llm": 1, "gpu": 2}.'})
    known = known_pools()
    out = {}
    for name, units in pools.items():
        if name not in known:
            raise ValidationError({field: f"unknown pool {name!r} (known: {', '.join(sorted(known))})."})
        out[name] = require_int(f"{field}.{name}", units, minimum=1, maximum=MAX_COST)
    return dict(sorted(out.items()))


def workflow_cost_set(*, org: Org | int, workflow: Workflow | int, cost: int, pools: dict | None = None,
                      actor: Any = None) -> WorkflowCost:
    """Set the cost of an (org, workflow) pair, or with ``pools`` what it draws on
    ({"llm": 1, "gpu": 2}; docs/scheduling.md, "Pools"). In-flight charts keep what they
    started with."""
    cost = require_int("cost", cost, minimum=1, maximum=MAX_COST)
    pools = check_pool_units(pools)
    with transaction.atomic():
        locked = _locked_org(org)
        wf_pk = workflow.pk if isinstance(workflow, Workflow) else workflow
        wf = Workflow.objects.filter(pk=wf_pk).first()
        if wf is None:
            raise ValidationError({"workflow": f"Workflow {wf_pk} does not exist."})
        row, created = WorkflowCost.objects.get_or_create(org=locked, workflow_id=wf_pk,
                                                          defaults={"cost": cost, "pools": pools})
        if not created and row.cost == cost and (row.pools or {}) == pools:
            return row
        before = None if created else _cost_text(row.cost, row.pools)
        if not created:
            row.cost, row.pools = cost, pools
            row.save(update_fields=["cost", "pools"])
        after = _cost_text(cost, pools)
        audit.record(actor=actor, action="cost", org=locked,
                     summary=f"Set the cost of {wf.name} for {locked.name} to {after} (was {before or 1})",
                     before={"workflow": wf.name, "cost": before}, after={"workflow": wf.name, "cost": after})
        notify(CostNote(org=locked.pk, workflow=wf.pk))
        if pools or not isinstance(before, (int, type(None))) or _pools_in_use():
            notify(SettingsNote())  # what a pair draws on is read with the pools (engine read_config)
    return row


def _pools_in_use() -> bool:
    return Pool.objects.exists() or WorkflowCost.objects.exclude(pools={}).exists() or OrgPoolLimit.objects.exists()


def _cost_text(cost: int, pools: dict | None) -> int | str:
    """A cost as the audit trail shows it: the number, or what it draws on ("llm 1, gpu 2")."""
    if pools:
        return ", ".join(f"{p} {u}" for p, u in sorted(pools.items()))
    return cost


def org_pool_limit_set(*, org: Org | int, pool: str, max: int | None = None, min: int = 0,
                       actor: Any = None) -> OrgPoolLimit | None:
    """An org's ceiling (``max``, None: none) and guaranteed minimum (``min``) in ``pool``
    (docs/scheduling.md, "Pools"); neither (None and 0) removes the limit. Audited; the
    scheduler applies it at once, and running charts are never stopped."""
    if pool not in known_pools():
        raise ValidationError({"pool": f"unknown pool {pool!r}."})
    mx = None if max is None or max == "" else require_int("max", max, minimum=0, maximum=MAX_COST * 1000)
    mn = require_int("min", min or 0, minimum=0, maximum=MAX_COST * 1000)
    if mx is not None and mn > mx:
        raise ValidationError({"min": f"min ({mn}) must be at most max ({mx})."})
    with transaction.atomic():
        locked = _locked_org(org)
        row = OrgPoolLimit.objects.filter(org=locked, pool=pool).first()
        before = None if row is None else {"pool": pool, "max": row.max, "min": row.min}
        after = None if mx is None and mn == 0 else {"pool": pool, "max": mx, "min": mn}
        if before == after:
            return row
        if after is None:
            row.delete()
            row = None
        elif row is None:
            row = OrgPoolLimit.objects.create(org=locked, pool=pool, max=mx, min=mn)
        else:
            row.max, row.min = mx, mn
            row.save(update_fields=["max", "min"])
        shown = (lambda v: "none" if v is None else f"max {v['max'] if v['max'] is not None else '-'}, min {v['min']}")
        audit.record(actor=actor, action="limit", org=locked,
                     summary=f"Set {locked.name}'s limit in pool {pool} to {shown(after)} (was {shown(before)})",
                     before=before, after=after)
        notify(SettingsNote())
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
        if row.pools or _pools_in_use():
            notify(SettingsNote())
