"""The forecast pass's walk (:mod:`.forecast`): the order fed to the lane walk with the
expected arrivals ("phantoms") let in as it goes, one budget's (:class:`PhantomRounds`,
:func:`forecast_items`, read by :func:`.lanes.lane_pass`) and the pools' (:class:`PoolPhantomRounds`,
:func:`pool_forecast_items`, read by :func:`.pool_lanes.walk_items`), and the real charts'
ETAs gathered from the walk (:class:`RealCharts`). :class:`.forecast.Forecaster` builds them;
docs/scheduling.md, "ETAs: the forecast model" and its "With pools".

``gen`` is the pass's :meth:`.forecast.Forecaster.expected_arrivals` (None: no phantoms).
No Django, no I/O.
"""
from __future__ import annotations

import math
from array import array
from heapq import heappop, heappush
from typing import Callable, Iterable

from .share import arrival_round
from .types import WalkEtas

NAN = float("nan")


class PhantomRounds:
    """The persistent round-robin state a forecast pass walks with (``head`` and each
    org's ``last``/``used``, copied from the queue), and the phantoms placed so far:
    a heap of (round, arrival, seq, cost, mean duration)."""

    __slots__ = ("gen", "head", "last", "used", "placed")

    def __init__(self, queue, gen) -> None:
        self.gen = gen
        self.head = queue.head
        rstate = queue.round_state()
        self.last = {o: lu[0] for o, lu in rstate.items()}
        self.used = {o: lu[1] for o, lu in rstate.items()}
        self.placed: list = []

    def before(self, rnd: int, lanes: list, nl: int):
        """The phantoms to walk before a real chart of round ``rnd``, as (cost,
        duration): those that arrived by the time it could start (``lanes[0]``)
        and took an earlier round. ``lanes`` must have taken each one yielded
        before the next is asked for (:func:`.lanes.lane_pass` does)."""
        gen, placed = self.gen, self.placed
        while True:
            gen.arrive_until(lanes[0], self.head, self.last, self.used, placed)
            if not placed or placed[0][0] >= rnd:
                return
            pr, _, _, pc, pest = heappop(placed)
            yield pc, pest
            if pc <= nl:  # it got lanes (lanes.lane_pass: None when c > lanes)
                self.head = pr


class PoolPhantomRounds:
    """:class:`PhantomRounds` with pools: the persistent round-robin state, the phantoms
    placed so far (a heap of (round, arrival, seq, parts, mean duration, pools)) and the
    ones arrived in time order but not let in yet (per pool, a heap by arrival).

    The rule (one budget's, pool by pool): a pool's clock is its earliest lane, not before
    its floor (``max(floor, lanes[0])``: the earliest a chart drawing on it alone could
    start now); a phantom is let in (takes its round, ``head`` being the round walked then)
    once the clock of a pool it draws on has reached its arrival, i.e. once the latest of
    its pools' clocks has, the earliest it could start if let in now. Its pools' walk has
    then reached its arrival, so it never starts before it arrives, and the pools it does
    not draw on never wait for it. The generator is read in time order up to the latest
    clock of all pools (no phantom arriving later can be let in anywhere); a phantom whose
    pools' clocks have not reached its arrival waits, without holding back the others.
    After each item walked, the phantoms waiting on its pools are let in (pool by pool,
    each pool's in arrival order), then those newly read. A phantom that draws
    on no pool with lanes (capacity 0) is never let in (it could never start). With one
    pool every chart draws on, its clock is its earliest lane (the floor is never above
    it), so every phantom read is let in at once, as in one budget."""

    __slots__ = ("gen", "head", "last", "used", "placed", "pools", "lanes", "index", "floor", "parts_of",
                 "waiting", "clock", "lane_of", "weights", "cost_of")

    def __init__(self, queue, gen, pools, lanes: dict, index: dict, floor: list,
                 parts_of: Callable) -> None:
        self.gen = gen
        self.head = queue.head
        rstate = queue.round_state()
        self.last = {o: lu[0] for o, lu in rstate.items()}
        self.used = {o: lu[1] for o, lu in rstate.items()}
        self.placed: list = []
        self.pools, self.index, self.floor, self.parts_of = pools, index, floor, parts_of
        self.lane_of = [lanes[pool] for pool in index]  # each pool's lanes, by its place in ``floor``
        self.waiting: list[list] = [[] for _ in index]
        self.clock = -math.inf
        if gen is not None:
            self.after(range(len(index)))

    def _clock(self, k: int) -> float:
        ln = self.lane_of[k]
        f = self.floor[k]
        return f if not ln or ln[0] < f else ln[0]

    def after(self, touched: Iterable[int]) -> None:
        """The walk has just moved the pools ``touched`` (their places in ``floor``): the
        phantoms waiting on them whose arrival their clock has reached are let in, then
        those the generator gives up to the latest clock (let in or set waiting). The
        clocks are :meth:`_clock`'s, inlined: this runs once per item walked."""
        waiting, lane_of, floor = self.waiting, self.lane_of, self.floor
        top = self.clock
        for k in touched:
            ln = lane_of[k]
            c = floor[k]
            if ln and ln[0] > c:
                c = ln[0]
            if c > top:
                top = c
            w = waiting[k]
            while w and w[0][0] <= c:
                rec = heappop(w)[2]
                if rec[5]:  # not let in yet (by another of its pools)
                    self._place(rec)
        self.clock = top
        heap = self.gen.heap
        if heap and heap[0][0] <= top:
            self._read(top)

    def _read(self, top: float) -> None:
        """The generator's phantoms arriving by ``top``: each let in if the latest clock of
        its pools has reached its arrival, else set waiting on each of them."""
        gen, lane_of, index, waiting, clock = self.gen, self.lane_of, self.index, self.waiting, self._clock
        while True:
            nxt = gen.take(top)
            if nxt is None:
                return
            at, org, wf = nxt
            demand = self.pools.demand(org, wf)
            ks = tuple(index[pool] for pool, _ in demand if pool in index and lane_of[index[pool]])
            if not ks:
                continue  # it draws on no pool with lanes: it never starts
            rec = [at, gen.seq, org, self.parts_of(demand), gen.mean(org, wf), ks]
            if max(map(clock, ks)) >= at:
                self._place(rec)
            else:
                for k in ks:
                    heappush(waiting[k], (at, gen.seq, rec))

    def _place(self, rec: list) -> None:
        at, seq, org, parts, est, ks = rec
        rec[5] = ()  # let in
        r, self.used[org] = arrival_round(self.head, self.last.get(org), self.used.get(org, 0),
                                          self.gen.weights[org])
        self.last[org] = r
        heappush(self.placed, (r, at, seq, parts, est, ks))


def pool_forecast_items(queue, pools, ph: PoolPhantomRounds, real: "RealCharts", mean: Callable,
                         parts_of: Callable, pending: "set[str] | None"):
    """:func:`forecast_items` with pools: the ``(parts, duration)`` items of the pools' walk
    (:func:`.pool_lanes.walk_items`), each chart preceded by the placed phantoms of an
    earlier round; after each item has taken its lanes, the phantoms its pools' clocks
    let in (:meth:`PoolPhantomRounds.after`)."""
    info, own = real.info, real.own
    idx, ids, orgs, durs = real.idx.append, real.ids.append, real.orgs.append, real.durs.append
    placed = ph.placed
    on = ph.gen is not None
    n = 0
    for cid, pair, rnd in queue.walk():
        ce = info.get(pair)
        if ce is None:
            sp = parts_of(pools.demand(pair[0], pair[1]))
            ce = info[pair] = ((sp, mean(*pair)), own(*pair), () if sp is None else tuple(x[1] for x in sp))
        if ce[0][0] is None:  # it never fits: no ETA, its place in the walk all the same
            idx(-1)
            ids(cid)
            orgs(pair[0])
            durs(NAN)
            continue
        if on and rnd is not None:
            while placed and placed[0][0] < rnd:
                pr, _, _, sp, est, ks = heappop(placed)
                yield sp, est
                n += 1
                if sp is not None:  # it got lanes
                    ph.head = pr
                    ph.after(ks)
        idx(n)
        ids(cid)
        orgs(pair[0])
        durs(ce[1])
        yield ce[0]
        n += 1
        if rnd is not None:
            ph.head = rnd
        if on:
            ph.after(ce[2])
        if pending is not None and cid in pending:
            pending.discard(cid)
            if not pending:
                return


class RealCharts:
    """The queue's charts a forecast pass walked: where each sits among the items
    given to the lane walk, and its own duration (``own``), to turn the walk's
    starts into their ETAs."""

    __slots__ = ("own", "info", "idx", "ids", "orgs", "durs")

    def __init__(self, own: Callable) -> None:
        self.own = own
        self.info: dict = {}  # (org, workflow) -> ((cost, mean duration), own duration)
        self.idx = array("q")  # (machine integers: an int object a chart less)
        self.ids: list[str] = []
        self.orgs: list[str] = []
        self.durs: list[float] = []

    def collect(self, starts: list, head: dict, org_clear: dict) -> WalkEtas:
        """Each chart's ETA (its start plus its own duration), after ``head`` (the running
        charts'), as columns aligned with the walk; its org's clear-time raised to its
        finish in ``org_clear``. A chart whose cost is above the lanes has none (NaN)."""
        starts.append(NAN)  # what a chart with no lanes (place -1) reads
        st = array("d", [starts[i] for i in self.idx])
        fins = array("d", [a + b for a, b in zip(st, self.durs)])
        for org, fin in zip(self.orgs, fins):
            if fin > org_clear[org]:  # (never for NaN)
                org_clear[org] = fin
        return WalkEtas(head, self.ids, st, fins)


def forecast_items(queue, lanes: list, ph: PhantomRounds, real: RealCharts, mean: Callable,
                    pending: "set[str] | None"):
    """The (cost, duration) items of a forecast pass, for :func:`.lanes.lane_pass`: the
    queue's order, each chart preceded by the phantoms that go before it; the charts
    recorded in ``real``. Ends after the last of ``pending`` (None: the whole order)."""
    nl = len(lanes)
    cost_of = queue.cost_of
    info, own = real.info, real.own
    idx, ids, orgs, durs = real.idx.append, real.ids.append, real.orgs.append, real.durs.append
    n = 0
    for cid, pair, rnd in queue.walk():
        ce = info.get(pair)
        if ce is None:
            ce = info[pair] = ((cost_of(pair[0], pair[1]), mean(*pair)), own(*pair))
        if ce[0][0] > nl:  # no ETA: its place in the walk all the same (WalkEtas)
            idx(-1)
            ids(cid)
            orgs(pair[0])
            durs(NAN)
            continue
        if ph.gen is not None and rnd is not None:
            for item in ph.before(rnd, lanes, nl):
                yield item
                n += 1
        idx(n)
        ids(cid)
        orgs(pair[0])
        durs(ce[1])
        yield ce[0]
        n += 1
        if rnd is not None:
            ph.head = rnd
        if pending is not None and cid in pending:
            pending.discard(cid)
            if not pending:
                return
