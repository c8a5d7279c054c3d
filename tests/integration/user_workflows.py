"""A user's own workflow type (no Fairsched activity): its completion reaches the
chart row only through the scheduler's result watch and reconciliation."""
from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError


@workflow.defn(name="UserChart")
class UserChart:
    @workflow.run
    async def run(self, chart: dict) -> str:
        payload = chart.get("payload") or {}
        await workflow.sleep(timedelta(seconds=float(payload.get("seconds", 0.2))))
        if payload.get("fail"):
            raise ApplicationError(f"user workflow refused chart {chart['external_id']}", non_retryable=True)
        return f"done {chart['chart_id']}"
