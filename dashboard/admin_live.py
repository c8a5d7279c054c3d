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
from django.db.models import Case, FloatField, IntegerField, Value, When
from django.utils import timezone
from django.utils.html import format_html

from charts import selectors as chart_selectors
from dashboard import selectors
from common import snapshot as _snap_module

_SNAP_TTL_S = 1.0
_snap: dict[str, Any] = {"at": 0.0, "value": None}


def forget_snapshot() -> None:
    """Read the snapshot again at the next row (it is kept a second): a new one seen at once (tests)."""
    _snap.update(at=0.0, value=None)


def _snapshot() -> dict[str, Any] | None:
    """The latest snapshot, read at most once a second (a changelist asks once per row)."""
    if time.monotonic() - _snap["at"] > _SNAP_TTL_S:
        _snap.update(at=time.monotonic(), value=chart_selectors.read_live_snapshot())
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


LIVE_SORT_MAX = 2000  # sorting by position or ETA orders the first this many charts of the order
UNPLACED = 10**9


def _live_keys(snapshot: dict[str, Any] | None) -> tuple[list[When], list[When]]:
    """``When`` clauses mapping chart ids to their position and predicted finish (seconds from now)."""
    if snapshot is None:
        return [], []
    rows, _ = selectors.order_rows(snapshot)
    placed = [r for r in rows[:LIVE_SORT_MAX] if r.get("pos") is not None]
    pos = [When(pk=r["id"], then=Value(r["pos"])) for r in placed]
    timed = [r for r in list(snapshot.get("running", [])) + placed if r.get("finish_s") is not None]
    eta = [When(pk=r["id"], then=Value(float(r["finish_s"]))) for r in timed[:LIVE_SORT_MAX]]
    return pos, eta
def _chart_row(s: dict, chart_id: int) -> dict | None:
    """The chart's published place: one small Redis read, never the whole order."""
    return _snap_module.read_charts([chart_id], snapshot=s).get(chart_id)


class LiveChartAdminMixin:
    """Position and ETA columns from the latest snapshot, both sortable.

    They are not database columns: when the list is sorted by one of them, the queryset is
    annotated from the snapshot (the first :data:`LIVE_SORT_MAX` charts of the order; the
    rest sort after them).
    """

    def get_queryset(self, request):
        qs = super().get_queryset(request)
        if not request.GET.get("o"):
            return qs
        pos, eta = _live_keys(_snapshot())
        return qs.annotate(
            live_pos=Case(*pos, default=Value(UNPLACED), output_field=IntegerField()) if pos else Value(UNPLACED),
            live_finish=Case(*eta, default=Value(float(UNPLACED)), output_field=FloatField()) if eta
            else Value(float(UNPLACED)),
        )

    @admin.display(description="State", ordering="state")
    def state_flags(self, obj) -> str:
        flags = [obj.state] + (["paused"] if obj.paused else []) + (["priority"] if obj.priority else [])
        return " · ".join(flags)

    @admin.display(description="Position", ordering="live_pos")
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

    @admin.display(description="ETA", ordering="live_finish")
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
        if row is None:
            return "—"
        note = row.get("no_eta")  # held, paused or blocked charts: named, never "clear"
        if row.get("clear_s") is None:
            return note or "—"
        if not row["clear_s"]:
            return note or "clear"
        when = _when(s.get("now") or time.time(), row["clear_s"])
        return f"{when}; {note}" if note else when
