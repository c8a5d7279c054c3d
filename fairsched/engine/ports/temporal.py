"""The real Temporal port (:class:`TemporalClient`) and the port's own errors.

temporalio's exceptions stop here: the scheduler and its collaborators see only the
errors below, so they never import ``temporalio`` (``tests/test_layers.py`` keeps the
rest of the engine honest, ``tests/test_tick.py``'s fake Temporal raises these too).

* :class:`WorkflowNotFound`: Temporal does not know the chart's workflow (``NOT_FOUND``).
* :class:`AlreadyStarted`: a start refused because the workflow already ran and closed
  (``REJECT_DUPLICATE``): read its outcome instead.
* :class:`TemporalError`: any other failure of a Temporal call (an ``RPCError``).
* :class:`StartFailed`: a start that failed, already judged (:func:`classify`): refused
  for good (:data:`PERMANENT`), Temporal unreachable or busy (:data:`TRANSIENT`), or
  anything else (:data:`UNKNOWN`). :class:`fairsched.engine.dispatcher.StartFailures` decides what that
  means for the chart.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from temporalio.api.workflowservice.v1 import ListWorkflowExecutionsRequest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from fairsched.temporal.client import RPC_TIMEOUT, Outcome, connect, outcome_of, start_chart
from fairsched.temporal.shared import WORKFLOW_ID_PREFIX, ChartInput, WorkflowIds, current_workflow_ids

PERMANENT, TRANSIENT, UNKNOWN = "permanent", "transient", "unknown"


class TemporalError(Exception):
    """A Temporal call failed (the RPC's status name in ``status``, None if it had none)."""

    def __init__(self, message: str, status: str | None = None) -> None:
        super().__init__(message)
        self.status = status


class WorkflowNotFound(TemporalError):
    """Temporal does not know the chart's workflow."""


class AlreadyStarted(Exception):
    """The chart's workflow already ran (and closed): it is never started again."""


class StartFailed(Exception):
    """A start that failed: ``kind`` (:data:`PERMANENT`, :data:`TRANSIENT`, :data:`UNKNOWN`)
    and ``reason`` (one line for the chart's ``error``), judged by :func:`classify`."""

    def __init__(self, kind: str, reason: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.reason = kind, reason

    @classmethod
    def of(cls, exc: BaseException) -> "StartFailed":
        return exc if isinstance(exc, StartFailed) else cls(classify(exc), describe(exc), str(exc))


# ---------------------------------------------------------------- classifying a failed start
# About the request, without proving it bad for ever: counted against the chart.
# INVALID_ARGUMENT (and RESOURCE_EXHAUSTED about the size) prove it: refused at once.
# Every other status is Temporal's (or what stands in front of it): never the chart's.
_REQUEST_STATUS = frozenset({RPCStatusCode.OUT_OF_RANGE, RPCStatusCode.ALREADY_EXISTS})
_SIZE_WORDS = ("larger than max", "message size", "message too large")
# What the data converter raises for an input it cannot encode (json.dumps and friends).
_SERIALISE_ERRORS = (TypeError, ValueError, OverflowError, RecursionError, UnicodeError)


def classify(exc: BaseException) -> str:
    """:data:`PERMANENT`, :data:`TRANSIENT` or :data:`UNKNOWN` for a failed start."""
    if isinstance(exc, StartFailed):
        return exc.kind
    if isinstance(exc, RPCError):
        if exc.status == RPCStatusCode.INVALID_ARGUMENT:
            return PERMANENT
        if exc.status == RPCStatusCode.RESOURCE_EXHAUSTED:
            text = (exc.message or str(exc)).lower()
            return PERMANENT if any(w in text for w in _SIZE_WORDS) else TRANSIENT
        return UNKNOWN if exc.status in _REQUEST_STATUS else TRANSIENT
    if isinstance(exc, _SERIALISE_ERRORS):
        return PERMANENT
    if isinstance(exc, (asyncio.TimeoutError, OSError)):  # transport: ConnectionError, a timeout, ...
        return TRANSIENT
    return UNKNOWN


def describe(exc: BaseException) -> str:
    """One line for a chart's ``error``: what refused it and why."""
    if isinstance(exc, StartFailed):
        return exc.reason
    if isinstance(exc, RPCError):
        return f"Temporal refused to start the workflow ({exc.status.name if exc.status else 'error'}): " \
               f"{exc.message or exc}"
    if isinstance(exc, _SERIALISE_ERRORS):
        return f"the workflow input cannot be serialised ({type(exc).__name__}): {exc}"
    return f"{type(exc).__name__}: {exc}"


def _port_error(exc: RPCError) -> TemporalError:
    status = exc.status.name if exc.status is not None else None
    kind = WorkflowNotFound if exc.status == RPCStatusCode.NOT_FOUND else TemporalError
    return kind(exc.message or str(exc), status)


# ---------------------------------------------------------------- the real port
class TemporalClient:
    """The real Temporal port: :mod:`fairsched.temporal.client` over one ``temporalio`` client.
    Every call raises only this module's errors (or a cancellation)."""

    def __init__(self, address: str, namespace: str, task_timeout_s: float | None = None) -> None:
        self.address, self.namespace = address, namespace
        self.task_timeout_s = task_timeout_s  # the charts' workflow task timeout (None: Temporal's)
        self.client = None
        self.ids: WorkflowIds | None = None
        self._retention_s: float | None = None

    async def connect(self) -> None:
        self.client = await connect(self.address, self.namespace)
        self._retention_s = None

    def _id(self, chart_id: int) -> str:
        return (self.ids or current_workflow_ids()).of(chart_id)

    def _handle(self, chart_id: int):
        return self.client.get_workflow_handle(self._id(chart_id))

    async def start(self, *, temporal_type: str, task_queue: str, chart: ChartInput,
                    execution_timeout_s: int) -> str:
        try:
            handle = await start_chart(self.client, temporal_type=temporal_type, task_queue=task_queue,
                                       chart=chart, execution_timeout_s=execution_timeout_s,
                                       workflow_id=self._id(chart.chart_id), task_timeout_s=self.task_timeout_s)
        except WorkflowAlreadyStartedError as exc:
            raise AlreadyStarted(str(exc)) from exc
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failed start is judged here
            raise StartFailed.of(exc) from exc
        return handle.result_run_id or ""

    async def outcome(self, chart_id: int) -> Outcome | None:
        try:
            return await outcome_of(self._handle(chart_id))
        except RPCError as exc:
            raise _port_error(exc) from exc

    async def describe(self, chart_id: int) -> None:
        try:
            await self._handle(chart_id).describe(rpc_timeout=RPC_TIMEOUT)
        except RPCError as exc:
            raise _port_error(exc) from exc

    async def cancel(self, chart_id: int) -> None:
        try:
            await self._handle(chart_id).cancel(rpc_timeout=RPC_TIMEOUT)
        except RPCError as exc:
            raise _port_error(exc) from exc

    async def terminate(self, chart_id: int, reason: str) -> None:
        try:
            await self._handle(chart_id).terminate(reason=reason, rpc_timeout=RPC_TIMEOUT)
        except RPCError as exc:
            raise _port_error(exc) from exc

    async def wait_closed(self, chart_id: int) -> None:
        try:
            await self._handle(chart_id).result()
        except WorkflowFailureError:
            pass
        except RPCError as exc:
            raise _port_error(exc) from exc

    async def running(self, legacy: bool = False) -> AsyncIterator[tuple[str, str]]:
        # Only this deployment's running workflows, however busy a shared namespace is (while
        # charts with a legacy id are active, every chart-* workflow: the caller filters).
        prefix = WORKFLOW_ID_PREFIX if legacy else (self.ids or current_workflow_ids()).prefix
        query = f'ExecutionStatus = "Running" AND WorkflowId STARTS_WITH "{prefix}"'
        # The service's pages as they come: the ids alone are read of each execution (the
        # client's list_workflows decodes every one's search attributes and memo, most of a
        # reconcile's CPU with 400 workflows running).
        request = ListWorkflowExecutionsRequest(namespace=self.client.namespace, query=query, page_size=1000)
        try:
            while True:
                page = await self.client.workflow_service.list_workflow_executions(request, retry=True,
                                                                                   timeout=RPC_TIMEOUT)
                for info in page.executions:
                    yield info.execution.workflow_id, info.execution.run_id
                if not page.next_page_token:
                    return
                request.next_page_token = page.next_page_token
        except RPCError as exc:
            raise _port_error(exc) from exc

    async def retention_s(self) -> float | None:
        """The namespace's retention, read once per connection (None: unknown)."""
        if self._retention_s is None:
            from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest

            try:
                resp = await self.client.workflow_service.describe_namespace(
                    DescribeNamespaceRequest(namespace=self.namespace), timeout=RPC_TIMEOUT)
            except RPCError as exc:
                raise _port_error(exc) from exc
            ttl = resp.config.workflow_execution_retention_ttl
            self._retention_s = ttl.ToTimedelta().total_seconds() if resp.config.HasField(
                "workflow_execution_retention_ttl") else None
        return self._retention_s
