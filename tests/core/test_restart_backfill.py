"""Restarts under ``dispatch = "backfill"`` (docs/scheduling.md, "Backfill"): a queue saved
and restored at any moment dispatches and orders exactly as one that never stopped,
under both shares. Backfill starts charts ahead of their round, so ``head`` stays below
rounds an org has already dispatched from: what a restart must keep is more than under
``strict``."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import event, settings, strategies as st
from hypothesis.stateful import initialize, invariant, rule

from scheduling import Durations, NeedsWholeBacklog, QueuedChart, RunningChart, head_of_backlog, same_rounds
from scheduling.queue import FairQueue
from tests.core.test_properties import RestartMachine
from tests.core.twins import BackfillFairQueue, BackfillWorkFairQueue


class RestartMachineBackfill(RestartMachine):
    """:class:`~tests.core.test_properties.RestartMachine` (``ref`` never restarts,
    ``live`` is saved and restored, also head first and after settings changed while
    down) with every dispatch a backfill dispatch: it is given the running charts and
    the clock, which moves on, so reservations fall in the holes the running charts
    leave. Every order, round, head and dispatch agrees."""

    Q = BackfillFairQueue

    def __init__(self):
        super().__init__()
        # wider charts than the restart machine's, so the head often waits for room
        costs = {("o1", "big"): 3, ("o2", "big"): 2}
        self.ref = self.Q(budget=4, weights=self.weights, costs=costs)
        self.live = self.Q(budget=4, weights=self.weights, costs=costs, track_rounds=True)
        self.saved_state = self.live.export_rounds()
        self.started: dict[str, RunningChart] = {}

    def running_charts(self) -> list[RunningChart]:
        return [self.started[cid] for cid in sorted(self.running)]

    def free_budget(self) -> int:
        return self.ref.budget - sum(self.running.values())

    def note_started(self, charts, order_before) -> None:
        ids = [c.id for c in charts]
        if ids and ids != order_before[:len(ids)]:
            event("backfilled: a chart started ahead of an earlier one")
        for c in charts:
            cost = self.ref.cost_of(c.org, c.workflow)
            self.running[c.id] = cost
            self.started[c.id] = RunningChart(c.id, c.org, c.workflow, self.t, cost)

    @rule(dt=st.sampled_from([0, 100, 300]), overrun=st.booleans())
    def dispatch(self, dt, overrun):
        """Time passes (see :meth:`wait`), then both dispatch."""
        self.wait(dt, overrun)
        before = self.ref.order()
        run = self.running_charts()
        a = self.ref.dispatch(self.free_budget(), run, self.t)
        b = self.live.dispatch(self.free_budget(), run, self.t)
        assert a == b
        self.note_started(a, before)

    @initialize(charts=st.lists(st.tuples(st.sampled_from(["o1", "o2", "o3"]), st.sampled_from(["w", "big"])),
                                min_size=10, max_size=30))
    def backlog(self, charts):
        """A backlog to begin with, so that most dispatches meet a head waiting for room."""
        for org, wf in charts:
            self.arrive(org, wf, 0, 1, 1)

    @rule(wide=st.sampled_from(["o1", "o2"]), n=st.integers(1, 3))
    def arrive_wide_then_short(self, wide, n):
        """A wide chart, then ``n`` short ones of o3: the hole backfill fills."""
        self.arrive(wide, "big", 0, 1, 1)
        for _ in range(n):
            self.arrive("o3", "w", 0, 1, 1)

    @rule(dt=st.sampled_from([100, 300, 700]), overrun=st.booleans())
    def wait(self, dt, overrun):
        """Time passes: the running charts come nearer their estimated finish, and those
        past it finish (unless they ``overrun``: they run on past their estimate)."""
        self.t += dt
        if not overrun:
            est = self.ref.estimate  # the estimate both queues reserve by
            for cid in [c for c in self.running
                        if self.started[c].started_at + est(self.started[c].org, self.started[c].workflow) <= self.t]:
                del self.running[cid]

    @rule(k=st.integers(1, 3), steps=st.lists(st.sampled_from(["dispatch", "finish", "arrive_priority"]),
                                              max_size=6))
    def restart_head_first(self, k, steps):
        """The head of the order restored alone dispatches while the backlog loads: of the
        charts the never-restarted queue starts, exactly those the head holds among its
        first ``depth`` charts (the reservations of the charts before them are the same);
        then the whole backlog, restored from the same save, replays what the head did."""
        self.save()
        rows = self.read_back(self.saved_rounds)
        head, horizon, truncated = head_of_backlog(rows, k)
        arrived = []
        kw = dict(state=self.saved_state, budget=self.live.budget, weights=self.live.weights,
                  costs=self.live.costs)
        try:
            part = self.Q.restore(head, horizon=horizon or (float("inf"),), truncated=truncated, **kw)
        except NeedsWholeBacklog:
            return self.restart()
        for step in steps:
            if step == "dispatch":
                run, free = self.running_charts(), self.free_budget()
                h = part.horizon  # what the partial queue may reserve
                seen = [key.id for key in list(part.keys())[:part.depth] if key[:4] <= h]
                want = [cid for cid in self.ref.peek(free, run, self.t) if cid in seen]
                before = self.ref.order()
                started = part.dispatch(free, run, self.t)
                assert [c.id for c in started] == want
                self.note_started(self.ref.dispatch_ids(want), before)
            elif step == "finish" and self.running:
                del self.running[sorted(self.running)[0]]
            elif step == "arrive_priority":
                c = QueuedChart(f"c{self.seq}", "o1", "w", self.t, self.seq, priority=True)
                self.seq += 1
                self.ref.add(c)
                part.add(c)
                arrived.append(c)
        whole = self.Q.restore(rows, **kw)
        whole.replay(part.start_log, part.export_rounds().holds)
        for c in arrived:
            if c.id in part:
                whole.add(c)
        assert same_rounds(whole.export_rounds(), part.export_rounds(), truncated)
        self.live = whole
        self.restarts += 1

    @invariant()
    def backfill_dispatch_agrees(self):
        run = self.running_charts()
        for free in {self.free_budget(), self.ref.budget}:
            assert self.live.peek(free, run, self.t) == self.ref.peek(free, run, self.t)


RestartMachineBackfill.TestCase.settings = settings(max_examples=60, stateful_step_count=50, deadline=None)
TestRestartMachineBackfill = RestartMachineBackfill.TestCase


class RestartMachineBackfillWork(RestartMachineBackfill):
    """The same under the share "work"."""

    Q = BackfillWorkFairQueue


RestartMachineBackfillWork.TestCase.settings = RestartMachineBackfill.TestCase.settings
TestRestartMachineBackfillWork = RestartMachineBackfillWork.TestCase


def test_the_machines_queues_backfill():
    """The machines' queues really backfill: budget 3, a cost-2 chart runs 700 s, the head
    (o1's big, cost 2) waits for it, and a 300 s chart behind it starts now."""
    q = BackfillFairQueue(budget=3, weights={"o1": 2, "o2": 1}, costs={("o1", "big"): 2})
    q.add(QueuedChart("c0", "o1", "big", 0.0, 0))
    q.add(QueuedChart("c1", "o2", "w", 1.0, 1))
    running = [RunningChart("r", "o3", "big", 0.0, 2)]
    assert q.order() == ["c0", "c1"]
    assert [c.id for c in q.dispatch(1, running, 0.0)] == ["c1"]
    strict = FairQueue(budget=3, weights={"o1": 2, "o2": 1}, costs={("o1", "big"): 2})
    strict.add(QueuedChart("c0", "o1", "big", 0.0, 0))
    strict.add(QueuedChart("c1", "o2", "w", 1.0, 1))
    assert strict.dispatch(1) == []


def test_a_restart_keeps_the_round_an_org_backfilled_from_above_the_head():
    """Budget 4, R (cost 1) runs 700 s. Org A (weight 2): a0 (300 s) and the wide a1
    (cost 3) hold round 0, the short a2 (100 s, bound 150 s) round 1. a0 starts; a1 waits
    for 3 units at 300 s; a2 ends before that and starts too, ahead of its round: the
    head stays 0 and A has dispatched from round 1. A later re-rank of A (weight 1) counts
    from round 1: a1 takes round 2. A restart in between must keep that (it once forgot
    it, and a1 took round 0)."""
    est = Durations({(None, "w"): 300.0, (None, "big"): 700.0, (None, "s"): 100.0})
    kw = dict(weights={"A": 2, "B": 1}, costs={("A", "big"): 3}, estimate=est, dispatch="backfill")
    q = FairQueue(budget=4, track_rounds=True, **kw)
    for i, wf in enumerate(["w", "big", "s"]):
        q.add(QueuedChart(f"a{i}", "A", wf, float(i), i))
    assert [q.round_of(c) for c in ("a0", "a1", "a2")] == [0, 0, 1]
    running = [RunningChart("R", "B", "big", 0.0, 1)]
    assert [c.id for c in q.dispatch(3, running, 0.0)] == ["a0", "a2"]
    assert q.head == 0
    state = q.export_rounds()
    assert state.orgs["A"].in_round == 1
    again = FairQueue.restore([replace(q.get("a1"), round=0)], state=state, budget=4, **kw)
    assert again.export_rounds() == state
    q.set_weight("A", 1)
    again.set_weight("A", 1)
    assert q.round_of("a1") == again.round_of("a1") == 2
