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
from dataclasses import dataclass, field
from typing import Any

from common.workflow_ids import (  # noqa: F401 (the workflow ids: re-exported)
    DEPLOYMENT_RE,
    WORKFLOW_ID_PREFIX,
    WorkflowIds,
    chart_id_of,
    current_workflow_ids,
    set_resolver,
    use_workflow_ids,
    workflow_id,
)

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
