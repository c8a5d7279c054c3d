"""A Hypothesis state machine over two queues that must agree: ``ref`` never restarts,
``live`` is saved and restored (tests/core/test_properties.py: ``RestartMachine``;
tests/core/test_backfill.py: ``BackfillMachine``). The operations both see and the
invariant live here once; each machine adds how it saves and restarts, and
:meth:`TwinQueues.changed` (what follows each operation)."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from scheduling import Durations
from scheduling.queue import FairQueue

ORGS = ("o1", "o2", "o3")
# share "work": estimates that differ by workflow and a quantum smaller than the big
# charts' work, so charts share a turn and span several (tests/core/test_policies.py)
WORK_ESTIMATE = Durations({("o1", "big"): 900.0, (None, "big"): 700.0, (None, "w"): 300.0})


class WorkFairQueue(FairQueue):
    """A FairQueue under the share "work" (quantum 450 s), for the state machines."""

    def __init__(self, **kw):
        kw.setdefault("share", "work")
        kw.setdefault("quantum_s", 450.0)
        kw.setdefault("estimate", WORK_ESTIMATE)
        super().__init__(**kw)


class TwinQueues(RuleBasedStateMachine):
    Q = FairQueue  # the queue class; WorkFairQueue runs the same machine under "work"
    ref: object
    live: object
    running: dict[str, int]
    t: float

    def changed(self) -> None:
        """After each operation of both queues (the backfill machine saves here)."""

    def both(self, name, *args):
        a = getattr(self.ref, name)(*args)
        b = getattr(self.live, name)(*args)
        assert a == b
        return a

    def queued_ids(self):
        return sorted(self.ref.queued_ids())

    def read_back(self, rounds: dict[str, int | None]) -> list:
        """``live``'s queued charts as a restarted scheduler reads them: each with its saved round."""
        return [replace(self.live.get(cid), round=rounds.get(cid))
                for cid in sorted(self.live.queued_ids(), key=lambda c: int(c[1:]))]

    @rule()
    def dispatch(self):
        free = self.ref.budget - sum(self.running.values())
        for c in self.both("dispatch", free):
            self.running[c.id] = self.ref.cost_of(c.org, c.workflow)
        self.changed()

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def finish(self, data):
        del self.running[data.draw(st.sampled_from(sorted(self.running)))]

    @precondition(lambda self: len(self.ref))
    @rule(data=st.data(), action=st.sampled_from(
        ["pause", "resume", "prioritize", "unprioritize", "remove", "move_to_front"]))
    def chart_action(self, data, action):
        cid = data.draw(st.sampled_from(self.queued_ids()))
        if action in ("prioritize", "move_to_front"):
            self.both(action, cid, self.t)
        else:
            self.both(action, cid)
        self.changed()

    @rule(b=st.integers(0, 5))
    def set_budget(self, b):
        self.both("set_budget", b)
        self.changed()

    @invariant()
    def every_decision_agrees(self):
        ref, live = self.ref, self.live
        assert live.order() == ref.order()
        assert live.head == ref.head
        assert (live.held, live.paused, live.blocked) == (ref.held, ref.paused, ref.blocked)
        assert {c: live.round_of(c) for c in ref.queued_ids()} == {c: ref.round_of(c) for c in ref.queued_ids()}
        assert live.export_rounds() == ref.export_rounds()
        free = ref.budget - sum(self.running.values())
        assert live.peek(free) == ref.peek(free)


# dispatch "backfill": o3's short charts (bound 150 s) fit in most holes before a wide chart
BACKFILL_ESTIMATE = Durations({**WORK_ESTIMATE.averages, ("o3", "w"): 100.0})


class BackfillFairQueue(FairQueue):
    """A FairQueue under ``dispatch = "backfill"`` (share "charts"), reserving only the
    first 4 charts of the order (the rest take the strict walk), for the state machines."""

    def __init__(self, **kw):
        kw.setdefault("dispatch", "backfill")
        kw.setdefault("estimate", BACKFILL_ESTIMATE)
        kw.setdefault("depth", 4)
        super().__init__(**kw)


class BackfillWorkFairQueue(BackfillFairQueue, WorkFairQueue):
    """Backfill under the share "work"."""
