"""Backfill with pools against strict on random static backlogs: figures, never pass/fail
(docs/scheduling.md, "Backfill with pools").

Run from the repo root: ``.venv/bin/python bench/pool_backfill.py``.

400 backlogs (seed 43): three pools (``default``, ``gpu``, ``llm``) of 1-4 units, three
orgs (weights 1, 2, 1) of three workflows each drawing 1-3 units of 1-3 pools, estimates
10-200 s, 5-40 charts queued at 0, each running exactly its estimate. Per backlog the mean
finish under backfill against strict; and how many charts start later under backfill.

Then the same 400 backlogs with orgs' limits (docs/scheduling.md, "Backfill with limits";
seed 44 for the limits alone): per backlog a ceiling of 1-3 for one org in one pool and a
minimum of 1 for another org in one pool: the same figures, and the wall time of each run.
"""
from __future__ import annotations

import random
import time

from scheduling.contract.scenario import simulate

POOLS = ("default", "gpu", "llm")
ORGS = {"a": 1, "b": 2, "c": 1}
WFS = ("x", "y", "z")


def backlog(rng: random.Random) -> dict:
    cap = {p: rng.randint(1, 4) for p in POOLS}
    pairs = [(o, w) for o in ORGS for w in WFS]
    table = [{p: rng.randint(1, 3) for p in rng.sample(POOLS, rng.randint(1, 3))} for _ in pairs]
    est = [rng.choice([10, 45, 60, 200]) for _ in pairs]
    charts = [rng.choice(pairs) for _ in range(rng.randint(5, 40))]
    return {"budget": cap["default"], "orgs": [{"id": o, "weight": w} for o, w in ORGS.items()],
            "pools": [{"id": p, "capacity": cap[p]} for p in POOLS if p != "default"],
            "costs": [{"org": o, "workflow": w, "pools": d} for (o, w), d in zip(pairs, table)],
            "averages": [{"org": o, "workflow": w, "avg_s": e} for (o, w), e in zip(pairs, est)],
            "arrivals": [{"id": f"c{i}", "org": o, "workflow": w, "at_s": 0, "actual_s": est[pairs.index((o, w))]}
                         for i, (o, w) in enumerate(charts)]}


def limits(rng: random.Random) -> list[dict]:
    a, b = rng.sample(sorted(ORGS), 2)
    return [{"org": a, "pool": rng.choice(POOLS), "max": rng.randint(1, 3)},
            {"org": b, "pool": rng.choice(POOLS), "min": 1}]


def main() -> None:
    run(None)
    run(random.Random(44))


def run(limits_rng: random.Random | None) -> None:
    rng = random.Random(43)
    gains, later, n = [], 0, 0
    t0 = time.perf_counter()
    for _ in range(400):
        trace = backlog(rng)
        if limits_rng is not None:
            trace["limits"] = limits(limits_rng)
        strict = simulate({**trace, "dispatch": "strict"})["charts"]
        backfill = simulate({**trace, "dispatch": "backfill"})["charts"]
        fs = [c["finish_s"] for c in strict if c["finish_s"] is not None]
        fb = [c["finish_s"] for c in backfill if c["finish_s"] is not None]
        later += sum(1 for b, s in zip(backfill, strict) if b["start_s"] is not None and b["start_s"] > s["start_s"])
        n += len(fb)
        if fs:
            gains.append(1 - sum(fb) / sum(fs))
    print(f"{'with limits' if limits_rng else 'no limits'}: {time.perf_counter() - t0:.1f} s; "
          f"{len(gains)} backlogs, {n} charts: mean finish {100 * sum(gains) / len(gains):.1f}% sooner under backfill "
          f"(mean over backlogs); {later} charts started later than under strict")


if __name__ == "__main__":
    main()
