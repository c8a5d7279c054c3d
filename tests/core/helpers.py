"""Small factories for the pure-core tests."""
from __future__ import annotations

import json
from pathlib import Path

from scheduling import QueuedChart

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
