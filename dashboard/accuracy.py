"""ETA accuracy measured in production: the last N finished charts' first ETA and
ETA at dispatch against when they really finished.

Error = ETA - actual finish, in seconds: negative is optimistic (the chart
finished later than promised). Figures per kind (``first``, ``dispatch``):
median and p90 of the absolute error, and the bias (mean error); ``p90``: the
share of charts that finished by the 90% bound recorded with their first ETA.
"""
from __future__ import annotations

import math
from typing import Any

from charts.models import FINAL_STATES, Chart, ChartState
from scheduling.due import warning_quality

DEFAULT_LAST = 500
MAX_LAST = 5000


def _quantile(sorted_xs: list[float], q: float) -> float | None:
    if not sorted_xs:
        return None
    return sorted_xs[max(0, math.ceil(q * len(sorted_xs)) - 1)]  # nearest rank


def figures(errors: list[float]) -> dict[str, Any]:
    """``n``, ``median_abs_s``, ``p90_abs_s``, ``bias_s`` of signed errors (None when empty)."""
    a = sorted(abs(e) for e in errors)
    return {"n": len(errors), "median_abs_s": _quantile(a, 0.5), "p90_abs_s": _quantile(a, 0.9),
            "bias_s": sum(errors) / len(errors) if errors else None}


def calibration(hits: list[bool]) -> dict[str, Any]:
    """``n`` charts with a p90 finish, ``within``: the share that finished by it (0.9 is calibrated)."""
    return {"n": len(hits), "within": sum(hits) / len(hits) if hits else None}


def accuracy(*, last: int = DEFAULT_LAST, org_id: int | None = None, points: int = 200) -> dict[str, Any]:
    """Accuracy over the ``last`` finished charts (of ``org_id`` if given): overall, per
    org (``orgs``, keyed by org id) and the latest ``points`` (predicted vs actual finish)."""
    last = max(1, min(int(last), MAX_LAST))
    qs = Chart.objects.filter(state=ChartState.SUCCEEDED, finished_at__isnull=False, eta_first_at__isnull=False)
    if org_id is not None:
        qs = qs.filter(org_id=org_id)
    rows = list(qs.order_by("-finished_at", "-pk").values_list(
        "pk", "org_id", "org__name", "finished_at", "eta_first_at", "eta_dispatch_at", "eta_p90_at")[:last])
    overall: dict[str, list] = {"first": [], "dispatch": [], "p90": []}
    per_org: dict[int, dict[str, Any]] = {}
    plot = []
    for pk, org, name, finished, first, dispatch, p90 in rows:
        o = per_org.setdefault(org, {"name": name, "first": [], "dispatch": [], "p90": []})
        if p90 is not None:
            overall["p90"].append(finished <= p90)
            o["p90"].append(finished <= p90)
        e1 = (first - finished).total_seconds()
        overall["first"].append(e1)
        o["first"].append(e1)
        e2 = None
        if dispatch is not None:
            e2 = (dispatch - finished).total_seconds()
            overall["dispatch"].append(e2)
            o["dispatch"].append(e2)
        if len(plot) < points:
            plot.append({"id": pk, "org": org, "actual": finished.isoformat(), "first": first.isoformat(),
                         "dispatch": dispatch.isoformat() if dispatch else None})
    return {
        "last": last, "n": len(rows),
        "first": figures(overall["first"]), "dispatch": figures(overall["dispatch"]),
        "p90": calibration(overall["p90"]),
        "orgs": {str(org): {"name": o["name"], "first": figures(o["first"]), "dispatch": figures(o["dispatch"]),
                            "p90": calibration(o["p90"])}
                 for org, o in sorted(per_org.items(), key=lambda kv: kv[1]["name"])},
        "points": plot[::-1],
        "due": due_warnings(last=last, org_id=org_id),
    }


def due_warnings(*, last: int = DEFAULT_LAST, org_id: int | None = None) -> dict[str, Any]:
    """How good the due warnings were (``scheduling.due.warning_quality``) over the
    ``last`` finished charts that had a due time: recall (missed charts warned at least 1 h
    before their due time), precision (warned charts that then missed), lead times. The
    top-level figures are the first warning's (at risk or late, ``due_flagged_at``: the
    early one); ``"late"`` holds the same figures for the late warning (its ETA after the due
    time, ``due_late_at``), the one held to the goal (docs/scheduling.md, "Two warnings,
    and how good each is")."""
    qs = Chart.objects.filter(state__in=FINAL_STATES, due_at__isnull=False, finished_at__isnull=False)
    if org_id is not None:
        qs = qs.filter(org_id=org_id)
    rows = [(due.timestamp(), not (state == ChartState.SUCCEEDED and finished <= due), flagged, late)
            for state, due, finished, flagged, late in
            qs.order_by("-finished_at", "-pk").values_list("state", "due_at", "finished_at", "due_flagged_at",
                                                           "due_late_at")[:last]]
    stamp = (lambda at: at.timestamp() if at else None)  # noqa: E731
    out = warning_quality((due, missed, stamp(flagged)) for due, missed, flagged, _ in rows)
    out["finished"] = len(rows)
    out["late"] = warning_quality((due, missed, stamp(late)) for due, missed, _, late in rows)
    out["late"]["finished"] = len(rows)
    return out
