"""The live scheduler against a real Temporal dev server and a real Redis.

``runscheduler`` and ``runworker`` run as subprocesses on the test database;
assertions read the database and Temporal itself (start/close times, one
execution per workflow id).
"""
from __future__ import annotations

import signal
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from charts.models import Chart, ChartState
from scheduling.contract import scenario
from control.models import SchedulerSettings
from orgs.models import WorkflowCost
from fairsched.temporal.shared import workflow_id
from tests.factories import make_chart, make_org, make_workflow
from tests.integration.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

# The schedulers a test SIGKILLs and starts again hold the lease this long (``--lease-ttl``;
# 5 s by default): the new one waits that long at most for the dead one's lease to expire.
SHORT_LEASE = ("--lease-ttl", "2")


def configure(budget: int, *, eta: float = 0.5, reconcile: float = 1.0) -> None:
    s = SchedulerSettings.get()
    s.budget, s.eta_interval_s, s.reconcile_interval_s = budget, eta, reconcile
    s.save()


def all_final(ids: list[int]) -> bool:
    return Chart.objects.filter(pk__in=ids, state__in=[ChartState.QUEUED, ChartState.RUNNING]).count() == 0


def states(ids: list[int]) -> dict[int, str]:
    return dict(Chart.objects.filter(pk__in=ids).values_list("pk", "state"))


def held(chart_id: int, description) -> tuple[float, float]:
    """When a chart held its cost, from its workflow's start on Temporal to the end of its work
    as its workflow recorded it (``finished_at``, written with its outcome by the record
    activity, the workflow's last step), or to Temporal's close if it recorded none. The
    scheduler frees the cost when it reads the recorded outcome, and Temporal closes the
    workflow a few milliseconds later: a check against the close would count the chart that
    starts in those milliseconds twice (docs/scheduling.md, "3. Dispatch")."""
    close = description.close_time.timestamp()
    finished = Chart.objects.filter(pk=chart_id).values_list("finished_at", flat=True).first()
    return description.start_time.timestamp(), min(close, finished.timestamp()) if finished else close


def max_concurrent_cost(intervals: list[tuple[float, float, int]]) -> int:
    """Sweep over (start, close, cost): a close at the same instant as a start comes first."""
    return peak_of(intervals)[0]


def peak_of(intervals: list[tuple]) -> tuple[int, list[tuple]]:
    """The highest cost running at once over (start, close, cost, ...) and the intervals
    running at its first moment (what a failed budget check shows)."""
    events = sorted([(s, 1, i) for i, (s, *_) in enumerate(intervals)]
                    + [(e, 0, i) for i, (_, e, *_) in enumerate(intervals)])
    peak = cur = 0
    running: set[int] = set()
    at_peak: list[tuple] = []
    for _, starts, i in events:
        cur += intervals[i][2] if starts else -intervals[i][2]
        (running.add if starts else running.discard)(i)
        if cur > peak:
            peak, at_peak = cur, sorted(intervals[j] for j in running)
    return peak, at_peak


def test_charts_run_in_plan_order_and_all_succeed(live, temporal):
    configure(budget=1)
    a, b = make_org("Acme", weight=2), make_org("Beta", weight=1)
    wf = make_workflow("code", temporal_type="DemoChart")
    start = timezone.now() - timedelta(hours=1)
    charts = [make_chart(org, wf, created_at=start + timedelta(minutes=i), payload={"seconds": 0.2})
              for i, org in enumerate([a, a, a, a, b, b])]
    from fairsched.engine.reader import scenario_from_db

    expected = [int(i) for i in scenario.plan(scenario_from_db(include_rounds=False))["order"]]
    assert expected == [charts[i].pk for i in (0, 1, 4, 2, 3, 5)]

    live.shared_worker()
    sched = live.scheduler()
    ids = [c.pk for c in charts]
    wait_until(lambda: all_final(ids), timeout=60, what="all charts final")
    assert set(states(ids).values()) == {"succeeded"}, sched.log()[-3000:]

    started = {c: temporal.describe(workflow_id(c)).start_time for c in ids}
    assert sorted(ids, key=started.get) == expected
    assert set(executions_per_chart(temporal, ids).values()) == {1}
    assert "dispatch chart #" in sched.log()


def test_running_cost_seen_in_temporal_never_exceeds_budget(live, temporal):
    configure(budget=3)
    a, b = make_org("Acme", weight=1), make_org("Beta", weight=1)
    code, big = make_workflow("code", temporal_type="DemoChart"), make_workflow("big", temporal_type="DemoChart")
    WorkflowCost.objects.create(org=b, workflow=big, cost=2)
    charts = []
    for i in range(6):
        charts.append(make_chart(a, code, payload={"seconds": 0.3 + 0.1 * (i % 3)}))
        charts.append(make_chart(b, big, payload={"seconds": 0.4}))
    live.shared_worker()
    live.scheduler()
    ids = [c.pk for c in charts]
    wait_until(lambda: all_final(ids), timeout=60, what="all charts final")
    assert set(states(ids).values()) == {"succeeded"}
    cost = {c.pk: 2 if c.workflow_id == big.pk else 1 for c in charts}
    intervals = []
    for c, d in closed_in_temporal(temporal, ids).items():
        intervals.append((*held(c, d), cost[c]))
    assert max_concurrent_cost(intervals) == 3  # used the whole budget, never more
    rows = Chart.objects.filter(pk__in=ids)
    assert all(r.dispatched_cost == cost[r.pk] for r in rows)


def closed_in_temporal(temporal, ids: list[int], timeout: float = 60.0) -> dict:
    """Each chart's workflow description once Temporal has closed it. A row turns final when the
    workflow's last activity records the outcome, a moment before the workflow itself closes;
    after a worker's kill -9 that moment is a workflow task's timeout and a new worker's poll,
    which CI's loaded machine once took more than 15 s over (a wait on the condition: it costs
    only when it is slow)."""
    found: dict = {}

    def all_closed() -> bool:
        for c in ids:
            if c not in found:
                d = temporal.describe(workflow_id(c))
                if d.close_time is not None:
                    found[c] = d
        return len(found) == len(ids)

    wait_until(all_closed, timeout=timeout, what="Temporal to close every chart's workflow")
    return found


def executions_per_chart(temporal, ids: list[int]) -> dict[int, int]:
    """Executions per workflow id, as Temporal's visibility lists them (after it caught up)."""
    counts = lambda: {c: len(temporal.executions(workflow_id(c))) for c in ids}  # noqa: E731
    wait_until(lambda: all(counts().values()), timeout=10, what="visibility to list every chart's run")
    return counts()


def test_sigkill_mid_run_then_restart_runs_every_chart_exactly_once(live, temporal):
    configure(budget=3)
    org = make_org("Acme")
    wf = make_workflow("code", temporal_type="DemoChart")
    ids = [make_chart(org, wf, payload={"seconds": 0.6}).pk for _ in range(12)]
    live.shared_worker()
    sched = live.scheduler(*SHORT_LEASE)
    wait_until(lambda: Chart.objects.filter(pk__in=ids, state=ChartState.SUCCEEDED).count() >= 3,
               timeout=30, what="some charts done")
    sched.kill()
    assert Chart.objects.filter(pk__in=ids, state=ChartState.QUEUED).exists()
    live.scheduler(*SHORT_LEASE)
    wait_until(lambda: all_final(ids), timeout=60, what="all charts final after the restart")
    assert set(states(ids).values()) == {"succeeded"}
    assert set(executions_per_chart(temporal, ids).values()) == {1}


def test_crash_between_start_and_compare_and_set_is_adopted_not_rerun(live, temporal):
    configure(budget=2)
    org = make_org("Acme")
    wf = make_workflow("code", temporal_type="DemoChart")
    ids = [make_chart(org, wf, payload={"seconds": 1}).pk for _ in range(3)]
    # No worker yet: the orphaned workflow must still be running when the new scheduler
    # comes to its chart (with a worker, a slow restart let it finish and record itself first).
    crashing = live.crashing_scheduler(1, "--lease-ttl", "1.5")
    wait_until(lambda: not crashing.alive(), timeout=30, what="the injected crash")
    assert crashing.proc.returncode == -9
    # The workflow runs, but its row was never marked running.
    orphans = [c for c in ids if temporal.exists(workflow_id(c))]
    assert orphans and all(s == "queued" for s in states(orphans).values())
    sched = live.scheduler("--lease-ttl", "1.5")
    for orphan in orphans:
        assert sched.saw(f"chart #{orphan} adopted", timeout=30)
    live.worker()
    wait_until(lambda: all_final(ids), timeout=60, what="all charts final after the restart")
    assert set(states(ids).values()) == {"succeeded"}
    assert set(executions_per_chart(temporal, ids).values()) == {1}


def test_failed_workflow_marks_chart_failed_and_cancel_cancels_workflow(live, temporal):
    from charts.services import chart_cancel
    from temporalio.client import WorkflowExecutionStatus

    configure(budget=2)
    org = make_org("Acme")
    wf = make_workflow("code", temporal_type="DemoChart")
    failing = make_chart(org, wf, payload={"seconds": 0.2, "fail": True})
    slow = make_chart(org, wf, payload={"seconds": 60})
    live.shared_worker()
    live.scheduler()
    wait_until(lambda: Chart.objects.get(pk=slow.pk).state == ChartState.RUNNING, timeout=30, what="slow running")
    chart_cancel(chart=slow.pk)
    wait_until(lambda: all_final([failing.pk, slow.pk]), timeout=30, what="both final")
    failing.refresh_from_db()
    slow.refresh_from_db()
    assert failing.state == ChartState.FAILED
    assert "failed on purpose" in failing.error
    assert slow.state == ChartState.CANCELLED
    closed = closed_in_temporal(temporal, [slow.pk, failing.pk])
    assert closed[slow.pk].status == WorkflowExecutionStatus.CANCELED
    assert closed[failing.pk].status == WorkflowExecutionStatus.FAILED


def test_dropped_completion_is_repaired_by_reconciliation(live, temporal):
    configure(budget=2, reconcile=1.0)
    org = make_org("Acme")
    wf = make_workflow("code", temporal_type="DemoChart")
    lost = make_chart(org, wf, payload={"seconds": 0.2, "fail_record": True})
    after = make_chart(org, wf, payload={"seconds": 0.2})
    live.shared_worker()
    sched = live.scheduler("--no-watch")  # no result watch: only the reconciliation can notice
    wait_until(lambda: all_final([lost.pk, after.pk]), timeout=30, what="both final")
    lost.refresh_from_db()
    assert lost.state == ChartState.SUCCEEDED
    assert lost.finished_at is not None
    assert lost.finished_at == temporal.describe(workflow_id(lost.pk)).close_time  # Temporal's time
    assert sched.saw(f"reconcile: chart #{lost.pk} closed as succeeded")


def test_running_row_unknown_to_temporal_is_requeued_and_runs(live, temporal):
    configure(budget=1)
    org = make_org("Acme")
    wf = make_workflow("code", temporal_type="DemoChart")
    ghost = make_chart(org, wf, payload={"seconds": 0.2}, state=ChartState.RUNNING, dispatched_cost=1,
                       started_at=timezone.now())
    live.shared_worker()
    sched = live.scheduler()
    wait_until(lambda: all_final([ghost.pk]), timeout=30, what="ghost final")
    ghost.refresh_from_db()
    assert ghost.state == ChartState.SUCCEEDED
    assert sched.saw(f"reconcile: chart #{ghost.pk} requeued: Temporal does not know workflow {workflow_id(ghost.pk)}")
    assert executions_per_chart(temporal, [ghost.pk]) == {ghost.pk: 1}


def test_lowering_budget_and_pausing_never_touch_running_work(live, temporal):
    from charts.services import chart_pause
    from control.services import budget_set
    from orgs.services import org_hold

    configure(budget=2)
    a, b = make_org("Acme"), make_org("Beta")
    wf = make_workflow("code", temporal_type="DemoChart")
    r1, r2 = make_chart(a, wf, payload={"seconds": 3}), make_chart(b, wf, payload={"seconds": 3})
    later = make_chart(a, wf, payload={"seconds": 0.2})
    live.shared_worker()
    live.scheduler()
    wait_until(lambda: Chart.objects.filter(pk__in=[r1.pk, r2.pk], state=ChartState.RUNNING).count() == 2,
               timeout=30, what="two running")
    budget_set(budget=1)
    org_hold(org=b)
    with pytest.raises(Exception):
        chart_pause(chart=r1.pk)  # running work cannot be paused
    wait_until(lambda: all_final([r1.pk, r2.pk]), timeout=30, what="both running charts done")
    assert set(states([r1.pk, r2.pk]).values()) == {"succeeded"}
    wait_until(lambda: all_final([later.pk]), timeout=30, what="the queued chart after the drain")
    later.refresh_from_db()
    r1.refresh_from_db()
    r2.refresh_from_db()
    assert later.started_at >= max(r1.finished_at, r2.finished_at)  # waited for the drain: 2 running > budget 1


def test_snapshot_published_and_resync_catches_a_bulk_update(live):
    from common import snapshot

    configure(budget=1, eta=0.3)
    org = make_org("Acme")
    wf = make_workflow("code", temporal_type="DemoChart")
    busy = make_chart(org, wf, payload={"seconds": 30})
    ids = [make_chart(org, wf, payload={"seconds": 0.2}).pk for _ in range(3)]
    live.shared_worker()
    live.scheduler()
    snap = wait_until(lambda: (s := snapshot.read_snapshot()) and s["counters"]["ordered"] == 3 and s,
                      timeout=20, what="a snapshot with 3 ordered charts")
    assert snap["budget"] == 1 and snap["used"] == 1 and snap["orgs"][0]["queued"] == 3
    assert [r["id"] for r in snap["running"]] == [busy.pk] and snap["running"][0]["workflow_id"] == workflow_id(busy.pk)
    _, rows = snapshot.read_order()
    assert [r["id"] for r in rows] == ids and [r["pos"] for r in rows] == [0, 1, 2]
    assert snapshot.read_org(org.pk)["org"]["name"] == "Acme"
    Chart.objects.filter(pk__in=ids[:2]).update(paused=True)  # no notification: the resync must see it
    wait_until(lambda: (s := snapshot.read_snapshot()) and s["counters"]["paused"] == 2, timeout=20,
               what="the resync to apply the bulk pause")


def test_redis_restarted_under_a_running_scheduler_recovers(live, settings):
    from fairsched.runtime import embedded

    port = embedded.free_port()
    redis_log = live.artifacts / "redis-own.log"
    own = embedded.start_redis(port, log=redis_log)
    try:
        settings.REDIS_URL = own.url  # this process's notifications go to it too
        configure(budget=1)
        org = make_org("Acme")
        wf = make_workflow("code", temporal_type="DemoChart")
        first = make_chart(org, wf, payload={"seconds": 0.2})
        live.worker(env={"REDIS_URL": own.url})
        sched = live.scheduler("--lease-ttl", "1", env={"REDIS_URL": own.url})
        wait_until(lambda: all_final([first.pk]), timeout=30, what="the first chart")
        own.stop()
        during = make_chart(org, wf, payload={"seconds": 0.2})  # its notification is lost
        time.sleep(2.0)  # longer than the lease: dispatch pauses until the lease is held again
        own = embedded.start_redis(port, log=redis_log)
        after = make_chart(org, wf, payload={"seconds": 0.2})
        wait_until(lambda: all_final([during.pk, after.pk]), timeout=40, what="charts created around the restart")
        assert set(states([first.pk, during.pk, after.pk]).values()) == {"succeeded"}
        assert sched.alive()
        log = sched.log()
        assert "cannot renew the lease" in log and "dispatch resumes" in log, log[-3000:]
    finally:
        live.stop_all()
        own.stop()


@pytest.mark.slow(31)
def test_temporal_killed_and_restarted_under_a_running_system_loses_and_repeats_nothing(live):
    from fairsched.runtime import embedded
    from tests.integration.conftest import TemporalFacade

    port = embedded.free_port()
    db_file = live.artifacts / "temporal-own.db"
    db_file.unlink(missing_ok=True)
    start = lambda: embedded.start_temporal(port, log=live.artifacts / "temporal-own.log", db_file=db_file)  # noqa: E731
    own = start()
    try:
        configure(budget=2, reconcile=1.0)
        org = make_org("Acme")
        wf = make_workflow("code", temporal_type="DemoChart")
        ids = [make_chart(org, wf, payload={"seconds": 1.0}).pk for _ in range(8)]
        env = {"TEMPORAL_ADDRESS": own.url}
        live.worker(env=env)
        sched = live.scheduler(env=env)
        wait_until(lambda: Chart.objects.filter(pk__in=ids, state=ChartState.SUCCEEDED).count() >= 2,
                   timeout=60, what="two charts done before the outage")
        wait_until(lambda: Chart.objects.filter(pk__in=ids, state=ChartState.RUNNING).exists(),
                   timeout=30, what="charts running when Temporal dies")
        own.proc.send_signal(signal.SIGKILL)  # a crash: running workflows are in its database file
        own.proc.wait(10)
        time.sleep(12.0)  # longer than the SDK's own retries: the scheduler's backoff has to carry it
        assert sched.alive()
        own = start()
        wait_until(lambda: all_final(ids), timeout=120, what="every chart final after Temporal came back")
        assert set(states(ids).values()) == {"succeeded"}, sched.log()[-3000:]
        assert sched.alive()
        facade = TemporalFacade(own.url)
        try:
            assert set(executions_per_chart(facade, ids).values()) == {1}  # nothing ran twice
        finally:
            facade.close()
    finally:
        live.stop_all()
        own.stop()


def test_two_schedulers_only_one_dispatches_and_the_standby_takes_over(live, temporal):
    configure(budget=2)
    org = make_org("Acme")
    wf = make_workflow("code", temporal_type="DemoChart")
    ids = [make_chart(org, wf, payload={"seconds": 0.5}).pk for _ in range(10)]
    live.shared_worker()
    one = live.scheduler("--lease-ttl", "2")
    two = live.scheduler("--lease-ttl", "2")
    wait_until(lambda: Chart.objects.filter(pk__in=ids, state=ChartState.SUCCEEDED).count() >= 4,
               timeout=30, what="some charts done")
    logs = {p.name: p.log() for p in (one, two)}
    dispatching = [name for name, log in logs.items() if "dispatch chart #" in log]
    assert len(dispatching) == 1, logs
    leader, standby = (one, two) if dispatching == [one.name] else (two, one)
    assert "standby: the lease is held by" in standby.log()
    leader.kill()
    wait_until(lambda: all_final(ids), timeout=60, what="the standby to finish the backlog")
    assert "dispatch chart #" in standby.log()
    assert set(states(ids).values()) == {"succeeded"}
    assert set(executions_per_chart(temporal, ids).values()) == {1}


@pytest.fixture
def user_worker(temporal_address, live):
    """A user's own worker for ``UserChart`` on its own task queue, in a thread of this process."""
    import asyncio
    import threading

    from temporalio.client import Client
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker

    from tests.integration.user_workflows import StubbornChart, UserChart

    queue = f"{live.task_queue}-user"
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder = {}

    async def main() -> None:
        holder["stop"] = asyncio.Event()
        try:
            client = await Client.connect(temporal_address)
            # Unsandboxed: the sandbox's validation of the workflow at start-up, inside this busy
            # test process, once timed out under load; the sandbox is not what this worker tests.
            worker = Worker(client, task_queue=queue, workflows=[UserChart, StubbornChart],
                            workflow_runner=UnsandboxedWorkflowRunner())
        finally:
            ready.set()
        run = asyncio.create_task(worker.run())
        await holder["stop"].wait()
        await worker.shutdown()
        await run

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(30)
    yield queue
    loop.call_soon_threadsafe(holder["stop"].set)
    thread.join(30)
    assert not thread.is_alive()


def test_user_workflow_type_completes_and_a_closed_run_is_never_started_again(live, temporal, user_worker):
    configure(budget=1)
    org = make_org("Acme")
    wf = make_workflow("user", temporal_type=f"UserChart@{user_worker}")
    first = make_chart(org, wf, payload={"seconds": 0.3}, external_id="u-1")
    failing = make_chart(org, wf, payload={"seconds": 0.1, "fail": True}, external_id="u-2")
    crashing = live.crashing_scheduler(1, "--lease-ttl", "1")
    wait_until(lambda: not crashing.alive(), timeout=30, what="the injected crash")
    # The workflow ran to its end while no scheduler was alive; its row still says queued.
    wait_until(lambda: temporal.describe(workflow_id(first.pk)).close_time, timeout=10, what="the run to close")
    assert states([first.pk]) == {first.pk: "queued"}
    sched = live.scheduler("--lease-ttl", "1")
    wait_until(lambda: all_final([first.pk, failing.pk]), timeout=30, what="both final")
    first.refresh_from_db()
    failing.refresh_from_db()
    assert first.state == ChartState.SUCCEEDED and first.finished_at is not None
    assert failing.state == ChartState.FAILED and "user workflow refused chart u-2" in failing.error
    assert set(executions_per_chart(temporal, [first.pk, failing.pk]).values()) == {1}
    assert sched.saw(f"dispatch chart #{first.pk} skipped: workflow chart-{first.pk} already closed")


@pytest.mark.slow(16)
def test_temporal_restarted_under_a_running_scheduler_recovers(live, settings):
    from fairsched.runtime import embedded

    port, ui = embedded.free_port(), embedded.free_port()
    db_file = live.artifacts / "temporal-own.db"
    db_file.unlink(missing_ok=True)
    own = embedded.start_temporal(port, ui, log=live.artifacts / "temporal-own.log", db_file=db_file)
    try:
        configure(budget=1, reconcile=1.0)
        org = make_org("Acme")
        wf = make_workflow("code", temporal_type="DemoChart")
        first = make_chart(org, wf, payload={"seconds": 0.2})
        env = {"TEMPORAL_ADDRESS": own.url}
        live.worker(env=env)
        sched = live.scheduler(env=env)
        wait_until(lambda: all_final([first.pk]), timeout=30, what="the first chart")
        own.stop()
        during = make_chart(org, wf, payload={"seconds": 0.2})
        time.sleep(2.0)
        own = embedded.start_temporal(port, ui, log=live.artifacts / "temporal-own.log", db_file=db_file)
        wait_until(lambda: all_final([during.pk]), timeout=60, what="the chart created while Temporal was down")
        assert set(states([first.pk, during.pk]).values()) == {"succeeded"}
        assert sched.alive()
    finally:
        live.stop_all()
        own.stop()


def test_a_change_is_published_soon_not_at_the_next_periodic_eta_pass(live):
    """With the periodic ETA pass a minute away, a new chart still reaches the published
    order (what every dashboard shows) within a few seconds: changes trigger a coalesced pass."""
    from common import snapshot

    configure(budget=0, eta=60)
    org = make_org("Acme")
    wf = make_workflow("code", temporal_type="DemoChart")
    first = make_chart(org, wf)
    live.scheduler()
    wait_until(lambda: [r["id"] for r in snapshot.read_order()[1]] == [first.pk], timeout=20,
               what="the first snapshot")
    second = make_chart(org, wf)  # notified on commit; no ETA pass is due for 60 s
    wait_until(lambda: [r["id"] for r in snapshot.read_order()[1]] == [first.pk, second.pk], timeout=5,
               what="the new chart in the published order")
