"""The forecasting ETA model (simulate.md v2, "ETA models": ``eta_model = "forecast"``).

The lane simulation of the current order (:meth:`FairQueue.etas`) is optimistic
by construction: charts of other orgs that arrive *later* take *earlier*
rounds than a chart already waiting (that is what fairness means), and the
lane simulation cannot see them coming. The forecast adds what the past says
about the future, and nothing else:

1. **Phantom arrivals.** Each org's arrival rate is estimated from its arrivals
   so far (its long-run rate: arrivals over the time observed, at least a
   quarter of an hour, so a first burst is not taken for a rate). The forecast pass walks the
   order through the budget lanes like the lane simulation, and while it walks
   it lets the expected future charts of every org arrive at their expected
   times; each takes the round the persistent round-robin would give it
   (:func:`.share.arrival_round`, with ``head`` the round being walked at that
   time) and is walked in that round, after the real charts of the round (it
   is younger). The walk is the lane simulation's own, :func:`.lanes.lane_pass`,
   fed the order with the phantoms let in as it goes.
   So a chart far back in a busy org's queue sees the small orgs' future charts
   pass it, as they will. The projected rate fades with the distance into the
   future (``exp(-t / fade_s)``): traffic changes, and an ETA that assumes the
   current rate for hours is as wrong as one that assumes no arrivals at all
   (``bench/eta.py`` measured both; a recent-rate EWMA blended in was no better).
   Each phantom's workflow (so cost and duration) follows its org's mix so far.
2. **Durations learned from finished charts.** Per (org, workflow) the mean of
   the durations seen so far, shrunk towards the prior estimate (the trace's
   averages, or the live scheduler's historical means) with ``prior_n``
   pseudo-observations, and the spread of their logarithms (a log-normal fit)
   for the median and the 90th percentile (:meth:`Forecaster.p90`). Charts
   occupy the lanes for their mean; a chart's own finish is its start plus its
   mean (``own="median"`` was measured too: a little worse).

It learns only from what it was told through :meth:`Forecaster.observe_arrival`
and :meth:`Forecaster.observe_finish` and from the queue and running charts it
is given: the simulator tells it arrivals and finishes as they happen, so the
forecast at an instant cannot depend on later arrivals or on the true duration
of a chart that has not finished (``tests/core/test_forecast.py`` replays cut
traces to check it). Every observation is O(1); a pass is the lane walk plus
one step per phantom (O((n + phantoms) log budget)). Dispatch never reads it.

With capacity pools (no limits) the walk is the pools' lane walk with floors
(:func:`.pool_lanes.walk_items`), each phantom drawing its (org, workflow)'s demand and
let in once the earliest lane (not before its floor) of a pool it draws on has reached
its arrival (:class:`PoolPhantomRounds`, docs/scheduling.md, "With pools"); with one
pool ``default`` it is the one-budget pass exactly.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from heapq import heappop, heappush, heapreplace
from typing import Callable, Iterable, Mapping

from .lanes import Durations, initial_lanes, lane_pass, running_clear
from .plan import gc_paused
from .pool_lanes import RunningUse, _parts, _pool_lanes, walk_items
from .rules import is_held
from .share import arrival_round
from .types import Eta, EtaReport, QueuedChart, RunningChart
from .forecast_walk import PhantomRounds, PoolPhantomRounds, RealCharts, forecast_items, pool_forecast_items

Estimate = Callable[[str, "str | None"], float]
Z90 = 1.2815515655446004  # standard normal quantile of 0.9
NAN = float("nan")


@dataclass(frozen=True, slots=True)
class ForecastParams:
    """The forecast's knobs (defaults tuned with ``bench/eta.py``)."""

    recent_tau_s: float = 1800.0    # time constant of an org's recent arrival rate (EWMA)
    decay_s: float = 0.0            # the projected rate goes from recent to long-run over this (0: long-run only)
    long_tau_s: float = math.inf    # time constant of the long-run rate (inf: every arrival so far counts)
    long_floor_s: float = 900.0     # a rate's observation window is at least this
    fade_s: float = 4500.0          # the projected rate fades by exp(-t / fade_s): the far future is a guess
    horizon_s: float = 8 * 3600.0   # no phantom arrives later than this after now
    max_phantoms: int = 20000       # and no pass walks more than this many
    prior_n: float = 5.0            # weight of the prior duration estimate, in observations
    own: str = "mean"               # a chart's own duration: "mean" or "median" (measured: mean, by a little)
    calibration_n: int = 500        # the p90 finish learns from this many latest finished charts
    phantoms: bool = True           # False: learned durations only (for the bench)


@dataclass(slots=True)
class _OrgArrivals:
    n: int = 0
    recent: float = 0.0      # EWMA count of arrivals (time constant recent_tau_s), decayed to ``at``
    long: float = 0.0        # the same with long_tau_s
    at: float = 0.0
    pairs: dict = field(default_factory=dict)  # workflow -> arrivals


@dataclass(slots=True)
class _PairDurations:
    n: int = 0
    total: float = 0.0
    log_total: float = 0.0
    log_sq: float = 0.0


class Forecaster:
    """What the forecast has learned so far, and the forecast pass.

    ``estimate`` is the prior duration of (org, workflow) (a :class:`Durations`
    or any callable); learned durations are blended into it.
    """

    def __init__(self, estimate: Estimate = Durations(), params: ForecastParams = ForecastParams()) -> None:
        self.estimate = estimate
        self.params = params
        self._orgs: dict[str, _OrgArrivals] = {}
        self._pairs: dict[tuple, _PairDurations] = {}
        self._first_at: float | None = None
        self._log_var_n = 0
        self._log_var_sum = 0.0  # pooled within-pair variance of log durations
        # chart id -> when + first ETA * 1j, until it finishes: a complex is one object of 32
        # bytes where a tuple of two floats is three of 104 (at 1M promises, 60 MB against 129)
        self._promised: dict[str, complex] = {}
        self._ratios: deque[float] = deque(maxlen=params.calibration_n)
        # the latest promises made (chart ids): those still unfinished past their ETA count
        # in the p90 bound's calibration with their ratio so far (``_quantile90``)
        self._latest: deque[str] = deque(maxlen=params.calibration_n)
        self._now = -math.inf  # the latest instant seen (an arrival, a promise, a finish)
        self._q90: tuple | None = None  # (now, the ratios' version) -> the quantile
        self._version = 0

    def copy(self, estimate: Estimate | None = None) -> "Forecaster":
        """A copy of what was learned (O(orgs + pairs)), for a pass in another thread
        while this one keeps learning; ``estimate``: the copy's prior (default: the same)."""
        other = Forecaster(self.estimate if estimate is None else estimate, self.params)
        other._orgs = {o: _OrgArrivals(s.n, s.recent, s.long, s.at, dict(s.pairs)) for o, s in self._orgs.items()}
        other._pairs = {k: _PairDurations(p.n, p.total, p.log_total, p.log_sq) for k, p in self._pairs.items()}
        other._first_at = self._first_at
        other._log_var_n = self._log_var_n
        other._log_var_sum = self._log_var_sum
        other._ratios = deque(self._ratios, maxlen=self._ratios.maxlen)  # the p90 bound's calibration
        other._latest = deque(self._latest, maxlen=self._latest.maxlen)
        other._now, other._q90, other._version = self._now, self._q90, self._version
        return other

    # ------------------------------------------------------------ learning
    def observe_arrival(self, org: str, workflow: str | None, at: float) -> None:
        """A chart of ``org`` arrived (was created) at ``at``. O(1)."""
        if self._first_at is None or at < self._first_at:
            self._first_at = at
        if at > self._now:
            self._now = at
        s = self._orgs.get(org)
        if s is None:
            s = self._orgs[org] = _OrgArrivals(at=at)
        p = self.params
        if at > s.at:
            s.recent = s.recent * _decay(at - s.at, p.recent_tau_s) + 1.0
            s.long = s.long * _decay(at - s.at, p.long_tau_s) + 1.0
            s.at = at
        else:  # out of order (a resync): counted as seen from the latest time
            s.recent += _decay(s.at - at, p.recent_tau_s)
            s.long += _decay(s.at - at, p.long_tau_s)
        s.n += 1
        s.pairs[workflow] = s.pairs.get(workflow, 0) + 1

    def record_eta(self, chart_id: str, at: float, eta_at: float) -> None:
        """The first ETA given for a chart (absolute), at ``at``: when it finishes, how far
        off it was calibrates :meth:`p90_finish`. Later calls for the same chart are ignored."""
        if chart_id not in self._promised:
            self._promised[chart_id] = complex(at, eta_at)
            self._latest.append(chart_id)
            self._version += 1
        if at > self._now:
            self._now = at

    def forget(self, chart_id: str) -> None:
        """A chart that will never finish (cancelled, deleted): drop its promise."""
        if self._promised.pop(chart_id, None) is not None:
            self._version += 1

    def observe_finish(self, org: str, workflow: str | None, seconds: float, *,
                       chart_id: str | None = None, finished_at: float | None = None) -> None:
        """A chart of (org, workflow) finished after ``seconds`` (at ``finished_at``). O(1)."""
        if finished_at is not None and finished_at > self._now:
            self._now = finished_at
        if chart_id is not None:
            promised = self._promised.pop(chart_id, None)
            if promised is not None:
                self._version += 1
            if promised is not None and finished_at is not None:
                self.observe_promise(promised.real, promised.imag, finished_at)
        if not (seconds >= 0.0) or math.isinf(seconds):
            return
        p = self._pairs.get((org, workflow))
        if p is None:
            p = self._pairs[(org, workflow)] = _PairDurations()
        lg = math.log(max(seconds, 1e-3))
        if p.n:
            # pooled variance of logs, by Welford-like increments of each pair's own mean
            mean = p.log_total / p.n
            self._log_var_sum += (lg - mean) ** 2 * p.n / (p.n + 1)
            self._log_var_n += 1
        p.n += 1
        p.total += seconds
        p.log_total += lg
        p.log_sq += lg * lg

    # ------------------------------------------------------------ durations
    def mean(self, org: str, workflow: str | None) -> float:
        """Expected duration: the learned mean shrunk towards the prior."""
        prior = float(self.estimate(org, workflow))
        p = self._pairs.get((org, workflow))
        if p is None or not p.n:
            return prior
        k = self.params.prior_n
        return (k * prior + p.total) / (k + p.n)

    def log_sigma(self, org: str, workflow: str | None) -> float:
        """Spread (standard deviation of the log) of (org, workflow)'s durations:
        its own once it has a few, else the pooled spread of all pairs, else 0."""
        p = self._pairs.get((org, workflow))
        pooled = self._log_var_sum / self._log_var_n if self._log_var_n else 0.0
        if p is not None and p.n >= 2:
            own = max(0.0, (p.log_sq - p.log_total ** 2 / p.n) / (p.n - 1))
            # shrink a pair's own spread towards the pooled one while it has few charts
            k = 3.0 if self._log_var_n else 0.0
            var = ((p.n - 1) * own + k * pooled) / (p.n - 1 + k)
        else:
            var = pooled
        return math.sqrt(var)

    def median(self, org: str, workflow: str | None) -> float:
        """The log-normal median of a duration of this mean and spread."""
        s = self.log_sigma(org, workflow)
        return self.mean(org, workflow) * math.exp(-s * s / 2)

    def p90(self, org: str, workflow: str | None) -> float:
        """The log-normal 90th percentile of a duration of this mean and spread."""
        s = self.log_sigma(org, workflow)
        return self.mean(org, workflow) * math.exp(Z90 * s - s * s / 2)

    def observe_promise(self, at: float, eta_at: float, finished_at: float) -> None:
        """A chart promised at ``at`` to finish at ``eta_at`` finished at ``finished_at``. O(1)."""
        self._ratios.append((finished_at - at) / max(eta_at - at, 1.0))
        self._version += 1

    def p90_finisher(self, now: float | None = None) -> Callable[[str, "str | None", Eta], float]:
        """:meth:`p90_finish` for a whole pass: per (org, workflow) and calibration work done once."""
        own: dict = {}
        q = self._quantile90(now)

        def p90(org: str, workflow: str | None, eta: Eta) -> float:
            d = own.get((org, workflow))
            if d is None:
                d = own[(org, workflow)] = self.p90(org, workflow)
            fin = eta[1]
            b = eta[0] + d
            if fin > b:
                b = fin
            if q is not None and fin * q > b:
                b = fin * q
            return b
        return p90

    def _quantile90(self, now: float | None = None) -> float | None:
        """The 90th percentile of (actual / promised time to finish) over the latest finished
        charts and the latest promises still unfinished past their ETA, each of those with
        its ratio so far, ``(now - promised at) / (ETA - promised at)``, a lower bound (without
        them the bound learns a wave of late charts only as they finish, hours late).
        ``now``: default the latest instant seen. None below 20 ratios. O(calibration_n)."""
        now = self._now if now is None else now
        key = (now, self._version)
        if self._q90 is not None and self._q90[0] == key:
            return self._q90[1]
        r = list(self._ratios)
        promised = self._promised
        for cid in self._latest:
            pr = promised.get(cid)
            if pr is not None and pr.imag < now:
                r.append((now - pr.real) / max(pr.imag - pr.real, 1.0))
        q = None
        if len(r) >= 20:
            r.sort()
            q = max(1.0, r[min(len(r) - 1, math.ceil(0.9 * len(r)) - 1)])
        self._q90 = (key, q)
        return q

    def p90_finish(self, org: str, workflow: str | None, eta: Eta, now: float | None = None) -> float:
        """A finish (seconds from now, like ``eta``) the chart should beat 9 times out of 10:
        its start plus the 90th percentile of its (org, workflow)'s durations, and, once 20
        charts have finished or are late, at least its ETA stretched by the 90th percentile
        of (actual / promised time to finish) of the latest finished charts and of the latest
        promises still unfinished past their ETA (their ratio so far: :meth:`_quantile90`)."""
        own = eta[0] + self.p90(org, workflow)
        q = self._quantile90(now)
        if q is None:
            return max(own, eta[1])
        return max(own, eta[1] * q, eta[1])

    # ------------------------------------------------------------ arrival rates
    def rates(self, now: float) -> dict[str, tuple[float, float]]:
        """Per org (recent, long-run) arrivals per second at ``now``."""
        out = {}
        if self._first_at is None:
            return out
        p = self.params
        elapsed = max(now - self._first_at, 0.0)
        for org, s in self._orgs.items():
            age = max(0.0, now - s.at)
            out[org] = (s.recent * _decay(age, p.recent_tau_s) / _window(elapsed, p.recent_tau_s, p.long_floor_s),
                        s.long * _decay(age, p.long_tau_s) / _window(elapsed, p.long_tau_s, p.long_floor_s))
        return out

    # ------------------------------------------------------------ the pass
    def etas(self, queue, running: Iterable[RunningChart], now: float, *,
             stop_after: "set[str] | frozenset[str] | None" = None) -> EtaReport:
        """Every running and ordered chart's forecast ``Eta`` (seconds from
        ``now``), like :meth:`FairQueue.etas`; ``stop_after`` ends the walk once
        those ids have theirs. ``queue`` is the live :class:`FairQueue`."""
        with gc_paused():
            return self._etas(queue, running, now, stop_after)

    def _etas(self, queue, running, now, stop_after) -> EtaReport:
        pools = getattr(queue, "pools", None)
        if pools is not None:
            return self._pool_etas(queue, pools, running, now, stop_after)
        p = self.params
        etas: dict[str, Eta] = {}
        running = list(running)
        mean = _cache(self.mean)
        own = _cache(self.median if p.own == "median" else self.mean)
        lanes = initial_lanes(running, now, queue.budget, mean, etas)
        org_clear: dict[str, float] = dict.fromkeys(queue.weights, 0.0)
        running_clear(running, etas, org_clear)
        pending = set(stop_after) - etas.keys() if stop_after is not None else None
        if pending is not None and not pending:
            return EtaReport(etas, org_clear, max(org_clear.values(), default=0.0))
        ph = PhantomRounds(queue, self.expected_arrivals(now, queue.weights, queue.cost_of, mean)
                            if p.phantoms and lanes else None)
        real = RealCharts(own)
        # the lane walk (lanes.lane_pass) over the order with the phantoms let in as it goes
        starts, _ = lane_pass(forecast_items(queue, lanes, ph, real, mean, pending), lanes, finishes=False)
        walked = real.collect(starts, etas, org_clear)
        return EtaReport(walked, org_clear, max(org_clear.values(), default=0.0))

    def _pool_etas(self, queue, pools, running, now, stop_after) -> EtaReport:
        """The pass with capacity pools (no limits): the pools' lane walk with floors
        (:func:`.pool_lanes.walk_items`, the strict pass of :func:`.pool_lanes.pool_etas`)
        over the order with the phantoms let in as it goes (:class:`PoolPhantomRounds`:
        a phantom arrives once the earliest lane of a pool it draws on has reached its
        arrival), each phantom drawing its (org, workflow)'s demand; learned durations as
        in one budget. With one pool ``default`` it is the one-budget pass exactly."""
        if pools.has_limits:
            raise ValueError("the forecast pass with pools knows no limits (ceilings, minimums)")
        p = self.params
        etas: dict[str, Eta] = {}
        running = list(running)
        mean = _cache(self.mean)
        own = _cache(self.median if p.own == "median" else self.mean)
        run = []
        for r in running:  # as initial_lanes: the remaining time of the learned mean
            rem = r.started_at + mean(r.org, r.workflow) - now
            if rem < 0.0:
                rem = 0.0
            etas[r.id] = Eta(0.0, rem)
            run.append(RunningUse(r.org, pools.held(r), rem))
        org_clear: dict[str, float] = dict.fromkeys(queue.weights, 0.0)
        running_clear(running, etas, org_clear)
        pending = set(stop_after) - etas.keys() if stop_after is not None else None
        if pending is not None and not pending:
            return EtaReport(etas, org_clear, max(org_clear.values(), default=0.0))
        # each pool's lanes at now: enough zero lanes for every unit the order and the
        # phantoms could draw (the rest are never reached: pool_lanes._pool_lanes)
        most = dict.fromkeys(pools.capacity, 1)
        for d in pools.demands.values():
            for pool, u in d:
                if u > most.get(pool, 0):
                    most[pool] = u
        n = queue.order_len + (p.max_phantoms if p.phantoms else 0)
        lanes = _pool_lanes(run, pools, {pool: n * u for pool, u in most.items()})
        index = {pool: k for k, pool in enumerate(lanes)}
        floor = [0.0] * len(index)
        table: dict = {}

        def parts_of(demand):
            sp = table.get(demand, False)
            if sp is False:
                sp = table[demand] = _parts(demand, lanes, index)
            return sp
        gen = (self.expected_arrivals(now, queue.weights, queue.cost_of, mean)
               if p.phantoms and any(lanes.values()) else None)
        ph = PoolPhantomRounds(queue, gen, pools, lanes, index, floor, parts_of)
        real = RealCharts(own)
        starts, _ = walk_items(pool_forecast_items(queue, pools, ph, real, mean, parts_of, pending), floor)
        walked = real.collect(starts, etas, org_clear)
        return EtaReport(walked, org_clear, max(org_clear.values(), default=0.0))

    def expected_arrivals(self, now: float, weights: dict, cost_of: Callable, mean: Callable) -> "_Phantoms":
        """The arrivals a pass at ``now`` lets in as it walks: each org's expected next
        charts (:class:`_Phantoms`). ``bench/eta.py`` overrides it with the true future
        arrivals, which no ETA may know, to measure how far the forecast is from the pass's
        own limit (any object with ``_Phantoms.arrive_until`` will do)."""
        return _Phantoms(self, now, weights, cost_of, mean)


def _decay(dt: float, tau: float) -> float:
    return 1.0 if math.isinf(tau) else math.exp(-dt / tau)


def _window(elapsed: float, tau: float, floor: float) -> float:
    """The time an EWMA count of time constant ``tau`` covers after ``elapsed`` seconds of
    observation (``tau (1 - exp(-elapsed / tau))``, ``elapsed`` for an infinite ``tau``):
    count / window is the rate, unbiased from the first arrival on. At least ``floor``
    (a first burst is not a rate), at most ``tau``."""
    w = elapsed if math.isinf(tau) else tau * -math.expm1(-elapsed / tau)
    return max(w, min(floor, tau))


def _cache(fn: Callable) -> Callable:
    memo: dict = {}

    def get(org, workflow):
        v = memo.get((org, workflow))
        if v is None:
            v = memo[(org, workflow)] = fn(org, workflow)
        return v
    return get


class _Phantoms:
    """The expected future arrivals of every org during one pass, in time order.

    Org X's projected rate ``t`` seconds after now is
    ``long + (recent - long) * exp(-t / decay_s)``; its k-th phantom arrives
    when the expected count reaches ``k - 1/2`` (stepped one phantom at a time).
    Each phantom's workflow follows the org's mix so far (smooth weighted
    round-robin over its workflows' arrival counts)."""

    def __init__(self, fc: Forecaster, now: float, weights: dict, cost_of: Callable, mean: Callable) -> None:
        p = fc.params
        self.end = p.horizon_s  # phantom times are offsets from now, like the lanes
        self.left = p.max_phantoms
        self.decay = p.decay_s
        self.fade = p.fade_s
        self.weights = weights
        self.cost_of = cost_of
        self.mean = mean
        self.heap: list = []
        self.state: dict = {}
        self.seq = 0
        for org, (recent, long) in fc.rates(now).items():
            if is_held(weights.get(org, 0)):
                continue
            s = fc._orgs[org]
            mix = {wf: [n, 0.0] for wf, n in s.pairs.items()}
            self.state[org] = (recent, long, mix, sum(s.pairs.values()))
            t = self._next(org, 0.0, 0.5)
            if t is not None:
                heappush(self.heap, (t, org))

    def _rate(self, org: str, t: float) -> float:
        recent, long, _, _ = self.state[org]
        base = long + (recent - long) * math.exp(-t / self.decay) if self.decay > 0 else long
        return base * math.exp(-t / self.fade)

    def _next(self, org: str, t: float, amount: float) -> float | None:
        """Time offset when ``amount`` more arrivals are expected after offset ``t``."""
        r = self._rate(org, t)
        if r <= 1e-12:
            return None
        dt = amount / r
        # one midpoint correction of the changing rate
        r2 = self._rate(org, t + dt / 2)
        if r2 <= 1e-12:
            return None
        return t + amount / r2

    def _workflow(self, org: str):
        _, _, mix, total = self.state[org]
        best = None
        for wf, cur in mix.items():
            cur[1] += cur[0]
            if best is None or cur[1] > mix[best][1]:
                best = wf
        mix[best][1] -= total
        return best

    def arrive_until(self, t: float, head: int, last: dict, used: dict, out: list) -> None:
        """Phantoms arriving by ``t`` (seconds from now) take their rounds (``head`` being
        the round walked then) and join ``out`` (a heap by round, then arrival)."""
        take = self.take
        while True:
            nxt = take(t)
            if nxt is None:
                return
            at, org, wf = nxt
            r, used[org] = arrival_round(head, last.get(org), used.get(org, 0), self.weights[org])
            last[org] = r
            heappush(out, (r, at, self.seq, self.cost_of(org, wf), self.mean(org, wf)))

    def take(self, t: float) -> "tuple[float, str, object] | None":
        """The next phantom, ``(arrival, org, workflow)``, if it arrives by ``t``, else None
        (its number is ``seq`` after the call); it has no round yet: the caller gives it one."""
        heap = self.heap
        if not heap or heap[0][0] > t or self.left <= 0:
            return None
        at, org = heap[0]
        if at > self.end:
            heap.clear()
            return None
        wf = self._workflow(org)
        self.seq += 1
        self.left -= 1
        nxt = self._next(org, at, 1.0)
        if nxt is None:
            heappop(heap)
        else:
            heapreplace(heap, (nxt, org))
        return at, org, wf


class PlanOrder:
    """A static :class:`Plan`'s order, read the way :meth:`Forecaster.etas` reads
    a live :class:`FairQueue` (``manage.py plan --live`` forecasts a dump of the
    live state). ``head`` and ``round_state`` ((last, used) per org, as
    :meth:`FairQueue.round_state`) default to what the plan's rounds imply."""

    def __init__(self, plan, charts: Mapping[str, "QueuedChart"], *, budget: int, weights: Mapping[str, int],
                 costs: Mapping[tuple, int] | None = None, head: int | None = None,
                 round_state: Mapping[str, tuple[int, int]] | None = None) -> None:
        self._plan = plan
        self._charts = charts
        self.budget = budget
        self.weights = dict(weights)
        self._costs = dict(costs or {})
        rounds = plan.rounds
        if round_state is None:
            derived: dict[str, list[int]] = {}
            for cid, r in rounds.items():
                org = charts[cid].org
                lu = derived.get(org)
                if lu is None or r > lu[0]:
                    derived[org] = [r, 1]
                elif r == lu[0]:
                    lu[1] += 1
            round_state = {o: (lu[0], lu[1]) for o, lu in derived.items()}
        self._round_state = dict(round_state)
        self.head = head if head is not None else min(rounds.values(), default=0)

    def cost_of(self, org: str, workflow: str | None) -> int:
        return self._costs.get((org, workflow), 1)

    def round_state(self) -> dict[str, tuple[int, int]]:
        return dict(self._round_state)

    def walk(self):
        rounds = self._plan.rounds
        for cid in self._plan.order:
            c = self._charts[cid]
            yield cid, (c.org, c.workflow), (None if c.priority else rounds.get(cid))
