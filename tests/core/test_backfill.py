"""The first start's rounds written a chunk at a time (scheduling.backfill): a restart
after any chunk, and after anything the live queue did between chunks, restores exactly
the order, the rounds and the round state of a queue that never restarted."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import initialize, invariant, rule

from scheduling import OrgRounds, QueuedChart, RoundBackfill, RoundSaver, RoundState
from scheduling.queue import FairQueue
from tests.core.twins import ORGS, TwinQueues, WorkFairQueue


class BackfillMachine(TwinQueues):
    """``live`` is saved by a :class:`RoundSaver` into ``rows`` and ``saved`` (the
    database), its backfill a chunk at a time; a restart restores it from them and starts
    the backfill again for what is left. ``ref`` never restarts. Every decision agrees.
    (Saving each org's real cursor beside a partial write fails at once; so does ignoring
    a dispatched or removed chart that was not yet written, or a paused one.)"""

    def __init__(self):
        super().__init__()
        self.weights = {"o1": 2, "o2": 1, "o3": 3}
        self.costs = {("o1", "big"): 2}
        self.running: dict[str, int] = {}
        self.rows: dict[str, int | None] = {}  # each chart's saved round
        self.saved: RoundState | None = None
        self.seq = 0
        self.t = 0.0
        self.restarts = 0

    def new_chart(self, org, wf="w", priority=False, paused=False) -> QueuedChart:
        c = QueuedChart(f"c{self.seq}", org, wf, self.t, self.seq, priority=priority, paused=paused)
        self.seq += 1
        return c

    @initialize(orgs=st.lists(st.sampled_from(ORGS), min_size=5, max_size=60),
                flags=st.lists(st.integers(0, 9), min_size=60, max_size=60),
                budget=st.integers(1, 4), first=st.integers(0, 20))
    def load(self, orgs, flags, budget, first):
        """A backlog loaded with no round saved (a first start) or with the first ``first``
        charts saved by an earlier scheduler (the rest arrived while none ran)."""
        charts = []
        for org, f in zip(orgs, flags):
            self.t += f % 2
            charts.append(self.new_chart(org, "big" if f == 3 else "w", priority=f == 0, paused=f == 1))
        self.budget = budget
        self.ref = self.Q(budget=budget, weights=self.weights, costs=self.costs)
        earlier = self.Q(budget=budget, weights=self.weights, costs=self.costs, track_rounds=True)
        for c in charts[:first]:
            self.ref.add(c)
            earlier.add(c)
        started = {c.id for c in self.ref.dispatch(budget)}
        earlier.dispatch(budget)
        self.running = {cid: 1 for cid in started}
        if first:
            self.saved = earlier.export_rounds()
            self.rows = earlier.take_round_changes()
        for c in charts[first:]:
            self.ref.add(c)
        # a saved chart is read back with what was saved with its round (under "work": its
        # estimate at arrival and its share)
        kept = {cid: earlier.get(cid) for cid in self.rows if cid in earlier}
        backlog = [replace(kept.get(c.id, c), round=self.rows.get(c.id)) for c in charts if c.id not in started]
        if self.saved is None:
            self.live = self.Q.from_backlog(backlog, budget=budget, weights=self.weights, costs=self.costs,
                                               track_rounds=True)
        else:
            self.live = self.Q.restore(backlog, state=self.saved, budget=budget, weights=self.weights,
                                          costs=self.costs)
        self.start_saver()

    def start_saver(self):
        self.saver = RoundSaver(self.saved)
        self.saver.start_backfill(self.live, lambda: {c for c, r in self.rows.items() if r is not None}, minimum=1)

    # ------------------------------------------------------------- the scheduler
    def changed(self):
        self.save()

    @rule()
    def save(self):
        """One transaction: what the saver hands over (a tick's save, or a dispatch's)."""
        save = self.saver.next(self.live)
        if save is not None:
            self.saved = save[0]
            self.rows.update(save[1])
            self.saver.written(save)

    @rule(n=st.integers(1, 12))
    def chunk(self, n):
        self.saver.chunk(n)
        self.save()

    @rule()
    def restart(self):
        """kill -9 right after a save; a new scheduler reads the rows back."""
        self.save()
        self.live = self.Q.restore(self.read_back(self.rows), state=self.saved, budget=self.live.budget,
                                      weights=self.live.weights, costs=self.live.costs)
        self.start_saver()
        self.restarts += 1

    # ------------------------------------------------------- what happens meanwhile
    @rule(org=st.sampled_from(ORGS), dt=st.integers(0, 2), flag=st.integers(0, 6))
    def arrive(self, org, dt, flag):
        self.t += dt
        self.both("add", self.new_chart(org, priority=flag == 0, paused=flag == 1))
        self.save()

    @rule(org=st.sampled_from(ORGS), w=st.integers(0, 3))
    def set_weight(self, org, w):
        self.both("set_weight", org, w)
        self.save()

    @invariant()
    def a_chart_still_to_write_is_not_written(self):
        """What the first ETAs' writer leaves to the backfill (``to_write``) is a chart whose
        round no save has written yet: the chunk that writes it carries its first ETA."""
        bf = self.saver.backfill if hasattr(self, "saver") else None
        if bf is None:
            return
        for cid in self.live.order():
            r = self.live.round_of(cid)
            if bf.to_write(self.live.org_of(cid), cid, r):
                assert self.rows.get(cid, "unwritten") != r, (cid, r)


BackfillMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestBackfillMachine = BackfillMachine.TestCase


class BackfillMachineWork(BackfillMachine):
    """The same chunked writes under the share "work" (a cursor counts budget-seconds)."""

    Q = WorkFairQueue


BackfillMachineWork.TestCase.settings = BackfillMachine.TestCase.settings
TestBackfillMachineWork = BackfillMachineWork.TestCase


def test_each_chunk_is_a_prefix_of_every_org_in_round_order_with_its_cursor():
    """Org A (weight 2) holds rounds 0 0 1 1 2, org B (weight 1) rounds 0 1 2; the backfill
    writes the head of the order first, and each org's saved cursor is the one just after
    what is written of it."""
    rounds = {"a0": 0, "a1": 0, "a2": 1, "a3": 1, "a4": 2, "b0": 0, "b1": 1, "b2": 2}
    bf = RoundBackfill(rounds, {c: c[0].upper() for c in rounds}, {})
    assert bf.next_chunk(3) == {"a0": 0, "a1": 0, "b0": 0}
    assert (bf.cursor("A"), bf.cursor("B")) == ((0, 2), (0, 1))
    assert bf.next_chunk(3) == {"a2": 1, "a3": 1, "b1": 1}
    assert (bf.cursor("A"), bf.cursor("B")) == ((1, 2), (1, 1))
    state = RoundState(0, 3, {"A": OrgRounds(2, 1, 0, 2), "B": OrgRounds(2, 1, 0, 1)})
    assert bf.patch(state).orgs == {"A": OrgRounds(1, 2, 0, 2), "B": OrgRounds(1, 1, 0, 1)}
    # b2 (round 2) is dispatched before its chunk: B's written part reaches it, and B is done
    assert bf.extend("B", 2) == {"b2": 2} and not bf.holds("B")
    assert bf.patch(state).orgs["B"] == OrgRounds(2, 1, 0, 1)  # the real cursor again
    assert bf.next_chunk(10) == {"a4": 2} and len(bf) == 0


def test_a_chart_is_still_to_write_until_its_orgs_written_part_passes_it():
    """Org A (weight 2) holds rounds 0 0 1 1; a chunk writes a0 and a1 (round 0) and b0. Then
    a2 and a3 are still to write, a1 and b0 are not; nor is a chart of a round A's charts do
    not reach (an arrival written when its org's backfill is over), nor one of no round."""
    rounds = {"a0": 0, "a1": 0, "a2": 1, "a3": 1, "b0": 0}
    bf = RoundBackfill(rounds, {c: c[0].upper() for c in rounds}, {})
    assert all(bf.to_write(c[0].upper(), c, r) for c, r in rounds.items())
    assert bf.next_chunk(3) == {"a0": 0, "a1": 0, "b0": 0}
    assert [c for c, r in rounds.items() if bf.to_write(c[0].upper(), c, r)] == ["a2", "a3"]
    assert not bf.to_write("A", "a9", 5) and not bf.to_write("A", "a2", None) and not bf.to_write(None, "x", 1)
    assert bf.next_chunk(1) == {"a2": 1}
    assert bf.to_write("A", "a3", 1) and not bf.to_write("A", "a2", 1)  # inside round 1: exactly


def test_a_saved_cursor_is_where_the_backfill_goes_on_from():
    """An earlier scheduler saved A at round 4 with one of its two places taken: A's
    charts without a round continue there."""
    bf = RoundBackfill({"x": 4, "y": 5, "z": 5}, dict.fromkeys("xyz", "A"), {"A": (4, 1)})
    assert bf.cursor("A") == (4, 1)
    assert bf.next_chunk(1) == {"x": 4} and bf.cursor("A") == (4, 2)
    assert bf.next_chunk(1) == {"y": 5} and bf.cursor("A") == (5, 1)


def test_a_paused_chart_not_yet_written_has_its_org_written_whole():
    """Org A (weight 1): a0..a3 hold rounds 0..3, and only a0 is written when a2 is paused.
    a2 keeps round 2 while paused; a restart would give it none and move a3 up to round 2.
    So A leaves the backfill and is written whole: a3 keeps round 3 after the restart."""
    charts = [QueuedChart(f"a{i}", "A", "w", float(i), i) for i in range(4)]
    live = FairQueue.from_backlog(charts, budget=5, weights={"A": 1}, track_rounds=True)
    saver = RoundSaver(None)
    assert saver.start_backfill(live, set, minimum=1) == 4
    saver.chunk(1)
    rows: dict[str, int | None] = {}

    def save():
        got = saver.next(live)
        rows.update(got[1])
        saver.written(got)
        return got[0]

    save()
    assert rows == {"a0": 0}
    live.pause("a2")
    state = save()
    assert not saver.backfilling and rows == {"a0": 0, "a1": 1, "a2": 2, "a3": 3}
    again = FairQueue.restore([replace(c, round=rows.get(c.id), paused=c.id == "a2") for c in charts],
                              state=state, budget=5, weights={"A": 1})
    assert [again.round_of(c) for c in ("a1", "a2", "a3")] == [1, 2, 3]


def _work_backlog(n):
    """Org o2 (weight 1) with ``n`` charts of 300 s under "work" (virtual tags, a round a
    tick): x0 round 0 (afresh at the head, its start), finishing at 300; x1 at the midpoint
    450 (its share 150, the part of its finish 600 past its round); x2 750 (share 150)..."""
    charts = [QueuedChart(f"x{i}", "o2", "w", float(i), i) for i in range(n)]
    q = WorkFairQueue.from_backlog(charts, budget=1, weights={"o2": 1}, track_rounds=True)
    assert [(q.round_of(c.id), q.share_of(c.id)) for c in charts[:3]] == [(0, 300), (450, 150), (750, 150)]
    return charts, q


def _save(saver, queue, rows):
    got = saver.next(queue)
    rows.update(got[1])
    saver.written(got)
    return got[0]


def test_under_work_a_chunk_is_a_prefix_in_rank_order_inside_a_round():
    """A chunk of two writes x0 and x1 (the rank order), with the cursor after x1: its round
    and the part of its finish past it."""
    charts, live = _work_backlog(4)
    saver = RoundSaver(None)
    saver.start_backfill(live, set, minimum=1)
    saver.chunk(2)
    rows: dict[str, int | None] = {}
    state = _save(saver, live, rows)
    assert rows == {"x0": 0, "x1": 450} and state.orgs["o2"].last == 450 and state.orgs["o2"].used == 150


def test_under_work_the_head_passing_a_written_part_writes_the_next_round():
    """Org o1 (weight 1) has y0 (round 0) and y1 (round 450), older than o2's: dispatching
    y0, x0 and y1 moves the head to round 450, past o2's written part (x0). A restart would
    count x1 afresh from the head (its start 450: share 300, not 150), so x1's round is
    written too."""
    ys = [QueuedChart(f"y{i}", "o1", "w", -2.0 + i, 100 + i) for i in range(2)]
    xs = [QueuedChart(f"x{i}", "o2", "w", float(i), i) for i in range(3)]
    weights = {"o1": 1, "o2": 1}
    live = WorkFairQueue.from_backlog(ys + xs, budget=3, weights=weights, track_rounds=True)
    saver = RoundSaver(None)
    saver.start_backfill(live, set, minimum=1)
    rows: dict[str, int | None] = {}
    assert [c.id for c in live.dispatch(3)] == ["y0", "x0", "y1"] and live.head == 450
    state = _save(saver, live, rows)
    assert rows["x1"] == 450
    again = WorkFairQueue.restore([replace(live.get(c.id), round=rows.get(c.id)) for c in xs[1:]],
                                  state=state, budget=3, weights=weights)
    assert [(again.round_of(c), again.share_of(c)) for c in ("x1", "x2")] == [(450, 150), (750, 150)]
    assert again.export_rounds() == live.export_rounds()


def test_a_save_landing_keeps_a_round_changed_since_it_was_made_and_a_chained_save_writes_it():
    """Saves chained after one in flight: chart a's round moved (1 -> 2) after save 1 was
    made and before save 2. Save 1 landing forgets only what it wrote as it still is
    (a whole-pending shortcut once cleared a's new round); save 2, made before save 1
    landed, keeps a (still pending) and drops b (written by save 1)."""
    state = RoundState(0, 1, {})
    saver = RoundSaver(None)
    saver.pending.update({"a": 1, "b": 5})
    first = (state, dict(saver.pending))
    saver.pending["a"] = 2
    second = (state, dict(saver.pending))
    saver.written(first)
    assert saver.pending == {"a": 2}
    (_, changes), work = saver.unwritten(second, {"a": (60.0, 1.0), "b": (30.0, 1.0)})
    assert changes == {"a": 2} and work == {"a": (60.0, 1.0)}
    saver.written((state, changes))
    assert saver.pending == {}
