"""The admin, live: chart position and ETA, org clear-times, from the latest snapshot.

Mixed into the existing ``ChartAdmin`` and ``OrgAdmin`` (re-registered in
``dashboard/admin.py``) so their apps need no change. The live counters on every
admin page come from the dashboard socket (``templates/admin/base_site.html``).
"""
from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html

from dashboard import selectors
from fairsched import snapshot as _snap_module

_SNAP_TTL_S = 1.0
_snap: dict[str, Any] = {"at": 0.0, "value": None}


def _snapshot() -> dict[str, Any] | None:
    """The latest snapshot, read at most once a second (a changelist asks once per row)."""
    if time.monotonic() - _snap["at"] > _SNAP_TTL_S:
        _snap.update(at=time.monotonic(), value=selectors.read_live_snapshot())
    return _snap["value"]


def _when(base: float, seconds: float | None) -> str:
    if seconds is None:
        return "—"
    at = datetime.fromtimestamp(base + seconds, tz=timezone.get_current_timezone())
    left = max(0.0, base + seconds - time.time())
    h, rem = divmod(int(left), 3600)
    m = rem // 60
    span = f"{h} h {m} min" if h else f"{m} min"
    return f"{at:%H:%M} (in {span})"


def _chart_row(s: dict, chart_id: int) -> dict | None:
    """The chart's published place: one small Redis read, never the whole order."""
    return _snap_module.read_charts([chart_id], snapshot=s).get(chart_id)


class LiveChartAdminMixin:
    @admin.display(description="Position")
    def live_position(self, obj) -> str:
        s = _snapshot()
        if obj.state != "queued":
            return "—"
        if s is None:
            return format_html('<span title="{}">?</span>', "waiting for the scheduler")
        row = _chart_row(s, obj.pk)
        if row is None:
            return "—"
        return str(row["pos"] + 1) if row.get("pos") is not None else row.get("state", "—")

    @admin.display(description="ETA")
    def live_eta(self, obj) -> str:
        s = _snapshot()
        if s is None or obj.state not in ("queued", "running"):
            return "—"
        if obj.state == "running":
            row = next((r for r in s.get("running", []) if r.get("id") == obj.pk), None)
        else:
            row = _chart_row(s, obj.pk)
        if row is None or row.get("finish_s") is None:
            return "—"
        return _when(s.get("now") or time.time(), row["finish_s"])


class LiveOrgAdminMixin:
    @admin.display(description="Clear-time")
    def live_clear(self, obj) -> str:
        s = _snapshot()
        if s is None:
            return "—"
        row = next((o for o in s.get("orgs", []) if o.get("id") == obj.pk), None)
        if row is None or row.get("clear_s") is None:
            return "—"
        if not row["clear_s"]:
            return "clear"
        return _when(s.get("now") or time.time(), row["clear_s"])
