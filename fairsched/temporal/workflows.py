"""The bundled workflow: ``DemoChart``, standing in for an agentic coding run.

It runs for ``payload["seconds"]`` seconds (or a duration drawn from its
workflow's profile, :data:`fairsched.temporal.shared.DEMO_PROFILES`), reports
progress through activity heartbeats, fails with a clear error when
``payload["fail"]`` is true or the payload is unusable (``demo_payload``: the
workflow fails at once, non-retryable, rather than its task failing for ever),
and finally records its outcome in the database through the chart-lifecycle
activity (the fast path that refills the budget).
If that activity cannot record it, the workflow still ends with the real
outcome: the scheduler's result watch and its reconciliation against Temporal
repair the row.
"""
from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from fairsched.temporal.shared import (
        CANCELLED,
        DEMO_DEFAULT_PROFILE,
        DEMO_PROFILES,
        DEMO_WORK_ACTIVITY,
        DEMO_WORKFLOW,
        FAILED,
        RECORD_OUTCOME_ACTIVITY,
        SUCCEEDED,
        ChartInput,
        DemoWorkInput,
        OutcomeInput,
        demo_payload,
    )

INVALID_PAYLOAD = "InvalidPayload"

WORK_HEARTBEAT_TIMEOUT = timedelta(seconds=5)
WORK_SLACK = timedelta(seconds=60)  # start-to-close = the chart's duration + this
WORK_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30), maximum_attempts=3,
    non_retryable_error_types=["DemoChartFailure"],
)
RECORD_TIMEOUT = timedelta(seconds=30)
RECORD_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10), maximum_attempts=5,
    non_retryable_error_types=["OutcomeNotRecorded"],
)


def _cause_text(err: BaseException) -> str:
    """The innermost failure message of an activity error ("X failed: Y")."""
    cause = err
    while getattr(cause, "cause", None) is not None:
        cause = cause.cause
    return getattr(cause, "message", None) or str(cause)


@workflow.defn(name=DEMO_WORKFLOW)
class DemoChart:
    @workflow.run
    async def run(self, chart: ChartInput) -> dict:
        started = workflow.now()
        outcome = OutcomeInput(chart_id=chart.chart_id, state=SUCCEEDED, started_at=started.isoformat(),
                               run_id=workflow.info().run_id)
        try:
            payload = demo_payload(chart.payload)
        except ValueError as exc:
            # Fail the workflow (not its task, which Temporal would retry for ever), with the reason.
            outcome.state, outcome.error = FAILED, f"DemoChart chart #{chart.chart_id}: invalid payload: {exc}"
            await self._record(outcome)
            raise ApplicationError(outcome.error, type=INVALID_PAYLOAD, non_retryable=True) from None
        seconds = payload.seconds
        if seconds is None:
            low, high = DEMO_PROFILES.get(chart.workflow, DEMO_DEFAULT_PROFILE)
            seconds = workflow.random().uniform(low, high)
        outcome.fail_record = payload.fail_record
        try:
            await workflow.execute_activity(
                DEMO_WORK_ACTIVITY,
                DemoWorkInput(chart_id=chart.chart_id, seconds=seconds, fail=payload.fail),
                start_to_close_timeout=timedelta(seconds=seconds) + WORK_SLACK,
                heartbeat_timeout=WORK_HEARTBEAT_TIMEOUT,
                retry_policy=WORK_RETRY,
            )
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):  # the workflow was cancelled
                outcome.state, outcome.error = CANCELLED, "cancelled"
                await self._record(outcome)
                raise asyncio.CancelledError() from err
            outcome.state, outcome.error = FAILED, f"DemoChart chart #{chart.chart_id}: {_cause_text(err)}"
            await self._record(outcome)
            raise ApplicationError(outcome.error, type="ChartFailed", non_retryable=True) from err
        except asyncio.CancelledError:
            outcome.state, outcome.error = CANCELLED, "cancelled"
            await self._record(outcome)
            raise
        await self._record(outcome)
        return {"chart_id": chart.chart_id, "seconds": seconds}

    async def _record(self, outcome: OutcomeInput) -> None:
        outcome.finished_at = workflow.now().isoformat()
        try:
            await workflow.execute_activity(
                RECORD_OUTCOME_ACTIVITY, outcome,
                start_to_close_timeout=RECORD_TIMEOUT, retry_policy=RECORD_RETRY,
            )
        except ActivityError as err:
            # The scheduler's result watch and reconciliation repair the row.
            workflow.logger.warning("outcome of chart #%s not recorded: %s", outcome.chart_id, _cause_text(err))
