"""Discrete-event simulator (docs/scheduling.md): replays a trace of
arrivals through the same :class:`~scheduling.queue.FairQueue` the live
scheduler runs, on a simulated clock, beside the baselines ``fifo`` and
``proportional``.

At each instant, in this order: charts due to finish free their cost; events
apply in listing order; arrivals join in listing order; dispatch runs; then
each chart that arrived at this instant and is running or in the order gets
``eta_at_arrival_s`` = its ETA-pass ``finish_s`` + the instant.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from heapq import heappop, heappush
from operator import itemgetter
from typing import Callable, Iterable, Mapping, Sequence

from ..forecast import Forecaster, ForecastParams
from ..keys import fifo_key
from ..modes import Dispatch, EtaModel, Policy, Share
from ..pools import Pools
from ..queue import FairQueue
from ..reserve import DEFAULT_DEPTH
from ..rules import ORDERED, head_of_line, is_held
from ..share import DEFAULT_QUANTUM_S
from ..lanes import Durations
from ..types import QueuedChart, RunningChart

POLICIES = tuple(p.value for p in Policy)
_cost = itemgetter(1)
EVENT_KINDS = ("set_weight", "set_budget", "set_pool", "pause", "resume")
ETA_MODELS = tuple(m.value for m in EtaModel)


@dataclass(frozen=True, slots=True)
class Arrival:
    """A chart of the trace: arrives at ``at_s``, really lasts ``actual_s``."""

    id: str
    org: str
    workflow: str | None
    at_s: float
    actual_s: float
    priority: bool = False


@dataclass(frozen=True, slots=True)
class Event:
    """An operator change at ``at_s``. ``kind`` is one of ``EVENT_KINDS``:
    ``set_weight`` uses ``org`` and ``value``; ``set_budget`` ``value``;
    ``pause``/``resume`` ``chart``."""

    at_s: float
    kind: str
    org: str | None = None
    value: int | None = None
    chart: str | None = None


@dataclass(frozen=True, slots=True)
class SimChart:
    id: str
    org: str
    arrive_s: float
    start_s: float | None
    finish_s: float | None
    eta_at_arrival_s: float | None
    eta_p90_at_arrival_s: float | None = None  # the forecast model's 90% bound


@dataclass(frozen=True, slots=True)
class SimResult:
    """``charts`` in arrival (listing) order; ``summary`` see :func:`summarize`."""

    policy: Policy
    charts: list[SimChart]
    summary: dict = field(default_factory=dict)
    eta_model: EtaModel = EtaModel.LANES


def simulate(
    arrivals: Sequence[Arrival],
    events: Sequence[Event] = (),
    *,
    budget: int,
    weights: Mapping[str, int],
    costs: Mapping[tuple[str, str | None], int] | None = None,
    estimate: Callable[[str, str | None], float] = Durations(),
    policy: Policy | str = Policy.WRR,
    eta_model: EtaModel | str = EtaModel.LANES,
    forecast_params: ForecastParams | None = None,
    share: Share | str = Share.CHARTS,
    quantum_s: float = DEFAULT_QUANTUM_S,
    dispatch: Dispatch | str = Dispatch.STRICT,
    depth: int = DEFAULT_DEPTH,
    forecaster: Forecaster | None = None,
) -> SimResult:
    """Run the trace to completion (or until nothing more can start).

    ``eta_model``: ``"lanes"`` (the lane simulation of the order) or
    ``"forecast"`` (:mod:`scheduling.forecast`, told each arrival and each
    finish as it happens, so it knows only the past). Dispatch never reads it.
    ``forecaster``: the forecast model's :class:`Forecaster`, new and told nothing yet
    (default: one of ``estimate`` and ``forecast_params``)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}")
    if eta_model not in ETA_MODELS:
        raise ValueError(f"unknown eta_model {eta_model!r}")
    policy, eta_model = Policy(policy), EtaModel(eta_model)
    fc = None
    if eta_model is EtaModel.FORECAST:
        fc = forecaster if forecaster is not None else Forecaster(estimate, forecast_params or ForecastParams())
    sim = Sim(arrivals, events, budget=budget, weights=weights, costs=costs, estimate=estimate,
               policy=policy, forecaster=fc, share=share, quantum_s=quantum_s, dispatch=dispatch, depth=depth)
    while True:
        t = sim.next_instant()
        if t is None:
            break
        sim.account(t)
        sim.finish(t)                 # 1. finishes free their cost
        sim.apply_events(t)           # 2. events, in listing order
        arrived = sim.arrive(t)       # 3. arrivals, in listing order
        sim.dispatch(t)               # 4. dispatch
        sim.backlogged(t)
        sim.eta_at_arrival(t, arrived)  # 5. ETA at arrival
    charts = [SimChart(a.id, a.org, float(a.at_s), sim.start.get(a.id), sim.finish_at.get(a.id),
                       sim.eta.get(a.id), sim.p90.get(a.id)) for a in arrivals]
    summary = summarize(charts, dict(weights), sim.entitled, sim.contended_starts)
    summary.update(policy_figures(charts, arrivals, sim.cost_at_start, dict(weights), budget, sim.used_while_waiting,
                                  sim.window))
    return SimResult(policy, charts, summary, eta_model)


class Sim:
    """The state of one :func:`simulate` run and its steps at each instant."""

    def __init__(self, arrivals: Sequence[Arrival], events: Sequence[Event], *, budget: int,
                 weights: Mapping[str, int], costs, estimate: Callable, policy: Policy | str,
                 forecaster: Forecaster | None, share: Share | str = Share.CHARTS,
                 quantum_s: float = DEFAULT_QUANTUM_S, dispatch: Dispatch | str = Dispatch.STRICT,
                 depth: int = DEFAULT_DEPTH, pools: Pools | None = None) -> None:
        self.arrivals, self.events = arrivals, events
        # The enum a name names ("wrr" is Policy.WRR): every test below is by identity, and
        # a caller's string once made every one of them false, so that bench/due.py's "wrr"
        # ran the FIFO baseline.
        policy = Policy(policy)
        self.estimate, self.policy, self.fc = estimate, policy, forecaster
        self.by_id = {a.id: a for a in arrivals}
        self.q = FairQueue(budget=budget, weights=weights, costs=costs,
                           policy=Policy.WRR if policy is Policy.WRR else Policy.FIFO, share=share, quantum_s=quantum_s,
                           dispatch=dispatch, estimate=estimate, depth=depth, pools=pools)
        self.weights = dict(weights)
        self.arr_order = sorted(range(len(arrivals)), key=lambda i: arrivals[i].at_s)  # stable
        self.ev_order = sorted(range(len(events)), key=lambda i: events[i].at_s)
        self.ai = self.ei = 0
        self.start: dict[str, float] = {}
        self.finish_at: dict[str, float] = {}
        self.eta: dict[str, float] = {}
        self.p90: dict[str, float] = {}
        self.running: dict[str, RunningChart] = {}
        self.finishing: list[tuple[float, int, str]] = []  # (finish time, tie, id)
        self.used = 0  # sum of running costs
        self.tie = 0
        # fairness bookkeeping (see summarize): per org, entitled share while backlogged
        self.entitled: dict[str, float] = dict.fromkeys(weights, 0.0)
        self.contended_starts: dict[str, int] = dict.fromkeys(weights, 0)
        # policy figures (see policy_figures): budget-seconds used / offered while charts
        # waited in the order, and the window until the first org drained
        self.cost_at_start: dict[str, int] = {}
        self.used_while_waiting = [0.0, 0.0]
        self.window: list = [None, None]  # [every org backlogged since, the first drain]
        self._last_t = None

    def next_instant(self) -> float | None:
        """The next time anything happens (a finish, an event, an arrival, the end of a
        backfill guard's window while charts wait); None: the end."""
        t = math.inf
        if self.finishing:
            t = self.finishing[0][0]
        if self.ai < len(self.arr_order):
            t = min(t, self.arrivals[self.arr_order[self.ai]].at_s)
        if self.ei < len(self.ev_order):
            t = min(t, self.events[self.ev_order[self.ei]].at_s)
        if self._last_t is not None and self.q.order_len:  # (a guard's window ends: a dispatch, as live)
            release = self.q.next_release(self._last_t)
            if release is not None and release < t:
                t = release
        return None if t == math.inf else t

    def account(self, t: float) -> None:
        """Budget use while charts wait in the order, over [the last instant, t)."""
        last = self._last_t
        self._last_t = t
        if last is None or t <= last or not self.q.order_len:
            return
        self.used_while_waiting[0] += min(self.used, self.q.budget) * (t - last)
        self.used_while_waiting[1] += self.q.budget * (t - last)

    def backlogged(self, t: float) -> None:
        """The window of the Jain figure: from when every org with weight had charts in
        the order until the first of them had none."""
        if self.window[1] is not None:
            return
        active = [o for o, w in self.weights.items() if w > 0]
        full = bool(active) and all(self.q.ordered_count(o) for o in active)
        if self.window[0] is None:
            if full:
                self.window[0] = t
        elif not full:
            self.window[1] = t

    def finish(self, t: float) -> None:
        finishing = self.finishing
        while finishing and finishing[0][0] <= t:
            _, _, cid = heappop(finishing)
            self.used -= self.running.pop(cid).cost
            if self.fc is not None:
                a = self.by_id[cid]
                self.fc.observe_finish(a.org, a.workflow, a.actual_s, chart_id=cid,
                                       finished_at=self.finish_at[cid])

    def apply_events(self, t: float) -> None:
        q, events, ev_order = self.q, self.events, self.ev_order
        while self.ei < len(ev_order) and events[ev_order[self.ei]].at_s <= t:
            ev = events[ev_order[self.ei]]
            self.ei += 1
            if ev.kind == "set_weight":
                self.weights[ev.org] = ev.value
                q.set_weight(ev.org, ev.value)
                self.entitled.setdefault(ev.org, 0.0)
                self.contended_starts.setdefault(ev.org, 0)
            elif ev.kind == "set_budget":
                q.set_budget(ev.value)
            elif ev.kind == "pause":
                q.pause(ev.chart)  # only a queued chart; no-op otherwise
            elif ev.kind == "resume":
                q.resume(ev.chart)
            else:
                raise ValueError(f"unknown event kind {ev.kind!r}")

    def arrive(self, t: float) -> list[str]:
        arrivals, arr_order = self.arrivals, self.arr_order
        arrived = []
        while self.ai < len(arr_order) and arrivals[arr_order[self.ai]].at_s <= t:
            i = arr_order[self.ai]
            self.ai += 1
            a = arrivals[i]
            self.q.add(QueuedChart(a.id, a.org, a.workflow, a.at_s, i, priority=a.priority))
            arrived.append(a.id)
            if self.fc is not None:
                self.fc.observe_arrival(a.org, a.workflow, a.at_s)
        return arrived

    def dispatch(self, t: float) -> None:
        q = self.q
        free = q.budget - self.used
        demand = {o: q.ordered_count(o) for o in self.weights if q.ordered_count(o)}
        if self.policy is Policy.PROPORTIONAL:
            started = _proportional(q, free, self.weights)
        else:
            started = q.dispatch(free, self.running.values(), t, self.estimate)
        if started and demand:
            self._entitle(started, demand)
        for c in started:
            cost = q.cost_of(c.org, c.workflow)
            self.cost_at_start[c.id] = cost
            self.running[c.id] = RunningChart(c.id, c.org, c.workflow, t, cost)
            self.used += cost
            self.start[c.id] = float(t)
            fin = float(t) + self.by_id[c.id].actual_s
            self.finish_at[c.id] = fin
            self.tie += 1
            heappush(self.finishing, (fin, self.tie, c.id))

    def _entitle(self, started: list[QueuedChart], demand: dict[str, int]) -> None:
        """Fairness bookkeeping of one dispatch: each backlogged org's fair share of the
        starts, and the starts made while at least two orgs were backlogged."""
        for o, x in _waterfill(len(started), demand, self.weights).items():
            self.entitled[o] += x
        if len(demand) > 1:
            for c in started:
                self.contended_starts[c.org] += 1

    def eta_at_arrival(self, t: float, arrived: list[str]) -> None:
        if not arrived or self.policy is Policy.PROPORTIONAL:
            return
        q, running = self.q, self.running
        want = {cid for cid in arrived if cid in running or q.state_of(cid) == ORDERED}
        if not want:
            return
        forecast = self.fc is not None and self.policy is Policy.WRR
        if forecast:
            rep = self.fc.etas(q, running.values(), t, stop_after=want)
        else:
            rep = q.etas(running.values(), t, estimate=self.estimate, stop_after=want)
        for cid in want:
            e = rep.etas.get(cid)
            if e is None:
                continue
            self.eta[cid] = e.finish_s + t
            if forecast:
                a = self.by_id[cid]
                self.p90[cid] = self.fc.p90_finish(a.org, a.workflow, e) + t
                self.fc.record_eta(cid, t, self.eta[cid])


def _proportional(q: FairQueue, free: int, weights: Mapping[str, int]) -> list[QueuedChart]:
    """Baseline ``proportional``: split the free budget F across orgs as
    ``floor(F * q_X / Q + 0.5)`` slots, each org takes its oldest charts while
    they fit its slots; an overshoot of F is cut oldest first across orgs."""
    if free <= 0:
        return []
    groups: dict[str, list[QueuedChart]] = {}
    for c in q.iter_charts():  # fifo order = oldest first
        groups.setdefault(c.org, []).append(c)
    total = sum(len(g) for g in groups.values())
    if not total:
        return []
    picks: list[tuple[QueuedChart, int]] = []
    for org in weights:
        g = groups.get(org)
        if not g:
            continue
        slots = (2 * free * len(g) + total) // (2 * total)  # floor(F q / Q + 0.5), exact
        g_costs = [(c, q.cost_of(c.org, c.workflow)) for c in g]
        picks.extend(g_costs[:head_of_line(map(_cost, g_costs), slots)])  # the org's oldest, within its slots
    picks.sort(key=lambda p: fifo_key(p[0].created_at, p[0].seq))
    if sum(cost for _, cost in picks) > free:
        picks = picks[:head_of_line(map(_cost, picks), free)]  # the overshoot cut, oldest first
    for c, _ in picks:
        q.remove(c.id)
    return [c for c, _ in picks]


def _waterfill(n: int, demand: Mapping[str, int], weights: Mapping[str, int]) -> dict[str, float]:
    """Weighted max-min fair split of ``n`` starts among orgs wanting ``demand``:
    each gets ``n * w / W`` of what is left, capped at its demand."""
    out = dict.fromkeys(demand, 0.0)
    active = {o for o, d in demand.items() if d > 0 and not is_held(weights.get(o, 0))}
    left = float(n)
    while active and left > 1e-12:
        w_sum = sum(weights[o] for o in active)
        capped = {o for o in active if demand[o] - out[o] <= left * weights[o] / w_sum}
        if not capped:
            for o in active:
                out[o] += left * weights[o] / w_sum
            break
        for o in capped:
            left -= demand[o] - out[o]
            out[o] = float(demand[o])
        active -= capped
    return out


def _p95(xs: list[float]) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[max(0, math.ceil(0.95 * len(s)) - 1)]  # nearest rank


def jain(xs: Iterable[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 is perfectly fair, 1/n worst."""
    xs = list(xs)
    sq = sum(x * x for x in xs)
    if not xs or sq == 0:
        return None
    return sum(xs) ** 2 / (len(xs) * sq)


def summarize(charts: Sequence[SimChart], weights: Mapping[str, int],
              entitled: Mapping[str, float], contended_starts: Mapping[str, int]) -> dict:
    """Per-org fairness figures and Jain's index.

    ``share_of_starts``: the org's share of the *contended* starts (made while
    at least two orgs had charts in the order); ``share_of_weight``: its weight
    over the weights of the orgs with charts; ``fair_ratio``: its starts over
    its entitlement, where each dispatch of n charts entitles the orgs with
    charts in the order to their weighted max-min fair share of the n starts
    (``n * w / W``, capped at what the org has queued, the rest shared among
    the others); ``jain`` is Jain's index of the fair ratios (1 = every org
    got its weighted share while it waited)."""
    per: dict[str, dict] = {}
    by_org: dict[str, list[SimChart]] = {}
    for c in charts:
        by_org.setdefault(c.org, []).append(c)
    wsum = sum(weights.get(o, 0) for o in by_org) or 1
    n_contended = sum(contended_starts.values()) or 0
    ratios = []
    for org in [o for o in weights if o in by_org] + [o for o in by_org if o not in weights]:
        cs = by_org[org]
        waits = [c.start_s - c.arrive_s for c in cs if c.start_s is not None]
        starts = [c.start_s for c in cs if c.start_s is not None]
        ent = entitled.get(org, 0.0)
        got = len(starts)
        ratio = got / ent if ent > 0 else None
        if ratio is not None:
            ratios.append(ratio)
        per[org] = {
            "charts": len(cs),
            "started": got,
            "first_start_s": min(starts) if starts else None,
            "mean_wait_s": sum(waits) / len(waits) if waits else None,
            "p95_wait_s": _p95(waits),
            "max_wait_s": max(waits) if waits else None,
            "share_of_starts": (contended_starts.get(org, 0) / n_contended) if n_contended else None,
            "share_of_weight": weights.get(org, 0) / wsum,
            "fair_ratio": ratio,
        }
    return {"orgs": per, "jain": jain(ratios), "contended_starts": n_contended}


def _nearest(xs: list[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile of ``xs`` (None if empty)."""
    if not xs:
        return None
    s = sorted(xs)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def budget_shares(charts: Sequence[SimChart], arrivals: Sequence[Arrival], cost_at_start: Mapping[str, int],
                  t0: float, t1: float) -> dict[str, float]:
    """Each org's budget-seconds (cost x time running) inside the window [t0, t1)."""
    out: dict[str, float] = {}
    for c in charts:
        if c.start_s is None:
            continue
        a, b = max(c.start_s, t0), min(c.finish_s if c.finish_s is not None else t1, t1)
        if b > a:
            out[c.org] = out.get(c.org, 0.0) + cost_at_start.get(c.id, 1) * (b - a)
    for a in arrivals:
        out.setdefault(a.org, 0.0)
    return out


def policy_figures(charts: Sequence[SimChart], arrivals: Sequence[Arrival], cost_at_start: Mapping[str, int],
                   weights: Mapping[str, int], budget: int, used_while_waiting: Sequence[float],
                   window: Sequence[float | None]) -> dict:
    """The figures that compare the policies (docs/scheduling.md, "Comparing the policies"):

    - ``budget_use_while_waiting``: the budget-seconds used over those offered, counted
      only while at least one chart waited in the order (1: no budget idle while work waits),
      and ``budget_idle_while_waiting_s`` the budget-seconds left idle then;
    - ``budget_jain``: Jain's index, over the orgs with weight, of each org's share of the
      budget-seconds divided by its weight's share, in the window from when every such org
      had charts in the order until the first had none (``budget_window_s``; None if there
      was no such window), and per org ``budget_share`` / ``weight_share`` in it;
    - per org ``wait_p50_s`` and ``wait_p95_s`` (nearest rank)."""
    used, offered = used_while_waiting
    out: dict = {"budget_use_while_waiting": used / offered if offered else None,
                 "budget_idle_while_waiting_s": offered - used,
                 "budget_window_s": None, "budget_jain": None}
    waits: dict[str, list[float]] = {}
    for c in charts:
        if c.start_s is not None:
            waits.setdefault(c.org, []).append(c.start_s - c.arrive_s)
    per = {o: {"wait_p50_s": _nearest(w, 0.5), "wait_p95_s": _nearest(w, 0.95)} for o, w in waits.items()}
    t0, t1 = window
    active = [o for o, w in weights.items() if w > 0]
    if t0 is not None and t1 is not None and t1 > t0 and active:
        got = budget_shares(charts, arrivals, cost_at_start, t0, t1)
        total = sum(got.get(o, 0.0) for o in active)
        wsum = sum(weights[o] for o in active)
        ratios = []
        for o in active:
            bs = got.get(o, 0.0) / total if total else 0.0
            ws = weights[o] / wsum
            per.setdefault(o, {}).update(budget_share=bs, weight_share=ws)
            ratios.append(bs / ws)
        out["budget_window_s"] = t1 - t0
        out["budget_jain"] = jain(ratios)
    out["policy_orgs"] = per
    return out
