"""What the scheduler, the worker and user workers share: names and input types.

No Django and no I/O here: workflow code imports this module (through
``workflow.unsafe.imports_passed_through()``), so it must stay deterministic and
cheap to import.

One dataclass input per workflow and activity (fields can be added without
breaking callers). The scheduler starts every chart's workflow with one
:class:`ChartInput`; on the wire it is a JSON object
``{"chart_id": 12, "org": "acme", "org_id": 3, "workflow": "code",
"external_id": "mrn-12", "payload": {...}}``, so a user's workflow may declare
its own dataclass with these fields (extra ones ignored) or take a ``dict``.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

WORKFLOW_ID_PREFIX = "chart-"
DEFAULT_TASK_QUEUE = "fairsched"

DEMO_WORKFLOW = "DemoChart"
DEMO_WORK_ACTIVITY = "fairsched.demo_work"
RECORD_OUTCOME_ACTIVITY = "fairsched.record_chart_outcome"

# Outcomes, as stored on Chart.state (charts.models.ChartState values).
SUCCEEDED, FAILED, CANCELLED = "succeeded", "failed", "cancelled"

# DemoChart durations when the payload gives no "seconds": (low, high) seconds,
# drawn uniformly per chart (deterministically, from the workflow's seeded random).
DEMO_PROFILES: dict[str, tuple[float, float]] = {
    "code": (20.0, 60.0),
    "review": (5.0, 20.0),
    "audit": (60.0, 180.0),
}
DEMO_DEFAULT_PROFILE = (10.0, 40.0)
DEMO_MAX_SECONDS = 86_400.0  # a demo chart runs at most a day (the default execution timeout)


@dataclass(frozen=True)
class DemoPayload:
    """A DemoChart payload, checked: ``seconds`` None means "draw from the profile"."""

    seconds: float | None
    fail: bool = False
    fail_record: bool = False


def demo_payload(payload: Any) -> DemoPayload:
    """Check a DemoChart payload; ``ValueError`` naming the field if it is unusable.

    ``seconds``: a finite number from 0 to :data:`DEMO_MAX_SECONDS` (absent or null:
    drawn from the workflow's profile); ``fail`` and ``fail_record``: true or false.
    Other keys are the producer's own and ignored. Without this check a payload such
    as ``{"seconds": "abc"}`` or ``{"seconds": 1e300}`` broke the workflow's code on
    every workflow task, which Temporal retries for ever: the chart held its budget
    until someone terminated it."""
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise ValueError(f"payload: must be a JSON object, got {type(payload).__name__}")
    seconds = payload.get("seconds")
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise ValueError(f"payload.seconds: must be a number of seconds, got {seconds!r}"[:300])
        if not math.isfinite(seconds) or not 0 <= seconds <= DEMO_MAX_SECONDS:
            raise ValueError(f"payload.seconds: must be from 0 to {DEMO_MAX_SECONDS:g}, got {seconds!r}")
        seconds = float(seconds)
    flags = {}
    for name in ("fail", "fail_record"):
        value = payload.get(name, False)
        if value is None:
            value = False
        if not isinstance(value, bool):
            raise ValueError(f"payload.{name}: must be true or false, got {value!r}"[:300])
        flags[name] = value
    return DemoPayload(seconds, **flags)


DEPLOYMENT_RE = re.compile(r"^[a-z][a-z0-9]{0,15}$")  # short, never all digits, valid in any Temporal id


@dataclass(frozen=True)
class WorkflowIds:
    """The Temporal workflow ids of one deployment's charts.

    ``chart-<deployment>-<pk>``: one id per chart (starts are idempotent), and never the
    id of another deployment's chart on the same namespace. Charts with a pk below
    ``legacy_below`` (those that existed when this version first led: see
    :mod:`fairsched.deployment`) keep the id they had before deployments had ids,
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


def split_temporal_type(temporal_type: str, default_queue: str) -> tuple[str, str]:
    """``"Type"`` -> (Type, default queue); ``"Type@queue"`` -> (Type, queue).

    ``Workflow.temporal_type`` names the Temporal workflow type the scheduler
    starts; a user whose worker polls its own task queue appends ``@queue``.
    """
    name, sep, queue = temporal_type.rpartition("@")
    if sep and name and queue:
        return name, queue
    return temporal_type, default_queue


@dataclass
class ChartInput:
    """The one input of every chart's workflow (DemoChart and users' own)."""

    chart_id: int
    org: str
    org_id: int
    workflow: str
    external_id: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass
class DemoWorkInput:
    """DemoChart's work activity: run ``seconds``, heartbeating; fail if ``fail``."""

    chart_id: int
    seconds: float
    fail: bool = False


@dataclass
class OutcomeInput:
    """The chart-lifecycle activity: record a chart's outcome in the database.

    Times are ISO 8601 strings (workflow time, deterministic). ``fail_record`` is
    the demo's fault injection: the activity refuses, as if the database were
    unreachable, so reconciliation must repair the row.
    """

    chart_id: int
    state: str
    error: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    run_id: str | None = None
    fail_record: bool = False
