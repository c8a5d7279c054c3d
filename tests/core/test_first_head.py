"""A first start dispatches from the head of the backlog (``FairQueue.first_head``) while
the whole backlog loads: what it dispatches is what the whole order would have, a crash at
any moment restores the order a queue that never stopped holds, and the whole backlog's
round backfill goes on from what the head wrote."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import event, given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from scheduling import NeedsWholeBacklog, QueuedChart, RoundSaver, first_head_of_backlog, head_of_backlog, same_rounds
from scheduling.queue import FairQueue
from scheduling.keys import org_rank_key

ORGS = ("o1", "o2", "o3", "o4")
WEIGHTS = {"o1": 2, "o2": 1, "o3": 3, "o4": 0}
COSTS = {("o1", "big"): 2}


def backlog(flags: list[tuple[str, int, int]]) -> list[QueuedChart]:
    """(org, created-at step, flag) -> charts: flag 0 priority, 1 paused, 2 moved to front, 3 the big workflow."""
    out, t = [], 0.0
    for seq, (org, dt, f) in enumerate(flags):
        t += dt
        out.append(QueuedChart(f"c{seq}", org, "big" if f == 3 else "w", t, seq, priority=f == 0,
                               paused=f == 1, front_at=t + 100 if f == 2 else None))
    return out


def head_of(charts: list[QueuedChart], k: int) -> tuple[list[QueuedChart], set[str]]:
    """What ``fairsched.engine.store.db.read_head`` reads at a first start (checked against it in
    tests/test_scale.py), with the orgs that had more."""
    return first_head_of_backlog(charts, k)


def whole_of(charts, Q=FairQueue) -> FairQueue:
    return Q.from_backlog(charts, budget=3, weights=WEIGHTS, costs=COSTS, track_rounds=True)


flags_st = st.lists(st.tuples(st.sampled_from(ORGS), st.integers(0, 2), st.integers(0, 9)), min_size=1, max_size=60)


@settings(max_examples=300, deadline=None)
@given(flags=flags_st, k=st.integers(1, 6), frees=st.lists(st.integers(-1, 4), min_size=1, max_size=12))
def test_the_head_dispatches_what_the_whole_order_would(flags, k, frees):
    charts = backlog(flags)
    head_charts, truncated = head_of(charts, k)
    head = FairQueue.first_head(head_charts, truncated=truncated, budget=3, weights=WEIGHTS, costs=COSTS)
    whole = whole_of(charts)
    for c in head_charts:  # an org's first charts get the rounds the whole backlog gives them
        assert head.round_of(c.id) == whole.round_of(c.id)
    logged = 0
    for free in frees:
        started = [c.id for c in head.dispatch(free)]
        assert started == whole.peek(free)[:len(started)]
        whole.replay(head.start_log[logged:] if head.start_log is not None else
                     [("dispatch", cid, True, None) for cid in started])
        logged = len(head.start_log or ())
    assert head.partial == bool(truncated)  # a held org cut short still leaves charts unread
    if not truncated:
        assert head.order() == whole.order()


def test_a_truncated_org_with_no_ordered_chart_read_stops_the_normal_tier():
    charts = backlog([("o1", 1, 1), ("o1", 1, 5), ("o2", 1, 5), ("o2", 1, 0)])  # o1's first is paused
    head_charts, truncated = head_of(charts, 1)
    head = FairQueue.first_head(head_charts, truncated=truncated, budget=3, weights=WEIGHTS, costs=COSTS)
    assert truncated == {"o1"} and head.partial
    assert [c.id for c in head.dispatch(3)] == ["c3"]  # the priority chart only: o1's unread c1 may be round 0


class FirstStartMachine(RuleBasedStateMachine):
    Q = FairQueue
    """A first start: ``live`` is the head (``FairQueue.first_head``), saved by a
    :class:`RoundSaver` into ``rows`` and ``saved`` (the database) as the scheduler does,
    until the whole backlog takes over (its queue replays what the head took out; the
    backfill goes on from what the head wrote). ``ref`` is the whole backlog's queue, which
    never restarts. A kill -9 at any moment restores ``ref``'s order and rounds exactly.
    (Starting the whole's backfill from each org's first chart, ignoring what the head
    wrote, fails: a cursor goes back behind written rounds.)"""

    @initialize(flags=flags_st, k=st.integers(1, 5))
    def load(self, flags, k):
        self.charts = backlog(flags)
        self.seq = len(self.charts)
        self.t = max(c.created_at for c in self.charts)
        self.ref = whole_of(self.charts, self.Q)
        head_charts, truncated = head_of(self.charts, k)
        self.live = self.Q.first_head(head_charts, truncated=truncated, budget=3, weights=WEIGHTS, costs=COSTS)
        self.head_phase = self.live.partial
        self.truncated = truncated
        self.saver = RoundSaver(None)
        self.saver.start_backfill(self.live, lambda: (), 1, keep_written=self.head_phase)
        self.rows: dict[str, int | None] = {}
        self.saved = None
        self.whole = None
        self.running: dict[str, int] = {}
        self.logged = 0

    def commit_save(self):
        save = self.saver.next(self.live)
        if save is not None:
            self.saved = save[0]
            self.rows.update(save[1])
            self.saver.written(save)

    @rule()
    def dispatch(self):
        free = self.ref.budget - sum(self.running.values())
        started = self.live.dispatch(free)
        if self.head_phase:
            if started and self.snapshot is not None:
                event("a restart's head dispatched")
            assert [c.id for c in started] == self.ref.peek(free)[:len(started)]
            self.ref.replay(self.live.start_log[self.logged:])
            self.logged = len(self.live.start_log)
        else:
            assert [c.id for c in started] == [c.id for c in self.ref.dispatch(free)]
        for c in started:
            self.running[c.id] = self.ref.cost_of(c.org, c.workflow)
        self.commit_save()  # the dispatch's commit carries the round state

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def finish(self, data):
        del self.running[data.draw(st.sampled_from(sorted(self.running)))]

    @rule(n=st.integers(1, 8))
    def chunk(self, n):
        self.saver.chunk(n)
        self.commit_save()

    snapshot = None  # a restart's read: (queued charts with their saved rounds, saved state, had a round)

    @precondition(lambda self: self.head_phase and self.whole is None)
    @rule()
    def build_whole(self):
        """The whole backlog (read in the head's snapshot) is built, and its backfill
        prepared, as a thread does while the head goes on dispatching and writing."""
        if self.snapshot is None:
            self.whole = whole_of(self.charts, self.Q)
            had = ()
        else:
            queued, saved, had = self.snapshot
            self.whole = self.Q.restore(queued, state=saved, budget=3, weights=WEIGHTS, costs=COSTS)
        self.prepared = None
        if self.truncated:
            self.prepared = RoundSaver.prepare(self.whole, lambda: had, 1, dict(self.saver.written_rounds or {}),
                                               self.saver.saved)

    @precondition(lambda self: self.whole is not None)
    @rule()
    def take_over(self):
        """The backfill catches up with what the head wrote since; the whole replays the head's log."""
        whole, self.whole = self.whole, None
        if self.prepared is not None:
            self.saver.adopt(whole, self.prepared)
        whole.replay(self.live.start_log)
        assert whole.order() == self.ref.order()
        assert same_rounds(whole.export_rounds(), self.live.export_rounds(), self.truncated)
        if self.prepared is None:  # the engine's _loaded: a backfill of what the whole placed, if large
            had = self.snapshot[2]
            self.saver.start_backfill(whole, lambda: had, 10**9)
        self.live = whole
        self.head_phase = False
        self.snapshot = None
        self.commit_save()

    @precondition(lambda self: not self.head_phase)
    @rule(org=st.sampled_from(ORGS), dt=st.integers(0, 2), flag=st.integers(0, 6))
    def arrive(self, org, dt, flag):
        self.t += dt
        c = QueuedChart(f"c{self.seq}", org, "w", self.t, self.seq, priority=flag == 0, paused=flag == 1)
        self.seq += 1
        self.ref.add(c)
        self.live.add(c)
        self.commit_save()

    @precondition(lambda self: not self.head_phase and len(self.ref))
    @rule(data=st.data(), action=st.sampled_from(["pause", "resume", "remove"]))
    def chart_action(self, data, action):
        cid = data.draw(st.sampled_from(sorted(self.ref.queued_ids())))
        assert getattr(self.ref, action)(cid) == getattr(self.live, action)(cid)
        self.commit_save()

    @rule()
    def kill_9(self):
        """A new scheduler reads back what was committed: the order must be ``ref``'s."""
        if self.saved is None:  # nothing committed: a first start again
            restored = whole_of([replace(c) for c in self.charts if c.id in self.ref.queued_ids()], self.Q)
            assert not self.running
        else:
            queued = [replace(self.ref.get(cid), round=self.rows.get(cid))
                      for cid in sorted(self.ref.queued_ids(), key=lambda c: int(c[1:]))]
            restored = self.Q.restore(queued, state=self.saved, budget=3, weights=WEIGHTS, costs=COSTS)
        assert restored.order() == self.ref.order()
        assert {cid: restored.round_of(cid) for cid in self.ref.queued_ids()} == \
               {cid: self.ref.round_of(cid) for cid in self.ref.queued_ids()}
        self.live = restored
        self.head_phase = False
        self.whole = self.snapshot = None
        self.saver = RoundSaver(self.saved)
        self.saver.start_backfill(restored, lambda: {c for c, r in self.rows.items() if r is not None}, 1)
        self.commit_save()

    @rule(k=st.integers(1, 4))
    def kill_9_then_head_first(self, k):
        """kill -9 at any moment (amid the backfill too), and the new scheduler starts from
        the head of what was committed (``head_of_backlog``: each org's first ``k`` charts
        with a round and ``k`` without, the orgs with more ``truncated``), as the engine
        does; the whole backlog, read in the same snapshot, then takes over."""
        if self.saved is None:
            return self.kill_9()
        queued = [replace(self.ref.get(cid), round=self.rows.get(cid))
                  for cid in sorted(self.ref.queued_ids(), key=lambda c: int(c[1:]))]
        head, horizon, truncated = head_of_backlog(queued, k)
        try:
            live = self.Q.restore(head, state=self.saved, budget=3, weights=WEIGHTS, costs=COSTS, horizon=horizon,
                                  truncated=truncated)
        except NeedsWholeBacklog:
            return self.kill_9()
        if not live.partial:
            return self.kill_9()  # the head was the whole backlog
        self.live, self.head_phase, self.whole, self.logged = live, True, None, 0
        self.truncated = truncated
        event("a restart from the head, " + ("orgs cut short" if truncated else "a horizon only"))
        self.snapshot = (queued, self.saved, {c for c, r in self.rows.items() if r is not None})
        self.saver = RoundSaver(self.saved)
        if truncated:  # the engine's _start_from_head
            self.saver.start_backfill(live, tuple, 1, keep_written=True)
        self.commit_save()

    @invariant()
    def the_dispatchable_head_is_the_whole_order(self):
        if getattr(self, "head_phase", False):
            h = self.live.horizon
            below = [k[4] for k in self.live.keys() if k[:4] <= h]
            assert below == self.ref.order()[:len(below)]


FirstStartMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=30, deadline=None)
TestFirstStartMachine = FirstStartMachine.TestCase



def test_the_whole_backlogs_backfill_goes_on_after_what_the_head_wrote():
    """The head writes 8 charts' rounds; the whole backlog's first chunk (2 charts) must not
    put an org's saved cursor back behind them, or a kill -9 then re-ranks the rest lower."""
    m = FirstStartMachine()
    m.load(flags=[("o1", 1, 5)] * 12 + [("o2", 1, 5)] * 12, k=3)
    assert m.head_phase
    m.chunk(8)
    assert len(m.rows) == 6  # the head's 3 charts of each org
    m.build_whole()
    m.take_over()
    m.chunk(2)
    m.kill_9()  # restores ref's order and rounds


def test_what_the_head_writes_while_the_whole_is_built_is_caught_up_at_the_take_over():
    """The whole's backfill is prepared from what the head had written; the head then
    writes more (a chunk) before the take-over. Adopting the prepared backfill must extend
    each org past that, or its next save puts the cursor back behind it."""
    m = FirstStartMachine()
    m.load(flags=[("o1", 1, 5)] * 12 + [("o2", 1, 5)] * 12, k=3)
    m.build_whole()
    m.chunk(8)
    m.take_over()
    m.chunk(1)
    m.kill_9()


def test_rank_key_of_a_moved_chart_comes_first():
    """The head reads moved-to-front charts whole: they rank before every other (org_rank_key)."""
    assert org_rank_key(5.0, 1, 9.0) < org_rank_key(1.0, 0, None)
