"""The ETA pass's due states (fairsched.engine.due_states.due_pass): its lean loop over the order
gives what the rule's own functions give chart by chart (scheduling.due: ``due_state``
and the warning's ``next_level``), whatever the warnings in force and the bounds."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from scheduling import BLOCKED, HELD, PAUSED
from scheduling.due import ON_TIME, due_state, next_level
from fairsched.engine.due_states import FLAG_KEYS, due_pass
from tests.engine.test_whatif import T, charts_st, state_of


def _slack_key(r: list) -> tuple:
    """The flagged charts' order, as the pass kept it before its columns (``Flagged.key``):
    least slack first; a chart without an ETA by the time left until it is due; then id."""
    return (r[4] if r[4] is not None else r[3], r[0])


def reference(state, etas, now, p90):
    """Each chart through ``due_state`` and ``next_level``, one by one, as the pass did before
    its lean loop: (by_chart, counts per org, flagged per org, levels, rose)."""
    due = state.due
    by_chart, orgs, flagged, levels, rose = {}, {}, {}, {}, []
    charts = [(int(q.id), q.org, q.workflow, q.created_at, etas.get(q.id), None) for q in state.queue.iter_charts()]
    charts += [(int(q.id), q.org, q.workflow, q.created_at, None, kind)
               for kind in (HELD, PAUSED, BLOCKED) for q in state.aside[kind]]
    charts += [(r.id, str(r.org), r.workflow, r.created_at, etas.get(str(r.id)), None) for r in state.running]
    for i, org, wf, created, eta, no_eta in charts:
        at = due.explicit.get(i)
        if at is None:
            if org not in due.turnaround:
                continue
            at = created + due.turnaround[org]
        due_s = at - now
        finish = eta[1] if eta is not None else None
        bound = p90(org, wf, eta) if eta is not None and p90 is not None else None
        s = due_state(due_s, finish, bound, no_eta)
        by_chart[i] = (due_s, s.state, s.slack_s)
        counts = orgs.setdefault(int(org), {"on_time": 0, "at_risk": 0, "late": 0})
        counts[s.state] += 1
        if s.state != ON_TIME:
            flagged.setdefault(int(org), []).append((i, int(org), s.state, due_s, s.slack_s, s.reason, wf,
                                                     state.external_ids.get(i)))
        before = due.alerts.get(i, 0)
        level = next_level(before, due_s, finish, bound, no_eta)
        if level != before:
            levels[i] = level
            if level > before:
                rose.append(i)
    for cid in due.alerts:
        if cid not in by_chart:
            levels[cid] = 0
    for rows in flagged.values():
        rows.sort(key=_slack_key)
    return by_chart, orgs, flagged, levels, rose


@settings(max_examples=80, deadline=None)
@given(charts_st, st.sampled_from(["lanes", "forecast"]), st.integers(0, 3),
       st.dictionaries(st.integers(1, 30), st.integers(1, 2), max_size=10), st.booleans(),
       st.sampled_from([-7200.0, 0.0, 3600.0, 20000.0]))
def test_the_lean_loop_gives_what_the_rule_gives_chart_by_chart(spec, model, dispatch, alerts, bounds, now_shift):
    state = state_of(spec, model=model, dispatch=dispatch)
    state.due.alerts.update(alerts)  # warnings in force, for charts known or not
    cap = state.capture()
    now = T + now_shift
    report = cap.eta_report(now)
    p90 = cap.forecast.p90_finisher() if bounds else None

    out = due_pass(cap, report.etas, now, p90)

    by_chart, orgs, flagged, levels, rose = reference(cap, report.etas, now, p90)
    assert out.by_chart == by_chart
    assert out.orgs == orgs
    assert out.flagged == flagged
    for org, rows in flagged.items():  # as the snapshot's page reads them
        assert list(out.flagged[org]) == [dict(zip(FLAG_KEYS, r)) for r in rows] == out.flagged[org][:]
    every = sorted((r for rows in flagged.values() for r in rows), key=_slack_key)
    assert out.top(3) == [dict(zip(FLAG_KEYS, r)) for r in every[:3]]  # the Due panel's, across orgs
    assert out.levels == levels
    assert sorted(out.rose) == sorted(rose)
