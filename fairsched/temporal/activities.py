"""Activities of the bundled workflows.

``demo_work`` stands in for an agentic run: it sleeps in small steps and
heartbeats its progress (so a cancel reaches it within a second and a dead
worker is noticed within the heartbeat timeout). ``record_chart_outcome`` is
the chart-lifecycle activity: it writes the outcome through
``charts.lifecycle.chart_record_outcome`` (idempotent) in a thread, because the
Django ORM is synchronous; the service notifies the scheduler on commit, so a
freed budget slot is refilled at once.
"""
from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime

from asgiref.sync import sync_to_async
from temporalio import activity
from temporalio.exceptions import ApplicationError

from charts.lifecycle import chart_record_outcome
from fairsched.temporal.shared import (
    DEMO_WORK_ACTIVITY,
    RECORD_OUTCOME_ACTIVITY,
    DemoWorkInput,
    OutcomeInput,
)

log = logging.getLogger(__name__)

HEARTBEAT_EVERY_S = 1.0
DEMO_FAILURE_TYPE = "DemoChartFailure"
RECORD_REFUSED_TYPE = "OutcomeNotRecorded"


@activity.defn(name=DEMO_WORK_ACTIVITY)
async def demo_work(inp: DemoWorkInput) -> float:
    """Work for ``inp.seconds`` seconds, heartbeating progress; fail on request."""
    info = activity.info()
    done = float(info.heartbeat_details[0]) if info.heartbeat_details else 0.0  # resume after a retry
    started = time.monotonic() - done
    while True:
        elapsed = time.monotonic() - started
        if elapsed >= inp.seconds:
            break
        activity.heartbeat(elapsed)
        await asyncio.sleep(min(HEARTBEAT_EVERY_S, inp.seconds - elapsed))
    if inp.fail:
        raise ApplicationError(
            f"DemoChart failed on purpose after {inp.seconds:g} s (payload.fail is true)",
            type=DEMO_FAILURE_TYPE, non_retryable=True,
        )
    return time.monotonic() - started


def _parse(ts: str | None) -> datetime | None:
    return datetime.fromisoformat(ts) if ts else None


def _record(inp: OutcomeInput) -> bool:
    from django.db import close_old_connections

    close_old_connections()
    try:
        return chart_record_outcome(
            chart_id=inp.chart_id, state=inp.state, error=inp.error,
            started_at=_parse(inp.started_at), finished_at=_parse(inp.finished_at), run_id=inp.run_id,
        )
    finally:
        close_old_connections()


@activity.defn(name=RECORD_OUTCOME_ACTIVITY)
async def record_chart_outcome(inp: OutcomeInput) -> bool:
    """Record a chart's outcome in the database (idempotent); True if this call wrote it."""
    if inp.fail_record:
        raise ApplicationError(
            f"outcome of chart #{inp.chart_id} not recorded (payload.fail_record is true)",
            type=RECORD_REFUSED_TYPE, non_retryable=True,
        )
    wrote = await sync_to_async(_record, thread_sensitive=True)(inp)
    log.info("chart #%s outcome %s recorded by the lifecycle activity (%s)", inp.chart_id, inp.state,
             "written" if wrote else "already final")
    return wrote
