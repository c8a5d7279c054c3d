"""ETA accuracy with three pools against one pool (issue 43, item 5; figures, never pass/fail).

Three traces of ``bench/eta.py``'s kind (skewed tenants, bursts, log-normal durations,
overload then a drain), each on its own budget, are replayed twice:

- **one pool**: each trace alone, on its budget (what one pool reaches);
- **three pools**: the three as one trace, each trace's orgs drawing on a pool of its own
  (``p0``, ``p1``, ``p2``, each of that trace's budget; a cost c is ``{"p<k>": c}``), in
  one fair order: the rounds are shared, dispatch and ETAs go by pool
  (docs/scheduling.md, "Pools").

The ETA is the one at arrival (``simulate``'s ``eta_at_arrival_s``) of each ETA model: the lane
simulation (``lanes``) and the forecast (``forecast``: the trace's ``"eta_model": "forecast"``,
with pools the forecast's pass with the pools, docs/scheduling.md), each on the same runs
(dispatch never reads the ETA model). Naive, per pool: ``arrival + pending x mean duration /
(capacity / mean cost)`` over the charts of that pool (``bench/eta.py``'s naive for one pool).
The figure is naive MAE / model MAE over every chart: the three pools' against the three
one-pool runs' together, seed by seed, for each model.

    .venv/bin/python bench/eta_pools.py              # 5 seeds, lanes and forecast
    .venv/bin/python bench/eta_pools.py --seeds 10 --hours 2
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.eta import WF12, errors, make_trace, naive_etas  # noqa: E402
from scheduling.contract.scenario import simulate  # noqa: E402


def _public(trace: dict) -> dict:
    return {k: v for k, v in trace.items() if not k.startswith("_")}


def union(traces: list[dict]) -> dict:
    """The traces as one, trace k's orgs (prefixed ``t<k>``) drawing on pool ``p<k>``."""
    out = {"budget": 1, "default_avg_s": traces[0]["default_avg_s"], "orgs": [], "costs": [], "averages": [],
           "arrivals": [], "pools": []}
    for k, t in enumerate(traces):
        name = f"p{k}"
        out["pools"].append({"id": name, "capacity": t["budget"]})
        pre = lambda o, k=k: f"t{k}{o}"  # noqa: E731
        out["orgs"] += [{"id": pre(o["id"]), "weight": o["weight"]} for o in t["orgs"]]
        out["costs"] += [{"org": pre(c["org"]), "workflow": c["workflow"], "pools": {name: c["cost"]}}
                         for c in t["costs"]]
        out["averages"] += [{**a, "org": pre(a["org"])} for a in t.get("averages", [])]
        out["arrivals"] += [{**a, "id": f"t{k}{a['id']}", "org": pre(a["org"])} for a in t["arrivals"]]
    out["arrivals"].sort(key=lambda a: a["at_s"])
    return out


def lanes_etas(charts: list[dict]) -> dict[str, float]:
    return {c["id"]: c["eta_at_arrival_s"] for c in charts if c["eta_at_arrival_s"] is not None}


def one_seed(seed: int, hours: float, model: str = "lanes") -> tuple[float, float, int]:
    """naive MAE / ``model`` MAE at arrival: the three one-pool runs together, the three pools."""
    traces = [make_trace(seed * 10 + k, n_orgs=12, workflows=WF12, budget=12, hours=hours, tail_hours=hours / 2)
              for k in range(3)]
    naive_err, model_err, n = [], [], 0
    for t in traces:  # one pool each
        charts = simulate({**_public(t), "eta_model": model})["charts"]
        e_naive, e_model = errors(naive_etas(t, charts), charts), errors(lanes_etas(charts), charts)
        naive_err.append(e_naive["mae"] * e_naive["n"])
        model_err.append(e_model["mae"] * e_model["n"])
        n += e_model["n"]
    one = sum(naive_err) / sum(model_err)
    charts = simulate({**union(traces), "eta_model": model})["charts"]
    naive_3, model_3 = 0.0, 0.0
    for k, t in enumerate(traces):  # naive per pool, on that pool's charts
        mine = [{**c, "id": c["id"][2:]} for c in charts if c["id"].startswith(f"t{k}")]
        e_naive, e_model = errors(naive_etas(t, mine), mine), errors(lanes_etas(mine), mine)
        naive_3 += e_naive["mae"] * e_naive["n"]
        model_3 += e_model["mae"] * e_model["n"]
    return one, naive_3 / model_3, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--hours", type=float, default=2.0)
    a = ap.parse_args()
    print(f"naive MAE / model MAE at arrival, three traces of 12 orgs, budget 12 each, {a.hours:g} h of overload")
    print(f"{'':>12} {'lanes':^37} {'forecast':^37}")
    print(f"{'seed':>4} {'charts':>7} " + f"{'one pool':>9} {'three pools':>12} {'three / one':>12}   " * 2)
    ratios: dict[str, list[float]] = {"lanes": [], "forecast": []}
    for s in range(1, a.seeds + 1):
        row = f"{s:>4} "
        for model in ("lanes", "forecast"):
            one, three, n = one_seed(s, a.hours, model)
            ratios[model].append(three / one)
            if model == "lanes":
                row += f"{n:>7} "
            row += f"{one:>8.2f}x {three:>11.2f}x {three / one:>11.2f}x   "
        print(row.rstrip())
    for model, rs in ratios.items():
        print(f"{model}: three pools / one pool: min {min(rs):.2f}, mean {sum(rs) / len(rs):.2f} "
              "(at least 1: three pools' ETAs as accurate against naive as one pool's)")


if __name__ == "__main__":
    main()
