"""Smoothing the charge of share "work": the variants tried for issue 43's "Smooth, not
bursty" goal, on bench/drf.py's demo-like trace. Figures, never pass/fail; nothing here is
in the scheduler (each variant patches the arrival rule for the run). Run from the repo root:
``.venv/bin/python bench/drf_smoothing.py [--seeds N]``.

The rule in force (:func:`scheduling.share.arrival_tag`) places a chart at the floor of the
midpoint of its virtual start and finish. A variant charges a chart at most a **cap**: its
round is at most its org's last round + cap / weight, and what it did not charge stays in
the org's virtual finish (a **debt** its next charts pay, each again at most the cap).

- ``cap``: k x the mean work of the org's queued charts (``queued``), or k x a fixed work
  (``fixed``: the trace's mean work, 102 budget-seconds, an oracle the scheduler lacks).
- ``debt``: the most the round may lie before the midpoint rule's, in caps (None: no bound).
- ``lag``: never before the chart's virtual start (WF²Q's bound: an org at most one chart
  ahead), the debt never more than the chart's own work.

Per variant: each org's longest wait without a start on seeds 1-3 and Jain's index; over
``--seeds`` seeds, on how many work's longest wait (the largest over the orgs) is above
charts' on the same trace, and the mean of it; the largest (virtual finish - round) x weight
an org reached (the lag, budget-seconds); and a trace an org can game (``exploit``): X queues
300 charts of 1 budget-second, then 60 of 400, Y 600 of 100; weights 1/1, budget 4: X's share
of the budget over the first 3,000 s, against 0.50.
"""
from __future__ import annotations

import argparse
import math
import sys
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import drf  # noqa: E402
import scheduling.queue.fair_queue as fq  # noqa: E402
from scheduling import Durations  # noqa: E402
from scheduling.contract.simulator import Arrival, budget_shares, simulate  # noqa: E402

MEAN_WORK = (5 * 12 + 3 * 80 + 360 + 360) / 10  # the trace's mix: review, code, audit, deep

VARIANTS = [  # (name, cap source, k, debt bound in caps, lag-bounded)
    ("midpoint (the rule in force)", "fixed", math.inf, None, False),
    ("cap 1.0 x queued mean", "queued", 1.0, None, False),
    ("cap 1.25 x queued mean", "queued", 1.25, None, False),
    ("cap 1.5 x queued mean", "queued", 1.5, None, False),
    ("cap 1.25 x queued mean, debt <= 4 caps", "queued", 1.25, 4, False),
    ("cap 1.25 x queued mean, debt <= 8 caps", "queued", 1.25, 8, False),
    ("cap 1.0 x fixed 102 (oracle)", "fixed", 1.0, None, False),
    ("cap 0.8 x fixed 102 (oracle)", "fixed", 0.8, None, False),
    ("cap 1.25 x queued mean, lag-bounded", "queued", 1.25, None, True),
]

_state = {"lag": 0.0}


def smoothed_tag(head, last, used, turn, work, cap, debt, lag_bounded):
    """:func:`scheduling.share.arrival_tag` with the charge capped (see the module's doc)."""
    pos = last + used / turn if last is not None else None
    if pos is None or pos < head:
        start, key = float(head), float(head)
    else:
        start = pos
        key = pos + work / (2 * turn)
        lim = last + cap / turn
        if lim < key:
            lo = key - debt * cap / turn if debt is not None else -math.inf
            if lag_bounded:
                lo = max(lo, start)
            key = max(lim, lo)
    fin = start + work / turn
    _state["lag"] = max(_state["lag"], (fin - key) * turn)
    r = math.floor(key)
    if r < head:
        r = head
    used_now = (fin - r) * turn
    before = (start - r) * turn if last == r and start > r else 0.0
    return r, used_now, used_now - before


@contextmanager
def variant(source, k, debt, lag_bounded):
    """The arrival rule of ``fq.FairQueue`` replaced for the block (``k`` inf: the rule in
    force, measured)."""
    work_of, tag = fq.FairQueue._work_of, fq.arrival_tag
    seen = {}

    def _work_of(self, e, cost):  # called for the arguments of arrival_tag: note whose chart
        seen["q"], seen["org"] = self, e.org
        return work_of(self, e, cost)

    def _tag(head, last, used, turn, work):
        if source == "fixed":
            cap = k * MEAN_WORK
        else:
            q, org = seen["q"], seen["org"]
            es = q._by_org[org].values()
            cap = k * sum(work_of(q, x, q._costs.get(x.pair, 1)) for x in es) / len(es)
        return smoothed_tag(head, last, used, turn, work, cap, debt, lag_bounded)

    fq.FairQueue._work_of, fq.arrival_tag = _work_of, _tag
    try:
        yield
    finally:
        fq.FairQueue._work_of, fq.arrival_tag = work_of, tag


def exploit_share() -> float:
    kinds = {"tiny": (1, 1.0), "big": (4, 100.0), "y": (1, 100.0)}
    arr = [Arrival(f"xt{i}", "X", "tiny", 0.0, 1.0) for i in range(300)] + \
        [Arrival(f"xb{i}", "X", "big", 0.0, 100.0) for i in range(60)] + \
        [Arrival(f"y{i}", "Y", "y", 0.0, 100.0) for i in range(600)]
    est = Durations({(None, k): d for k, (_, d) in kinds.items()})
    costs = {(o, k): c for o in "XY" for k, (c, _) in kinds.items()}
    r = simulate(arr, budget=4, weights={"X": 1, "Y": 1}, costs=costs, estimate=est, share="work")
    got = budget_shares(r.charts, arr, {a.id: kinds[a.workflow][0] for a in arr}, 0.0, 3000.0)
    return got["X"] / (got["X"] + got["Y"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=12)
    args = ap.parse_args()
    seeds = range(1, args.seeds + 1)
    traces = {s: drf.demo_trace(s) for s in seeds}
    charts_max = {}
    print("charts:")
    for s in seeds:
        charts, fig = drf.run(*traces[s], "charts")
        g = drf.longest_wait_without_a_start(charts)
        charts_max[s] = max(g.values())
        if s <= 3:
            print(f"  seed {s}  {drf.fmt(g)}  max {charts_max[s]:4.0f}  jain {fig['budget_jain']:.3f}")
    print(f"  mean of the max over {len(seeds)} seeds {sum(charts_max.values()) / len(seeds):.0f}")
    for name, source, k, debt, lag_bounded in VARIANTS:
        print(f"work, {name}:")
        worse, total, jains = 0, 0.0, []
        _state["lag"] = 0.0
        with variant(source, k, debt, lag_bounded):
            for s in seeds:
                charts, fig = drf.run(*traces[s], "work")
                g = drf.longest_wait_without_a_start(charts)
                m = max(g.values())
                worse += m > charts_max[s]
                total += m
                jains.append(fig["budget_jain"])
                if s <= 3:
                    print(f"  seed {s}  {drf.fmt(g)}  max {m:4.0f}  jain {fig['budget_jain']:.3f}")
            lag, _state["lag"] = _state["lag"], 0.0
            x = exploit_share()
        print(f"  above charts on {worse} of {len(seeds)} seeds; mean of the max {total / len(seeds):.0f};"
              f" Jain >= {min(jains):.3f}; lag up to {lag:.0f} (exploit: {_state['lag']:.0f});"
              f" exploit: X's share {x:.2f}")


if __name__ == "__main__":
    main()
