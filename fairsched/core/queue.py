"""The live fair order: persistent weighted round-robin (docs/scheduling.md).

:class:`FairQueue` is what the live scheduler keeps in memory for hours and
what the simulator drives on a simulated clock. It owns the queued charts
only: the caller tracks running charts and passes the free budget to
:meth:`FairQueue.dispatch`, and passes ``now`` and the running charts to
:meth:`FairQueue.etas`.

Complexity (n queued charts, k of one org, B the budget):

- ``add`` (arrival), ``remove``, ``pause``, ``prioritize``: O(log n)
- ``dispatch`` from the head: O(log n) per chart started
- re-rank of one org (``set_weight``, ``resume``, ``unprioritize``,
  ``set_cost``, ``move_to_front``): O(k log n)
- ``set_budget``: re-ranks every org, O(n log n)
- ``etas`` (a full ETA pass): O(n log B)
- ``position``: O(n / 512 + log n); ``held``/``paused``/``blocked``: O(h log h)
  over those charts only.
"""
from __future__ import annotations

import math
from itertools import chain, islice, takewhile
from operator import attrgetter, itemgetter
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from .keys import TIER_NORMAL, TIER_PRIORITY, fifo_key, normal_key, org_rank_key, priority_key, queue_key
from .plan import collect_etas, gc_paused, initial_lanes, lane_count, running_clear, unplanned_clear
from .rules import BLOCKED, HELD, ORDERED, PAUSED, arrival_round, classify, head_of_line, lane_pass
from .sortedkeys import SortedKeys
from .types import Durations, Eta, EtaReport, OrgRounds, Plan, QueuedChart, RoundState, RunningChart

_payload = itemgetter(5)
_kid = itemgetter(4)
_kpair = itemgetter(6)
_pair = attrgetter("pair")
_ecost = attrgetter("cost")
_org = attrgetter("org")
_seq_id = attrgetter("seq", "id")

POLICIES = ("wrr", "fifo")


def _costs_in_order(sublists: list[list[tuple]], free: int) -> Iterator[int]:
    """The cost of each chart of the order (its keys' ``sublists``), lazily from the
    head, for the head-of-line stop within ``free``. Every cost is at least 1, so at
    most ``free`` charts start: when the first sublist is longer, it holds the stop."""
    if sublists and free < len(sublists[0]):
        return map(_ecost, map(_payload, sublists[0]))
    return map(_ecost, map(_payload, chain.from_iterable(sublists)))


def head_of_backlog(queued: Iterable[QueuedChart], k: int) -> tuple[list[QueuedChart], tuple | None]:
    """The head of a saved order, what a restart loads first: every priority chart, every
    chart without a round, and of each org the ``k`` first charts with a round by
    ``(round, created_at, seq)`` (the normal key). With them, the horizon: the smallest
    normal key of an org's ``k``-th chart (its later charts may sort after it), None if
    no org had ``k`` (the head is the whole backlog). The database reads the same rows
    with one indexed query per org (``fairsched.engine.db.read_head``)."""
    head: list[QueuedChart] = []
    ranked: dict[str, list[QueuedChart]] = {}
    for c in queued:
        if c.priority or c.round is None:
            head.append(c)
        else:
            ranked.setdefault(c.org, []).append(c)
    bounds = []
    for charts in ranked.values():
        charts.sort(key=lambda c: (c.round, c.created_at, c.seq))
        head.extend(charts[:k])
        if len(charts) >= k:
            c = charts[k - 1]
            bounds.append(normal_key(c.round, c.created_at, c.seq))
    return head, min(bounds) if bounds else None


def first_head_of_backlog(queued: Iterable[QueuedChart], k: int) -> tuple[list[QueuedChart], set[str]]:
    """A first start's head (no round saved), what :meth:`FairQueue.first_head` takes:
    every priority chart, every chart moved to the front, and of each org its ``k`` first
    others by ``(created_at, seq)``; with them, the orgs that have more. Together the
    first charts of each org's rank order (``org_rank_key``). The database reads the same
    rows with a few indexed queries per org (``fairsched.engine.db.read_head``)."""
    head: list[QueuedChart] = []
    rest: dict[str, list[QueuedChart]] = {}
    for c in queued:
        if c.priority or c.front_at is not None:
            head.append(c)
        else:
            rest.setdefault(c.org, []).append(c)
    truncated = set()
    for org, charts in rest.items():
        charts.sort(key=lambda c: (c.created_at, c.seq))
        head.extend(charts[:k])
        if len(charts) > k:
            truncated.add(org)
    return head, truncated


class NeedsWholeBacklog(Exception):
    """The head of the order cannot be restored alone (:meth:`FairQueue.restore`)."""


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
                 "prioritized_at", "paused", "front_at", "round", "key", "state", "cost")

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

    def chart(self) -> QueuedChart:
        return QueuedChart(self.id, self.org, self.workflow, self.created_at, self.seq,
                           self.priority, self.prioritized_at, self.paused, self.front_at,
                           self.round)


class FairQueue:
    """The queued charts of every org in their fair order.

    ``weights`` lists the orgs in their listed order (a budget change re-ranks
    them in that order). ``costs`` maps (org, workflow) to a cost, 1 if absent.
    ``policy`` is ``"wrr"`` (the product) or ``"fifo"`` (the baseline: one
    queue in arrival order, priority ignored, hold/pause/budget still apply).

    Rounds are persistent: ``head`` is the round of the last normal-tier chart
    dispatched; per org ``last`` is its highest assigned round and ``used`` how
    many of its charts hold it. A queued chart keeps its round while paused or
    prioritised (it still holds it); it gives it back when cancelled
    (``remove``) and loses it when its org is re-ranked while it is not
    eligible. Dispatched charts keep counting for their round.
    """

    def __init__(
        self,
        *,
        budget: int,
        weights: Mapping[str, int],
        costs: Mapping[tuple[str, str | None], int] | None = None,
        policy: str = "wrr",
        track_rounds: bool = False,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}")
        self.policy = policy
        self._budget = int(budget)
        self._weights: dict[str, int] = dict(weights)
        self._costs: dict = dict(costs or {})
        self._entries: dict[str, _Entry] = {}
        self._by_org: dict[str, dict[str, _Entry]] = {o: {} for o in self._weights}
        self._order = SortedKeys()
        self._aside: dict[str, dict[str, _Entry]] = {HELD: {}, PAUSED: {}, BLOCKED: {}}
        self._head = 0
        self._last: dict[str, int] = {}
        self._used: dict[str, int] = {}
        self._disp_round: dict[str, int] = {}
        self._disp_count: dict[str, int] = {}
        self._ordered_n: dict[str, int] = dict.fromkeys(self._weights, 0)
        # queued charts whose round changed (take_round_changes); only the live scheduler,
        # which persists them, pays for the bookkeeping
        self._changed: set[str] | _Untracked = set() if track_rounds else _UNTRACKED
        # A partial queue (the head of the order, loaded first at a restart): dispatch
        # stops at ``_horizon`` and logs what it took out, for :meth:`replay`.
        self._horizon: tuple | None = None
        self.start_log: list[tuple] | None = None
        # Set by a caller that writes rounds a chunk at a time (core.backfill): the charts
        # that left the order, those paused or prioritised (they keep their round without a
        # re-rank), and the orgs re-ranked (a resume, an unprioritise, a move to front, ...).
        self.gone_log: list[tuple[str, int | None]] | None = None  # (org, round) of each chart gone
        self.touched_log: list[tuple[str, int | None]] | None = None  # (org, round) of each
        self.reranked_log: set[str] | None = None  # orgs re-ranked

    # ----------------------------------------------------------- construction
    @classmethod
    def from_backlog(
        cls,
        queued: Iterable[QueuedChart],
        *,
        budget: int,
        weights: Mapping[str, int],
        costs: Mapping[tuple[str, str | None], int] | None = None,
        policy: str = "wrr",
        track_rounds: bool = False,
    ) -> "FairQueue":
        """Rebuild at start-up from the static backlog: the static plan's rounds,
        ``head = 0`` (docs/scheduling.md). Its order equals :func:`plan`'s.
        Any ``round`` on the charts is ignored. O(n log n). ``track_rounds``: report
        round changes (:meth:`take_round_changes`) to persist them."""
        with gc_paused():
            return cls._from_backlog(queued, budget=budget, weights=weights, costs=costs,
                                     policy=policy, track_rounds=track_rounds)

    @classmethod
    def _from_backlog(cls, queued, *, budget, weights, costs, policy, track_rounds=False) -> "FairQueue":
        q = cls(budget=budget, weights=weights, costs=costs, policy=policy, track_rounds=track_rounds)
        keys = []
        q._enter(queued)
        for org in q._weights:
            keys.extend(q._rank(org, insert=False))
        q._order.bulk_load(keys)
        return q

    @classmethod
    def restore(
        cls,
        queued: Iterable[QueuedChart],
        *,
        state: RoundState,
        budget: int,
        weights: Mapping[str, int],
        costs: Mapping[tuple[str, str | None], int] | None = None,
        horizon: tuple | None = None,
    ) -> "FairQueue":
        """Resume after a restart or a failover from what :meth:`export_rounds` and
        :meth:`take_round_changes` persisted (contracts/simulate.md: the order after a
        restart equals the order before it). Each chart's ``round`` is the round it
        held (None: it arrived after the last save, or never had one). ``head`` and
        each org's ``(last, used, in_head)`` come from ``state``.

        Charts with a round keep it; the others then arrive, per org in its rank
        order, by the arrival rule. An org whose weight differs from ``state``'s is
        re-ranked, and every org (in listed order) if the budget differs: what a live
        change made while no scheduler ran would have done. O(n log n).

        ``horizon``: ``queued`` is only the head of the order, every chart whose normal
        key is at most ``horizon`` (a ``(round, created_at, seq)``), with the whole
        priority tier and every chart without a round (a restart loads that first and the
        rest meanwhile). The queue dispatches up to the horizon only, and logs what it
        takes out for :meth:`replay` on the whole queue. Raises :class:`NeedsWholeBacklog`
        if any org must be re-ranked (that needs all its charts)."""
        if horizon is not None and horizon[0] < state.head:
            raise NeedsWholeBacklog("the head alone may hide charts below the head round")
        with gc_paused():
            q = cls(budget=budget, weights=weights, costs=costs, track_rounds=True)
            q._head = int(state.head)
            for org in q._weights:
                s = state.orgs.get(org)
                if s is None:
                    continue
                if s.last is not None:
                    q._last[org], q._used[org] = s.last, s.used
                if s.in_head:
                    q._disp_round[org], q._disp_count[org] = q._head, s.in_head
            q._enter(queued, with_round=True)
            keys = []
            rerank_all = state.budget != q._budget
            for org, w in q._weights.items():
                s = state.orgs.get(org)
                if rerank_all or (s is not None and s.weight != w) or q._stale(org):
                    if horizon is not None:
                        raise NeedsWholeBacklog(f"org {org} is re-ranked on restore")
                    keys.extend(q._rank(org, insert=False))
                else:
                    keys.extend(q._resume_org(org))
            q._order.bulk_load(keys)
            if horizon is not None:
                q._horizon = (TIER_NORMAL, *horizon)
                q.start_log = []
            return q

    @classmethod
    def first_head(
        cls,
        queued: Iterable[QueuedChart],
        *,
        truncated: Iterable[str],
        budget: int,
        weights: Mapping[str, int],
        costs: Mapping[tuple[str, str | None], int] | None = None,
    ) -> "FairQueue":
        """A first start's head (no round was ever saved): ``queued`` holds the whole
        priority tier and, of each org, a prefix of its rank order (``org_rank_key``);
        ``truncated``: the orgs with more charts than that. Their ranks are exactly
        :meth:`from_backlog`'s: an org's charts take rounds in its rank order, each by the
        arrival rule from ``head = 0``, so an org's first charts get the same rounds
        whatever follows them.

        What the head cannot know is where a truncated org's unread charts go: from the
        round of its last read chart on (the next round if that one is full). So the
        queue is partial (:attr:`partial`): it dispatches the normal tier only below the
        smallest such round (a truncated org with no ordered chart read: none at all), and
        logs what it takes out for :meth:`replay` on the whole backlog's queue.
        :func:`first_head_of_backlog` says which charts the head holds."""
        q = cls.from_backlog(queued, budget=budget, weights=weights, costs=costs, track_rounds=True)
        bound = None
        truncated = set(truncated)
        for org in truncated:
            if q._weights.get(org, 0) <= 0:
                continue  # held: none of its charts is ever ordered
            last = q._last.get(org)
            if last is None:
                top = -1  # its unread charts may take round 0
            else:  # its next chart takes ``last`` again while fewer than its weight hold it
                top = last if q._used.get(org, 0) >= q._weights[org] else last - 1
            bound = top if bound is None else min(bound, top)
        if truncated:  # partial even if only held orgs were cut: the whole backlog must follow
            q._horizon = (TIER_NORMAL, math.inf if bound is None else bound, math.inf)  # a round <= bound
            q.start_log = []
        return q

    def _enter(self, charts: Iterable[QueuedChart], with_round: bool = False) -> list[_Entry]:
        """A new entry for each chart, registered but not placed (``with_round``: holding
        the chart's ``round``). ``charts`` may be a generator: a load passes one, so each
        chart is freed as soon as its entry is made (a million of them at once left
        about 100 MB of holes in the heap at 1M charts)."""
        out = []
        entries, by_org, weights = self._entries, self._by_org, self._weights
        for c in charts:
            if c.id in entries:
                raise ValueError(f"duplicate chart id {c.id!r}")
            if c.org not in weights:
                raise KeyError(f"unknown org {c.org!r}")
            e = _Entry(c)
            if with_round:
                e.round = c.round
            entries[c.id] = e
            by_org[c.org][c.id] = e
            out.append(e)
        return out

    def _stale(self, org: str) -> bool:
        """A restored normal-tier chart of ``org`` in the order below ``head`` cannot be
        what was saved: it was resumed or un-prioritised while no scheduler ran, which
        re-ranks."""
        return any(e.round is not None and e.round < self._head and not e.priority
                   and self._state(e) == ORDERED for e in self._by_org[org].values())

    def _resume_org(self, org: str) -> list[tuple]:
        """:meth:`restore` of one org: its charts with a round keep it (in arrival
        order), then the others arrive in rank order. Returns their keys."""
        charts = self._by_org[org].values()
        kept = sorted((e for e in charts if e.round is not None), key=_seq_id)
        new = sorted((e for e in charts if e.round is None),
                     key=lambda e: org_rank_key(e.created_at, e.seq, e.front_at))
        keys = [self._place(e, arrive=False, insert=False) for e in kept]
        for e in new:
            keys.append(self._place(e, arrive=True, insert=False))
            if e.round is not None:
                self._changed.add(e.id)
        return [k for k in keys if k is not None]

    def export_rounds(self) -> RoundState:
        """``head`` and each org's ``(last, used, in_head, weight)``: with each queued
        chart's round (:meth:`take_round_changes` says which changed) all that
        :meth:`restore` needs. O(orgs)."""
        head = self._head
        orgs = {}
        for org, w in self._weights.items():
            last = self._last.get(org)
            in_head = self._disp_count.get(org, 0) if self._disp_round.get(org) == head else 0
            orgs[org] = OrgRounds(last, self._used.get(org, 0) if last is not None else 0, in_head, w)
        return RoundState(head, self._budget, orgs)

    def take_round_changes(self) -> dict[str, int | None]:
        """The queued charts whose round changed since the last call (arrivals,
        re-ranks), id -> its round now (None: it holds none), and forget them.
        Dispatched and removed charts are not listed. O(changes). Always empty for a
        queue made without ``track_rounds`` (:meth:`restore` tracks)."""
        if isinstance(self._changed, _Untracked):
            return {}
        out = {cid: self._entries[cid].round for cid in self._changed if cid in self._entries}
        self._changed = set()
        return out

    # ------------------------------------------------------------- properties
    @property
    def head(self) -> int:
        """The round of the last normal-tier chart dispatched (0 at start)."""
        return self._head

    def round_state(self) -> dict[str, tuple[int, int]]:
        """Per org ``(last, used)``: its highest assigned round and how many of its charts,
        queued *or dispatched*, hold it (simulate.md). With :attr:`head` this is all the
        arrival rule needs, so a reader can place charts that arrived after a publication."""
        return {org: (last, self._used[org]) for org, last in self._last.items()}

    @property
    def budget(self) -> int:
        return self._budget

    @property
    def weights(self) -> dict[str, int]:
        """Copy of the weights, in the orgs' listed order."""
        return dict(self._weights)

    @property
    def costs(self) -> dict:
        """Copy of the (org, workflow) -> cost table."""
        return dict(self._costs)

    def ordered_count(self, org: str) -> int:
        """How many of ``org``'s charts are in the order, O(1)."""
        return self._ordered_n.get(org, 0)

    def cost_of(self, org: str, workflow: str | None) -> int:
        """The current cost of (org, workflow): 1 if not set."""
        return self._costs.get((org, workflow), 1)

    def __len__(self) -> int:
        """Number of queued charts (ordered, held, paused and blocked)."""
        return len(self._entries)

    def __contains__(self, chart_id: str) -> bool:
        return chart_id in self._entries

    def get(self, chart_id: str) -> QueuedChart | None:
        """The queued chart (with its current round), None if not queued."""
        e = self._entries.get(chart_id)
        return e.chart() if e else None

    def state_of(self, chart_id: str) -> str | None:
        """``"ordered"``, ``"held"``, ``"paused"``, ``"blocked"`` or None."""
        e = self._entries.get(chart_id)
        return e.state if e else None

    def org_of(self, chart_id: str) -> str | None:
        """The org of a queued chart (None: not queued). O(1), no copy."""
        e = self._entries.get(chart_id)
        return e.org if e is not None else None

    def round_of(self, chart_id: str) -> int | None:
        """The round a queued chart holds (None: priority tier, not eligible, fifo, unknown)."""
        e = self._entries.get(chart_id)
        return e.round if e else None

    def frozen_copy(self) -> "FairQueue":
        """A read-only copy for an ETA pass in another thread, while this queue keeps
        changing: the order, the charts set aside, rounds, weights, costs and budget are
        copied (C-level container copies, milliseconds at 100k charts); the keys and
        entries are shared, and a pass reads only what never changes in them (ids,
        orgs, workflows, and the key tuples). Never change the copy; it cannot ``get``."""
        q = FairQueue.__new__(FairQueue)
        q.policy = self.policy
        q._budget = self._budget
        q._weights = dict(self._weights)
        q._costs = dict(self._costs)
        q._entries = {}
        q._by_org = {}
        q._order = self._order.copy()
        q._aside = {state: dict(charts) for state, charts in self._aside.items()}
        q._head = self._head
        q._last = dict(self._last)
        q._used = dict(self._used)
        q._disp_round = dict(self._disp_round)
        q._disp_count = dict(self._disp_count)
        q._ordered_n = dict(self._ordered_n)
        q._changed = set()
        return q

    # ------------------------------------------------------------------ order
    @property
    def order_len(self) -> int:
        """Number of charts in the order."""
        return len(self._order)

    def __iter__(self) -> Iterator[str]:
        """Chart ids of the order, lazily from the head. Do not modify while iterating."""
        return (k[4] for k in self._order)

    def order(self) -> list[str]:
        """Snapshot of the order as chart ids, O(n)."""
        return [k[4] for k in self._order]

    def walk(self) -> Iterator[tuple[str, tuple, int | None]]:
        """``(chart id, (org, workflow), round)`` of the order from the head, the
        round None in the priority tier: what a forecast pass needs, without
        building a :class:`QueuedChart` per chart."""
        for k in chain.from_iterable(self._order.sublists()):
            yield k[4], k[6], (k[1] if k[0] == TIER_NORMAL else None)

    def iter_charts(self) -> Iterator[QueuedChart]:
        """The ordered charts (with their rounds) lazily from the head; slice it
        with ``itertools.islice`` for a dashboard's first page."""
        return (k[5].chart() for k in self._order)

    def position(self, chart_id: str) -> int | None:
        """0-based position in the order, None if not in it. O(n / 512 + log n)."""
        e = self._entries.get(chart_id)
        if e is None or e.key is None:
            return None
        return self._order.index(e.key)

    def _aside_ids(self, state: str) -> list[str]:
        return [e.id for e in sorted(self._aside[state].values(), key=lambda e: (e.seq, e.id))]

    @property
    def held(self) -> list[str]:
        """Ids of charts of orgs with weight 0, in arrival order."""
        return self._aside_ids(HELD)

    @property
    def paused(self) -> list[str]:
        """Ids of paused charts (of orgs not held), in arrival order."""
        return self._aside_ids(PAUSED)

    @property
    def blocked(self) -> list[str]:
        """Ids of charts whose cost exceeds the whole budget, in arrival order."""
        return self._aside_ids(BLOCKED)

    def backlog(self) -> list[QueuedChart]:
        """Every queued chart in arrival order, each ordered normal-tier chart
        with its current ``round`` (for a dump that replays to the same order)."""
        out = []
        for e in sorted(self._entries.values(), key=lambda e: (e.seq, e.id)):
            c = e.chart()
            if e.state != ORDERED or (e.key is not None and e.key[0] == TIER_PRIORITY) \
                    or self.policy != "wrr":
                if c.round is not None:
                    c = QueuedChart(c.id, c.org, c.workflow, c.created_at, c.seq, c.priority,
                                    c.prioritized_at, c.paused, c.front_at, None)
            out.append(c)
        return out

    # ---------------------------------------------------------------- changes
    def add(self, chart: QueuedChart) -> None:
        """A chart arrives, O(log n). Eligible normal-tier charts take their
        org's next round: ``r = max(head, last)``, +1 if that round is full."""
        e, = self._enter((chart,))
        self._place(e)
        if e.round is not None:
            self._changed.add(e.id)

    def remove(self, chart_id: str) -> QueuedChart | None:
        """A queued chart leaves without being dispatched (cancelled, started
        elsewhere, deleted). If it held its org's ``last`` round, that place is
        given back. Returns the chart, None if it was not queued."""
        e = self._entries.pop(chart_id, None)
        if e is None:
            return None
        if self.start_log is not None:
            self.start_log.append(("remove", chart_id))
        del self._by_org[e.org][chart_id]
        self._changed.discard(chart_id)
        if self.gone_log is not None:
            self.gone_log.append((e.org, e.round))
        self._take_out(e)
        if e.round is not None and self._last.get(e.org) == e.round:
            self._used[e.org] -= 1
        return e.chart()

    def pause(self, chart_id: str) -> bool:
        """Pause a queued chart (it leaves the order; nobody else moves). False if
        not queued or already paused."""
        e = self._entries.get(chart_id)
        if e is None or e.paused:
            return False
        e.paused = True
        self._touched(e)
        self._take_out(e)
        self._place(e, arrive=False)
        return True

    def resume(self, chart_id: str) -> bool:
        """Resume a paused chart: re-ranks its org. False if not queued or not paused."""
        e = self._entries.get(chart_id)
        if e is None or not e.paused:
            return False
        e.paused = False
        self._rerank(e.org)
        return True

    def prioritize(self, chart_id: str, at: float | None = None) -> bool:
        """Move a chart to the priority tier (FIFO by ``at``, missing: its
        created_at); nobody else moves. False if not queued or already priority."""
        e = self._entries.get(chart_id)
        if e is None or e.priority:
            return False
        e.priority = True
        e.prioritized_at = at
        self._touched(e)
        if e.key is not None and self.policy == "wrr":
            self._take_out(e)
            self._place(e, arrive=False)
        return True

    def unprioritize(self, chart_id: str) -> bool:
        """Back to the normal tier: re-ranks its org. False if not queued or not priority."""
        e = self._entries.get(chart_id)
        if e is None or not e.priority:
            return False
        e.priority = False
        e.prioritized_at = None
        self._rerank(e.org)
        return True

    def move_to_front(self, chart_id: str, at: float) -> bool:
        """Move a chart to the front of its own org's queue (operator action at
        time ``at``): it takes its org's next turn; other orgs do not move.
        Re-ranks its org. False if not queued."""
        e = self._entries.get(chart_id)
        if e is None:
            return False
        e.front_at = at
        self._rerank(e.org)
        return True

    def set_weight(self, org: str, weight: int) -> bool:
        """Set an org's weight (0 = held; its charts stay visible in ``held``).
        A new org is added at the end of the listed order. Re-ranks the org if
        the weight changed. Returns whether anything changed."""
        if weight < 0:
            raise ValueError(f"negative weight {weight!r}")
        if org not in self._weights:
            self._weights[org] = weight
            self._by_org[org] = {}
            self._ordered_n[org] = 0
            return True
        if self._weights[org] == weight:
            return False
        self._weights[org] = weight
        self._rerank(org)
        return True

    def set_cost(self, org: str, workflow: str | None, cost: int) -> bool:
        """Set the cost of (org, workflow); re-ranks the org if it changed."""
        if cost < 1:
            raise ValueError(f"cost below 1: {cost!r}")
        if self._costs.get((org, workflow), 1) == cost:
            self._costs[(org, workflow)] = cost
            return False
        self._costs[(org, workflow)] = cost
        if org in self._weights:
            self._rerank(org)
        return True

    def set_budget(self, budget: int) -> bool:
        """Set the total budget; re-ranks every org in listed order if it changed."""
        if budget < 0:
            raise ValueError(f"negative budget {budget!r}")
        if budget == self._budget:
            return False
        self._budget = budget
        for org in self._weights:
            self._rerank(org)
        return True

    # --------------------------------------------------------------- dispatch
    def _startable(self, free: int) -> int:
        """How many charts at the head start within ``free``: the head-of-line walk, and
        in a partial queue (:meth:`restore` with a horizon) none past the horizon."""
        n = head_of_line(_costs_in_order(self._order.sublists(), free), free)
        if self._horizon is not None and n:
            h = self._horizon
            n = sum(1 for _ in takewhile(lambda k: k[:4] <= h, islice(self._order, n)))
        return n

    @property
    def partial(self) -> bool:
        """True for the head of the order restored alone (:meth:`restore` with a horizon)."""
        return self._horizon is not None

    def close_horizon(self, everything: bool = False) -> None:
        """Dispatch nothing more of the normal tier (``everything``: nothing at all):
        something changed that the head alone cannot place."""
        if self._horizon is not None:
            self._horizon = (TIER_PRIORITY - 0.5,) if everything else (TIER_NORMAL - 0.5,)

    def peek(self, free: int) -> list[str]:
        """Ids that :meth:`dispatch` would start with ``free`` budget, without starting them."""
        return [k[4] for k in islice(self._order, self._startable(free))]

    def dispatch(self, free: int) -> list[QueuedChart]:
        """Head-of-line walk within ``free`` (may be negative): start each chart
        at the head that fits, stop at the first that does not. The started
        charts leave the queue; each normal-tier one sets ``head`` to its round.
        Their cost is ``cost_of(chart.org, chart.workflow)`` (read it now: a
        later ``set_cost`` does not touch in-flight work)."""
        started = []
        log = self.start_log
        for k in self._order.pop_head(self._startable(free)):
            e = k[5]
            self._ordered_n[e.org] -= 1
            self._forget(e)
            e.key = None
            e.state = ""
            normal = k[0] == TIER_NORMAL
            self._dispatched(e.org, normal, e.round)
            if log is not None:
                log.append(("dispatch", e.id, normal, e.round))
            started.append(e.chart())
        return started

    def _forget(self, e: _Entry) -> None:
        del self._entries[e.id]
        del self._by_org[e.org][e.id]
        self._changed.discard(e.id)
        if self.gone_log is not None:
            self.gone_log.append((e.org, e.round))

    def _touched(self, e: _Entry) -> None:
        if self.touched_log is not None:
            self.touched_log.append((e.org, e.round))

    def _dispatched(self, org: str, normal: bool, r: int | None) -> None:
        """A chart of ``org`` holding round ``r`` was dispatched: a normal-tier one sets
        ``head`` to its round (and keeps counting for it)."""
        if not normal or r is None:
            return
        self._head = r
        if self._disp_round.get(org) == r:
            self._disp_count[org] += 1
        else:
            self._disp_round[org] = r
            self._disp_count[org] = 1

    def replay(self, log: Iterable[tuple]) -> list[tuple[str, str]]:
        """Take out what a partial queue (the head of this order, restored from the same
        saved state) dispatched and removed, as it did: ``head`` and the rounds move
        exactly as they moved there. A chart this queue does not hold arrived after its
        read: a priority chart (no round to count) or one already gone. Returns the
        ``(id, org)`` of each chart taken out."""
        out = []
        for kind, cid, *rest in log:
            e = self._entries.get(cid)
            if kind == "remove":
                if self.remove(cid) is not None:
                    out.append((cid, e.org))
                continue
            if e is None:
                continue
            normal, r = rest
            self._take_out(e)
            self._forget(e)
            self._dispatched(e.org, normal, r)
            out.append((cid, e.org))
        return out

    # ------------------------------------------------------------------- ETAs
    def etas(
        self,
        running: Iterable[RunningChart],
        now: float,
        budget: int | None = None,
        estimate: Callable[[str, str | None], float] = Durations(),
        *,
        stop_after: "set[str] | frozenset[str] | None" = None,
    ) -> EtaReport:
        """The full ETA pass, the lane simulation of docs/scheduling.md over
        the running charts and the whole order, O(n log budget).
        ``budget`` defaults to the queue's. ``org_clear_s`` has every listed org.
        ``stop_after``: stop the walk once every one of these ids has its ETA
        (a partial pass: clear-times then cover only the walked prefix).
        An org with no chart running or in the order whose queued charts are all
        held, paused or blocked gets ``org_clear_s`` None (scenario contract v2)
        and is counted in ``org_unplanned``."""
        running = list(running)
        rep = self._etas(running, now, budget, estimate, stop_after)
        unplanned = self.unplanned_by_org()
        if not unplanned:
            return rep
        return unplanned_clear(rep, unplanned, {r.org for r in running} | {
            o for o, n in self._ordered_n.items() if n})

    def unplanned_by_org(self) -> dict[str, int]:
        """Per org, how many of its queued charts are held, paused or blocked
        (orgs with at least one only). O(those charts)."""
        out: dict[str, int] = {}
        for aside in self._aside.values():
            for e in aside.values():
                out[e.org] = out.get(e.org, 0) + 1
        return out

    def _etas(self, running, now, budget, estimate, stop_after) -> EtaReport:
        if budget is None:
            budget = self._budget
        etas: dict[str, Eta] = {}
        running = list(running)
        cap = lane_count(budget, sum(r.cost for r in running), self.order_len, self._ordered_cost)
        lanes = initial_lanes(running, now, budget, estimate, etas, cap)
        org_clear: dict[str, float] = dict.fromkeys(self._weights, 0.0)
        running_clear(running, etas, org_clear)
        pending = set(stop_after) - etas.keys() if stop_after is not None else None
        if pending is not None and not pending:
            return EtaReport(etas, org_clear, max(org_clear.values(), default=0.0))
        if pending is None:
            # the full pass, vectorised: C-level gathers around one tight heap loop
            with gc_paused():
                return self._full_pass(lanes, etas, org_clear, estimate)
        # a partial pass (the simulator's ETA at arrival): the same lane walk, a
        # stretch of the order at a time, until every pending chart has its ETA
        return self._partial_pass(lanes, etas, org_clear, estimate, pending)

    def _partial_pass(self, lanes, etas, org_clear, estimate, pending) -> EtaReport:
        """:func:`.rules.lane_pass` over the order one stretch (a sublist of the sorted
        keys) at a time, stopping after the chart that gives the last of ``pending``
        its ETA: ETAs and clear-times cover the order up to there."""
        costs = self._costs
        info: dict = {}  # (org, workflow) -> (cost, estimate), once per pass
        for keys in self._order.sublists():
            cost_est = []
            for k in keys:
                pair = k[6]
                ce = info.get(pair)
                if ce is None:
                    ce = info[pair] = (costs.get(pair, 1), float(estimate(pair[0], pair[1])))
                cost_est.append(ce)
            starts, fins = lane_pass(cost_est, lanes)
            n = len(keys)
            for i, k in enumerate(keys):
                if fins[i] is not None and k[4] in pending:
                    pending.discard(k[4])
                    if not pending:
                        n = i + 1
                        break
            collect_etas([k[4] for k in keys[:n]], [k[6][0] for k in keys[:n]], starts[:n], fins[:n],
                         etas, org_clear)
            if not pending:
                break
        return EtaReport(etas, org_clear, max(org_clear.values(), default=0.0))

    def _ordered_cost(self) -> int:
        """The total cost of the charts in the order (O(n); see :func:`lane_count`)."""
        costs = self._costs
        return sum(costs.get(k[5].pair, 1) for k in chain.from_iterable(self._order.sublists()))

    def _full_pass(self, lanes, etas, org_clear, estimate) -> EtaReport:
        costs = self._costs
        keys = list(chain.from_iterable(self._order.sublists()))
        pairs = list(map(_kpair, keys))
        info = {pair: (costs.get(pair, 1), float(estimate(pair[0], pair[1])))
                for pair in set(pairs)}
        starts, fins = lane_pass(list(map(info.__getitem__, pairs)), lanes)
        collect_etas(list(map(_kid, keys)), (), starts, fins, etas, org_clear, pairs)
        return EtaReport(etas, org_clear, max(org_clear.values(), default=0.0))

    def plan(
        self,
        running: Sequence[RunningChart],
        now: float,
        estimate: Callable[[str, str | None], float] = Durations(),
    ) -> Plan:
        """The plan of the live state (``manage.py plan --live``): the same
        fields as :func:`fairsched.core.plan` on a dump of this queue."""
        running = list(running)
        free = self._budget - sum(r.cost for r in running)
        rep = self.etas(running, now, self._budget, estimate)
        order = []
        rounds = {}
        for k in self._order:
            order.append(k[4])
            if k[0] == TIER_NORMAL and k[5].round is not None:
                rounds[k[4]] = k[5].round
        return Plan(order=order, dispatch=self.peek(free), held=self.held,
                    paused=self.paused, blocked=self.blocked, etas=rep.etas,
                    org_clear_s=rep.org_clear_s, clear_s=rep.clear_s, rounds=rounds,
                    org_unplanned=rep.org_unplanned)

    # -------------------------------------------------------------- internals
    def _state(self, e: _Entry) -> str:
        """:func:`.rules.classify` of ``e`` now."""
        return classify(self._weights[e.org], e.paused, self._costs.get(e.pair, 1), self._budget)

    def _take_out(self, e: _Entry) -> None:
        if e.key is not None:
            self._order.remove(e.key)
            e.key = None
            self._ordered_n[e.org] -= 1
        elif e.state in self._aside:
            self._aside[e.state].pop(e.id, None)
        e.state = ""

    def _key(self, e: _Entry) -> tuple:
        """The chart's key in the order; all keys are defined in :mod:`.keys`."""
        if self.policy == "fifo":  # one round, 0: arrival order
            return queue_key(TIER_NORMAL, (0,) + fifo_key(e.created_at, e.seq), e.id, e, e.pair)
        if e.priority:
            return queue_key(TIER_PRIORITY, priority_key(e.created_at, e.seq, e.prioritized_at), e.id, e, e.pair)
        return queue_key(TIER_NORMAL, normal_key(e.round, e.created_at, e.seq), e.id, e, e.pair)

    def _place(self, e: _Entry, arrive: bool = True, insert: bool = True) -> tuple | None:
        """Classify ``e`` and put it in the order or aside. ``arrive``: give an
        eligible normal-tier chart its next round (else it keeps its own)."""
        org = e.org
        cost = e.cost = self._costs.get(e.pair, 1)  # set_cost and set_budget re-place: always current
        st = e.state = classify(self._weights[org], e.paused, cost, self._budget)
        if st != ORDERED:
            self._aside[st][e.id] = e
            return None
        if self.policy == "wrr" and not e.priority and (arrive or e.round is None):
            # the arrival rule: e takes its org's next round
            r, self._used[org] = arrival_round(self._head, self._last.get(org), self._used.get(org, 0),
                                               self._weights[org])
            self._last[org] = e.round = r
        key = self._key(e)
        e.key = key
        self._ordered_n[org] += 1
        if insert:
            self._order.add(key)
        return key

    def _rank(self, org: str, insert: bool = True) -> list[tuple]:
        """Reset ``org`` to what its dispatched charts imply, then its queued
        charts arrive again, oldest first (moved-to-front first). Returns keys."""
        if self.reranked_log is not None:
            self.reranked_log.add(org)
        if self._disp_round.get(org) == self._head and org in self._disp_round:
            self._last[org] = self._head
            self._used[org] = self._disp_count[org]
        else:
            self._last.pop(org, None)
            self._used.pop(org, None)
        charts = sorted(self._by_org[org].values(),
                        key=lambda e: org_rank_key(e.created_at, e.seq, e.front_at))
        keys = []
        old = [e.round for e in charts]
        for e in charts:
            e.round = None
            k = self._place(e, arrive=True, insert=insert)
            if k is not None:
                keys.append(k)
        changed = self._changed
        for e, r in zip(charts, old):
            if e.round != r:  # a re-rank mostly gives the same rounds back: nothing to write
                changed.add(e.id)
        return keys

    def _rerank(self, org: str) -> None:
        for e in self._by_org[org].values():
            self._take_out(e)
        self._rank(org)
