"""Due times: a chart's state against the time it is due, and the warning's hysteresis.

Pure: every time is seconds from the ``now`` the caller chose (like the ETAs), so
``due_s`` is the due time minus now, ``finish_s`` the ETA, ``p90_s`` its 90% bound.

The states (docs/scheduling.md, "Due times"):

- ``on_time``: the 90% bound is at or before the due time;
- ``at_risk``: the ETA is at or before the due time, the bound after it;
- ``late``: the ETA is after the due time;
- no ETA (held, paused, blocked): ``at_risk`` with that reason until the due time
  passes, ``late`` after;
- finished: ``met`` (succeeded by the due time) or ``missed``.

The slack is the due time minus the ETA (None without an ETA).

The **warning** (the webhook ``chart.due_state_changed``, the flag the accuracy panel
measures) follows a latched *level*: 0 none, 1 at risk, 2 late. It rises as soon as the
state does; it falls only once the chart is clearly back: the condition it entered on
must hold with the due time moved ``margin_s(due_s)`` earlier (a latched ``at_risk``
clears when the bound is at least that far before the due time, a latched ``late`` falls
to ``at_risk`` when the ETA is). An ETA that wanders across the due time by less than the
margin from pass to pass raises the warning once, never again.
"""
from __future__ import annotations

from typing import NamedTuple

ON_TIME, AT_RISK, LATE, MET, MISSED = "on_time", "at_risk", "late", "met", "missed"
STATES = (ON_TIME, AT_RISK, LATE, MET, MISSED)
LIVE_STATES = (ON_TIME, AT_RISK, LATE)
LEVEL = {ON_TIME: 0, AT_RISK: 1, LATE: 2}
LEVEL_STATE = {0: ON_TIME, 1: AT_RISK, 2: LATE}

MARGIN_MIN_S = 600.0      # the hysteresis: at least 10 minutes ...
MARGIN_SHARE = 0.05       # ... or 5% of the time left until the due time


class DueState(NamedTuple):
    state: str
    slack_s: float | None   # due - ETA; None without an ETA
    reason: str             # why: "90% bound after the due time", "paused: no ETA", ...


def due_state(due_s: float, finish_s: float | None, p90_s: float | None = None,
              no_eta: str | None = None) -> DueState:
    """The state of a queued or running chart due ``due_s`` from now, with ETA ``finish_s``
    and 90% bound ``p90_s`` (None: the bound is the ETA, as the lane model has none).
    ``no_eta``: why it has no ETA ("held", "paused", "blocked"), when it has none."""
    if finish_s is None:
        why = f"{no_eta or 'unplanned'}: no ETA"
        return DueState(AT_RISK if due_s >= 0 else LATE, None, why if due_s >= 0 else why + ", due time passed")
    slack = due_s - finish_s
    if finish_s > due_s:
        return DueState(LATE, slack, "ETA after the due time")
    bound = finish_s if p90_s is None else max(p90_s, finish_s)
    if bound > due_s:
        return DueState(AT_RISK, slack, "90% bound after the due time")
    return DueState(ON_TIME, slack, "")


def finished_state(due_at: float, finished_at: float, succeeded: bool = True) -> str:
    """``met`` if it succeeded by ``due_at`` (absolute times), else ``missed``."""
    return MET if succeeded and finished_at <= due_at else MISSED


def margin_s(due_s: float) -> float:
    """How far back past the threshold a chart must come before its warning falls."""
    return max(MARGIN_MIN_S, MARGIN_SHARE * max(0.0, due_s))


def next_level(level: int, due_s: float, finish_s: float | None, p90_s: float | None = None,
               no_eta: str | None = None) -> int:
    """The warning's level after a pass, from its ``level`` before it (0, 1, 2): up at
    once, down only past the margin (see the module's docstring)."""
    now_level = LEVEL[due_state(due_s, finish_s, p90_s, no_eta).state]
    if now_level >= level:
        return now_level
    strict = LEVEL[due_state(due_s - margin_s(due_s), finish_s, p90_s, no_eta).state]
    return max(now_level, min(level, strict))


LEAD_S = 3600.0  # a warning counts for the recall when it came at least this long before the due time


def warning_quality(charts, lead_s: float = LEAD_S) -> dict:
    """How good the warning was, over finished charts ``(due_at, missed, flagged_at)``
    (absolute times; ``flagged_at`` None: never warned): ``recall`` the share of the missed
    charts warned at least ``lead_s`` before their due time, ``precision`` the share of the
    warned charts that then missed, and the lead times (due - first warning) of the missed."""
    missed = flagged = flagged_missed = early = 0
    leads: list[float] = []
    for due_at, was_missed, flagged_at in charts:
        if flagged_at is not None:
            flagged += 1
            flagged_missed += bool(was_missed)
        if was_missed:
            missed += 1
            if flagged_at is not None:
                lead = due_at - flagged_at
                leads.append(lead)
                early += lead >= lead_s
    leads.sort()
    return {"finished": None, "missed": missed, "flagged": flagged, "lead_min_s": lead_s,
            "recall": early / missed if missed else None,
            "precision": flagged_missed / flagged if flagged else None,
            "missed_unwarned": missed - len(leads),
            "lead_median_s": leads[len(leads) // 2] if leads else None}
