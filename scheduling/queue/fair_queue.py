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

from typing import Iterable, Mapping

from .entry import _UNTRACKED, _Entry, _Untracked
from ..keys import TIER_NORMAL, TIER_PRIORITY, QueueKey, fifo_key, normal_key, org_rank_key, priority_key, queue_key
from ..plan import gc_paused
from .dispatch import QueueDispatch
from .etas import QueueEtas
from .loads import QueueLoads
from .views import QueueViews
from ..reserve import DEFAULT_DEPTH
from ..modes import Dispatch, Share, check_policies
from ..rules import BLOCKED, HELD, ORDERED, PAUSED, classify
from ..share import DEFAULT_QUANTUM_S, MIN_EST_S, TICK_S, arrival_round, arrival_tag
from ..sortedkeys import SortedKeys
from ..lanes import Durations
from ..pools import DEFAULT_POOL, Pools
from ..types import Estimate, OrgRounds, QueuedChart, RoundState

__all__ = ["FairQueue", "POLICIES"]


POLICIES = ("wrr", "fifo")


class FairQueue(QueueLoads, QueueViews, QueueDispatch, QueueEtas):
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

    The policies (docs/scheduling.md; given as the members or their text, kept as the
    members): ``share`` ``Share.CHARTS`` (a turn is ``weight`` charts) or ``Share.WORK``
    (dominant-resource fairness by virtual tags, :func:`.share.arrival_tag`: a chart's work
    is its cost x ``estimate`` at arrival, or with ``pools`` its dominant share x the
    ``default`` pool's capacity x ``estimate``; rounds are ticks of virtual time and
    ``used`` counts budget-seconds); ``dispatch`` ``Dispatch.STRICT`` (head-of-line)
    or ``Dispatch.BACKFILL`` (conservative backfill over the first ``depth`` charts,
    :mod:`.reserve`; ``bound`` gives a chart's 90% bound).
    """

    def __init__(
        self,
        *,
        budget: int,
        weights: Mapping[str, int],
        costs: Mapping[tuple[str, str | None], int] | None = None,
        policy: str = "wrr",
        track_rounds: bool = False,
        share: Share | str = Share.CHARTS,
        quantum_s: float = DEFAULT_QUANTUM_S,
        dispatch: Dispatch | str = Dispatch.STRICT,
        estimate: Estimate = Durations(),
        bound: Estimate | None = None,
        depth: int = DEFAULT_DEPTH,
        pools: Pools | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}")
        self.policy = policy
        self.share, self.quantum_s, self.dispatch_policy = check_policies(share, quantum_s, dispatch)
        self._work = self.share is Share.WORK and policy == "wrr"
        self._estimate = estimate
        self._bound = bound
        self.depth = int(depth)
        # Backfill: the guards' windows of the charts it started ahead (start, estimated end,
        # bound's end, cost; absolute), held until the bound's end (reserve.Profile.hold);
        # those of the last walk's charts until they start.
        self._guard_holds: list[tuple[float, float, float, int]] = []
        self._guards_now: dict[str, tuple[float, float, float, int]] = {}
        self._budget = int(budget)
        self._weights: dict[str, int] = dict(weights)
        self._costs: dict = dict(costs or {})
        self._entries: dict[str, _Entry] = {}
        self._by_org: dict[str, dict[str, _Entry]] = {o: {} for o in self._weights}
        self._order = SortedKeys()
        self._aside: dict[str, dict[str, _Entry]] = {HELD: {}, PAUSED: {}, BLOCKED: {}}
        self._head = 0
        self._last: dict[str, int] = {}
        self._used: dict[str, float] = {}  # charts, or budget-seconds under Share.WORK
        self._disp_round: dict[str, int] = {}
        self._disp_count: dict[str, float] = {}
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
        # Set by a caller that starts charts other than the head's (pools, scheduling.pools:
        # dispatch_ids): head then moves as under backfill, never past a round still waiting.
        self.out_of_order = False
        # Capacity pools (docs/scheduling.md, "Pools"): None, the one budget; else what blocks,
        # dispatches and times the charts (the pool "default" is the budget).
        self._pools: Pools | None = None
        if pools is not None:
            self._use_pools(pools)

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
        **policies,
    ) -> "FairQueue":
        """Rebuild at start-up from the static backlog: the static plan's rounds,
        ``head = 0`` (docs/scheduling.md). Its order equals :func:`plan`'s.
        Any ``round`` on the charts is ignored. O(n log n). ``track_rounds``: report
        round changes (:meth:`take_round_changes`) to persist them."""
        with gc_paused():
            return cls._from_backlog(queued, budget=budget, weights=weights, costs=costs,
                                     policy=policy, track_rounds=track_rounds, **policies)

    @classmethod
    def _from_backlog(cls, queued, *, budget, weights, costs, policy, track_rounds=False, **policies) -> "FairQueue":
        q = cls(budget=budget, weights=weights, costs=costs, policy=policy, track_rounds=track_rounds, **policies)
        keys = []
        q._enter(queued)
        for org in q._weights:
            keys.extend(q._rank(org, insert=False))
        q._order.bulk_load(keys)
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
            if e.est is None and self._work:
                e.est = float(self._estimate(c.org, c.workflow))  # fixed at arrival
            if with_round:
                e.round = c.round
            entries[c.id] = e
            by_org[c.org][c.id] = e
            out.append(e)
        return out

    def export_rounds(self) -> RoundState:
        """``head`` and each org's ``(last, used, in_head, weight)``: with each queued
        chart's round (:meth:`take_round_changes` says which changed) all that
        :meth:`restore` needs. O(orgs)."""
        head = self._head
        orgs = {}
        for org, w in self._weights.items():
            last = self._last.get(org)
            r = self._disp_round.get(org)
            in_head = self._disp_count.get(org, 0) if r is not None and r >= head else 0
            in_round = r if in_head and r > head else None  # (only under backfill)
            orgs[org] = OrgRounds(last, self._used.get(org, 0) if last is not None else 0, in_head, w, in_round)
        return RoundState(head, self._budget, orgs, self.share_key, tuple(self._guard_holds))

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

    def frozen_copy(self) -> "FairQueue":
        """A read-only copy for an ETA pass in another thread, while this queue keeps
        changing: the order, the charts set aside, rounds, weights, costs and budget are
        copied (C-level container copies, milliseconds at 100k charts); the keys and
        entries are shared, and a pass reads only what never changes in them (ids,
        orgs, workflows, and the key tuples). Never change the copy; it cannot ``get``."""
        q = FairQueue.__new__(FairQueue)
        q.policy = self.policy
        q.share, q.quantum_s, q.dispatch_policy, q._work = self.share, self.quantum_s, self.dispatch_policy, self._work
        q._estimate, q._bound, q.depth = self._estimate, self._bound, self.depth
        q._guard_holds, q._guards_now = list(self._guard_holds), {}
        q._budget = self._budget
        q._pools, q.out_of_order = self._pools, self.out_of_order  # (set_pools replaces, never changes it)
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
            self._used[e.org] -= e.share
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
        if self._pools is not None:
            self._use_pools(self._pools)
        for org in self._weights:
            self._rerank(org)
        return True

    def set_pools(self, pools: Pools | None) -> bool:
        """Capacity pools (docs/scheduling.md, "Pools"), or None for the one budget; their
        pool ``default`` is the budget (its capacity here is replaced by it). A change
        re-ranks every org in listed order (what is blocked may change), as a budget change
        does. Returns whether anything changed."""
        if pools is None and self._pools is None:
            return False
        if pools is not None:
            old = self._pools
            self._use_pools(pools)
            if old is not None and (old.capacity, old.demands, old.limits) == (
                    self._pools.capacity, self._pools.demands, self._pools.limits):
                return False
        else:
            self._pools, self.out_of_order = None, False
        for org in self._weights:
            self._rerank(org)
        return True

    def _use_pools(self, pools: Pools) -> None:
        """Keep a copy of ``pools`` whose ``default`` is the budget (never changed in
        place: a frozen copy shares it)."""
        self._pools = Pools({**pools.capacity, DEFAULT_POOL: self._budget}, dict(pools.demands), dict(pools.limits))
        self.out_of_order = True

    # -------------------------------------------------------------- internals
    def _state(self, e: _Entry) -> str:
        """:func:`.rules.classify` of ``e`` now."""
        return self._classify(e, self._costs.get(e.pair, 1))

    def _classify(self, e: _Entry, cost: int) -> str:
        """:func:`.rules.classify`; with pools, blocked means what :meth:`.pools.Pools.never`
        says (a pool or a ceiling below the chart's units), not a cost above the budget."""
        pools = self._pools
        if pools is None:
            return classify(self._weights[e.org], e.paused, cost, self._budget)
        st = classify(self._weights[e.org], e.paused, 1, 1)
        if st == ORDERED and pools.never(e.org, pools.demand(*e.pair)) is not None:
            return BLOCKED
        return st

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
        st = e.state = self._classify(e, cost)
        if st != ORDERED:
            self._aside[st][e.id] = e
            return None
        if self.policy == "wrr" and not e.priority and (arrive or e.round is None):
            # the arrival rule: e takes its org's next round
            if self._work:
                r, self._used[org], e.share = arrival_tag(
                    self._head, self._last.get(org), self._used.get(org, 0), self._turn(org), self._work_of(e, cost))
            else:
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
        if org in self._disp_round and self._disp_round[org] >= self._head:  # (> only under backfill)
            self._last[org] = self._disp_round[org]
            self._used[org] = self._disp_count[org]
        else:
            self._last.pop(org, None)
            self._used.pop(org, None)
        charts = sorted(self._by_org[org].values(),
                        key=lambda e: org_rank_key(e.created_at, e.seq, e.front_at))
        keys = []
        old = [(e.round, e.share) for e in charts]
        for e in charts:
            e.round = None
            e.share = 1  # a share means something only with a round: the arrival rule sets it
            k = self._place(e, arrive=True, insert=insert)
            if k is not None:
                keys.append(k)
        changed = self._changed
        for e, (r, share) in zip(charts, old):
            if e.round != r or e.share != share:  # a re-rank mostly gives the same back: nothing to write
                changed.add(e.id)
        return keys

    def _turn(self, org: str) -> float:
        """An org's turn in a round: its weight (charts), or weight x TICK_S budget-seconds
        (work: a round is TICK_S of virtual time)."""
        w = self._weights[org]
        return w * TICK_S if self._work else w

    def _work_of(self, e: _Entry, cost: int) -> float:
        """A chart's work in budget-seconds: its cost x its estimate at arrival; with pools
        (DRF) its dominant share x the ``default`` pool's capacity (1 if none) x its
        estimate, which is cost x estimate with the one pool ``default``."""
        if e.est is None:
            e.est = float(self._estimate(e.org, e.workflow))
        est = e.est if e.est > MIN_EST_S else MIN_EST_S
        pools = self._pools
        if pools is None:
            return cost * est
        scale = pools.capacity.get(DEFAULT_POOL, 0) or 1
        return pools.dominant_share(pools.demand(e.org, e.workflow)) * scale * est

    @property
    def share_key(self) -> tuple:
        """(share, quantum_s) the rounds are given under (quantum None under "charts")."""
        return (self.share, self.quantum_s if self.share is Share.WORK else None)

    def set_policies(self, share: Share | str | None = None, quantum_s: float | None = None,
                     dispatch: Dispatch | str | None = None) -> bool:
        """Switch the policies live. A change of ``share`` (or of ``quantum_s`` under
        ``work``) re-ranks every org in listed order, as a budget change does; ``dispatch``
        changes only how the order starts. Returns whether anything changed."""
        share = self.share if share is None else share
        quantum_s = self.quantum_s if quantum_s is None else float(quantum_s)
        dispatch = self.dispatch_policy if dispatch is None else dispatch
        share, quantum_s, dispatch = check_policies(share, quantum_s, dispatch)
        before = (self.share_key, self.dispatch_policy)
        rerank = (share, quantum_s if share is Share.WORK else None) != self.share_key
        self.share, self.quantum_s, self.dispatch_policy = share, quantum_s, dispatch
        self._work = share is Share.WORK and self.policy == "wrr"
        if rerank:
            self._convert_dispatched(before[0])
            for org in self._weights:
                self._rerank(org)
        return (self.share_key, self.dispatch_policy) != before

    def _convert_dispatched(self, old_key: tuple) -> None:
        """What each org dispatched in its current round, counted under ``old_key``'s share
        (charts, or budget-seconds under work), in the share now in force. Charts to work:
        nothing (every org starts afresh at the head, its first chart's round its virtual
        start: none is handed a debt, or a burst, by the switch); work to charts: one chart if it dispatched any
        there (a round of work is a tick: it rarely holds two of an org's charts). A new
        quantum under work keeps the budget-seconds (the order does not depend on it)."""
        old_share = old_key[0]
        new_work = self.share is Share.WORK
        if old_share != Share.WORK and new_work:
            self._disp_round.clear()
            self._disp_count.clear()
            return
        for org, n in self._disp_count.items():
            if old_share == Share.WORK and not new_work:
                self._disp_count[org] = 1 if n > 0 else 0

    def _rerank(self, org: str) -> None:
        for e in self._by_org[org].values():
            self._take_out(e)
        self._rank(org)

