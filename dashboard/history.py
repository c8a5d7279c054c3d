"""Reads for the cockpit's views of what has happened: history, search, a chart's
page, failures, the activity feed.

Pages are keyset-paginated on ``(finished_at, id)`` (index ``chart_finished``):
the next page starts after the last row shown, so the millionth finished chart
costs the page the same as the first (an OFFSET would read and skip them all).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

from django.db.models import Count, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from charts.models import FINAL_STATES, Chart, ChartState
from charts.services import RERUN_MARK, run_lineage
from charts import selectors as chart_selectors
from common.validation import MAX_ID
from common import snapshot as snap
from scheduling import DECLARED_AS_N, EstimateSource
from scheduling.due import finished_state
from control.audit import entry_json
from control.models import AuditEntry

PAGE = 50
SEARCH_MAX = 50


# --- history --------------------------------------------------------------------------


@dataclass(frozen=True)
class Cursor:
    """Where the next (older) page starts: after the row finished at ``at`` with ``id``."""

    at: datetime
    id: int

    def text(self) -> str:
        return f"{self.at.isoformat()}_{self.id}"

    @classmethod
    def parse(cls, text: str) -> "Cursor":
        """The cursor of a page link; ValueError naming ``after`` for anything else, the
        extremes too: a time that is past year 9999 or before year 1 in UTC (which the
        database adapter's conversion overflowed into a 500) or an id no database holds."""
        at, _, pk = (text or "").rpartition("_")
        shown = text if len(text or "") <= 60 else text[:60] + "..."
        try:
            when = parse_datetime(at) if at else None
        except ValueError:  # well-formed but not a date (month 13)
            when = None
        if when is None or not _CURSOR_ID.fullmatch(pk) or int(pk) > MAX_ID:
            raise ValueError(f"after: {shown!r} is not a page cursor (use the page's own links).")
        try:
            when = in_utc(when)
        except OverflowError:
            raise ValueError(f"after: {shown!r} is out of range (use the page's own links).") from None
        return cls(when, int(pk))


_CURSOR_ID = re.compile(r"[0-9]{1,16}")


def in_utc(when: datetime) -> datetime:
    """``when`` in UTC (a naive time is taken as the current time zone's, as the forms do);
    OverflowError when that is outside years 1 to 9999, which no database adapter takes."""
    if timezone.is_naive(when):
        when = timezone.make_aware(when)
    return when.astimezone(dt_timezone.utc)


def history_page(*, org=None, workflow=None, state: str | None = None, since: datetime | None = None,
                 until: datetime | None = None, after: Cursor | None = None, limit: int = PAGE) -> dict[str, Any]:
    """Finished, failed and cancelled charts, newest first, ``limit`` at a time."""
    # One state: the (state, finished_at) index gives its rows in order. All of them: walk the
    # (finished_at, id) index backwards and stop at the page's end; "state IN (three)" would
    # make SQLite fetch and sort every finished chart first (480 ms at 200k instead of ~15).
    qs = Chart.objects.filter(finished_at__isnull=False)
    qs = qs.filter(state=state) if state else qs.exclude(state__in=[ChartState.QUEUED, ChartState.RUNNING])
    if org is not None:
        qs = qs.filter(org=org)
    if workflow is not None:
        qs = qs.filter(workflow=workflow)
    if since is not None:
        qs = qs.filter(finished_at__gte=since)
    if until is not None:
        qs = qs.filter(finished_at__lt=until)
    if after is not None:
        qs = qs.filter(Q(finished_at__lt=after.at) | Q(finished_at=after.at, id__lt=after.id))
    rows = list(qs.select_related("org", "workflow").order_by("-finished_at", "-id")[:limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return {"rows": rows, "next": Cursor(rows[-1].finished_at, rows[-1].pk).text() if more else None}


# --- search ---------------------------------------------------------------------------

_ID = re.compile(r"^#?\s*(\d{1,18})$")


def search(query: str) -> list[Chart]:
    """Charts whose id or external id is ``query``, in every state, and their re-runs
    (by id prefix and by ``rerun_of``, so the re-runs of an id too long to keep whole are found).

    ``#123`` or ``123`` is a chart id (and also tried as an external id);
    anything else is an exact external id, in any org.
    """
    q = (query or "").strip()
    if not q:
        return []
    cond = Q(external_id=q) | Q(external_id__startswith=q + RERUN_MARK)
    # Re-runs through their link too: a long id's re-runs carry it cut short (``rerun_id``).
    originals = list(Chart.objects.filter(external_id=q).values_list("pk", flat=True)[:SEARCH_MAX])
    if originals:
        cond |= Q(pk__in=run_lineage(*originals, limit=SEARCH_MAX * 2))
    m = _ID.match(q)
    if m:
        cond |= Q(pk=int(m.group(1)))
    return list(Chart.objects.filter(cond).select_related("org", "workflow").order_by("-created_at", "-id")[:SEARCH_MAX])


# --- one chart --------------------------------------------------------------------------


def chart_timeline(chart: Chart, entries: list[AuditEntry]) -> list[dict[str, Any]]:
    """What happened to the chart, in order: its own timestamps and the operators' actions."""
    steps: list[dict[str, Any]] = [{"at": chart.created_at, "what": "created", "by": ""}]
    for e in entries:
        steps.append({"at": e.at, "what": e.summary, "by": e.actor_name or "system"})
    if chart.prioritized_at and not any(e.action == "prioritize" for e in entries):
        steps.append({"at": chart.prioritized_at, "what": "prioritised", "by": ""})
    if chart.paused and not any(e.action == "pause" for e in entries):
        steps.append({"at": None, "what": "paused (now)", "by": ""})
    for field, what in (("dispatched_at", "dispatched"), ("started_at", "started"), ("finished_at", chart.state)):
        value = getattr(chart, field)
        if value is not None and not (field == "started_at" and value == chart.dispatched_at):
            steps.append({"at": value, "what": what, "by": ""})
    steps.sort(key=lambda s: (s["at"] is None, s["at"] or chart.created_at))
    return steps


def _delta(predicted: datetime | None, actual: datetime | None) -> dict[str, Any] | None:
    """``off_s``: the error as the accuracy panel defines it, ETA - actual finish (negative:
    it finished later than predicted)."""
    if predicted is None:
        return None
    off = (predicted - actual).total_seconds() if actual is not None else None
    return {"predicted": predicted, "actual": actual, "off_s": off}


def chart_prediction(chart: Chart) -> dict[str, Any]:
    """What was predicted for the chart against what happened.

    * ``live``: its position and predicted start and finish from the latest snapshot (queued or
      running): a queued chart's own field of the snapshot (``c:<id>``), never the whole order;
      with pools, ``waits``: why a queued chart waits for a pool or at its org's ceiling there
      (``charts.selectors.chart_waits``, the org page's words), else None.
    * ``first`` and ``at_dispatch``: the finish predicted when it was first placed and when it
      was dispatched, if the scheduler stored them on the chart (``eta_first_at``,
      ``eta_dispatch_at``; read with getattr, so this page works with or without them).
    * ``due_state`` of a finished chart (``met``, ``missed``; a live one's is in ``live``) and
      ``slack_s``: its due time minus its ETA (live) or the time it finished.
    * ``run``: the run time the duration estimate expected against the actual one.
    """
    out: dict[str, Any] = {"live": None, "due_state": None}
    snapshot = chart_selectors.read_live_snapshot()
    if snapshot is not None and chart.state in (ChartState.QUEUED, ChartState.RUNNING):
        base = snapshot.get("now") or timezone.now().timestamp()
        if chart.state == ChartState.RUNNING:
            row = next((r for r in snapshot.get("running", []) if r.get("id") == chart.pk), None)
        else:  # its own published place: one field, never the whole order (any member may load this)
            row = snap.read_charts([chart.pk], snapshot=snapshot).get(chart.pk)

        def at(key: str) -> datetime | None:
            v = (row or {}).get(key)
            return datetime.fromtimestamp(base + v, tz=timezone.get_current_timezone()) if v is not None else None
        if row is not None:
            out["live"] = {"pos": row.get("pos"), "state": row.get("state") or chart.state,
                           "start": at("start_s"), "finish": at("finish_s"),
                           "due_state": row.get("due_state"), "slack_s": row.get("slack_s"),
                           "waits": None}
            if chart.state == ChartState.QUEUED:  # with pools: why it waits, as its org's page says
                out["live"]["waits"] = chart_selectors.chart_waits(snapshot, [
                    (chart.pk, chart.org_id, chart.workflow.name, out["live"]["state"])]).get(chart.pk)
    out["slack_s"] = (out["live"] or {}).get("slack_s")
    if chart.due_at is not None and chart.state in FINAL_STATES:
        finished = (chart.finished_at or chart.updated_at).timestamp()
        out["due_state"] = finished_state(chart.due_at.timestamp(), finished, chart.state == ChartState.SUCCEEDED)
        out["slack_s"] = chart.due_at.timestamp() - finished  # the due time minus when it finished
    out["first"] = _delta(getattr(chart, "eta_first_at", None), chart.finished_at)
    out["at_dispatch"] = _delta(getattr(chart, "eta_dispatch_at", None), chart.finished_at)
    source = chart_selectors.read_durations().source(str(chart.org_id), chart.workflow.name)
    expected = source.seconds
    actual = ((chart.finished_at - chart.started_at).total_seconds()
              if chart.finished_at and chart.started_at else None)
    out["run"] = {"expected_s": expected, "actual_s": actual, "source": source.kind,
                  "source_text": estimate_source_text(source, chart.org.name, chart.workflow.name),
                  "predicted_finish": chart.started_at + timedelta(seconds=expected) if chart.started_at else None}
    out["run"]["off_s"] = ((out["run"]["predicted_finish"] - chart.finished_at).total_seconds()
                           if out["run"]["predicted_finish"] and chart.finished_at else None)  # ETA - actual
    return out


def _charts(n: int | None) -> str:
    return "" if n is None else f" ({n:,} finished)"


def format_seconds(seconds: float) -> str:
    return f"{round(seconds):,} s"


def estimate_source_text(source: EstimateSource, org: str, workflow: str) -> str:
    """Where a duration estimate came from, in words (docs/scheduling.md, "The duration estimate")."""
    blend = ""
    if source.declared_s is not None and source.kind != "declared":
        blend = (f", blended with the declared {format_seconds(source.declared_s)} "
                 f"(weighing as {DECLARED_AS_N} finished charts)")
    match source.kind:
        case "pair":
            return f"history of {org}'s {workflow} charts{_charts(source.n)}{blend}"
        case "workflow":
            return f"history of {workflow} charts of every org{_charts(source.n)}{blend}"
        case "declared":
            return f"the expected duration declared for {workflow} (no {workflow} chart has finished yet)"
        case "org":
            return f"history of {org}'s other workflows{_charts(source.n)} (no {workflow} history, nothing declared)"
    return f"the default ({format_seconds(source.seconds)}: no history and nothing declared)"


def chart_entries(chart: Chart) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(chart=chart).order_by("at", "id")[:200])


# --- failures ---------------------------------------------------------------------------


def failures(*, now: datetime | None = None, recent: int = 50) -> dict[str, Any]:
    """Recent failures and how many per org and per workflow in the last hour and day."""
    now = now or timezone.now()
    hour, day = now - timedelta(hours=1), now - timedelta(days=1)
    failed = Chart.objects.filter(state=ChartState.FAILED, finished_at__gte=day)
    counts = {"hour": Count("id", filter=Q(finished_at__gte=hour)), "day": Count("id")}
    return {
        "recent": list(Chart.objects.filter(state=ChartState.FAILED, finished_at__isnull=False)
                       .select_related("org", "workflow").order_by("-finished_at", "-id")[:recent]),
        "by_org": list(failed.values("org__name", "org_id").annotate(**counts).order_by("-hour", "-day", "org__name")),
        "by_workflow": list(failed.values("workflow__name", "workflow_id").annotate(**counts)
                            .order_by("-hour", "-day", "workflow__name")),
        "hour": failed.filter(finished_at__gte=hour).count(),
        "day": failed.count(),
    }


def failed_since(*, hours: float) -> int:
    """How many charts failed in the last ``hours`` (index ``chart_state_finished``)."""
    return Chart.objects.filter(state=ChartState.FAILED, finished_at__gte=timezone.now() - timedelta(hours=hours)).count()


def first_line(text: str, limit: int = 160) -> str:
    line = next((part.strip() for part in (text or "").splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[:limit - 1] + "…"


# --- activity ---------------------------------------------------------------------------


def recent_activity(limit: int = 30) -> list[dict[str, Any]]:
    return [entry_json(e) for e in AuditEntry.objects.order_by("-at", "-id")[:limit]]
