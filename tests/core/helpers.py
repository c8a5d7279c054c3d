"""Small factories for the pure-core tests."""
from __future__ import annotations

import json
from pathlib import Path

from hypothesis import strategies as st

from scheduling import QueuedChart
from scheduling.contract.simulator import Arrival, Event

# The worked example, as shipped in examples/ (tests/test_examples.py keeps it equal to
# the contract's copy in shared/).
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "seed_example.json"
NOW = "2026-11-29T12:00:00+00:00"


def seed_scenario() -> dict:
    return json.loads(EXAMPLE.read_text())


def qc(cid: str, org: str, created_at: float, seq: int | None = None, workflow: str | None = "w",
       **kw) -> QueuedChart:
    return QueuedChart(cid, org, workflow, float(created_at),
                       seq if seq is not None else int(created_at), **kw)


def arrivals_and_events(draw, orgs, most: int, span: int) -> tuple[list, list]:
    """A random trace for the forecast's no-peeking properties (``draw``: a composite's):
    2 to ``most`` arrivals of ``orgs`` within ``span`` seconds (workflows x and y, 1-300 s,
    a quarter of them due), sorted by arrival, and up to 3 events in the same span: a weight
    (0-2), the budget (1-4), or a pause of one of the charts."""
    n = draw(st.integers(2, most))
    arrivals = [Arrival(f"c{i}", draw(st.sampled_from(orgs)), draw(st.sampled_from(["x", "y"])),
                        float(draw(st.integers(0, span))), float(draw(st.integers(1, 300))),
                        draw(st.booleans()) and draw(st.booleans())) for i in range(n)]
    arrivals.sort(key=lambda a: a.at_s)
    events = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["set_weight", "set_budget", "pause"]))
        at = float(draw(st.integers(0, span)))
        if kind == "set_weight":
            events.append(Event(at, kind, org=draw(st.sampled_from(orgs)), value=draw(st.integers(0, 2))))
        elif kind == "set_budget":
            events.append(Event(at, kind, value=draw(st.integers(1, 4))))
        else:
            events.append(Event(at, kind, chart=draw(st.sampled_from(arrivals)).id))
    return arrivals, events
