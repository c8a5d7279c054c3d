"""One dispatch, in three parts (the live loop, :meth:`Dispatcher.dispatch`, runs them):

1. **plan**: the head of the fair order that fits the free budget
   (:meth:`LiveState.to_start`), checked against the rows just read: a row that moved
   meanwhile is applied first and the plan made again (:func:`moved`). :class:`Plan`
   also keeps each chart's place and round for the log line.
2. **start**: the Temporal starts, each judged by :mod:`fairsched.engine.starts`;
   :class:`Starts` collects the answers (started, already closed, refused for good,
   to retry).
3. **commit**: the charts that started leave the order and hold their cost
   (:meth:`LiveState.commit_dispatch`), their rows move queued -> running by
   compare-and-set, and each is watched, recorded or followed.

This module holds the pure pieces: no I/O, no clock.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from fairsched.engine.db import StartRow
from fairsched.engine.state import QUEUED, LiveState
from fairsched.engine.rows import ChartRow
from fairsched.temporal.client import Outcome


def moved(state: LiveState, planned: list[str], rows: dict[int, StartRow]) -> list[tuple[int, ChartRow | None]]:
    """The planned charts whose row no longer agrees with memory (gone, no longer queued,
    paused, priority, org or workflow changed): (chart id, row now) to apply before planning again."""
    out = []
    for cid in planned:
        s = rows.get(int(cid))
        q = state.queue.get(cid)
        if s is None or s.row.state != QUEUED or s.row.paused != q.paused or s.row.priority != q.priority \
                or s.row.org != int(q.org) or s.row.workflow != q.workflow:
            out.append((int(cid), s.row if s else None))
    return out


@dataclass
class Plan:
    """What one dispatch starts: the head of the order, in order, and the rows read for it."""

    charts: list[str]
    rows: dict[int, StartRow]
    before: dict[str, tuple[int | None, int | None]]  # chart -> (place, round) before the dispatch
    free_before: int

    @classmethod
    def of(cls, state: LiveState, planned: list[str], rows: dict[int, StartRow]) -> "Plan":
        before = {cid: (state.queue.position(cid), state.queue.round_of(cid)) for cid in planned}
        return cls(planned, rows, before, state.free)


@dataclass
class Starts:
    """How the starts of one plan went."""

    run_ids: dict[str, str] = field(default_factory=dict)      # chart -> run id: started (or found)
    closed: dict[int, Outcome] = field(default_factory=dict)   # its workflow had already closed
    refused: dict[str, str] = field(default_factory=dict)      # chart -> its error: fail it, it can never start
    retry: list[str] = field(default_factory=list)             # failed, may start later: back dispatch off
    # seconds: the tick's steps before the dispatch, its plan and read, its starts on Temporal
    took: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def started(self, at: float) -> dict[str, tuple[str, float]]:
        """chart -> (run id, start time), for :meth:`LiveState.commit_dispatch`."""
        return {cid: (run_id, at) for cid, run_id in self.run_ids.items()}
