"""Writes to the scheduler's settings."""
from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from control import audit
from fairsched.core.modes import EtaModel
from fairsched.core.simulator import ETA_MODELS
from control.models import SchedulerSettings
from common.notify import SettingsNote, notify
from common.validation import MAX_BUDGET, MAX_INTERVAL_S, require_int


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


def scheduler_settings_set(
    *, budget: int | None = None, eta_interval_s: float | None = None, reconcile_interval_s: float | None = None,
    eta_model: EtaModel | str | None = None, actor: Any = None,
) -> SchedulerSettings:
    """Set any of the dials at once (the admin's form)."""
    with transaction.atomic():
        obj = SchedulerSettings.get()
        before = obj.budget
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
            if eta_model not in ETA_MODELS:
                raise ValidationError({"eta_model": f"eta_model must be one of {', '.join(ETA_MODELS)}, "
                                                    f"got {eta_model!r}."})
            obj.eta_model = EtaModel(eta_model).value
        obj.save()
        if obj.budget != before:
            _record_budget(actor, before, obj.budget)
        notify(SettingsNote())
    return obj
