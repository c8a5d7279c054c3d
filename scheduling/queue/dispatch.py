"""Dispatch from :class:`~scheduling.queue.FairQueue` (a mixin; the state is the
queue's): the head-of-line walk, a partial queue's horizon, and the replay of what it took."""
from __future__ import annotations

import math
from itertools import chain, islice, takewhile
from operator import attrgetter, itemgetter
from typing import Iterable, Iterator

from .entry import _Entry
from ..keys import TIER_NORMAL, TIER_PRIORITY, QueueKey
from ..modes import Dispatch
from ..reserve import P90_RATIO, Profile, startable_now, window_end
from ..pools import Usage, dispatch_walk, starts_keyed
from ..pool_reserve import PoolProfiles, hold_units, startable_now as pool_startable_now, strict_now, tail_running
from ..rules import head_of_line
from ..types import Estimate
from ..types import QueuedChart, RunningChart

_FOREVER = 1e18  # a running chart of unknown finish


def _item(k, estimate: Estimate, bound: Estimate | None) -> tuple[int, float, float]:
    """(cost, estimate, 90% bound) of the chart of key ``k``, for a reservation."""
    org, wf = k.pair
    d = float(estimate(org, wf))
    return k.entry.cost, d, float(bound(org, wf)) if bound is not None else d * P90_RATIO

_payload = itemgetter(QueueKey._fields.index("entry"))  # C speed, by the field's position
_ecost = attrgetter("cost")
_PAIR_AT = QueueKey._fields.index("pair")  # a key's (org, workflow), what its demand is looked up by


def _costs_in_order(sublists: list[list[tuple]], free: int) -> Iterator[int]:
    """The cost of each chart of the order (its keys' ``sublists``), lazily from the
    head, for the head-of-line stop within ``free``. Every cost is at least 1, so at
    most ``free`` charts start: when the first sublist is longer, it holds the stop."""
    if sublists and free < len(sublists[0]):
        return map(_ecost, map(_payload, sublists[0]))
    return map(_ecost, map(_payload, chain.from_iterable(sublists)))


class QueueDispatch:
    """Starting charts from the head of the order."""

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

    @property
    def horizon(self) -> tuple | None:
        """A partial queue's horizon: it dispatches no chart whose key's first four fields
        (``key[:4]``, :class:`~.keys.QueueKey`) pass it; None for a whole queue."""
        return self._horizon

    def close_horizon(self, everything: bool = False) -> None:
        """Dispatch nothing more of the normal tier (``everything``: nothing at all):
        something changed that the head alone cannot place."""
        if self._horizon is not None:
            self._horizon = (TIER_PRIORITY - 0.5,) if everything else (TIER_NORMAL - 0.5,)

    def peek(self, free: int, running: Iterable[RunningChart] | None = None, now: float = 0.0,
             estimate: Estimate | None = None) -> list[str]:
        """Ids that :meth:`dispatch` would start with ``free`` budget, without starting them."""
        if self._pools is not None:
            return [k.id for k in self._pool_keys(running, now, estimate)]
        if self.dispatch_policy is Dispatch.BACKFILL:
            return [k.id for k in self._backfill_keys(free, running, now, estimate)]
        return [k.id for k in islice(self._order, self._startable(free))]

    def dispatch(self, free: int, running: Iterable[RunningChart] | None = None, now: float = 0.0,
                 estimate: Estimate | None = None) -> list[QueuedChart]:
        """Start what the dispatch policy starts within ``free`` (may be negative).

        ``strict``: the head-of-line walk: start each chart at the head that fits, stop at
        the first that does not. ``backfill``: the charts whose reservation is now
        (:mod:`.reserve`), given the ``running`` charts (their estimated finishes, by
        ``estimate``, default the queue's, from ``now``): O(depth x profile), whatever the
        backlog. The started charts leave the queue; each normal-tier one sets ``head`` to
        its round (under backfill, never past the smallest round still in the order).
        Their cost is ``cost_of(chart.org, chart.workflow)`` (read it now: a later
        ``set_cost`` does not touch in-flight work)."""
        if self._pools is not None or self.dispatch_policy is Dispatch.BACKFILL:
            keys = (self._pool_keys(running, now, estimate) if self._pools is not None
                    else self._backfill_keys(free, running, now, estimate))
            for k in keys:
                self._order.remove(k)
        else:
            keys = self._order.pop_head(self._startable(free))
        return self._started(keys)

    def dispatch_ids(self, ids: Iterable[str]) -> list[QueuedChart]:
        """Start exactly these charts of the order (those :meth:`peek` gave, which the caller
        really started), as :meth:`dispatch` starts them: the live scheduler's commit under
        backfill, where what started is not a prefix of the order. Ids not in the order
        are skipped. O(k log n)."""
        keys = []
        for cid in ids:
            e = self._entries.get(cid)
            if e is not None and e.key is not None:
                keys.append(e.key)
        for k in keys:
            self._order.remove(k)
        return self._started(keys)

    def _started(self, keys: list) -> list[QueuedChart]:
        started = []
        log = self.start_log
        guards = self._guards_now
        for k in keys:
            e = k.entry
            if guards and e.id in guards:  # started ahead under its guard: its window stays held
                self._guard_holds.append(guards.pop(e.id))
            self._ordered_n[e.org] -= 1
            self._forget(e)
            e.key = None
            e.state = ""
            normal = k.tier == TIER_NORMAL
            self._dispatched(e, normal, e.round)
            if log is not None:
                log.append(("dispatch", e.id, normal, e.round, self._head))
            started.append(e.chart())
        return started

    def _pool_keys(self, running: Iterable[RunningChart] | None, now: float = 0.0, estimate=None) -> list:
        """With pools: the keys :func:`.pools.dispatch_walk` starts now, given what the
        ``running`` charts hold (each its ``demand``, else its pair's now); ``free`` is not
        read. In a partial queue, none past the horizon. Under backfill (with limits or
        without), the keys whose reservation per pool is now (:meth:`_pool_backfill_keys`)."""
        pools = self._pools
        if self.dispatch_policy is Dispatch.BACKFILL:
            return self._pool_backfill_keys(running, now, estimate)
        keys = self._order if self._horizon is None else self._keys_within_horizon()
        if not pools.has_limits:  # the walk alone, no reasons (what a decision needs)
            free = dict(pools.capacity)
            for r in running or ():
                d = r.demand  # Pools.held inline: the live decision's own loop, run at each decision
                for p, u in (d if d is not None else pools.demand(r.org, r.workflow)):
                    if p in free:  # (a pool no longer listed: nothing to take from)
                        free[p] -= u
            return starts_keyed(keys, pools.demands, free, _PAIR_AT)
        use = Usage()
        for r in running or ():
            use.take(r.org, pools.held(r))
        walked: list = []

        def charts():
            for k in keys:
                walked.append(k)
                yield k.entry.org, pools.demand(*k.pair)

        started, _ = dispatch_walk(charts(), pools, use)
        return [walked[i] for i in started]

    def _keys_within_horizon(self) -> Iterator:
        """The keys of the order from the head, none past a partial queue's horizon."""
        h = self._horizon
        return takewhile(lambda k: k[:4] <= h, self._order)

    def _backfill_keys(self, free: int, running, now: float, estimate) -> list:
        """The keys whose reservation is now: the first ``depth`` charts of the order (in a
        partial queue, none past the horizon) reserved by :func:`.reserve.startable_now`,
        then those of the strict walk after them that start now too."""
        estimate = estimate or self._estimate
        bound = self._bound
        running = list(running or ())
        rem = [(max(0.0, r.started_at + estimate(r.org, r.workflow) - now), r.cost) for r in running]
        used = sum(r.cost for r in running)
        if not running and free < self._budget:
            rem = [(_FOREVER, self._budget - free)]  # nothing known of the running: never frees
            used = self._budget - free
        profile = Profile(free + used, rem, now)
        if profile.now_free() < 1:
            return []
        keys = list(islice(self._order, self.depth))
        if self._horizon is not None:
            h = self._horizon
            keys = list(takewhile(lambda k: k[:4] <= h, keys))
        items = [_item(k, estimate, bound) for k in keys]
        self._guard_holds = holds = [h for h in self._guard_holds if h[2] > now]
        profile.hold(holds, now)
        guarded: list[int] = []
        picked = [keys[i] for i in startable_now(items, profile, guarded)]
        self._guards_now = {keys[i].id: (now, now + items[i][1], window_end(now + items[i][2]), items[i][0])
                            for i in guarded}
        if len(keys) == self.depth and self._horizon is None and profile.now_free() >= 1:
            # the strict walk after the reserved charts starts now what fits in the budget
            # free for good from now (the guards' windows held, as the ETA pass's lanes):
            # the head-of-line walk within it
            tail = list(islice(self._order, self.depth, self.depth + max(0, profile.now_free())))
            picked += tail[:head_of_line((k.entry.cost for k in tail), profile.free_for_good())]
        return picked

    def _running_demands(self, running, now: float, estimate) -> list[tuple[float, tuple, str]]:
        """(remaining seconds, demand, org) of each running chart, with pools."""
        pools = self._pools
        return [(max(0.0, r.started_at + estimate(r.org, r.workflow) - now),
                 pools.held(r), r.org) for r in running or ()]

    def _pool_items(self, keys, estimate) -> list[tuple[tuple, float, float]]:
        """(demand, estimate, 90% bound) of the charts of ``keys``, for reservations per pool."""
        pools, bound = self._pools, self._bound
        out = []
        for k in keys:
            org, wf = k.pair
            d = float(estimate(org, wf))
            out.append((pools.demand(org, wf), d, float(bound(org, wf)) if bound is not None else d * P90_RATIO))
        return out

    def _pool_backfill_keys(self, running, now: float, estimate) -> list:
        """Backfill with pools (:mod:`.pool_reserve`): the keys of the first ``depth`` charts
        (in a partial queue, none past the horizon) whose reservation per pool is now, then
        those of the strict walk per pool after them that start now too. With limits, each
        org's ceilings and minimums are kept (:mod:`.pool_reserve`), and the walk after the
        reserved charts is the strict walk with limits (:func:`.pools.dispatch_walk`) from
        what the reservations leave (:func:`.pool_reserve.tail_running`)."""
        estimate = estimate or self._estimate
        pools = self._pools
        prof = PoolProfiles(pools.capacity, self._running_demands(running, now, estimate), now, pools.limits)
        if not prof.any_free_now():
            return []
        keys = list(islice(self._order, self.depth))
        if self._horizon is not None:
            h = self._horizon
            keys = list(takewhile(lambda k: k[:4] <= h, keys))
        items = self._pool_items(keys, estimate)
        self._guard_holds = holds = [h for h in self._guard_holds if h[2] > now]
        prof.hold(holds, now)
        guarded: list[int] = []
        orgs = [k.entry.org for k in keys] if prof.limits else None
        picked = [keys[i] for i in pool_startable_now(items, prof, guarded, orgs)]
        self._guards_now = {keys[i].id: (now, now + items[i][1], window_end(now + items[i][2]),
                                         hold_units(prof.expand(keys[i].entry.org, items[i][0])))
                            for i in guarded}
        if len(keys) == self.depth and self._horizon is None and prof.any_free_now():
            picked += self._pool_tail_keys(prof)
        return picked

    def _pool_tail_keys(self, prof: PoolProfiles) -> list:
        """Backfill with pools, after the first ``depth`` charts: the keys the strict walk per
        pool starts now from what the reservations leave. Without limits, within the units
        free for good (the guards' windows held, as the ETA pass's lanes); with limits, the
        strict walk with limits (:func:`.pools.dispatch_walk`) from the running units the
        reservations leave (:func:`.pool_reserve.tail_running`)."""
        pools = self._pools
        tail: list = []

        def charts():
            for k in islice(self._order, self.depth, None):
                tail.append(k)
                yield k.entry.org, pools.demand(*k.pair)

        if not pools.has_limits:
            return [tail[i] for i in strict_now((d for _, d in charts()), prof.free_for_good())]
        use = Usage()
        for org, dem, rem in tail_running(prof):
            if rem > 0.0:
                use.take(org, dem)
        started, _ = dispatch_walk(charts(), pools, use)
        return [tail[i] for i in started]

    def next_release(self, now: float) -> float | None:
        """Under backfill, the next end of a guard's window after ``now`` (absolute): budget
        that charts reserved ahead may use from then on, so a moment to dispatch at even if
        nothing finishes then (the ETA pass counts on it). None: no window is held."""
        ends = [window_end(h[2]) for h in self._guard_holds if h[2] > now]
        return min(ends) if ends else None

    def _next_normal_round(self) -> float:
        """The smallest round of the normal tier still in the order (inf: none)."""
        k = self._order.first_from((TIER_NORMAL,))
        return math.inf if k is None or k.tier != TIER_NORMAL or k.entry.round is None else k.lead

    def _forget(self, e: _Entry) -> None:
        del self._entries[e.id]
        del self._by_org[e.org][e.id]
        self._changed.discard(e.id)
        if self.gone_log is not None:
            self.gone_log.append((e.org, e.round))

    def _touched(self, e: _Entry) -> None:
        if self.touched_log is not None:
            self.touched_log.append((e.org, e.round))

    def _dispatched(self, e: _Entry, normal: bool, r: int | None, head: int | None = None) -> None:
        """A chart ``e`` holding round ``r`` was dispatched: a normal-tier one sets ``head``
        to its round (and keeps counting for it: 1, or its share under Share.WORK). Under
        backfill the head never passes the smallest round still in the order, and never
        goes back: a chart started ahead of its round leaves the head where it is.
        ``head``: the head to set (a replay of what a partial queue did)."""
        if not normal or r is None:
            return
        if head is not None:
            self._head = head
        elif self.dispatch_policy is Dispatch.BACKFILL or self.out_of_order:
            m = self._next_normal_round()
            h = r if r < m else m
            if h > self._head:
                self._head = int(h)
        else:
            self._head = r
        org = e.org
        if self._disp_round.get(org) == r:
            self._disp_count[org] += e.share
        elif r >= self._disp_round.get(org, r):
            self._disp_round[org] = r
            self._disp_count[org] = e.share

    def replay(self, log: Iterable[tuple], holds: Iterable[tuple] | None = None) -> list[tuple[str, str]]:
        """Take out what a partial queue (the head of this order, restored from the same
        saved state) dispatched and removed, as it did: ``head`` and the rounds move
        exactly as they moved there, and the guards' windows are the head's (``holds``,
        its ``_guard_holds``; None: keep this queue's).
        A chart this queue does not hold arrived after its read: a priority chart (no
        round to count) or one already gone. Returns the ``(id, org)`` of each chart
        taken out."""
        if holds is not None:
            self._guard_holds = list(holds)
        out = []
        for kind, cid, *rest in log:
            e = self._entries.get(cid)
            if kind == "remove":
                if self.remove(cid) is not None:
                    out.append((cid, e.org))
                continue
            if e is None:
                continue
            normal, r, *head = rest
            self._take_out(e)
            self._forget(e)
            self._dispatched(e, normal, r, head[0] if head else None)
            out.append((cid, e.org))
        return out
