"""A chart as the API shows it: its row, and its place and ETA from the scheduler's snapshot.

The place of a queued chart is its own field of the snapshot (``c:<id>``,
:func:`common.snapshot.read_charts`, one Redis round trip for a whole page of charts),
never the whole order; a running chart's ETA is its row of the snapshot's ``running``.
When none is known, ``no_eta`` says why in the words the pages use."""
from __future__ import annotations

from datetime import datetime, timezone as dt_timezone
from typing import Any

from charts.models import FINAL_STATES, Chart, ChartState
from common import snapshot as snap
from dashboard import selectors
from fairsched.core.due import finished_state

WAITING = "waiting for the scheduler's next pass to place it"  # the chart page's words
ASIDE = {  # common/clear_notes.py's words, for one chart
    "held": "held: no ETA",
    "paused": "paused: no ETA until resumed",
    "blocked": "blocked: cost above the budget",
}


def url(chart_id: int) -> str:
    return f"/api/v1/charts/{chart_id}"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _at(base: float, seconds: Any) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(base + float(seconds), tz=dt_timezone.utc).isoformat()


def describe(charts: list[Chart], *, placed: bool = True) -> list[dict[str, Any]]:
    """The API's view of each chart. ``placed=False`` skips the snapshot (a chart just
    submitted has no place yet)."""
    live = [c for c in charts if c.state in (ChartState.QUEUED, ChartState.RUNNING)]
    snapshot = selectors.read_live_snapshot() if placed and live else None
    places: dict[int, dict[str, Any]] = {}
    running: dict[int, dict[str, Any]] = {}
    if snapshot is not None:
        queued = [c.pk for c in live if c.state == ChartState.QUEUED]
        if queued:
            places = snap.read_charts(queued, snapshot=snapshot)
        if any(c.state == ChartState.RUNNING for c in live):
            running = {r.get("id"): r for r in snapshot.get("running", [])}
    base = float((snapshot or {}).get("now") or 0.0)
    out = []
    for c in charts:
        position = eta = p90 = due_state = slack = None
        reason: str | None = None
        if c.state in FINAL_STATES:
            reason = f"{c.state}: no longer in the order"
            if c.due_at is not None and c.finished_at is not None:
                due_state = finished_state(c.due_at.timestamp(), c.finished_at.timestamp(),
                                           c.state == ChartState.SUCCEEDED)
        else:
            row = places.get(c.pk) if c.state == ChartState.QUEUED else running.get(c.pk)
            if row is not None and c.due_at is not None:  # the pass's per-chart due fields
                due_state, slack = row.get("due_state"), row.get("slack_s")
            if row is None:
                reason = WAITING
            elif row.get("state") in ASIDE:
                reason = ASIDE[row["state"]]
            else:
                position = row.get("pos")
                eta, p90 = _at(base, row.get("finish_s")), _at(base, row.get("p90_s"))
                if eta is None:
                    reason = WAITING
        out.append({
            "id": c.pk, "external_id": c.external_id, "workflow": c.workflow.name, "state": c.state,
            "priority": c.priority, "paused": c.paused, "cancel_requested": c.cancel_requested,
            "position": position, "eta": eta, "eta_p90": p90, "no_eta": reason,
            "created_at": _iso(c.created_at), "started_at": _iso(c.started_at), "finished_at": _iso(c.finished_at),
            "error": c.error or None, "rerun_of": c.rerun_of_id,
            "due_at": _iso(c.due_at), "due_state": due_state, "slack_s": slack, "url": url(c.pk),
        })
    return out
