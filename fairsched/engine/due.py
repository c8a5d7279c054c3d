"""Due times in the live scheduler: what it keeps of them, and each ETA pass's due states.

A chart's due time is its own (``Chart.due_at`` with ``due_explicit``) or its creation plus
its org's turnaround (``Org.turnaround``), or none. The database keeps both forms in
``Chart.due_at`` for its readers; the scheduler keeps only the charts' own due times
(:class:`DueBook`, O(charts that have one)) and derives the rest from the org's row at
each pass, so a turnaround change reaches every unfinished chart with the org's
notification alone, without re-reading a chart.

:func:`due_pass` gives each chart with a due time its state (:mod:`fairsched.core.due`),
counts them per org, lists the charts at risk or late by slack, and moves each chart's
warning level (the hysteresis); the loop writes the levels that changed
(``db.record_due_alerts``), which the webhook sweep turns into ``chart.due_state_changed``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from fairsched.core import BLOCKED, HELD, PAUSED
from fairsched.core.due import AT_RISK, LATE, LEVEL_STATE, ON_TIME, due_state, next_level

FINAL = frozenset({"succeeded", "failed", "cancelled"})
TOP_CHARTS = 100  # the Due panel's list (the snapshot's "due.charts")


@dataclass(slots=True)
class DueInput:
    """What a pass reads of the due times (copies): the charts' own due times, the orgs'
    turnarounds (seconds, by org id string) and the warning levels in force."""

    explicit: dict[int, float] = field(default_factory=dict)
    turnaround: dict[str, float] = field(default_factory=dict)
    alerts: dict[int, int] = field(default_factory=dict)


class DueBook:
    """The scheduler's memory of due times: each chart's own due time and its warning level."""

    __slots__ = ("explicit", "alerts", "changes")

    def __init__(self) -> None:
        self.explicit: dict[int, float] = {}
        self.alerts: dict[int, int] = {}
        self.changes = 0  # own due times set, moved or dropped so far (a preview's "same state", engine/whatif.py)

    @classmethod
    def load(cls, charts) -> DueBook:
        book = cls()
        for row in charts:
            book.apply(row.id, row)
            level = {"at_risk": 1, "late": 2}.get(getattr(row, "due_alert", "") or "")
            if level:
                book.alerts[row.id] = level
        return book

    def apply(self, chart_id: int, row) -> None:
        """Agree with a re-read row (None: gone)."""
        before = self.explicit.get(chart_id)
        if row is None or row.state in FINAL:
            self.explicit.pop(chart_id, None)
            self.alerts.pop(chart_id, None)
        elif row.due_explicit and row.due_at is not None:
            self.explicit[chart_id] = row.due_at
        else:
            self.explicit.pop(chart_id, None)
        if self.explicit.get(chart_id) != before:
            self.changes += 1

    def set_levels(self, changes: dict[int, int], known) -> None:
        """The levels a pass moved, for the charts still ``known`` (queued or running)."""
        for cid, level in changes.items():
            if level:
                if cid in known:
                    self.alerts[cid] = level
            else:
                self.alerts.pop(cid, None)

    def capture(self, orgs) -> DueInput:
        return DueInput(dict(self.explicit), {str(o.id): o.turnaround_s for o in orgs if o.turnaround_s},
                        dict(self.alerts))


@dataclass
class DueResult:
    """One pass's due states."""

    by_chart: dict[int, tuple[float, str, float | None]] = field(default_factory=dict)  # due_s, state, slack_s
    orgs: dict[int, dict[str, int]] = field(default_factory=dict)  # per org: on_time, at_risk, late
    flagged: dict[int, list[list[Any]]] = field(default_factory=dict)  # per org: at risk / late, least slack first
    levels: dict[int, int] = field(default_factory=dict)  # warning levels that changed
    rose: list[int] = field(default_factory=list)  # ... of which these rose (the webhook, the first flag)

    def counts(self) -> dict[str, int]:
        out = {ON_TIME: 0, AT_RISK: 0, LATE: 0}
        for c in self.orgs.values():
            for k in out:
                out[k] += c[k]
        return out

    def top(self, n: int = TOP_CHARTS) -> list[dict[str, Any]]:
        rows = sorted((r for rows in self.flagged.values() for r in rows), key=_slack_key)[:n]
        return [dict(zip(FLAG_KEYS, r)) for r in rows]


FLAG_KEYS = ("id", "org", "state", "due_s", "slack_s", "reason", "workflow", "external_id")


def _slack_key(r: list) -> tuple:
    # least slack first; a chart without an ETA by the time left until it is due
    return (r[4] if r[4] is not None else r[3], r[0])


def due_keys(queue, due: DueInput, now: float):
    """``(key, org, workflow, chart id, due_s)`` of each chart of ``queue``'s order that has a
    due time (its own, else its creation plus its org's turnaround), from the head: the walk
    of :func:`due_pass` and of the previews' counts (``whatif.at_risk_counts``). It reads the
    order's keys only (``FairQueue.keys``), never their entries."""
    explicit, tget = due.explicit, due.turnaround.get
    eget = explicit.get
    for k in queue.keys():
        org, wf = k.pair
        i = int(k.id)
        at = eget(i) if explicit else None
        if at is None:
            t = tget(org)
            if t is None:
                continue
            at = k.created_at + t
        yield k, org, wf, i, at - now


def due_pass(state, etas: dict, now: float, p90: Callable | None) -> DueResult:
    """The due state of every queued and running chart of ``state`` (a ``PassInput``)
    that has a due time, from the pass's ``etas`` and bounds ``p90``."""
    due: DueInput | None = getattr(state, "due", None)
    out = DueResult()
    if due is None or not (due.explicit or due.turnaround):
        for cid in (due.alerts if due else ()):  # nothing is due any more: warnings fall
            out.levels[cid] = 0
        return out
    explicit, turnaround, alerts = due.explicit, due.turnaround, due.alerts
    ext = state.external_ids

    def one(i: int, org: str, wf: str, created: float, eta, no_eta: str | None, external_id) -> None:
        at = explicit.get(i)
        if at is None:
            t = turnaround.get(org)
            if t is None:
                return
            at = created + t
        due_s = at - now
        finish = eta[1] if eta is not None else None
        bound = p90(org, wf, eta) if eta is not None and p90 is not None else None
        s = due_state(due_s, finish, bound, no_eta)
        out.by_chart[i] = (due_s, s.state, s.slack_s)
        o = int(org)
        counts = out.orgs.get(o)
        if counts is None:
            counts = out.orgs[o] = {ON_TIME: 0, AT_RISK: 0, LATE: 0}
        counts[s.state] += 1
        if s.state != ON_TIME:
            out.flagged.setdefault(o, []).append([i, o, s.state, due_s, s.slack_s, s.reason, wf, external_id])
        before = alerts.get(i, 0)
        level = next_level(before, due_s, finish, bound, no_eta)
        if level != before:
            out.levels[i] = level
            if level > before:
                out.rose.append(i)

    # The order in one lean loop: a chart on time with no warning in force (most of them)
    # is counted inline; any other goes through ``one``, the rule's own functions. Equal
    # results either way (tests/engine/test_due_lean_loop.py); this halved a pass at 100k.
    get_eta, aget = etas.get, alerts.get
    by_chart, org_counts, org_int = out.by_chart, out.orgs, {}
    for k, org, wf, i, due_s in due_keys(state.queue, due, now):
        eta = get_eta(k.id)
        if eta is not None and not aget(i):
            finish = eta[1]
            if finish <= due_s and (p90 is None or p90(org, wf, eta) <= due_s):
                by_chart[i] = (due_s, ON_TIME, due_s - finish)
                o = org_int.get(org)
                if o is None:
                    o = org_int[org] = int(org)
                counts = org_counts.get(o)
                if counts is None:
                    counts = org_counts[o] = {ON_TIME: 0, AT_RISK: 0, LATE: 0}
                counts[ON_TIME] += 1
                continue
        one(i, org, wf, k.created_at, eta, None, ext.get(i))
    for kind in (HELD, PAUSED, BLOCKED):
        for q in state.aside[kind]:
            i = int(q.id)
            one(i, q.org, q.workflow, q.created_at, None, kind, ext.get(i))
    for r in state.running:
        one(r.id, str(r.org), r.workflow, r.created_at, etas.get(str(r.id)), None, r.external_id)
    for cid in alerts:
        if cid not in out.by_chart:
            out.levels[cid] = 0  # no due time any more (or not known to this pass)
    for rows in out.flagged.values():
        rows.sort(key=_slack_key)
    return out


def level_name(level: int) -> str:
    return "" if not level else LEVEL_STATE[level]
