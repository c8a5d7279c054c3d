"""A user's own workflow type (no Fairsched activity): its completion reaches the
chart row only through the scheduler's result watch and reconciliation."""
from __future__ import annotations

import asyncio
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


@workflow.defn(name="StubbornChart")
class StubbornChart:
    """A workflow that ignores cancellation: it swallows the cancel and keeps working, as a
    buggy user workflow might. Only a terminate ends it."""

    @workflow.run
    async def run(self, chart: dict) -> str:
        while True:
            try:
                await workflow.sleep(timedelta(hours=1))
            except asyncio.CancelledError:
                workflow.logger.info("chart %s: cancel ignored", chart["chart_id"])
