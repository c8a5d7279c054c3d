"""Hypothesis properties and a state machine over the live FairQueue."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from scheduling import Durations, NeedsWholeBacklog, QueuedChart, RunningChart, head_of_backlog, plan, same_rounds
from scheduling.queue import FairQueue
from scheduling.contract.simulator import Arrival, simulate
from tests.core.twins import TwinQueues, WorkFairQueue
from scheduling.contract.scenario import dump_scenario, plan as plan_json

ORGS = ["o1", "o2", "o3", "o4"]
WORKFLOWS = ["cheap", "mid", "big"]

settings.register_profile("core", max_examples=60, deadline=None)
settings.load_profile("core")


@st.composite
def backlogs(draw, min_weight=0, priority=True, paused=True):
    n_orgs = draw(st.integers(1, 4))
    orgs = ORGS[:n_orgs]
    weights = {o: draw(st.integers(min_weight, 3)) for o in orgs}
    costs = {(o, w): draw(st.integers(1, 3)) for o in orgs for w in WORKFLOWS}
    budget = draw(st.integers(0, 6))
    n = draw(st.integers(0, 40))
    charts = []
    for i in range(n):
        org = draw(st.sampled_from(orgs))
        prio = priority and draw(st.integers(0, 9)) == 0
        charts.append(QueuedChart(
            f"c{i}", org, draw(st.sampled_from(WORKFLOWS)), float(draw(st.integers(0, 30))), i,
            priority=prio, prioritized_at=float(draw(st.integers(0, 40))) if prio and draw(st.booleans()) else None,
            paused=paused and draw(st.integers(0, 9)) == 0))
    return charts, weights, costs, budget


@st.composite
def running_sets(draw, orgs, costs):
    out = []
    for i in range(draw(st.integers(0, 4))):
        org = draw(st.sampled_from(orgs))
        wf = draw(st.sampled_from(WORKFLOWS))
        out.append(RunningChart(f"r{i}", org, wf, float(draw(st.integers(-900, 0))),
                                costs[(org, wf)]))
    return out


DUR = Durations({("o1", "cheap"): 100.0, ("o1", None): 300.0, ("o2", "big"): 1000.0},
                default_avg_s=600.0)


@given(data=st.data(), b=backlogs())
def test_rebuild_from_the_database_state_equals_the_static_plan(data, b):
    charts, weights, costs, budget = b
    running = data.draw(running_sets(list(weights), costs))
    p = plan(charts, running, budget=budget, weights=weights, costs=costs, estimate=DUR, now=0.0)
    q = FairQueue.from_backlog(charts, budget=budget, weights=weights, costs=costs)
    lp = q.plan(running, 0.0, DUR)
    assert q.order() == p.order
    assert lp.dispatch == p.dispatch
    assert (lp.held, lp.paused, lp.blocked) == (p.held, p.paused, p.blocked)
    assert lp.etas == p.etas and lp.org_clear_s == p.org_clear_s and lp.clear_s == p.clear_s
    assert lp.rounds == p.rounds


@given(data=st.data(), b=backlogs())
def test_static_backlog_dispatched_slot_by_slot_keeps_the_plan_order(data, b):
    charts, weights, costs, budget = b
    p = plan(charts, budget=budget, weights=weights, costs=costs)
    q = FairQueue.from_backlog(charts, budget=budget, weights=weights, costs=costs)
    started: list[str] = []
    while q.order_len:
        head = next(iter(q))
        c = q.get(head)
        free = data.draw(st.integers(q.cost_of(c.org, c.workflow), 6))
        got = [x.id for x in q.dispatch(free)]
        assert got and got[0] == head
        started += got
        assert q.order() == p.order[len(started):]
    assert started == p.order


@given(data=st.data(), b=backlogs())
def test_etas_are_non_decreasing_in_start_along_the_order(data, b):
    charts, weights, costs, budget = b
    running = data.draw(running_sets(list(weights), costs))
    p = plan(charts, running, budget=budget, weights=weights, costs=costs, estimate=DUR, now=0.0)
    starts = [p.etas[c].start_s for c in p.order]
    assert starts == sorted(starts)
    assert set(p.etas) == set(p.order) | {r.id for r in running}
    for c in p.order:
        assert p.etas[c].finish_s >= p.etas[c].start_s


def uncapped_etas(order, running, budget, costs, estimate):
    """The lane simulation with one lane per budget unit (the contract's literal
    reading, no cap): the reference the capped passes must equal."""
    from scheduling import initial_lanes, simulate_lanes

    etas, org_clear = {}, {}
    lanes = initial_lanes(running, 0.0, budget, estimate, etas)
    for r in running:
        org_clear[r.org] = max(org_clear.get(r.org, -1.0), etas[r.id].finish_s)
    simulate_lanes([(c.id, c.org, costs.get((c.org, c.workflow), 1), estimate(c.org, c.workflow)) for c in order],
                   lanes, etas, org_clear)
    return etas, org_clear


@given(data=st.data(), b=backlogs(), extra=st.integers(0, 200))
def test_etas_with_lanes_capped_at_the_total_cost_equal_one_lane_per_budget_unit(data, b, extra):
    """Lanes beyond the cost of the running and ordered charts are left out of the ETA
    pass (memory and time follow the charts, not the budget); the ETAs, clear-times and
    dispatch are exactly those of the uncapped simulation, for budgets below, at and far
    above that total."""
    charts, weights, costs, budget = b
    budget += extra
    running = data.draw(running_sets(list(weights), costs))
    p = plan(charts, running, budget=budget, weights=weights, costs=costs, estimate=DUR, now=0.0)
    by_id = {c.id: c for c in charts}
    etas, org_clear = uncapped_etas([by_id[c] for c in p.order], running, budget, costs, DUR)
    assert dict(p.etas) == etas
    assert {o: v for o, v in p.org_clear_s.items() if o in org_clear} == org_clear
    q = FairQueue.from_backlog(charts, budget=budget, weights=weights, costs=costs)
    live = q.etas(running, 0.0, estimate=DUR)
    assert dict(live.etas) == etas and live.clear_s == p.clear_s
    partial = q.etas(running, 0.0, estimate=DUR, stop_after=set(p.order[-1:]))  # the simulator's pass
    assert {c: partial.etas[c] for c in p.order} == {c: etas[c] for c in p.order}


@given(durations=st.lists(st.integers(1, 50), min_size=1, max_size=40),
       budget=st.integers(1, 5))
def test_cost_1_exact_lane_etas_equal_a_fifo_multiserver_queue(durations, budget):
    # one org, every chart its own workflow whose average is its true duration
    arrivals = [Arrival(f"c{i}", "A", f"w{i}", 0.0, float(d)) for i, d in enumerate(durations)]
    est = Durations({("A", f"w{i}"): float(d) for i, d in enumerate(durations)})
    r = simulate(arrivals, budget=budget, weights={"A": 1}, estimate=est)
    # independent FIFO multi-server queue
    servers = [0.0] * budget
    expect = []
    for d in durations:
        s = min(servers)
        servers[servers.index(s)] = s + d
        expect.append(s + d)
    assert [c.finish_s for c in r.charts] == pytest.approx(expect)
    assert [c.eta_at_arrival_s for c in r.charts] == pytest.approx(expect)


@settings(max_examples=300)
@given(lanes=st.lists(st.integers(0, 20), max_size=16),
       items=st.lists(st.tuples(st.sampled_from([1, 2, 3, 3, 4]),
                                st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 7.5, 19.0, -1.0])), max_size=30))
def test_the_lane_walk_equals_sorted_lanes_taking_the_c_earliest(lanes, items):
    """lanes.lane_pass (a heap, the c-th earliest lane read off its top levels for c <= 3)
    against the rule as written: sorted lanes, a chart of cost c starts at lanes[c-1] and
    its c lanes free at its finish; each walk's lanes hold the same times after it."""
    from heapq import heapify

    from scheduling.lanes import lane_pass
    heap = [float(x) for x in lanes]
    heapify(heap)
    ref = sorted(float(x) for x in lanes)
    want = []
    for c, est in items:
        if c > len(ref):
            want.append((None, None))
            continue
        start = ref[c - 1]
        want.append((start, start + est))
        ref = sorted(ref[c:] + [start + est] * c)
    starts, fins = lane_pass(items, heap)
    assert list(zip(starts, fins)) == want
    assert sorted(heap) == ref


@given(wx=st.integers(1, 4), wy=st.integers(1, 4),
       ops=st.lists(st.sampled_from(["x", "y", "d", "d", "d"]), max_size=120))
def test_two_backlogged_orgs_get_starts_in_the_ratio_of_their_weights(wx, wy, ops):
    q = FairQueue(budget=1, weights={"X": wx, "Y": wy})
    seq = 0
    for i in range(80):  # deep backlogs: both stay backlogged for the whole run
        for org in "XY":
            q.add(QueuedChart(f"{org}{seq}", org, None, float(seq), seq))
            seq += 1
    n = Counter()
    for op in ops:
        if op == "d":
            for c in q.dispatch(1):
                n[c.org] += 1
            assert abs(n["X"] / wx - n["Y"] / wy) <= 1.0 + 1e-9
        else:
            org = op.upper()
            q.add(QueuedChart(f"{org}{seq}", org, None, float(seq), seq))
            seq += 1
        assert q.ordered_count("X") and q.ordered_count("Y")


@given(w_other=st.integers(1, 3), n_held=st.integers(1, 5), steps=st.integers(0, 30))
def test_held_org_never_starts_and_starts_after_release(w_other, n_held, steps):
    q = FairQueue(budget=1, weights={"A": w_other, "H": 0})
    for i in range(n_held):
        q.add(QueuedChart(f"h{i}", "H", None, float(i), i))
    for i in range(50):
        q.add(QueuedChart(f"a{i}", "A", None, float(i), 100 + i))
    assert q.held == [f"h{i}" for i in range(n_held)]
    for _ in range(steps):
        assert all(c.org == "A" for c in q.dispatch(1))
    q.set_weight("H", 1)
    assert q.held == []
    first = [c.org for _ in range(w_other + 1) for c in q.dispatch(1)]
    assert "H" in first


class FairQueueMachine(RuleBasedStateMachine):
    """Arrivals, dispatch, finishes, pause/resume, priority, weight, cost and
    budget changes, cancels and moves to front, against the contract's invariants."""

    def __init__(self):
        super().__init__()
        self.weights = {"o1": 1, "o2": 2, "o3": 1}
        self.q = FairQueue(budget=3, weights=self.weights, costs={("o1", "big"): 2})
        self.running: dict[str, RunningChart] = {}
        self.seq = 0
        self.t = 1_800_000_000.0  # realistic epoch seconds: the dump's ISO round trip

    def queued_ids(self):
        return sorted(self.q.queued_ids())

    @rule(org=st.sampled_from(["o1", "o2", "o3"]), wf=st.sampled_from(["w", "big"]),
          dt=st.integers(0, 3), prio=st.integers(0, 5), paused=st.integers(0, 7))
    def arrive(self, org, wf, dt, prio, paused):
        self.t += dt
        self.q.add(QueuedChart(f"c{self.seq}", org, wf, self.t, self.seq,
                               priority=prio == 0, paused=paused == 0))
        self.seq += 1

    @rule()
    def dispatch(self):
        used = sum(r.cost for r in self.running.values())
        free = self.q.budget - used
        before = self.q.order()
        head_before = self.q.head
        started = self.q.dispatch(free)
        ids = [c.id for c in started]
        # head-of-line: exactly a prefix of the order, within the free budget
        assert ids == before[:len(ids)]
        spent = sum(self.q.cost_of(c.org, c.workflow) for c in started)
        assert spent <= max(free, 0)
        if len(ids) < len(before):
            nxt = self.q.get(before[len(ids)])
            assert self.q.cost_of(nxt.org, nxt.workflow) > free - spent
        assert self.q.head >= head_before
        for c in started:
            self.running[c.id] = RunningChart(c.id, c.org, c.workflow, self.t,
                                              self.q.cost_of(c.org, c.workflow))
        if used <= self.q.budget:
            assert used + spent <= self.q.budget

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def finish(self, data):
        cid = data.draw(st.sampled_from(sorted(self.running)))
        del self.running[cid]

    @precondition(lambda self: len(self.q))
    @rule(data=st.data(), action=st.sampled_from(
        ["pause", "resume", "prioritize", "unprioritize", "remove", "move_to_front"]))
    def chart_action(self, data, action):
        cid = data.draw(st.sampled_from(self.queued_ids()))
        if action == "remove":
            self.q.remove(cid)
        elif action == "prioritize":
            self.q.prioritize(cid, self.t)
        elif action == "move_to_front":
            self.q.move_to_front(cid, self.t)
        else:
            getattr(self.q, action)(cid)

    @rule(org=st.sampled_from(["o1", "o2", "o3"]), w=st.integers(0, 3))
    def set_weight(self, org, w):
        self.weights[org] = w
        self.q.set_weight(org, w)

    @rule(b=st.integers(0, 5))
    def set_budget(self, b):
        self.q.set_budget(b)

    @rule(org=st.sampled_from(["o1", "o2", "o3"]), c=st.integers(1, 4))
    def set_cost(self, org, c):
        self.q.set_cost(org, "big", c)

    @invariant()
    def classification_and_order_are_consistent(self):
        q = self.q
        held, paused, blocked = set(q.held), set(q.paused), set(q.blocked)
        order = q.order()
        assert len(order) + len(held) + len(paused) + len(blocked) == len(q)
        for cid in order:
            c = q.get(cid)
            assert self.weights[c.org] > 0 and not c.paused
            assert q.cost_of(c.org, c.workflow) <= q.budget
        for cid in held:
            assert self.weights[q.get(cid).org] == 0
        normal = [q.get(c) for c in order if not q.get(c).priority]
        keys = [(c.round, c.created_at, c.seq) for c in normal]
        assert keys == sorted(keys)
        assert all(c.round >= q.head for c in normal)
        per_round = Counter((c.org, c.round) for c in normal)
        assert all(n <= self.weights[org] for (org, _), n in per_round.items())
        prio = [q.get(c) for c in order[:len(order) - len(normal)]]
        assert all(c.priority for c in prio)

    @invariant()
    def a_dump_replays_to_the_same_plan(self):
        now = self.t + 5.0
        running = [RunningChart(r.id, r.org, r.workflow, now - 10.0, r.cost)
                   for r in self.running.values()]
        live = self.q.plan(running, now, DUR)
        replay = plan_json(dump_scenario(self.q, running=running, now=now, durations=DUR))
        assert replay["order"] == live.order
        assert replay["dispatch"] == live.dispatch
        assert (replay["held"], replay["paused"], replay["blocked"]) == \
            (live.held, live.paused, live.blocked)
        for cid, e in live.etas.items():
            assert replay["etas"][cid]["finish_s"] == pytest.approx(e.finish_s, abs=1e-6)
        assert replay["clear_s"] == pytest.approx(live.clear_s, abs=1e-6)


FairQueueMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=40,
                                              deadline=None)
TestFairQueueMachine = FairQueueMachine.TestCase


class RestartMachine(TwinQueues):
    """A restart or failover in the middle of any sequence of operations changes no
    later decision (contracts/simulate.md): ``live`` is saved the way the scheduler
    saves it (:meth:`FairQueue.export_rounds` and each chart's round as
    :meth:`FairQueue.take_round_changes` reports it, at arbitrary moments) and
    restored from that save (:meth:`FairQueue.restore`); ``ref`` never restarts.
    Both see the same operations and must agree on every order, round and dispatch.
    (Rebuilding with ``from_backlog``, ``head = 0``, fails this at once.)"""

    ORGS = ("o1", "o2", "o3")

    def __init__(self):
        super().__init__()
        self.weights = {"o1": 2, "o2": 1, "o3": 1}
        costs = {("o1", "big"): 2}
        self.ref = self.Q(budget=3, weights=self.weights, costs=costs)
        self.live = self.Q(budget=3, weights=self.weights, costs=costs, track_rounds=True)
        self.saved_rounds: dict[str, int | None] = {}  # the charts' persisted rounds
        self.saved_state = self.live.export_rounds()
        self.running: dict[str, int] = {}
        self.seq = 0
        self.t = 0.0
        self.restarts = 0

    @rule(org=st.sampled_from(ORGS), wf=st.sampled_from(["w", "big"]), dt=st.integers(0, 2),
          prio=st.integers(0, 6), paused=st.integers(0, 6))
    def arrive(self, org, wf, dt, prio, paused):
        self.t += dt
        self.both("add", QueuedChart(f"c{self.seq}", org, wf, self.t, self.seq,
                                      priority=prio == 0, paused=paused == 0))
        self.seq += 1

    @rule(org=st.sampled_from(ORGS), w=st.integers(0, 3))
    def set_weight(self, org, w):
        self.weights[org] = w
        self.both("set_weight", org, w)

    @rule(org=st.sampled_from(ORGS), c=st.integers(1, 4))
    def set_cost(self, org, c):
        self.both("set_cost", org, "big", c)

    @rule()
    def save(self):
        """What the scheduler writes in one transaction (with a dispatch, or after changes)."""
        self.saved_rounds.update(self.live.take_round_changes())
        self.saved_state = self.live.export_rounds()

    @rule()
    def restart(self):
        """kill -9 right after a save, and a new scheduler reads the rows back."""
        self.save()
        rows = self.read_back(self.saved_rounds)
        self.live = self.Q.restore(rows, state=self.saved_state, budget=self.live.budget,
                                      weights=self.live.weights, costs=self.live.costs)
        self.restarts += 1

    @rule(k=st.integers(1, 3), steps=st.lists(st.sampled_from(["dispatch", "finish", "arrive_priority"]),
                                              max_size=6))
    def restart_head_first(self, k, steps):
        """A restart that loads the head of the order first (``k`` charts with a round per
        org, every priority chart, every chart without a round) and dispatches from it
        while the whole backlog loads, then restores the whole backlog from the same save
        and replays what the head dispatched: every decision agrees with ``ref`` (which
        never restarts), in between and after."""
        self.save()
        rows = self.read_back(self.saved_rounds)
        head, horizon, truncated = head_of_backlog(rows, k)
        arrived = []
        try:
            part = self.Q.restore(head, state=self.saved_state, budget=self.live.budget,
                                     weights=self.live.weights, costs=self.live.costs,
                                     horizon=horizon or (math.inf,), truncated=truncated)
        except NeedsWholeBacklog:
            return self.restart()
        for step in steps:
            if step == "dispatch":
                free = self.ref.budget - sum(self.running.values())
                started = part.dispatch(free)
                # the same charts start on the never-restarted queue, given their cost
                spent = sum(part.cost_of(c.org, c.workflow) for c in started)
                if started:
                    assert [c.id for c in self.ref.dispatch(spent)] == [c.id for c in started]
                for c in started:
                    self.running[c.id] = part.cost_of(c.org, c.workflow)
            elif step == "finish" and self.running:
                del self.running[sorted(self.running)[0]]
            elif step == "arrive_priority":  # a priority chart arrives while the backlog loads
                c = QueuedChart(f"c{self.seq}", "o1", "w", self.t, self.seq, priority=True)
                self.seq += 1
                self.ref.add(c)
                part.add(c)
                arrived.append(c)
        whole = self.Q.restore(rows, state=self.saved_state, budget=self.live.budget,
                                  weights=self.live.weights, costs=self.live.costs)
        whole.replay(part.start_log)
        for c in arrived:  # newer than the whole backlog's read: the resync after the swap
            if c.id in part:
                whole.add(c)
        assert same_rounds(whole.export_rounds(), part.export_rounds(), truncated)
        self.live = whole
        self.restarts += 1

    @rule(org=st.sampled_from(ORGS), w=st.integers(0, 3), b=st.integers(0, 5))
    def restart_after_settings_changed_while_down(self, org, w, b):
        """An operator changed a weight and the budget while no scheduler ran: the new one
        re-ranks as the live changes would have (the saved state names the weights and
        budget it was computed under)."""
        self.save()
        rows = self.read_back(self.saved_rounds)
        self.weights[org] = w
        self.ref.set_weight(org, w)
        self.ref.set_budget(b)
        self.live = self.Q.restore(rows, state=self.saved_state, budget=b, weights=self.weights,
                                      costs=self.live.costs)

RestartMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=50, deadline=None)
TestRestartMachine = RestartMachine.TestCase


class RestartMachineWork(RestartMachine):
    """The same restarts under the share "work" (each chart's work and share saved with it)."""

    Q = WorkFairQueue


RestartMachineWork.TestCase.settings = RestartMachine.TestCase.settings
TestRestartMachineWork = RestartMachineWork.TestCase


def _a_and_b(weights: dict[str, int], *, budget: int, a: int, b: int) -> FairQueue:
    """Charts a0.. of org A (created at 0, 1, ...), then b0.. of org B (at 10, 11, ...)."""
    q = FairQueue(budget=budget, weights=weights, track_rounds=True)
    for i in range(a):
        q.add(QueuedChart(f"a{i}", "A", "w", float(i), i))
    for i in range(b):
        q.add(QueuedChart(f"b{i}", "B", "w", float(10 + i), 10 + i))
    return q


def _saved_rows(q: FairQueue) -> list[QueuedChart]:
    """The queued charts as a restarted scheduler reads them back: each with its saved round."""
    rounds = q.take_round_changes()
    return [replace(c, round=rounds.get(c.id)) for c in q.backlog()]


def test_restore_resumes_the_issue_example_where_a_rebuild_reshuffles():
    """Org A weight 2, B weight 1, budget 2: A's first two charts start, so B's first is
    next. A restore keeps that; a rebuild from the backlog (head = 0) gives A a fresh round."""
    weights = {"A": 2, "B": 1}
    q = _a_and_b(weights, budget=2, a=6, b=3)
    assert [c.id for c in q.dispatch(2)] == ["a0", "a1"]
    before = q.order()
    assert before == ["b0", "a2", "a3", "b1", "a4", "a5", "b2"]
    rows = _saved_rows(q)
    restored = FairQueue.restore(rows, state=q.export_rounds(), budget=2, weights=weights)
    assert restored.order() == before
    rebuilt = FairQueue.from_backlog(q.backlog(), budget=2, weights=weights)
    assert rebuilt.order() == ["a2", "a3", "b0", "a4", "a5", "b1", "b2"]


def test_the_head_alone_dispatches_up_to_its_horizon_and_the_whole_replays_it():
    """A weight-2 org holds two charts a round. With one chart per org loaded first, the
    head knows a0 and b0 only: a1 (round 0, not loaded) comes before b0 in the order, so
    the head may start a0 and nothing after it; the whole backlog, restored from the same
    save and replaying that start, goes on exactly as a queue that never restarted."""
    weights = {"A": 2, "B": 1}
    ref = _a_and_b(weights, budget=3, a=4, b=3)
    rows = _saved_rows(ref)
    saved = ref.export_rounds()
    head, horizon, _ = head_of_backlog(rows, 1)
    assert sorted(c.id for c in head) == ["a0", "b0"]
    part = FairQueue.restore(head, state=saved, budget=3, weights=weights, horizon=horizon)
    assert [c.id for c in part.dispatch(3)] == ["a0"]
    assert part.dispatch(3) == []
    whole = FairQueue.restore(rows, state=saved, budget=3, weights=weights)
    assert whole.replay(part.start_log) == [("a0", "A")]
    assert [c.id for c in ref.dispatch(1)] == ["a0"]
    assert whole.export_rounds() == ref.export_rounds() == part.export_rounds()
    assert [c.id for c in whole.dispatch(2)] == [c.id for c in ref.dispatch(2)] == ["a1", "b0"]
    assert whole.order() == ref.order()


def test_a_head_that_would_re_rank_needs_the_whole_backlog():
    weights = {"A": 1}
    q = _a_and_b(weights, budget=1, a=3, b=0)
    rows = _saved_rows(q)
    head, horizon, _ = head_of_backlog(rows, 1)
    with pytest.raises(NeedsWholeBacklog):  # the weight changed while no scheduler ran
        FairQueue.restore(head, state=q.export_rounds(), budget=1, weights={"A": 2}, horizon=horizon)
