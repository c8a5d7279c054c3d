"""Small factories for the pure-core tests."""
from __future__ import annotations

import json
from pathlib import Path

from fairsched.core import QueuedChart

# shared/ lies beside the repository (in CI too: a copy of it next to the clone).
SHARED = Path(__file__).resolve().parents[3] / "shared"
SEED = SHARED / "scenarios" / "seed_example.json"
NOW = "2026-11-29T12:00:00+00:00"


def seed_scenario() -> dict:
    if SEED.exists():
        return json.loads(SEED.read_text())
    # a copy of the worked example, if the shared folder is not mounted
    q = [("A", "1", "11:00"), ("B", "1", "11:01"), ("C", "2", "11:02"), ("D", "1", "11:03"),
         ("E", "2", "11:04"), ("F", "3", "11:05"), ("G", "1", "11:06")]
    return {"now": NOW, "budget": 3, "default_avg_s": 600,
            "orgs": [{"id": "1", "weight": 2}, {"id": "2", "weight": 1}, {"id": "3", "weight": 1}],
            "costs": [], "averages": [], "running": [],
            "queued": [{"id": i, "org": o, "workflow": "code",
                        "created_at": f"2026-11-29T{t}:00+00:00"} for i, o, t in q]}


def qc(cid: str, org: str, created_at: float, seq: int | None = None, workflow: str | None = "w",
       **kw) -> QueuedChart:
    return QueuedChart(cid, org, workflow, float(created_at),
                       seq if seq is not None else int(created_at), **kw)
