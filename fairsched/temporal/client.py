"""Connecting to Temporal, starting charts, and reading a workflow's outcome.

Used by the scheduler (fairsched.engine) and the worker. Connection attempts
retry with capped exponential backoff, so a process started before Temporal
(or across a Temporal restart) recovers on its own.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import CancelledError, TerminatedError, TimeoutError

from fairsched.temporal.shared import CANCELLED, FAILED, SUCCEEDED, ChartInput
from fairsched.temporal.shared import workflow_id as workflow_id_of

log = logging.getLogger(__name__)

CONNECT_BACKOFF_MIN_S = 0.5
CONNECT_BACKOFF_MAX_S = 10.0
RPC_TIMEOUT = timedelta(seconds=5)  # a Temporal outage must not stall the scheduler's loop for long


async def connect(
    address: str,
    namespace: str = "default",
    *,
    attempts: int | None = None,
    stopping: Callable[[], bool] = lambda: False,
) -> Client:
    """Connect to Temporal, retrying with backoff (forever unless ``attempts``)."""
    delay = CONNECT_BACKOFF_MIN_S
    tried = 0
    while True:
        tried += 1
        try:
            client = await Client.connect(address, namespace=namespace)
            if tried > 1:
                log.info("connected to Temporal at %s (namespace %s) after %d attempts", address, namespace, tried)
            return client
        except Exception as exc:  # noqa: BLE001 - any failure to connect is retried
            if (attempts is not None and tried >= attempts) or stopping():
                raise
            log.warning("Temporal at %s unreachable (%s); retrying in %.1f s", address, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, CONNECT_BACKOFF_MAX_S)


async def start_chart(
    client: Client, *, temporal_type: str, task_queue: str, chart: ChartInput, execution_timeout_s: int,
    workflow_id: str | None = None, task_timeout_s: float | None = None,
) -> WorkflowHandle:
    """Start (or find) the chart's workflow, ``workflow_id`` (default: this process's
    deployment's id for it, ``chart-<deployment>-<pk>``).

    REJECT_DUPLICATE: a chart whose workflow already closed is never started
    again (raises ``WorkflowAlreadyStartedError``: read its outcome instead).
    USE_EXISTING: a second start while it runs returns the running execution,
    so a scheduler that crashed between starting and recording adopts it.
    ``execution_timeout_s`` (``Workflow.execution_timeout_s``): Temporal times the
    workflow out after that long, whatever its code does, so no chart holds its
    budget for ever. ``task_timeout_s``: the workflow task timeout (``FAIRSCHED_WORKFLOW_TASK_TIMEOUT_S``;
    None: Temporal's default, 10 s).
    """
    return await client.start_workflow(
        temporal_type, chart, id=workflow_id or workflow_id_of(chart.chart_id), task_queue=task_queue,
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING, rpc_timeout=RPC_TIMEOUT,
        execution_timeout=timedelta(seconds=execution_timeout_s),
        task_timeout=timedelta(seconds=task_timeout_s) if task_timeout_s is not None else None,
    )


@dataclass(frozen=True)
class Outcome:
    """How a closed workflow ended, in the chart's words."""

    state: str  # succeeded / failed / cancelled
    error: str
    started_at: datetime | None
    finished_at: datetime | None
    run_id: str


GENERIC_MESSAGES = {"Activity task failed", "Activity cancelled", "Child Workflow execution failed"}


def failure_text(exc: BaseException) -> str:
    """One line from a workflow failure: its message, then any cause that adds something."""
    parts: list[str] = []
    cur: BaseException | None = exc.cause if isinstance(exc, WorkflowFailureError) else exc
    while cur is not None:
        msg = getattr(cur, "message", None) or str(cur)
        if isinstance(cur, TerminatedError):
            msg = f"terminated: {msg}"
        elif isinstance(cur, TimeoutError):
            msg = f"timed out: {msg}"
        if msg and msg not in GENERIC_MESSAGES and not any(msg in p for p in parts):
            parts.append(msg)
        cur = getattr(cur, "cause", None)
    return " <- ".join(parts) or type(exc).__name__


STATUS_STATE = {
    WorkflowExecutionStatus.COMPLETED: SUCCEEDED,
    WorkflowExecutionStatus.FAILED: FAILED,
    WorkflowExecutionStatus.CANCELED: CANCELLED,
    WorkflowExecutionStatus.TERMINATED: FAILED,
    WorkflowExecutionStatus.TIMED_OUT: FAILED,
}


async def outcome_of(handle: WorkflowHandle) -> Outcome | None:
    """The outcome of a closed workflow, None if it is still running.

    Raises ``RPCError`` (NOT_FOUND when Temporal does not know it)."""
    desc = await handle.describe(rpc_timeout=RPC_TIMEOUT)
    if desc.status is None or desc.status in (WorkflowExecutionStatus.RUNNING,
                                              WorkflowExecutionStatus.CONTINUED_AS_NEW):
        return None
    state = STATUS_STATE.get(desc.status, FAILED)
    error = ""
    if state != SUCCEEDED:
        try:
            await handle.result(follow_runs=False, rpc_timeout=None)
        except WorkflowFailureError as exc:
            if isinstance(exc.cause, CancelledError):
                state = CANCELLED
            error = failure_text(exc)
        except Exception as exc:  # noqa: BLE001 - a reason is nice to have, not required
            error = f"{desc.status.name.lower()}: {exc}"
        if not error:
            error = desc.status.name.lower()
    return Outcome(state=state, error=error, started_at=desc.start_time, finished_at=desc.close_time,
                   run_id=desc.run_id)
