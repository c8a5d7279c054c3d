"""Workflow ids name their deployment: two deployments on one Temporal namespace (two
databases) never take each other's outcomes nor adopt each other's workflows; charts
that existed before the upgrade keep their id; a running chart whose workflow aged out
of Temporal is not run again.

The scheduler is driven with the fakes of ``tests/test_tick.py``, over one fake
*namespace* keyed by workflow id that both deployments share (each through its own
port, which names a chart's workflow the way the real port does)."""
from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import datetime, timezone

import pytest

from fairsched.engine.ports.temporal import AlreadyStarted, WorkflowNotFound
from fairsched.engine.scheduler import Scheduler
from fairsched.engine.store.rows import OrgRow
from fairsched.temporal.client import Outcome
from fairsched.temporal import shared
from tests.test_tick import T0, FakeClock, FakePublisher, FakeStore, settle


class Namespace:
    """One Temporal namespace: workflows by id (REJECT_DUPLICATE + USE_EXISTING)."""

    def __init__(self) -> None:
        self.runs: dict[str, str] = {}
        self.outcomes: dict[str, Outcome] = {}
        self.closed: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.started: list[str] = []

    def start(self, wf: str) -> str:
        if wf in self.outcomes:
            raise AlreadyStarted(f"{wf}: DemoChart")
        if wf not in self.runs:
            self.started.append(wf)
        return self.runs.setdefault(wf, f"run-{len(self.runs) + 1}")

    def close(self, wf: str, state: str = "succeeded", error: str = "") -> None:
        at = datetime.fromtimestamp(T0, timezone.utc)
        self.outcomes[wf] = Outcome(state, error, at, at, self.runs[wf])
        self.closed[wf].set()


class Port:
    """One deployment's Temporal port on the shared namespace: it names a chart's workflow
    with the ids the scheduler hands it, as ``TemporalClient`` does."""

    def __init__(self, ns: Namespace) -> None:
        self.ns = ns
        self.ids = None
        self.retention = 7 * 86_400.0

    def wf(self, chart_id: int) -> str:
        return self.ids.of(chart_id) if self.ids is not None else shared.workflow_id(chart_id)

    async def connect(self) -> None:
        pass

    async def retention_s(self):
        return self.retention

    async def start(self, *, temporal_type, task_queue, chart, execution_timeout_s) -> str:
        return self.ns.start(self.wf(chart.chart_id))

    async def outcome(self, chart_id):
        wf = self.wf(chart_id)
        if wf not in self.ns.runs:
            raise WorkflowNotFound("workflow not found", "NOT_FOUND")
        return self.ns.outcomes.get(wf)

    async def describe(self, chart_id):
        await self.outcome(chart_id)

    async def cancel(self, chart_id):
        pass

    async def terminate(self, chart_id, reason):
        self.ns.close(self.wf(chart_id), "failed", f"terminated: {reason}")

    async def wait_closed(self, chart_id):
        await self.ns.closed[self.wf(chart_id)].wait()

    async def running(self, legacy=False):
        for wf, run in list(self.ns.runs.items()):
            if wf not in self.ns.outcomes:
                yield wf, run


class Store(FakeStore):
    """One deployment's database."""

    def __init__(self, budget: int, name: str, legacy_below: int | None = 1) -> None:
        super().__init__(budget, [OrgRow(1, "Org 1", "org-1", 1)])
        self.name, self.legacy_below = name, legacy_below

    async def deployment(self):
        return shared.WorkflowIds(self.name, self.legacy_below)


@pytest.fixture
async def deployments():
    made: list[Scheduler] = []

    def make(ns: Namespace, name: str, *, budget: int = 1, charts: int = 1, legacy_below: int | None = 1):
        store = Store(budget, name, legacy_below)
        for pk in range(1, charts + 1):
            store.add(pk, 1)
        port, clock = Port(ns), FakeClock()
        s = Scheduler(temporal_address="unused:1", namespace="default", task_queue="q", redis_url="redis://unused",
                      clock=clock, store=store, publisher=FakePublisher(), temporal=port)
        made.append(s)
        return s, store, port, clock

    yield make
    for s in made:
        await s.step_down()


async def lead(s: Scheduler, clock: FakeClock) -> None:
    s.leading = True
    s.leadership.ok_until = clock.monotonic() + s.LEASE_TTL_S
    await s.take_over()
    await settle()


async def tick(s: Scheduler) -> None:
    await s.tick()
    await settle()


async def test_two_deployments_on_one_namespace_never_take_each_others_outcomes(deployments):
    """Deployment A's chart 1 ran and closed. Deployment B's chart 1 (its own database,
    the same pk) must run: before, it was refused as a duplicate and recorded with A's
    outcome without ever running."""
    ns = Namespace()
    a, a_store, a_port, a_clock = deployments(ns, "alpha")
    await lead(a, a_clock)
    await tick(a)
    assert a_store.state(1) == "running"
    ns.close(a_port.wf(1), "failed", "alpha's own failure")
    await settle()
    await tick(a)
    assert a_store.state(1) == "failed"

    b, b_store, b_port, b_clock = deployments(ns, "beta")
    await lead(b, b_clock)
    await tick(b)
    assert b_store.state(1) == "running", b_store.errors.get(1)
    assert len(ns.started) == 2 and b_port.wf(1) != a_port.wf(1)
    ns.close(b_port.wf(1))
    await settle()
    await tick(b)
    assert b_store.state(1) == "succeeded" and a_store.state(1) == "failed"


async def test_reconciliation_adopts_only_its_own_deployments_workflows(deployments):
    """A running workflow of deployment A whose row is queued is A's orphan (a crash between
    start and compare-and-set): A adopts it. B, whose chart 1 is queued too, must not: it
    held the foreign workflow as its own (and its cost), and recorded its outcome."""
    ns = Namespace()
    a, a_store, a_port, a_clock = deployments(ns, "alpha", budget=0)
    b, b_store, b_port, b_clock = deployments(ns, "beta", budget=0)
    await lead(a, a_clock)
    ns.start(a_port.wf(1))  # A started it and crashed before recording it
    await lead(b, b_clock)  # take-over reconciles: nothing of B's runs
    assert b_store.state(1) == "queued" and 1 not in b.state.running
    await a.sync.reconcile()
    assert a_store.state(1) == "running" and 1 in a.state.running  # A's own orphan


async def test_a_chart_started_under_its_legacy_id_is_followed_and_never_started_again(deployments):
    """The upgrade: charts older than the cut keep ``chart-<pk>``. One running under it is
    followed (not requeued, not failed), a queued one whose legacy workflow runs (a crash
    of the old version between start and record) is adopted, and a new chart gets the
    deployment's id."""
    ns = Namespace()
    s, store, port, clock = deployments(ns, "alpha", budget=3, charts=3, legacy_below=3)
    ns.start("chart-1")
    store.set(1, state="running", started_at=T0 - 60, dispatched_cost=1, run_id=ns.runs["chart-1"])
    ns.start("chart-2")  # the old version started it and stopped before recording it
    await lead(s, clock)
    assert store.state(1) == "running" and store.state(2) == "running"  # followed; adopted
    await tick(s)
    assert store.state(3) == "running" and ns.started == ["chart-1", "chart-2", "chart-alpha-3"]
    ns.close("chart-1")
    clock.advance(6)  # the next reconcile
    await tick(s)
    assert store.state(1) == "succeeded"


async def test_a_running_chart_whose_workflow_aged_out_of_temporal_is_failed_not_run_again(deployments):
    """Temporal deletes a closed workflow after the namespace's retention. A running row
    dispatched longer ago whose workflow Temporal no longer knows may well have run: it was
    requeued, and so run a second time. It is failed instead, the reason saying why."""
    ns = Namespace()
    s, store, port, clock = deployments(ns, "alpha", budget=1)
    store.set(1, state="running", started_at=T0 - 10 * 86_400, dispatched_cost=1, run_id="run-old")
    await lead(s, clock)
    await tick(s)
    assert store.state(1) == "failed" and ns.started == []
    assert store.errors[1].startswith("outcome lost: Temporal no longer knows workflow chart-alpha-1, "
                                      "dispatched 10.0 days ago, longer than the namespace's retention of 7.0 days")
    assert 1 not in s.state.running and s.state.free == 1


async def test_a_running_chart_temporal_lost_within_its_retention_is_requeued(deployments):
    """Dispatched an hour ago, its workflow cannot have aged out: Temporal lost it (its data,
    another cluster). The chart is requeued and runs (as before)."""
    ns = Namespace()
    s, store, port, clock = deployments(ns, "alpha", budget=1)
    store.set(1, state="running", started_at=T0 - 3600, dispatched_cost=1, run_id="run-lost")
    await lead(s, clock)
    await tick(s)
    assert store.state(1) == "running" and ns.started == ["chart-alpha-1"]
