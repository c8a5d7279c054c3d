"""Poison-proof dispatch, the pure pieces: which start errors fail a chart, the dispatch
backoff that a failing start sets and must keep, DemoChart's payload check, a cancel
escalated to terminate, and the service that fails a chart that cannot start."""
from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone

import pytest
from temporalio.service import RPCError, RPCStatusCode

from fairsched.engine.scheduler import Scheduler
from fairsched.engine.sync import Sync
from fairsched.engine.dispatcher import MAX_UNKNOWN_ATTEMPTS, StartFailures
from fairsched.engine.ports.temporal import PERMANENT, TRANSIENT, UNKNOWN, classify
from fairsched.temporal.client import Outcome
from fairsched.temporal.shared import DEMO_MAX_SECONDS, DemoPayload, demo_payload


def rpc(status: RPCStatusCode, message: str) -> RPCError:
    return RPCError(message, status, b"")


@pytest.mark.parametrize("exc, kind", [
    (rpc(RPCStatusCode.RESOURCE_EXHAUSTED, "grpc: received message after decompression larger than max 4194304"),
     PERMANENT),
    (rpc(RPCStatusCode.INVALID_ARGUMENT, "Blob data size exceeds limit."), PERMANENT),
    (rpc(RPCStatusCode.INVALID_ARGUMENT, "missing task queue name"), PERMANENT),
    (TypeError("Object of type object is not JSON serializable"), PERMANENT),
    (ValueError("Out of range float values are not JSON compliant"), PERMANENT),
    (rpc(RPCStatusCode.UNAVAILABLE, "connection refused"), TRANSIENT),
    (rpc(RPCStatusCode.DEADLINE_EXCEEDED, "deadline exceeded"), TRANSIENT),
    (rpc(RPCStatusCode.RESOURCE_EXHAUSTED, "namespace rate limit exceeded"), TRANSIENT),
    (rpc(RPCStatusCode.NOT_FOUND, "namespace default not found"), TRANSIENT),
    (asyncio.TimeoutError(), TRANSIENT),
    (rpc(RPCStatusCode.INTERNAL, "upstream returned HTTP 500"), TRANSIENT),
    (rpc(RPCStatusCode.UNKNOWN, "HTTP status code 502; transport: received unexpected content-type"), TRANSIENT),
    (rpc(RPCStatusCode.ABORTED, "aborted"), TRANSIENT),
    (rpc(RPCStatusCode.DATA_LOSS, "data loss"), TRANSIENT),
    (rpc(RPCStatusCode.UNIMPLEMENTED, "unknown service"), TRANSIENT),
    (ConnectionResetError("connection reset by peer"), TRANSIENT),
    (OSError("network is unreachable"), TRANSIENT),
    (rpc(RPCStatusCode.FAILED_PRECONDITION, "Namespace default is not active in this cluster"), TRANSIENT),
    (rpc(RPCStatusCode.OUT_OF_RANGE, "something about this request"), UNKNOWN),
    (RuntimeError("surprise"), UNKNOWN),
], ids=["message-too-large", "blob-limit", "bad-task-queue", "unserialisable", "nan-strict", "unavailable",
        "deadline", "rate-limit", "no-namespace", "timeout", "internal", "unknown", "aborted", "data-loss",
        "unimplemented", "connection-reset", "os-error", "namespace-not-active", "out-of-range", "other"])
def test_start_errors_are_classified(exc, kind):
    assert classify(exc) == kind


def test_a_refused_start_fails_at_once_with_the_reason():
    v = StartFailures().verdict(7, rpc(RPCStatusCode.RESOURCE_EXHAUSTED,
                                       "grpc: received message after decompression larger than max 4194304"))
    assert v.fail and v.kind == PERMANENT
    assert v.reason == ("cannot start: Temporal refused to start the workflow (RESOURCE_EXHAUSTED): "
                        "grpc: received message after decompression larger than max 4194304")


def test_temporal_down_never_fails_a_chart_and_unknown_errors_fail_it_after_the_bound():
    f = StartFailures()
    for down in (rpc(RPCStatusCode.UNAVAILABLE, "connection refused"), rpc(RPCStatusCode.INTERNAL, "HTTP 500"),
                 rpc(RPCStatusCode.UNKNOWN, "HTTP 502"), ConnectionRefusedError("refused")):
        assert not any(f.verdict(1, down).fail for _ in range(100))
    assert f.attempts == {}
    odd = rpc(RPCStatusCode.OUT_OF_RANGE, "something broke")
    verdicts = [f.verdict(1, odd) for _ in range(MAX_UNKNOWN_ATTEMPTS)]
    assert [v.fail for v in verdicts] == [False] * (MAX_UNKNOWN_ATTEMPTS - 1) + [True]
    assert verdicts[-1].reason == (f"cannot start: {MAX_UNKNOWN_ATTEMPTS} attempts failed; the last: "
                                   "Temporal refused to start the workflow (OUT_OF_RANGE): something broke")
    f.forget(1)  # started, or left the queue: counting starts afresh
    assert not f.verdict(1, odd).fail


def scheduler() -> Scheduler:
    return Scheduler(temporal_address="127.0.0.1:1", namespace="default", task_queue="q", redis_url="redis://x")


def test_a_step_that_backs_itself_off_is_not_reset_by_the_guard():
    """``_dispatch`` backs dispatch off when a start fails; ``guarded`` used to reset that
    backoff as soon as the step returned, so a failing start was retried at once, ~80 times
    a minute, resending its payload."""
    s = scheduler()

    async def dispatch_with_a_failed_start():
        s.loop.backoff["dispatch"].fail(time.monotonic())
        return None

    async def clean_dispatch():
        return None

    assert asyncio.run(s.guarded("dispatch", dispatch_with_a_failed_start)) is True
    assert not s.loop.backoff["dispatch"].ready(time.monotonic())
    assert s.loop.backoff["dispatch"].failures == 1
    asyncio.run(s.guarded("dispatch", dispatch_with_a_failed_start))
    assert s.loop.backoff["dispatch"].failures == 2 and s.loop.backoff["dispatch"].delay == 2 * s.BACKOFF_MIN_S
    asyncio.run(s.guarded("dispatch", clean_dispatch))  # a pass without trouble resets it
    assert s.loop.backoff["dispatch"].ready(time.monotonic()) and s.loop.backoff["dispatch"].failures == 0


@pytest.mark.parametrize("payload, expected", [
    ({}, DemoPayload(None)),
    (None, DemoPayload(None)),
    ({"seconds": 30}, DemoPayload(30.0)),
    ({"seconds": 0, "fail": True, "fail_record": False, "note": "mine"}, DemoPayload(0.0, True, False)),
    ({"seconds": DEMO_MAX_SECONDS}, DemoPayload(DEMO_MAX_SECONDS)),
], ids=["empty", "none", "seconds", "flags-and-extra-keys", "max"])
def test_demo_payload_accepts(payload, expected):
    assert demo_payload(payload) == expected


@pytest.mark.parametrize("payload, message", [
    ({"seconds": "abc"}, "payload.seconds: must be a number of seconds, got 'abc'"),
    ({"seconds": 1e300}, "payload.seconds: must be from 0 to 86400, got 1e+300"),
    ({"seconds": float("nan")}, "payload.seconds: must be from 0 to 86400, got nan"),
    ({"seconds": float("inf")}, "payload.seconds: must be from 0 to 86400, got inf"),
    ({"seconds": -1}, "payload.seconds: must be from 0 to 86400, got -1"),
    ({"seconds": True}, "payload.seconds: must be a number of seconds, got True"),
    ({"seconds": 1, "fail": "false"}, "payload.fail: must be true or false, got 'false'"),
    ({"fail_record": 1}, "payload.fail_record: must be true or false, got 1"),
    ([1, 2], "payload: must be a JSON object, got list"),
], ids=["string", "huge", "nan", "inf", "negative", "bool", "fail-string", "fail-record-int", "not-object"])
def test_demo_payload_refuses_with_the_field_named(payload, message):
    with pytest.raises(ValueError) as err:
        demo_payload(payload)
    assert str(err.value) == message


def test_a_terminated_ignored_cancel_ends_cancelled_on_every_path():
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    escalated = Outcome("failed", "terminated: cancel not honoured within 60 s", at, at, "run")
    assert Sync._as_escalated(escalated) == Outcome(
        "cancelled", "cancel not honoured within 60 s: terminated", at, at, "run")
    other = Outcome("failed", "terminated: by an operator", at, at, "run")
    assert Sync._as_escalated(other) is other


@pytest.mark.django_db(transaction=True)
def test_chart_fail_start_is_compare_and_set_from_queued(capture_notifications):
    from charts.models import Chart, ChartState
    from charts.lifecycle import chart_fail_start
    from tests.factories import make_chart, make_org, make_workflow

    org, wf = make_org("Acme"), make_workflow("code")
    queued = make_chart(org, wf)
    running = make_chart(org, wf, state=ChartState.RUNNING)
    capture_notifications.clear()
    assert chart_fail_start(chart_id=queued.pk, error="cannot start: too big")
    assert not chart_fail_start(chart_id=queued.pk, error="again")  # already final: nothing twice
    assert not chart_fail_start(chart_id=running.pk, error="it started after all")
    queued.refresh_from_db()
    assert (queued.state, queued.error) == (ChartState.FAILED, "cannot start: too big")
    assert queued.finished_at is not None
    assert Chart.objects.get(pk=running.pk).state == ChartState.RUNNING
    assert capture_notifications == [{"kind": "chart", "id": queued.pk}]


def test_a_final_row_whose_workflow_still_runs_holds_its_cost_until_it_closes():
    """After a restart the scheduler loads only queued and running rows; a chart recorded
    final by its last activity whose workflow has not closed yet (its worker died in
    between) is found by the reconciliation and keeps its cost held until Temporal closes it."""
    from fairsched.engine.store.rows import ChartRow, Config, OrgRow, World
    from fairsched.engine.state import LiveState

    state = LiveState(World(Config(3), [OrgRow(1, "Acme", "acme", 1)], {}, {}, []))
    fx = state.hold_closing(ChartRow(5, 1, "code", "succeeded", 0.0, started_at=1.0, dispatched_cost=2))
    assert state.used == 2 and state.free == 1 and state.running[5].closing and fx.watch == {5}
    assert state.finished(5, "succeeded").unwatch == {5}
    assert state.used == 0


@pytest.mark.django_db
@pytest.mark.parametrize("value", [0, -5, 366 * 24 * 3600 + 1], ids=["zero", "negative", "over-a-year"])
def test_a_workflow_execution_timeout_out_of_range_is_refused_naming_the_field(value):
    from django.core.exceptions import ValidationError

    from orgs.services import workflow_create

    with pytest.raises(ValidationError) as err:
        workflow_create(name="code", execution_timeout_s=value)
    assert set(err.value.message_dict) == {"execution_timeout_s"}


@pytest.mark.django_db
def test_a_workflow_runs_under_a_day_unless_told_otherwise():
    from orgs.services import workflow_create

    assert workflow_create(name="code").execution_timeout_s == 24 * 3600
    assert workflow_create(name="audit", execution_timeout_s=7200).execution_timeout_s == 7200
