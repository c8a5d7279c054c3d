"""The Temporal workflow ids of a deployment's charts, ``chart-<deployment>-<pk>``.

Pure Python (the worker's workflow code imports it through
``fairsched.temporal.shared``). The deployment id itself is written once into the
database (:mod:`control.deployment`); a process learns it there, or is given it
(:func:`use_workflow_ids`: the scheduler at take-over).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

WORKFLOW_ID_PREFIX = "chart-"
DEPLOYMENT_RE = re.compile(r"^[a-z][a-z0-9]{0,15}$")  # short, never all digits, valid in any Temporal id


@dataclass(frozen=True)
class WorkflowIds:
    """The Temporal workflow ids of one deployment's charts.

    ``chart-<deployment>-<pk>``: one id per chart (starts are idempotent), and never the
    id of another deployment's chart on the same namespace. Charts with a pk below
    ``legacy_below`` (those that existed when this version first led: see
    :mod:`control.deployment`) keep the id they had before deployments had ids,
    ``chart-<pk>``, for ever: a chart's id never changes, so none started under the old
    id is started again under the new one. ``legacy_below`` None: not fixed yet (no
    scheduler of this version has led), so every chart still has the old id."""

    deployment: str
    legacy_below: int | None = 1

    def __post_init__(self) -> None:
        if not DEPLOYMENT_RE.match(self.deployment):
            raise ValueError(f"deployment id: a lowercase letter, then at most 15 lowercase letters or digits; "
                             f"got {self.deployment!r}")

    @property
    def prefix(self) -> str:
        """What every id of this deployment (and no other's) starts with."""
        return f"{WORKFLOW_ID_PREFIX}{self.deployment}-"

    def is_legacy(self, chart_id: int) -> bool:
        return self.legacy_below is None or int(chart_id) < self.legacy_below

    def of(self, chart_id: int | str) -> str:
        if self.is_legacy(int(chart_id)):
            return f"{WORKFLOW_ID_PREFIX}{chart_id}"
        return f"{self.prefix}{chart_id}"

    def chart_of(self, workflow_id_: str) -> int | None:
        """The pk of one of this deployment's charts whose workflow id this is; None for
        any other id (another deployment's, a user's, a legacy id of a chart created
        after the cut). Reconciliation adopts only these."""
        if workflow_id_.startswith(self.prefix):
            tail = workflow_id_[len(self.prefix):]
            if tail.isdigit() and not self.is_legacy(int(tail)):
                return int(tail)
            return None
        if workflow_id_.startswith(WORKFLOW_ID_PREFIX):
            tail = workflow_id_[len(WORKFLOW_ID_PREFIX):]
            if tail.isdigit() and self.is_legacy(int(tail)):
                return int(tail)
        return None


_current: WorkflowIds | None = None
_resolver: Callable[[], WorkflowIds] | None = None


def use_workflow_ids(ids: WorkflowIds | None) -> None:
    """Set this process's ids (the scheduler, at take-over; the worker, at start)."""
    global _current
    _current = ids


def set_resolver(resolver: Callable[[], WorkflowIds] | None) -> None:
    """How a process that did not set its ids finds them (Django: the database's deployment row)."""
    global _resolver
    _resolver = resolver


def current_workflow_ids() -> WorkflowIds:
    if _current is not None:
        return _current
    if _resolver is None:
        raise RuntimeError("the deployment's workflow ids are not known in this process")
    return _resolver()


def workflow_id(chart_id: int | str) -> str:
    """The Temporal workflow id of a chart in this process's deployment (see :class:`WorkflowIds`)."""
    return current_workflow_ids().of(chart_id)


def chart_id_of(workflow_id_: str) -> int | None:
    """The chart pk of one of this deployment's workflow ids; None for any other id."""
    return current_workflow_ids().chart_of(workflow_id_)
