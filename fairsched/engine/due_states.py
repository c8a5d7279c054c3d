"""Due times in the live scheduler: what it keeps of them, and each ETA pass's due states.

A chart's due time is its own (``Chart.due_at`` with ``due_explicit``) or its creation plus
its org's turnaround (``Org.turnaround``), or none. The database keeps both forms in
``Chart.due_at`` for its readers; the scheduler keeps only the charts' own due times
(:class:`DueBook`, O(charts that have one)) and derives the rest from the org's row at
each pass, so a turnaround change reaches every unfinished chart with the org's
notification alone, without re-reading a chart.

:func:`due_pass` gives each chart with a due time its state (:mod:`scheduling.due`),
counts them per org, lists the charts at risk or late by slack, and moves each chart's
warning level (the hysteresis); the loop writes the levels that changed
(``db.record_due_alerts``), which the webhook sweep turns into ``chart.due_state_changed``.
"""
from __future__ import annotations

import heapq
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from typing import Any, Callable

from scheduling import BLOCKED, HELD, PAUSED, eta_reader
from scheduling.due import AT_RISK, LATE, LEVEL_STATE, ON_TIME, due_state, next_level
from fairsched.engine import forked
from fairsched.engine.order_rows import DUE_CODE, DUE_STATES, NAN

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

    def capture(self, orgs, copy: bool = True) -> DueInput:
        """What a pass reads (``copy=False``: this book's own dicts, for a forked child,
        whose memory is a copy already: after a first pass at 1M with half the charts late,
        copying the warnings in force was 40 MB of the child)."""
        turnaround = {str(o.id): o.turnaround_s for o in orgs if o.turnaround_s}
        if not copy:
            return DueInput(self.explicit, turnaround, self.alerts)
        return DueInput(dict(self.explicit), turnaround, dict(self.alerts))


class DueByChart(Mapping):
    """Each chart's ``(due_s, state, slack_s)``, by chart id, for the charts with a due time.

    The order's charts are held in three columns aligned with the order (``due``, ``state``
    as :data:`~fairsched.engine.order_rows.DUE_CODE`, ``slack``; NaN and 0 where a chart has
    no due time): the snapshot's rows take them as they are (``publish._ordered_rows``), with
    no tuple, float or dict entry per chart (a million of those were about 80 MB of a forked
    pass). ``ids`` and ``pos`` name the charts that have one and their places; a lookup by
    id builds its index on first use. The charts set aside and the running ones are in
    ``extra``, a dict."""

    __slots__ = ("due", "state", "slack", "ids", "pos", "extra", "_index")

    def __init__(self, n: int = 0) -> None:
        self.due = array("d", [NAN]) * n
        self.state = bytearray(n)
        self.slack = array("d", [NAN]) * n
        self.ids = array("q")
        self.pos = array("q")
        self.extra: dict[int, tuple[float, str, float | None]] = {}
        self._index: dict[int, int] | None = None

    def set(self, pos: int, chart_id: int, due_s: float, state: str, slack_s: float | None) -> None:
        """The due state of the order's chart at ``pos``."""
        self.due[pos] = due_s
        self.state[pos] = DUE_CODE[state]
        self.slack[pos] = NAN if slack_s is None else slack_s
        self.ids.append(chart_id)
        self.pos.append(pos)

    def at(self, pos: int) -> tuple[float, str, float | None]:
        slack = self.slack[pos]
        return self.due[pos], DUE_STATES[self.state[pos]], None if slack != slack else slack

    def __getitem__(self, chart_id: int) -> tuple[float, str, float | None]:
        got = self.extra.get(chart_id)
        if got is not None:
            return got
        if self._index is None:
            self._index = dict(zip(self.ids, self.pos))
        return self.at(self._index[chart_id])

    def __iter__(self) -> Iterator[int]:
        return chain(self.ids, self.extra)

    def __len__(self) -> int:
        return len(self.ids) + len(self.extra)


LOOK_UP = object()  # Flagged.add: the chart's external id is the state's, looked up when read


class Flagged(Sequence):
    """One org's charts at risk or late, least slack first (:meth:`sort`), as columns of
    :data:`FLAG_KEYS`: ids, due times and slacks in arrays, the states as codes, the
    reasons and workflows as references to shared strings, the external ids looked up by id
    when read (``ext_of``). About 40 bytes a chart, not a tuple with its own floats and int
    (some 180: 80 MB at a first pass over a million charts, half of them late). Reads as a sequence of dicts (the snapshot's page
    of the org's flagged charts); :meth:`rows` gives tuples."""

    __slots__ = ("org", "id", "state", "due", "slack", "reason", "workflow", "ext", "ext_of")

    def __init__(self, org: int, ext_of: Callable[[int], str | None] | None = None) -> None:
        self.org = org
        self.id = array("q")
        self.state = bytearray()
        self.due, self.slack = array("d"), array("d")
        self.reason: list[str] = []
        self.workflow: list[str | None] = []
        # The external ids: looked up by id when a row is read (``ext_of``: the state's
        # ExternalIds.get), but for those given to add() (a running chart's, not in it)
        self.ext: dict[int, str | None] = {}
        self.ext_of = ext_of

    def add(self, chart_id: int, state: str, due_s: float, slack_s: float | None, reason: str,
            workflow: str | None, external_id: Any = LOOK_UP) -> None:
        """A flagged chart; ``external_id``: its own, else looked up when read (``ext_of``)."""
        self.id.append(chart_id)
        self.state.append(DUE_CODE[state])
        self.due.append(due_s)
        self.slack.append(NAN if slack_s is None else slack_s)
        self.reason.append(reason)
        self.workflow.append(workflow)
        if external_id is not LOOK_UP:
            self.ext[chart_id] = external_id

    def external_id(self, chart_id: int) -> str | None:
        got = self.ext.get(chart_id, LOOK_UP)
        if got is LOOK_UP:
            return None if self.ext_of is None else self.ext_of(chart_id)
        return got

    def key(self, j: int) -> tuple[float, int]:
        """The order of row ``j`` among the flagged: least slack first (a chart without an
        ETA: by the time left until it is due), then by id."""
        slack = self.slack[j]
        return (slack if slack == slack else self.due[j]), self.id[j]

    def sort(self) -> None:
        perm = sorted(range(len(self.id)), key=self.key)
        self.id = array("q", [self.id[j] for j in perm])
        self.state = bytearray(self.state[j] for j in perm)
        self.due = array("d", [self.due[j] for j in perm])
        self.slack = array("d", [self.slack[j] for j in perm])
        self.reason, self.workflow = ([col[j] for j in perm] for col in (self.reason, self.workflow))

    def row(self, j: int) -> tuple:
        slack = self.slack[j]
        cid = self.id[j]
        return (cid, self.org, DUE_STATES[self.state[j]], self.due[j], None if slack != slack else slack,
                self.reason[j], self.workflow[j], self.external_id(cid))

    def rows(self) -> list[tuple]:
        return [self.row(j) for j in range(len(self.id))]

    def __len__(self) -> int:
        return len(self.id)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [dict(zip(FLAG_KEYS, self.row(j))) for j in range(*i.indices(len(self.id)))]
        return dict(zip(FLAG_KEYS, self.row(range(len(self.id))[i])))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (dict(zip(FLAG_KEYS, self.row(j))) for j in range(len(self.id)))

    def __eq__(self, other: object) -> bool:
        """Equal to the same rows, as a :class:`Flagged` or a list of tuples (or of dicts)."""
        if isinstance(other, Flagged):
            return self.org == other.org and self.rows() == other.rows()
        if isinstance(other, list):
            return self.rows() == other or list(self) == other
        return NotImplemented

    def __repr__(self) -> str:
        return f"Flagged({self.org}, {self.rows()!r})"


class Levels(Mapping):
    """The warning levels a pass moved, chart id -> its level now (0 none, 1 at risk, 2
    late), in the order the pass moved them, as two columns: at a first pass over a million
    charts, half of them late, a dict entry and an int per chart were some 50 MB of the
    forked pass, and of what it sends the parent. A pass sets each chart once; a lookup by
    id builds the index on first use."""

    __slots__ = ("ids", "level", "_index")

    def __init__(self) -> None:
        self.ids = array("q")
        self.level = bytearray()
        self._index: dict[int, int] | None = None

    def __setitem__(self, chart_id: int, level: int) -> None:
        self.ids.append(chart_id)
        self.level.append(level)
        self._index = None

    def __getitem__(self, chart_id: int) -> int:
        if self._index is None:
            self._index = dict(zip(self.ids, range(len(self.ids))))
        return self.level[self._index[chart_id]]

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    def __reduce_ex__(self, protocol: int) -> tuple:
        # the columns as they lie in memory, out of band from a forked child (forked.py)
        return forked.columns_reduce(self, protocol, _levels, self.ids, self.level)

    def items(self):
        return zip(self.ids, self.level)

    def __repr__(self) -> str:
        return f"Levels({dict(self.items())!r})"


def _levels(ids, level) -> Levels:
    out = Levels()
    out.ids, out.level = forked.as_array("q", ids), level if isinstance(level, bytearray) else bytearray(level)
    return out


@dataclass
class DueResult:
    """One pass's due states."""

    by_chart: DueByChart = field(default_factory=DueByChart)  # due_s, state, slack_s by chart
    orgs: dict[int, dict[str, int]] = field(default_factory=dict)  # per org: on_time, at_risk, late
    flagged: dict[int, Flagged] = field(default_factory=dict)  # per org: at risk / late, least slack first
    levels: Levels = field(default_factory=Levels)  # warning levels that changed
    rose: array = field(default_factory=lambda: array("q"))  # ... of which these rose (the webhook, the first flag)

    def counts(self) -> dict[str, int]:
        out = {ON_TIME: 0, AT_RISK: 0, LATE: 0}
        for c in self.orgs.values():
            for k in out:
                out[k] += c[k]
        return out

    def top(self, n: int = TOP_CHARTS) -> list[dict[str, Any]]:
        """The ``n`` charts of every org at risk or late with the least slack."""
        best = heapq.nsmallest(n, ((f.key(j), f, j) for f in self.flagged.values() for j in range(len(f))),
                               key=itemgetter(0))
        return [dict(zip(FLAG_KEYS, f.row(j))) for _, f, j in best]


FLAG_KEYS = ("id", "org", "state", "due_s", "slack_s", "reason", "workflow", "external_id")


def due_keys(queue, due: DueInput, now: float):
    """``(place, key, org, workflow, chart id, due_s)`` of each chart of ``queue``'s order
    that has a due time (its own, else its creation plus its org's turnaround), from the
    head (its place: its index in the order): the walk of :func:`due_pass` and of the
    previews' counts (``whatif.at_risk_counts``). It reads the order's keys only
    (``FairQueue.keys``), never their entries."""
    explicit, tget = due.explicit, due.turnaround.get
    eget = explicit.get
    for pos, k in enumerate(queue.keys()):
        org, wf = k.pair
        i = int(k.id)
        at = eget(i) if explicit else None
        if at is None:
            t = tget(org)
            if t is None:
                continue
            at = k.created_at + t
        yield pos, k, org, wf, i, at - now


def due_pass(state, etas: dict, now: float, p90: Callable | None) -> DueResult:
    """The due state of every queued and running chart of ``state`` (a ``PassInput``)
    that has a due time, from the pass's ``etas`` and bounds ``p90``."""
    due: DueInput | None = getattr(state, "due", None)
    by_chart = DueByChart(state.queue.order_len)  # aligned with the order, whether any chart is due or not
    out = DueResult(by_chart)
    if due is None or not (due.explicit or due.turnaround):
        for cid in (due.alerts if due else ()):  # nothing is due any more: warnings fall
            out.levels[cid] = 0
        return out
    explicit, turnaround, alerts = due.explicit, due.turnaround, due.alerts
    ext = state.external_ids
    unseen = set(alerts)  # the warnings in force of charts that turn out to have no due time

    def one(i: int, org: str, wf: str, created: float, eta, no_eta: str | None, external_id=LOOK_UP,
            pos: int | None = None) -> None:
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
        if pos is None:
            by_chart.extra[i] = (due_s, s.state, s.slack_s)
        else:
            by_chart.set(pos, i, due_s, s.state, s.slack_s)
        unseen.discard(i)
        o = int(org)
        counts = out.orgs.get(o)
        if counts is None:
            counts = out.orgs[o] = {ON_TIME: 0, AT_RISK: 0, LATE: 0}
        counts[s.state] += 1
        if s.state != ON_TIME:
            flagged = out.flagged.get(o)
            if flagged is None:
                flagged = out.flagged[o] = Flagged(o, ext.get)
            flagged.add(i, s.state, due_s, s.slack_s, s.reason, wf, external_id)
        before = alerts.get(i, 0)
        level = next_level(before, due_s, finish, bound, no_eta)
        if level != before:
            out.levels[i] = level
            if level > before:
                out.rose.append(i)

    # The order in one lean loop: a chart on time with no warning in force (most of them)
    # is counted inline; any other goes through ``one``, the rule's own functions. Equal
    # results either way (tests/engine/test_due_lean_loop.py); this halved a pass at 100k.
    eta_at, aget = eta_reader(etas), alerts.get
    org_counts, org_int = out.orgs, {}
    due_col, state_col, slack_col, ids_add, pos_add = (by_chart.due, by_chart.state, by_chart.slack,
                                                       by_chart.ids.append, by_chart.pos.append)
    on_time = DUE_CODE[ON_TIME]
    for pos, k, org, wf, i, due_s in due_keys(state.queue, due, now):
        eta = eta_at(pos, k.id)
        if eta is not None and not aget(i):
            finish = eta[1]
            if finish <= due_s and (p90 is None or p90(org, wf, eta) <= due_s):
                due_col[pos] = due_s
                state_col[pos] = on_time
                slack_col[pos] = due_s - finish
                ids_add(i)
                pos_add(pos)
                o = org_int.get(org)
                if o is None:
                    o = org_int[org] = int(org)
                counts = org_counts.get(o)
                if counts is None:
                    counts = org_counts[o] = {ON_TIME: 0, AT_RISK: 0, LATE: 0}
                counts[ON_TIME] += 1
                continue
        one(i, org, wf, k.created_at, eta, None, LOOK_UP, pos)
    for kind in (HELD, PAUSED, BLOCKED):
        for q in state.aside[kind]:
            one(int(q.id), q.org, q.workflow, q.created_at, None, kind)
    for r in state.running:
        one(r.id, str(r.org), r.workflow, r.created_at, etas.get(str(r.id)), None, r.external_id)
    for cid in unseen:
        out.levels[cid] = 0  # no due time any more (or not known to this pass)
    for flagged in out.flagged.values():
        flagged.sort()
    return out


def level_name(level: int) -> str:
    return "" if not level else LEVEL_STATE[level]
