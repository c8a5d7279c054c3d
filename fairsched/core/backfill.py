"""Writing a large backlog's rounds a chunk at a time, each chunk a prefix of every org.

A scheduler that finds many queued charts without a saved round (a first start, or a
large import while no scheduler ran) gives them rounds by the arrival rule. Writing all of
them in one transaction held the database for minutes at a million charts (on
PostgreSQL, 6 minutes), and dispatch with it. This module says what to write so that the
writes can come a chunk at a time, with dispatch going on between them, and a restart
after any of them still restores exactly the same order.

Why a prefix is enough (docs/architecture.md, "The first start's rounds, a chunk at a
time"): :meth:`FairQueue.restore` places an org's charts without a saved round by the
arrival rule, in rank order, after the org's saved ``(last, used)``. If what is written of
an org is always the first charts of its rank order, with its saved ``(last, used)`` the
cursor just after them, the arrival rule gives the rest the rounds they hold now: an
org's arrivals take consecutive rounds, and a queued chart's round is never below the
head. So each chunk writes, per org, the next charts of its order and the cursor after
them, in one transaction.

What may not stay unwritten: a chart that leaves the order (dispatched or removed) would
leave a hole that the rest of its org would close on a restart, so the prefix is first
extended to it (:meth:`RoundBackfill.extend`). An org whose unwritten charts change in
any other way (paused, prioritised, re-ranked) leaves the backfill (:meth:`drop`): its
remaining charts are written at once with their rounds of the moment, as before.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fairsched.core.types import OrgRounds, RoundState

if TYPE_CHECKING:
    from fairsched.core.queue import FairQueue

Save = tuple[RoundState, dict[str, int | None]]

__all__ = ["RoundBackfill", "RoundSaver"]


@dataclass(frozen=True, slots=True)
class _Entry:
    chart: str
    round: int
    last: int     # the org's cursor just after this chart: its highest round ...
    used: int     # ... and how many of its charts hold it


class RoundBackfill:
    """The charts still to write, per org in round order, and each org's written prefix.

    ``rounds``: chart id -> (org, round) for the charts to write (all of an org's charts
    that took a round by the arrival rule after its saved cursor). ``saved``: each org's
    saved ``(last, used)``, None for none. Nothing here does I/O: the scheduler writes
    what :meth:`next_chunk`, :meth:`extend` and :meth:`drop` hand it, with the cursors of
    :meth:`patch`, in one transaction each.
    """

    def __init__(self, rounds: Mapping[str, tuple[str, int]],
                 saved: Mapping[str, tuple[int | None, int]]) -> None:
        by_org: dict[str, list[tuple[int, str]]] = {}
        for cid, (org, r) in rounds.items():
            by_org.setdefault(org, []).append((r, cid))
        self._entries: dict[str, list[_Entry]] = {}
        self._index: dict[str, tuple[str, int]] = {}
        flat: list[tuple[int, tuple, str, int]] = []
        for org, charts in by_org.items():
            charts.sort(key=lambda rc: (rc[0], _id_key(rc[1])))
            last, used = saved.get(org, (None, 0))
            out = []
            for i, (r, cid) in enumerate(charts):
                if r == last:
                    used += 1
                else:
                    last, used = r, 1
                out.append(_Entry(cid, r, last, used))
                self._index[cid] = (org, i)
                flat.append((r, _id_key(cid), org, i))
            self._entries[org] = out
        flat.sort()
        self._flat = [(org, i) for _, _, org, i in flat]  # every chart, by round then id
        self._next = 0                                   # where the next chunk starts in _flat
        self._done: dict[str, int] = dict.fromkeys(self._entries, 0)  # each org's written prefix
        self._saved = {org: saved.get(org, (None, 0)) for org in self._entries}
        self._left = len(self._flat)

    # ---------------------------------------------------------------- queries
    def __len__(self) -> int:
        """Charts still to write."""
        return self._left

    def holds(self, org: str) -> bool:
        """``org`` still has charts to write: its saved cursor is :meth:`patch`'s."""
        return org in self._done

    def unwritten(self, chart_id: str) -> bool:
        """``chart_id`` is one of the charts still to write."""
        at = self._index.get(chart_id)
        return at is not None and at[0] in self._done and at[1] >= self._done[at[0]]

    def org_of(self, chart_id: str) -> str | None:
        at = self._index.get(chart_id)
        return at[0] if at is not None else None

    def round_of(self, chart_id: str) -> int | None:
        """The round the backfill writes for ``chart_id`` (None: not one of its charts)."""
        at = self._index.get(chart_id)
        return self._entries[at[0]][at[1]].round if at is not None else None

    def cursor(self, org: str) -> tuple[int | None, int]:
        """``org``'s ``(last, used)`` after its written prefix: what its saved state must say."""
        n = self._done[org]
        if n == 0:
            return self._saved[org]
        e = self._entries[org][n - 1]
        return e.last, e.used

    def patch(self, rounds: RoundState) -> RoundState:
        """``rounds`` (the queue's :meth:`~FairQueue.export_rounds`) with the cursor of each
        org still in the backfill: the state to save beside what is written so far."""
        if not self._done:
            return rounds
        orgs = dict(rounds.orgs)
        for org in self._done:
            s = orgs.get(org)
            if s is not None:
                last, used = self.cursor(org)
                orgs[org] = OrgRounds(last, used if last is not None else 0, s.in_head, s.weight)
        return RoundState(rounds.head, rounds.budget, orgs)

    # ----------------------------------------------------------------- moves
    def next_chunk(self, n: int) -> dict[str, int]:
        """The next ``n`` charts in round order (the head of the order first), as chart id
        -> round; each org's prefix now ends after its last one."""
        out: dict[str, int] = {}
        flat = self._flat
        while len(out) < n and self._next < len(flat):
            org, i = flat[self._next]
            self._next += 1
            if org in self._done and i >= self._done[org]:
                out.update(self._advance(org, i + 1))
        return out

    def extend(self, chart_ids: Iterable[str]) -> dict[str, int]:
        """Charts that left the order (dispatched or removed): each org's prefix is extended
        to include them. Returns what to write now, chart id -> round."""
        out: dict[str, int] = {}
        for cid in chart_ids:
            if self.unwritten(cid):
                org, i = self._index[cid]
                out.update(self._advance(org, i + 1))
        return out

    def drop(self, org: str) -> list[str]:
        """``org`` leaves the backfill; returns its charts still to write (the caller writes
        them with their rounds of the moment, and the org's real cursor)."""
        n = self._done.pop(org, None)
        if n is None:
            return []
        rest = [e.chart for e in self._entries[org][n:]]
        self._left -= len(rest)
        return rest

    def _advance(self, org: str, end: int) -> dict[str, int]:
        start = self._done[org]
        part = self._entries[org][start:end]
        self._left -= len(part)
        if end >= len(self._entries[org]):
            del self._done[org]
        else:
            self._done[org] = end
        return {e.chart: e.round for e in part}


class RoundSaver:
    """What the live scheduler writes of its queue's rounds, and when: the round state
    (:meth:`FairQueue.export_rounds`) and the charts whose round changed
    (:meth:`FairQueue.take_round_changes`), each save one transaction. After a load that
    gave many charts a round it runs a :class:`RoundBackfill` (:meth:`start_backfill`):
    an org the backfill holds is saved with the cursor after its written charts, and its
    arrivals wait until the backfill has written the rest of it.

    ``saved``: the state last written (None: never). No I/O: :meth:`next` says what to
    write, :meth:`written` that it was.
    """

    def __init__(self, saved: RoundState | None) -> None:
        self.saved = saved
        self.pending: dict[str, int | None] = {}
        self.backfill: RoundBackfill | None = None

    @property
    def backfilling(self) -> int:
        """Charts the backfill has still to write (0: none running)."""
        return len(self.backfill) if self.backfill is not None else 0

    def start_backfill(self, queue: "FairQueue", saved_rounds: Mapping[str, int | None], minimum: int) -> int:
        """After a load: if at least ``minimum`` charts took a round by the arrival rule
        (``saved_rounds``: each queued chart's saved round, None for none), write them a
        chunk at a time. An org with a chart whose saved round changed (re-ranked while no
        scheduler ran) is written whole at once. Returns how many the backfill writes."""
        self.backfill = None
        queue.gone_log = queue.touched_log = queue.reranked_log = None
        new = queue.take_round_changes()
        self.pending.update(new)
        if len(new) < minimum:
            return 0
        whole: set[str] = set()
        rounds: dict[str, tuple[str, int]] = {}
        for cid, r in new.items():
            org = queue.get(cid).org
            if r is None or saved_rounds.get(cid) is not None:
                whole.add(org)
            else:
                rounds[cid] = (org, r)
        rounds = {cid: v for cid, v in rounds.items() if v[0] not in whole}
        if len(rounds) < minimum:
            return 0
        cursors = {org: (o.last, o.used) for org, o in self.saved.orgs.items()} if self.saved else {}
        self.backfill = RoundBackfill(rounds, cursors)
        for cid in rounds:
            del self.pending[cid]
        queue.gone_log, queue.touched_log, queue.reranked_log = [], set(), set()
        return len(rounds)

    def chunk(self, n: int) -> None:
        """The backfill's next ``n`` charts (round order) join what the next save writes."""
        if self.backfill is not None:
            self.pending.update(self.backfill.next_chunk(n))

    def next(self, queue: "FairQueue") -> Save | None:
        """The round state and the chart rounds to write now, None if nothing changed
        since the last write."""
        new = queue.take_round_changes()
        self.pending.update(new)
        rounds = queue.export_rounds()
        changes = self.pending
        bf = self.backfill
        if bf is not None:
            self._follow(queue, bf, new)
            if len(bf):
                rounds = bf.patch(rounds)
                changes = {cid: r for cid, r in changes.items() if _writable(queue, bf, cid)}
            else:
                self.backfill = None
                queue.gone_log = queue.touched_log = queue.reranked_log = None
        if rounds == self.saved and not changes:
            return None
        return rounds, dict(changes)

    def written(self, save: Save | None) -> None:
        """``save`` (from :meth:`next`) is committed."""
        if save is None:
            return
        self.saved = save[0]
        pending = self.pending
        if len(save[1]) == len(pending):
            pending.clear()
            return
        for cid, r in save[1].items():
            if pending.get(cid, r) == r:
                pending.pop(cid, None)

    def _follow(self, queue: "FairQueue", bf: RoundBackfill, new: Mapping[str, int | None]) -> None:
        """What happened to the backfill's charts since the last save. An org re-ranked (a
        weight, cost or budget change, a resume, a move to the front), or one whose charts
        still to write changed otherwise than by leaving the order (paused, prioritised),
        leaves the backfill, written whole with its rounds of the moment. A chart that left
        the order extends its org's written charts to it (else a restart would close the
        hole it left), unless it was removed from its org's last round: ``remove`` gave
        that place back, which a written cursor cannot say, so its org is written whole."""
        touched, gone, reranked = queue.touched_log, queue.gone_log, queue.reranked_log
        queue.touched_log, queue.gone_log, queue.reranked_log = set(), [], set()
        drop = {org for org in reranked if bf.holds(org)}
        drop |= {org for cid in new if (org := bf.org_of(cid)) is not None and bf.holds(org)}
        drop |= {bf.org_of(cid) for cid in touched if bf.unwritten(cid)}
        drop |= {bf.org_of(cid) for cid, dispatched in gone
                 if not dispatched and bf.unwritten(cid) and bf.round_of(cid) == queue.last_round(bf.org_of(cid))}
        for org in drop - {None}:
            for cid in bf.drop(org):
                if cid in queue:
                    self.pending[cid] = queue.round_of(cid)
        self.pending.update(bf.extend(cid for cid, _ in gone))


def _writable(queue: "FairQueue", bf: RoundBackfill, cid: str) -> bool:
    """A pending round may be written now: one the backfill handed over, or one of an org
    the backfill does not hold (an arrival of an org it holds waits for it)."""
    if bf.org_of(cid) is not None:
        return True
    q = queue.get(cid)
    return q is None or not bf.holds(q.org)


def _id_key(cid: str) -> tuple[int, str]:
    return (int(cid), "") if cid.isdigit() else (0, cid)
