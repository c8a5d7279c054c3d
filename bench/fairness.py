"""Fairness and ETA accuracy: wrr against the baselines fifo and proportional.

Run from the repo root: ``.venv/bin/python bench/fairness.py``.
Traces: the headline case (1,000 charts of A then 100 of B, budget 3,
60 s each) and a mixed trace (10 orgs with skewed backlogs and weights, 3
workflows of different costs, log-normal durations, arrivals over time; fixed
seed). Per org: first start, mean and p95 wait, share of the contended starts
vs share of weight; per policy Jain's index of the orgs' weighted fair ratios
(see ``scheduling.contract.simulator.summarize``). For wrr, the ETA given at
arrival against the actual finish, beside the naive estimate
``arrival + pending x average / capacity``.
"""
from __future__ import annotations

import math
import random
import sys
from bisect import bisect_right
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling import DEFAULT_AVG_S  # noqa: E402
from scheduling.contract.scenario import simulate  # noqa: E402
from scheduling.contract.simulator import POLICIES  # noqa: E402

EARLY = 0.2  # the "early" column: share of the first 20% of all starts


def headline_trace() -> dict:
    arr = [{"id": f"a{i}", "org": "A", "workflow": "w", "at_s": 0, "actual_s": 60}
           for i in range(1000)]
    arr += [{"id": f"b{i}", "org": "B", "workflow": "w", "at_s": 0, "actual_s": 60}
            for i in range(100)]
    return {"budget": 3, "default_avg_s": 60,
            "orgs": [{"id": "A", "weight": 1}, {"id": "B", "weight": 1}], "arrivals": arr}


WORKFLOWS = {"triage": (1, 300.0), "code": (2, 1200.0), "research": (3, 3600.0)}  # cost, mean s


def mixed_trace(seed: int = 7) -> dict:
    rnd = random.Random(seed)
    orgs = [f"org{i}" for i in range(10)]
    weights = {o: w for o, w in zip(orgs, [1, 1, 2, 1, 3, 1, 1, 2, 1, 1])}
    backlog = {o: int(600 / (i + 1) ** 1.3) for i, o in enumerate(orgs)}  # 600, 243, 144, ...
    rate = {o: 1.0 / (i + 1) for i, o in enumerate(orgs)}               # relative arrival rates
    sigma = 0.6
    arrivals = []

    def chart(org: str, at: float) -> dict:
        wf = rnd.choices(list(WORKFLOWS), weights=[5, 3, 1])[0]
        mean = WORKFLOWS[wf][1]
        mu = math.log(mean) - sigma ** 2 / 2  # log-normal with that mean
        return {"id": f"{org}-{len(arrivals)}", "org": org, "workflow": wf,
                "at_s": round(at, 3), "actual_s": round(rnd.lognormvariate(mu, sigma), 3)}

    for o in orgs:
        for _ in range(backlog[o]):
            arrivals.append(chart(o, 0.0))
    t, horizon = 0.0, 8 * 3600.0
    total_rate = 0.05  # charts per second over all orgs
    while True:
        t += rnd.expovariate(total_rate)
        if t > horizon:
            break
        o = rnd.choices(orgs, weights=[rate[x] for x in orgs])[0]
        arrivals.append(chart(o, t))
    arrivals.sort(key=lambda a: a["at_s"])
    return {
        "budget": 40, "default_avg_s": 900,
        "orgs": [{"id": o, "weight": weights[o]} for o in orgs],
        "costs": [{"org": o, "workflow": wf, "cost": c} for o in orgs
                  for wf, (c, _) in WORKFLOWS.items()],
        "averages": [{"org": o, "workflow": wf, "avg_s": m} for o in orgs
                     for wf, (_, m) in WORKFLOWS.items()],
        "arrivals": arrivals,
    }


def fmt(v, spec="{:.0f}") -> str:
    return "-" if v is None else spec.format(v)


def fairness_table(name: str, trace: dict) -> dict:
    results = {p: simulate(trace, p) for p in POLICIES}
    early = {}
    for p in POLICIES:
        started = sorted((c["start_s"], i, c["org"]) for i, c in enumerate(results[p]["charts"])
                         if c["start_s"] is not None)
        head = started[:max(1, math.ceil(EARLY * len(started)))]
        early[p] = {o: sum(1 for _, _, x in head if x == o) / len(head) for o in
                    {x for _, _, x in started}}
    orgs = [o["id"] for o in trace["orgs"]]
    print(f"\n== {name}: {len(trace['arrivals'])} charts, budget {trace['budget']}, "
          f"{len(orgs)} orgs ==")
    print("Jain's index (1 = every org got its weighted share while it waited): "
          + "  ".join(f"{p} {fmt(results[p]['summary']['jain'], '{:.3f}')}" for p in POLICIES))
    hdr = f"{'org':<7}{'w':>2}{'charts':>7} |"
    for p in POLICIES:
        hdr += f" {p:^44} |"
    print(hdr)
    sub = f"{'':<16} |" + (f" {'first':>7} {'mean':>8} {'p95':>8} {'early':>8} {'weight':>8} |"
                           * len(POLICIES))
    print(sub)
    for o in orgs:
        s0 = results["wrr"]["summary"]["orgs"].get(o)
        if s0 is None:
            continue
        w = next(x["weight"] for x in trace["orgs"] if x["id"] == o)
        line = f"{o:<7}{w:>2}{s0['charts']:>7} |"
        for p in POLICIES:
            s = results[p]["summary"]["orgs"][o]
            line += (f" {fmt(s['first_start_s']):>7} {fmt(s['mean_wait_s']):>8} "
                     f"{fmt(s['p95_wait_s']):>8} {fmt(early[p].get(o, 0.0), '{:.1%}'):>8} "
                     f"{fmt(s['share_of_weight'], '{:.1%}'):>8} |")
        print(line)
    print(f"(seconds; first = first start, mean/p95 = wait; early = share of the first "
          f"{EARLY:.0%} of all starts, weight = share of weight)")
    return results


def eta_accuracy(name: str, trace: dict, result: dict) -> None:
    charts = [c for c in result["charts"] if c["finish_s"] is not None]
    costs = {(c["org"], c["workflow"]): c["cost"] for c in trace.get("costs", [])}
    avgs = {(a["org"], a["workflow"]): a["avg_s"] for a in trace.get("averages", [])}
    default = trace.get("default_avg_s", DEFAULT_AVG_S)
    mean_avg = (sum(avgs.get((a["org"], a["workflow"]), default) for a in trace["arrivals"])
                / len(trace["arrivals"]))
    mean_cost = sum(costs.get((a["org"], a["workflow"]), 1) for a in trace["arrivals"]) \
        / len(trace["arrivals"])
    capacity = trace["budget"] / mean_cost  # charts in flight at once
    arrive_sorted = sorted(c["arrive_s"] for c in result["charts"])
    finish_sorted = sorted(c["finish_s"] for c in charts)

    def pending(t: float) -> int:  # charts in the system at t (arrived, not finished)
        return bisect_right(arrive_sorted, t) - bisect_right(finish_sorted, t)

    rows = {"wrr lane ETA": [], "naive pending x avg / capacity": []}
    for c in charts:
        if c["eta_at_arrival_s"] is None:
            continue
        actual = c["finish_s"]
        span = max(actual - c["arrive_s"], 1e-9)
        naive = c["arrive_s"] + pending(c["arrive_s"]) * mean_avg / capacity
        rows["wrr lane ETA"].append((abs(c["eta_at_arrival_s"] - actual), span))
        rows["naive pending x avg / capacity"].append((abs(naive - actual), span))
    print(f"ETA at arrival vs actual finish ({name}, {len(rows['wrr lane ETA'])} charts):")
    for k, errs in rows.items():
        mae = sum(e for e, _ in errs) / len(errs)
        rel = sorted(e / s for e, s in errs)
        p90 = rel[max(0, math.ceil(0.9 * len(rel)) - 1)]
        print(f"  {k:<32} MAE {mae:9.0f} s   p90 relative error {p90:7.1%}")


def main() -> None:
    h = headline_trace()
    res = fairness_table("headline: 1,000 of A then 100 of B, 60 s each", h)
    eta_accuracy("headline", h, res["wrr"])
    m = mixed_trace()
    res = fairness_table("mixed: 10 orgs, skewed backlogs, 3 workflows, log-normal durations", m)
    eta_accuracy("mixed", m, res["wrr"])


if __name__ == "__main__":
    main()
