"""Filters for the cockpit's pages: the same time format as the live pages ("14:05")."""
from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone

from dashboard import history
from dashboard.selectors import temporal_url as selectors_temporal_url

register = template.Library()


@register.filter
def clock(value: datetime | None) -> str:
    """``14:05`` today, ``Nov 30 14:05`` otherwise, ``—`` for nothing (as ``FairLive.clock``)."""
    if value is None:
        return "—"
    local = timezone.localtime(value)
    if local.date() == timezone.localdate():
        return f"{local:%H:%M}"
    return f"{local:%b} {local.day} {local:%H:%M}"


@register.filter
def clock_s(value: datetime | None) -> str:
    """:func:`clock` with seconds, for a chart's timeline."""
    if value is None:
        return "—"
    local = timezone.localtime(value)
    day = "" if local.date() == timezone.localdate() else f"{local:%b} {local.day} "
    return f"{day}{local:%H:%M:%S}"


@register.filter
def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    sign, s = ("-" if seconds < 0 else ""), abs(int(round(seconds)))
    if s < 60:
        return f"{sign}{s} s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{sign}{m} min {s} s" if m < 10 and s else f"{sign}{m} min"
    h, m = divmod(m, 60)
    return f"{sign}{h} h {m} min" if m else f"{sign}{h} h"


@register.filter
def slack(seconds: float | None, state: str | None = None) -> str:
    """A due time's slack (the due time minus the ETA, or minus the finish) in words, for the
    chart's due ``state``: ``2 h 10 min to spare``, ``late by 25 min``; finished, ``met with
    10 min to spare``, ``missed by 5 min`` (or, failed in time, ``ended 5 min before it was due``)."""
    if seconds is None:
        return ""
    by = duration(abs(seconds)) if abs(seconds) >= 0.5 else "under 1 s"
    if state == "met":
        return f"met with {by} to spare"
    if state == "missed":
        return f"missed by {by}" if seconds < 0 else f"ended {by} before it was due"
    return f"late by {by}" if seconds < 0 else f"{by} to spare"


@register.filter
def eta_error(seconds: float | None) -> str:
    """An ETA's error (ETA - actual finish) with its sign, as the accuracy panel shows a bias:
    ``+5 s`` (predicted later than it finished), ``−2 min`` (it finished later)."""
    if seconds is None:
        return "—"
    text = duration(abs(seconds))
    return text if text == "0 s" else ("+" if seconds > 0 else "−") + text


DUE_LABEL = {"on_time": "on time", "at_risk": "at risk", "late": "late", "met": "met", "missed": "missed"}


@register.filter
def due_slack(seconds: float | None) -> str:
    """A slack (the due time minus the ETA) as the dashboard's Due panel shows it (due.js):
    signed, negative when late (``−2.1 h``, ``−20 min``, ``3 min``); ``no ETA`` for none."""
    if seconds is None:
        return "no ETA"
    a, sign = abs(seconds), ("−" if seconds < 0 else "")
    return sign + (f"{a / 60:.0f} min" if a < 5400 else f"{a / 3600:.1f} h")


@register.filter
def due_label(state: str | None) -> str:
    """A due state in words: ``at risk``, never ``at_risk``."""
    return DUE_LABEL.get(state or "", state or "")


@register.filter
def first_line(text: str) -> str:
    return history.first_line(text)


@register.filter
def run_time(finished: datetime | None, started: datetime | None) -> str:
    """``{{ c.finished_at|run_time:c.started_at }}``: how long it ran."""
    if finished is None or started is None:
        return "—"
    return duration((finished - started).total_seconds())


@register.filter
def temporal_url(chart) -> str:
    return selectors_temporal_url(chart.temporal_workflow_id)  # Chart.workflow_id is the FK column
