"""The ETA passes of :class:`~scheduling.queue.FairQueue` (a mixin; the state is the
queue's): the lane simulation of docs/scheduling.md over the running charts and the order."""
from __future__ import annotations

from itertools import chain, islice
from operator import itemgetter
from typing import Callable, Iterable, Sequence

from ..keys import QueueKey, TIER_NORMAL
from ..modes import Dispatch
from ..lanes import Durations, initial_lanes, lane_count, lane_pass, running_clear
from ..plan import collect_etas, gc_paused, unplanned_clear
from ..reserve import P90_RATIO, Profile, reserve_walk
from ..pool_lanes import RunningUse, pool_etas, walk_lanes
from ..pool_reserve import PoolProfiles, reserve_walk as pool_reserve_walk, tail_running
from ..types import Eta, EtaReport, Plan, RunningChart

# the hot passes gather a field of every key at C speed, by its position in the named tuple
_kid = itemgetter(QueueKey._fields.index("id"))
_kpair = itemgetter(QueueKey._fields.index("pair"))


class QueueEtas:
    """ETAs and the plan of the live order."""

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
        if self._pools is not None:
            return self._pool_pass(running, now, estimate)
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
        skip = 0
        if self.dispatch_policy is Dispatch.BACKFILL:
            # the reservations of the first ``depth`` charts, as dispatch makes them; the
            # strict walk after them from the lanes they leave
            lanes, skip = self._reserve_head(running, now, etas, org_clear, budget, estimate, cap, pending)
            if skip < self.depth or (pending is not None and not pending):
                return EtaReport(etas, org_clear, max(org_clear.values(), default=0.0))
        if pending is None:
            # the full pass, vectorised: C-level gathers around one tight heap loop
            with gc_paused():
                return self._full_pass(lanes, etas, org_clear, estimate, skip)
        # a partial pass (the simulator's ETA at arrival): the same lane walk, a
        # stretch of the order at a time, until every pending chart has its ETA
        return self._partial_pass(lanes, etas, org_clear, estimate, pending, skip)

    def _reserve_head(self, running, now, etas, org_clear, budget, estimate, cap, pending) -> tuple[list, int]:
        """Backfill's ETAs of the first ``depth`` charts (:func:`.reserve.reserve_walk`,
        the reservations dispatch makes), added to ``etas`` and ``org_clear`` (and taken
        from ``pending``). Returns the lanes they leave (a heap) and how many were walked."""
        bound = self._bound
        profile = Profile(budget, [(etas[r.id].finish_s, r.cost) for r in running], now)
        profile.hold(self._guard_holds, now)
        keys = list(islice(self._order, self.depth))
        costs = self._costs
        items = []
        for k in keys:
            org, wf = k.pair
            d = float(estimate(org, wf))
            items.append((costs.get(k.pair, 1), d, float(bound(org, wf)) if bound is not None else d * P90_RATIO))
        starts, fins = reserve_walk(items, profile)
        collect_etas([k.id for k in keys], [k.pair[0] for k in keys], starts, fins, etas, org_clear)
        if pending is not None:
            pending.difference_update(k.id for k, f in zip(keys, fins) if f is not None)
        return profile.lanes(cap), len(keys)

    def _sublists_from(self, skip: int):
        """The order's sublists, the first ``skip`` keys left out."""
        for keys in self._order.sublists():
            if skip >= len(keys):
                skip -= len(keys)
                continue
            yield keys[skip:] if skip else keys
            skip = 0

    def _partial_pass(self, lanes, etas, org_clear, estimate, pending, skip: int = 0) -> EtaReport:
        """:func:`.lanes.lane_pass` over the order one stretch (a sublist of the sorted
        keys) at a time, stopping after the chart that gives the last of ``pending``
        its ETA: ETAs and clear-times cover the order up to there."""
        costs = self._costs
        info: dict = {}  # (org, workflow) -> (cost, estimate), once per pass
        for keys in self._sublists_from(skip):
            cost_est = []
            for k in keys:
                pair = k.pair
                ce = info.get(pair)
                if ce is None:
                    ce = info[pair] = (costs.get(pair, 1), float(estimate(pair[0], pair[1])))
                cost_est.append(ce)
            starts, fins = lane_pass(cost_est, lanes)
            n = len(keys)
            for i, k in enumerate(keys):
                if fins[i] is not None and k.id in pending:
                    pending.discard(k.id)
                    if not pending:
                        n = i + 1
                        break
            collect_etas([k.id for k in keys[:n]], [k.pair[0] for k in keys[:n]], starts[:n], fins[:n],
                         etas, org_clear)
            if not pending:
                break
        return EtaReport(etas, org_clear, max(org_clear.values(), default=0.0))

    def _ordered_cost(self) -> int:
        """The total cost of the charts in the order (O(n); see :func:`lane_count`)."""
        costs = self._costs
        return sum(costs.get(k.entry.pair, 1) for k in chain.from_iterable(self._order.sublists()))

    def _full_pass(self, lanes, etas, org_clear, estimate, skip: int = 0) -> EtaReport:
        costs = self._costs
        keys = list(chain.from_iterable(self._order.sublists()))
        if skip:
            del keys[:skip]
        pairs = list(map(_kpair, keys))
        info = {pair: (costs.get(pair, 1), float(estimate(pair[0], pair[1])))
                for pair in set(pairs)}
        starts, fins = lane_pass(list(map(info.__getitem__, pairs)), lanes)
        collect_etas(list(map(_kid, keys)), (), starts, fins, etas, org_clear, pairs)
        return EtaReport(etas, org_clear, max(org_clear.values(), default=0.0))

    def _pool_pass(self, running: list, now: float, estimate) -> EtaReport:
        """With pools: :func:`.pool_lanes.pool_etas` over the running charts and the whole order
        (a full pass: ``budget`` and ``stop_after`` are not read)."""
        pools = self._pools
        etas: dict[str, Eta] = {}
        org_clear: dict[str, float] = dict.fromkeys(self._weights, 0.0)
        run = []
        for r in running:
            rem = max(0.0, r.started_at + estimate(r.org, r.workflow) - now)
            etas[r.id] = Eta(0.0, rem)
            if rem > org_clear.get(r.org, 0.0):
                org_clear[r.org] = rem
            run.append(RunningUse(r.org, pools.held(r), rem))
        keys = list(self._order)
        items = [(k.entry.org, pools.demand(*k.pair), float(estimate(*k.pair))) for k in keys]
        if self.dispatch_policy is Dispatch.BACKFILL:
            starts, fins = self._pool_reserve_pass(keys, items, run, now, estimate)
        else:
            starts, fins = pool_etas(items, run, pools)
        for k, s, f in zip(keys, starts, fins):
            etas[k.id] = Eta(s, f)
            if f > org_clear.get(k.entry.org, 0.0):
                org_clear[k.entry.org] = f
        return EtaReport(etas, org_clear, max(org_clear.values(), default=0.0))

    def _pool_reserve_pass(self, keys, items, run, now, estimate) -> tuple[list, list]:
        """Backfill's ETAs with pools: the reservations per pool of the first ``depth``
        charts (:func:`.pool_reserve.reserve_walk`, those dispatch makes), then the strict
        walk per pool after them from the lanes they leave (:func:`.pool_lanes.walk_lanes`).
        With limits, the reservations keep each org's ceilings and minimums, and the walk
        after them is the strict walk with limits fast-forwarded (:func:`.pool_lanes.pool_etas`)
        from what they leave (:func:`.pool_reserve.tail_running`), as dispatch walks it."""
        pools = self._pools
        prof = PoolProfiles(pools.capacity, [(u.remaining_s, u.demand, u.org) for u in run], now, pools.limits)
        prof.hold(self._guard_holds, now)
        head = keys[:self.depth]
        starts, fins = pool_reserve_walk(self._pool_items(head, estimate), prof,
                                         [k.entry.org for k in head] if prof.limits else None)
        if len(keys) > len(head) and pools.has_limits:
            s2, f2 = pool_etas(items[len(head):], [RunningUse(*x) for x in tail_running(prof)], pools)
            starts, fins = starts + list(s2), fins + list(f2)
        elif len(keys) > len(head):
            rest = items[len(head):]
            drawn: dict[str, int] = {}
            for _, dem, _ in rest:
                for p, u in dem:
                    drawn[p] = drawn.get(p, 0) + u
            s2, f2 = walk_lanes(rest, prof.lanes(drawn))
            starts, fins = starts + list(s2), fins + list(f2)
        return starts, fins

    def plan(
        self,
        running: Sequence[RunningChart],
        now: float,
        estimate: Callable[[str, str | None], float] = Durations(),
    ) -> Plan:
        """The plan of the live state (``manage.py plan --live``): the same
        fields as :func:`scheduling.plan` on a dump of this queue."""
        running = list(running)
        free = self._budget - sum(r.cost for r in running)
        rep = self.etas(running, now, self._budget, estimate)
        order = []
        rounds = {}
        for k in self._order:
            order.append(k.id)
            if k.tier == TIER_NORMAL and k.entry.round is not None:
                rounds[k.id] = k.entry.round
        return Plan(order=order, dispatch=self.peek(free, running, now, estimate), held=self.held,
                    paused=self.paused, blocked=self.blocked, etas=rep.etas,
                    org_clear_s=rep.org_clear_s, clear_s=rep.clear_s, rounds=rounds,
                    org_unplanned=rep.org_unplanned)
