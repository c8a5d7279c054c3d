"""A chart as the API shows it: its row, and its place and ETA from the scheduler's snapshot.

The place of a queued chart is its own field of the snapshot (``c:<id>``,
:func:`common.snapshot.read_charts`, one Redis round trip for a whole page of charts),
never the whole order; a running chart's ETA is its row of the snapshot's ``running``.
When none is known, ``no_eta`` says why in the words the pages use; with capacity pools,
``waits`` says why a queued chart waits for a pool or at its org's ceiling there, and a
blocked chart's ``no_eta`` names the pool that has no room for it."""
from __future__ import annotations

from datetime import datetime, timezone as dt_timezone
from typing import Any

from charts import selectors
from charts.models import FINAL_STATES, Chart, ChartState
from common import snapshot as snap
from scheduling.due import finished_state

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
    places, running, base, snapshot = _live_rows(charts, placed)
    waits = selectors.chart_waits(snapshot, [(c.pk, c.org_id, c.workflow.name, places[c.pk].get("state"))
                                             for c in charts if c.pk in places])
    out = []
    for c in charts:
        if c.state in FINAL_STATES:
            fields = _final_fields(c)
        else:
            fields = _live_fields(c, places.get(c.pk) if c.state == ChartState.QUEUED else running.get(c.pk), base)
        wait = waits.get(c.pk)
        if wait and fields["reason"] == ASIDE["blocked"]:  # with pools: which pool has no room for it
            fields["reason"] = f"blocked: {wait}"
        out.append({
            "id": c.pk, "external_id": c.external_id, "workflow": c.workflow.name, "state": c.state,
            "priority": c.priority, "paused": c.paused, "cancel_requested": c.cancel_requested,
            "position": fields["position"], "eta": fields["eta"], "eta_p90": fields["p90"],
            "no_eta": fields["reason"], "waits": wait,
            "created_at": _iso(c.created_at), "started_at": _iso(c.started_at), "finished_at": _iso(c.finished_at),
            "error": c.error or None, "rerun_of": c.rerun_of_id,
            "due_at": _iso(c.due_at), "due_state": fields["due_state"], "slack_s": fields["slack"], "url": url(c.pk),
        })
    return out


def _live_rows(charts: list[Chart], placed: bool) -> tuple[dict[int, dict], dict[int, dict], float, dict | None]:
    """The snapshot's rows of the queued and the running charts among ``charts`` (read only
    for those), the snapshot's ``now`` their seconds count from, and the snapshot."""
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
    return places, running, float((snapshot or {}).get("now") or 0.0), snapshot


def _final_fields(c: Chart) -> dict[str, Any]:
    """A finished chart: no place; whether it met its due time."""
    due_state = None
    if c.due_at is not None and c.finished_at is not None:
        due_state = finished_state(c.due_at.timestamp(), c.finished_at.timestamp(), c.state == ChartState.SUCCEEDED)
    return {"position": None, "eta": None, "p90": None, "reason": f"{c.state}: no longer in the order",
            "due_state": due_state, "slack": None}


def _live_fields(c: Chart, row: dict[str, Any] | None, base: float) -> dict[str, Any]:
    """A queued or running chart: its place and ETA from the snapshot's row, or why it has none."""
    out: dict[str, Any] = {"position": None, "eta": None, "p90": None, "reason": None, "due_state": None,
                           "slack": None}
    if row is not None and c.due_at is not None:  # the pass's per-chart due fields
        out["due_state"], out["slack"] = row.get("due_state"), row.get("slack_s")
    if row is None:
        out["reason"] = WAITING
    elif row.get("state") in ASIDE:
        out["reason"] = ASIDE[row["state"]]
    else:
        out["position"] = row.get("pos")
        out["eta"], out["p90"] = _at(base, row.get("finish_s")), _at(base, row.get("p90_s"))
        if out["eta"] is None:
            out["reason"] = WAITING
    return out
