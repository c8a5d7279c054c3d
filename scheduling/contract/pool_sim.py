"""The simulator with capacity pools (docs/scheduling.md, "Pools", ``simulate`` with pools):
the same :class:`~scheduling.contract.simulator.Sim` steps, the order the live
:class:`~scheduling.queue.FairQueue`'s with the pools, dispatch the pools' walk and the ETA
at arrival the pools' pass."""
from __future__ import annotations

from heapq import heappop, heappush
from typing import Callable, Mapping, Sequence

from ..forecast import Forecaster, ForecastParams
from ..lanes import Durations
from ..modes import Dispatch, EtaModel, Policy, Share
from ..pools import DEFAULT_POOL, Pools, Usage
from ..rules import ORDERED
from ..share import DEFAULT_QUANTUM_S
from ..types import RunningChart
from .simulator import Arrival, Event, Sim, SimChart, SimResult, summarize


def simulate_pools(arrivals: Sequence[Arrival], events: Sequence[Event] = (), *, pools: Pools,
                   weights: Mapping[str, int], estimate: Callable[[str, str | None], float] = Durations(),
                   share: Share | str = Share.CHARTS, quantum_s: float = DEFAULT_QUANTUM_S,
                   dispatch: Dispatch | str = Dispatch.STRICT, eta_model: EtaModel | str = EtaModel.LANES,
                   forecast_params: ForecastParams | None = None, forecaster: Forecaster | None = None,
                   ) -> SimResult:
    """:func:`simulate` with capacity pools (docs/scheduling.md, "Pools"): the order is the
    same :class:`FairQueue`'s, dispatch is :func:`.pools.dispatch_walk` and the ETA at
    arrival :func:`.pool_lanes.pool_etas`; under ``dispatch`` backfill (with limits or without) the
    queue's reservations per pool start what they start now and give the ETA at arrival
    (:mod:`.pool_reserve`). ``set_budget`` sets the pool ``default``, ``set_pool``
    (``org`` the pool, ``value`` its capacity) another. The summary adds each pool's
    capacity at the end and its peak units in use (``pools``).

    ``eta_model`` ``"forecast"`` (strict dispatch, no limits): the ETA at arrival is the
    forecast's pass with the pools (:meth:`.forecast.Forecaster.etas`), told each arrival
    and each finish as it happens, as :func:`simulate` does; each chart gets its 90% bound
    too."""
    eta_model = EtaModel(eta_model)
    fc = None
    if eta_model is EtaModel.FORECAST:
        if Dispatch(dispatch) is Dispatch.BACKFILL or pools.has_limits:
            raise ValueError("the forecast model with pools is defined for strict dispatch without limits")
        fc = forecaster if forecaster is not None else Forecaster(estimate, forecast_params or ForecastParams())
    sim = _PoolSim(arrivals, events, pools=pools, weights=weights, estimate=estimate, share=share,
                   quantum_s=quantum_s, dispatch=dispatch, forecaster=fc)
    while True:
        t = sim.next_instant()
        if t is None:
            break
        sim._last_t = t  # (under backfill, the next instant may be a guard's window's end)
        sim.finish(t)
        sim.apply_events(t)
        arrived = sim.arrive(t)
        sim.dispatch(t)
        sim.eta_at_arrival(t, arrived)
    charts = [SimChart(a.id, a.org, float(a.at_s), sim.start.get(a.id), sim.finish_at.get(a.id),
                       sim.eta.get(a.id), sim.p90.get(a.id)) for a in arrivals]
    summary = summarize(charts, dict(weights), sim.entitled, sim.contended_starts)
    summary["pools"] = {p: {"capacity": c, "peak_in_use": sim.peak.get(p, 0)} for p, c in pools.capacity.items()}
    return SimResult(Policy.WRR, charts, summary, eta_model)


class _PoolSim(Sim):
    """A :func:`simulate_pools` run: the queue orders and classifies by the pools
    (``FairQueue(pools=...)``: blocked by :meth:`.pools.Pools.never`; under the share
    ``work`` a chart's work is its dominant share, DRF), the pools' walk decides what starts."""

    def __init__(self, arrivals, events, *, pools: Pools, weights, estimate, share, quantum_s,
                 dispatch: Dispatch | str = Dispatch.STRICT, forecaster: Forecaster | None = None) -> None:
        self.pools = Pools(dict(pools.capacity), dict(pools.demands), dict(pools.limits))
        super().__init__(arrivals, events, budget=self.pools.capacity[DEFAULT_POOL], weights=weights, costs={},
                         estimate=estimate, policy=Policy.WRR, forecaster=forecaster, share=share, quantum_s=quantum_s,
                         dispatch=dispatch, pools=self.pools)
        self.use = Usage()
        self.peak: dict[str, int] = {}
        self.demand: dict[str, tuple] = {}

    def finish(self, t: float) -> None:
        while self.finishing and self.finishing[0][0] <= t:
            _, _, cid = heappop(self.finishing)
            r = self.running.pop(cid)
            self.use.take(r.org, self.demand[cid], -1)
            if self.fc is not None:
                a = self.by_id[cid]
                self.fc.observe_finish(a.org, a.workflow, a.actual_s, chart_id=cid, finished_at=self.finish_at[cid])

    def apply_events(self, t: float) -> None:
        events, ev_order = self.events, self.ev_order
        while self.ei < len(ev_order) and events[ev_order[self.ei]].at_s <= t:
            ev = events[ev_order[self.ei]]
            self.ei += 1
            if ev.kind in ("set_budget", "set_pool"):
                self.pools.capacity[DEFAULT_POOL if ev.kind == "set_budget" else ev.org] = ev.value
                self.q.set_budget(self.pools.capacity[DEFAULT_POOL])
                self.q.set_pools(self.pools)  # what is blocked, and under work every dominant share, moved
            elif ev.kind == "set_weight":
                self.weights[ev.org] = ev.value
                self.q.set_weight(ev.org, ev.value)
            elif ev.kind == "pause":
                self.q.pause(ev.chart)
            else:
                self.q.resume(ev.chart)

    def dispatch(self, t: float) -> None:
        """What the queue starts by the pools (``FairQueue(pools=...)``: the pools' walk, or under
        backfill their reservations), each running chart holding the demand it started with."""
        q, by_id, pools = self.q, self.by_id, self.pools
        demand = {o: q.ordered_count(o) for o in self.weights if q.ordered_count(o)}
        charts = q.dispatch(0, self.running.values(), t, self.estimate)
        if charts and demand:
            self._entitle(charts, demand)
        for c in charts:
            d = self.demand[c.id] = pools.demand(c.org, c.workflow)
            self.use.take(c.org, d)
            self.running[c.id] = RunningChart(c.id, c.org, c.workflow, t, 1, d)
            self.start[c.id] = float(t)
            fin = self.finish_at[c.id] = float(t) + by_id[c.id].actual_s
            self.tie += 1
            heappush(self.finishing, (fin, self.tie, c.id))
        for p, u in self.use.pool.items():
            if u > self.peak.get(p, 0):
                self.peak[p] = u

    def eta_at_arrival(self, t: float, arrived: list[str]) -> None:
        """The queue's own ETA pass with the pools (the one its dispatch agrees with), or
        the forecast's pass with the pools, as :meth:`Sim.eta_at_arrival` (a partial pass)."""
        if self.fc is not None:
            return super().eta_at_arrival(t, arrived)
        want = [c for c in arrived if c in self.running or self.q.state_of(c) == ORDERED]
        if not want:
            return
        rep = self.q.etas(self.running.values(), t, estimate=self.estimate)
        for c in want:
            if c in rep.etas:
                self.eta[c] = rep.etas[c].finish_s + t
