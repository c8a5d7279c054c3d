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
an org is always its charts up to some place in round order, with its saved ``(last,
used)`` the cursor just after them, the arrival rule gives the rest the rounds they hold
now: an org's arrivals take consecutive rounds, and a queued chart's round is never below
the head. So each chunk writes, per org, the next charts of its order and the cursor
after them, in one transaction.

What may not stay unwritten: a chart that leaves the order (dispatched or removed) would
leave a hole that the rest of its org would close on a restart, so the org's written part
is first extended through the end of its round (:meth:`RoundBackfill.extend`). From its
org's last round, that is all of the org, saved with its real cursor, which knows the
place ``remove`` gave back. An org whose charts change in any other way (re-ranked; an
unwritten one paused or prioritised) leaves the backfill (:meth:`RoundBackfill.drop`): its
remaining charts are written at once with their rounds of the moment, as before.

A first start that dispatches from the head of the backlog (``FairQueue.first_head``)
backfills the head's charts the same way; the whole backlog's backfill then goes on from
the cursors the head saved, leaving out what the head wrote
(``RoundSaver.start_backfill(keep_written=True)``): each org's written part is still a
prefix of its order.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Container, Mapping
from typing import Any

from scheduling.modes import Share
from scheduling.types import OrgRounds, RoundState

__all__ = ["RoundBackfill", "RoundSaver"]

Queue = Any
"""The live order, a :class:`scheduling.queue.FairQueue`: typed loosely, since the queue
package sits above this module and importing it here would draw a cycle between the two."""

Save = tuple[RoundState, dict[str, int | None]]


class RoundBackfill:
    """The charts still to write, per org in round order, and how far each org is written.

    ``rounds``: chart id -> round; ``org_of``: chart id -> org, for the charts to write
    (all of an org's charts that took a round by the arrival rule after its saved cursor).
    ``saved``: each org's saved ``(last, used)``. Nothing here does I/O: the scheduler
    writes what :meth:`next_chunk`, :meth:`extend` and :meth:`drop` hand it, with the
    cursors of :meth:`patch`, in one transaction each.
    """

    def __init__(self, rounds: Mapping[str, int], org_of: Mapping[str, str],
                 saved: Mapping[str, tuple[int | None, float]], shares: Mapping[str, float] | None = None,
                 head: int = 0) -> None:
        ids: dict[str, list[str]] = {}
        for cid in rounds:
            ids.setdefault(org_of[cid], []).append(cid)
        self._ids = ids
        self._rounds: dict[str, list[int]] = {}
        for org, charts in ids.items():
            # stable: inside a round, the order of ``rounds`` (any order will do under the
            # share "charts"; under "work" it must be the rank order, as prepare gives it)
            charts.sort(key=rounds.__getitem__)
            self._rounds[org] = [rounds[c] for c in charts]
        # share "work": each chart's part of its org's turn in its round (None: 1 each)
        self._shares = None if shares is None else {org: [shares[c] for c in charts] for org, charts in ids.items()}
        self._done: dict[str, int] = dict.fromkeys(ids, 0)  # each org's written prefix
        self._saved = {org: saved.get(org, (None, 0)) for org in ids}
        self._left = len(rounds)
        self._heap = [(r[0], org) for org, r in self._rounds.items()]  # (next round to write, org)
        heapq.heapify(self._heap)
        self._head = head  # the head the charts took their rounds from (and the last behind() saw)

    # ---------------------------------------------------------------- queries
    def __len__(self) -> int:
        """Charts still to write."""
        return self._left

    def holds(self, org: str) -> bool:
        """``org`` has charts still to write: its saved cursor is :meth:`patch`'s."""
        return org in self._done

    def next_round(self, org: str) -> int | None:
        """The round of ``org``'s next chart to write (None: it has none)."""
        n = self._done.get(org)
        return None if n is None else self._rounds[org][n]

    def to_write(self, org: str | None, cid: str, r: int | None) -> bool:
        """``cid``, a chart of ``org`` holding round ``r``, is still to write: its org's
        written part ends before it. Of a chart in a round the org's part has not reached,
        its membership is not checked (an arrival its org holds back counts too: it waits
        for the same end); at the round where the part ends, exactly. O(1), or O(the org's
        charts in that round)."""
        n = self._done.get(org) if org is not None else None
        if n is None or r is None:
            return False
        rounds = self._rounds[org]
        if r != rounds[n]:
            return rounds[n] < r <= rounds[-1]
        return cid in self._ids[org][n:bisect_right(rounds, r, lo=n)]

    def cursor(self, org: str) -> tuple[int | None, int]:
        """``org``'s ``(last, used)`` just after its written charts."""
        n = self._done[org]
        if n == 0:
            return self._saved[org]
        rounds = self._rounds[org]
        r = rounds[n - 1]
        first = bisect_left(rounds, r)
        used = n - first if self._shares is None else sum(self._shares[org][first:n])
        last, saved_used = self._saved[org]
        return r, used + (saved_used if last == r else 0)

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
                orgs[org] = OrgRounds(last, used if last is not None else 0, s.in_head, s.weight, s.in_round)
        return RoundState(rounds.head, rounds.budget, orgs, rounds.share, rounds.holds)

    def behind(self, head: int) -> list[str]:
        """Under the share "work": the orgs whose written part the head has passed (their
        next chart to write counts from a round below ``head``). :meth:`FairQueue.restore`
        would place such a chart afresh from ``head``, losing what its org had counted in
        that round (a chart that spans rounds carries it), so the caller writes each of
        them through its next round (:meth:`extend`). Under "charts" a chart never spans a
        round and nothing is behind. O(orgs held) when the head moved, else O(1)."""
        if self._shares is None or head <= self._head:
            return []
        out = []
        for org, n in self._done.items():
            if n == 0:  # counted from the saved cursor, or from the head the charts took
                last = self._saved[org][0]
                base = self._head if last is None or last < self._head else last
            else:
                base = self._rounds[org][n - 1]
            if base < head:
                out.append(org)
        self._head = head
        return out

    # ----------------------------------------------------------------- moves
    def next_chunk(self, n: int) -> dict[str, int]:
        """About ``n`` charts in round order (the head of the order first), as chart id ->
        round; each org's written part now ends after its last one."""
        out: dict[str, int] = {}
        heap = self._heap
        while len(out) < n and heap:
            r, org = heapq.heappop(heap)
            if self.next_round(org) != r:  # moved on by extend, or dropped: a stale entry
                if org in self._done:
                    heapq.heappush(heap, (self.next_round(org), org))
                continue
            start = self._done[org]
            end = min(bisect_right(self._rounds[org], r, lo=start), start + n - len(out))
            out.update(self._advance(org, end))
            if org in self._done:
                heapq.heappush(heap, (self.next_round(org), org))
        return out

    def extend(self, org: str, r: int) -> dict[str, int]:
        """A chart of ``org`` holding round ``r`` left the order: every chart of ``org`` up to
        the end of round ``r`` is written now (chart id -> round), with the cursor after it."""
        nxt = self.next_round(org)
        if nxt is None or r < nxt:
            return {}
        return self._advance(org, bisect_right(self._rounds[org], r, lo=self._done[org]))

    def drop(self, org: str) -> list[str]:
        """``org`` leaves the backfill; returns its charts still to write (the caller writes
        them with their rounds of the moment, and the org's real cursor)."""
        n = self._done.pop(org, None)
        if n is None:
            return []
        rest = self._ids[org][n:]
        self._left -= len(rest)
        return rest

    def _advance(self, org: str, end: int) -> dict[str, int]:
        start = self._done[org]
        ids, rounds = self._ids[org], self._rounds[org]
        out = dict(zip(ids[start:end], rounds[start:end]))
        self._left -= end - start
        if end >= len(ids):
            del self._done[org]
        else:
            self._done[org] = end
        return out


@dataclass(frozen=True, slots=True)
class PreparedBackfill:
    """What :meth:`RoundSaver.prepare` hands :meth:`RoundSaver.adopt`."""

    rest: dict[str, int | None]        # new rounds to write at once (orgs written whole)
    rounds: dict[str, int]             # the backfill's charts (empty: no backfill)
    backfill: RoundBackfill | None
    written: Mapping[str, int | None]  # what the saver had written when prepared


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
        self._waiting: dict[str, set[str]] = {}  # org -> its arrivals held back
        # Every chart round written since a start_backfill(keep_written=True), until the
        # next start_backfill (which goes on from them: module docstring, the head).
        self.written_rounds: dict[str, int | None] | None = None

    @property
    def backfilling(self) -> int:
        """Charts the backfill has still to write (0: none running)."""
        return len(self.backfill) if self.backfill is not None else 0

    def start_backfill(self, queue: Queue, had_round: Callable[[], Container[str]], minimum: int,
                       *, keep_written: bool = False) -> int:
        """After a load: if at least ``minimum`` charts took a round by the arrival rule,
        write them a chunk at a time. ``had_round()``: the queued charts that had a saved
        round (asked only then); an org with such a chart among the changes (re-ranked while
        no scheduler ran) is written whole at once. Returns how many the backfill writes.

        Charts written with the round they now hold since an earlier call with
        ``keep_written`` (a first start's head, see the module docstring) are not written
        again: the saved cursors are already after them. ``keep_written``: remember what
        is written from now on, for the next call. The same as :meth:`prepare` then
        :meth:`adopt`."""
        prepared = self.prepare(queue, had_round, minimum, dict(self.written_rounds or {}), self.saved)
        return self.adopt(queue, prepared, keep_written=keep_written)

    @staticmethod
    def prepare(queue: Queue, had_round: Callable[[], Container[str]], minimum: int,
                written: Mapping[str, int | None], saved: RoundState | None) -> "PreparedBackfill":
        """The O(backlog) part of :meth:`start_backfill`, for a thread while the queue is not
        yet live (a first start's whole backlog, built while the head dispatches): takes the
        queue's round changes, leaves out ``written`` (what the saver had written, with its
        ``saved`` state) and orders the rest. :meth:`adopt` then catches up with what was
        written since."""
        new = _not_written(queue.take_round_changes(), written)
        if len(new) < minimum:
            return PreparedBackfill(new, {}, None, written)
        org_of = {cid: queue.org_of(cid) for cid in new}
        had = had_round()
        whole = {org_of[cid] for cid, r in new.items() if r is None or cid in had}
        rounds = {cid: r for cid, r in new.items() if org_of[cid] not in whole}
        if len(rounds) < minimum:
            return PreparedBackfill(new, {}, None, written)
        cursors = {org: (o.last, o.used) for org, o in saved.orgs.items()} if saved else {}
        rest = {cid: r for cid, r in new.items() if cid not in rounds} if whole else {}
        shares = None
        if queue.share is Share.WORK:
            rounds, shares = _in_rank_order(queue, rounds)
        return PreparedBackfill(rest, rounds, RoundBackfill(rounds, org_of, cursors, shares, queue.head), written)

    def adopt(self, queue: Queue, prepared: "PreparedBackfill", *, keep_written: bool = False) -> int:
        """Run the backfill :meth:`prepare` made (O(what was written since), on the loop).
        Whatever this saver wrote after ``prepare`` took its snapshot (a dispatch's
        extension, a chunk, an org written whole) is a prefix of its org's order again: the
        org's written part is extended through the end of the highest round written, as a
        dispatch extends it. Returns how many the backfill writes."""
        since = {cid: r for cid, r in (self.written_rounds or {}).items()
                 if cid not in prepared.written or prepared.written[cid] != r}
        self.written_rounds = {} if keep_written else None
        self.backfill = None
        queue.gone_log = queue.touched_log = queue.reranked_log = None
        pending = self.pending
        pending.update(prepared.rest)
        bf, rounds = prepared.backfill, prepared.rounds
        if bf is None:
            return 0
        for cid in [c for c in pending if c in rounds]:
            del pending[cid]
        self.backfill = bf
        tops: dict[str, int] = {}
        for cid, r in since.items():
            if r is not None and cid in rounds:
                org = queue.org_of(cid)
                if org is not None:
                    tops[org] = max(tops.get(org, r), r)
        for org, r in tops.items():
            pending.update(bf.extend(org, r))
        queue.gone_log, queue.touched_log, queue.reranked_log = [], [], set()
        return len(rounds)

    def chunk(self, n: int) -> None:
        """The backfill's next ``n`` charts (round order) join what the next save writes."""
        if self.backfill is not None:
            self.pending.update(self.backfill.next_chunk(n))

    def next(self, queue: Queue) -> Save | None:
        """The round state and the chart rounds to write now, None if nothing changed
        since the last write."""
        new = queue.take_round_changes()
        bf = self.backfill
        if bf is None:
            self.pending.update(new)
        else:
            self._follow(queue, bf, new)
        rounds = queue.export_rounds()
        if self.backfill is not None:
            rounds = self.backfill.patch(rounds)
        if rounds == self.saved and not self.pending:
            return None
        return rounds, dict(self.pending)

    def written(self, save: Save | None) -> None:
        """``save`` (from :meth:`next`) is committed."""
        if save is None:
            return
        self.saved = save[0]
        if self.written_rounds is not None:
            self.written_rounds.update(save[1])
        pending = self.pending
        if pending == save[1]:
            pending.clear()
            return
        for cid, r in save[1].items():
            if pending.get(cid, r) == r:
                pending.pop(cid, None)

    def unwritten(self, save: Save, work: Mapping | None = None) -> tuple[Save, Mapping | None]:
        """``save`` (and ``work``, keyed by the same charts), made while another save was in
        flight, less the charts' rounds that save wrote: those no longer pending. The ones
        still pending are kept with the value ``save`` holds, even if a later change moved
        them: its round state needs them (the later save writes the new value)."""
        pending = self.pending
        changes = {cid: r for cid, r in save[1].items() if cid in pending}
        return (save[0], changes), ({cid: w for cid, w in work.items() if cid in changes} if work else None)

    def _follow(self, queue: Queue, bf: RoundBackfill, new: Mapping[str, int | None]) -> None:
        """What happened to the backfill's orgs since the last save (module docstring)."""
        touched, gone, reranked = queue.touched_log, queue.gone_log, queue.reranked_log
        queue.touched_log, queue.gone_log, queue.reranked_log = [], [], set()
        self._drop_moved(queue, bf, touched, reranked)
        for org, r in gone:
            if r is not None and bf.holds(org):
                self.pending.update(bf.extend(org, r))
        for org in bf.behind(queue.head):  # under "work": a restart would count it afresh
            self.pending.update(bf.extend(org, bf.next_round(org)))
        self._take_arrivals(queue, bf, new)
        if not len(bf):
            self.backfill = None
            queue.gone_log = queue.touched_log = queue.reranked_log = None

    def _drop_moved(self, queue: Queue, bf: RoundBackfill, touched: list, reranked: set[str]) -> None:
        """The orgs re-ranked, or with a chart paused or prioritised past what is written,
        leave the backfill: their queued charts are written whole, as they now are."""
        drop = {org for org in reranked if bf.holds(org)}
        drop.update(org for org, r in touched if r is not None and _unwritten(bf, org, r))
        for org in drop:
            for cid in bf.drop(org):
                if cid in queue:
                    self.pending[cid] = queue.round_of(cid)

    def _take_arrivals(self, queue: Queue, bf: RoundBackfill, new: Mapping[str, int | None]) -> None:
        """An arrival waits for its org's backfill (written after the org's backfilled
        charts); the others, and those whose org's backfill is over, are written now."""
        waiting = self._waiting
        for org in [o for o in waiting if not bf.holds(o)]:
            self.pending.update({cid: queue.round_of(cid) for cid in waiting.pop(org) if cid in queue})
        for cid, r in new.items():
            org = queue.org_of(cid)
            if org is not None and bf.holds(org):
                waiting.setdefault(org, set()).add(cid)
            else:
                self.pending[cid] = r


def _not_written(new: dict[str, int | None], written: Mapping[str, int | None]) -> dict[str, int | None]:
    """The round changes less those already written with the same round."""
    if not written:
        return new
    return {cid: r for cid, r in new.items() if cid not in written or written[cid] != r}


def _in_rank_order(queue: Queue, rounds: dict[str, int | None]) -> tuple[dict, dict]:
    """Under the share ``work`` a chart's share depends on the org's charts before it in
    its round (the first may carry work over from the round before): the rounds in the rank
    order the arrival rule placed them in, which RoundBackfill's sort by round keeps, and
    each chart's share."""
    ranked = {cid: rounds[cid] for cid in sorted(rounds, key=queue.rank_of)}
    return ranked, {cid: queue.share_of(cid) for cid in ranked}


def _unwritten(bf: RoundBackfill, org: str, r: int) -> bool:
    """A chart of ``org`` holding round ``r`` may not be written yet."""
    nxt = bf.next_round(org)
    return nxt is not None and r >= nxt
