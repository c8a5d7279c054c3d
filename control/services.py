"""Writes to the scheduler's settings."""
from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from control import audit
from scheduling.modes import EtaModel
from control.models import MAX_QUANTUM_S, MIN_QUANTUM_S, Dispatch, Pool, SchedulerSettings, Share
from common.notify import SettingsNote, notify
from common.validation import MAX_BUDGET, MAX_INTERVAL_S, require_int

_ETA_MODELS = tuple(m.value for m in EtaModel)


def _record_budget(actor: Any, before: int, after: int) -> None:
    audit.record(actor=actor, action="budget", summary=f"Set the budget to {after} (was {before})",
                 before={"budget": before}, after={"budget": after})


def budget_set(*, budget: int, actor: Any = None) -> SchedulerSettings:
    """Set the total cost budget. Lowering it never stops running charts; dispatch waits."""
    budget = require_int("budget", budget, minimum=0, maximum=MAX_BUDGET)
    with transaction.atomic():
        obj = SchedulerSettings.get()
        if obj.budget == budget:
            return obj
        before, obj.budget = obj.budget, budget
        obj.save()
        _record_budget(actor, before, budget)
        notify(SettingsNote())
    return obj


POLICY_FIELDS = ("share", "quantum_s", "dispatch")


def _policies(obj: SchedulerSettings) -> dict[str, Any]:
    return {f: getattr(obj, f) for f in POLICY_FIELDS}


def _check_policies(obj: SchedulerSettings, share: Any, quantum_s: Any, dispatch: Any) -> None:
    """Set the policies on ``obj``; ValidationError naming the field for a bad value."""
    for field, value, choices in (("share", share, Share), ("dispatch", dispatch, Dispatch)):
        if value is None:
            continue
        if not isinstance(value, str) or value not in choices.values:
            raise ValidationError({field: f"{field} must be one of {', '.join(choices.values)}, got {value!r}."})
        setattr(obj, field, value)
    if quantum_s is not None:
        try:
            if isinstance(quantum_s, bool):
                raise TypeError
            value = float(quantum_s)
        except (TypeError, ValueError, OverflowError):
            raise ValidationError({"quantum_s": f"quantum_s must be a number of seconds, got {quantum_s!r}."}) from None
        if not MIN_QUANTUM_S <= value <= MAX_QUANTUM_S:  # NaN fails too
            raise ValidationError({"quantum_s": f"quantum_s must be between {MIN_QUANTUM_S:g} and "
                                                f"{MAX_QUANTUM_S:g} s, got {quantum_s!r}."})
        obj.quantum_s = value


def _record_policies(actor: Any, before: dict[str, Any], after: dict[str, Any]) -> None:
    changed = {k: v for k, v in after.items() if before[k] != v}
    summary = "Set the policies: " + ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                                               for k, v in changed.items())
    audit.record(actor=actor, action="policies", summary=summary,
                 before={k: before[k] for k in changed}, after=changed)


def policies_set(*, share: str | None = None, quantum_s: float | None = None, dispatch: str | None = None,
                 actor: Any = None) -> SchedulerSettings:
    """Switch the scheduling policies live (docs/scheduling.md): the running scheduler
    re-ranks every org on a ``share`` (or, under ``work``, ``quantum_s``) change, and a
    ``dispatch`` change applies from its next dispatch. Audited and notified like the budget."""
    return scheduler_settings_set(share=share, quantum_s=quantum_s, dispatch=dispatch, actor=actor)


def scheduler_settings_set(
    *, budget: int | None = None, eta_interval_s: float | None = None, reconcile_interval_s: float | None = None,
    eta_model: EtaModel | str | None = None, share: str | None = None, quantum_s: float | None = None,
    dispatch: str | None = None, actor: Any = None,
) -> SchedulerSettings:
    """Set any of the dials at once (the admin's form). A change of the budget or of the
    policies (``share``, ``quantum_s``, ``dispatch``) is audited; any change notifies the
    scheduler. Bad input: ValidationError naming the field, nothing written."""
    with transaction.atomic():
        obj = SchedulerSettings.get()
        before = obj.budget
        policies_before = _policies(obj)
        _check_policies(obj, share, quantum_s, dispatch)
        if budget is not None:
            obj.budget = require_int("budget", budget, minimum=0, maximum=MAX_BUDGET)
        for field, value in (("eta_interval_s", eta_interval_s), ("reconcile_interval_s", reconcile_interval_s)):
            if value is None:
                continue
            try:
                value = float(value)
            except (TypeError, ValueError, OverflowError):
                raise ValidationError({field: f"{field} must be a number of seconds, got {value!r}."}) from None
            if not value >= 0.1:
                raise ValidationError({field: f"{field} must be at least 0.1 s, got {value}."})
            if not value <= MAX_INTERVAL_S:
                raise ValidationError({field: f"{field} must be at most {MAX_INTERVAL_S:g} s, got {value}."})
            setattr(obj, field, value)
        if eta_model is not None:
            if eta_model not in _ETA_MODELS:
                raise ValidationError({"eta_model": f"eta_model must be one of {', '.join(_ETA_MODELS)}, "
                                                    f"got {eta_model!r}."})
            obj.eta_model = EtaModel(eta_model).value
        obj.save()
        if obj.budget != before:
            _record_budget(actor, before, obj.budget)
        if _policies(obj) != policies_before:
            _record_policies(actor, policies_before, _policies(obj))
        notify(SettingsNote())
    return obj


# --------------------------------------------------------------------- pools
def pool_set(*, name: str, capacity: int, actor: Any = None) -> Pool:
    """Create the pool ``name`` or set its capacity (docs/scheduling.md, "Pools"). Lowering
    it stops nothing: dispatch waits for the pool to drain. ``default`` is the budget
    (:func:`budget_set`)."""
    from django.core.exceptions import ValidationError

    capacity = require_int("capacity", capacity, minimum=0, maximum=MAX_BUDGET)
    name = (name or "").strip()
    field = Pool._meta.get_field("name")
    try:
        field.run_validators(name)
        if not name:
            raise ValidationError("a name is required.")
    except ValidationError as e:
        raise ValidationError({"name": e.messages}) from None
    with transaction.atomic():
        pool = Pool.objects.select_for_update().filter(name=name).first()
        before = None if pool is None else pool.capacity
        if pool is not None and before == capacity:
            return pool
        if pool is None:
            pool = Pool.objects.create(name=name, capacity=capacity)
        else:
            pool.capacity = capacity
            pool.save(update_fields=["capacity"])
        audit.record(actor=actor, action="pool", summary=f"Set the capacity of pool {name} to {capacity} "
                     f"(was {'none: new' if before is None else before})",
                     before=None if before is None else {"pool": name, "capacity": before},
                     after={"pool": name, "capacity": capacity})
        notify(SettingsNote())
    return pool


def pool_delete(*, name: str, actor: Any = None) -> None:
    """Remove a pool. The charts of a pair that still draws on it are blocked (a pool
    that does not exist has no room) until its cost or the pool is set again."""
    with transaction.atomic():
        pool = Pool.objects.select_for_update().filter(name=name).first()
        if pool is None:
            return
        pool.delete()
        audit.record(actor=actor, action="pool", summary=f"Removed pool {name} (capacity {pool.capacity})",
                     before={"pool": name, "capacity": pool.capacity}, after=None)
        notify(SettingsNote())
