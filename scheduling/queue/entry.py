"""The queue's internal record of a queued chart, and the stand-in for round tracking."""
from __future__ import annotations

from ..types import QueuedChart


class _Untracked:
    """Stands in for the set of changed rounds when nobody persists them (the simulator,
    a plan): adding and discarding cost a no-op call, nothing is kept."""

    __slots__ = ()

    def add(self, _: str) -> None:
        pass

    def discard(self, _: str) -> None:
        pass


_UNTRACKED = _Untracked()
_PAIRS: dict[tuple, tuple] = {}  # (org, workflow) pairs, shared by every entry (memory at 1M charts)


class _Entry:
    """Mutable internal record of a queued chart (never handed out)."""

    __slots__ = ("id", "org", "workflow", "pair", "created_at", "seq", "priority",
                 "prioritized_at", "paused", "front_at", "round", "key", "state", "cost", "est", "share")

    def __init__(self, c: QueuedChart) -> None:
        self.id = c.id
        self.org = c.org
        self.workflow = c.workflow
        pair = (c.org, c.workflow)
        self.pair = _PAIRS.setdefault(pair, pair)  # one tuple per (org, workflow), not per chart
        self.created_at = c.created_at
        self.seq = c.seq
        self.priority = c.priority
        self.prioritized_at = c.prioritized_at
        self.paused = c.paused
        self.front_at = c.front_at
        self.round: int | None = None
        self.key: tuple | None = None
        self.state = ""
        self.cost = 1  # its pair's cost when last placed (every cost change re-places)
        self.est = c.est_s  # share "work": its estimate at arrival (set when it enters)
        self.share = 1 if c.share is None else c.share  # its part of its org's turn in its round

    def chart(self) -> QueuedChart:
        return QueuedChart(self.id, self.org, self.workflow, self.created_at, self.seq,
                           self.priority, self.prioritized_at, self.paused, self.front_at,
                           self.round, self.est, self.share if self.est is not None else None)
