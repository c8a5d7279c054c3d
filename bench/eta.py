"""ETA accuracy at arrival: naive vs the lane simulation vs the forecast model.

Traces of the kind the forecast is for: skewed tenants (Zipf-like arrival rates
over 12-16 orgs), bursts of arrivals, log-normal durations, costs 1-3, about
1.2-1.4x overload for a few hours, then the backlog drains. Several seeds. For
each trace and model: the mean absolute error (MAE) of the ETA given at
arrival against the actual finish, the bias (mean of ETA - actual: negative is
optimistic), the p90 absolute error, and the naive MAE over each model's MAE.
"Foresight" is the forecast pass told the true future arrivals (which no ETA may
know): how far the arrivals no one can know keep the forecast from its own pass.

    .venv/bin/python bench/eta.py            # every trace, then 20 seeds of A's and G's kinds
    .venv/bin/python bench/eta.py --quick    # two traces (the issue's kind)
    .venv/bin/python bench/eta.py --sweep G --seeds 20   # every trace, then one kind's seeds

Naive: ``arrival + pending x mean duration / (budget / mean cost)``, pending
being the charts in the system at arrival (arrived, not finished).

"Of limit" is the forecast's gain over naive as a share of the foresight's
(foresight MAE / forecast MAE). ``--bounds`` adds two ETAs that know more than any ETA
may, but not the arrivals: the **rate oracle** (the forecast pass with each org's true
expected rate over time, its overload's end included, in place of the learned one) and
the **sampled futures** (the pass run on 15 other draws of the trace's own process after
now, the median start and finish taken): how much of the limit knowing the process,
short of the arrivals themselves, reaches.
"""
from __future__ import annotations

import argparse
import math
import random
import sys
import time
from bisect import bisect_right
from heapq import heappush
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling import DEFAULT_AVG_S, Eta, EtaReport  # noqa: E402
from scheduling.forecast import Forecaster, ForecastParams, _Phantoms  # noqa: E402
from scheduling.rules import is_held  # noqa: E402
from scheduling.share import arrival_round  # noqa: E402
from scheduling.contract.scenario import parse_trace  # noqa: E402
from scheduling.contract.simulator import simulate as core_simulate  # noqa: E402

# workflow -> (cost, mean seconds)
WF12 = {"triage": (1, 240.0), "code": (2, 900.0)}
WF123 = {"triage": (1, 240.0), "code": (2, 900.0), "audit": (3, 2400.0)}


def make_trace(seed: int, *, n_orgs: int = 14, workflows: dict = WF12, budget: int = 24,
               overload: float = 1.3, hours: float = 4.0, zipf: float = 1.1, sigma: float = 0.5,
               burst_share: float = 0.5, averages: bool = True, tail_hours: float = 2.0,
               tail_load: float = 0.6, waves: float = 0.0, future_seed: int | None = None) -> dict:
    """Arrivals for ``hours`` at ``overload`` x the budget's capacity, then
    ``tail_hours`` at ``tail_load`` x (the backlog drains while work still comes), then none.

    Org i's share of the arrivals is proportional to ``1 / (i+1)**zipf``; a
    ``burst_share`` of each org's charts comes in bursts (5-40 charts within a
    couple of minutes), the rest as a Poisson stream. Durations are log-normal
    with the workflow's mean and log-sd ``sigma`` (per org a mean factor 0.7-1.4).
    ``future_seed``: another draw of the arrivals of the same process (the bench's
    sampled-futures limit). ``waves`` > 0: the overload itself comes in waves, the ``hours``
    cut into spells of 20-60 minutes at ``1 + waves`` and ``1 - waves`` x the rate in turn: the
    Poisson part at the spell's rate, the bursts (as many as without waves) placed with the
    spells' density. The spells' lengths are drawn, so a trace's mean over the hours is not
    exactly the flat one's (0.81x of it in the Poisson part for seed 5 of 2 hours)."""
    rnd = random.Random(seed)
    orgs = [f"o{i:02d}" for i in range(n_orgs)]
    weights = {o: (2 if i in (0, 3) else 1) for i, o in enumerate(orgs)}
    share = [1.0 / (i + 1) ** zipf for i in range(n_orgs)]
    tot = sum(share)
    share = [s / tot for s in share]
    factor = {o: rnd.uniform(0.7, 1.4) for o in orgs}
    mix = {wf: w for wf, w in zip(workflows, [6, 3, 1])}
    wf_names = list(workflows)
    # mean cost x seconds of one chart, over orgs and workflows
    mean_work = sum(share[i] * sum(mix[wf] * workflows[wf][0] * workflows[wf][1] * factor[o]
                                   for wf in wf_names) / sum(mix.values())
                    for i, o in enumerate(orgs))
    rate = overload * budget / mean_work  # charts per second over all orgs
    arrivals = []

    def chart(org: str, at: float) -> None:
        wf = rnd.choices(wf_names, weights=[mix[w] for w in wf_names])[0]
        mean = workflows[wf][1] * factor[org]
        mu = math.log(mean) - sigma ** 2 / 2
        arrivals.append({"id": f"{org}-{len(arrivals)}", "org": org, "workflow": wf,
                         "at_s": round(at, 3), "actual_s": round(rnd.lognormvariate(mu, sigma), 3)})

    phases = [(0.0, hours * 3600.0, 1.0), (hours * 3600.0, (hours + tail_hours) * 3600.0, tail_load / overload)]
    spells = [phases[0]]  # the overload hours' rate over time (in waves, or flat)
    if waves > 0:
        spells, t, high = [], 0.0, rnd.random() < 0.5
        while t < hours * 3600.0:
            end = min(hours * 3600.0, t + rnd.uniform(1200.0, 3600.0))
            spells.append((t, end, 1.0 + waves if high else 1.0 - waves))
            t, high = end, not high
    top = max(sc for _, _, sc in spells)
    if future_seed is not None:  # the same process (rates, spells, factors), other arrivals
        rnd = random.Random(future_seed)

    def burst_at(begin: float, end: float, waved: bool) -> float:
        # a burst's time, with the density of the rate (rejection on the spells)
        while True:
            at = rnd.uniform(begin, end - 120.0)
            if not waved or rnd.random() * top <= next(sc for b, e, sc in spells if b <= at < e):
                return at

    for i, o in enumerate(orgs):
        for k, (begin, end, scale) in enumerate(phases):
            r = rate * share[i] * scale
            # Poisson part (in the spells' rates during the overload)
            for sb, se, sc in (spells if k == 0 else [(begin, end, 1.0)]):
                t = sb
                while True:
                    t += rnd.expovariate(r * sc * (1 - burst_share))
                    if t > se:
                        break
                    chart(o, t)
            # bursts: the burst part's charts in clumps of 5-40 within two minutes
            expected = r * burst_share * (end - begin)
            left = rnd.gauss(expected, math.sqrt(expected))
            while left >= 3:
                size = min(int(left), rnd.randint(5, 40))
                at = burst_at(begin, end, k == 0 and waves > 0)
                for _ in range(size):
                    chart(o, at + rnd.uniform(0, 120.0))
                left -= size
    arrivals.sort(key=lambda a: a["at_s"])
    trace = {
        "budget": budget, "default_avg_s": DEFAULT_AVG_S,
        "orgs": [{"id": o, "weight": weights[o]} for o in orgs],
        "costs": [{"org": o, "workflow": wf, "cost": c} for o in orgs for wf, (c, _) in workflows.items()],
        "arrivals": arrivals,
    }
    if averages:
        trace["averages"] = [{"org": o, "workflow": wf, "avg_s": round(m * factor[o], 1)}
                             for o in orgs for wf, (_, m) in workflows.items()]
    # the generator's expected rate over time (never given to an ETA; the "rate oracle"
    # of run_model): per org its charts per second, and the overload's spells then the tail
    trace["_kw"] = dict(seed=seed, n_orgs=n_orgs, workflows=workflows, budget=budget, overload=overload,
                        hours=hours, zipf=zipf, sigma=sigma, burst_share=burst_share, averages=averages,
                        tail_hours=tail_hours, tail_load=tail_load, waves=waves)
    trace["_rate"] = {"orgs": {o: rate * share[i] for i, o in enumerate(orgs)},
                      "spells": [*spells, phases[1]]}
    return trace


def naive_etas(trace: dict, charts: list[dict]) -> dict[str, float]:
    costs = {(c["org"], c["workflow"]): c["cost"] for c in trace.get("costs", [])}
    avgs = {(a["org"], a["workflow"]): a["avg_s"] for a in trace.get("averages", [])}
    default = trace.get("default_avg_s", DEFAULT_AVG_S)
    arr = trace["arrivals"]
    mean_avg = sum(avgs.get((a["org"], a["workflow"]), default) for a in arr) / len(arr)
    mean_cost = sum(costs.get((a["org"], a["workflow"]), 1) for a in arr) / len(arr)
    capacity = trace["budget"] / mean_cost
    arrive_sorted = sorted(c["arrive_s"] for c in charts)
    finish_sorted = sorted(c["finish_s"] for c in charts if c["finish_s"] is not None)
    out = {}
    for c in charts:
        t = c["arrive_s"]
        pending = bisect_right(arrive_sorted, t) - bisect_right(finish_sorted, t)
        out[c["id"]] = t + pending * mean_avg / capacity
    return out


def errors(etas: dict[str, float], charts: list[dict]) -> dict:
    e = [etas[c["id"]] - c["finish_s"] for c in charts if c["finish_s"] is not None and c["id"] in etas]
    a = sorted(abs(x) for x in e)
    return {"mae": sum(a) / len(a), "bias": sum(e) / len(e), "p90": a[max(0, math.ceil(0.9 * len(a)) - 1)],
            "n": len(a)}


class _TrueArrivals:
    """The arrivals after ``now`` as they really come (org, workflow, time), let into a
    forecast pass the way its expected arrivals are (``_Phantoms.arrive_until``)."""

    def __init__(self, future: list, now: float, weights: dict, cost_of, mean) -> None:
        self.future, self.now, self.weights, self.cost_of, self.mean = future, now, weights, cost_of, mean
        self.i = bisect_right(future, (now, chr(0x10FFFF)))
        self.seq = 0

    def arrive_until(self, t: float, head: int, last: dict, used: dict, out: list) -> None:
        fut = self.future
        while self.i < len(fut) and fut[self.i][0] - self.now <= t:
            at, org, wf = fut[self.i]
            self.i += 1
            w = self.weights.get(org, 0)
            if is_held(w):
                continue
            r, used[org] = arrival_round(head, last.get(org), used.get(org, 0), w)
            last[org] = r
            self.seq += 1
            heappush(out, (r, at - self.now, self.seq, self.cost_of(org, wf), self.mean(org, wf)))


class Foresight(Forecaster):
    """The forecast with the true future arrivals in place of the expected ones: what no
    ETA may know, so the limit of the forecast pass on a trace (the durations of the charts
    not yet finished stay unknown, learned as the forecast learns them)."""

    def __init__(self, trace: dict, estimate, params: ForecastParams) -> None:
        super().__init__(estimate, params)
        self.future = sorted((a["at_s"], a["org"], a["workflow"]) for a in trace["arrivals"])

    def expected_arrivals(self, now, weights, cost_of, mean):
        return _TrueArrivals(self.future, now, weights, cost_of, mean)


class _OracleRates(_Phantoms):
    """Each org's expected arrivals at the rate the trace was generated with (its
    spells, its tail, then none), not at the rate learned so far: what a rate model
    could reach at best, the bursts and the Poisson noise left unknown."""

    def __init__(self, rate: dict, fc, now, weights, cost_of, mean) -> None:
        self.true, self.now = rate, now
        super().__init__(fc, now, weights, cost_of, mean)

    def _rate(self, org: str, t: float) -> float:
        at = self.now + t
        for b, e, sc in self.true["spells"]:
            if b <= at < e:
                return self.true["orgs"].get(org, 0.0) * sc
        return 0.0


class RateOracle(Forecaster):
    """The forecast with each org's true expected rate over time in place of the learned
    one (bench only: no ETA knows when the overload ends)."""

    def __init__(self, trace: dict, estimate, params: ForecastParams) -> None:
        super().__init__(estimate, params)
        self.true = trace["_rate"]

    def expected_arrivals(self, now, weights, cost_of, mean):
        return _OracleRates(self.true, self, now, weights, cost_of, mean)


class SampledFutures(Forecaster):
    """The best an ETA could do knowing the process that makes the arrivals (each org's
    rates, the spells, when the overload ends) but not the arrivals: each pass is run on
    ``k`` other draws of the trace's future (``make_trace(future_seed=)``, the arrivals
    after now) and each chart gets the median start and finish (the median: what an
    absolute error is least for). Bench only; about ``k`` times the foresight's cost."""

    def __init__(self, trace_kw: dict, estimate, params: ForecastParams, k: int = 15) -> None:
        super().__init__(estimate, params)
        self.futures = [sorted((a["at_s"], a["org"], a["workflow"])
                               for a in make_trace(**trace_kw, future_seed=1_000_003 + j)["arrivals"])
                        for j in range(k)]
        self._future: list = []

    def expected_arrivals(self, now, weights, cost_of, mean):
        return _TrueArrivals(self._future, now, weights, cost_of, mean)

    def etas(self, queue, running, now, *, stop_after=None):
        running = list(running)
        reps = []
        for fut in self.futures:
            self._future = fut
            reps.append(super().etas(queue, running, now, stop_after=stop_after).etas)
        out = {}
        for cid in (stop_after if stop_after is not None else reps[0].keys()):
            xs = [r.get(cid) for r in reps]
            if any(x is None for x in xs):
                continue
            st = sorted(x.start_s for x in xs)
            fi = sorted(x.finish_s for x in xs)
            out[cid] = Eta(st[len(st) // 2], fi[len(fi) // 2])
        return EtaReport(out, {}, 0.0)


def run_model(trace: dict, model: str, params: ForecastParams | None = None) -> list[dict]:
    """``model``: ``lanes``, ``forecast``, ``foresight`` (the forecast told the future
    arrivals: its limit, not an ETA anyone can give) or ``oracle`` (told the rates the
    trace was generated with, not the arrivals)."""
    t = parse_trace(trace)
    fc = (Foresight if model == "foresight" else RateOracle)(trace, t.durations, params or ForecastParams()) \
        if model in ("foresight", "oracle") else None
    if model == "sampled":
        fc = SampledFutures(trace["_kw"], t.durations, params or ForecastParams())
    r = core_simulate(t.arrivals, t.events, budget=t.budget, weights=t.weights, costs=t.costs,
                      estimate=t.durations, eta_model="forecast" if fc else model, forecast_params=params,
                      forecaster=fc)
    return [{"id": c.id, "org": c.org, "arrive_s": c.arrive_s, "start_s": c.start_s, "finish_s": c.finish_s,
             "eta": c.eta_at_arrival_s, "p90": c.eta_p90_at_arrival_s} for c in r.charts]


def calibration(charts: list[dict]) -> float | None:
    """Share of the charts with a p90 finish that finished by it (0.9 is calibrated)."""
    xs = [c["finish_s"] <= c["p90"] for c in charts if c.get("p90") is not None and c["finish_s"] is not None]
    return sum(xs) / len(xs) if xs else None


def evaluate(trace: dict, params: ForecastParams | None = None, models=("lanes", "forecast", "foresight")) -> dict:
    out = {}
    base = None
    for m in models:
        charts = run_model(trace, m, params)
        if base is None:
            base = charts
            out["naive"] = errors(naive_etas(trace, charts), charts)
        out[m] = errors({c["id"]: c["eta"] for c in charts if c["eta"] is not None}, charts)
        out[m]["in_p90"] = calibration(charts)
    return out


TRACES = {
    # the kind: costs 1-2, about 1.3x overload
    "A  costs 1-2, 14 orgs, 1.3x, seed 1": dict(seed=1),
    "B  costs 1-2, 14 orgs, 1.3x, seed 2": dict(seed=2),
    "C  costs 1-3, 16 orgs, 1.2x, seed 3": dict(seed=3, n_orgs=16, workflows=WF123, overload=1.2, budget=30),
    "D  costs 1-3, 12 orgs, 1.4x, seed 4": dict(seed=4, n_orgs=12, workflows=WF123, overload=1.4, budget=30),
    "E  costs 1-2, 20 orgs, 1.3x, seed 5": dict(seed=5, n_orgs=20, zipf=1.3),
    "F  costs 1-2, 14 orgs, 1.3x, no averages (learned), seed 6": dict(seed=6, averages=False),
    # the second held-back kind: the overload in waves of 20-60 minutes (0.4x-1.6x
    # of it), on top of the bursts
    "G  costs 1-2, 14 orgs, 1.3x in waves, seed 7": dict(seed=7, waves=0.6),
    "H  costs 1-2, 16 orgs, 1.4x in waves, seed 8": dict(seed=8, n_orgs=16, overload=1.4, zipf=1.3, waves=0.6),
}


def perfect_start(trace: dict, charts: list[dict]) -> dict[str, float]:
    """The bound no ETA at arrival can beat by much: the true start plus the average duration."""
    avgs = {(a["org"], a["workflow"]): a["avg_s"] for a in trace.get("averages", [])}
    default = trace.get("default_avg_s", DEFAULT_AVG_S)
    wf = {a["id"]: a["workflow"] for a in trace["arrivals"]}
    return {c["id"]: c["start_s"] + avgs.get((c["org"], wf[c["id"]]), default)
            for c in charts if c["start_s"] is not None}


SWEEPS = {
    # seeds of the kinds: A's (costs 1-2, 14 orgs, 1.3x then 0.6x) and G's (the same
    # with the overload in waves)
    "A": {},
    "G": dict(waves=0.6),
}


def sweep_seed(kind: str, seed: int, params: ForecastParams | None = None, bounds: bool = False) -> dict:
    """One seed of a sweep: naive / model MAE of each model, the forecast's share of the
    limit (foresight MAE / forecast MAE, the same as (naive / forecast) / (naive /
    foresight)), its bias and its 90% bound's calibration. ``bounds``: the same share for
    the rate oracle and the sampled futures (``run_model``), which know the process."""
    trace = make_trace(seed=seed, **SWEEPS[kind])
    lanes = run_model(trace, "lanes")
    fore = run_model(trace, "forecast", params)
    sight = run_model(trace, "foresight", params)
    naive = errors(naive_etas(trace, lanes), lanes)["mae"]
    el = errors({c["id"]: c["eta"] for c in lanes if c["eta"] is not None}, lanes)
    ef = errors({c["id"]: c["eta"] for c in fore if c["eta"] is not None}, fore)
    es = errors({c["id"]: c["eta"] for c in sight if c["eta"] is not None}, sight)
    ep = errors(perfect_start(trace, lanes), lanes)
    out = {"charts": len(lanes), "lanes": naive / el["mae"], "forecast": naive / ef["mae"], "bias": ef["bias"],
           "foresight": naive / es["mae"], "perfect": naive / ep["mae"], "of_limit": es["mae"] / ef["mae"],
           "in_p90": calibration(fore)}
    if bounds:
        for m in ("oracle", "sampled"):
            ch = run_model(trace, m, ForecastParams(fade_s=1e12) if m == "oracle" else params)
            out[m] = es["mae"] / errors({c["id"]: c["eta"] for c in ch if c["eta"] is not None}, ch)["mae"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the first two traces, no seed sweep")
    ap.add_argument("--seeds", type=int, default=20, help="seeds of each kind in the sweep (default 20)")
    ap.add_argument("--sweep", choices=["all", *SWEEPS, "none"], default="all",
                    help="which seed sweep(s) to run (default: all)")
    ap.add_argument("--bounds", action="store_true",
                    help="the sweeps also give the rate oracle's and the sampled futures' share of the limit "
                         "(what an ETA knowing the process but not the arrivals reaches; ~20x slower)")
    args = ap.parse_args()
    names = list(TRACES)[:2] if args.quick else list(TRACES)
    print(f"{'trace':<58}{'charts':>7} | {'model':<9}{'MAE s':>8}{'bias s':>9}{'p90 s':>8}{'naive/x':>9}"
          f"{'by p90':>8}{'of limit':>10}")
    t0 = time.perf_counter()
    shares = []
    for name in names:
        trace = make_trace(**TRACES[name])
        res = evaluate(trace)
        naive = res["naive"]["mae"]
        share = res["foresight"]["mae"] / res["forecast"]["mae"]
        shares.append(share)
        first = True
        for m in ("naive", "lanes", "forecast", "foresight"):
            e = res[m]
            lead = f"{name:<58}{len(trace['arrivals']):>7}" if first else " " * 65
            first = False
            cal = e.get("in_p90")
            print(f"{lead} | {m:<9}{e['mae']:>8.0f}{e['bias']:>9.0f}{e['p90']:>8.0f}{naive / e['mae']:>8.2f}x"
                  + (f"{cal:>8.0%}" if cal is not None else "")
                  + (f"{share:>10.2f}" if m == "forecast" else ""))
    print(f"forecast's share of the limit (naive/forecast over naive/foresight): min {min(shares):.2f}, "
          f"mean {sum(shares) / len(shares):.2f} over {len(shares)} traces")
    kinds = [] if args.quick or args.sweep == "none" else list(SWEEPS) if args.sweep == "all" else [args.sweep]
    for kind in kinds:
        print(f"\nSeeds of trace {kind}'s kind{' (overload in waves)' if SWEEPS[kind] else ''}: naive MAE / model MAE")
        print(f"{'seed':>5} {'charts':>7} {'lanes':>7} {'forecast':>9} {'bias':>6} {'foresight':>10} "
              f"{'perfect start':>14} {'of limit':>9} {'by p90':>7}"
              + (f" {'rate oracle':>12} {'sampled':>8}" if args.bounds else ""))
        rows = []
        for seed in range(1, args.seeds + 1):
            r = sweep_seed(kind, seed, bounds=args.bounds)
            rows.append(r)
            print(f"{seed:>5} {r['charts']:>7} {r['lanes']:>6.2f}x {r['forecast']:>8.2f}x {r['bias']:>6.0f} "
                  f"{r['foresight']:>9.2f}x {r['perfect']:>13.2f}x {r['of_limit']:>9.2f} {r['in_p90']:>7.0%}"
                  + (f" {r['oracle']:>12.2f} {r['sampled']:>8.2f}" if args.bounds else ""), flush=True)

        def col(k):
            return [r[k] for r in rows]
        mean = {k: sum(col(k)) / len(rows) for k in ("lanes", "forecast", "foresight", "of_limit", "in_p90")}
        print(f"{'mean':>5} {'':>7} {mean['lanes']:>6.2f}x {mean['forecast']:>8.2f}x {'':>6} "
              f"{mean['foresight']:>9.2f}x {'':>14} {mean['of_limit']:>9.2f} {mean['in_p90']:>7.0%}")
        worst = min(range(len(rows)), key=lambda i: rows[i]["of_limit"])
        print(f"  of the limit: min {rows[worst]['of_limit']:.2f} (seed {worst + 1}), mean {mean['of_limit']:.2f}, "
              f">= 0.8 on {sum(x >= 0.8 for x in col('of_limit'))} of {len(rows)}; forecast min "
              f"{min(col('forecast')):.2f}x; by p90 {min(col('in_p90')):.0%}-{max(col('in_p90')):.0%}")
        for m in ("oracle", "sampled") if args.bounds else ():
            print(f"  {'rate oracle' if m == 'oracle' else 'sampled futures'} of the limit: min {min(col(m)):.2f}, "
                  f"mean {sum(col(m)) / len(rows):.2f}, >= 0.8 on {sum(x >= 0.8 for x in col(m))} of {len(rows)}")
    print(f"({time.perf_counter() - t0:.0f} s; errors in seconds over the charts that got an ETA at arrival;"
          " bias < 0: optimistic; by p90: share of charts that finished by the forecast's 90% bound;"
          " foresight: the forecast pass told the true future arrivals, which no ETA may know (its limit);"
          " of limit: foresight MAE / forecast MAE, the forecast's gain over naive as a share of the limit's;"
          " perfect start: the true start + the average duration)")


if __name__ == "__main__":
    main()
