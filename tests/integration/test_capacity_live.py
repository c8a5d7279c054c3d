"""The worker-capacity warning against a real ``runworker``, Temporal and Redis.

A worker with 2 activity slots and 3 running charts: the check (the rq cron job's
function) warns that 1 chart waits for a slot, and the dashboard shows it; a warm stop
removes the worker's advertisement. With 5 slots there is no warning.
"""
from __future__ import annotations

import json

import pytest
import redis
from django.test import Client

from fairsched.temporal import capacity
from fairsched.temporal.advertise import KEY_PREFIX
from jobs import tasks
from tests.factories import make_chart, make_org, make_user, make_workflow
from tests.integration.conftest import wait_until

# Transactional: the worker writes the deployment row at its start (control.deployment), which
# the test's own open transaction would hold back on SQLite.
pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _adverts(redis_url: str, task_queue: str) -> list[dict]:
    r = redis.Redis.from_url(redis_url)
    return [json.loads(r.get(k)) for k in r.scan_iter(f"{KEY_PREFIX}{task_queue}:*")]


def _running(n: int) -> None:
    org, wf = make_org("Acme"), make_workflow("code", temporal_type="DemoChart")
    for i in range(n):
        make_chart(org, wf, state="running", dispatched_cost=1, external_id=f"r-{i}")


def _worker_seen(live) -> dict:
    """Check until Temporal lists the worker as a live activity poller with its advertisement."""
    def seen():
        tasks.check_capacity()
        result = capacity.read()
        return result if result["known"] and result["workers"] == 1 else None
    return wait_until(seen, timeout=30, interval=0.5, what="the worker among the live pollers")


def test_a_worker_with_too_few_slots_is_warned_about(live, redis_url):
    worker = live.worker(env={"FAIRSCHED_WORKER_CONCURRENCY": "2"})
    ad = wait_until(lambda: _adverts(redis_url, live.task_queue), timeout=30, what="the worker's advertisement")[0]
    assert ad["slots"] == 2 and ad["identity"].endswith(f":{worker.proc.pid}:fairsched")
    assert 0 < redis.Redis.from_url(redis_url).ttl(f"{KEY_PREFIX}{live.task_queue}:{ad['identity']}") <= 30

    _running(3)
    result = _worker_seen(live)
    assert (result["running"], result["slots"], result["short"]) == (3, 2, 1)
    assert result["queues"][0]["workers"][0]["identity"] == ad["identity"]
    warning = ("Running 3 charts but the 1 live worker has 2 activity slots: 1 chart waits for a slot while "
               "holding budget. Start more workers or raise FAIRSCHED_WORKER_CONCURRENCY (see README, Sizing workers).")
    assert result["warning"] == warning

    viewer = make_user("viewer", staff=True, perms=("charts.view_chart",))
    c = Client()
    c.force_login(viewer)
    assert warning in c.get("/dashboard/").content.decode()
    assert c.get("/dashboard/state.json").json()["capacity"]["warning"] == warning

    # A warm stop removes the advertisement: the stopped worker's slots no longer count.
    assert worker.terminate() == 0
    assert _adverts(redis_url, live.task_queue) == []
    tasks.check_capacity()
    after = capacity.read()
    assert after["slots"] == 0 and after["short"] == 3
    assert after["warning"].startswith(f"Running 3 charts but no live worker polls task queue '{live.task_queue}'")


def test_enough_slots_no_warning(live, redis_url):
    live.worker(env={"FAIRSCHED_WORKER_CONCURRENCY": "5"})
    _running(3)
    result = _worker_seen(live)
    assert (result["running"], result["slots"], result["short"], result["warning"]) == (3, 5, 0, None)
    viewer = make_user("viewer", staff=True, perms=("charts.view_chart",))
    c = Client()
    c.force_login(viewer)
    html = c.get("/dashboard/").content.decode()
    assert "for a slot while holding budget" not in html


# Temporal keeps a poller in a task queue's poller list this long after its last poll
# (``matching.PollerHistoryTTL``, 5 minutes by default): the busy-worker test runs its own dev
# server with a short one, so that it waits seconds, not minutes, for the worker to drop out.
POLLER_HISTORY_TTL_S = 8


@pytest.mark.slow(45)
@pytest.mark.django_db(transaction=True)
def test_a_worker_with_every_slot_busy_still_counts(live, redis_url, settings):
    """The false alarm of issue 21: a worker whose 2 slots both run a chart stops polling for
    activities, and once Temporal's poller history has passed (5 minutes by default, 15 s on
    this test's own dev server) Temporal no longer lists it among the task queue's pollers.
    Its advertisement is live all along: its 2 slots count and no warning is shown."""
    from temporalio.api.enums.v1 import PendingActivityState, TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    from charts.models import Chart, ChartState
    from common.workflow_ids import workflow_id
    from control.models import SchedulerSettings
    from fairsched.runtime import embedded
    from tests.integration.conftest import TemporalFacade

    own = embedded.start_temporal(log=live.artifacts / "temporal-ttl.log",
                                  dynamic_config={"matching.PollerHistoryTTL": f"{POLLER_HISTORY_TTL_S}s"})
    settings.TEMPORAL_ADDRESS = own.url  # the capacity check, in this process
    env = {"TEMPORAL_ADDRESS": own.url}
    temporal = TemporalFacade(own.url)
    s = SchedulerSettings.get()
    s.budget = 2
    s.save()
    org, wf = make_org("Acme"), make_workflow("code", temporal_type="DemoChart")
    charts = [make_chart(org, wf, payload={"seconds": 600}, external_id=f"long-{i}") for i in range(2)]
    live.worker(env={**env, "FAIRSCHED_WORKER_CONCURRENCY": "2"})
    live.scheduler(env=env)
    ids = [c.pk for c in charts]
    try:
        wait_until(lambda: Chart.objects.filter(pk__in=ids, state=ChartState.RUNNING).count() == 2, timeout=60,
                   what="both charts running")

        def both_activities_started() -> bool:
            return all(any(a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                           for a in temporal.describe(workflow_id(pk)).raw_description.pending_activities)
                       for pk in ids)

        wait_until(both_activities_started, timeout=60, interval=0.5, what="the worker's 2 slots busy")

        def activity_pollers() -> list[str]:
            resp = temporal.run(temporal.client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
                namespace="default", task_queue=TaskQueue(name=live.task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY)))
            return [p.identity for p in resp.pollers]

        tasks.check_capacity()
        assert capacity.read()["workers"] == 1  # counted while Temporal lists it
        wait_until(lambda: not activity_pollers(), timeout=POLLER_HISTORY_TTL_S + 90, interval=1,
                   what="Temporal to drop the busy worker from the activity pollers")
        tasks.check_capacity()
        result = capacity.read()
        assert (result["known"], result["running"], result["workers"], result["slots"], result["short"],
                result["warning"]) == (True, 2, 1, 2, 0, None), result
        assert result["queues"][0]["workers"][0]["seen_s"] is None  # not among the pollers, counted anyway
    finally:
        live.stop_all()
        own.stop()
