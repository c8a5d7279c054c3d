"""Capacity pools on the real stack (docs/scheduling.md, "Pools"): a real Temporal dev
server, a real Redis, ``runscheduler`` and ``runworker`` as processes, killed with SIGKILL
mid-run, the dispatch strict until the first kill and backfill (with a ceiling) after it.
Judged by Temporal's own start and close times: every chart ran exactly once, and no pool
and no ceiling was ever over."""
from __future__ import annotations

import pytest

from charts.models import Chart, ChartState
from control import services as control
from orgs import services as orgs
from tests.factories import make_chart, make_org, make_workflow
from tests.integration.conftest import wait_until
from tests.integration.test_scheduler_live import (all_final, closed_in_temporal, configure, executions_per_chart,
                                                   held, peak_of, states)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

# The schedulers a test SIGKILLs and starts again hold the lease this long (``--lease-ttl``;
# 5 s by default): the new one waits that long at most for the dead one's lease to expire.
SHORT_LEASE = ("--lease-ttl", "2")

# what each pair draws on: A's audits hold llm 2 + gpu 1 + 1 of the budget; B's codings llm 1 + 1 of
# the budget; C's renders gpu 1 + api 1; A's ceiling in llm is 2 (one audit at a time)
CAPACITY = {"default": 3, "llm": 3, "gpu": 2, "api": 1}
DRAWS = {"A": {"llm": 2, "gpu": 1, "default": 1}, "B": {"llm": 1, "default": 1}, "C": {"gpu": 1, "api": 1}}


def test_three_pools_under_kill_9_of_scheduler_and_worker_run_each_chart_once_within_every_pool(live, temporal):
    """Strict, then backfill from the first restart on: the same judgement for both."""
    configure(budget=CAPACITY["default"])
    for pool in ("llm", "gpu", "api"):
        control.pool_set(name=pool, capacity=CAPACITY[pool])
    wf = {name: make_workflow(name, temporal_type="DemoChart") for name in ("audit", "code", "render")}
    for w in wf.values():  # about what they take: backfill's reservations (and guards) of a second
        w.expected_duration_s = 1
        w.save(update_fields=["expected_duration_s"])
    org = {"A": make_org("A"), "B": make_org("B"), "C": make_org("C")}
    for name, workflow in (("A", "audit"), ("B", "code"), ("C", "render")):
        orgs.workflow_cost_set(org=org[name], workflow=wf[workflow], cost=1, pools=DRAWS[name])
    orgs.org_pool_limit_set(org=org["A"], pool="llm", max=2)
    charts = {}
    for i in range(8):
        for name, workflow in (("A", "audit"), ("B", "code"), ("C", "render")):
            c = make_chart(org[name], wf[workflow], payload={"seconds": 0.4 + 0.1 * (i % 3)})
            charts[c.pk] = name
    ids = list(charts)

    worker = live.worker()
    sched = live.scheduler(*SHORT_LEASE)
    wait_until(lambda: Chart.objects.filter(pk__in=ids, state=ChartState.SUCCEEDED).count() >= 4,
               timeout=60, what="some charts done")
    sched.kill()   # SIGKILL, mid-run: charts running, some queued
    worker.kill()  # and the worker under them
    assert Chart.objects.filter(pk__in=ids, state=ChartState.QUEUED).exists()
    control.policies_set(dispatch="backfill")  # the rest under backfill with pools and A's ceiling
    live.worker()
    sched = live.scheduler(*SHORT_LEASE)
    wait_until(lambda: Chart.objects.filter(pk__in=ids, state=ChartState.SUCCEEDED).count() >= 12,
               timeout=90, what="more charts done after the restart")
    sched.kill()   # once more, the scheduler alone
    live.scheduler(*SHORT_LEASE)
    wait_until(lambda: all_final(ids), timeout=120, what="every chart final")
    assert set(states(ids).values()) == {"succeeded"}
    assert set(executions_per_chart(temporal, ids).values()) == {1}  # exactly once, by Temporal's own count

    described = closed_in_temporal(temporal, ids)
    for pool, capacity in CAPACITY.items():
        intervals = [(*held(c, d), DRAWS[charts[c]].get(pool, 0), c) for c, d in described.items()]
        peak, at_peak = peak_of(intervals)
        assert peak <= capacity, f"pool {pool}: {peak} units at once > {capacity}: {at_peak}"
    a_llm = [(*held(c, d), DRAWS["A"]["llm"], c) for c, d in described.items() if charts[c] == "A"]
    assert peak_of(a_llm)[0] <= 2  # A's ceiling in llm
    # the pools were used, not left idle: llm and gpu were full at some moment
    assert peak_of([(*held(c, d), DRAWS[charts[c]].get("llm", 0)) for c, d in described.items()])[0] == 3
    # what each chart held is recorded with its start (what a restart counts it as holding): its
    # pair's draws; none only for a chart adopted after a kill (started, its row not yet marked)
    recorded = dict(Chart.objects.filter(pk__in=ids).values_list("pk", "dispatched_pools"))
    assert all(units in (None, DRAWS[charts[c]]) for c, units in recorded.items()), recorded
    assert sum(units is not None for units in recorded.values()) >= len(ids) // 2, recorded
